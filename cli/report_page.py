"""`specsim report`: the capacity plan for one configuration as a self-contained HTML page.

It asks the questions the other commands answer one at a time (predict's speed-up against batch and context, policy's
draft length per batch, simulate's TPOT and throughput against load, plan's capacity and fleet), and lays the answers
out with `plots.report_html`: the verdict first, then the engine configuration to paste, then the figures and where
every number comes from. This module gathers and words; the page's layout is the plots package's.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.commands import draft_lengths
from cli.options import BATCHES, CONTEXTS, KS, RATES, Finite, SetupOptions, option_group, scenario_from, simulate_from
from cli.output import progress, say
from simulator import SpecsimError

if TYPE_CHECKING:
    from plots.report_html import Snippet, Table
    from scenarios.serving_scenario import ServingOptions
    from scenarios.setup import Setup
    from simulator.capacity import FleetPlan, MaxRate
    from simulator.drafts import Draft
    from simulator.metrics import ServingMetrics
    from simulator.sweep import SweepResult

# The options `specsim report` adds to the setup and serving groups (declared here, with the command's other glue).
report_options = option_group(
    click.option("--batch", "batches", type=BATCHES, default="1..256", show_default=True,
                 help="Batch sizes to cover (contiguous from 1: the policy table is looked up by batch)."),
    click.option("--k", "ks", type=KS, default="0..8", show_default=True, help="Draft lengths allowed."),
    click.option("--context", "contexts", type=CONTEXTS, default="1024,8192", show_default=True,
                 help="Cached tokens per sequence; the engine configuration is made for the first."),
    click.option("--rate", "rates", type=RATES, default=None,
                 help="Request rates to simulate (req/s per engine) [default: 1..64:x2]."),
    click.option("--load-rps", type=Finite(0, 1e6, min_open=True), default=None,
                 help="Load to size a fleet for (requests/s; needs an SLO)."),
    click.option("--attainment", type=Finite(0, 1, min_open=True), default=0.9, show_default=True,
                 help="Share of requests that must meet the SLO."),
    click.option("--tolerance", "tolerance_pct", type=Finite(0, 50), default=None, metavar="PCT",
                 help="Keep a k across batches while within PCT % of the best (as specsim policy)."),
    click.option("--compare", "pairs", multiple=True, metavar="DRAFT=ACCEPTANCE",
                 help="Another draft and its acceptance to draw beside this one (repeatable), e.g. eagle3=iid:0.75."),
)

# The validations that back each kind of prediction: what was measured, against what, and where the dated entries
# are (README, How accurate it is; docs/validation.md). Keyed by what the page predicts from.
BACKING = {
    "profile": "specsim's own engine, static batches (validate --quick, batch 1-8 x k 1-6 and a tree): speed-up "
               "median |error| 1.8-11.7 %, p90 3.5-18.8 % over 55 fresh clones of this project "
               "(docs/validation.md, Static batches)",
    "served": "a served stream against its simulation (validate --serving --quick, four rates up to past saturation):"
              " throughput within 0.2-2.3 % and TPOT p50 within 1.1-12.5 % in the median row "
              "(docs/validation.md, A served stream)",
    "preset": "the presets against the published step times they were fitted to: median 0.7 %, at most 4.7 % at "
              "batch 1-64 (python benchmarks/preset_check.py; a consistency check, not an independent validation); "
              "tensor parallelism within -8.8 to +6.4 % of published runs (docs/cost-model.md)",
    "shapes": "real shapes on this CPU (TinyLlama-1.1B drafted by Llama-68M, EAGLE-3's ShareGPT acceptance replayed): "
              "speed-up median |error| 2.7-4.8 %, p90 5.0-9.9 % (docs/validation.md, Real shapes)",
    "gpu": "one H200, three leases: the built-in pair 2.6-9.3 % median, 8B / 1B shapes 2.6-3.7 % median; a served "
           "8B stream 28 % / 23 % off (throughput / TPOT p50) (docs/gpu.md)",
    "heads": "trained prediction heads (chains and a 2,2 tree), fresh clones: 1.6-6.0 % median, 9.0-11.8 % p90; "
             "n-gram lookup 1.9-4.6 % / 5.3-7.8 % (docs/validation.md)",
}


def sglang_flags(draft: Draft, target_repo: str, k: int) -> tuple[str, str]:
    """SGLang's launch flags for a chain of `k` drafted tokens, and a note on what they assume. SGLang runs one draft
    length for the whole server (its adaptive mode aside), so the caller picks the k of the batch it expects; a
    chain is ``--speculative-eagle-topk 1`` with ``num_draft_tokens = num_steps + 1`` (the verified root and the k
    drafted tokens), as SGLang's documentation sets it (docs/advanced_features/speculative_decoding.md)."""
    head = f"python3 -m sglang.launch_server \\\n    --model-path {shlex.quote(target_repo)}"
    if k == 0:
        return head, "speculation does not pay at this batch: launch without --speculative-algorithm"
    chain = [f"--speculative-num-steps {k}", "--speculative-eagle-topk 1", f"--speculative-num-draft-tokens {k + 1}"]
    path = shlex.quote(draft.repo or draft.name)
    if draft.kind == "model":
        flags = ["--speculative-algorithm STANDALONE", f"--speculative-draft-model-path {path}", *chain]
        note = "STANDALONE: a smaller draft model, token-level drafting"
    elif draft.kind == "eagle3":
        flags = ["--speculative-algorithm EAGLE3", f"--speculative-draft-model-path {path}", *chain]
        note = "EAGLE3: the head's checkpoint as the draft model path"
    elif draft.kind == "mtp":
        flags = ["--speculative-algorithm EAGLE", *chain]
        note = ("MTP runs through SGLang's EAGLE worker; the checkpoint's own MTP modules need no draft path on "
                "models SGLang knows (DeepSeek, MiMo)")
    elif draft.kind == "ngram":
        flags = ["--speculative-algorithm NGRAM", f"--speculative-num-draft-tokens {k + 1}",
                 "--speculative-ngram-max-bfs-breadth 1"]
        note = "NGRAM (CUDA only): a chain, one candidate per position (BFS breadth 1)"
    else:
        return "", f"SGLang has no method for a {draft.kind} draft"
    return " \\\n    ".join([head, *flags]), note


