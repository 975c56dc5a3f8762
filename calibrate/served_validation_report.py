"""`validate --serving` as results: a row per rate and policy (measured, predicted, the pieces of a miss), the
report's summary against the targets and its crossovers, and the report as text. No torch here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.metrics import ServingMetrics

PAYS = 0.05  # speculation pays while it lowers plain decoding's TPOT p50 by more than this
TARGETS = {"throughput": 0.05, "tpot_p50": 0.10, "tpot_p90": 0.15}  # what every row's |error| is held to


def average(ms: Sequence[ServingMetrics]) -> ServingMetrics:
    """Field-by-field means of metrics of the same policy and stream (tuples element-wise; flags: all of them)."""
    out: dict[str, Any] = {}
    for name in ServingMetrics.__dataclass_fields__:
        vals = [getattr(m, name) for m in ms]
        present = [v for v in vals if v is not None]
        first = present[0] if present else None
        if first is None or isinstance(first, str):
            out[name] = first
        elif isinstance(first, bool):
            out[name] = all(present)
        elif isinstance(first, tuple):
            out[name] = tuple(nanmean(col) for col in zip(*present))
        elif isinstance(first, int):
            out[name] = int(round(float(np.mean(present))))
        else:
            out[name] = float(np.mean(present))
    return ServingMetrics(**out)


def nanmean(xs: Sequence[float]) -> float:
    a = np.asarray(xs, dtype=float)
    a = a[~np.isnan(a)]
    return float(a.mean()) if len(a) else math.nan


def rel(measured: float, predicted: float) -> float:
    """(predicted - measured) / measured; NaN where either is missing or measured is zero."""
    if not (measured == measured and predicted == predicted) or measured == 0:
        return math.nan
    return (predicted - measured) / measured


@dataclass
class ServedRow:
    """One (rate, policy): measured and predicted metrics, their errors and where a miss comes from."""

    rate_per_s: float
    policy: str
    held: bool
    measured: ServingMetrics
    predicted: ServingMetrics
    causes: dict[str, float]  # relative errors of the pieces: step time, prefill, acceptance, queueing
    captures: int = 0
    wall_s: float = 0.0
    as_profiled: ServingMetrics | None = None  # predicted from the profile without the spot checks' re-anchoring
    # metric -> the standard deviation of (predicted - measured) / measured that acceptance's chance alone gives this
    # row (the simulation's spread over its seeds, for the row's runs and the prediction's seeds); empty if unknown
    sampling: dict[str, float] = field(default_factory=dict)
    # the served loop's own work per decode step, outside the engine's step (median over the steps; s), and the
    # measured step's median: what a served engine pays between passes that the simulator does not price
    loop_s: float = math.nan
    step_s: float = math.nan

    def beyond_chance(self, key: str, target: float) -> bool:
        """Whether |error| exceeds `target` by more than two of the row's sampling standard deviations: a miss that
        acceptance's chance in so few requests does not explain."""
        e, sd = abs(self.errors[key]), self.sampling.get(key, 0.0)
        return e == e and e > target + 2 * (sd if sd == sd else 0.0)

    @property
    def errors(self) -> dict[str, float]:
        m, p = self.measured, self.predicted
        return {"throughput": rel(m.throughput_tokens_per_s, p.throughput_tokens_per_s),
                "ttft_p50": rel(m.ttft_s[0], p.ttft_s[0]), "ttft_p90": rel(m.ttft_s[1], p.ttft_s[1]),
                "ttft_p99": rel(m.ttft_s[2], p.ttft_s[2]),
                "tpot_p50": rel(m.tpot_s[0], p.tpot_s[0]), "tpot_p90": rel(m.tpot_s[1], p.tpot_s[1]),
                "tpot_p99": rel(m.tpot_s[2], p.tpot_s[2])}

    @property
    def net_tpot_p50(self) -> float:
        """The TPOT p50 error left after the step-time and acceptance errors of the run are taken out:
        (1 + e_TPOT)(1 + e_acceptance) / (1 + e_step) - 1. What the simulator's batching and queueing get wrong given
        what each step really cost and kept (prefills and everything else stay in it)."""
        e = self.errors["tpot_p50"]
        step = self.causes.get("step time", math.nan)
        acc = self.causes.get("acceptance", math.nan)
        acc = 0.0 if acc != acc else acc  # plain decoding: no acceptance to be wrong about
        if e != e or step != step:
            return math.nan
        return (1 + e) * (1 + acc) / (1 + step) - 1

    @property
    def cause(self) -> str:
        """The piece whose error is largest (what to look at first when the row misses)."""
        known = {k: abs(v) for k, v in self.causes.items() if v == v}
        return max(known, key=known.__getitem__) if known else "-"


