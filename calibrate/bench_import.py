"""`specsim calibrate --from bench:MANIFEST.toml`: a deployment's own serving benchmarks turned into the simulator's
costs, on top of a hardware preset or a calibrated profile (the manifest's [setup]).

What is fitted, from the runs the manifest marks ``fit = true``:

- **the step**: each plain run's decode step is its median inter-token latency (TPOT p50 where the file has no
  ITL), at the batch the run held. That batch is first the client's own figure, output throughput x step time
  (every running request emits one token a step), then the replay's time-weighted batch (`calibrate.bench_replay`):
  the throughput counts idle time at light load, the replay does not. The step over what the cost model prices at
  that batch and the run's mean context (its pass time; the engine's work outside the pass as priced) is a factor
  on every pass at that batch, log-linear in batch between the runs' batches and constant beyond them
  (`CostModel.drift`, the mechanism that re-anchors a profile by spot checks). Its uncertainty: the standard error
  of the median step, from the per-request ITLs where the file keeps them, else from the p50-p99 spread of the ITL
  over the run's output tokens.
- **the step, request by request**: where every plain fit run keeps each request's send time and TPOT (GuideLLM,
  AIPerf's records), the replay of a plain run draws nothing, so each simulated request can be set against its
  measured self: the factors at batches 1, 2, 4, ... (up to the largest batch a fit run held) are then fitted to
  every request's TPOT (`fit_by_request`: Levenberg-Marquardt on the log errors, each run weighing as one, its TPOT
  p50 as one more term, neighbouring knots held together lightly), starting from the runs' own factors. A light
  run's TPOT p50 falls between the requests that decoded alone and those that overlapped another, so matching it
  alone sets the step at batch 1 by where that median falls; the requests that decoded alone measure it directly.
- **the prefill**: a factor on every prompt's pass, chosen (bisection, on the log scale) so that the replay of the
  lightest plain run gives its measured TTFT p50 (queueing least disturbs it there).
- **acceptance**: speculative runs' counters (Prometheus scrapes: drafted and accepted tokens), or SGLang's
  ``accept_length``, give the i.i.d. alpha with the same mean acceptance at the run's k; a speculative run with
  neither is matched on its TPOT p50 (bisection on alpha). Without a speculative fit run, [setup] acceptance or the
  profile's measured acceptance is used. A run with its requests' own acceptance (``acceptance_trace``) is replayed
  with it, request by request, in every replay below (`calibrate.bench_replay`).
- **the speculative step**: a factor on a speculative step's passes (the target's verification of k + 1 tokens a
  sequence and the draft's passes) at the batch each speculative fit run held, over what the plain runs' factor
  prices them at (`CostModel.spec_drift`): each scaled by the run's measured TPOT p50 over its replay's until they
  agree (runs within `KNOT_SPAN` share one), from the runs whose acceptance is measured (counters or traces; a
  TPOT-matched acceptance has used that TPOT already); where the runs carry their requests' traces, then fitted
  request by request as the step is. The plain steps say nothing of a pass of k + 1 tokens a sequence or of the
  draft's passes, and what prices them (a llama-bench prompt pass, a preset's roofline and its draft) need not be
  what a served speculative step costs.

Cross-validation by run: each plain fit run is predicted (throughput and TPOT p50) by the fit to the other runs,
where there are at least two.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from calibrate.bench_replay import Replayed, engine_config, replay, request_tpots, run_acceptance
from scenarios.bench_files import BenchRun, Manifest
from simulator import SpecsimError
from simulator.acceptance import Acceptance, IIDAcceptance
from simulator.cost import knots_at
from simulator.policies import PLAIN
from simulator.serving import EngineConfig
from simulator.step_costs import StepCosts

FACTOR_RANGE = (0.05, 20.0)  # a step or prefill factor searched within this range (bisection on its log)
BISECTIONS = 10
REFINE = 3  # rounds of matching the plain fit runs' TPOT p50 (`refine`)
KNOT_SPAN = 1.5  # runs whose batches lie within this ratio share one knot
SPEC_ROUNDS = 6  # rounds of matching the speculative fit runs' TPOT p50 (`fit_spec`)
REQUEST_ROUNDS = 8  # Levenberg-Marquardt iterations of the per-request fit (`fit_by_request`)
REQUEST_SMOOTH = 0.05  # weight of neighbouring knots' squared log difference against the requests' mean square
REQUEST_STEP = 0.03  # finite-difference step on a knot's log factor
SPEC_RANGE = (0.2, 5.0)  # a speculative step's factor is kept within this range


@dataclass(frozen=True)
class StepPoint:
    """A plain fit run's decode step: measured, at the batch the run held, and the factor it sets."""

    label: str
    step_s: float  # median inter-token latency (or TPOT p50)
    step_rel_err: float  # its standard error over itself
    batch_client: float  # output throughput x step
    batch: float  # the replay's time-weighted batch
    context: float  # mean context of its decode steps
    priced_s: float  # what the cost model (no factor) prices a step at that batch and context
    factor: float  # passes' factor at that batch