def _repo(source: str, name: str) -> str:
    """A model's Hugging Face repository where its preset names one ("meta-llama/Llama-3.1-8B config.json"), else
    its name."""
    first = source.split()[0] if source.split() else ""
    return first if first.count("/") == 1 else name


def _k_at(ranges: Sequence[Sequence[int]], batch: int) -> int:
    for lo, hi, k in ranges:
        if lo <= batch <= hi:
            return k
    return ranges[-1][2]


def _span(lo: int, hi: int) -> str:
    return f"batch {lo}" if lo == hi else f"batch {lo}-{hi}"


def verdict_lines(by_context: Sequence[dict], metrics: Sequence[ServingMetrics], caps: Sequence[MaxRate],
                  fleets: Sequence[FleetPlan]) -> list[str]:
    """The page's first box: per context where speculation pays and with which k, where to switch it off; then
    what serving under load and the SLO say."""
    lines = []
    for table in by_context:
        c, ranges = table["context"], table["ranges"]
        paying = [r for r in ranges if r["k"] > 0]
        if not paying:
            lines.append(f"Context {c:,}: speculation does not pay at any batch swept; run the engine without it.")
            continue
        ks = "; ".join(f"k = {r['k']} at {_span(r['batch_from'], r['batch_to'])} "
                       f"(speed-up {r['predicted_speedup_max']:.2f}-{r['predicted_speedup_min']:.2f})"
                       if r["predicted_speedup_max"] != r["predicted_speedup_min"] else
                       f"k = {r['k']} at {_span(r['batch_from'], r['batch_to'])} "
                       f"(speed-up {r['predicted_speedup_max']:.2f})" for r in paying)
        line = f"Context {c:,}: speculation pays at {_span(paying[0]['batch_from'], paying[-1]['batch_to'])}: {ks}."
        off = [r for r in ranges if r["k"] == 0 and r["batch_from"] > paying[0]["batch_from"]]
        if off:
            why = (" (the draft no longer fits in memory)" if off[0]["why"].startswith("the draft") else "")
            line += f" Switch it off above batch {off[0]['batch_from'] - 1}{why}."
        else:
            line += f" It still pays at the largest batch that fits ({ranges[-1]['batch_to']})."
        restart = table.get("engine_without_speculation_faster_above_batch")
        if restart is not None:
            line += (f" Above batch {restart} an engine started without speculation is faster than this one at any "
                     "k (the engine's tax on a k = 0 step).")
        if table.get("fits_up_to_batch"):
            line += f" From batch {table['fits_up_to_batch'] + 1} on nothing fits in memory."
        lines.append(line)
    off = {m.rate_per_s: m for m in metrics if m.policy == "off"}
    spec = [m for m in metrics if m.policy != "off"]
    if off and spec:
        low = min(off)
        best = min((m for m in spec if m.rate_per_s == low), key=lambda m: m.tpot_s[0], default=None)
        if best is not None and off[low].tpot_s[0] > 0:
            cut = 1 - best.tpot_s[0] / off[low].tpot_s[0]
            lines.append(f"Under load: at {low:g} req/s {best.policy} {'cuts' if cut >= 0 else 'raises'} TPOT p50 by "
                         f"{abs(100 * cut):.0f} % ({1e3 * best.tpot_s[0]:.1f} ms against {1e3 * off[low].tpot_s[0]:.1f}"
                         " ms without speculation).")
        def best_spec(rate: float) -> float:  # the sustained runs' best TPOT p50 at `rate`; all runs' if none is
            at = [m for m in spec if m.rate_per_s == rate]
            return min((m.tpot_s[0] for m in at if m.sustained), default=min(m.tpot_s[0] for m in at))

        stop = next((r for r in sorted(off) if any(m.rate_per_s == r for m in spec)
                     and best_spec(r) >= off[r].tpot_s[0]), None)
        if stop is not None:
            lines.append(f"From {stop:g} req/s on no speculating policy beats plain decoding's TPOT p50: past that "
                         "load, run without speculation.")
    met = [c for c in caps if c.metrics is not None]
    if met:
        best_cap = max(met, key=lambda c: c.rate_per_s)
        off_cap = next((c for c in caps if c.policy == "off"), None)
        gain = (f", {best_cap.rate_per_s / off_cap.rate_per_s:.2f}x the {off_cap.rate_per_s:.3g} req/s without "
                "speculation" if off_cap and off_cap.rate_per_s > 0 and best_cap.policy != "off" else "")
        others = ", ".join(f"{c.policy} {c.rate_per_s:.3g}" for c in caps if c is not best_cap and c is not off_cap)
        lines.append(f"Within the SLO: {best_cap.policy} sustains {best_cap.rate_per_s:.3g} req/s per engine{gain}"
                     + (f" ({others})." if others else "."))
    elif caps:
        lines.append("No policy meets the SLO at any rate tried: a looser SLO, shorter outputs or faster hardware.")
    sized = [f for f in fleets if f.engines]
    if sized:
        best_fleet = min(sized, key=lambda f: f.engines)
        rest = ", ".join(f"{f.engines} with {f.policy}" for f in sized if f is not best_fleet)
        than = f" ({rest})" if rest else ""
        lines.append(f"For {best_fleet.load_per_s:g} req/s: {best_fleet.engines} engines with "
                     f"{best_fleet.policy}{than}.")
    return lines


