"""`specsim validate --against MANIFEST.toml`: every run of a deployment's own serving benchmarks simulated with the
same arrivals, lengths and request count (`calibrate.bench_replay`), from costs fitted on the runs the manifest marks
``fit = true`` (`calibrate.bench_import`) and judged on the rest: throughput, TTFT p50/p99 and TPOT p50/p99,
measured against simulated, per run, and the figure `validate --serving` draws.

A judged run counts as *past saturation* when the requests queue: its measured TTFT p50 is more than `SATURATION`
times the lightest paced run's of the same policy, or more than twice it while the output tokens it offered per
second (rate x mean output) pass `OFFERED` times the best throughput any run of that policy measured (a long
prefill hides the queue in the TTFT ratio), or it sent everything at once; closed-loop runs (a concurrency, no
rate) never are (the client waits for the server). The goal the report checks: throughput within 5 % and TPOT
p50 within 10 % on every judged run below saturation.

Also `specsim calibrate --from bench:MANIFEST.toml` (`calibrate_bench`); the CLI's glue is cli/bench_commands.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.bench_import import fit_bench, format_fit, metrics_row
from calibrate.bench_replay import replay
from scenarios.bench_files import BenchRun, Manifest, describe, read_manifest
from simulator import SpecsimError

SATURATION = 4.0  # a TTFT p50 this many times the lightest paced run's: the requests queue (past saturation)
OFFERED = 1.1  # or twice its TTFT p50 with output tokens offered above this many times the policy's best throughput
GOAL = {"throughput": 0.05, "tpot_p50_s": 0.10}


def base_setup(manifest: Manifest, hardware: str | None = None, profile: str | None = None) -> Any:
    """The preset or profile the fit starts from: the manifest's [setup], `hardware` / `profile` overriding it."""
    from scenarios.setup import resolve_setup

    s = manifest.setup
    hw = hardware or (None if profile else s.hardware)
    prof = profile
    if prof is None and hardware is None and s.profile:
        prof = str(manifest.path.parent / s.profile)  # a manifest's paths are relative to it
    if not hw and not prof:
        raise SpecsimError(f"{manifest.path}: [setup] needs hardware = \"PRESET\" (e.g. h100-sxm) or profile = "
                           "\"FILE\" (a calibrated profile): the costs the benchmarks' fit starts from")
    if hw and not s.target:
        raise SpecsimError(f"{manifest.path}: [setup] needs target = \"MODEL\" (and draft = \"MODEL\" for "
                           "speculative runs) with a hardware preset")
    return resolve_setup(hw, Path(prof) if prof else None, s.target, s.draft, s.dtype, s.acceptance,
                         need_acceptance=False, engine=None)


def saturated(run: BenchRun, runs: list[BenchRun]) -> bool:
    """Past saturation (module docstring), by the measurements alone."""
    if run.rate_per_s is None:
        return run.max_concurrency is None
    paced = [r for r in runs if r.policy == run.policy and r.rate_per_s is not None]
    lightest = min(paced, key=lambda r: r.rate_per_s or 0.0)
    queued = run.ttft.p50_s / lightest.ttft.p50_s
    best = max(r.throughput_tokens_per_s for r in paced)
    return queued > SATURATION or (queued > 2 and run.rate_per_s * run.output_tokens > OFFERED * best)