@dataclass
class BenchFit:
    """The fitted costs and acceptance (module docstring), and how well they hold on the fit runs."""

    base: Any  # scenarios.setup.Setup: the preset or profile fitted on
    config: EngineConfig
    engine: str
    points: list[StepPoint]
    prefill_scale: float
    prefill_from: str
    acceptance: Acceptance | None
    acceptance_from: str
    seed: int
    measured_points: list[StepPoint] = field(default_factory=list)  # the steps as the median ITL gives them
    spec_knots: tuple[tuple[float, float], ...] = ()  # (batch, factor) on a speculative step's passes
    spec_from: str = ""
    request_knots: tuple[tuple[float, float], ...] = ()  # the step's knots fitted request by request (else points')
    request_from: str = ""
    in_sample: list[dict[str, Any]] = field(default_factory=list)
    cross_validated: list[dict[str, Any]] = field(default_factory=list)

    @property
    def knots(self) -> tuple[tuple[float, float], ...]:
        return self.request_knots or knots_of(self.points)

    def costs(self, knots: Sequence[tuple[float, float]] | None = None, prefill_scale: float | None = None,
              spec_knots: Sequence[tuple[float, float]] | None = None) -> StepCosts:
        return costs_with(self.base, self.knots if knots is None else knots,
                          self.prefill_scale if prefill_scale is None else prefill_scale,
                          self.spec_knots if spec_knots is None else spec_knots)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "max_batch": self.config.max_batch, "base": self.base.caption,
                "steps": [p.__dict__ for p in self.points], "knots": [list(k) for k in self.knots],
                "steps_from_itl": [p.__dict__ for p in self.measured_points],
                "spec_knots": [list(k) for k in self.spec_knots], "spec_from": self.spec_from,
                "knots_from": self.request_from or "the plain fit runs' median ITL, refined to their TPOT p50",
                "prefill_scale": self.prefill_scale, "prefill_from": self.prefill_from,
                "acceptance": None if self.acceptance is None else self.acceptance.spec,
                "acceptance_from": self.acceptance_from, "seed": self.seed,
                "in_sample": self.in_sample, "cross_validated": self.cross_validated}


def _groups(points: Sequence[StepPoint]) -> list[list[StepPoint]]:
    """Points whose batches lie within `KNOT_SPAN` of each other's lowest (a run at batch 1.0 and one at 1.1 cannot
    tell a factor at 1.0 from one at 1.1): one knot each."""
    groups: list[list[StepPoint]] = []
    for p in sorted(points, key=lambda p: p.batch):
        if groups and max(p.batch, 1.0) <= KNOT_SPAN * max(groups[-1][0].batch, 1.0):
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


def knots_of(points: Sequence[StepPoint]) -> tuple[tuple[float, float], ...]:
    """(batch, factor) knots, one per group of nearby batches (`_groups`): the geometric means of its runs'."""
    return tuple((float(math.exp(np.mean([math.log(max(p.batch, 1.0)) for p in g]))),
                  float(math.exp(np.mean([math.log(p.factor) for p in g])))) for g in _groups(points))


