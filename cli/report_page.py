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
from cli.report_verdict import ReportResults, extrapolated_k_note, k_at, recommended, verdict_lines
from simulator import SpecsimError

if TYPE_CHECKING:
    from plots.report_html import PlanPage, Section, Table
    from scenarios.serving_scenario import ServingOptions
    from scenarios.setup import Setup
    from simulator.capacity import Scenario
    from simulator.drafts import Draft
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
# are (docs/validation.md). Keyed by what the page predicts from. Every figure quoted here is the README's (How accurate
# it is), the one place they are kept: tests/test_report_page.py fails when one here is not there.
BACKING = {
    "profile": "specsim's own engine, static batches (validate --quick, batch 1-8 x k 1-6 and a tree): speed-up "
               "median |error| 1.8-11.7 %, p90 3.5-18.8 % over 55 fresh clones of this project "
               "(docs/validation.md, Static batches)",
    "served": "a served stream against its simulation (validate --serving --quick, four rates up to past saturation):"
              " throughput within 0.2-2.3 % and TPOT p50 within 1.1-12.5 % in the median row "
              "(docs/validation.md, A served stream)",
    "preset": "the presets' step times against SpecDecode-Bench's vLLM step times on an H100: median 3.4 %, at most "
              "21.7 % at batch 1-64 (python benchmarks/preset_check.py; vLLM 0.24's GEMMs at 96-384 rows run "
              "faster); tensor parallelism +5.7 to +6.8 % (gpt-fast), -6.5 / -11.7 % (vLLM 0.6, Llama 70B TP 4 / "
              "TP 8) of published runs (docs/cost-model.md)",
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


def fleet_table(r: ReportResults, slo_label: str) -> Table:
    """Per policy: its capacity on one engine, the served figures there, and the fleet for the load with its
    arithmetic (load / capacity, rounded up) beside the engines the fleet's simulation found."""
    from plots.report_html import Table

    engines = {f.policy: f for f in r.fleets}
    rows = []
    for c in r.caps:
        m = c.metrics
        f = engines.get(c.policy)
        fleet = ("-" if f is None else f"{f.engines} ({f.load_per_s:g} / {c.rate_per_s:.3g} -> {f.estimate}; "
                 f"{100 * f.metrics.slo_attainment:.1f} % within)" if f.engines and f.metrics else
                 f"none found ({f.load_per_s:g} / {c.rate_per_s:.3g} -> {f.estimate})" if c.rate_per_s > 0 else
                 "none")
        if m is None:
            rows.append((c.policy, "none", "-", "-", "-", "-", fleet))
        else:
            rows.append((c.policy, f"{c.rate_per_s:.3g}", f"{m.throughput_tokens_per_s:,.0f}", _ms(m.tpot_s[0]),
                         _ms(m.tpot_s[1]), _ms(m.ttft_s[1]), fleet))
    load = f" for {r.fleets[0].load_per_s:g} req/s" if r.fleets else ""
    return Table(("policy", "req/s per engine", "tok/s", "TPOT p50 ms", "TPOT p90 ms", "TTFT p90 ms",
                  f"engines{load}"), tuple(rows),
                 f"the highest rate one engine sustains with {100 * r.attainment:g} % of requests meeting {slo_label}; "
                 f"engines: a fleet simulated behind the {r.router} router (load / capacity -> engines by arithmetic; "
                 "a fleet pools its queues, so it may hold the load with one fewer)")


def policy_table(by_context: Sequence[dict]) -> Table:
    from plots.report_html import Table

    rows = tuple((f"{t['context']:,}", _span(r["batch_from"], r["batch_to"]),
                  f"{r['k']}^" if "k" in r.get("extrapolated_in", ()) else str(r["k"]),
                  f"{r['predicted_speedup_min']:.2f}-{r['predicted_speedup_max']:.2f}", r["why"])
                 for t in by_context for r in t["ranges"])
    deep = any("k" in r.get("extrapolated_in", ()) for t in by_context for r in t["ranges"])
    return Table(("context", "batches", "k", "speed-up", "why"), rows,
                 "the draft length per batch size (near-ties within the tolerance kept in one range; the engine's tax "
                 "on switching weighed)" + ("; ^ drafts deeper than the acceptance was measured: extrapolated"
                                            if deep else ""))


def _span(lo: int, hi: int) -> str:
    return f"batch {lo}" if lo == hi else f"batch {lo}-{hi}"


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


def gather(s: Setup, serving: ServingOptions, batches: list[int], k_list: list[int], contexts: list[int],
           rates: list[float] | None, load_rps: float | None, attainment: float, tolerance: float
           ) -> tuple[ReportResults, Scenario]:
    """Every answer the page shows, computed once: the static sweep and policy table, the served runs, the capacity
    and the fleet."""
    import numpy as np

    from simulator.capacity import capacity_plan
    from simulator.executors import parse_executor
    from simulator.serving_report import policy_tables
    from simulator.sweep import chains, sweep

    ranges, record = policy_tables(s.cost, s.target, s.draft, s.acceptance, batches, k_list, contexts, s.caption,
                                   tolerance)
    result = sweep(s.cost, s.target, s.draft, s.acceptance, batches, chains(sorted(set(k_list) | {0})), contexts)
    scenario, runs = simulate_from(s, rates, 1, serving)
    caps: list = []
    fleets: list = []
    if scenario.slo.tpot_s is not None or scenario.slo.ttft_s is not None:
        _, policies = scenario_from(s, serving)
        caps, fleets = capacity_plan(scenario, policies, attainment, load_rps, serving.router, progress,
                                     parse_executor(serving.executor))
    w = scenario.workload
    tax = s.cost.hardware.speculation_tax
    results = ReportResults(
        contexts=tuple(contexts), by_context=tuple(record["by_context"]), ranges=tuple(map(tuple, ranges)),
        result=result, metrics=tuple(m for _, m in runs), caps=tuple(caps), fleets=tuple(f for f in fleets if f),
        attainment=attainment, measured_k=s.acceptance.measured_up_to_k if s.acceptance else None,
        prompt_tokens=float(np.mean(w.prompt_tokens)), output_tokens=float(np.mean(w.output_tokens)),
        router=serving.router, tax=bool(any(tax.off_fractions) or tax.switch_fraction))
    return results, scenario


def engine_configuration(s: Setup, r: ReportResults, contexts: list[int]) -> Section:
    """vLLM's whole table and SGLang's one k (the table's k at the batch the recommended policy runs at), each
    saying when it drafts deeper than the acceptance was measured, and a line when the verdict is to run without
    speculation."""
    from plots.report_html import Section, Snippet
    from simulator.serving_report import vllm_speculative_config

    snippets: list[Snippet] = []
    notes: list[str] = []
    pick = recommended(r)
    if pick == "off":
        notes.append("The verdict is to run without speculation (the fleet line): launch the engine without a "
                     "speculative configuration; what follows is what speculation would use.")
    try:
        config = vllm_speculative_config(s.draft, [list(x) for x in r.ranges])
        text = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in config.items()) + "\n}"
        deep = extrapolated_k_note(r, int(config.get("num_speculative_tokens", 0)))
        snippets.append(Snippet("vLLM speculative_config", text,
                                f"for context {contexts[0]:,} (vLLM's table has no context axis); the same as "
                                "specsim policy --format vllm-config; pass it as vllm serve ... --speculative-config "
                                "'<this JSON>'" + (f"; {deep}" if deep else "")))
    except SpecsimError as e:
        notes.append(f"vLLM: {e}")
    cap = {c.policy: c for c in r.caps if c.metrics is not None}
    spec = [c for c in cap.values() if c.policy != "off"]
    basis = cap.get(pick) if pick and pick != "off" else max(spec, key=lambda c: c.rate_per_s) if spec else None
    batch = max(1, round(basis.metrics.mean_batch)) if basis else 1
    k = k_at(r.ranges, batch)
    flags, note = sglang_flags(s.draft, _repo(s.target.source, s.target.name), k)
    if flags:
        where = (f"the mean batch of {basis.policy} at its capacity" if basis else
                 "no speculating policy met the SLO" if r.caps else "no SLO given")
        deep = extrapolated_k_note(r, k)
        snippets.append(Snippet("SGLang launch flags", flags,
                                f"{note}; one draft length for the server: the table's k at batch {batch} ({where})"
                                + (f"; {deep}" if deep else "")))
    else:
        notes.append(note)
    return Section("Engine configuration", paragraphs=tuple(notes), snippets=tuple(snippets))


