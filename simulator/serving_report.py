"""Serving results as text: tables for `simulate` and `plan`, CSV, and the vLLM policy table. Strings only."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from . import SpecsimError, __version__
from .acceptance import Acceptance
from .capacity import FleetPlan, MaxRate
from .cost import CostModel
from .drafts import Draft
from .metrics import ServingMetrics
from .serving import ServingRun
from .specs import ModelSpec, SpeculationTax
from .sweep import SweepResult

NO_TAX = SpeculationTax()

CSV_FIELDS = ["policy", "rate_per_s", "engines", "requests", "sustained", "throughput_tokens_per_s",
              "requests_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
              "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "slo_attainment", "goodput_requests_per_s", "mean_batch",
              "mean_drafted", "tokens_per_step", "acceptance_rate", "decode_steps", "preemptions", "duration_s"]


def _flat(m: ServingMetrics) -> dict:
    d = m.as_dict()
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        for p, v in d.pop(name).items():
            d[f"{name[:-2]}_{p}_s"] = v
    return d


def metrics_to_csv(rows: Sequence[ServingMetrics]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for m in rows:
        w.writerow(_flat(m))
    return buf.getvalue()


def _ms(x: float) -> str:
    return f"{1e3 * x:,.1f}" if x == x else "-"


def format_serving_table(rows: Sequence[ServingMetrics], slo_label: str) -> str:
    head = (f"{'rate/s':>7} {'policy':<16} {'tok/s':>8} {'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>7} "
            f"{'e2e p50':>8} {'batch':>6} {'k':>5} {'tok/step':>8} {'SLO met':>7}")
    lines = [head, " " * 51 + "(milliseconds)"]
    for m in rows:
        flag = "" if m.sustained else "  overloaded"
        if m.preemptions:
            flag += f"  {m.preemptions:,} preempted"
        lines.append(
            f"{m.rate_per_s:>7.3g} {m.policy:<16} {m.throughput_tokens_per_s:>8,.0f} {_ms(m.ttft_s[0]):>9} "
            f"{_ms(m.ttft_s[2]):>8} {_ms(m.tpot_s[0]):>9} {_ms(m.tpot_s[2]):>7} {_ms(m.e2e_s[0]):>8} "
            f"{m.mean_batch:>6.1f} {m.mean_drafted:>5.2f} {m.tokens_per_step:>8.2f} {100 * m.slo_attainment:>6.1f}%"
            f"{flag}")
    lines.append(f"SLO: {slo_label}; 'SLO met' is the share of requests meeting it; 'overloaded': the queue was still "
                 "growing at the last arrival (more than 5 % of requests waiting)" +
                 ("; 'preempted': requests whose KV cache was dropped and recomputed (on-demand allocation)"
                  if any(m.preemptions for m in rows) else ""))
    return "\n".join(lines) + "\n"


def format_plan(caps: Sequence[MaxRate], fleets: Sequence[FleetPlan], slo_label: str, attainment: float) -> str:
    lines = [f"highest request rate per engine with {100 * attainment:g} % of requests meeting {slo_label}:",
             f"  {'policy':<16} {'req/s':>8} {'tok/s':>9} {'TPOT p50':>9} {'p90':>7} {'TTFT p90':>9}  (ms)"]
    for c in caps:
        m = c.metrics
        if m is None:
            lines.append(f"  {c.policy:<16} {'-':>8}  meets the SLO at no rate tried (down to "
                         f"{c.failed_rate_per_s:.3g} req/s)")
            continue
        lines.append(f"  {c.policy:<16} {c.rate_per_s:>8.3g} {m.throughput_tokens_per_s:>9,.0f} {_ms(m.tpot_s[0]):>9} "
                     f"{_ms(m.tpot_s[1]):>7} {_ms(m.ttft_s[1]):>9}")
    best = max((c for c in caps if c.metrics), key=lambda c: c.rate_per_s, default=None)
    if best is not None:
        off = next((c for c in caps if c.policy == "off"), None)
        gain = f", {best.rate_per_s / off.rate_per_s:.2f}x the rate without speculation" if (
            off and off.rate_per_s > 0 and best.policy != "off") else ""
        lines.append(f"best: {best.policy} ({best.rate_per_s:.3g} req/s per engine{gain})")
    if fleets:
        lines.append(f"engines for {fleets[0].load_per_s:g} req/s (simulated as a fleet behind the router):")
        for f in fleets:
            if f.engines:
                lines.append(f"  {f.policy:<16} {f.engines:>4} engines (load / per-engine capacity: {f.estimate})")
            elif f.estimate == 0:
                lines.append(f"  {f.policy:<16}    - (no engine meets the SLO at any rate)")
            elif f.metrics is None:
                lines.append(f"  {f.policy:<16}    - (about {f.estimate:,} engines: more than a fleet simulation "
                             "holds)")
            else:
                lines.append(f"  {f.policy:<16}    - (not met with up to {f.estimate + 4} engines)")
    return "\n".join(lines) + "\n"


def batch_ranges(best_k: Sequence[tuple[int, int]]) -> list[list[int]]:
    """[(batch, k), ...] over consecutive batches from 1 -> [[first, last, k], ...], merging runs of equal k."""
    out: list[list[int]] = []
    for batch, k in best_k:
        if out and out[-1][2] == k and out[-1][1] == batch - 1:
            out[-1][1] = batch
        else:
            out.append([batch, batch, k])
    return out


@dataclass(frozen=True)
class PolicyChoice:
    """One batch size of a policy table: the draft length chosen, and the best one it stands for."""

    batch: int
    k: int
    speedup: float  # the chosen k's, over an engine without speculation
    best_k: int
    best_speedup: float

    @property
    def loss(self) -> float:
        """What the choice gives up against the best k at this batch, as a fraction of the best's speed-up."""
        return 1.0 - self.speedup / self.best_speedup


