"""Hardware and model shapes as frozen dataclasses.

Units live in the names: bytes, seconds, FLOP/s. Conversions from GB/s or TFLOP/s happen at the edges (the TOML
loader in `scenarios/`, the CLI).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

GIGA = 1e9
TERA = 1e12

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of `dtype`; raises ValueError naming the known dtypes."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}") from None


@dataclass(frozen=True)
class PerStep:
    """A cost per decoding step: a fixed part plus a part per sequence in the batch."""

    fixed_s: float = 0.0
    per_sequence_s: float = 0.0

    def at(self, batch: int) -> float:
        return self.fixed_s + self.per_sequence_s * batch


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
    # and a verification step is priced as its pass + verify - pass_draw (every term >= 0; profiles before
    # 2026-12-03 kept the difference in `verify`, signed, and no pass_draw).
    pass_draw: PerStep = field(default_factory=PerStep)
    # Tokens in a step's first draft pass: 1 where the draft's cache is kept current (the presets' engines); specsim's
    # own engine re-caches [previous, current] at the start of every draft phase (engine.speculative), so 2.
    draft_catchup_tokens: int = 1

    def verify_extra_s(self, batch: np.ndarray | int) -> np.ndarray | float:
        """What a verification step costs beyond its calibrated pass: its own work minus the pass's draw."""
        return (self.verify.fixed_s - self.pass_draw.fixed_s
                + (self.verify.per_sequence_s - self.pass_draw.per_sequence_s) * batch)

    @classmethod
    def from_dict(cls, d: dict) -> EngineOverheads:
        d = dict(d)
        catchup = int(d.pop("draft_catchup_tokens", 1))
        return cls(**{k: PerStep(**v) for k, v in d.items()}, draft_catchup_tokens=catchup)


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

    @classmethod
    def from_dict(cls, d: dict) -> Overheads:
        d = dict(d)
        engine = EngineOverheads.from_dict(d.pop("engine", {}))
        return cls(**d, engine=engine)


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

    def all_reduce_s(self, n: int, nbytes: np.ndarray | float) -> np.ndarray | float:
        """An all-reduce of `nbytes` over `n` GPUs."""
        if n <= 1:
            return 0.0 * nbytes
        return self.latency_s + 2 * (n - 1) / n * nbytes / self.bw_bytes_per_s

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

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; fp16 falls back to bf16 and vice versa."""
        table = dict(self.peak_flops_per_s)
        for candidate in (dtype, {"fp16": "bf16", "bf16": "fp16"}.get(dtype, dtype)):
            if candidate in table:
                return table[candidate]
        raise ValueError(f"hardware {self.name!r} lists no peak FLOP/s for {dtype}; it knows {', '.join(table)}")

    def with_overrides(self, **changes: object) -> HardwareSpec:
        return replace(self, **changes)


@dataclass(frozen=True)
class ModelSpec:
    """A Llama-family decoder's shape: enough to count its weights, KV cache and FLOPs."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int  # SwiGLU hidden size (gate and up each d_model x d_ff)
    vocab_size: int
    tied_embeddings: bool = False
    dtype: str = "bf16"
    head_dim: int = 0  # 0 means d_model // n_heads
    source: str = ""
    tp: int = 1  # tensor-parallel degree: >1 means this spec is one GPU's shard of the model (see `shard`)

    def __post_init__(self) -> None:
        for attr in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size"):
            if getattr(self, attr) <= 0:
                raise ValueError(f"model {self.name!r}: {attr} must be positive, got {getattr(self, attr)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model {self.name!r}: n_heads {self.n_heads} is not a multiple of n_kv_heads "
                             f"{self.n_kv_heads}")
        dtype_bytes(self.dtype)
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)

    @property
    def bytes_per_param(self) -> float:
        return dtype_bytes(self.dtype)

    @property
    def layer_matmul_params(self) -> int:
        """Parameters of one layer's linear maps: q, k, v, o and the SwiGLU gate, up and down."""
        q_o = 2 * self.d_model * self.n_heads * self.head_dim
        k_v = 2 * self.d_model * self.n_kv_heads * self.head_dim
        mlp = 3 * self.d_model * self.d_ff
        return q_o + k_v + mlp

    @property
    def matmul_params(self) -> int:
        """Parameters touched by a matmul for every token: all layers plus the output head."""
        return self.n_layers * self.layer_matmul_params + self.vocab_size * self.d_model

    @property
    def n_params(self) -> int:
        """All parameters, embeddings and norms included (what the checkpoint holds)."""
        embeddings = 0 if self.tied_embeddings else self.vocab_size * self.d_model
        norms = (2 * self.n_layers + 1) * self.d_model
        return self.matmul_params + embeddings + norms

    @property
    def weight_bytes_per_pass(self) -> float:
        """Bytes of weight read by one forward pass: every matmul weight and norm once (the embedding gather of
        a few rows is negligible and counted with the activations)."""
        norms = (2 * self.n_layers + 1) * self.d_model
        return (self.matmul_params + norms) * self.bytes_per_param

    @property
    def resident_weight_bytes(self) -> float:
        return self.n_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies across all layers (K and V)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.bytes_per_param

    def shard(self, tp: int) -> ModelSpec:
        """One GPU's share of the model split `tp` ways as Megatron-LM does (Shoeybi et al. 2019) and vLLM runs it:
        attention heads, the SwiGLU hidden size and the vocabulary (embedding and output head) divided, K/V heads
        divided down to one per GPU and replicated beyond; the residual stream (d_model) whole on every GPU. The
        cost model adds the two all-reduces per layer and the logits gather of a sharded pass."""
        if tp == 1:
            return self
        if tp < 1 or self.n_heads % tp or self.d_ff % tp:
            raise ValueError(f"model {self.name!r} cannot be split {tp} ways: its {self.n_heads} heads and d_ff "
                             f"{self.d_ff} must both be multiples of the tensor-parallel degree")
        if self.tp != 1:
            raise ValueError(f"model {self.name!r} is already a {self.tp}-way shard")
        kv = self.n_kv_heads // tp if self.n_kv_heads % tp == 0 else 1
        return replace(self, n_heads=self.n_heads // tp, n_kv_heads=max(kv, 1), d_ff=self.d_ff // tp,
                       vocab_size=-(-self.vocab_size // tp), head_dim=self.head_dim, tp=tp)

    def with_dtype(self, dtype: str) -> ModelSpec:
        dtype_bytes(dtype)
        return replace(self, dtype=dtype)
