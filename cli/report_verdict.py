"""The report's one verdict: every bullet, the fleet line and the configuration's draft length derived once from one
set of results (`ReportResults`), the same object the page's tables and figures are drawn from, so no line can say
what another line or a figure denies.

Two answers meet on the page and may differ: the static one (the speed-up of a step at a batch, the policy table)
and the served one (TPOT at a request rate, the capacity within the SLO). Where they differ the verdict says why in a
line (the batch the engine runs at, prefills interleaved in its steps, queueing, the engine's tax, the context).
`contradictions` checks a verdict against its results: the test and `benchmarks/report_grid.py` run it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.capacity import FleetPlan, MaxRate
    from simulator.metrics import ServingMetrics
    from simulator.sweep import SweepResult

# TPOT p50 within 2 % of plain decoding's is a tie: closer than the spread between seeds of a 2,000-request
# simulation, so neither "cuts" nor "raises" would be a finding.
TIE = 0.02


@dataclass(frozen=True)
class ReportResults:
    """Everything `specsim report` shows, computed once: the static sweep and its policy table, every served run,
    the capacity search and the fleet. The page's verdict, tables, figures and configuration all read this."""

    contexts: tuple[int, ...]
    by_context: tuple[dict, ...]  # policy_tables' record per context (ranges with their speed-ups and `why`)
    ranges: tuple[tuple[int, int, int], ...]  # (batch_from, batch_to, k) at contexts[0]: what the engines read
    result: SweepResult  # every (batch, k, context) priced statically
    metrics: tuple[ServingMetrics, ...]  # every policy at every rate, one engine
    caps: tuple[MaxRate, ...]  # per policy: the highest rate one engine sustains within the SLO
    fleets: tuple[FleetPlan, ...]  # per policy: the engines the load needs, simulated behind the router
    attainment: float  # share of requests that must meet the SLO
    measured_k: int | None  # the deepest draft the acceptance's source measured (None: a model, any k)
    prompt_tokens: float  # mean prompt of the served workload (prefills interleaved in decode steps)
    output_tokens: float  # mean output
    router: str
    tax: bool  # the engine pays a measured tax on speculation


@dataclass(frozen=True)
class ServedAt:
    """One simulated rate: plain decoding against the speculating policy with the lowest TPOT p50 (among the
    sustained runs; among all when none is)."""

    rate_per_s: float
    off: ServingMetrics
    best: ServingMetrics

    @property
    def change(self) -> float:  # relative change of TPOT p50 (negative: speculation cuts it)
        return self.best.tpot_s[0] / self.off.tpot_s[0] - 1

    @property
    def outcome(self) -> str:
        if not self.off.sustained and not self.best.sustained:
            return "overloaded"
        if not self.off.sustained:  # speculation keeps up where plain decoding falls behind
            return "cuts"
        if not self.best.sustained:
            return "raises"
        return "cuts" if self.change < -TIE else "raises" if self.change > TIE else "ties"


def served(metrics: Sequence[ServingMetrics]) -> list[ServedAt]:
    """Every rate simulated both without speculation and with some speculating policy, in rate order."""
    off = {m.rate_per_s: m for m in metrics if m.policy == "off"}
    out = []
    for rate in sorted(off):
        at = [m for m in metrics if m.policy != "off" and m.rate_per_s == rate]
        if not at or off[rate].tpot_s[0] <= 0:
            continue
        pool = [m for m in at if m.sustained] or at
        out.append(ServedAt(rate, off[rate], min(pool, key=lambda m: m.tpot_s[0])))
    return out


def segments(points: Sequence[ServedAt]) -> list[list[ServedAt]]:
    """Consecutive rates with the same outcome."""
    out: list[list[ServedAt]] = []
    for p in points:
        if out and out[-1][-1].outcome == p.outcome:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def _rates(seg: Sequence[ServedAt]) -> str:
    lo, hi = seg[0].rate_per_s, seg[-1].rate_per_s
    return f"{lo:g} req/s" if lo == hi else f"{lo:g}-{hi:g} req/s"


def _pct(lo: float, hi: float) -> str:
    a, b = sorted((abs(100 * lo), abs(100 * hi)))
    return f"{a:.0f} %" if round(a) == round(b) else f"{a:.0f}-{b:.0f} %"