@dataclass
class ServingValidation:
    rows: list[ServedRow]
    rates: list[float]
    policies: list[str]
    settings: dict[str, Any] = field(default_factory=dict)

    def crossover(self, which: str, policy: str, margin: float = 0.0) -> float | None:
        """The rate from which on `policy` no longer lowers off's TPOT p50 by more than `margin` (a fraction; 0: no
        better at all) at any rate tried, `which` measured or predicted: the load above which a server should turn
        it off. A rate where the curves touch but speculation pays again at a higher one is not it (where they run
        a few per cent apart, a touch is noise). None if it pays at the highest rate (or there is no `off`)."""
        by = {(r.rate_per_s, r.policy): getattr(r, which) for r in self.rows}
        found = None
        for rate in reversed(self.rates):
            off, p = by.get((rate, "off")), by.get((rate, policy))
            if off is None or p is None or p.tpot_s[0] < (1 - margin) * off.tpot_s[0]:
                return found
            found = rate
        return found

    def crossovers(self) -> dict[str, dict[str, Any]]:
        """Per speculating policy: where it stops paying by `PAYS` (a user's margin: where the curves run together,
        the strict crossing is at the mercy of noise), and strictly."""
        idx = {r: i for i, r in enumerate(self.rates)}

        def apart(m: float | None, p: float | None) -> int:
            return abs(idx.get(m, len(self.rates)) - idx.get(p, len(self.rates)))

        out = {}
        for pol in self.policies:
            if pol == "off" or "off" not in self.policies:
                continue
            m, p = self.crossover("measured", pol, PAYS), self.crossover("predicted", pol, PAYS)
            ms, ps = self.crossover("measured", pol), self.crossover("predicted", pol)
            out[pol] = {"margin": PAYS, "measured": m, "predicted": p, "grid_steps_apart": apart(m, p),
                        "strict": {"measured": ms, "predicted": ps, "grid_steps_apart": apart(ms, ps)}}
        return out

    def summary(self) -> dict[str, Any]:
        held = [r for r in self.rows if r.held]

        def stat(key: str) -> dict[str, float]:
            xs = np.array([abs(r.errors[key]) for r in held if r.errors[key] == r.errors[key]])
            if not len(xs):
                return {"median": math.nan, "max": math.nan, "n": 0}
            return {"median": float(np.median(xs)), "max": float(xs.max()), "n": int(len(xs))}

        s = {k: stat(k) for k in ("throughput", "tpot_p50", "tpot_p90", "tpot_p99", "ttft_p50", "ttft_p90")}
        for key, target in TARGETS.items():
            s[key]["target"] = target
            s[key]["beyond_chance"] = sum(r.beyond_chance(key, target) for r in held if r.sampling)
        net = np.array([abs(r.net_tpot_p50) for r in held if r.net_tpot_p50 == r.net_tpot_p50])
        s["tpot_p50_net_of_step_and_acceptance"] = (
            {"median": float(np.median(net)), "max": float(net.max()), "n": int(len(net))} if len(net)
            else {"median": math.nan, "max": math.nan, "n": 0})
        xs = np.array([abs(rel(r.measured.tpot_s[0], r.as_profiled.tpot_s[0])) for r in held
                       if r.as_profiled is not None])
        xs = xs[xs == xs]
        s["as_profiled_tpot_p50"] = ({"median": float(np.median(xs)), "max": float(xs.max()), "n": int(len(xs))}
                                     if len(xs) else {"median": math.nan, "max": math.nan, "n": 0})
        s["rows_not_held"] = len(self.rows) - len(held)
        return s

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "summary": self.summary(), "crossovers": self.crossovers(),
                "rows": [{"rate_per_s": r.rate_per_s, "policy": r.policy, "held": r.held, "cause": r.cause,
                          "tpot_p50_net_of_step_and_acceptance": r.net_tpot_p50,
                          "causes": r.causes, "errors": r.errors, "sampling_sd": r.sampling,
                          "captures": r.captures, "wall_s": r.wall_s, "loop_s": r.loop_s, "step_s": r.step_s,
                          "measured": r.measured.as_dict(), "predicted": r.predicted.as_dict()} for r in self.rows]}


