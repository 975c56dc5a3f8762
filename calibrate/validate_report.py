"""The text report of `specsim validate` (strings from the comparison dict; no torch)."""

from __future__ import annotations

from typing import Any


def format_report(report: dict[str, Any], primary: str) -> str:
    lines = [f"validation on held-out prompts: {report['new_tokens']} tokens per sequence, {report['repeats']} repeats "
             f"interleaved, context ~{report['context']} tokens; predictions from {report['profile']}", "",
             " batch  draft      tokens/pass pred|meas (err)   step ms pred|meas (err)   speed-up pred|meas "
             "[min, max] (err)"]
    for r in report["rows"]:
        p, m = r["predicted"][primary], r["measured"]
        what = f"tree {r['tree']}" if r["tree"] else f"k={r['k']}"
        lines.append(
            f" {r['batch']:5d}  {what:9s}  {p['tokens_per_pass']:5.2f}|{m['tokens_per_pass']['median']:5.2f} "
            f"({100 * p['err_tokens_per_pass']:+5.1f} %)    {1e3 * p['step_s']:6.1f}|"
            f"{1e3 * m['step_s']['median']:6.1f} ({100 * p['err_step']:+5.1f} %)   "
            f"{p['speedup']:4.2f}|{m['speedup']['median']:4.2f} "
            f"[{m['speedup']['min']:.2f}, {m['speedup']['max']:.2f}] ({100 * p['err_speedup']:+5.1f} %)"
            + ("  *" if r.get("extrapolated") else "")
        )
    if any(r.get("extrapolated") for r in report["rows"]):
        lines.append(" * beyond the profile's calibration grid (batch or rows): the fit extrapolates; calibrate with "
                     "a --batch range that covers it for measured anchors")
    lines.append("")
    lines.append("speed-up error per predictor (|predicted / measured - 1| over the configurations):")
    for name, s in report["predictors"].items():
        lines.append(f"  {name:20s} median {100 * s['median_abs_err_speedup']:5.1f} %   p90 "
                     f"{100 * s['p90_abs_err_speedup']:5.1f} %   tokens/pass mean |err| "
                     f"{100 * s['mean_abs_err_tokens_per_pass']:4.1f} %")
    rep = report["repeatability"]
    lines.append("measurement repeatability: speed-up IQR / median over repeats, median "
                 f"{100 * rep['median_rel_iqr_speedup']:.1f} %, worst {100 * rep['max_rel_iqr_speedup']:.1f} %")
    c = report["crossover"]
    fmt = lambda v: "none in the grid" if v is None else f"batch {v}"  # noqa: E731
    lines.append(f"crossover (best k becomes 0): measured {fmt(c['measured'])}, predicted {fmt(c['predicted'])} "
                 f"({c['grid_steps_apart']} grid steps apart)")
    lines.append("largest misses of the calibrated prediction, and the term that explains most of each:")
    for w in report["worst"]:
        what = f"tree {w['tree']}" if w["tree"] else f"k={w['k']}"
        terms = ", ".join(f"{k} {100 * v:+.1f} %" for k, v in sorted(w["terms"].items(), key=lambda kv: -abs(kv[1])))
        lines.append(f"  B={w['batch']} {what}: {100 * w['err_speedup']:+.1f} % (repeatability "
                     f"{100 * w['repeatability']:.1f} %) - mostly {w['main_term']}; terms: {terms}")
    return "\n".join(lines)