def costs_with(base: Any, knots: Sequence[tuple[float, float]], prefill_scale: float,
               spec_knots: Sequence[tuple[float, float]] = ()) -> StepCosts:
    """The base's step costs with the passes' factors (the draft's the same), a speculative step's and the
    prefill's."""
    drift = {}
    if knots:
        drift[base.target.name] = tuple(knots)
        if base.draft.module is not None:
            drift[base.draft.module.name] = tuple(knots)
    return StepCosts(replace(base.cost, drift=drift, prefill_scale=prefill_scale,
                             spec_drift=tuple((float(b), float(f)) for b, f in spec_knots)),
                     base.target, base.draft)


def decode_context(run: BenchRun) -> float:
    """Mean context of a run's decode steps: its mean prompt plus half its mean output."""
    if run.per_request:
        return float(run.input_lens.mean() + run.output_lens.mean() / 2)
    return run.input_tokens + run.output_tokens / 2


def measured_step(run: BenchRun) -> tuple[float, float]:
    """A plain run's decode step (median ITL, else TPOT p50) and the standard error of that median over itself:
    1.2533 sigma / sqrt(n) (a median's, for a normal spread), sigma and n from the per-request ITLs where kept, else
    sigma from the p50-p99 gap (2.326 sigma for a normal) and n the run's output tokens."""
    step = run.itl.p50_s if math.isfinite(run.itl.p50_s) and run.itl.p50_s > 0 else run.tpot.p50_s
    if not (math.isfinite(step) and step > 0):
        raise SpecsimError(f"{run.label}: no positive ITL or TPOT p50 to take a step time from")
    if run.itls_s:
        gaps = np.concatenate([g for g in run.itls_s if len(g)]) if any(len(g) for g in run.itls_s) else np.zeros(0)
        if len(gaps) > 1:
            return step, float(1.2533 * gaps.std() / math.sqrt(len(gaps)) / step)
    p99 = run.itl.p99_s if math.isfinite(run.itl.p99_s) else run.tpot.p99_s
    n = max(1.0, run.completed * max(1.0, run.output_tokens - 1 if math.isfinite(run.output_tokens) else 1.0))
    sigma = (p99 - step) / 2.326 if math.isfinite(p99) and p99 > step else 0.0
    return step, float(1.2533 * sigma / math.sqrt(n) / step)