def trust_lines(s: Setup) -> list[str]:
    """What the verdict must say before anything else: a profile that cannot be trusted, and what a quick one did
    not measure."""
    p = s.profile
    if p is None:
        return []
    lines = []
    if not p.trust.trusted:
        lines.append("This calibration is UNTRUSTED (" + "; ".join(p.trust.reasons) + "): every number below inherits "
                     "its error; calibrate again on a quiet machine (specsim calibrate --busy on a shared one).")
    if p.not_measured:
        lines.append("Not measured by this profile: " + "; ".join(p.not_measured) + ".")
    return lines


def _ms(x: float) -> str:
    return f"{1e3 * x:,.1f}"


def fleet_table(caps: Sequence[MaxRate], fleets: Sequence[FleetPlan], slo_label: str, attainment: float) -> Table:
    from plots.report_html import Table

    engines = {f.policy: f for f in fleets}
    rows = []
    for c in caps:
        m = c.metrics
        f = engines.get(c.policy)
        fleet = (str(f.engines) if f and f.engines else "-" if f is None else f"~{f.estimate:,}")
        if m is None:
            rows.append((c.policy, "none", "-", "-", "-", "-", fleet))
        else:
            rows.append((c.policy, f"{c.rate_per_s:.3g}", f"{m.throughput_tokens_per_s:,.0f}", _ms(m.tpot_s[0]),
                         _ms(m.tpot_s[1]), _ms(m.ttft_s[1]), fleet))
    load = f" for {fleets[0].load_per_s:g} req/s" if fleets else ""
    return Table(("policy", "req/s per engine", "tok/s", "TPOT p50 ms", "TPOT p90 ms", "TTFT p90 ms",
                  f"engines{load}"), tuple(rows),
                 f"the highest rate one engine sustains with {100 * attainment:g} % of requests meeting {slo_label}; "
                 "engines: a fleet simulated behind the router")


