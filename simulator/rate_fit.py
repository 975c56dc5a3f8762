"""Fit the pass-cost model to measured pass times by least squares, and measure its error on held-out points.

The model a measured pass time is fitted to (per pass of model m, B sequences x n new tokens on c cached ones):

    t = pass_s + layers_m * layer_s + rows * row_s + B * layers_m * sequence_layer_s
        + linear_bytes_m(rows) * s(rows) + kv_bytes * h + attention_flops * g

with rows = B x n (the per-sequence term is each sequence's own attention set-up and cache write in every layer:
eight sequences of one token cost more than one sequence of eight). A constant shared by every row count is
confounded with s(rows) for one model alone; one-row passes of "overhead probes" (the same decoder only 32 wide,
at 1 and 8 layers, whose passes are nothing but overhead) pin the fixed terms down. Only their one-row passes are
used: several-row GEMMs of 32-wide matrices pay a set-up cost per call that the real models' GEMMs do not show,
and it would leak into s(rows).

s(rows) is the time per byte of the linear layers, piecewise linear in log2(rows) between knots at the measured
row counts, so that a one-row GEMV and a several-row GEMM (different kernels, a large jump on CPUs)
each get their own value rather than an average. Every term is linear in the unknowns; the fit minimises the
*relative* squared error with all unknowns non-negative (Lawson-Hanson active set).

The fitted s(rows) becomes the cost model's rate table (see `fit_cost_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.cost import CostModel, RateTable, activation_bytes
from simulator.specs import DEFAULT_EXPERT_SHARING, HardwareSpec, ModelSpec, Overheads

SMOOTHNESS = 0.1
KNOT_LADDER = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096)


def nnls(A: np.ndarray, b: np.ndarray, max_iter: int = 500) -> np.ndarray:
    """min ||A x - b|| subject to x >= 0 (Lawson and Hanson 1974, ch. 23)."""
    m, n = A.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = A.T @ (b - A @ x)
    tol = 10 * np.finfo(float).eps * np.linalg.norm(A, 1) * max(m, n)
    for _ in range(max_iter):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
        w = A.T @ (b - A @ x)
    return x


@dataclass(frozen=True)
class PassPoint:
    model: str
    batch: int
    new_tokens: int
    context: int
    time_s: float

    @property
    def rows(self) -> int:
        return self.batch * self.new_tokens


@dataclass(frozen=True)
class FitResult:
    cost: CostModel
    knots: tuple[int, ...]
    seconds_per_linear_byte: tuple[float, ...]
    kv_seconds_per_byte: float
    bounds: tuple[str, ...] = ()  # each rate the fit put beyond the device's ceiling (held there, or flagged)


def choose_knots(rows: Sequence[int]) -> tuple[int, ...]:
    lo, hi = min(rows), max(rows)
    knots = [k for k in KNOT_LADDER if lo <= k <= hi]
    if not knots or knots[0] != lo:
        knots.insert(0, lo)
    if knots[-1] != hi:
        knots.append(hi)
    return tuple(sorted(set(knots)))


def _interp_weights(knots: Sequence[int], rows: int) -> np.ndarray:
    x = np.log2(np.asarray(knots, dtype=float))
    xq = np.clip(np.log2(rows), x[0], x[-1])
    w = np.zeros(len(knots))
    if len(knots) == 1:
        w[0] = 1.0
        return w
    i = int(np.clip(np.searchsorted(x, xq, side="right") - 1, 0, len(knots) - 2))
    f = (xq - x[i]) / (x[i + 1] - x[i])
    w[i], w[i + 1] = 1.0 - f, f
    return w


N_FIXED = 4  # pass_s, layer_s, row_s, sequence_layer_s


def design_row(spec: ModelSpec, p: PassPoint, knots: Sequence[int],
               sharing: float = DEFAULT_EXPERT_SHARING) -> np.ndarray:
    linear_bytes = float(spec.linear_weight_bytes(p.batch, p.new_tokens, sharing)) + activation_bytes(spec, p.rows)
    kv_bytes = p.batch * (float(spec.kv_bytes_at(p.context + p.new_tokens)) + p.new_tokens * spec.kv_bytes_per_token)
    fixed = [1.0, spec.n_layers, p.rows, p.batch * spec.n_layers]
    attn_flops = float(spec.attention_flops(p.rows, p.context, p.new_tokens))
    return np.concatenate([fixed, linear_bytes * _interp_weights(knots, p.rows), [kv_bytes, attn_flops]])


def fit_cost_model(points: Sequence[PassPoint], specs: Mapping[str, ModelSpec], hardware: HardwareSpec,
                   gemm_peak_flops_per_s: float, stream_bw_bytes_per_s: float, dtype: str,
                   smoothness: float = SMOOTHNESS, floor_s_per_byte: float = 0.0,
                   ceiling_bw_bytes_per_s: float | None = None, ceiling_flops_per_s: float | None = None,
                   per_row_term: bool = True, compute_term: bool = False,
                   expert_sharing: float = DEFAULT_EXPERT_SHARING) -> FitResult:
    """Least-squares fit of overheads and the per-row-count linear rate to `points`.

    The time per byte s(rows) is constrained to be non-decreasing in rows (a pass over more rows never costs less:
    an engine could always pad to the cheaper shape), by fitting its increments between knots, all non-negative.
    Increments are penalised with weight `smoothness` (in units of relative error of the largest model's pass per
    relative step in s): knots that few points touch follow their neighbours, while a step that many points
    support (a GEMV turning into a GEMM) survives. `floor_s_per_byte` (e.g. one over the datasheet bandwidth) is the
    least time per weight byte any row count may take: few points from an engine cannot then trade a bandwidth above
    the hardware's for overheads. `ceiling_bw_bytes_per_s` and `ceiling_flops_per_s` (a datasheet's peaks) bound
    every fitted rate: a rate a few points put above what the device can do (an attention FLOP rate of 93 PFLOP/s
    on an H100, say) is held at the ceiling, and `FitResult.bounds` says so. Without `per_row_term` the fit has no
    cost per token row that every model pays alike: with one model's passes alone (an engine's target steps) it
    cannot tell such a cost from work that grows with the model, and a draft pass would pay the target's. With
    `compute_term` the linear layers' time is their weight reads plus their FLOPs at one fitted rate, added (a
    GPU engine's step times, as the presets describe them: `HardwareSpec.ridge_p` = 1), so a pass of more rows or of
    another model costs its own FLOPs; the rate is held at the ceiling.
    """
    knots = choose_knots([p.rows for p in points])
    K = len(knots)
    if ceiling_bw_bytes_per_s:  # no weight byte read faster than the device's bandwidth
        floor_s_per_byte = max(floor_s_per_byte, 1.0 / ceiling_bw_bytes_per_s)
    times = np.array([p.time_s for p in points])
    A = np.array([design_row(specs[p.model], p, knots, expert_sharing) for p in points]) / times[:, None]
    if compute_term:  # one more unknown, last: seconds per linear-layer FLOP
        flops = np.array([2.0 * specs[p.model].matmul_params * p.rows for p in points]) / times
        A = np.concatenate([A, flops[:, None]], axis=1)
    if not per_row_term:
        A[:, 2] = 0.0  # the row_s column (`design_row`'s fixed terms: pass, layer, row, sequence x layer)
    cumulative = np.tril(np.ones((K, K)))  # s = cumulative @ increments
    # s = floor + cumulative increments: the floor's share of each (relative) time moves to the right-hand side;
    # the interpolation weights of a point sum to one, so its linear-layer columns sum to its bytes / time.
    b = 1.0 - floor_s_per_byte * A[:, N_FIXED:N_FIXED + K].sum(axis=1)
    A[:, N_FIXED:N_FIXED + K] = A[:, N_FIXED:N_FIXED + K] @ cumulative
    if K > 1 and smoothness > 0:
        big = max(points, key=lambda p: specs[p.model].weight_bytes_per_pass)
        w_ref = specs[big.model].weight_bytes_per_pass / big.time_s
        D = np.zeros((K - 1, A.shape[1]))
        for i in range(K - 1):
            D[i, N_FIXED + i + 1] = w_ref * smoothness
        A, b = np.vstack([A, D]), np.concatenate([b, np.zeros(K - 1)])
    # Physics as a constraint, not a correction: seconds per KV byte, per attention FLOP and (with `compute_term`)
    # per linear FLOP are at least one over the ceilings; x = lower + y with y >= 0, the lower part moved to the
    # right-hand side (the smoothness rows have no entries in these columns).
    n = A.shape[1]
    kv_col, attn_col = (n - 3, n - 2) if compute_term else (n - 2, n - 1)
    lower = np.zeros(n)
    if ceiling_bw_bytes_per_s:
        lower[kv_col] = 1.0 / ceiling_bw_bytes_per_s
    if ceiling_flops_per_s:
        lower[attn_col] = 1.0 / ceiling_flops_per_s
        if compute_term:
            lower[n - 1] = 1.0 / ceiling_flops_per_s
    b = b - A @ lower
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    y = nnls(A / scale, b) / scale
    x = lower + y
    at_bound = [j for j in (kv_col, attn_col, n - 1) if lower[j] > 0 and y[j] <= 1e-9 * lower[j]]
    pass_s, layer_s, row_s, sequence_layer_s = x[:N_FIXED]
    s = floor_s_per_byte + cumulative @ x[N_FIXED:N_FIXED + K]
    f_s = x[-1] if compute_term else 0.0
    h, g = (x[-3], x[-2]) if compute_term else (x[-2], x[-1])
    # Rates from s(rows): bandwidth 1 / s at every knot; the compute rate is the GEMM peak while s is flat, and the
    # rate implied at the largest knot once s has clearly risen (compute-bound there), so that extrapolating past
    # the grid grows linearly with rows instead of staying flat. Each knot keeps FLOP/s >= its implied rate, so the
    # roofline max(bytes / bw, flops / flop_rate) reproduces W s(rows) at every knot.
    bpp = next(iter(specs.values())).bytes_per_param
    s = np.maximum.accumulate(np.maximum(s, 1.0 / (10 * stream_bw_bytes_per_s)))  # guard knots nothing pinned
    implied = 2.0 * np.asarray(knots) / (bpp * s)
    compute_rate = implied[-1] if s[-1] > 1.3 * s.min() else gemm_peak_flops_per_s
    bws = 1.0 / s
    flops = np.maximum(compute_rate, implied)
    if compute_term:
        flops = np.full(K, 1.0 / f_s if f_s > 0 else (ceiling_flops_per_s or gemm_peak_flops_per_s))
    kv_bw = 1.0 / h if h > 0 else stream_bw_bytes_per_s
    attention_flops = 1.0 / g if g > 0 else gemm_peak_flops_per_s
    bounds: list[str] = []
    bw_text = f"{(ceiling_bw_bytes_per_s or 0) / 1e9:,.0f} GB/s"
    flops_text = f"{(ceiling_flops_per_s or 0) / 1e12:,.0f} TFLOP/s"
    names = {kv_col: f"KV-cache bandwidth at the ceiling, {bw_text}",
             attn_col: f"attention FLOP rate at the ceiling, {flops_text}",
             n - 1: f"linear-layer FLOP rate at the ceiling, {flops_text}"}
    bounds += [f"{names[j]} (the unconstrained fit would pass it)" for j in sorted(set(at_bound))]
    at_floor = int(np.sum(s <= floor_s_per_byte * (1 + 1e-9))) if floor_s_per_byte > 0 else 0
    if at_floor:
        bounds.append(f"linear-layer bandwidth at its bound, {1.0 / floor_s_per_byte / 1e9:,.0f} GB/s, at {at_floor} "
                      f"of {K} row counts")
    # The linear table's FLOP column is no fitted rate: it is the least rate that keeps its compute term from
    # binding, as s(rows) and the per-row term already hold the linear layers' whole time. What physics bounds is
    # that time: at the largest row count, the largest model's linear FLOPs may not run faster than the ceiling.
    if ceiling_flops_per_s is not None and not compute_term:
        big = max(specs.values(), key=lambda m: m.matmul_params)
        rows = knots[-1]
        t = (big.weight_bytes_per_pass + activation_bytes(big, rows)) * s[-1] + rows * row_s
        rate = 2.0 * big.matmul_params * rows / t
        if rate > ceiling_flops_per_s * (1 + 1e-9):
            bounds.append(f"linear layers of {big.name} at {rows:,} rows run at {rate / 1e12:,.0f} TFLOP/s in the "
                          f"fit, above the ceiling {ceiling_flops_per_s / 1e12:,.0f} TFLOP/s: passes that large are "
                          "predicted too fast")
    linear = RateTable(knots, tuple(float(b) for b in bws), tuple(float(f) for f in flops))
    attention = RateTable.constant(kv_bw, attention_flops)
    overheads = Overheads(pass_s=pass_s, layer_s=layer_s, row_s=row_s, sequence_layer_s=sequence_layer_s)
    # Eager attention on the measured device: the KV reads and the FLOPs were fitted as separate, added terms.
    cost = CostModel(hardware, linear, attention, overheads, label="calibrated", attention_overlap=False,
                     linear_ridge_p=1.0 if compute_term else float("inf"), expert_sharing=expert_sharing)
    return FitResult(cost, knots, tuple(float(v) for v in s), float(h), tuple(bounds))


def errors(cost: CostModel, points: Sequence[PassPoint], specs: Mapping[str, ModelSpec]) -> dict:
    """Relative errors (predicted / measured - 1) of `cost` on `points`, with median and p90 of |error|."""
    errs = []
    per_point = []
    for p in points:
        pred = cost.pass_time_s(specs[p.model], p.batch, p.new_tokens, p.context)
        e = pred / p.time_s - 1.0
        errs.append(e)
        per_point.append({"model": p.model, "batch": p.batch, "new_tokens": p.new_tokens, "context": p.context,
                          "measured_s": p.time_s, "predicted_s": pred, "rel_error": e})
    a = np.abs(errs) if errs else np.zeros(1)
    return {"n": len(points), "median_abs_err": float(np.median(a)), "p90_abs_err": float(np.percentile(a, 90)),
            "max_abs_err": float(a.max()), "points": per_point}


def pool_adjacent_violators(y: Sequence[float]) -> np.ndarray:
    """The non-decreasing sequence closest to y in least squares (Ayer et al. 1955): violating neighbours are
    replaced by their mean."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return np.concatenate([np.full(int(c), t / c) for t, c in blocks])