def priced_step(base: Any, batch: float, context: float) -> tuple[float, float]:
    """(the step the cost model prices, the target pass inside it) at a fractional batch: interpolated log-linearly
    between the whole batches around it. Both without the base's own drift (a profile fitted to a benchmark before):
    the factors found are over its formula and replace that drift."""
    costs = StepCosts(replace(base.cost, drift={}), base.target, base.draft)
    lo = max(1, int(math.floor(batch)))
    hi = max(lo, int(math.ceil(batch)))

    def at(b: int) -> tuple[float, float]:
        return (costs.decode_s(b, context, PLAIN), costs.cost.pass_time_s(base.target, b, 1, int(context)))

    (s0, p0), (s1, p1) = at(lo), at(hi)
    w = 0.0 if hi == lo else (math.log(max(batch, 1.0)) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return s0 + (s1 - s0) * w, p0 + (p1 - p0) * w


def _bisect(f: Callable[[float], float], lo: float, hi: float, log: bool = True) -> float:
    """The x in [lo, hi] where the increasing f crosses 0 (the nearer end if it does not)."""
    flo, fhi = f(lo), f(hi)
    if flo >= 0:
        return lo
    if fhi <= 0:
        return hi
    for _ in range(BISECTIONS):
        mid = math.sqrt(lo * hi) if log else (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi) if log else (lo + hi) / 2


def step_points(base: Any, runs: Sequence[BenchRun], config: EngineConfig, prefill_scale: float, seed: int,
                knots: Sequence[tuple[float, float]] | None) -> list[StepPoint]:
    """Each plain run's step, its batch (the client's figure, or the replay's under `knots`) and its factor."""
    out = []
    for run in runs:
        step, err = measured_step(run)
        client = max(1.0, run.throughput_tokens_per_s * step)
        batch = client
        if knots is not None:
            batch = max(1.0, replay(run, costs_with(base, knots, prefill_scale), None, config, seed,
                                      fitting=True).mean_batch)
        ctx = decode_context(run)
        priced, passed = priced_step(base, batch, ctx)
        outside = priced - passed
        factor = max((step - outside) / passed, FACTOR_RANGE[0]) if passed > 0 else 1.0
        out.append(StepPoint(run.label, step, err, client, batch, ctx, priced, float(factor)))
    return out


def fit_prefill(base: Any, run: BenchRun, knots: Sequence[tuple[float, float]], config: EngineConfig,
                seed: int) -> float:
    """The prefill factor at which the replay of `run` gives its measured TTFT p50."""
    target = run.ttft.p50_s

    def gap(scale: float) -> float:
        return replay(run, costs_with(base, knots, scale), None, config, seed, fitting=True).ttft_p50_s - target

    return _bisect(gap, *FACTOR_RANGE)


def fit_acceptance(base: Any, runs: Sequence[BenchRun], costs: StepCosts, config: EngineConfig,
                   fallback: Acceptance | None, seed: int) -> tuple[Acceptance | None, str]:
    """Acceptance from the speculative fit runs (module docstring): their alphas averaged, weighted by requests."""
    spec = [r for r in runs if r.speculative]
    if not spec:
        return fallback, ("no speculative fit run: " + (f"{fallback.spec} from [setup] or the profile"
                                                        if fallback is not None else "none"))
    alphas, notes = [], []
    for run in spec:
        found = run_acceptance(run)
        if found is None:
            def gap(alpha: float, run: BenchRun = run) -> float:  # a higher alpha: a shorter TPOT
                return run.tpot.p50_s - replay(run, costs, IIDAcceptance(alpha), config, seed, fitting=True).tpot_p50_s

            alpha = _bisect(gap, 0.01, 0.99, log=False)
            found = (IIDAcceptance(round(alpha, 4)), f"{run.label}: TPOT p50 matched -> iid alpha {alpha:.3f}")
        model, note = found
        alphas.append((getattr(model, "alpha", math.nan), run.completed))
        notes.append(note)
    a = float(np.average([x for x, _ in alphas], weights=[w for _, w in alphas]))
    return IIDAcceptance(round(a, 4)), "; ".join(notes)


def metrics_row(run: BenchRun, sim: Replayed) -> dict[str, Any]:
    """Measured against simulated: [measured, simulated, simulated / measured - 1] per metric."""
    def trio(m: float, s: float) -> list[float]:
        return [m, s, s / m - 1 if m and math.isfinite(m) and math.isfinite(s) else math.nan]

    return {"label": run.label, "rate_per_s": run.rate_per_s, "max_concurrency": run.max_concurrency,
            "load": run.load, "policy": run.policy, "fit": run.fit,
            "throughput": trio(run.throughput_tokens_per_s, sim.throughput_tokens_per_s),
            "ttft_p50_s": trio(run.ttft.p50_s, sim.ttft_p50_s), "ttft_p99_s": trio(run.ttft.p99_s, sim.ttft_p99_s),
            "tpot_p50_s": trio(run.tpot.p50_s, sim.tpot_p50_s), "tpot_p99_s": trio(run.tpot.p99_s, sim.tpot_p99_s),
            "mean_batch": sim.mean_batch, "tokens_per_step": sim.tokens_per_step}


def refine(base: Any, runs: Sequence[BenchRun], points: list[StepPoint], config: EngineConfig, scale: float,
           seed: int) -> list[StepPoint]:
    """The factors scaled by the fit runs' measured TPOT p50 over their replays', `REFINE` times (a decode step's
    time is nearly proportional to its passes' factor), runs at one knot (one batch) by their mean log ratio: the
    replay then gives the fit runs their own TPOT p50, prefills and queueing included, which the median ITL alone
    leaves out."""
    for _ in range(REFINE):
        knots = knots_of(points)
        sims = {r.label: replay(r, costs_with(base, knots, scale), None, config, seed, fitting=True) for r in runs}
        by_label = {r.label: r for r in runs}
        scaled = {}
        for g in _groups(points):
            logs = [math.log(by_label[p.label].tpot.p50_s / sims[p.label].tpot_p50_s) for p in g
                    if math.isfinite(sims[p.label].tpot_p50_s) and sims[p.label].tpot_p50_s > 0]
            for p in g:
                scaled[p.label] = math.exp(float(np.mean(logs))) if logs else 1.0
        points = [replace(p, factor=p.factor * scaled[p.label]) for p in points]
    return points


def measured_acceptance(run: BenchRun) -> bool:
    """The run's acceptance is measured (its requests' traces, or counters), not matched on its TPOT."""
    return run.trace is not None or run_acceptance(run) is not None


def fit_spec(runs: Sequence[BenchRun], fit: BenchFit) -> tuple[tuple[tuple[float, float], ...], str]:
    """The speculative step's factor (module docstring) from the speculative fit runs whose acceptance is
    measured: a knot at each group of nearby batches (the replays' time-weighted batch), scaled `SPEC_ROUNDS`
    times by measured TPOT p50 over replayed (a step is its passes, so the ratio moves it nearly in proportion).
    Without such a run: none (a speculative step's passes take the plain runs' factor)."""
    spec = [r for r in runs if r.speculative and measured_acceptance(r)]
    if not spec:
        return (), "no speculative fit run with measured acceptance: the plain runs' factor prices its passes"
    knots: tuple[tuple[float, float], ...] = ((1.0, 1.0),)
    for _ in range(SPEC_ROUNDS):
        costs = fit.costs(spec_knots=knots)
        sims = [replay(r, costs, fit.acceptance, fit.config, fit.seed, fitting=True) for r in spec]
        at = [StepPoint(r.label, 0.0, 0.0, 0.0, max(s.mean_batch, 1.0), 0.0, 0.0,
                        float(costs.cost.spec_factor(max(s.mean_batch, 1.0)))
                        * (r.tpot.p50_s / s.tpot_p50_s if s.tpot_p50_s > 0 and math.isfinite(s.tpot_p50_s) else 1.0))
              for r, s in zip(spec, sims)]
        knots = tuple((b, float(np.clip(f, *SPEC_RANGE))) for b, f in knots_of(at))
    return knots, f"{', '.join(r.label for r in spec)}: TPOT p50 matched with their measured acceptance"


def request_aligned(runs: Sequence[BenchRun]) -> bool:
    """Every run keeps each request's send time and TPOT, and its replay draws nothing (a plain run, or a speculative
    one with its requests' acceptance traces): it is replayed request by request."""
    return bool(runs) and all((not r.speculative or r.trace is not None) and r.start_s is not None
                              and len(r.start_s) == r.completed and r.request_tpots_s is not None
                              and len(r.request_tpots_s) == r.completed and r.per_request for r in runs)


def request_batches(max_batch: int, top: float) -> list[float]:
    """The per-request fit's knots: 1, 2, 4, ... to the first at or past `top` (the engine's limit at most)."""
    out = [1.0]
    while out[-1] < min(top, max_batch):
        out.append(float(min(2 * out[-1], max_batch)))
    return out


def fit_by_request(runs: Sequence[BenchRun], config: EngineConfig, start: Sequence[tuple[float, float]], seed: int,
                   top: float, costs_of: Callable[[tuple[tuple[float, float], ...]], StepCosts]
                   ) -> tuple[tuple[tuple[float, float], ...], str]:
    """Knots fitted to every request's TPOT (module docstring), from `start`'s factors at the knots' batches:
    `costs_of(knots)` prices the runs (the step's knots on the plain runs, the speculative step's on the
    speculative runs replayed with their requests' traces); returns the knots and a line saying how far the
    requests moved."""
    xs = request_batches(config.max_batch, top)
    theta = np.log(np.clip(knots_at(start, np.array(xs)), *FACTOR_RANGE))
    measured = []
    for r in runs:
        tp = np.asarray(r.request_tpots_s, dtype=float)
        keep = np.isfinite(tp) & (tp > 0) & (np.asarray(r.output_lens) > 1)
        measured.append((np.log(np.where(keep, tp, 1.0)), keep, math.log(r.tpot.p50_s)))
    lo, hi = (math.log(x) for x in FACTOR_RANGE)

    def residuals(th: np.ndarray) -> np.ndarray:
        costs = costs_of(tuple(zip(xs, np.exp(th))))
        parts = []
        for r, (m, keep, p50) in zip(runs, measured):
            sim = np.log(np.where(keep, request_tpots(r, costs, None, config, seed), 1.0))
            d = (sim - m)[keep]
            parts += [d / math.sqrt(max(len(d), 1)), [float(np.median(sim[keep])) - p50]]
        parts.append(math.sqrt(REQUEST_SMOOTH) * np.diff(th))
        return np.concatenate([np.asarray(p, dtype=float) for p in parts])

    r0 = residuals(theta)
    first = cost = float(r0 @ r0)
    lam = 1e-2
    for _ in range(REQUEST_ROUNDS):
        jac = np.empty((len(r0), len(xs)))
        for j in range(len(xs)):
            d = np.zeros(len(xs))
            d[j] = REQUEST_STEP
            jac[:, j] = (residuals(theta + d) - r0) / REQUEST_STEP
        a = jac.T @ jac
        step = np.clip(-np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-9), jac.T @ r0), -0.5, 0.5)
        trial = np.clip(theta + step, lo, hi)
        r1 = residuals(trial)
        if float(r1 @ r1) < cost:
            theta, r0, cost, lam = trial, r1, float(r1 @ r1), lam / 3
        else:
            lam *= 10
    n = sum(int(k.sum()) for _, k, _ in measured)
    return (tuple((x, float(f)) for x, f in zip(xs, np.exp(theta))),
            f"fitted to {n} requests' TPOT (of {', '.join(r.label for r in runs)}): squared log error "
            f"{first:.4f} -> {cost:.4f}")