def policy_table(by_context: Sequence[dict]) -> Table:
    from plots.report_html import Table

    rows = tuple((f"{t['context']:,}", _span(r["batch_from"], r["batch_to"]), str(r["k"]),
                  f"{r['predicted_speedup_min']:.2f}-{r['predicted_speedup_max']:.2f}", r["why"])
                 for t in by_context for r in t["ranges"])
    return Table(("context", "batches", "k", "speed-up", "why"), rows,
                 "the draft length per batch size (near-ties within the tolerance kept in one range; the engine's tax "
                 "on switching weighed)")


def provenance(s: Setup, result: SweepResult, batches: Sequence[int], ks: Sequence[int]) -> tuple[list[str], list[str]]:
    """Where the numbers come from, and what is extrapolated beyond what was measured."""
    sources: list[str] = []
    extrapolated: list[str] = []
    hw = s.cost.hardware
    p = s.profile
    if p is None:
        sources.append(f"Hardware preset {hw.name}: {hw.source}.")
        sources.append(f"Achieved rates and engine costs: {hw.rates_source}.")
        if hw.speculation_tax.source:
            sources.append(f"The engine's tax on speculation: {hw.speculation_tax.source}.")
        fitted = re.search(r"batch 1\.\.(\d+)", hw.rates_source)  # the batches the preset's source fitted
        if fitted and max(batches) > int(fitted.group(1)):
            extrapolated.append(f"Batches above {fitted.group(1)} extrapolate the preset's fit (its source measured "
                                f"batch 1..{fitted.group(1)}).")
        if hw.rates_source.startswith("assumed"):
            extrapolated.append("The achieved rates of this preset are assumed, not measured: calibrate the device "
                                "(specsim calibrate, or calibrate --from an engine's step times).")
    else:
        fit = p.fit
        trust = "trusted" if p.trust.trusted else "UNTRUSTED (" + "; ".join(p.trust.reasons) + ")"
        sources.append(f"Calibration profile {p.path or ''} ({p.origin}), made {p.created} on {p.device.name} by "
                       f"specsim {p.specsim_version or '?'}: {trust}.")
        if fit.heldout.n:
            sources.append(f"Held-out pass times ({fit.heldout.n} points the fit did not see): median |error| "
                           f"{100 * fit.heldout.median_abs_err:.1f} %, p90 {100 * fit.heldout.p90_abs_err:.1f} %, "
                           f"max {100 * fit.heldout.max_abs_err:.1f} %.")
        if fit.datasheet_heldout.n:
            sources.append(f"The pure roofline on the same points: median |error| "
                           f"{100 * fit.datasheet_heldout.median_abs_err:.1f} %.")
        measured = [r for r in p.passes if r.median_s is not None]
        if measured:
            top_batch = max(r.batch for r in measured)
            top_context = max(r.context for r in measured)
            if max(batches) > top_batch:
                extrapolated.append(f"Batches above {top_batch} (the largest the calibration timed) are the fit's "
                                    "extrapolation.")
            if max(r.context for r in result.rows) > top_context:
                extrapolated.append(f"Contexts above {top_context:,} tokens (the longest the calibration timed) are "
                                    "the fit's extrapolation.")
    for m, what in ((s.target, "Target"), (getattr(s.draft, "module", None), "Draft")):
        if m is not None and m.source:
            sources.append(f"{what} {m.name}: {m.source}.")
    if s.acceptance is not None:
        sources.append(f"Acceptance: {s.acceptance.spec}.")
        if s.acceptance.spec.startswith(("iid:", "positional:", "beta:", "markov:")):
            extrapolated.append(f"Acceptance {s.acceptance.spec} is an assumption: measure it (an engine's counters, "
                                "a trace, or specsim calibrate) before trusting the k.")
    if any(r.extrapolated for r in result.rows):
        deep = sorted({r.k for r in result.rows if r.extrapolated and r.k is not None})
        extrapolated.append(f"Draft lengths {', '.join(map(str, deep))} draft deeper than the acceptance's source "
                            "measured: their acceptance is extrapolated.")
    if not extrapolated:
        extrapolated.append("Nothing beyond what the sources above measured.")
    return sources, extrapolated


