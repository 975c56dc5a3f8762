"""The figures the GPU issue asks for, read from what `benchmarks/gpu_check.sh` wrote into one folder.

    python benchmarks/gpu_report.py OUT

- how long each calibration took, and its held-out pass error;
- the real shape's one-token pass at batch 1 against (weight + KV bytes) / measured read bandwidth;
- verifying 5 tokens against one at batch <= 16 and the largest context;
- the validation's calibrated speed-up error (median, p90), its repeatability, the best real speed-up at batch 1;
- the same pass before this work (eager, from ../shared/data/gpu-h200/README.md) for comparison.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from scenarios.profile import Profile, load_profile
from simulator.validation import MeasuredConfig, Summary

EAGER_BEFORE_MS = {(1, 1): 32.96, (1, 5): 34.99, (8, 1): 37.51, (8, 5): 23.67, (32, 1): 36.98, (32, 5): 40.03,
                   (128, 1): 95.94}  # llama-3.1-8b, context 1024, eager, H200 (shared/data/gpu-h200/README.md)


def times(out: Path) -> dict[str, tuple[int, float]]:
    rows: dict[str, tuple[int, float]] = {}
    if not (out / "times.txt").exists():  # a folder of a run's files without the check's step times
        return rows
    for line in (out / "times.txt").read_text().splitlines():
        name, rc, ms = line.split()
        rows[name] = (int(rc), float(ms) / 1e3)
    return rows


def pass_ms(profile: Profile, model: str, batch: int, n: int, context: int) -> float | None:
    for p in profile.timed:
        if (p.model, p.batch, p.new_tokens, p.context) == (model, batch, n, context):
            return 1e3 * p.median_s
    return None


def real_shape(profile: Profile) -> list[str]:
    t = profile.target
    c = max(p.context for p in profile.timed)
    bw = profile.micro.read_bytes_per_s
    lines = [f"real shape {t.name} ({profile.engine_mode} engine), context {c}, read bandwidth {bw / 1e9:,.0f} GB/s:"]
    one = pass_ms(profile, t.name, 1, 1, c)
    if one:
        floor = 1e3 * (t.weight_bytes_per_pass + (c + 1) * t.kv_bytes_per_token) / bw
        lines.append(f"  batch 1, one token: {one:.2f} ms against a floor of {floor:.2f} ms "
                     f"({one / floor:.2f}x; goal <= 1.5x)")
    for b in sorted({p.batch for p in profile.timed if p.model == t.name and p.batch <= 16}):
        t1, t5 = pass_ms(profile, t.name, b, 1, c), pass_ms(profile, t.name, b, 5, c)
        if t1 and t5:
            before = EAGER_BEFORE_MS.get((b, 1)) if t.name == "llama-3.1-8b" and c == 1024 else None
            was = f"; eager before this work {before:.1f} ms" if before else ""
            lines.append(f"  batch {b}: 1 token {t1:.2f} ms, 5 tokens {t5:.2f} ms: verify costs {t5 / t1:.2f}x "
                         f"(goal <= 1.3x){was}")
    return lines


def measured_speedup(row: dict) -> float:
    """A report row's measured speed-up as `MeasuredConfig.speedup_estimate` computes it from the JSON."""
    m = MeasuredConfig(**{k: Summary(**v) if isinstance(v, dict) else v for k, v in row["measured"].items()})
    return m.speedup_estimate


def validation(out: Path, name: str = "validate.json", what: str = "validation") -> list[str]:
    path = out / name
    if not path.exists() or not path.stat().st_size:
        return [f"{what}: no {name}"]
    r = json.loads(path.read_text())
    cal = r["predictors"]["calibrated"]
    lines = [f"{what}: calibrated speed-up median |error| {100 * cal['median_abs_err_speedup']:.1f} % (goal <= 5), "
             f"p90 {100 * cal['p90_abs_err_speedup']:.1f} % (goal <= 12); repeatability (IQR / median) median "
             f"{100 * r['repeatability_median']:.1f} % (goal < 10)"]
    b1 = [row for row in r["rows"] if row["batch"] == 1]
    if b1:
        best = max(b1, key=measured_speedup)
        what = f"tree {best['tree']}" if best["tree"] else f"k = {best['k']}"
        lines.append(f"  best real speed-up at batch 1: {measured_speedup(best):.2f}x with {what} "
                     "(goal >= 1.5x)")
    return lines