def fit_bench(manifest: Manifest, base: Any, fit_runs: Sequence[BenchRun], cross_validate: bool = True
              ) -> BenchFit:
    """The costs and acceptance fitted to `fit_runs` on top of `base` (module docstring)."""
    setup = manifest.setup
    plain = [r for r in fit_runs if not r.speculative]
    if not plain:
        raise SpecsimError(f"{manifest.path}: no plain run to fit the step on: mark one or more runs without "
                           "speculation fit = true")
    config = engine_config(setup.engine, setup.max_batch, manifest.runs)
    seed = setup.seed
    lightest = min(plain, key=lambda r: (r.rate_per_s or math.inf, r.max_concurrency or math.inf))
    points = step_points(base, plain, config, 1.0, seed, None)
    scale = 1.0
    for _ in range(2):  # the batch from the replay, then the prefill under the new knots, twice
        points = step_points(base, plain, config, scale, seed, knots_of(points))
        scale = fit_prefill(base, lightest, knots_of(points), config, seed)
    measured = list(points)
    for _ in range(2):  # the factors to the runs' TPOT p50, then the prefill under them, twice
        points = refine(base, plain, points, config, scale, seed)
        scale = fit_prefill(base, lightest, knots_of(points), config, seed)
    request_knots, request_from = (), ""
    if request_aligned(plain):  # each request against its replay: the knots from every request's TPOT
        top = max(p.batch for p in points)
        request_knots, request_from = fit_by_request(plain, config, knots_of(points), seed, top,
                                                     lambda k: costs_with(base, k, scale))
        scale = fit_prefill(base, lightest, request_knots, config, seed)
    fit = BenchFit(base, config, setup.engine, points, scale,
                   f"{lightest.label}: TTFT p50 {1e3 * lightest.ttft.p50_s:.1f} ms matched", None, "", seed,
                   measured_points=measured, request_knots=request_knots, request_from=request_from)
    fit.acceptance, fit.acceptance_from = fit_acceptance(base, fit_runs, fit.costs(), config, base.acceptance, seed)
    fit.spec_knots, fit.spec_from = fit_spec(fit_runs, fit)
    spec = [r for r in fit_runs if r.speculative]
    if fit.spec_knots and request_aligned(spec):  # each request against its replay, its own acceptance walked
        knots, said = fit_by_request(spec, config, fit.spec_knots, seed, max(b for b, _ in fit.spec_knots),
                                     lambda k: fit.costs(spec_knots=k))
        fit.spec_knots, fit.spec_from = knots, f"{fit.spec_from}; then request by request, {said}"
    fit.in_sample = [metrics_row(r, replay(r, fit.costs(), fit.acceptance, config, seed)) for r in fit_runs]
    if cross_validate and len(plain) >= 2:
        for run in plain:
            others = [p for p in points if p.label != run.label]
            knots = knots_of(others)
            if request_knots:  # fitted as the profile's are: request by request, on the other runs
                rest = [r for r in plain if r.label != run.label]
                knots, _ = fit_by_request(rest, config, knots, seed, max(p.batch for p in others),
                                          lambda k: costs_with(base, k, scale))
            sim = replay(run, fit.costs(knots), None, config, seed)
            fit.cross_validated.append(metrics_row(run, sim))
    return fit