def backing(s: Setup) -> list[str]:
    if s.profile is None:
        rows = [BACKING["preset"], BACKING["gpu"]]
    else:
        rows = [BACKING["profile"], BACKING["shapes"]]
    if s.draft.kind in ("medusa", "mtp", "eagle3", "ngram"):
        rows.append(BACKING["heads"])
    rows.append(BACKING["served"])
    return rows


def compare_drafts(setup: SetupOptions, s: Setup, pairs: Sequence[str], batches: Sequence[int], ks: Sequence[int],
                   context: int) -> tuple[dict[str, SweepResult], list[str]]:
    """The page's draft and each ``DRAFT=ACCEPTANCE`` of `pairs` swept at one context (each with its own draft
    lengths), and a verdict line: which draft is fastest at the smallest and at the largest batch."""
    from simulator.sweep import chains, sweep

    results = {}
    for label, setup_i in [(f"{s.draft.name} ({s.acceptance.spec if s.acceptance else '-'})", s),
                           *((pair, _resolve_pair(setup, pair)) for pair in pairs)]:
        results[label] = sweep(setup_i.cost, setup_i.target, setup_i.draft, setup_i.acceptance, batches,
                               chains(sorted(set(draft_lengths(list(ks), setup_i.draft)) | {0})), [context])
    lines = []
    for batch in (min(batches), max(batches)):
        best = {label: max((b.speedup for b in r.best if b.batch == batch and b.context == context), default=None)
                for label, r in results.items()}
        ranked = sorted(((v, k) for k, v in best.items() if v is not None), reverse=True)
        if ranked:
            lines.append(f"batch {batch}: {ranked[0][1]} ({ranked[0][0]:.2f}x)")
    return results, ([f"Of the drafts compared at context {context:,}, the fastest at " + "; at ".join(lines) + "."]
                     if lines else [])


def _resolve_pair(setup: SetupOptions, pair: str) -> Setup:
    from dataclasses import replace

    draft, _, acceptance = pair.partition("=")
    return replace(setup, draft=draft.strip(), acceptance_spec=acceptance.strip()).resolve()


