"""Hardware and model shapes as frozen dataclasses.

Units live in the names: bytes, seconds, FLOP/s. Conversions from GB/s or TFLOP/s happen at the edges (the TOML
loader in `scenarios/`, the CLI).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import SpecsimError
from .engine_costs import (  # noqa: F401 (re-exported: the engine's costs around the passes)
    CudaGraphs,
    DraftKindCost,
    EngineOverheads,
    Overheads,
    PerStep,
    SpeculationTax,
)
from .expert_comm import ExpertLinks
from .formats import COMPUTE_RATES, DTYPE_BYTES, KV_OF_WEIGHTS, dtype_bytes  # noqa: F401 (DTYPE_BYTES re-exported)
from .kernel_kinds import KernelTerms, MoeKernel  # noqa: F401 (re-exported: the presets' measured kernel kinds)

GIGA = 1e9
TERA = 1e12


@dataclass(frozen=True)
class Interconnect:
    """The links between the GPUs of one node: a collective costs a latency plus the ring's bandwidth term
    (Patarasuk and Yuan 2009: an all-reduce moves 2 (n - 1) / n of the message through each GPU's link; NCCL's
    "bus bandwidth" is this bandwidth). The latency is one per collective, not per ring step: the messages of
    decoding (a few KB to a few MB) go through one-shot or low-latency all-reduces (vLLM's custom all-reduce,
    PyTorch's intra-node all-reduce, NCCL's LL protocol) whose time barely grows with n, which is what gpt-fast's
    tensor-parallel table shows (benchmarks/tp_check.py)."""

    name: str
    bw_bytes_per_s: float  # per GPU, per direction
    latency_s: float  # per collective
    source: str = ""
    all_reduce_bw_efficiency: float = 1.0  # the fraction of bw_bytes_per_s an all-reduce's ring term reaches

    def all_reduce_s(self, n: int, nbytes: np.ndarray | float) -> np.ndarray | float:
        """An all-reduce of `nbytes` over `n` GPUs."""
        if n <= 1:
            return 0.0 * nbytes
        return self.latency_s + 2 * (n - 1) / n * nbytes / (self.bw_bytes_per_s * self.all_reduce_bw_efficiency)

    def all_gather_s(self, n: int, nbytes: np.ndarray | float) -> np.ndarray | float:
        """An all-gather whose result is `nbytes`."""
        if n <= 1:
            return 0.0 * nbytes
        return self.latency_s + (n - 1) / n * nbytes / self.bw_bytes_per_s


@dataclass(frozen=True)
class HardwareSpec:
    """A device's datasheet numbers plus the fractions of them that kernels are assumed to reach.

    The fractions and overheads are assumptions until calibration replaces them with measurements.
    """

    name: str
    mem_bw_bytes_per_s: float  # datasheet peak memory bandwidth
    peak_flops_per_s: tuple[tuple[str, float], ...]  # (dtype, dense peak FLOP/s) pairs
    mem_capacity_bytes: float
    bw_efficiency: float = 0.8  # achieved / peak bandwidth for streaming weight reads
    flops_efficiency: float = 0.7  # achieved / peak FLOP/s for large matmuls
    usable_memory_fraction: float = 0.9  # the rest goes to the runtime, activations, fragmentation
    overheads: Overheads = field(default_factory=Overheads)
    source: str = ""
    attention_bw_efficiency: float = 0.8  # achieved / peak bandwidth reading the KV cache (fused attention kernels)
    ridge_p: float = float("inf")  # how weight streaming and matmul compute combine (simulator.cost.ridge_combine)
    rate_curve: tuple[tuple[int, float, float], ...] = ()  # (rows, bandwidth fraction, FLOP/s fraction), measured
    rates_source: str = ""  # where the efficiencies, the curve and p come from
    speculation_tax: SpeculationTax = field(default_factory=SpeculationTax)  # the engine's, when it speculates
    interconnect: Interconnect | None = None  # between the GPUs of a node (tensor parallelism); None: one GPU only
    kernels: KernelTerms = field(default_factory=KernelTerms)  # measured kernel kinds beyond the roofline
    expert_links: ExpertLinks | None = None  # what an expert-parallel all-to-all crosses (simulator.expert_comm)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s of `dtype`'s matmuls: the first of its `COMPUTE_RATES` the device lists (fp16 and bf16
        stand in for each other; a 4-bit format runs on fp4 tensor cores, else dequantised to bf16)."""
        table = dict(self.peak_flops_per_s)
        for candidate in COMPUTE_RATES.get(dtype, (dtype,)):
            if candidate in table:
                return table[candidate]
        raise SpecsimError(f"hardware {self.name!r} has no {dtype} compute (its datasheet lists {', '.join(table)}): "
                           f"give --dtype one of those, or hardware that runs {dtype}")

    def with_overrides(self, **changes: object) -> HardwareSpec:
        return replace(self, **changes)