def k_at(ranges: Sequence[Sequence[int]], batch: int) -> int:
    """The policy table's k at `batch` (past its last range: the last range's)."""
    for lo, hi, k in ranges:
        if lo <= batch <= hi:
            return k
    return ranges[-1][2]


def static_at(r: ReportResults, batch: float) -> tuple[int, int, float]:
    """The static answer at the batch an engine runs at: (batch, the table's k, the best speed-up there), at the
    first context (the table the engines read)."""
    b = max(1, round(batch))
    best = {x.batch: x.speedup for x in r.result.best if x.context == r.contexts[0]}
    if not best:
        return b, 0, 1.0
    b = min(b, max(best))
    return b, k_at(r.ranges, b), best.get(b, 1.0)


def served_lines(r: ReportResults) -> list[str]:
    """What serving under load says (one engine, TPOT p50), rate by rate, and in a line why it agrees or not with
    the static table at the batch the engine runs at."""
    points = served(r.metrics)
    if not points:
        return []
    parts = []
    for seg in segments(points):
        o = seg[0].outcome
        if o == "ties":
            parts.append(f"at {_rates(seg)} speculation ties plain decoding (TPOT p50 within {100 * TIE:.0f} %)")
        elif o == "overloaded":
            parts.append(f"at {_rates(seg)} every policy is overloaded (the queue still grows)")
        else:
            top = max(seg, key=lambda p: abs(p.change))
            policies = sorted({p.best.policy for p in seg})
            parts.append(f"at {_rates(seg)} {' or '.join(policies)} {o} it by "
                         f"{_pct(min(p.change for p in seg), max(p.change for p in seg))} "
                         f"({1e3 * top.best.tpot_s[0]:.1f} ms against {1e3 * top.off.tpot_s[0]:.1f} ms"
                         + (f" at {top.rate_per_s:g} req/s" if len(seg) > 1 else "")
                         + ("; plain decoding overloaded" if not top.off.sustained else "")
                         + ("; speculation overloaded" if not top.best.sustained else "") + ")")
    lines = ["Under load (one engine, TPOT p50 of the best speculating policy against plain decoding): "
             + "; ".join(parts) + "."]
    lines += [why for seg in segments(points) if (why := _why_served(r, seg))]
    return lines


def _why_served(r: ReportResults, seg: Sequence[ServedAt]) -> str:
    """One line: the static table at the batches these rates run at, and why the served answer agrees or not."""
    o = seg[0].outcome
    if o == "overloaded":
        return ""
    batches = [p.off.mean_batch for p in seg]
    at = [static_at(r, b) for b in batches]
    span = (f"batch {min(batches):.1f}" if round(min(batches), 1) == round(max(batches), 1) else
            f"batch {min(batches):.1f}-{max(batches):.1f}")
    pays = [k > 0 and s > 1 + TIE for _, k, s in at]
    paying = [(lo, hi) for lo, hi, k in r.ranges if k > 0]
    table = (f"the table does not speculate (it does at batch {paying[0][0]}-{paying[-1][1]})" if paying else
             "the table never speculates")
    where = f"At {_rates(seg)} plain decoding runs at mean {span}"
    if o in ("ties", "raises") and not any(pays):
        return f"{where}, where {table} at context {r.contexts[0]:,}: served and static agree."
    if o == "cuts" and all(pays):
        return f"{where}, where the table predicts {_gain([s for *_, s in at])} per step; " + _why_gain(r, seg, at)
    reasons = [f"each served step also carries the new requests' prefills ({r.prompt_tokens:.0f}-token prompts)",
               "the batch swings around its mean, and the policy picks k per step",
               f"served sequences hold {r.prompt_tokens:.0f}-{r.prompt_tokens + r.output_tokens:.0f} tokens where "
               f"the table assumes {r.contexts[0]:,}"]
    if r.tax:
        reasons.append("the engine's tax on speculation")
    if not all(p.best.sustained for p in seg):
        reasons.append("queueing")
    if o == "cuts":
        return (f"{where}, where {table} at context {r.contexts[0]:,}; served, speculation still cuts TPOT: "
                + "; ".join(reasons) + ".")
    best = max(s for *_, s in at)
    return (f"{where}, where the table predicts up to {best:.2f}x per step; served, speculation "
            f"{'ties' if o == 'ties' else 'loses'}: " + "; ".join(reasons) + ".")


