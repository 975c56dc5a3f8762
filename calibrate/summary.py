"""The calibration summary printed at the end of `specsim calibrate` (plain text from a profile; no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scenarios import hardware_names, load_hardware


def _peak_note(name: str) -> str:
    """The datasheet peaks of a preset matching the device name, if any (CUDA devices)."""
    low = name.lower().replace(" ", "")
    for preset in hardware_names():
        hw = load_hardware(preset)
        key = preset.split("-")[0]
        if key in low:
            return (f" (datasheet {hw.name}: {hw.mem_bw_bytes_per_s / 1e9:,.0f} GB/s, "
                    f"{hw.peak_flops('bf16') / 1e12:,.0f} TFLOP/s bf16)")
    return ""


def format_summary(profile: dict[str, Any], path: Path) -> str:
    micro, fit, dev = profile["microbenchmarks"], profile["fit"], profile["device"]
    bw = micro["bandwidth"]
    lines = [f"device: {dev['name']} ({dev['kind']}, torch {dev.get('torch')}){_peak_note(dev['name'])}",
             f"memory bandwidth: read {bw['read_bytes_per_s'] / 1e9:.1f} GB/s "
             f"(IQR {100 * bw['read']['iqr_s'] / bw['read']['median_s']:.0f} %), "
             f"copy {bw['copy_bytes_per_s'] / 1e9:.1f} GB/s",
             "matmul FLOP/s: " + ", ".join(
                 f"{dt} {m['flops_per_s'] / 1e9:,.0f} GFLOP/s (n={m['size']})" for dt, m in micro["matmul"].items()),
             f"call overhead: {micro['call_overhead']['per_call_s'] * 1e6:.1f} us per tiny op"]
    for dt, rows in micro["skinny"].items():
        lines.append(f"skinny {dt} GEMM, GB/s of weight by rows: " + ", ".join(
            f"{r['rows']}: {r['bytes_per_s'] / 1e9:.1f}" for r in rows))
    ov = fit["overheads"]
    lines.append(f"fitted overheads: {ov['pass_s'] * 1e6:.0f} us per pass, {ov['layer_s'] * 1e6:.0f} us per layer, "
                 f"{ov['row_s'] * 1e6:.2f} us per token row, {ov.get('sequence_layer_s', 0) * 1e6:.1f} us per "
                 "sequence and layer")
    for name, v in ov.get("engine", {}).items():
        if v["fixed_s"] or v["per_sequence_s"]:
            lines.append(f"  engine, {name.replace('_', ' ')}: {v['fixed_s'] * 1e6:.0f} us + "
                         f"{v['per_sequence_s'] * 1e6:.1f} us per sequence per step")
    lin = fit["linear_rates"]
    lines.append("fitted linear-layer rate by rows (GB/s | GFLOP/s): " + ", ".join(
        f"{r}: {b / 1e9:.1f}|{f / 1e9:.0f}" for r, b, f in zip(lin["rows"], lin["mem_bw_bytes_per_s"],
                                                              lin["flops_per_s"])))
    h, d = fit["heldout"], fit["datasheet_heldout"]
    lines.append(f"held-out pass times ({h['n']} points, fit on {fit['train_points']}): median |error| "
                 f"{100 * h['median_abs_err']:.1f} %, p90 {100 * h['p90_abs_err']:.1f} %, max "
                 f"{100 * h['max_abs_err']:.1f} %")
    lines.append(f"  pure roofline (measured peaks, no overheads) on the same points: median |error| "
                 f"{100 * d['median_abs_err']:.1f} %, p90 {100 * d['p90_abs_err']:.1f} %")
    if fit.get("verify_ratio_batch1"):
        lines.append("batch-1 verify cost t(k+1)/t(1), measured -> fitted: " + ", ".join(
            f"k={r['k']}: {r['measured_ratio']:.2f}->{r['predicted_ratio']:.2f}" for r in fit["verify_ratio_batch1"]))
    oom = [p for p in profile["passes"] if p.get("oom")]
    if oom:
        lines.append(f"{len(oom)} grid points ran out of memory and were skipped (recorded in the profile)")
    lines.append(f"profile written to {path}")
    return "\n".join(lines)