# How much the tokens of one sequence share experts: a sequence's n tokens touch the experts that
# 1 + (n - 1)(1 - s) tokens routed independently would (`ModelSpec.experts_touched`). Measured, for verification
# rows: s = 0.5 reproduces Cohere's "verifying 4 tokens loads ~2.5x the expert bytes of one" (April 2026);
# Luce-Org/lucebox PR #501 counted 39.4 distinct experts for 8 rows of 256 top-8 (s = 0.39); aws-neuron/nkipy PR
# #63 ~13 for gpt-oss-20b (32 experts, top-4) at K = 7 (s = 0.59). tests/test_moe.py reproduces all three.
DEFAULT_EXPERT_SHARING = 0.5
ATTENTION_KINDS = ("gqa", "mla")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder's shape: enough to count its weights, KV cache and FLOPs. Llama-family (grouped-query attention,
    SwiGLU) by default; mixture-of-experts layers (routed experts with top-k routing, shared experts, leading dense
    layers, experts in their own dtype), multi-head latent attention (DeepSeek's MLA: one compressed latent per token
    and layer) and sliding-window layers (gpt-oss) where the fields say so."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int  # SwiGLU hidden size (gate and up each d_model x d_ff); an MoE model's dense layers' width
    vocab_size: int
    tied_embeddings: bool = False
    dtype: str = "bf16"
    head_dim: int = 0  # 0 means d_model // n_heads
    source: str = ""
    tp: int = 1  # tensor-parallel degree: >1 means this spec is one GPU's shard of the model (see `shard`)
    # -- mixture of experts (n_experts = 0: every layer dense) --
    n_experts: int = 0  # routed experts per MoE layer
    experts_per_token: int = 0  # top-k routing
    d_ff_expert: int = 0  # one routed expert's SwiGLU width
    d_ff_shared: int = 0  # the shared experts' SwiGLU width, all of them together (every token runs them)
    dense_layers: int = 0  # leading layers with a dense MLP of width d_ff (DeepSeek-V3: first_k_dense_replace)
    expert_dtype: str = ""  # the routed experts' weights ("" = dtype): fp8 (DeepSeek-V3), mxfp4 (gpt-oss)
    # -- attention variants --
    attention: str = "gqa"  # "gqa" (grouped-query, MHA and MQA included) or "mla" (DeepSeek's latent attention)
    kv_lora_rank: int = 0  # MLA: the compressed latent cached per token and layer
    q_lora_rank: int = 0  # MLA: the queries' low-rank bottleneck (0: a full d_model x heads projection)
    qk_rope_head_dim: int = 0  # MLA: the rotary part of a query/key head (its key is cached beside the latent)
    v_head_dim: int = 0  # MLA: a value head's width (0: head_dim)
    sliding_window: int = 0  # tokens a sliding-window layer attends to (0: none)
    sliding_layers: int = 0  # how many layers use it (gpt-oss alternates: half)
    extra_linear_params: int = 0  # linear weights beyond the block read every pass (EAGLE-3's 2h-wide q/k/v input)
    kv_dtype: str = ""  # the KV cache's dtype ("" = dtype): DeepSeek-V3 serves fp8 weights beside a bf16 cache
    mtp_modules: int = 0  # multi-token-prediction modules the checkpoint carries (DeepSeek-V3: 1), a draft of its own
    # -- expert parallelism and DP attention (`simulator.moe_parallel.split`): this spec is one GPU's share --
    ep: int = 1  # GPUs the routed experts are spread over (each holds n_experts / ep of them)
    dp: int = 1  # attention data-parallel groups: each its own batch and KV cache (a GPU holds 1 / dp of the cache)

    def __post_init__(self) -> None:
        for attr in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size"):
            if getattr(self, attr) <= 0:
                raise ValueError(f"model {self.name!r}: {attr} must be positive, got {getattr(self, attr)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model {self.name!r}: n_heads {self.n_heads} is not a multiple of n_kv_heads "
                             f"{self.n_kv_heads}")
        dtype_bytes(self.dtype)
        for extra in (self.expert_dtype, self.kv_dtype):
            if extra:
                dtype_bytes(extra)
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        if self.n_experts:
            if not 1 <= self.experts_per_token <= self.n_experts:
                raise ValueError(f"model {self.name!r}: top-k routing {self.experts_per_token} must be between 1 "
                                 f"and the {self.n_experts} experts")
            if self.d_ff_expert <= 0:
                raise ValueError(f"model {self.name!r}: an MoE model needs its experts' width d_ff_expert > 0")
            if not 0 <= self.dense_layers < self.n_layers:
                raise ValueError(f"model {self.name!r}: dense_layers {self.dense_layers} must leave MoE layers "
                                 f"among its {self.n_layers}")
        elif self.experts_per_token or self.d_ff_expert or self.d_ff_shared:
            raise ValueError(f"model {self.name!r}: expert fields without n_experts")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"model {self.name!r}: attention {self.attention!r} is not one of "
                             f"{', '.join(ATTENTION_KINDS)}")
        if self.attention == "mla" and self.kv_lora_rank <= 0:
            raise ValueError(f"model {self.name!r}: MLA needs its latent width kv_lora_rank > 0")
        if not 0 <= self.sliding_layers <= self.n_layers or (self.sliding_layers > 0) != (self.sliding_window > 0):
            raise ValueError(f"model {self.name!r}: sliding_window and sliding_layers (at most n_layers) go "
                             "together")
        if min(self.d_ff_shared, self.extra_linear_params, self.q_lora_rank, self.qk_rope_head_dim,
               self.v_head_dim, self.kv_lora_rank, self.mtp_modules) < 0:
            raise ValueError(f"model {self.name!r}: widths must be >= 0")

    @property
    def bytes_per_param(self) -> float:
        return dtype_bytes(self.dtype)

    @property
    def expert_bytes_per_param(self) -> float:
        return dtype_bytes(self.expert_dtype or self.dtype)

    # -- parameters -----------------------------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.dense_layers if self.is_moe else 0

    @property
    def attention_params(self) -> int:
        """One layer's attention projections. GQA: q, k, v, o. MLA (DeepSeek-V2/V3): the query's down and up
        projections (or one full projection), the joint latent-and-rotary-key down projection, the latent's up
        projection to keys and values, and o."""
        d, h, hd = self.d_model, self.n_heads, self.head_dim
        if self.attention == "mla":
            qk = hd + self.qk_rope_head_dim  # hd is the non-rotary part of a query/key head
            v = self.v_head_dim or hd
            q = d * self.q_lora_rank + self.q_lora_rank * h * qk if self.q_lora_rank else d * h * qk
            return q + d * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * h * (hd + v) + h * v * d
        return 2 * d * h * hd + 2 * d * self.n_kv_heads * hd

    @property
    def expert_params(self) -> int:
        """One routed expert: its SwiGLU gate, up and down."""
        return 3 * self.d_model * self.d_ff_expert

    @property
    def layer_matmul_params(self) -> int:
        """Parameters one token's matmuls touch in one layer (a dense layer, or an MoE layer's router, shared
        experts and top-k routed experts, averaged over the layers)."""
        dense = self.attention_params + 3 * self.d_model * self.d_ff
        if not self.is_moe:
            return dense
        moe = (self.attention_params + self.d_model * self.n_experts + 3 * self.d_model * self.d_ff_shared
               + self.experts_per_token * self.expert_params)
        return (self.dense_layers * dense + self.n_moe_layers * moe) // self.n_layers

    @property
    def matmul_params(self) -> int:
        """Parameters touched by a matmul for every token (the active ones of an MoE): every layer's, the output
        head and any extra linear map."""
        dense = self.attention_params + 3 * self.d_model * self.d_ff
        moe = (self.attention_params + self.d_model * self.n_experts + 3 * self.d_model * self.d_ff_shared
               + self.experts_per_token * self.expert_params)
        layers = (self.n_layers - self.n_moe_layers) * dense + self.n_moe_layers * moe
        return layers + self.vocab_size * self.d_model + self.extra_linear_params

    @property
    def routed_params(self) -> int:
        """Every routed expert's parameters a GPU holds (its n_experts / ep under expert parallelism; 0 for a dense
        model)."""
        return self.n_moe_layers * (self.n_experts // self.ep) * self.expert_params

    @property
    def n_params(self) -> int:
        """All parameters, embeddings, norms and every expert included (what the checkpoint holds)."""
        embeddings = 0 if self.tied_embeddings else self.vocab_size * self.d_model
        norms = (2 * self.n_layers + 1) * self.d_model
        active_routed = self.n_moe_layers * self.experts_per_token * self.expert_params
        return self.matmul_params - active_routed + self.routed_params + embeddings + norms

    @property
    def dense_weight_bytes(self) -> float:
        """Bytes every pass reads whatever its tokens: all weights but the routed experts, norms included (the
        embedding gather of a few rows is negligible and counted with the activations)."""
        norms = (2 * self.n_layers + 1) * self.d_model
        active_routed = self.n_moe_layers * self.experts_per_token * self.expert_params
        return (self.matmul_params - active_routed + norms) * self.bytes_per_param

    def experts_touched(self, tokens_per_sequence: np.ndarray | float, batch: np.ndarray | float,
                        sharing: float = DEFAULT_EXPERT_SHARING, skew: float = 0.0,
                        power_law: float = 0.0) -> np.ndarray | float:
        """Expected distinct experts one MoE layer reads in a pass of `batch` sequences x `tokens_per_sequence`.
        Sequences route independently; a sequence's n tokens act as 1 + (n - 1)(1 - sharing) independent tokens
        (`DEFAULT_EXPERT_SHARING`). With E experts and top-k routing, an expert of popularity pi_e (1 / E when
        `skew` is 0; Zipf, pi_e ~ rank^-skew, otherwise) is missed by one token with probability 1 - k pi_e, so the
        pass touches sum_e 1 - (1 - k pi_e)^(B n_eff): E (1 - (1 - k / E)^(B n_eff)) when uniform. `power_law` > 1:
        the B n_eff tokens routed as AIConfigurator measured its MoE kernels (`simulator.routing`), loads drawn from
        a power law of that exponent every pass."""
        if not self.is_moe:
            return 0.0 * np.asarray(batch, dtype=float)
        n_eff = 1.0 + (np.asarray(tokens_per_sequence, dtype=float) - 1.0) * (1.0 - sharing)
        tokens = np.asarray(batch, dtype=float) * n_eff
        E, k = self.n_experts, self.experts_per_token
        if power_law:
            from .routing import power_law_touched

            return power_law_touched(E, k, tokens, power_law)
        if skew == 0.0:
            return E * (1.0 - (1.0 - k / E) ** tokens)
        pi = np.arange(1, E + 1, dtype=float) ** -skew
        p = np.minimum(k * pi / pi.sum(), 1.0)
        return (1.0 - (1.0 - p) ** np.expand_dims(tokens, -1)).sum(axis=-1)

    def linear_weight_bytes(self, batch: np.ndarray | float, tokens_per_sequence: np.ndarray | float,
                            sharing: float = DEFAULT_EXPERT_SHARING, skew: float = 0.0,
                            power_law: float = 0.0) -> np.ndarray | float:
        """Weight bytes a pass of `batch` x `tokens_per_sequence` reads: the dense part once, and in every MoE layer
        each expert its tokens touch once (`experts_touched`). A dense model reads all its weights whatever the
        pass."""
        dense = self.dense_weight_bytes
        if not self.is_moe:
            return dense + 0.0 * np.asarray(batch, dtype=float) * np.asarray(tokens_per_sequence, dtype=float)
        touched = self.experts_touched(tokens_per_sequence, batch, sharing, skew, power_law)
        return dense + self.n_moe_layers * touched * self.expert_params * self.expert_bytes_per_param

    @property
    def weight_bytes_per_pass(self) -> float:
        """Bytes of weight one one-token pass of one sequence reads (every weight of a dense model)."""
        return float(self.linear_weight_bytes(1, 1))

    @property
    def mlp_width_per_token(self) -> int:
        """The SwiGLU width a token runs through in a layer, averaged over the layers (activations' size)."""
        if not self.is_moe:
            return self.d_ff
        moe = self.d_ff_shared + self.experts_per_token * self.d_ff_expert
        return (self.dense_layers * self.d_ff + self.n_moe_layers * moe) // self.n_layers

    @property
    def resident_weight_bytes(self) -> float:
        routed = self.routed_params
        return (self.n_params - routed) * self.bytes_per_param + routed * self.expert_bytes_per_param

    # -- the KV cache and attention -----------------------------------------------------------------------------

    @property
    def kv_bytes_per_token_layer(self) -> float:
        """Cache bytes one token occupies in one layer: K and V of its KV heads, or MLA's latent and rotary key; under
        DP attention a GPU's share of the engine's tokens (each lives on one of the dp groups only)."""
        nbytes = dtype_bytes(self.kv_dtype or KV_OF_WEIGHTS.get(self.dtype, self.dtype))
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * nbytes / self.dp
        return 2 * self.n_kv_heads * self.head_dim * nbytes / self.dp

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies across all layers (a sliding-window layer's while within its window)."""
        return self.n_layers * self.kv_bytes_per_token_layer

    def kv_bytes_at(self, tokens: np.ndarray | float) -> np.ndarray | float:
        """Cache bytes one sequence of `tokens` tokens holds (and one pass of it reads): a sliding-window layer
        keeps only its window."""
        t = np.asarray(tokens, dtype=float)
        full = (self.n_layers - self.sliding_layers) * t
        windowed = self.sliding_layers * np.minimum(t, self.sliding_window) if self.sliding_layers else 0.0
        return (full + windowed) * self.kv_bytes_per_token_layer

    def attention_flops(self, rows: np.ndarray | float, context: np.ndarray | float,
                        new_tokens: np.ndarray | float) -> np.ndarray | float:
        """QK^T and PV of `rows` query rows, each attending to its sequence's `context` + `new_tokens` (a sliding
        layer to at most its window). GQA: 4 x heads x head_dim per attended token and layer; MLA computed in the
        latent (the up-projections absorbed, as DeepSeek serves it): 2 x heads x (2 kv_lora_rank + rope dims)."""
        attended = np.asarray(context, dtype=float) + np.asarray(new_tokens, dtype=float)
        per_layer = (self.n_layers - self.sliding_layers) * attended
        if self.sliding_layers:
            per_layer = per_layer + self.sliding_layers * np.minimum(attended, self.sliding_window)
        if self.attention == "mla":
            width = 2.0 * self.n_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        else:
            width = 4.0 * self.n_heads * self.head_dim
        return width * np.asarray(rows, dtype=float) * per_layer

    def shard(self, tp: int) -> ModelSpec:
        """One GPU's share of the model split `tp` ways as Megatron-LM does (Shoeybi et al. 2019) and vLLM runs it:
        attention heads, the SwiGLU hidden sizes and the vocabulary (embedding and output head) divided, K/V heads
        divided down to one per GPU and replicated beyond; the residual stream (d_model) whole on every GPU. The
        cost model adds the two all-reduces per layer and the logits gather of a sharded pass."""
        if tp == 1:
            return self
        widths = (self.n_heads, self.d_ff, self.d_ff_expert, self.d_ff_shared)
        ways = [n for n in range(2, 65) if not any(w % n for w in widths)]
        advice = f"; use --tp {', '.join(map(str, ways[:-1]))} or {ways[-1]}" if len(ways) > 1 else \
            f"; use --tp {ways[0]}" if ways else "; use --tp 1"
        if tp < 1 or self.n_heads % tp or self.d_ff % tp:
            raise SpecsimError(f"model {self.name!r} cannot be split {tp} ways: its {self.n_heads} heads and d_ff "
                               f"{self.d_ff} must both be multiples of the tensor-parallel degree{advice}")
        if self.tp != 1:
            raise SpecsimError(f"model {self.name!r} is already a {self.tp}-way shard")
        if self.d_ff_expert % tp or self.d_ff_shared % tp:
            raise SpecsimError(f"model {self.name!r} cannot be split {tp} ways: its experts' widths "
                               f"{self.d_ff_expert} and {self.d_ff_shared} must be multiples of it{advice}")
        kv = self.n_kv_heads // tp if self.n_kv_heads % tp == 0 else 1
        # Experts split as vLLM's tensor-parallel MoE does: every expert's width divided, all experts on every GPU
        # (expert parallelism and DP attention: simulator.moe_parallel.split). MLA's latent is replicated, its heads
        # divided.
        return replace(self, n_heads=self.n_heads // tp, n_kv_heads=max(kv, 1), d_ff=self.d_ff // tp,
                       vocab_size=-(-self.vocab_size // tp), head_dim=self.head_dim, tp=tp,
                       d_ff_expert=self.d_ff_expert // tp, d_ff_shared=self.d_ff_shared // tp)

    def with_dtype(self, dtype: str) -> ModelSpec:
        dtype_bytes(dtype)
        return replace(self, dtype=dtype)