def _gain(xs: Sequence[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f}x" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}x"


def _why_gain(r: ReportResults, seg: Sequence[ServedAt], at: Sequence[tuple[int, int, float]]) -> str:
    """Served TPOT gains against the static speed-up at the same batch: more where speculation shrinks the batch
    (requests finish sooner), less where prefills and the tax weigh on the steps."""
    gains = [p.off.tpot_s[0] / p.best.tpot_s[0] for p in seg]
    statics = [s for *_, s in at]
    more = any(g > s * (1 + TIE) for g, s in zip(gains, statics))
    less = any(g < s * (1 - TIE) for g, s in zip(gains, statics))
    shrink = ("speculation also shrinks the batch the engine runs at (mean batch "
              f"{min(p.best.mean_batch for p in seg):.1f}-{max(p.best.mean_batch for p in seg):.1f} with it): "
              "requests finish sooner, so every step is cheaper")
    prefill = (f"each step also carries the new requests' prefills ({r.prompt_tokens:.0f}-token prompts)"
               + (" and the engine's tax on speculation" if r.tax else ""))
    said = f"served, TPOT falls {_gain(gains)}"
    if more and less:
        return f"{said}: more than a step's speed-up where {shrink}; less where {prefill}."
    if more:
        return f"{said}, more than a step's speed-up: {shrink}."
    if less:
        return f"{said}, less than a step's speed-up: {prefill}."
    return f"{said}, as the table predicts."


def capacity_line(r: ReportResults) -> str:
    met = [c for c in r.caps if c.metrics is not None]
    if not met:
        return ("No policy meets the SLO at any rate tried: a looser SLO, shorter outputs or faster hardware."
                if r.caps else "")
    best = best_capacity(r)
    off = next((c for c in r.caps if c.policy == "off"), None)
    gain = (f", {best.rate_per_s / off.rate_per_s:.2f}x the {off.rate_per_s:.3g} req/s without speculation"
            if off and off.rate_per_s > 0 and best.policy != "off" else "")
    others = ", ".join(f"{c.policy} {c.rate_per_s:.3g}" for c in r.caps if c is not best and c is not off)
    line = (f"Within the SLO ({100 * r.attainment:g} % of requests): {best.policy} sustains {best.rate_per_s:.3g} "
            f"req/s per engine{gain}" + (f" ({others})." if others else "."))
    points = served(r.metrics)
    if off and best.policy != "off" and best.rate_per_s > off.rate_per_s and points and \
            not any(p.outcome == "cuts" for p in points):
        line += (" The capacity counts requests within the SLO at its tail, while the line above compares medians: "
                 "speculation keeps more requests within the SLO without lowering the median.")
    return line


def best_capacity(r: ReportResults) -> MaxRate:
    return max((c for c in r.caps if c.metrics is not None), key=lambda c: (c.rate_per_s, c.policy != "off"))


def recommended(r: ReportResults) -> str | None:
    """The policy the verdict recommends: the fewest engines for the load (ties: the higher capacity per engine);
    without a load, the highest capacity; without an SLO, none."""
    sized = [f for f in r.fleets if f.engines]
    cap = {c.policy: c.rate_per_s for c in r.caps}
    if sized:
        return min(sized, key=lambda f: (f.engines, -cap.get(f.policy, 0.0), f.policy == "off")).policy
    if any(c.metrics is not None for c in r.caps):
        return best_capacity(r).policy
    return None


def _arithmetic(f: FleetPlan, cap: MaxRate | None) -> str:
    if cap is None or cap.rate_per_s <= 0:
        return "no rate met the SLO on one engine"
    return f"{f.load_per_s:g} / {cap.rate_per_s:.3g} req/s per engine -> {f.estimate}"


def fleet_line(r: ReportResults) -> str:
    """The fleet for the load: the recommended policy's engines with its arithmetic, and plain decoding's; where
    the simulated fleet needs fewer or more engines than load / capacity, why."""
    if not r.fleets:
        return ""
    caps = {c.policy: c for c in r.caps}
    load = r.fleets[0].load_per_s
    pick = recommended(r)
    if pick is None:
        est = ", ".join(f"{f.policy} ~{f.estimate:,}" for f in r.fleets if f.estimate)
        return (f"For {load:g} req/s: no fleet simulated met the SLO"
                + (f" (load / capacity: {est} engines)" if est else "") + ".")
    shown = [f for f in r.fleets if f.policy == pick] + [f for f in r.fleets if f.policy == "off" and f.policy != pick]
    parts = [_fleet_part(f, caps.get(f.policy), r) for f in shown]
    rest = [f"{f.engines or 'none found'} with {f.policy}" for f in r.fleets if f not in shown]
    return (f"For {load:g} req/s: " + "; ".join(parts) + (f" (and {', '.join(rest)})" if rest else "") + ".")


def _fleet_part(f: FleetPlan, cap: MaxRate | None, r: ReportResults) -> str:
    name = "without speculation" if f.policy == "off" else f"with {f.policy}"
    if not f.engines:
        return (f"{name} {_arithmetic(f, cap)} engines, but no fleet of up to {f.estimate + 4} engines met the SLO "
                "in simulation" if f.estimate else f"{name}: {_arithmetic(f, cap)}")
    within = (f"{100 * f.metrics.slo_attainment:.1f} % of requests within the SLO" if f.metrics else "")
    head = f"{f.engines} engine{'s' if f.engines > 1 else ''} {name} ({_arithmetic(f, cap)}"
    if f.engines == f.estimate:
        return f"{head}; simulated as a fleet: {within})"
    if f.engines < f.estimate:
        return (f"{head}, yet {f.engines} hold it in simulation with {within}: behind the {r.router} router the "
                f"engines pool their queues and each takes {f.load_per_s / f.engines:.3g} req/s, more than one "
                "engine alone sustains)")
    return (f"{head}, but the fleet needs {f.engines} in simulation for {within}: the router cannot spread "
            "the bursts evenly)")


def context_lines(r: ReportResults) -> list[str]:
    """Per context: where speculation pays and with which k, where to switch it off (the policy table)."""
    lines = []
    for table in r.by_context:
        c, ranges = table["context"], table["ranges"]
        paying = [x for x in ranges if x["k"] > 0]
        if not paying:
            lines.append(f"Context {c:,}: speculation does not pay at any batch swept; run the engine without it.")
            continue

        def one(x: dict) -> str:
            s = (f"{x['predicted_speedup_max']:.2f}" if x["predicted_speedup_max"] == x["predicted_speedup_min"]
                 else f"{x['predicted_speedup_max']:.2f}-{x['predicted_speedup_min']:.2f}")
            deep = " extrapolated" if "k" in x.get("extrapolated_in", ()) else ""
            return f"k = {x['k']}{deep} at {_span(x['batch_from'], x['batch_to'])} (speed-up {s})"

        restart = table.get("engine_without_speculation_faster_above_batch")
        first, last = paying[0]["batch_from"], paying[-1]["batch_to"]
        if restart is not None and restart < last:  # the table's k ranges past it are the lesser loss of a
            #                                          speculating engine, not a gain: say which question each answers
            line = (f"Context {c:,}: speculation pays against an engine without it at {_span(first, restart)}; "
                    f"above batch {restart} an engine started without speculation is faster at any k (a k = 0 step "
                    "of one started with it pays the engine's tax). An engine started with it does best with: "
                    + "; ".join(one(x) for x in paying) + ".")
        else:
            line = (f"Context {c:,}: speculation pays at {_span(first, last)}: "
                    + "; ".join(one(x) for x in paying) + ".")
        off = [x for x in ranges if x["k"] == 0 and x["batch_from"] > paying[0]["batch_from"]]
        if off:
            why = " (the draft no longer fits in memory)" if off[0]["why"].startswith("the draft") else ""
            line += f" Switch it off above batch {off[0]['batch_from'] - 1}{why}."
        else:
            line += f" It still pays at the largest batch that fits ({ranges[-1]['batch_to']})."
        if restart is not None and restart >= last:
            line += (f" Above batch {restart} an engine started without speculation is faster than this one at any "
                     "k (the engine's tax on a k = 0 step).")
        if table.get("fits_up_to_batch"):
            line += f" From batch {table['fits_up_to_batch'] + 1} on nothing fits in memory."
        if any("k" in x.get("extrapolated_in", ()) for x in paying) and r.measured_k is not None:
            line += (f" (extrapolated: the acceptance was measured up to k = {r.measured_k}; deeper k extrapolate "
                     f"it, --k 0..{r.measured_k} keeps to what was measured.)")
        lines.append(line)
    return lines


def _span(lo: int, hi: int) -> str:
    return f"batch {lo}" if lo == hi else f"batch {lo}-{hi}"


def verdict_lines(r: ReportResults) -> list[str]:
    """The page's first box, every line from `r`: per context the static answer, then the served one (and why they
    differ), the capacity within the SLO, and the fleet with its arithmetic."""
    return [line for line in (*context_lines(r), *served_lines(r), capacity_line(r), fleet_line(r)) if line]


def extrapolated_k_note(r: ReportResults, k: int) -> str:
    """What a configuration drafting `k` tokens says when the acceptance was measured at fewer."""
    if r.measured_k is None or k <= r.measured_k:
        return ""
    return (f"extrapolates: k = {k} drafts deeper than the acceptance was measured (k = {r.measured_k}); its "
            f"acceptance there is the model's guess (--k 0..{r.measured_k} keeps to what was measured)")



def contradictions(r: ReportResults, lines: Sequence[str]) -> list[str]:
    """Where a verdict line says what the results deny (empty: none). Checked against the results themselves, not
    the wording's derivation: every served claim against the runs, every capacity and fleet number against the
    searches, a 'run without speculation' against a speculating policy that wins somewhere, a fleet beside a
    capacity without its arithmetic."""
    found = []
    text = " ".join(lines)
    points = {p.rate_per_s: p for p in served(r.metrics)}
    for m in re.finditer(r"at ([\d.]+)(?:-([\d.]+))? req/s (?:speculation ties|[\w:,. ]+? (cuts|raises) it by)", text):
        lo, hi = float(m.group(1)), float(m.group(2) or m.group(1))
        said = m.group(3) or "ties"
        for rate, p in points.items():
            if lo <= rate <= hi and p.outcome != said:
                found.append(f"{rate:g} req/s: the verdict says {said}, the runs say {p.outcome} "
                             f"({100 * p.change:+.1f} %)")
    wins = [p for p in points.values() if p.outcome == "cuts"]
    if wins and re.search(r"no speculating policy beats|past that load, run without speculation", text):
        found.append(f"the verdict says run without speculation; speculation cuts TPOT at {wins[0].rate_per_s:g} req/s")
    for table in r.by_context:
        for x in table["ranges"]:
            if x["k"] > 0 and f"k = {x['k']}" not in text:
                found.append(f"context {table['context']}: k = {x['k']} at batch {x['batch_from']}-{x['batch_to']} "
                             "missing from the verdict")
    for c in r.caps:
        if c.metrics is None:
            continue
        if f"{c.policy} sustains {c.rate_per_s:.3g} req/s" not in text and f"{c.policy} {c.rate_per_s:.3g}" not in \
                text and f"the {c.rate_per_s:.3g} req/s without" not in text:
            found.append(f"capacity of {c.policy} ({c.rate_per_s:.3g} req/s) missing or different in the verdict")
    for f in r.fleets:
        cap = next((c for c in r.caps if c.policy == f.policy), None)
        if f.engines and cap and cap.rate_per_s > 0:
            need = math.ceil(f.load_per_s / cap.rate_per_s - 1e-9)
            if need != f.estimate:
                found.append(f"{f.policy}: the fleet's estimate {f.estimate} is not ceil(load / capacity) = {need}")
            shown = f.policy == recommended(r) or f.policy == "off"
            if shown and f"-> {f.estimate}" not in text:
                found.append(f"{f.policy}: {f.engines} engines without the arithmetic load / capacity")
            if shown and f.engines < f.estimate and "pool their queues" not in text:
                found.append(f"{f.policy}: {f.engines} engines beside {cap.rate_per_s:.3g} req/s per engine "
                             f"for {f.load_per_s:g} req/s, without a reason")
    pick = recommended(r)
    if pick and r.fleets and f"with {pick}" not in text and not (pick == "off" and "without speculation" in text):
        found.append(f"the recommended policy {pick} is not the fleet line's")
    return found