def format_fit(fit: BenchFit) -> str:
    lines = [f"fitted on top of {fit.base.caption}; engine schedule: {fit.engine}, {fit.config.max_batch} running "
             "requests at most",
             "decode step of each plain fit run (median ITL) at the batch it held; the factor on the passes there:",
             f"{'run':<28}{'step ms':>10}{'+/-':>7}{'batch (client)':>16}{'batch (replay)':>16}{'context':>9}"
             f"{'priced ms':>11}{'factor':>8}{'refined':>10}"]
    for p, q in zip(fit.measured_points or fit.points, fit.points):
        lines.append(f"{p.label:<28}{1e3 * p.step_s:>10.2f}{100 * p.step_rel_err:>6.1f}%{p.batch_client:>16.2f}"
                     f"{q.batch:>16.2f}{p.context:>9.0f}{1e3 * p.priced_s:>11.2f}{p.factor:>8.3f}"
                     f"{q.factor:>10.3f}")
    lines.append("refined: each factor scaled until the fit run's replay gives its measured TPOT p50")
    if fit.request_knots:
        lines.append("then request by request: " + ", ".join(f"{f:.3f} at batch {b:g}" for b, f in fit.request_knots)
                     + f" ({fit.request_from})")
    lines.append(f"prefill factor {fit.prefill_scale:.3f} ({fit.prefill_from})")
    lines.append(f"acceptance: {fit.acceptance.spec if fit.acceptance else 'none'} ({fit.acceptance_from})")
    spec = ", ".join(f"{f:.3f} at batch {b:.2f}" for b, f in fit.spec_knots) or "none"
    lines.append(f"speculative steps' passes: factor {spec} over the plain factor ({fit.spec_from})")
    if fit.cross_validated:
        lines.append("cross-validated by run (each plain fit run predicted by the fit to the others):")
        for r in fit.cross_validated:
            lines.append(f"  {r['label']:<28} throughput {100 * r['throughput'][2]:+6.1f} %   TPOT p50 "
                         f"{100 * r['tpot_p50_s'][2]:+6.1f} %   TTFT p50 {100 * r['ttft_p50_s'][2]:+6.1f} %")
    return "\n".join(lines)
