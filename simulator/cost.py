"""The cost of one forward pass: a per-operator roofline plus named overheads.

A pass processes B sequences x n new tokens on top of c cached tokens per sequence. Two operators:

- ``linear``: every matmul weight is read once (shared by all B x n rows; in a mixture of experts, each expert that
  the pass's tokens route to, `ModelSpec.linear_weight_bytes`); FLOPs 2 x active matmul_params x B x n;
  activations in and out of every linear map.
- ``attention``: each sequence reads its own KV cache, (c + n) tokens per layer (a sliding-window layer's window at
  most; MLA's latent), and writes n; FLOPs of QK^T and PV (`ModelSpec.attention_flops`).
- ``moe`` (a preset whose measured kernels include the fused-MoE kernel of the experts' dtype): the MoE layers'
  routed and shared experts, out of ``linear``, as `simulator.kernel_kinds` prices them; that module's floors
  (block-scaled fp8 GEMMs, MLA's generation module) add to the overheads.

Roofline: per operator, the memory time bytes / bw and the compute time flops / flop_rate combine as
``(t_mem^p + t_compute^p)^(1/p)`` (`ridge_combine`): p = inf is the textbook max (perfect overlap), p = 1 their sum;
presets take p from measured engines (real GEMMs near the ridge reach neither peak). The operators run one after the
other, so their times add; overheads add on top.  Achieved bandwidth and FLOP/s may
depend on the number of rows in the matmul (B x n): a one-row GEMV and a five-row GEMM run different kernels.

One concept past 500 lines: the pass's price and the measurements that anchor it (`CostModel`), which read together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from . import SpecsimError
from .kernel_kinds import MOE_COMPUTE, kernel_kinds, moe_kernel_dtype
from .specs import DEFAULT_EXPERT_SHARING, HardwareSpec, KernelTerms, ModelSpec, Overheads


@dataclass(frozen=True)
class RateTable:
    """Achieved memory bandwidth and FLOP/s as functions of the matmul's row count.

    Piecewise linear in log2(rows) between the tabulated points, constant beyond the ends. A preset has a single
    point (a constant fraction of the datasheet); calibration supplies one point per measured row count.
    """

    rows: tuple[int, ...]
    mem_bw_bytes_per_s: tuple[float, ...]
    flops_per_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (len(self.rows) == len(self.mem_bw_bytes_per_s) == len(self.flops_per_s) >= 1):
            raise ValueError("RateTable needs equally long, non-empty rows / bandwidth / FLOP/s")
        if list(self.rows) != sorted(set(self.rows)) or self.rows[0] < 1:
            raise ValueError("RateTable rows must be strictly increasing and >= 1")
        if min(self.mem_bw_bytes_per_s) <= 0 or min(self.flops_per_s) <= 0:
            raise ValueError("RateTable rates must be positive")

    @classmethod
    def constant(cls, mem_bw_bytes_per_s: float, flops_per_s: float) -> RateTable:
        return cls((1,), (mem_bw_bytes_per_s,), (flops_per_s,))

    def at_many(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`at` for an array of row counts."""
        rows = np.asarray(rows, dtype=float)
        if len(self.rows) == 1:
            return np.full(rows.shape, self.mem_bw_bytes_per_s[0]), np.full(rows.shape, self.flops_per_s[0])
        x = np.log2(np.asarray(self.rows, dtype=float))
        xq = np.log2(np.maximum(rows, 1.0))
        bw = 1.0 / np.interp(xq, x, 1.0 / np.asarray(self.mem_bw_bytes_per_s))
        fl = 1.0 / np.interp(xq, x, 1.0 / np.asarray(self.flops_per_s))
        return bw, fl

    def at(self, rows: int) -> tuple[float, float]:
        """(bandwidth bytes/s, FLOP/s) achieved by a matmul over `rows` rows."""
        if len(self.rows) == 1:
            return self.mem_bw_bytes_per_s[0], self.flops_per_s[0]
        x = np.log2(np.asarray(self.rows, dtype=float))
        xq = np.log2(max(rows, 1))
        # Interpolate the time per byte / per FLOP (the reciprocals), which is what adds up linearly.
        bw = 1.0 / np.interp(xq, x, 1.0 / np.asarray(self.mem_bw_bytes_per_s))
        fl = 1.0 / np.interp(xq, x, 1.0 / np.asarray(self.flops_per_s))
        return float(bw), float(fl)