def policy_table(result: SweepResult, tax: SpeculationTax = NO_TAX, switch_horizon: int = 16,
                 tolerance: float = 0.0) -> list[PolicyChoice]:
    """The draft length per batch of a single-context chain sweep, for an engine started with speculation: k = 0
    there pays the engine's off-tax.

    A k is *near the best* at a batch when its speed-up is within `tolerance` of the best k's (a difference the
    prediction cannot resolve) and it speculates if and only if the best does: the tolerance trades draft lengths,
    never speculation against none, so where speculation stops paying stays where the prediction puts it. A k
    already in use stays near while the best one, paying the engine's switch once over `switch_horizon` steps,
    does not beat it by more. The table has few boundaries: from batch 1, and from each boundary on, it takes the k
    that stays near the best to the largest batch (then the faster k over that stretch, then the smaller). With no
    tolerance and no switch cost that is the best k at every batch."""
    speed: dict[int, dict[int, float]] = {}
    time: dict[int, dict[int, float]] = {}
    baseline: dict[int, float] = {}
    for r in result.rows:
        if r.fits and r.tree is None:
            k = int(r.k or 0)
            off = k == 0
            speed.setdefault(r.batch, {})[k] = 1 / (1 + tax.off_fraction(r.batch)) if off else r.speedup
            time.setdefault(r.batch, {})[k] = r.baseline_time_s * (1 + tax.off_fraction(r.batch)) if off \
                else r.step_time_s
            baseline[r.batch] = r.baseline_time_s
    batches = sorted(speed)
    best = {b: min(speed[b], key=lambda k, b=b: (-speed[b][k], k)) for b in batches}

    def near(b: int, k: int, staying: bool) -> bool:
        s, t, top = speed[b], time[b], best[b]
        bar = s[top] * (1 - tolerance if (k == 0) == (top == 0) else 1)
        if staying and tax.switch_fraction:
            switch_s = tax.switch_fraction * baseline[b] / switch_horizon
            bar *= t[top] / (t[top] + switch_s)
        return k in s and s[k] >= bar

    def reach(i: int, k: int) -> int:
        j = i + 1
        while j < len(batches) and near(batches[j], k, staying=True):
            j += 1
        return j

    table: list[PolicyChoice] = []
    i = 0
    while i < len(batches):
        first = batches[i]
        ends = {k: reach(i, k) for k in speed[first] if near(first, k, staying=False)}
        k = max(ends, key=lambda k: (ends[k], sum(speed[b][k] for b in batches[i:ends[k]]), -k))
        table += [PolicyChoice(b, k, speed[b][k], best[b], speed[b][best[b]]) for b in batches[i:ends[k]]]
        i = ends[k]
    return table


