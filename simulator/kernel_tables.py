"""Pass times from tables of measured kernels (AIConfigurator's database, read by `calibrate.aiconfigurator`).

Pure: numpy arrays in, seconds out. A kernel's time is interpolated piecewise linearly in (log size, log time)
between the measured sizes, which is what a roofline in a log-log plot is (a constant under the ridge, a line of
slope 1 above it); beyond the largest size the last segment's slope carries on (held within [0, 1]: time never falls
with size, nor grows faster than it), below the smallest the time is held.

A pass of B sequences x n new tokens on c cached tokens each (`decode_pass`), priced as a serving engine runs it
(vLLM, SGLang, TensorRT-LLM flatten a verify pass's rows into one batch):

- every GEMM at B x n rows (the measured GEMM at m = B n, its n x k);
- decode attention: each sequence's KV cache read once, the measured decode kernel at (B, c + n), plus the n - 1
  extra query rows' FLOPs at the tensor-core rate (the KV read does not repeat for them; `extra_rows_flops_per_s`);
- the fused MoE kernel as measured (its routing: the table's distribution) at B x n_eff tokens, a sequence's n rows
  sharing experts as n_eff = 1 + (n - 1)(1 - sharing) independent tokens, the other rows' FLOPs on top; after the
  router and beside the shared experts (`_moe_layer_s`);
- MLA (DeepSeek): the measured generation module at (B, c + n), the extra rows as for attention;
- the all-reduces of B x n x d_model activations, the table read at that many elements (its key, as
  AIConfigurator reads it);
- what no table measures (norms, activations, the embedding, rotary) by the roofline: bytes at a fraction of the
  bandwidth plus a launch latency per kernel (`Elementwise`).

A prompt's pass (`prefill_pass`): B prompts of n tokens each on c cached tokens (c = 0: a whole prompt; c > 0: a
chunk of one on top of its cached start), as the engines run one:

- every GEMM at B x n rows, the output head at B rows (only each prompt's last position is sampled);
- prefill attention: the measured context kernel at (B, c + n) (`context_attention`, or MLA's measured context
  module), times the share of that whole prompt's causal (query, key) pairs the chunk computes, 1 - (c / (c + n))^2.
  The tables time prompts with nothing cached (their `step` is 0), so a chunk is that approximation (AIConfigurator's
  own rule for a prefix); not measured at all: the KV read and write at the element-wise bandwidth plus the causal
  FLOPs at the tensor-core rate;
- the kernels beside attention that the context tables do not time, by the roofline: RoPE over q and k, the KV
  cache's write (and Qwen3's q/k norms), one kernel each a layer;
- the fused MoE kernel at B x n tokens (a prompt's tokens route independently: no sharing) after the router, the
  shared experts after them (a prompt's pass runs outside CUDA graphs, on one stream; AIConfigurator's rule too);
- the all-reduces and what no table measures as in a decode pass, at B x n rows.

AIConfigurator's own estimate of a verify pass is the decode pass of B (k + 1) sequences, each re-reading its KV
cache (`aiconfigurator_verify`); both are kept so that the two can be compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from .specs import DEFAULT_EXPERT_SHARING

MILLI = 1e-3


def _loglog(xs: np.ndarray, ts: np.ndarray, x: np.ndarray | float, lone_slope: float = 0.0) -> np.ndarray:
    """Piecewise linear in (log x, log t) through the points, the last segment's slope (in [0, 1]) beyond the end
    (`lone_slope` after a single point), held below the start."""
    lx, lt = np.log(xs), np.log(ts)
    q = np.log(np.maximum(np.asarray(x, dtype=float), 1e-30))
    inside = np.interp(np.minimum(q, lx[-1]), lx, lt)
    slope = lone_slope if len(xs) < 2 else float(np.clip((lt[-1] - lt[-2]) / (lx[-1] - lx[-2]), 0.0, 1.0))
    return np.exp(inside + slope * np.maximum(q - lx[-1], 0.0))


@dataclass(frozen=True)
class Curve:
    """One kernel's measured times (seconds) by one size (rows, tokens, bytes), increasing sizes."""

    sizes: tuple[float, ...]
    times_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (len(self.sizes) == len(self.times_s) >= 1) or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError("a kernel curve needs increasing, distinct sizes and one time each")
        if min(self.times_s) <= 0 or min(self.sizes) <= 0:
            raise ValueError("a kernel curve's sizes and times must be positive")

    def at(self, size: np.ndarray | float) -> np.ndarray:
        return _loglog(np.asarray(self.sizes, dtype=float), np.asarray(self.times_s, dtype=float), size)