@dataclass(frozen=True)
class OperatorCost:
    name: str
    flops: float
    bytes: float
    time_s: float
    bound: str  # "memory" or "compute"


@dataclass(frozen=True)
class PassCost:
    """One forward pass, broken down. ``time_s`` is what the step uses (a measurement where one exists)."""

    batch: int
    new_tokens: int
    context: int
    flops: float
    weight_bytes: float
    kv_bytes: float
    act_bytes: float
    roofline_time_s: float  # sum over operators of max(memory, compute)
    overhead_time_s: float
    time_s: float
    bound: str  # "memory", "compute" or "overhead": the largest of the three contributions
    measured: bool = False
    operators: tuple[OperatorCost, ...] = ()
    comm_time_s: float = 0.0  # tensor parallelism's all-reduces and logits gather (included in time_s)

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved over the whole pass."""
        return self.flops / max(self.weight_bytes + self.kv_bytes + self.act_bytes, 1.0)


def ridge_combine(t_mem_s: float, t_compute_s: float, p: float) -> float:
    """An operator's time from its memory and compute times: (t_mem^p + t_compute^p)^(1/p). p = inf is the hard
    roofline max (perfect overlap), p = 1 adds them (no overlap); in between, the transition through the ridge is
    smooth, as real kernels' is: near the ridge a GEMM reaches neither peak."""
    if p == float("inf"):
        return max(t_mem_s, t_compute_s)
    if p == 1.0:
        return t_mem_s + t_compute_s
    hi = max(t_mem_s, t_compute_s)
    if hi == 0.0:
        return 0.0
    return hi * ((t_mem_s / hi) ** p + (t_compute_s / hi) ** p) ** (1.0 / p)


def ridge_combine_many(t_mem_s: np.ndarray, t_compute_s: np.ndarray, p: float) -> np.ndarray:
    """`ridge_combine` for arrays."""
    if p == float("inf"):
        return np.maximum(t_mem_s, t_compute_s)
    if p == 1.0:
        return t_mem_s + t_compute_s
    hi = np.maximum(np.maximum(t_mem_s, t_compute_s), 1e-300)
    return hi * ((t_mem_s / hi) ** p + (t_compute_s / hi) ** p) ** (1.0 / p)


def _operator(name: str, flops: float, nbytes: float, bw: float, flop_rate: float,
              p: float = float("inf")) -> OperatorCost:
    """One operator's roofline with the ridge exponent p (`ridge_combine`)."""
    t_mem, t_compute = nbytes / bw, flops / flop_rate
    return OperatorCost(name, flops, nbytes, ridge_combine(t_mem, t_compute, p),
                        "memory" if t_mem >= t_compute else "compute")


ACTIVATION_BYTES = 2  # bf16 activations on the wire
LOGIT_BYTES = 4  # fp32 logits gathered from the vocabulary shards


def comm_time_s(hardware: HardwareSpec, model: ModelSpec, rows: np.ndarray | float) -> np.ndarray | float:
    """What one pass of a `tp`-way shard waits on the interconnect: two all-reduces of the residual stream per layer
    (after attention's output projection and after the MLP's down projection) and one all-gather of the logits,
    not overlapped with compute (as in vLLM's and Megatron-LM's tensor parallelism)."""
    if model.tp == 1:
        return 0.0 * rows
    link = hardware.interconnect
    if link is None:
        raise SpecsimError(f"{hardware.name} has no interconnect to split a model over; give a preset with one "
                           "(hardware.toml) or --tp 1")
    residual = rows * model.d_model * ACTIVATION_BYTES
    logits = rows * model.vocab_size * model.tp * LOGIT_BYTES
    return 2 * model.n_layers * link.all_reduce_s(model.tp, residual) + link.all_gather_s(model.tp, logits)