def build_report(setup: SetupOptions, serving: ServingOptions, batches: list[int], ks: list[int],
                 contexts: list[int], rates: list[float] | None, load_rps: float | None, attainment: float,
                 tolerance_pct: float | None, command: str, compare: Sequence[str] = ()) -> str:
    """The page's text for one configuration (see the module docstring); `compare`: other drafts
    (``DRAFT=ACCEPTANCE``) drawn beside the page's own."""
    from plots.report_html import page_html

    return page_html(report_page(setup, serving, batches, ks, contexts, rates, load_rps, attainment, tolerance_pct,
                                 command, compare)[0])


def report_page(setup: SetupOptions, serving: ServingOptions, batches: list[int], ks: list[int],
                contexts: list[int], rates: list[float] | None, load_rps: float | None, attainment: float,
                tolerance_pct: float | None, command: str, compare: Sequence[str] = ()
                ) -> tuple[PlanPage, ReportResults]:
    """The page (before its figures are rendered) and the one set of results every part of it was made from."""
    from plots.report_html import PlanPage, Section
    from plots.serving import throughput_vs_rate, tpot_vs_rate
    from plots.speedup import drafts_vs_batch, speedup_vs_batch
    from simulator import __version__

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
    r, scenario = gather(s, serving, batches, k_list, contexts, rates, load_rps, attainment, tolerance)

    sources, extrapolated = provenance(s, r.result, batches, k_list)
    compared: list[Section] = []
    verdict_compared: list[str] = []
    if compare:
        results, verdict_compared = compare_drafts(setup, s, compare, batches, ks, contexts[0])
        compared.append(Section("Other drafts, compared", figures=((
            f"The best speed-up of each draft against batch at context {contexts[0]:,} (numbers: its best k)",
            drafts_vs_batch(results, contexts[0], f"{s.target.name} on {s.where}")),)))
    metrics = list(r.metrics)
    sections = [
        engine_configuration(s, r, contexts),
        Section("Draft length per batch", tables=(policy_table(r.by_context),)),
        Section("Speed-up against batch and context",
                figures=((f"Predicted speed-up against batch at context {', '.join(f'{c:,}' for c in contexts)}: "
                          "one line per draft length; left of the dotted line speculation pays",
                          speedup_vs_batch(r.result, s.caption)),)),
        Section("Serving under load",
                paragraphs=(f"{scenario.workload.label}, {len(scenario.workload)} requests per simulation; "
                            f"{scenario.slo.label}.",),
                figures=(("TPOT and TTFT against the request rate, per policy, with the SLO",
                          tpot_vs_rate(metrics, scenario.slo, s.caption)),
                         ("Throughput against the request rate, per policy", throughput_vs_rate(metrics, s.caption)))),
        *compared,
    ]
    if r.caps:
        sections.append(Section("The fleet it needs", tables=(fleet_table(r, scenario.slo.label),)))
    else:
        sections.append(Section("The fleet it needs", paragraphs=(
            "Give an SLO (--slo-tpot-ms, --slo-ttft-ms) and a load (--load-rps) to size a fleet.",)))
    sections.append(Section("Where the numbers come from", bullets=tuple(sources)))
    sections.append(Section("The validations behind this kind of prediction", bullets=tuple(backing(s))))
    sections.append(Section("What is extrapolated", bullets=tuple(extrapolated)))
    page = PlanPage(title=f"Speculative decoding plan: {s.target.name} drafted by {s.draft.name}",
                    subtitle=s.heading,
                    verdict=(*trust_lines(s), *verdict_lines(r), *verdict_compared),
                    sections=tuple(sections), warn=s.profile is not None and not s.profile.trust.trusted,
                    footer=(f"made by specsim {__version__}: {command}",
                            "Predictions from a roofline cost model and a discrete-event simulation; the validations "
                            "above say how far to trust them."))
    return page, r


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