def build_report(setup: SetupOptions, serving: ServingOptions, batches: list[int], ks: list[int],
                 contexts: list[int], rates: list[float] | None, load_rps: float | None, attainment: float,
                 tolerance_pct: float | None, command: str, compare: Sequence[str] = ()) -> str:
    """The page's text for one configuration (see the module docstring); `compare`: other drafts
    (``DRAFT=ACCEPTANCE``) drawn beside the page's own."""
    from plots.report_html import PlanPage, Section, Snippet
    from plots.serving import throughput_vs_rate, tpot_vs_rate
    from plots.speedup import drafts_vs_batch, speedup_vs_batch
    from simulator import __version__
    from simulator.capacity import capacity_plan
    from simulator.executors import parse_executor
    from simulator.serving_report import policy_tables, vllm_speculative_config
    from simulator.sweep import chains, sweep

    if list(batches) != list(range(1, max(batches) + 1)):
        raise SpecsimError("--batch must cover every batch from 1 (e.g. 1..256): the policy table is looked up by "
                           "batch size")
    for pair in compare:  # checked before any work
        if not all(part.strip() for part in pair.partition("=")):
            raise SpecsimError(f"--compare {pair!r} is not DRAFT=ACCEPTANCE, e.g. eagle3=iid:0.75")
    if serving.timed_trace:
        raise SpecsimError("report scales the request rate; use --arrivals poisson|gamma:CV with --lengths-from FILE "
                           "instead of a timed trace")
    s = setup.resolve()
    k_list = draft_lengths(ks, s.draft)
    tolerance = s.resolution if tolerance_pct is None else tolerance_pct / 100
    ranges, record = policy_tables(s.cost, s.target, s.draft, s.acceptance, batches, k_list, contexts, s.caption,
                                   tolerance)
    by_context = record["by_context"]
    result = sweep(s.cost, s.target, s.draft, s.acceptance, batches, chains(sorted(set(k_list) | {0})), contexts)

    scenario, runs = simulate_from(s, rates, 1, serving)
    metrics = [m for _, m in runs]
    caps: list = []
    fleets: list = []
    if scenario.slo.tpot_s is not None or scenario.slo.ttft_s is not None:
        _, policies = scenario_from(s, serving)
        caps, fleets = capacity_plan(scenario, policies, attainment, load_rps, serving.router, progress,
                                     parse_executor(serving.executor))

    # The engine configuration: vLLM reads the whole table; SGLang one k, the one at the batch the engine is
    # expected to run at (the best policy's mean batch at its capacity, else batch 1).
    snippets: list[Snippet] = []
    notes: list[str] = []
    try:
        config = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                                      for k, v in vllm_speculative_config(s.draft, ranges).items()) + "\n}"
        snippets.append(Snippet("vLLM speculative_config", config,
                                f"for context {contexts[0]:,} (vLLM's table has no context axis); the same as "
                                "specsim policy --format vllm-config; pass it as vllm serve ... --speculative-config "
                                "'<this JSON>'"))
    except SpecsimError as e:
        notes.append(f"vLLM: {e}")
    met = [c for c in caps if c.metrics is not None and c.policy != "off"]
    batch = max(1, round(max(met, key=lambda c: c.rate_per_s).metrics.mean_batch)) if met else 1
    target_repo = _repo(s.target.source, s.target.name)
    flags, note = sglang_flags(s.draft, target_repo, _k_at(ranges, batch))
    if flags:
        where = ("the mean batch of the best speculating policy at its capacity" if met else
                 "no speculating policy met the SLO" if caps else "no SLO given")
        snippets.append(Snippet("SGLang launch flags", flags,
                                f"{note}; one draft length for the server: the table's k at batch {batch} ({where})"))
    else:
        notes.append(note)

    sources, extrapolated = provenance(s, result, batches, k_list)
    compared: list[Section] = []
    verdict_compared: list[str] = []
    if compare:
        results, verdict_compared = compare_drafts(setup, s, compare, batches, ks, contexts[0])
        compared.append(Section("Other drafts, compared", figures=((
            f"The best speed-up of each draft against batch at context {contexts[0]:,} (numbers: its best k)",
            drafts_vs_batch(results, contexts[0], f"{s.target.name} on {s.where}")),)))
    sections = [
        Section("Engine configuration", paragraphs=tuple(notes), snippets=tuple(snippets)),
        Section("Draft length per batch", tables=(policy_table(by_context),)),
        Section("Speed-up against batch and context",
                figures=((f"Predicted speed-up against batch at context {', '.join(f'{c:,}' for c in contexts)}: "
                          "one line per draft length; left of the dotted line speculation pays",
                          speedup_vs_batch(result, s.caption)),)),
        Section("Serving under load",
                paragraphs=(f"{scenario.workload.label}, {len(scenario.workload)} requests per simulation; "
                            f"{scenario.slo.label}.",),
                figures=(("TPOT and TTFT against the request rate, per policy, with the SLO",
                          tpot_vs_rate(metrics, scenario.slo, s.caption)),
                         ("Throughput against the request rate, per policy", throughput_vs_rate(metrics, s.caption)))),
        *compared,
    ]
    if caps:
        sections.append(Section("The fleet it needs", tables=(fleet_table(caps, fleets, scenario.slo.label,
                                                                          attainment),)))
    else:
        sections.append(Section("The fleet it needs", paragraphs=(
            "Give an SLO (--slo-tpot-ms, --slo-ttft-ms) and a load (--load-rps) to size a fleet.",)))
    sections.append(Section("Where the numbers come from", bullets=tuple(sources)))
    sections.append(Section("The validations behind this kind of prediction", bullets=tuple(backing(s))))
    sections.append(Section("What is extrapolated", bullets=tuple(extrapolated)))
    page = PlanPage(title=f"Speculative decoding plan: {s.target.name} drafted by {s.draft.name}",
                    subtitle=s.heading,
                    verdict=(*trust_lines(s), *verdict_lines(by_context, metrics, caps, fleets), *verdict_compared),
                    sections=tuple(sections), warn=s.profile is not None and not s.profile.trust.trusted,
                    footer=(f"made by specsim {__version__}: {command}",
                            "Predictions from a roofline cost model and a discrete-event simulation; the validations "
                            "above say how far to trust them."))
    from plots.report_html import page_html

    return page_html(page)


def run_report(setup: SetupOptions, serving: ServingOptions, batches: list[int], ks: list[int], contexts: list[int],
               rates: list[float] | None, load_rps: float | None, attainment: float, tolerance_pct: float | None,
               out_path: Path, command: str, compare: Sequence[str] = ()) -> None:
    """`specsim report`: the output checked first, the page built, then written atomically."""
    from scenarios.files import atomic_write_text, check_output

    check_output(out_path, "--out", (".html", ".htm"))
    text = build_report(setup, serving, batches, ks, contexts, rates, load_rps, attainment, tolerance_pct, command,
                        compare)
    atomic_write_text(out_path, text)
    say(f"report written to {out_path}")