@dataclass(frozen=True)
class Grid2:
    """Times (seconds) measured over a grid of two sizes (batch x context, ...): log-log in each, bilinear in logs
    between grid lines, the end segments' slopes beyond (as `Curve`). Cells not measured are NaN (a large batch at
    a long context ran out of memory): such a row carries on from its last measured context as the nearest row
    measured further grows, else in proportion to the context (a KV read grows with it)."""

    first: tuple[float, ...]
    second: tuple[float, ...]
    times_s: np.ndarray  # (len(first), len(second))

    def at(self, a: float, b: float) -> float:
        A, B = np.asarray(self.first, dtype=float), np.asarray(self.second, dtype=float)
        T = np.asarray(self.times_s, dtype=float)
        rows = []
        for i in range(len(A)):
            ok = np.isfinite(T[i])
            if not ok.any():
                rows.append(np.nan)
                continue
            last = B[ok][-1]
            # beyond its last measured column a row follows the nearest row measured that far (its growth from
            # `last` to b), else grows in proportion
            donors = [j for j in sorted(range(len(A)), key=lambda j: abs(j - i)) if j != i
                      and np.isfinite(T[j]).sum() >= 2 and B[np.isfinite(T[j])][-1] >= min(b, B[-1])]
            t_last = float(_loglog(B[ok], T[i, ok], min(b, last), lone_slope=1.0))
            if b <= last:
                rows.append(t_last)
            elif donors:
                okj = np.isfinite(T[donors[0]])
                grow = _loglog(B[okj], T[donors[0], okj], [b, last])
                rows.append(t_last * float(grow[0] / grow[1]))
            else:
                rows.append(t_last * b / last)
        r = np.asarray(rows)
        ok = np.isfinite(r)
        return float(_loglog(A[ok], r[ok], a))