def validate_against(path: str | Path, seed: int | None = None) -> dict[str, Any]:
    """The report (module docstring): the fit, and every run measured against simulated."""
    manifest = read_manifest(path)
    if not manifest.fit_runs:
        raise SpecsimError(f"{manifest.path}: no run is marked fit = true; mark the runs to fit on (e.g. two plain "
                           "rates) and the rest are judged")
    if not manifest.judged_runs:
        raise SpecsimError(f"{manifest.path}: every run is marked fit = true; leave some unmarked to judge")
    base = base_setup(manifest)
    fit = fit_bench(manifest, base, manifest.fit_runs)
    seed = fit.seed if seed is None else seed
    runs = list(manifest.runs)
    rows = []
    for run in runs:
        row = metrics_row(run, replay(run, fit.costs(), fit.acceptance, fit.config, seed))
        row["rate_per_s"] = run.rate_per_s if run.rate_per_s is not None else run.completed / run.duration_s
        row["paced"] = run.rate_per_s is not None
        sent = run.sent_rate_per_s
        row["sent_rate_per_s"] = sent if sent is not None and math.isfinite(sent) else None  # JSON has no inf
        row["sent_span_s"] = run.sent_span_s
        row["requests"] = run.requests
        row["saturated"] = saturated(run, runs)
        rows.append(row)
    judged = [r for r in rows if not r["fit"]]
    below = [r for r in judged if not r["saturated"]]
    met = [r for r in below if all(abs(r[m][2]) <= g for m, g in GOAL.items())]
    med = sorted(judged, key=lambda r: r["rate_per_s"])[len(judged) // 2]
    return {"manifest": str(manifest.path), "engine": f"{fit.engine} (benchmarked)", "fit": fit.to_dict(),
            "fit_text": format_fit(fit), "rows": rows, "runs": describe(runs),
            "slots": fit.config.max_batch, "requests": int(np.median([r.requests for r in runs])),
            "tokens": int(np.median([r.output_tokens for r in runs])), "threads": "?",
            "median_row": {"rate_per_s": med["rate_per_s"], "policy": med["policy"]},
            "median_abs_err": {m: float(np.nanmedian([abs(r[m][2]) for r in judged]))
                               for m in ("throughput", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")},
            "goal": {"judged_below_saturation": len(below), "met": len(met),
                     "misses": [r["label"] for r in below if r not in met]}}


def _cell(trio: list[float], scale: float, fmt: str) -> str:
    m, s, e = trio
    if not (math.isfinite(m) and math.isfinite(s)):
        return "-"
    return f"{scale * m:{fmt}} -> {scale * s:{fmt}} ({100 * e:+.1f}%)"


BURST_SPAN = 0.2  # a paced run whose sends spanned under this share of its schedule's span came as a burst
LAG_SPAN = 3.0  # or over this many times it: the client lagged its schedule


def off_pace_of(row: dict[str, Any]) -> bool:
    """A paced run whose client did not send on its schedule: its sends spanned under `BURST_SPAN` or over `LAG_SPAN`
    times the span its rate schedules ((n - 1) / rate). Poisson gaps alone do neither: for 24 requests the span of 23
    exponential gaps is under 0.2 or over 3 times its mean with a probability below 1e-8 (8 requests: 5e-4)."""
    span, rate, n = row.get("sent_span_s"), row.get("rate_per_s"), row.get("requests") or 0
    if not row.get("paced") or span is None or not rate or n < 8:
        return False
    scheduled = (n - 1) / rate
    return not (BURST_SPAN * scheduled <= span <= LAG_SPAN * scheduled)


def format_report(report: dict[str, Any]) -> str:
    lines = ["runs read:", report["runs"], "", report["fit_text"], "",
             "measured -> simulated (simulated / measured - 1); fit: fitted on, else judged; sat: past saturation",
             f"{'run':<26}{'load':<14}{'policy':<9}{'':<6}{'throughput tok/s':>27}{'TTFT p50 ms':>27}"
             f"{'TTFT p99 ms':>27}{'TPOT p50 ms':>25}{'TPOT p99 ms':>25}"]
    off_pace = []
    for r in report["rows"]:
        tag = "fit" if r["fit"] else ("sat" if r["saturated"] else "")
        load = r["load"][:12]
        if off_pace_of(r):
            load += "!"
            off_pace.append(r)
        lines.append(f"{r['label'][-25:]:<26}{load:<14}{r['policy']:<9}{tag:<6}"
                     f"{_cell(r['throughput'], 1, '.1f'):>27}{_cell(r['ttft_p50_s'], 1e3, '.1f'):>27}"
                     f"{_cell(r['ttft_p99_s'], 1e3, '.1f'):>27}{_cell(r['tpot_p50_s'], 1e3, '.2f'):>25}"
                     f"{_cell(r['tpot_p99_s'], 1e3, '.2f'):>25}")
    for r in off_pace:
        sent = f"{r['sent_rate_per_s']:.3g}/s" if r["sent_rate_per_s"] else "at once"
        lines.append(f"! {r['label']}: its client sent the {r['requests']} requests over {r['sent_span_s']:.2f} s "
                     f"({sent}), not on the schedule of the {r['rate_per_s']:g}/s it was set to; the replay sends "
                     "them as they were sent")
    e, g = report["median_abs_err"], report["goal"]
    lines.append(f"median |error| over the judged runs: throughput {100 * e['throughput']:.1f} %, TTFT p50 "
                 f"{100 * e['ttft_p50_s']:.1f} %, p99 {100 * e['ttft_p99_s']:.1f} %, TPOT p50 "
                 f"{100 * e['tpot_p50_s']:.1f} %, p99 {100 * e['tpot_p99_s']:.1f} %")
    lines.append(f"goal (throughput within 5 %, TPOT p50 within 10 %) met on {g['met']} of "
                 f"{g['judged_below_saturation']} judged runs below saturation"
                 + (f"; missed: {', '.join(g['misses'])}" if g["misses"] else ""))
    return "\n".join(lines)


def calibrate_bench(path: str, hardware: str | None, out: Path | None, as_json: bool, echo: Any,
                    command: str = "specsim calibrate", options: dict[str, Any] | None = None) -> Any:
    """`specsim calibrate --from bench:MANIFEST.toml`: the fit to every run marked fit = true (every plain and
    speculative run if none is marked), reported, and written to `out` as a profile (`calibrate.bench_profile`)
    that every command taking --profile reads. Returns the profile."""
    from contextlib import nullcontext
    from dataclasses import replace

    from calibrate.bench_profile import bench_profile, simulate_options
    from scenarios.files import check_output
    from scenarios.output_lock import writing
    from scenarios.profile import save_profile

    if out is not None:
        check_output(out, "profile", (".json",))
    manifest = read_manifest(path)
    runs = manifest.fit_runs or [replace(r, fit=True) for r in manifest.runs]
    with writing(out) if out is not None else nullcontext():  # one calibration per --out at a time
        fit = fit_bench(manifest, base_setup(manifest, hardware), runs)
        profile = bench_profile(fit, manifest, runs, command, options or {})
        if out is not None:
            save_profile(profile, out)
    if as_json:
        echo(json.dumps(profile.to_dict(), indent=1, default=float))
        return profile
    trust = "trusted" if profile.trust.trusted else f"UNTRUSTED ({'; '.join(profile.trust.reasons)})"
    h = profile.fit.heldout
    held = (f"cross-validated run error (throughput, TPOT p50): median {100 * h.median_abs_err:.1f} %, max "
            f"{100 * h.max_abs_err:.1f} % over {h.n} held-out figures" if h.n else "nothing held out")
    echo("runs read:\n" + describe(runs) + "\n\n" + format_fit(fit) + f"\n{held}; profile {trust}")
    if out is not None:
        echo(f"profile written to {out}: specsim predict --profile {out}, specsim simulate --profile {out} "
             f"{simulate_options(fit)}")
    else:
        echo("no profile written: give --out FILE.json to predict and simulate with this fit")
    return profile
