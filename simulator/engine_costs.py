"""What an engine does around the GPU's passes, as frozen dataclasses: its work per step, per pass and per draft
kind (`EngineOverheads`, `Overheads`), which passes replay a captured CUDA graph (`CudaGraphs`), and what an engine
started with speculation pays when its schedule switches it off or changes k (`SpeculationTax`). The device's and
the model's shapes are `simulator.specs`; the engines' presets, with their sources, `scenarios/engines.toml`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PerStep:
    """A cost per decoding step: a fixed part plus a part per sequence in the batch."""

    fixed_s: float = 0.0
    per_sequence_s: float = 0.0

    def at(self, batch: int) -> float:
        return self.fixed_s + self.per_sequence_s * batch


@dataclass(frozen=True)
class DraftKindCost:
    """What an engine pays around one kind of draft's device work, beyond the roofline of its passes: per draft
    pass (its launches, the proposer's own host work, sampling over the draft vocabulary) and once per speculative
    step (preparing the proposer's inputs, the head's catch-up over the accepted tokens as the engine runs it,
    mapping draft tokens to the target's vocabulary). Engines differ here far more than their passes do (vLLM
    #20780: ~1 ms a drafted token for an EAGLE-3 head whose bytes take 0.1 ms), so presets give it per kind."""

    kind: str
    per_pass: PerStep = field(default_factory=PerStep)
    per_step: PerStep = field(default_factory=PerStep)


@dataclass(frozen=True)
class EngineOverheads:
    """What a decoding engine does around its forward passes in every step, beyond the passes themselves:
    building inputs, stacking draft distributions, the accept/reject rule, the tree walk and cache compaction."""

    plain: PerStep = field(default_factory=PerStep)  # around the one pass of a plain decoding step
    draft: PerStep = field(default_factory=PerStep)  # around each draft pass
    verify: PerStep = field(default_factory=PerStep)  # around the verification pass
    chain_accept: PerStep = field(default_factory=PerStep)  # the accept/reject rule over a chain
    tree_accept: PerStep = field(default_factory=PerStep)  # recursive rejection down a tree, cache compaction
    # The draw a calibrated pass makes after its forward (probabilities at its last position, one sample per
    # sequence), which a verification pass does not make: `verify` is the verify phase's own work after its forward,
    # and a verification step is priced as its pass + verify - pass_draw (every term >= 0; older profiles,
    # without pass_draw, kept the difference in `verify`, signed).
    pass_draw: PerStep = field(default_factory=PerStep)
    # Around a served prefill of the joining requests (a cost per prefill and per request joining): building the
    # padded prompts, the first tokens' draw and read, the running batch's bookkeeping. Measured where the device's
    # clock is precise (a GPU: 0.5 ms beside a 1.45 ms pass on the H200); 0 elsewhere (a CPU's prefill passes of
    # tens of ms drown it).
    prefill: PerStep = field(default_factory=PerStep)
    # Tokens in a step's first draft pass: 1 where the draft's cache is kept current (the presets' engines); specsim's
    # own engine re-caches [previous, current] at the start of every draft phase (engine.speculative), so 2.
    draft_catchup_tokens: int = 1
    # How a batch where only some sequences have a proposal is verified (model-free drafts): False pads every
    # sequence to the step's k + 1 rows (specsim's own engine); True packs each sequence's own rows (vLLM, SGLang).
    ragged_verify: bool = False
    # Per draft kind, what the engine pays around the draft's work (`DraftKindCost`); a kind not listed pays
    # `draft` around each pass and nothing per step
    kinds: tuple[DraftKindCost, ...] = ()
    # Each sequence drafts on its own, one after another (llama-server: a draft context a slot, PR #17017): a step's
    # draft passes are the batch's sequences' one-sequence passes, not one pass over the batch
    drafts_per_sequence: bool = False

    def drafting(self, kind: str) -> DraftKindCost:
        """The engine's cost around a draft of `kind`: its own entry, else `draft` around each pass."""
        for c in self.kinds:
            if c.kind == kind:
                return c
        return DraftKindCost(kind, self.draft)

    def verify_extra_s(self, batch: np.ndarray | int) -> np.ndarray | float:
        """What a verification step costs beyond its calibrated pass: its own work minus the pass's draw."""
        return (self.verify.fixed_s - self.pass_draw.fixed_s
                + (self.verify.per_sequence_s - self.pass_draw.per_sequence_s) * batch)

    @classmethod
    def from_dict(cls, d: dict) -> EngineOverheads:
        d = dict(d)
        catchup = int(d.pop("draft_catchup_tokens", 1))
        ragged = bool(d.pop("ragged_verify", False))
        per_sequence = bool(d.pop("drafts_per_sequence", False))
        kinds = tuple(DraftKindCost(str(c["kind"]), PerStep(**c.get("per_pass", {})), PerStep(**c.get("per_step", {})))
                      for c in d.pop("kinds", ()))
        return cls(**{k: PerStep(**v) for k, v in d.items()}, draft_catchup_tokens=catchup, ragged_verify=ragged,
                   kinds=kinds, drafts_per_sequence=per_sequence)


@dataclass(frozen=True)
class CudaGraphs:
    """Which passes an engine replays as a captured CUDA graph, and what a pass outside them pays instead.

    An engine captures graphs for a list of sizes up to a ceiling (vLLM counts the batch's tokens, B x (k + 1) under
    speculation; SGLang and TensorRT-LLM count requests) and pads a batch up to the next captured size; a pass above
    the ceiling launches its kernels one by one from the host, ``eager_layer_s`` a decoder layer more (what a graph's
    replay saves). The passes' device time is the same either way (its roofline)."""

    max_tokens: int = 0  # a pass of more batched tokens than this runs eager (0: no ceiling in tokens)
    max_batch: int = 0  # a pass of more requests than this runs eager (0: no ceiling in requests)
    eager_layer_s: float = 0.0  # host launch time of one decoder layer's kernels outside a graph
    source: str = ""

    def eager(self, batch: np.ndarray | int, new_tokens: np.ndarray | int) -> np.ndarray:
        """Whether a pass of `batch` sequences x `new_tokens` tokens runs outside every captured graph."""
        b = np.asarray(batch)
        over = np.zeros(np.broadcast(b, np.asarray(new_tokens)).shape, dtype=bool)
        if self.max_tokens:
            over |= b * np.asarray(new_tokens) > self.max_tokens
        if self.max_batch:
            over |= b > self.max_batch
        return over

    def eager_s(self, batch: np.ndarray | int, new_tokens: np.ndarray | int, n_layers: int) -> np.ndarray:
        """The host launch time a pass pays above the capture ceiling (0 where a graph replays it)."""
        return np.where(self.eager(batch, new_tokens), self.eager_layer_s * n_layers, 0.0)


@dataclass(frozen=True)
class Overheads:
    """Fixed costs that a roofline does not see (eager launches, Python, sampling).

    They are named terms added to the roofline time, never folded into an efficiency.
    """

    pass_s: float = 0.0  # per forward pass: launches, framework, logits -> token
    layer_s: float = 0.0  # per decoder layer per pass: kernel launches of ~10 ops
    row_s: float = 0.0  # per token row processed (B x n): embedding gather, sampling over the vocabulary
    sequence_layer_s: float = 0.0  # per sequence per layer: its own attention problem and KV-cache write
    engine: EngineOverheads = field(default_factory=EngineOverheads)
    graphs: CudaGraphs | None = None  # which passes replay a captured CUDA graph (None: every pass is priced alike)
    # A verification pass's tokens beyond one a sequence add their own time, memory and compute not overlapped, to
    # the one-token pass its kernels price (a graphed engine's step: SpecDecode-Bench's vLLM fit, 21 us a batched
    # token from batch 1): a verified token is never free, and plain decoding keeps the measured kernels' price
    verify_tokens_add: bool = False

    @classmethod
    def from_dict(cls, d: dict) -> Overheads:
        d = dict(d)
        engine = EngineOverheads.from_dict(d.pop("engine", {}))
        graphs = d.pop("graphs", None)
        return cls(**d, engine=engine, graphs=CudaGraphs(**graphs) if graphs else None)


@dataclass(frozen=True)
class SpeculationTax:
    """What an engine started with speculation pays beyond its passes: a plain step (k = 0, speculation switched
    off by its schedule) costs (1 + off_fraction(B)) of an engine started without speculation - the draft's
    bookkeeping, larger captured graphs, the scheduler's spec path - and a step whose draft length differs from the
    previous step's pays ``switch_fraction`` of a plain step more (another set of captured graphs, re-planned
    buffers). ``off_fraction`` is interpolated linearly in the batch between measured points, flat beyond them."""

    off_batches: tuple[int, ...] = ()
    off_fractions: tuple[float, ...] = ()
    switch_fraction: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.off_batches) != len(self.off_fractions) or list(self.off_batches) != sorted(self.off_batches):
            raise ValueError("off-tax batches must be increasing and as many as the fractions")
        if any(not (0 <= f < 10) for f in (*self.off_fractions, self.switch_fraction)):
            raise ValueError("off-tax and switch fractions must be in [0, 10)")

    def off_fraction(self, batch: float) -> float:
        if not self.off_batches:
            return 0.0
        return float(np.interp(batch, self.off_batches, self.off_fractions))

    @property
    def any(self) -> bool:
        return bool(self.switch_fraction or any(self.off_fractions))