def simulate_record(caption: str, workload_label: str, slo_label: str,
                    runs: Sequence[tuple[ServingRun, ServingMetrics]]) -> dict:
    """Every metric of every run, with each run's accepted-length histogram per candidate (machine-readable)."""
    return {"specsim_version": __version__, "setup": caption, "workload": workload_label, "slo": slo_label,
            "runs": [{**m.as_dict(), "accepted_length_histogram": {label: counts.tolist() for label, counts in
                                                                   run.accepted_hist.items()}} for run, m in runs]}


def plan_record(caption: str, workload_label: str, slo_label: str, attainment: float, caps: Sequence[MaxRate],
                fleets: Sequence[FleetPlan]) -> dict:
    return {"specsim_version": __version__, "setup": caption, "workload": workload_label, "slo": slo_label,
            "attainment": attainment, "max_rate": [asdict(c) for c in caps], "fleet": [asdict(f) for f in fleets]}


def policy_record(result: SweepResult, batches: Sequence[int], caption: str, context: int,
                  tax: SpeculationTax = NO_TAX, tolerance: float = 0.0) -> tuple[list, dict]:
    """The draft length per batch size as vLLM's ``num_speculative_tokens_per_batch_size`` ranges, and the same with
    the predicted speed-ups and what each range gives up against the best k (`policy_table`; the engine's tax
    weighed). `batches` must cover every batch from 1 (engines look the table up by batch size). Where the larger
    batches do not fit in memory (the target's weights and KV cache at this context), the table covers the batches
    that do and ``fits_up_to_batch`` says where memory ends: an engine cannot run the others."""
    if list(batches) != list(range(1, max(batches) + 1)):
        raise SpecsimError("--batch must cover every batch from 1 (e.g. 1..256): engines look the table up by batch "
                           "size")
    table = policy_table(result, tax, tolerance=tolerance)
    if not table:
        raise SpecsimError(f"nothing fits in memory at context {context}, not even plain decoding at batch 1: a "
                           "shorter --context, a device with more memory, or --tp")
    ranges = batch_ranges([(c.batch, c.k) for c in table])
    by_batch = {c.batch: c for c in table}
    # Batches where no speculative k fits in memory beside the target (the draft's weights and cache): k = 0 there
    # is a memory limit, not speculation that stopped paying.
    drafted_fit = {r.batch for r in result.rows if r.fits and (r.k or r.tree)}

    def over(lo: int, hi: int) -> list[PolicyChoice]:
        return [by_batch[b] for b in range(lo, hi + 1)]

    # what each range's choices extrapolate: "k" (the acceptance), "batch", "rows", "context" (the calibration)
    rows = {(r.batch, int(r.k or 0)): r for r in result.rows if r.tree is None}

    def beyond(lo: int, hi: int) -> list[str]:
        found = {w for c in over(lo, hi) for w in getattr(rows.get((c.batch, c.k)), "extrapolated_in", ())}
        return [w for w in ("k", "batch", "rows", "context") if w in found]

    record = {"specsim_version": __version__, "setup": caption, "context": context,
              "num_speculative_tokens_per_batch_size": ranges,
              "tolerance": tolerance,
              "ranges": [{"batch_from": lo, "batch_to": hi, "k": k,
                          "predicted_speedup_min": min(c.speedup for c in over(lo, hi)),
                          "predicted_speedup_max": max(c.speedup for c in over(lo, hi)),
                          "loss_vs_best_max": max(c.loss for c in over(lo, hi)),
                          "extrapolated": bool(beyond(lo, hi)), "extrapolated_in": beyond(lo, hi),
                          "why": _why(k, lo, hi, max(c.loss for c in over(lo, hi)), tolerance, tax, drafted_fit)}
                         for lo, hi, k in ranges],
              "speculation_tax": {"off_tax_batch": list(tax.off_batches), "off_tax_fraction": list(tax.off_fractions),
                                  "switch_fraction": tax.switch_fraction, "source": tax.source},
              # above this batch an engine started without speculation beats every k of this one (None: never)
              "engine_without_speculation_faster_above_batch": _restart_above(table),
              # the largest batch whose target weights and KV cache fit (None: every batch asked for)
              "fits_up_to_batch": len(table) if len(table) < len(batches) else None,
              # the reach of the calibration's decoding passes (None: a preset)
              "measured_range": asdict(result.measured_range) if result.measured_range else None}
    return ranges, record