def activation_bytes(model: ModelSpec, rows: int) -> float:
    """Bytes of activations read and written by one layer stack's linear maps for `rows` token rows."""
    d, hd = model.d_model, model.head_dim
    per_layer = (
        d + (model.n_heads + 2 * model.n_kv_heads) * hd  # qkv in, out
        + model.n_heads * hd + d  # o in, out
        + d + 2 * model.mlp_width_per_token  # gate/up in, out (the experts a token runs)
        + model.mlp_width_per_token + d  # down in, out
    )
    head = d + model.vocab_size
    return rows * (model.n_layers * per_layer + head) * model.bytes_per_param


def _log2_weights(axis: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear interpolation along a sorted grid axis in log2, clamped at its ends: the lower and upper knot index
    of each value and its weight on the upper one."""
    if len(axis) == 1:
        zero = np.zeros(v.shape, dtype=np.int64)
        return zero, zero, np.zeros(v.shape)
    x = np.log2(axis.astype(float))
    xq = np.clip(np.log2(np.maximum(v, 1)), x[0], x[-1])
    i = np.clip(np.searchsorted(x, xq, side="right") - 1, 0, len(x) - 2)
    return i, i + 1, (xq - x[i]) / (x[i + 1] - x[i])


def knots_at(knots: Sequence[tuple[float, float]] | None, batch: np.ndarray | int) -> np.ndarray:
    """Factors at each batch from (batch, factor) knots: log-linear in batch between them, constant beyond, 1 without
    knots."""
    b = np.asarray(batch, dtype=float)
    if not knots:
        return np.ones_like(b)
    xs, fs = zip(*sorted(knots))
    return np.interp(np.log2(np.maximum(b, 1.0)), np.log2(np.asarray(xs, dtype=float)), np.asarray(fs))


@dataclass(frozen=True)
class CostModel:
    """Prices a forward pass of any model on one device.

    ``linear_rates`` and ``attention_rates`` give achieved bandwidth and FLOP/s by row count; ``measured`` maps
    (model name, batch, new tokens, context) to a measured pass time that wins over the formula. A pass measured at
    the same batch and new tokens but other contexts anchors the prediction too (see ``_anchored``).
    """

    hardware: HardwareSpec
    linear_rates: RateTable
    attention_rates: RateTable
    overheads: Overheads = field(default_factory=Overheads)
    measured: Mapping[tuple[str, int, int, int], float] = field(default_factory=dict)
    label: str = "roofline"
    measured_models: tuple[ModelSpec, ...] = ()  # the shapes the measurements belong to (for the ratio grid)
    attention_overlap: bool = True  # attention's KV reads and FLOPs overlap (max); False: they add (eager CPU)
    linear_ridge_p: float = float("inf")  # how the linear layers' memory and compute times combine (ridge_combine)
    drift: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)  # model name -> ((batch,
    # factor), ...): how much slower (> 1) the device runs that model's passes now than when calibrated, from a spot
    # check (`calibrate.validate.spot_check`); log-linear in batch between the knots, constant beyond them
    # ((batch, factor), ...): a speculative step's passes (the target's verification of k + 1 tokens a sequence and
    # the draft's passes) over what `drift` and the formula price them, as a serving benchmark's speculative runs
    # measured them (`calibrate.bench_import.fit_spec`); log-linear in batch between the knots, constant beyond;
    # empty: 1
    spec_drift: tuple[tuple[float, float], ...] = ()
    expert_sharing: float = DEFAULT_EXPERT_SHARING  # how a sequence's tokens share experts (ModelSpec.experts_touched)
    routing_skew: float = 0.0  # Zipf exponent of the experts' popularity (0: uniform routing)
    routing_power_law: float = 0.0  # > 1: AIConfigurator's measured routing, this power law (simulator.routing)
    # A prompt's pass (and the engine's work around it) as a serving benchmark's TTFT measured it over what this model
    # prices (calibrate.bench_import): applied by `StepCosts` to prefills, never to decode or verify passes
    prefill_scale: float = 1.0
    # (batch, rows a pass, context) a calibration's measurements reached where no measured pass says it: a serving
    # benchmark's runs (`simulator.measured_range`)
    reach: tuple[int, int, int] | None = None
    kernels: KernelTerms = field(default_factory=KernelTerms)  # a preset's measured kinds (simulator.kernel_kinds)

    @property
    def draft_catchup_tokens(self) -> int:
        """Tokens in a step's first draft pass (`EngineOverheads.draft_catchup_tokens`: the engine's habit)."""
        return self.overheads.engine.draft_catchup_tokens

    def drift_factor(self, model: ModelSpec, batch: np.ndarray | int) -> np.ndarray:
        """The drift factor of `model`'s passes at each batch (1 where no spot check was made)."""
        return knots_at(self.drift.get(model.name), batch)

    def spec_factor(self, batch: np.ndarray | int) -> np.ndarray:
        """A speculative step's passes' factor at each batch (`spec_drift`; 1 without one)."""
        return knots_at(self.spec_drift, batch)

    @cached_property
    def _measured_by_shape(self) -> dict[tuple[str, int, int], list[tuple[int, float]]]:
        index: dict[tuple[str, int, int], list[tuple[int, float]]] = {}
        for (name, b, n, c), t in self.measured.items():
            index.setdefault((name, b, n), []).append((c, t))
        return {k: sorted(v) for k, v in index.items()}

    @cached_property
    def _formula(self) -> CostModel:
        """This model without measurements or drift: the fitted formula alone."""
        return replace(self, measured={}, drift={})

    @cached_property
    def _grids(self) -> dict[str, tuple[tuple[np.ndarray, np.ndarray], ...]]:
        """Per measured model, the full (batch, new tokens) grids its measurements form: new token counts measured
        at the same batches make one grid (a calibration's decoding passes, 1..8 new tokens at every batch; its
        prefill-shaped passes, 64 and 128 tokens at batches 1 and 2), ordered by new tokens."""
        out = {}
        for name in self._specs:
            batches_of: dict[int, set[int]] = {}
            for m, b, n in self._measured_by_shape:
                if m == name:
                    batches_of.setdefault(n, set()).add(b)
            columns: dict[frozenset[int], list[int]] = {}
            for n, bs in batches_of.items():
                columns.setdefault(frozenset(bs), []).append(n)
            grids = sorted(((np.array(sorted(bs)), np.array(sorted(ns))) for bs, ns in columns.items()),
                           key=lambda g: int(g[1][0]))
            if grids:
                out[name] = tuple(grids)
        return out

    def _grid_weights(self, name: str, new_tokens: int) -> list[tuple[int, float]]:
        """Which grids (indices into _grids) price `new_tokens`, with weights: the grid whose new-token range holds
        it; between two grids' ranges, both, log-linearly in new tokens (so the price has no jump between a
        decoding grid and a prefill grid); beyond every range, the nearest."""
        grids = self._grids[name]
        for i, (_, ns) in enumerate(grids):
            if ns[0] <= new_tokens <= ns[-1]:
                return [(i, 1.0)]
        below = [i for i, (_, ns) in enumerate(grids) if ns[-1] < new_tokens]
        above = [i for i, (_, ns) in enumerate(grids) if ns[0] > new_tokens]
        lo = max(below, key=lambda i: grids[i][1][-1]) if below else None
        hi = min(above, key=lambda i: grids[i][1][0]) if above else None
        if lo is None or hi is None:
            nearest = lo if hi is None else hi
            assert nearest is not None
            return [(nearest, 1.0)]
        x0, x1 = np.log2(grids[lo][1][-1]), np.log2(grids[hi][1][0])
        w = float((np.log2(new_tokens) - x0) / (x1 - x0))
        return [(lo, 1.0 - w), (hi, w)]

    @cached_property
    def _ratio_tables(self) -> dict[tuple[str, int, int], np.ndarray]:
        return {}

    def _context_interpolated(self, model: ModelSpec, batch: int, new_tokens: int, context: int) -> float | None:
        """A shape measured at other contexts, carried to `context`: linear interpolation between the two measured
        contexts around it, or the nearest one plus the formula's change with context."""
        points = self._measured_by_shape.get((model.name, batch, new_tokens))
        if not points:
            return None
        below = [p for p in points if p[0] <= context]
        above = [p for p in points if p[0] >= context]
        if below and above:
            (c0, t0), (c1, t1) = below[-1], above[0]
            return t0 if c1 == c0 else t0 + (t1 - t0) * (context - c0) / (c1 - c0)
        c0, t0 = (below[-1] if below else above[0])
        f = self._formula
        return t0 + f.pass_time_s(model, batch, new_tokens, context) - f.pass_time_s(model, batch, new_tokens, c0)

    def _anchored(self, model: ModelSpec, batch: int, new_tokens: int, context: int, formula_s: float) -> float | None:
        """Measurements carried to a pass that was not measured itself. A shape measured at other contexts:
        interpolated in context. Any other shape of a measured model: the formula times the measured / formula
        ratio, bilinear in (log2 batch, log2 new tokens) over the grids of measured shapes around those new
        tokens (`_ratio`; each shape carried to this context first) and held at its edges (beyond the largest
        measured batch, faded into that batch's mean ratio over one doubling), so predictions pass
        through every measurement and move smoothly between them."""
        own = self._context_interpolated(model, batch, new_tokens, context)
        if own is not None:  # this shape was measured at other contexts
            return own
        if self._specs.get(model.name) == model and model.name in self._grids:
            return formula_s * float(self._ratio(model, np.array([batch]), np.array([new_tokens]), context)[0])
        return None

    @cached_property
    def _specs(self) -> dict[str, ModelSpec]:
        return {m.name: m for m in self.measured_models}

    @classmethod
    def from_hardware(cls, hardware: HardwareSpec, dtype: str = "bf16", datasheet: bool = False) -> CostModel:
        """The uncalibrated model: datasheet peaks times the preset's assumed efficiencies and overheads.

        ``datasheet=True`` is the pure roofline (100 % of peak, no overheads) used as a baseline.
        """
        bw, peak = hardware.mem_bw_bytes_per_s, hardware.peak_flops(dtype)
        if datasheet:
            rates = RateTable.constant(bw, peak)
            return cls(hardware, rates, rates, Overheads(), label="datasheet")
        if hardware.rate_curve:  # achieved fractions of the datasheet by matmul rows, measured
            rows, bw_f, fl_f = zip(*hardware.rate_curve)
            linear = RateTable(tuple(rows), tuple(bw * f for f in bw_f), tuple(peak * f for f in fl_f))
        else:
            linear = RateTable.constant(bw * hardware.bw_efficiency, peak * hardware.flops_efficiency)
        attention = RateTable.constant(bw * hardware.attention_bw_efficiency, peak * hardware.flops_efficiency)
        return cls(hardware, linear, attention, hardware.overheads, label="preset",
                   linear_ridge_p=hardware.ridge_p, kernels=hardware.kernels)

    def _kernel_kinds(self, model: ModelSpec, b: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, ...]:
        return kernel_kinds(self.kernels, self.hardware, model, b, n, self.linear_rates, self.linear_ridge_p,
                            self.expert_sharing, self.routing_skew, self.routing_power_law, ridge_combine_many)

    def pass_cost(self, model: ModelSpec, batch: int, new_tokens: int, context: int) -> PassCost:
        """Cost of one pass of `model` over `batch` sequences x `new_tokens` tokens on `context` cached ones."""
        if batch < 1 or new_tokens < 1 or context < 0:
            raise ValueError(f"a pass needs batch >= 1, new_tokens >= 1, context >= 0; got {batch}, "
                             f"{new_tokens}, {context}")
        if model.ep > 1 or model.dp > 1:  # experts spread over GPUs, attention in groups (simulator.moe_parallel)
            from .moe_parallel import pass_cost

            return pass_cost(self, model, batch, new_tokens, context)
        rows = batch * new_tokens
        weight_bytes = float(model.linear_weight_bytes(batch, new_tokens, self.expert_sharing, self.routing_skew,
                                                       self.routing_power_law))
        act_bytes = activation_bytes(model, rows)
        bw, flop_rate = self.linear_rates.at(rows)
        kinds = self._kernel_kinds(model, np.array([float(batch)]), np.array([float(new_tokens)]))
        moe_s, moe_bytes, moe_flops, floors_s = (float(x[0]) for x in kinds)  # (the MoE layers leave the linear op)
        linear = _operator("linear", 2.0 * model.matmul_params * rows - moe_flops,
                           weight_bytes - moe_bytes + act_bytes, bw, flop_rate, self.linear_ridge_p)
        moe = ()
        if moe_s:  # memory or compute bound at the fused-MoE kernel's own rates, not the linear layers'
            mk = self.kernels.moe_kernel(moe_kernel_dtype(model))
            moe_bw = self.hardware.mem_bw_bytes_per_s * mk.bw_efficiency
            moe_flop_rate = self.hardware.peak_flops(MOE_COMPUTE.get(mk.dtype, "bf16")) * mk.flops_efficiency
            moe = (OperatorCost("moe", moe_flops, moe_bytes, moe_s,
                                "memory" if moe_bytes / moe_bw >= moe_flops / moe_flop_rate else "compute"),)

        kv_read = batch * float(model.kv_bytes_at(context + new_tokens))
        kv_write = batch * new_tokens * model.kv_bytes_per_token
        attn_flops = float(model.attention_flops(rows, context, new_tokens))
        bw_a, flop_rate_a = self.attention_rates.at(rows)
        attention = _operator("attention", attn_flops, kv_read + kv_write, bw_a, flop_rate_a,
                              float("inf") if self.attention_overlap else 1.0)

        o = self.overheads
        overhead = (o.pass_s + o.layer_s * model.n_layers + o.row_s * rows
                    + o.sequence_layer_s * batch * model.n_layers + floors_s)
        if o.graphs is not None:  # above the engine's capture ceiling: the layers' launches from the host
            overhead += float(o.graphs.eager_s(batch, new_tokens, model.n_layers))
        roofline = linear.time_s + attention.time_s + moe_s
        comm = float(comm_time_s(self.hardware, model, rows))
        mem_t = sum(op.time_s for op in (linear, attention, *moe) if op.bound == "memory")
        comp_t = roofline - mem_t
        bound = max((mem_t, "memory"), (comp_t, "compute"), (overhead, "overhead"))[1]
        measured_s = self.measured.get((model.name, batch, new_tokens, context))
        anchored_s = None if measured_s is not None or not self.measured else self._anchored(
            model, batch, new_tokens, context, roofline + overhead + comm)
        return PassCost(
            batch=batch,
            new_tokens=new_tokens,
            context=context,
            flops=linear.flops + attention.flops + moe_flops,
            weight_bytes=weight_bytes,
            kv_bytes=kv_read + kv_write,
            act_bytes=act_bytes,
            roofline_time_s=roofline,
            overhead_time_s=overhead,
            time_s=next(t for t in (measured_s, anchored_s, roofline + overhead + comm) if t is not None)
            * float(self.drift_factor(model, batch)),
            bound=bound,
            measured=measured_s is not None,
            operators=(linear, attention, *moe),
            comm_time_s=comm,
        )

    def pass_time_s(self, model: ModelSpec, batch: int, new_tokens: int, context: int) -> float:
        return self.pass_cost(model, batch, new_tokens, context).time_s

    def formula_times(self, model: ModelSpec, batch: np.ndarray, new_tokens: np.ndarray | int,
                      context: int) -> tuple[np.ndarray, np.ndarray]:
        """The formula's pass time (no measurements) for arrays of batch and new tokens at one context, and what
        bounds each pass (0 memory, 1 compute, 2 overhead): `pass_cost`'s arithmetic, vectorised."""
        if model.ep > 1 or model.dp > 1:  # experts spread over GPUs, attention in groups (simulator.moe_parallel)
            from .moe_parallel import formula_times

            return formula_times(self, model, batch, new_tokens, context)
        b, n = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(new_tokens, dtype=float))
        rows = b * n
        bw, fl = self.linear_rates.at_many(rows)
        weights = model.linear_weight_bytes(b, n, self.expert_sharing, self.routing_skew, self.routing_power_law)
        moe_s, moe_bytes, moe_flops, floors_s = self._kernel_kinds(model, b, n)
        lin_mem = (weights - moe_bytes + activation_bytes(model, rows)) / bw
        lin_comp = (2.0 * model.matmul_params * rows - moe_flops) / fl
        lin = ridge_combine_many(lin_mem, lin_comp, self.linear_ridge_p)
        kv = b * model.kv_bytes_at(context + n) + b * n * model.kv_bytes_per_token
        bw_a, fl_a = self.attention_rates.at_many(rows)
        att_mem, att_comp = kv / bw_a, model.attention_flops(rows, context, n) / fl_a
        att = ridge_combine_many(att_mem, att_comp, float("inf") if self.attention_overlap else 1.0)
        o = self.overheads
        overhead = (o.pass_s + o.layer_s * model.n_layers + o.row_s * rows + o.sequence_layer_s * b * model.n_layers
                    + floors_s)
        if o.graphs is not None:  # above the engine's capture ceiling: the layers' launches from the host
            overhead = overhead + o.graphs.eager_s(b, n, model.n_layers)
        mem_t = (np.where(lin_mem >= lin_comp, lin, 0.0) + np.where(att_mem >= att_comp, att, 0.0)
                 + np.where(moe_bytes / bw >= moe_flops / fl, moe_s, 0.0))
        comp_t = lin + att + moe_s - mem_t
        bound = np.argmax(np.stack([mem_t, comp_t, overhead]), axis=0)
        return lin + att + moe_s + overhead + comm_time_s(self.hardware, model, rows), bound

    def pass_times(self, model: ModelSpec, batch: np.ndarray, new_tokens: np.ndarray | int,
                   context: int) -> np.ndarray:
        """`pass_time_s` for arrays of batch and new tokens (broadcast) at one context: the same numbers."""
        if self.drift:
            return replace(self, drift={}).pass_times(model, batch, new_tokens, context) * self.drift_factor(
                model, np.broadcast_arrays(np.asarray(batch), np.asarray(new_tokens))[0])
        formula, _ = self.formula_times(model, batch, new_tokens, context)
        if not self.measured:
            return formula
        b, n = np.broadcast_arrays(np.asarray(batch, dtype=np.int64), np.asarray(new_tokens, dtype=np.int64))
        out = formula.copy()
        if self._specs.get(model.name) == model and model.name in self._grids:
            out = formula * self._ratio(model, b, n, context)
        for bi, ni in set(zip(b.ravel().tolist(), n.ravel().tolist())):
            t = self._context_interpolated(model, bi, ni, context)  # a measured shape (at this context: its time)
            if t is not None:
                out[(b == bi) & (n == ni)] = t
        return out

    def _ratio(self, model: ModelSpec, b: np.ndarray, n: np.ndarray, context: int) -> np.ndarray:
        """The measured / formula ratio at each (batch, new tokens): bilinear in (log2 batch, log2 new tokens) over
        the grid that holds those new tokens (`_grid_weights`), held at its edges and faded into the largest
        measured batch's mean ratio beyond it (as `_anchored`)."""
        b, n = np.broadcast_arrays(b, n)
        out = np.zeros(b.shape)
        for v in np.unique(n).tolist():
            at = n == v
            for g, w in self._grid_weights(model.name, int(v)):
                bs, ns = self._grids[model.name][g]
                R = self._ratio_tables.get((model.name, g, context))
                if R is None:
                    R = self._ratio_tables[(model.name, g, context)] = np.array(
                        [[self._context_interpolated(model, int(bb), int(nn), context)
                          / self._formula.pass_time_s(model, int(bb), int(nn), context) for nn in ns] for bb in bs])
                i0, i1, fb = _log2_weights(bs, b[at])
                j0, j1, fn = _log2_weights(ns, np.full(int(at.sum()), v))
                top = R[i0, j0] * (1 - fn) + R[i0, j1] * fn
                bottom = R[i1, j0] * (1 - fn) + R[i1, j1] * fn
                r = top * (1 - fb) + bottom * fb
                # Past the largest measured batch the ratio of each new-token count at that batch fades, over one
                # doubling, into their geometric mean there: that batch's level carries on, the per-shape wiggles
                # of its measurements (noise, a block of rounds that ran slow) do not, and the fitted formula's
                # shape in rows takes over (a quick calibration measured batch 8 and `predict` asks for 64).
                fade = np.clip(np.log2(np.maximum(b[at], 1) / bs[-1]), 0.0, 1.0)
                edge = float(np.exp(np.mean(np.log(R[-1]))))
                out[at] += w * (r * (1 - fade) + edge * fade)
        return out

    def measured_batch_times(self, name: str, batches: np.ndarray) -> np.ndarray | None:
        """What a measured pass of `name` over one new token and no context (prediction heads: one hidden state
        per sequence) took at each batch: the measurements, log-linear in batch between them and flat beyond;
        None where `name` was never measured so."""
        points = sorted((b, t) for (m, b, n, c), t in self.measured.items() if m == name and n == 1 and c == 0)
        if not points:
            return None
        xs, ts = zip(*points)
        b = np.log2(np.maximum(np.asarray(batches, dtype=float), 1.0))
        return np.interp(b, np.log2(np.asarray(xs, dtype=float)), np.asarray(ts, dtype=float))

    def linear_times(self, weight_bytes: float, flops: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Linear maps outside a decoder's pass (a head's fc, Medusa's heads): `weight_bytes` read once, `flops`
        over `rows` token rows, on the linear layers' roofline."""
        bw, fl = self.linear_rates.at_many(np.asarray(rows, dtype=float))
        return ridge_combine_many(weight_bytes / bw, np.asarray(flops, dtype=float) / fl, self.linear_ridge_p)

    def plain_step_times(self, model: ModelSpec, batch: np.ndarray, context: int) -> np.ndarray:
        e = self.overheads.engine.plain
        return self.pass_times(model, batch, 1, context) + e.fixed_s + e.per_sequence_s * np.asarray(batch)

    def plain_step_s(self, model: ModelSpec, batch: int, context: int) -> float:
        """One step of plain decoding: a one-token pass plus the engine's work around it."""
        return self.pass_time_s(model, batch, 1, context) + self.overheads.engine.plain.at(batch)


def memory_needed_bytes(target: ModelSpec, draft: ModelSpec | None, batch: int, context_tokens: int) -> float:
    """Resident weights of both models plus both KV caches holding `context_tokens` per sequence."""
    total = target.resident_weight_bytes + batch * target.kv_bytes_at(context_tokens)
    if draft is not None:
        total += draft.resident_weight_bytes + batch * draft.kv_bytes_at(context_tokens)
    return total