def format_serving_validation(report: ServingValidation) -> str:
    """The report as text: one line per (rate, policy), then the crossovers and the summary against the targets."""
    def pct(x: float) -> str:
        return f"{100 * x:+.1f}%" if x == x else "-"

    def ms(x: float) -> str:
        return f"{1e3 * x:.1f}" if x == x else "-"

    def sd(x: float) -> str:
        return f"{100 * x:.0f}%" if x == x else "-"

    st = report.settings
    lines = [f"served stream: {st.get('pair', '')}; {st.get('workload', '')}; {st.get('requests')} requests per run, "
             f"max batch {st.get('max_batch')}; acceptance {st.get('acceptance')}",
             f"{'rate/s':>7} {'policy':<14} {'tok/s meas':>10} {'pred':>7} {'err':>7}  {'TPOT p50':>8} {'pred':>6} "
             f"{'err':>7} {'±':>4}  {'p90':>6} {'pred':>6} {'err':>7}  {'TTFT p50':>8} {'err':>7}  {'net':>6}  "
             "largest piece"]
    for r in report.rows:
        m, p, e = r.measured, r.predicted, r.errors
        flag = "" if r.held else "  NOT HELD within the time cap (marked, not scored)"
        lines.append(
            f"{r.rate_per_s:>7.3g} {r.policy:<14} {m.throughput_tokens_per_s:>10.0f} {p.throughput_tokens_per_s:>7.0f} "
            f"{pct(e['throughput']):>7}  {ms(m.tpot_s[0]):>8} {ms(p.tpot_s[0]):>6} {pct(e['tpot_p50']):>7} "
            f"{sd(r.sampling.get('tpot_p50', math.nan)):>4}  "
            f"{ms(m.tpot_s[1]):>6} {ms(p.tpot_s[1]):>6} {pct(e['tpot_p90']):>7}  {ms(m.ttft_s[0]):>8} "
            f"{pct(e['ttft_p50']):>7}  {pct(r.net_tpot_p50):>6}  {r.cause} {pct(r.causes.get(r.cause, math.nan))}"
            f"{flag}")
    lines.append("(latencies in ms; err = (predicted - measured) / measured; ±: the standard deviation acceptance's "
                 "chance alone gives that error, from the simulation's spread over its seeds; net: the TPOT p50 error "
                 "left once the run's step-time and acceptance errors are taken out; 'largest piece': of step time, "
                 "prefill, acceptance and queueing, each priced on what really ran)")
    for pol, c in report.crossovers().items():
        def show(x: float | None) -> str:
            return f"{x:g} req/s" if x is not None else "none in the rates tried"
        def verdict(d: dict) -> str:
            return "within one grid step" if d["grid_steps_apart"] <= 1 else f"{d['grid_steps_apart']} grid steps apart"
        st_ = c["strict"]
        lines.append(f"{pol}: stops paying (TPOT p50 less than {100 * c['margin']:g} % below off's) at "
                     f"{show(c['measured'])} measured, {show(c['predicted'])} predicted: {verdict(c)}; no better "
                     f"at all at {show(st_['measured'])} measured, {show(st_['predicted'])} predicted: {verdict(st_)}")
    s = report.summary()
    for key, target in TARGETS.items():
        v = s[key]
        ok = "met" if v["n"] and v["max"] <= target else "MISSED"
        noise = [r.sampling[key] for r in report.rows if r.held and r.sampling.get(key, math.nan) > 0]
        why = (f"; chance alone moves a speculating row by a median ±{100 * float(np.median(noise)):.1f} %, and "
               f"{v['beyond_chance']} row(s) miss by more than twice theirs" if noise and ok == "MISSED" else "")
        lines.append(f"{key:<11} |error| median {100 * v['median']:.1f} %, max {100 * v['max']:.1f} % over "
                     f"{v['n']} rows (target: every row within {100 * target:g} %): {ok}{why}")
    n = s["tpot_p50_net_of_step_and_acceptance"]
    if n["n"]:
        lines.append(f"TPOT p50 net of the step-time and acceptance errors (the simulator's batching and queueing "
                     f"given what the steps really cost and kept): median {100 * n['median']:.1f} %, max "
                     f"{100 * n['max']:.1f} %")
    a = s["as_profiled_tpot_p50"]
    if a["n"]:
        lines.append(f"the device drifted up to {100 * st.get('largest_drift', 0.0):.0f} % from its profile during "
                     f"the runs (a spot check around every run); priced as profiled, TPOT p50 |error| median "
                     f"{100 * a['median']:.1f} %, max {100 * a['max']:.1f} %")
    loops = [(r.loop_s, r.step_s) for r in report.rows if r.loop_s == r.loop_s and r.step_s > 0]
    if loops:
        loop, step = np.median([x for x, _ in loops]), np.median([x / y for x, y in loops])
        lines.append(f"the served loop's own work between the engine's steps (scheduling, keeping tokens, retiring, "
                     f"moving rows): a median {1e6 * loop:.0f} us a step, {100 * step:.1f} % of a measured step; "
                     f"not priced by the simulator")
    if s["rows_not_held"]:
        lines.append(f"{s['rows_not_held']} row(s) not held within the time cap: raise --time-cap-s or lower the rate")
    return "\n".join(lines) + "\n"