def _why(k: int, lo: int, hi: int, loss: float, tolerance: float, tax: SpeculationTax, drafted_fit: set[int]
         ) -> str:
    """Why a range of the policy table holds its k, in words that agree with its loss and the tolerance: a k kept
    past the tolerance is kept because switching away would cost the engine more (`policy_table`)."""
    if k == 0:
        return ("the draft's weights and KV cache do not fit beside the target's"
                if not any(b in drafted_fit for b in range(lo, hi + 1)) else "speculation does not pay")
    if loss <= tolerance + 1e-12:
        return "the fastest k within the tolerance" if loss > 0 else "the fastest k"
    said = f"kept though up to {loss:.1%} slower than the best k (beyond the {tolerance:.1%} tolerance)"
    if not tax.switch_fraction:
        return said
    return (f"{said}: switching k costs the engine {tax.switch_fraction:.0%} of a step, weighed over the steps until "
            "it pays back")


def check_contexts(fmt: str, contexts: Sequence[int]) -> None:
    if fmt == "vllm" and len(contexts) > 1:
        raise SpecsimError("vLLM's num_speculative_tokens_per_batch_size has no context axis (vLLM #48627): give one "
                           "--context, or --format json for a table per context")


def policy_tables(cost: CostModel, target: ModelSpec, draft: ModelSpec, acceptance: Acceptance,
                  batches: Sequence[int], ks: Sequence[int], contexts: Sequence[int],
                  caption: str, tolerance: float = 0.0) -> tuple[list, dict]:
    """`policy_record` at each context (acceptance and step times both depend on it): the first context's vLLM
    ranges, and a record whose ``by_context`` holds every context's table."""
    from .sweep import chains, sweep

    tax = cost.hardware.speculation_tax
    tables = [policy_record(sweep(cost, target, draft, acceptance, batches, chains(sorted(set(ks) | {0})), [c]),
                            batches, caption, c, tax, tolerance) for c in contexts]
    return tables[0][0], {**tables[0][1], "by_context": [t[1] for t in tables]}


def _restart_above(table: Sequence[PolicyChoice]) -> int | None:
    """The largest batch where the speculating engine's best k is still at least as fast as an engine without
    speculation, if a slower batch follows it (0: slower from batch 1; None: never slower)."""
    slower = [c.batch for c in table if c.best_speedup < 1.0]
    if not slower:
        return None
    faster = [c.batch for c in table if c.best_speedup >= 1.0 and c.batch < min(slower)]
    return max(faster) if faster else 0


# vLLM's speculative_config methods for each kind of draft (vllm/config/speculative.py)
VLLM_METHODS = {"model": "draft_model", "eagle3": "eagle3", "mtp": "mtp", "medusa": "medusa", "ngram": "ngram"}


# What a config carries where specsim knows no repository for the draft (a head shaped after the target, a model
# preset without one): a value no engine can mistake for a repository to download.
PLACEHOLDER = {"model": "<your draft model for this target>", "eagle3": "<your EAGLE-3 head for this target>",
               "medusa": "<your Medusa heads for this target>"}


def vllm_speculative_config(draft: Draft, ranges: Sequence[Sequence[int]]) -> dict:
    """A whole ``speculative_config`` for vLLM: the draft's method (and model, where it is one), the largest draft
    length of the table, and the table (``num_speculative_tokens_per_batch_size``). Refused for a draft vLLM has no
    method for."""
    method = VLLM_METHODS.get(draft.kind)
    if method is None:
        raise SpecsimError(f"vLLM has no speculative method for a {draft.kind} draft; use --format vllm for the "
                           "ranges alone")
    config: dict = {"method": method, "num_speculative_tokens": max(k for _, _, k in ranges) or 1,
                    "num_speculative_tokens_per_batch_size": [list(r) for r in ranges]}
    if draft.kind in ("model", "eagle3", "medusa"):
        config["model"] = draft.repo or PLACEHOLDER[draft.kind]
    if draft.kind == "ngram":
        config.update(prompt_lookup_max=3, prompt_lookup_min=2)  # specsim's own lookup (engine.speculative.Ngram)
    return config