def monotone_times(times: Mapping[tuple[str, int, int, int], float]) -> dict[tuple[str, int, int, int], float]:
    """Measured pass times made non-decreasing in new tokens and in batch size (per model and context), by
    alternating isotonic regressions along each axis until neither is violated: a noisy point, or a CPU's one-row
    GEMV slower than a two-row GEMM, cannot make a speculative step predict cheaper than a plain one."""
    out = dict(times)
    groups: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for model, b, n, c in times:
        groups.setdefault((model, c), set()).add((b, n))
    for (model, c), shape in groups.items():
        for _ in range(20):
            changed = False
            for axis in (0, 1):
                lines: dict[int, list[tuple[int, int]]] = {}
                for bn in shape:
                    lines.setdefault(bn[1 - axis], []).append(bn)
                for members in lines.values():
                    members.sort(key=lambda bn: bn[axis])
                    keys = [(model, b, n, c) for b, n in members]
                    fixed = pool_adjacent_violators([out[k] for k in keys])
                    for k, v in zip(keys, fixed):
                        if abs(out[k] - v) > 1e-15 * max(abs(v), 1.0):
                            changed = True
                        out[k] = float(v)
            if not changed:
                break
    return out


def heldout_split(points: Sequence[PassPoint], fraction: float,
                  rng: np.random.Generator) -> tuple[list[PassPoint], list[PassPoint]]:
    """Hold out about `fraction` of the points, stratified by (model, rows): every row count of every model keeps at
    least one training point, so the held-out error measures interpolation across batch, new tokens and context
    rather than the (undefined) value of a rate knot the fit never saw."""
    groups: dict[tuple[str, int], list[PassPoint]] = {}
    for p in points:
        groups.setdefault((p.model, p.rows), []).append(p)
    train: list[PassPoint] = []
    test: list[PassPoint] = []
    for key in sorted(groups):
        g = groups[key]
        order = rng.permutation(len(g))
        n_test = min(len(g) - 1, int(round(fraction * len(g) + rng.random() - 0.5)))
        test += [g[i] for i in order[:n_test]]
        train += [g[i] for i in order[n_test:]]
    return train, test


def verify_ratio_check(cost: CostModel, points: Sequence[PassPoint], target: ModelSpec) -> list[dict[str, Any]]:
    """At batch 1 and the smallest context: t(k + 1 tokens) / t(1 token), measured against the fit's prediction."""
    b1 = {(p.new_tokens, p.context): p.time_s for p in points if p.model == target.name and p.batch == 1}
    if not b1:
        return []
    c = min(ctx for _, ctx in b1)
    if (1, c) not in b1:
        return []
    fitted = cost.pass_time_s(target, 1, 1, c)
    out = []
    for n in sorted(n for n, ctx in b1 if ctx == c and n > 1):
        measured = b1[(n, c)] / b1[(1, c)]
        predicted = cost.pass_time_s(target, 1, n, c) / fitted
        out.append({"k": n - 1, "measured_ratio": measured, "predicted_ratio": predicted,
                    "rel_error": predicted / measured - 1.0})
    return out
