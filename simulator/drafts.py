"""What proposes the drafted tokens, and what proposing costs: every kind of draft the essay names.

"The draft model is incidental. Any cheap source of plausible continuations works - an n-gram lookup over the
prompt, extra prediction heads, a retrieved passage." The verification pass and the accept/reject rule do not change
with the kind; what a draft *pass* reads and computes does, and whether there is a device pass at all:

- ``model``: k serial passes of a small decoder with its own KV cache (Leviathan et al. 2023).
- ``eagle``: EAGLE-1/2's head, k serial passes of one decoder layer at the target's width after a 2h -> h fc of the
  token's embedding and the hidden state, through the target's own LM head (read every pass, held once) (Li et al.,
  EAGLE, arXiv 2401.15077).
- ``eagle3``: k serial passes of one (or a few) decoder layer(s) at the target's width, their q/k/v reading 2h (the
  token's embedding beside the hidden state), an LM head over a reduced draft vocabulary, its own small KV cache;
  once per step an fc fusing three of the target's hidden states (3h -> h) over the verified rows, which its first
  pass reads (Li et al., EAGLE-3, arXiv 2503.01840; vLLM's EagleProposer).
- ``mtp``: k serial passes of one transformer block per module (an MoE block on an MoE target) after a 2h -> h
  projection, sharing the target's embedding and LM head, read every pass and held once (DeepSeek-V3,
  arXiv 2412.19437).
- ``medusa``: one pass of H heads (each a residual block and an LM head) on the last hidden state: all positions
  at once (Cai et al., Medusa, arXiv 2401.10774).
- ``ngram``, ``suffix``, ``retrieval``: no device pass; a lookup on the host per step that grows with batch and
  context (`HostCost`), overlapped with the device or not, as engines differ (`overlap`) (vLLM #13365, #56732;
  SuffixDecoding arXiv 2411.04975; REST arXiv 2311.08252).

A model-free draft finds nothing to propose on many steps: a sequence with no proposal takes a plain step, and how
often that happens is part of its acceptance (`simulator.acceptance.Proposing`). Every device pass is priced by the
same roofline as every other pass (`CostModel`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import SpecsimError
from .specs import ModelSpec

DRAFT_KINDS = ("model", "eagle", "eagle3", "mtp", "medusa", "ngram", "suffix", "retrieval")
HEADS = ("eagle", "eagle3", "mtp", "medusa")  # prediction heads on the target's hidden states
MODEL_FREE = ("ngram", "suffix", "retrieval")


@dataclass(frozen=True)
class HostCost:
    """A model-free draft's lookup on the host in one step: a fixed part, a part per sequence, and a part per
    sequence and context token (matching a suffix against the sequence's history)."""

    fixed_s: float = 0.0
    per_sequence_s: float = 0.0
    per_context_token_s: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if min(self.fixed_s, self.per_sequence_s, self.per_context_token_s) < 0:
            raise SpecsimError("a host cost's terms must be >= 0")

    def at(self, batch: np.ndarray | float, context: float) -> np.ndarray | float:
        return self.fixed_s + np.asarray(batch, dtype=float) * (self.per_sequence_s
                                                                + self.per_context_token_s * context)


@dataclass(frozen=True)
class Draft:
    """A draft of any kind (module docstring). ``module`` is the decoder one draft pass runs (the draft model, the
    head's layers with its LM head, an MTP block with the shared head; None for Medusa's heads and model-free
    drafts)."""

    kind: str
    name: str
    module: ModelSpec | None = None
    fusion_params: int = 0  # EAGLE-3's fc (3h x h), run once per step over the rows the target verified
    shared_params: int = 0  # parameters the module reads but the target holds (MTP's LM head): resident once
    head_params: int = 0  # Medusa: all heads' parameters (H residual blocks and LM heads)
    positions: int = 0  # Medusa's heads, MTP's modules: the positions one step's heads can fill (0: no limit)
    host: HostCost = field(default_factory=HostCost)  # model-free: the lookup
    overlap: bool = False  # model-free: the lookup runs beside the device's pass (the step takes the longer)
    # A draft model with another vocabulary than the target's: its tokens mapped to the target's on the host (text
    # out, text in), per sequence and drafted token
    vocab_mapping_s: float = 0.0
    dtype: str = "bf16"
    source: str = ""
    repo: str = ""  # where the published draft lives (a Hugging Face repository), for an engine's config

    def __post_init__(self) -> None:
        if self.kind not in DRAFT_KINDS:
            raise SpecsimError(f"unknown draft kind {self.kind!r}; use one of {', '.join(DRAFT_KINDS)}")
        if self.kind in MODEL_FREE and self.module is not None:
            raise SpecsimError(f"a {self.kind} draft runs no model")
        if self.kind in ("model", "eagle", "eagle3", "mtp") and self.module is None:
            raise SpecsimError(f"a {self.kind} draft needs the shape of what it runs")

    @classmethod
    def of_model(cls, spec: ModelSpec) -> Draft:
        repo = spec.source.split(" ")[0] if spec.source else ""  # a preset's source opens with its repository
        return cls("model", spec.name, spec, dtype=spec.dtype, source=spec.source, repo=repo if "/" in repo else "")

    @property
    def on_device(self) -> bool:
        """Whether drafting runs passes on the device (every kind but the model-free ones)."""
        return self.kind not in MODEL_FREE

    @property
    def parallel(self) -> bool:
        """All of a step's positions drafted by one pass (Medusa)."""
        return self.kind == "medusa"

    @property
    def reads_verified_rows(self) -> bool:
        """A head's first pass of a step runs over every row the target verified (their hidden states are its
        input), not over the one new token a draft model catches up on."""
        return self.kind in ("eagle", "eagle3", "mtp")

    @property
    def n_params(self) -> int:
        """The parameters the draft adds to the target's: a head's token embedding and MTP's LM head are the
        target's own (held once)."""
        own = self.module.n_params if self.module is not None else 0
        if self.kind in ("eagle", "eagle3", "mtp") and self.module is not None and not self.module.tied_embeddings:
            own -= self.module.vocab_size * self.module.d_model  # the module's count holds an embedding: the target's
        return own - self.shared_params + self.fusion_params + self.head_params

    @property
    def resident_weight_bytes(self) -> float:
        """Device memory the draft's weights add to the target's."""
        if self.module is None:
            return self.n_params * _bytes(self.dtype)
        routed = self.module.routed_params
        return ((self.n_params - routed) * self.module.bytes_per_param
                + routed * self.module.expert_bytes_per_param)

    @property
    def kv_bytes_per_token(self) -> float:
        return self.module.kv_bytes_per_token if self.module is not None else 0.0

    def kv_bytes_at(self, tokens: np.ndarray | float) -> np.ndarray | float:
        """The draft's own cache for a sequence of `tokens` tokens (none for Medusa and model-free drafts)."""
        if self.module is None:
            return 0.0 * np.asarray(tokens, dtype=float)
        return self.module.kv_bytes_at(tokens)

    def check_target(self, target: ModelSpec) -> None:
        """Refuse a head built for another target: its width must be the target's (one line, what to do)."""
        if self.kind in HEADS and self.module is not None and self.module.d_model != target.d_model:
            raise SpecsimError(f"draft {self.name} is a {self.kind} head of width {self.module.d_model}, but target "
                               f"{target.name} is {target.d_model} wide: a head runs on its own target's hidden "
                               "states; give the head made for this target")

    @property
    def max_depth(self) -> int | None:
        """The most positions one step can draft (Medusa: one per head); None: no limit."""
        return self.positions if self.kind == "medusa" else None

    def depth_limit(self, depth: int) -> None:
        """Refuse a draft deeper than the heads can fill (Medusa: one position per head)."""
        if self.max_depth is not None and depth > self.max_depth:
            raise SpecsimError(f"{self.name} has {self.positions} heads: it drafts at most {self.positions} "
                               f"positions per step, not {depth}; use --k {self.positions} or less")

    def with_dtype(self, dtype: str) -> Draft:
        return replace(self, dtype=dtype, module=self.module.with_dtype(dtype) if self.module is not None else None)


def _bytes(dtype: str) -> float:
    from .specs import dtype_bytes

    return dtype_bytes(dtype)


def as_draft(draft: Draft | ModelSpec | None) -> Draft | None:
    """A draft model's shape as a `Draft` (the kinds' common form); a Draft or None as it is."""
    if draft is None or isinstance(draft, Draft):
        return draft
    return Draft.of_model(draft)


# -- the kinds' shapes -----------------------------------------------------------------------------------------------

EAGLE3_DRAFT_VOCAB = 32000  # the reduced draft vocabulary of the published Llama-3.1-8B and Qwen3 heads


def eagle3_head(target: ModelSpec, layers: int = 1, draft_vocab: int = EAGLE3_DRAFT_VOCAB, d_ff: int = 0,
                heads: int = 0, kv_heads: int = 0, head_dim: int = 0, name: str = "", source: str = "") -> Draft:
    """An EAGLE-3 head on `target` (Li et al. 2025; `LlamaForCausalLMEagle3`): `layers` decoder layers at the
    target's width and heads, their q/k/v reading the token's embedding beside the hidden state (2h wide: one
    extra h x (q + k + v) per layer), an LM head over `draft_vocab` tokens, and the fc fusing three of the target's
    hidden states (3h -> h). Heads, widths and the MLP are the target's unless given (the published heads mostly
    copy them). Its embedding is the target's. An MoE target's head is dense (the published heads are Llama
    layers)."""
    if layers < 1 or draft_vocab < 1:
        raise SpecsimError("an EAGLE-3 head needs layers >= 1 and a draft vocabulary >= 1")
    h = target.d_model
    n_heads, n_kv = heads or target.n_heads, kv_heads or target.n_kv_heads
    hd = head_dim or (target.head_dim if target.attention == "gqa" else h // n_heads)
    qkv = h * (n_heads + 2 * n_kv) * hd
    width = d_ff or (target.d_ff if not target.is_moe else target.d_ff_shared or target.d_ff)
    try:
        module = ModelSpec(name=name or f"{target.name}-eagle3", n_layers=layers, d_model=h, n_heads=n_heads,
                           n_kv_heads=n_kv, d_ff=width, vocab_size=draft_vocab, dtype=target.dtype, head_dim=hd,
                           extra_linear_params=layers * qkv, tied_embeddings=False,
                           source=source or "EAGLE-3 head shaped after its target")
    except ValueError as e:
        raise SpecsimError(str(e)) from None
    return Draft("eagle3", module.name, module, fusion_params=3 * h * h, dtype=target.dtype, source=module.source)


def mtp_modules(target: ModelSpec, modules: int = 1, name: str = "", source: str = "") -> Draft:
    """DeepSeek-V3's multi-token prediction (arXiv 2412.19437, sec. 2.2): per module, RMSNorms of the hidden state
    and of the next token's embedding, a projection of their concatenation (2h -> h), one transformer block like the
    target's (an MoE block on an MoE target), and the target's own embedding and LM head, shared (read by every
    pass, held once). `modules` is the positions the modules fill in one step (vLLM runs the one DeepSeek-V3 module
    again for deeper drafts)."""
    if modules < 1:
        raise SpecsimError(f"mtp needs at least one module, got {modules}")
    block = replace(target, name=name or f"{target.name}-mtp", n_layers=1, dense_layers=0,
                    sliding_window=0, sliding_layers=0, extra_linear_params=2 * target.d_model * target.d_model,
                    tied_embeddings=True, source=source or f"MTP module of {target.name}")
    return Draft("mtp", block.name, block, shared_params=target.vocab_size * target.d_model, positions=modules,
                 dtype=target.dtype, source=block.source)


def eagle_head(target: ModelSpec, layers: int = 1, name: str = "", source: str = "") -> Draft:
    """An EAGLE-1/2 head (Li et al., arXiv 2401.15077; vLLM's EagleLlamaForCausalLM): an fc of the token's embedding
    beside the hidden state (2h -> h), `layers` decoder layers like a dense target's, and the target's own embedding
    and LM head, shared (read by every pass, held once). An MoE target's head is dense (its shared-expert or dense
    width)."""
    if layers < 1:
        raise SpecsimError(f"an EAGLE head needs at least one layer, got {layers}")
    width = target.d_ff if not target.is_moe else target.d_ff_shared or target.d_ff
    block = replace(target, name=name or f"{target.name}-eagle", n_layers=layers, dense_layers=0, n_experts=0,
                    experts_per_token=0, d_ff_expert=0, d_ff_shared=0, d_ff=width, sliding_window=0,
                    sliding_layers=0, mtp_modules=0, extra_linear_params=2 * target.d_model * target.d_model,
                    tied_embeddings=True, source=source or f"EAGLE head shaped after {target.name}")
    return Draft("eagle", block.name, block, shared_params=target.vocab_size * target.d_model, dtype=target.dtype,
                 source=block.source)


def medusa_heads(target: ModelSpec, heads: int, layers_per_head: int = 1, name: str = "",
                 source: str = "") -> Draft:
    """Medusa heads (Cai et al. 2024, arXiv 2401.10774): each head a residual block (an h x h linear and SiLU) per
    layer and its own LM head over the target's vocabulary, all heads run on the last accepted token's hidden
    state in one pass; head i proposes position i, so a step drafts at most `heads` positions (a chain, or the
    tree Medusa verifies)."""
    if heads < 1:
        raise SpecsimError(f"medusa needs at least one head, got {heads} (e.g. medusa:4)")
    h = target.d_model
    params = heads * (layers_per_head * h * h + target.vocab_size * h)
    return Draft("medusa", name or f"{target.name}-medusa{heads}", None, head_params=params, positions=heads,
                 dtype=target.dtype, source=source or f"{heads} Medusa heads shaped after {target.name}")


# The host cost of vLLM's n-gram proposer, as measured by its authors: 1.9 s of host time over 5,000 ShareGPT
# requests after the rewrite of vllm #13365 (54.3 s before), ~1.9 us per sequence and step at ShareGPT's ~400-token
# contexts; 70 ms per step at 512 requests x 129k context (vllm #56732): 1.06 ns per sequence and context token.
VLLM_NGRAM_HOST = HostCost(0.0, 1.5e-6, 1.06e-9, "vLLM's n-gram proposer: vllm #13365 (1.9 s over 5k ShareGPT "
                                                "requests), #56732 (70 ms per step at 512 x 129k)")


def model_free(kind: str, host: HostCost = VLLM_NGRAM_HOST, overlap: bool = False, name: str = "") -> Draft:
    """A draft that runs no model: `kind` ngram (prompt lookup), suffix (suffix-tree lookup, SuffixDecoding) or
    retrieval (REST's datastore lookup), priced by its host lookup."""
    if kind not in MODEL_FREE:
        raise SpecsimError(f"{kind!r} is not a model-free draft; use one of {', '.join(MODEL_FREE)}")
    return Draft(kind, name or kind, None, host=host, overlap=overlap, source=host.source)
