"""The text report of `specsim validate` (strings from a `ValidationReport`; no torch)."""

from __future__ import annotations

from calibrate.validate import PRIMARY, REPLAYED, ValidationReport


def format_report(report: ValidationReport, primary: str = PRIMARY) -> str:
    s = report.settings
    where = (f"at {s['shapes']} shapes, acceptance replayed from {s.get('acceptance')}" if "shapes" in s
             else "on held-out prompts")
    pairs = f"paired with a plain run, {s['pairs']}" if "pairs" in s else "paired with a plain run"
    lines = [f"validation {where}: {s.get('new_tokens')} tokens per sequence, {s.get('repeats')} repeats (each run "
             f"{pairs}), context ~{report.context} tokens; predictions from {s.get('profile')} "
             f"({s.get('engine_mode', 'eager')} engine)", "",
             " batch  draft      tokens/pass pred|meas (err)   step ms pred|meas (err)   speed-up pred|meas "
             "[min, max] (err)"]
    for r in report.rows:
        p, m = r.predicted[primary], r.measured
        lines.append(
            f" {r.batch:5d}  {r.label:9s}  {p.tokens_per_pass:5.2f}|{m.tokens_per_pass_estimate:5.2f} "
            f"({100 * p.err_tokens_per_pass:+5.1f} %)    {1e3 * p.step_s:6.1f}|{1e3 * m.step_s.median:6.1f} "
            f"({100 * p.err_step:+5.1f} %)   {p.speedup:4.2f}|{m.speedup_estimate:4.2f} "
            f"[{m.speedup.min:.2f}, {m.speedup.max:.2f}] ({100 * p.err_speedup:+5.1f} %)"
            + ("  *" if r.extrapolated else ""))
    lines.append(" measured: tokens per pass pooled over the repeats x the median of the pairs' cost ratios; "
                 "[min, max]: the pairs' own speed-ups")
    noise = report.within_acceptance_noise(primary)
    if noise is not None:
        lines.append(f" the acceptance a finite run draws: each measured speed-up +/- {100 * noise[0]:.1f} % (median "
                     f"over the rows; one standard error of its pooled tokens per pass over the sequences decoded); "
                     f"{primary}'s error within two of them in {noise[1]} of {noise[2]} rows")
    if any(r.extrapolated for r in report.rows):
        lines.append(" * beyond the profile's calibration grid (batch or rows): the fit extrapolates; calibrate with "
                     "a --batch range that covers it for measured anchors")
    lines += ["", "speed-up error per predictor (|predicted / measured - 1| over the configurations):"]
    for name, e in report.predictors.items():
        lines.append(f"  {name:22s} median {100 * e.median_abs_err_speedup:5.1f} %   p90 "
                     f"{100 * e.p90_abs_err_speedup:5.1f} %   tokens/pass mean |err| "
                     f"{100 * e.mean_abs_err_tokens_per_pass:4.1f} %")
    if REPLAYED in report.predictors:
        drawn = report.predictors[primary].median_abs_err_tokens_per_pass
        lines.append(f"  (@replayed: each pair priced at the tokens per pass its replay drew, the cost model's own "
                     f"error, with and without the spot check; {primary} expects the acceptance model's mean, which "
                     f"the draws missed by a median {100 * drawn:.1f} %)")
    spot = report.spot_check
    if spot:
        drift = ", ".join(f"{p['model'].removeprefix('specsim-')} B={p['batch']} {p['drift']:.2f}x "
                          f"({1e3 * p['before_s']:.1f}|{1e3 * p['after_s']:.1f} ms)" for p in spot["points"])
        lines.append(f"spot check, single passes now / as profiled (before|after the runs): {drift}")
        if spot["largest_drift"] > 0.05:
            lines.append(f"  the device runs up to {100 * spot['largest_drift']:.0f} % off its profile: "
                         f"'{primary}' prices passes at today's speed, 'as-profiled' does not; if this persists, "
                         "calibrate again")
    lines.append("measurement repeatability: speed-up IQR / median over repeats, median "
                 f"{100 * report.repeatability_median:.1f} %, worst {100 * report.repeatability_max:.1f} %")

    def fmt(v: int | None) -> str:
        return "none in the grid" if v is None else f"batch {v}"

    lines.append(f"crossover (best k becomes 0): measured {fmt(report.crossover_measured)}, predicted "
                 f"{fmt(report.crossover_predicted)} ({report.crossover_grid_steps_apart} grid steps apart)")
    lines.append("largest misses of the calibrated prediction, and the term that explains most of each:")
    for w in report.worst:
        what = f"tree {w.tree}" if w.tree else f"k={w.k}"
        terms = ", ".join(f"{k} {100 * v:+.1f} %" for k, v in sorted(w.terms.items(), key=lambda kv: -abs(kv[1])))
        lines.append(f"  B={w.batch} {what}: {100 * w.err_speedup:+.1f} % (repeatability {100 * w.repeatability:.1f} "
                     f"%) - mostly {w.main_term}; terms: {terms}")
    return "\n".join(lines)