def serving(out: Path, name: str, what: str) -> list[str]:
    """A `validate --serving --json` report in three lines: the summary against the targets and the crossovers."""
    path = out / name
    if not path.exists() or not path.stat().st_size:
        return [f"{what}: no {name}"]
    r = json.loads(path.read_text())
    s = r["summary"]

    def pct(key: str) -> str:
        return f"median {100 * s[key]['median']:.1f} %, max {100 * s[key]['max']:.1f} %"

    lines = [f"{what}: throughput |error| {pct('throughput')} (goal 5), TPOT p50 {pct('tpot_p50')} (goal 10), "
             f"p90 {pct('tpot_p90')} (goal 15); {s['rows_not_held']} rate(s) not held within the cap"]
    for pol, c in r["crossovers"].items():
        lines.append(f"  {pol}: stops paying at {c['measured']} req/s measured, {c['predicted']} predicted "
                     f"({c['grid_steps_apart']} grid steps apart; goal <= 1)")
    for row in r["rows"]:  # where a row's steps went: the step-time piece, and the loop's own work around the engine
        loop, step = row.get("loop_s"), row.get("step_s")
        extra = (f", the loop's own work {1e6 * loop:.0f} us of a {1e3 * step:.2f} ms step"
                 if loop is not None and step else "")
        lines.append(f"  {row['rate_per_s']:g} req/s {row['policy']}: steps {100 * row['causes']['step time']:+.0f} %, "
                     f"prefills {100 * row['causes']['prefill']:+.0f} % against their prediction{extra}")
    captures = r.get("settings", {}).get("graph_captures")
    if captures:
        lines.append(f"  graphs captured: {captures['stream']} by the stream, {captures['spot_checks']} by its spot "
                     "checks")
    return lines


def main() -> None:
    out = Path(sys.argv[1])
    lines = ["", "=== GPU check summary"]
    for name, (rc, seconds) in times(out).items():
        lines.append(f"  {name:18s} exit {rc}  {seconds:7.1f} s")
    for name in ("builtin-profile.json", "real-profile.json"):
        if (out / name).exists():
            p = load_profile(out / name)
            h = p.fit.heldout
            lines.append(f"{name}: {p.device.name}, {p.engine_mode}, held-out pass error median "
                         f"{100 * h.median_abs_err:.1f} % p90 {100 * h.p90_abs_err:.1f} % "
                         f"({'trusted' if p.trust.trusted else 'UNTRUSTED: ' + '; '.join(p.trust.reasons)}); "
                         f"overheads {1e6 * p.fit.overheads.pass_s:.0f} us per pass, "
                         f"{1e6 * p.fit.overheads.layer_s:.1f} us per layer")
            if name == "real-profile.json":
                lines += real_shape(p)
                spreads = [q.spread for q in p.timed]
                lines.append(f"  pass timing spread (IQR / median): median {100 * float(np.median(spreads)):.1f} %")
    lines += validation(out)
    lines += validation(out, "validate-shapes.json", "validation at the real shapes, EAGLE-3 ShareGPT replayed")
    lines += serving(out, "validate-serving.json", "served stream, built-in pair")
    lines += serving(out, "validate-serving-shapes.json", "served stream at the real shapes, EAGLE-3 replayed")
    if (out / "steps.txt").exists():
        lines += ["real steps against the passes timed alone (benchmarks/gpu_steps.py):"] + [
            f"  {line}" for line in (out / "steps.txt").read_text().splitlines()]
    if (out / "prefill.txt").exists():
        lines += ["served prefills and steps (benchmarks/gpu_prefill.py):"] + [
            f"  {line}" for line in (out / "prefill.txt").read_text().splitlines()]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