@dataclass(frozen=True)
class Gemm:
    """Measured GEMMs of one dtype: times (seconds) over rows m x output width n x input width k (NaN where not
    measured). A shape between grid points: trilinear in (log m, log n, log k) of log time; a missing corner falls
    back to the nearest measured (n, k) with the time scaled by n k (a GEMM's weight bytes and FLOPs both are)."""

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    times_s: np.ndarray  # (len(m), len(n), len(k))

    def _nk_times(self, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The times over m at (n, k): interpolated between the four grid columns around it, or scaled from the
        nearest measured column."""
        N, K = np.log(np.asarray(self.n, float)), np.log(np.asarray(self.k, float))
        T = self.times_s
        qn, qk = np.log(n), np.log(k)

        def bracket(axis: np.ndarray, q: float) -> tuple[int, int, float]:
            if q <= axis[0]:
                return 0, 0, 0.0
            if q >= axis[-1]:
                return len(axis) - 1, len(axis) - 1, 0.0
            j = int(np.searchsorted(axis, q, side="right") - 1)
            return j, j + 1, float((q - axis[j]) / (axis[j + 1] - axis[j]))

        i0, i1, wn = bracket(N, qn)
        j0, j1, wk = bracket(K, qk)
        corners = [(i0, j0, (1 - wn) * (1 - wk)), (i1, j0, wn * (1 - wk)), (i0, j1, (1 - wn) * wk), (i1, j1, wn * wk)]
        m_ok = np.all([np.isfinite(T[:, i, j]) for i, j, _ in corners], axis=0)
        if m_ok.sum() >= 2:
            # log(t / (n k)) interpolated: the scale by n k beyond the grid's ends comes with it
            lt = sum(w * (np.log(T[m_ok, i, j]) - N[i] - K[j]) for i, j, w in corners) + qn + qk
            return np.asarray(self.m, float)[m_ok], np.exp(lt)
        counts = np.isfinite(T).sum(axis=0)
        cand = np.argwhere(counts >= 2)
        d = (N[cand[:, 0]] - qn) ** 2 + (K[cand[:, 1]] - qk) ** 2
        i, j = cand[int(np.argmin(d))]
        ok = np.isfinite(T[:, i, j])
        return np.asarray(self.m, float)[ok], T[ok, i, j] * (n * k) / (self.n[i] * self.k[j])

    def at(self, m: float, n: int, k: int) -> float:
        ms, ts = self._nk_times(n, k)
        return float(_loglog(ms, ts, m))


@dataclass(frozen=True)
class Elementwise:
    """What no table measures, by the roofline: bytes at `bw_efficiency` of the datasheet bandwidth plus a launch
    latency per kernel (AIConfigurator's own formula for its element-wise ops: 80 % and 3 us)."""

    bw_bytes_per_s: float
    bw_efficiency: float = 0.8
    latency_s: float = 3e-6

    def time_s(self, nbytes: float, kernels: float = 1.0) -> float:
        return nbytes / (self.bw_bytes_per_s * self.bw_efficiency) + kernels * self.latency_s


@dataclass(frozen=True)
class LayerShapes:
    """One GPU's share of a decoder's layers, in the shapes the kernel tables are keyed by."""

    n_layers: int
    d_model: int
    vocab_per_gpu: int
    tp: int
    # dense layers (every layer of a dense model; the leading ones of an MoE)
    qkv_out: int  # q, k and v heads on this GPU x head_dim
    o_in: int  # this GPU's query heads x head_dim (or MLA's v heads)
    ffn_per_gpu: int  # SwiGLU width on this GPU
    heads_per_gpu: int
    kv_heads_per_gpu: int
    head_dim: int
    kv_bytes_per_token_layer: float
    attention_flops_per_row_token: float  # attention FLOPs of one query row per attended token and layer
    dense_layers: int  # layers with a dense MLP (n_layers for a dense model)
    moe_layers: int = 0
    shared_ffn_per_gpu: int = 0  # an MoE layer's shared experts' width on this GPU
    n_experts: int = 0
    expert_ffn_per_gpu: int = 0  # one routed expert's width on this GPU
    topk: int = 0
    mla: bool = False
    shared_overlapped: bool = True  # the shared experts run beside the routed ones (a second CUDA stream)
    qk_norm: bool = False  # RMSNorm over every query and key head before RoPE (Qwen3)
    extra_linear: tuple[tuple[int, int], ...] = ()  # MLA: its projections' GEMMs per layer, (n, k), on this GPU


@dataclass(frozen=True)
class MeasuredKernels:
    """The kernel times one configuration needs, as measured, and where each came from."""

    gemm: Gemm  # the weights' dtype
    logits_gemm: Gemm  # bf16 (engines keep the output head in bf16)
    attention: Grid2 | None  # decode attention by (batch, context), this GPU's heads; None: MLA or not measured
    mla: Grid2 | None = None  # MLA's generation module by (batch, context); None: not an MLA model
    context_attention: Grid2 | None = None  # prefill attention by (batch, prompt tokens), this GPU's heads; None:
    #                                         MLA or not measured (the roofline, `prefill_pass`)
    context_mla: Grid2 | None = None  # MLA's context module (projections and attention) by (batch, prompt tokens)
    moe: Curve | None = None  # the fused MoE layer by tokens; None: dense
    all_reduce: Curve | None = None  # by message elements (bf16), over tp GPUs; None: one GPU
    elementwise: Elementwise = field(default_factory=lambda: Elementwise(1e12))
    tensor_flops_per_s: float = 1e15  # the extra query rows' attention FLOPs run at this rate
    sources: Mapping[str, str] = field(default_factory=dict)  # operator -> table and selection it came from


@dataclass(frozen=True)
class PassTimes:
    """One pass's GPU time by operator (seconds)."""

    gemm_s: float
    attention_s: float
    moe_s: float
    comm_s: float
    other_s: float  # norms, activations, embedding: by the roofline

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.moe_s + self.comm_s + self.other_s


def decode_pass(shapes: LayerShapes, kernels: MeasuredKernels, batch: int, new_tokens: int,
                context: int, expert_sharing: float = DEFAULT_EXPERT_SHARING) -> PassTimes:
    """A pass of `batch` sequences x `new_tokens` rows each on `context` cached tokens, as an engine runs it: the
    GEMMs, MoE and collectives at batch x new_tokens rows, each sequence's KV cache read once (see the module
    docstring); a sequence's rows share experts by `expert_sharing` (`_moe_layer_s`)."""
    s = shapes
    rows = batch * new_tokens
    gemm = _gemms_s(s, kernels, rows, rows, kernels.mla is not None)
    attended = context + new_tokens
    extra_flops = batch * (new_tokens - 1) * attended * s.attention_flops_per_row_token
    table = kernels.mla if s.mla else kernels.attention
    if table is not None:
        per_layer = table.at(batch, attended) + extra_flops / kernels.tensor_flops_per_s
    else:  # not measured: the KV read at the element-wise bandwidth
        per_layer = kernels.elementwise.time_s(batch * attended * s.kv_bytes_per_token_layer) + (
            batch * new_tokens * attended * s.attention_flops_per_row_token / kernels.tensor_flops_per_s)
    attention = s.n_layers * per_layer
    moe = s.moe_layers * _moe_layer_s(s, kernels, batch, new_tokens, expert_sharing) if s.moe_layers else 0.0
    # the all-reduce table is keyed by message elements (rows x d_model), as AIConfigurator reads it (`prefill_pass`)
    return PassTimes(gemm, attention, moe, _comm_s(s, kernels, rows * s.d_model), _other_s(s, kernels, rows))


def prefill_pass(shapes: LayerShapes, kernels: MeasuredKernels, batch: int, new_tokens: int,
                 context: int = 0) -> PassTimes:
    """`batch` prompts of `new_tokens` tokens each on `context` cached tokens (0: whole prompts; more: a chunk of
    each on top of its cached start), as an engine runs a prefill (see the module docstring): the GEMMs, MoE and
    collectives at batch x new_tokens rows, the output head at one row a prompt, the measured context attention."""
    if batch < 1 or new_tokens < 1 or context < 0:
        raise ValueError(f"a prefill needs batch >= 1, new_tokens >= 1, context >= 0; got {batch}, {new_tokens}, "
                         f"{context}")
    s = shapes
    rows = batch * new_tokens
    full = context + new_tokens
    table = kernels.context_mla if s.mla else kernels.context_attention
    gemm = _gemms_s(s, kernels, rows, batch, kernels.context_mla is not None)
    if table is not None:
        # the chunk's share of the whole prompt's causal pairs: (full^2 - context^2) / full^2
        per_layer = table.at(batch, full) * (1.0 - (context / full) ** 2)
    else:  # not measured: the KV cache read and written at the element-wise bandwidth, the causal FLOPs
        pairs = new_tokens * (context + (new_tokens + 1) / 2)  # (query, key) pairs of one prompt's chunk
        per_layer = kernels.elementwise.time_s(batch * full * s.kv_bytes_per_token_layer) + (
            batch * pairs * s.attention_flops_per_row_token / kernels.tensor_flops_per_s)
    if not (s.mla and kernels.context_mla is not None):  # (the MLA module's timings hold its own)
        per_layer += _rope_kv_write_s(s, kernels, rows)
    attention = s.n_layers * per_layer
    # a prompt's tokens route independently: the kernel at every row, no sharing; the shared experts after it
    moe = (s.moe_layers * _moe_layer_s(replace(s, shared_overlapped=False), kernels, rows, 1, 0.0)
           if s.moe_layers else 0.0)
    # the all-reduce table is keyed by elements: AIConfigurator's 70B TP 4 prefill of 4,096 tokens prices each at
    # the row of 4,096 x 8,192
    return PassTimes(gemm, attention, moe, _comm_s(s, kernels, rows * s.d_model), _other_s(s, kernels, rows))


def _rope_kv_write_s(s: LayerShapes, kernels: MeasuredKernels, rows: int) -> float:
    """A layer's kernels beside a prefill's attention kernel (bf16 activations, read and written): RoPE over the
    query and key heads, the KV cache's write (k and v read, the cache's bytes written), Qwen3's q and k norms."""
    e = kernels.elementwise
    qk_bytes = rows * (s.heads_per_gpu + s.kv_heads_per_gpu) * s.head_dim * 2 * 2
    kv_bytes = rows * (2 * s.kv_heads_per_gpu * s.head_dim * 2 + s.kv_bytes_per_token_layer)
    t = e.time_s(qk_bytes) + e.time_s(kv_bytes)
    return t + e.time_s(qk_bytes, kernels=2) if s.qk_norm else t


def _gemms_s(s: LayerShapes, kernels: MeasuredKernels, rows: int, logits_rows: int, mla_module: bool) -> float:
    """The pass's GEMMs at `rows` rows, the output head at `logits_rows`; MLA's projections where no measured MLA
    module holds them (`mla_module`)."""
    g = kernels.gemm
    if s.mla:
        projections = () if mla_module else s.extra_linear
    else:
        projections = ((s.qkv_out, s.d_model), (s.d_model, s.o_in))
    attn_proj = sum(g.at(rows, n, k) for n, k in projections)
    dense_mlp = (g.at(rows, 2 * s.ffn_per_gpu, s.d_model) + g.at(rows, s.d_model, s.ffn_per_gpu)
                 if s.ffn_per_gpu else 0.0)
    return (s.n_layers * attn_proj + s.dense_layers * dense_mlp
            + kernels.logits_gemm.at(logits_rows, s.vocab_per_gpu, s.d_model))


def _comm_s(s: LayerShapes, kernels: MeasuredKernels, message: int) -> float:
    """Two all-reduces a layer of `message` (the table's key) over the TP group."""
    if kernels.all_reduce is None or s.tp <= 1:
        return 0.0
    return 2 * s.n_layers * float(kernels.all_reduce.at(message))


def _other_s(s: LayerShapes, kernels: MeasuredKernels, rows: int) -> float:
    """What no table measures, by the roofline (`Elementwise`): add + RMSNorm twice a layer (read 2 d, write 2 d),
    SiLU x gate of the dense MLPs, the embedding; bf16 activations."""
    e = kernels.elementwise
    act = 2
    norms = 2 * s.n_layers * e.time_s(rows * 4 * s.d_model * act)
    acts = s.dense_layers * e.time_s(rows * 3 * s.ffn_per_gpu * act) if s.ffn_per_gpu else 0.0
    embedding = e.time_s(rows * s.d_model * act)
    return norms + acts + embedding


def _moe_layer_s(s: LayerShapes, kernels: MeasuredKernels, batch: int, new_tokens: int, sharing: float) -> float:
    """One MoE layer: the router (bf16) and the fused routed experts on the main stream; the shared experts (their
    GEMMs and activation) beside them on a second stream where the engine overlaps them (vLLM under CUDA graphs),
    after them otherwise. The fused kernel was measured on tokens routed independently; a sequence's n rows route
    as 1 + (n - 1)(1 - sharing) independent tokens would (`ModelSpec.experts_touched`), so the kernel is read at
    that many tokens and the rest of the rows add their FLOPs at the tensor-core rate."""
    rows = batch * new_tokens
    routed = kernels.logits_gemm.at(rows, s.n_experts, s.d_model)
    if kernels.moe is not None:
        independent = batch * (1.0 + (new_tokens - 1) * (1.0 - sharing))
        extra_flops = (rows - independent) * 2 * 3 * s.d_model * s.expert_ffn_per_gpu * s.topk
        routed += float(kernels.moe.at(independent)) + extra_flops / kernels.tensor_flops_per_s
    if not s.shared_ffn_per_gpu:
        return routed
    g, w = kernels.gemm, s.shared_ffn_per_gpu
    shared = g.at(rows, 2 * w, s.d_model) + g.at(rows, s.d_model, w) + kernels.elementwise.time_s(rows * 3 * w * 2)
    return max(routed, shared) if s.shared_overlapped else routed + shared


def aiconfigurator_verify(shapes: LayerShapes, kernels: MeasuredKernels, batch: int, new_tokens: int,
                          context: int) -> PassTimes:
    """A verify pass as AIConfigurator prices one: batch x new_tokens one-token sequences, every one re-reading its
    sequence's KV cache (for comparison, not for pricing)."""
    return decode_pass(shapes, kernels, batch * new_tokens, 1, context + new_tokens - 1, expert_sharing=0.0)
