"""Re-anchor the GPU presets (scenarios/hardware.toml) to AIConfigurator's measured kernels.

For every preset the database covers, the dense decode passes of Llama-3.1-8B (one GPU) and Llama-3.1-70B (TP 4)
at batch 1..256, 1 and 4 new tokens, contexts 1,088 and 4,096 are priced from the measured kernels under vLLM
(`simulator.kernel_tables.decode_pass`: GEMMs, decode attention, the engine's all-reduce; norms and activations by
AIConfigurator's element-wise rule), and the preset's roofline is fitted to them (least squares in log time):

  bw_efficiency, flops_efficiency  the linear layers' achieved bandwidth and FLOP/s;
  ridge_p                          how their memory and compute times combine (the best of 1 .. inf: measured
                                   kernels sit near the larger of the two, not their sum);
  attention_bw_efficiency          the decode-attention kernels' KV read;
  layer_fixed_us                   GPU time per layer the roofline does not see (launch floors, norms);
                                   the bandwidth fractions held at 95 % at most (the floors take the rest);
  interconnect_latency_us          the engine's custom all-reduce of a decode-sized message (8 KB - 64 KB), from
                                   the all-reduce table directly.

Prints, per preset, the fitted values, the fit's error, and the TOML lines (with their source) to paste into
scenarios/hardware.toml; --check says whether the TOML holds them (to 2 %).

    pip install 'specsim[aiconfigurator]' && python benchmarks/refit_presets.py [--only h100-sxm] [--check]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibrate.aiconfigurator import (  # noqa: E402
    PRESET_OF,
    all_reduce_table,
    installed,
    measured_kernels,
    package_version,
    parse_source,
)
from scenarios import load_engine, load_hardware, load_model  # noqa: E402
from simulator.cost import CostModel  # noqa: E402
from simulator.kernel_tables import decode_pass  # noqa: E402

BATCHES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])
NEW_TOKENS = (1, 4)
CONTEXTS = (1088, 4096)
RIDGES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, float("inf"))
MODELS = (("llama-3.1-8b", 1), ("llama-3.1-70b", 4))
SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")  # the data-centre GPUs
MAX_BW_EFFICIENCY = 0.95  # no kernel streams HBM at its datasheet peak; the fit's launch floors take the rest


def measured_passes(system: str, preset: str) -> tuple[list, str, float | None]:
    """[(model shard, new tokens, context, batches, times_s)], the source label, the all-reduce latency (s)."""
    src = parse_source(f"{system}/vllm")
    hw = load_hardware(preset)
    out = []
    for name, tp in MODELS:
        model = load_model(name)
        shard = model.shard(tp) if tp > 1 else model
        try:
            shapes, kernels, _ = measured_kernels(src, shard, hw)
        except Exception as e:  # a table this system lacks (an all-reduce over 4 GPUs, ...)
            print(f"  {name} TP {tp}: skipped ({e})")
            continue
        if tp > 1 and kernels.all_reduce is None:
            print(f"  {name} TP {tp}: skipped (no all-reduce table)")
            continue
        for n in NEW_TOKENS:
            for c in CONTEXTS:
                t = np.array([decode_pass(shapes, kernels, int(b), n, c).total_s for b in BATCHES])
                out.append((shard, n, c, t))
    latency = None
    for tp in (2, 4, 8):
        ar, _ = all_reduce_table(src, tp)
        if ar is not None:
            small = np.array([8192.0, 16384.0, 32768.0, 65536.0])
            latency = float(np.median(ar.at(small)))  # the bandwidth term is < 0.2 us at these sizes
            break
    return out, src.database, latency


def preset_times(hw, passes, p: float, bw: float, fl: float, att: float, layer_us: float) -> np.ndarray:
    h = replace(hw, bw_efficiency=bw, flops_efficiency=fl, attention_bw_efficiency=att, ridge_p=p, rate_curve=(),
                overheads=replace(hw.overheads, pass_s=0.0, layer_s=layer_us * 1e-6))
    cost = CostModel.from_hardware(h, "bf16")
    return np.concatenate([cost.pass_times(m, BATCHES, n, c) for m, n, c, _ in passes])


def fit(hw, passes) -> tuple[dict, float, float]:
    from scipy.optimize import least_squares

    target = np.log(np.concatenate([t for *_, t in passes]))
    best = None
    for p in RIDGES:
        def resid(x: np.ndarray, p: float = p) -> np.ndarray:
            bw, fl, att, lay = x
            return np.log(preset_times(hw, passes, p, bw, fl, att, lay)) - target

        hi = [MAX_BW_EFFICIENCY, 1.0, MAX_BW_EFFICIENCY, 200.0]
        r = least_squares(resid, x0=[0.8, 0.7, 0.8, 5.0], bounds=([0.2, 0.1, 0.2, 0.0], hi))
        cost = float(np.mean(r.fun ** 2))
        if best is None or cost < best[0]:
            best = (cost, p, r.x, r.fun)
    _, p, x, res = best
    err = np.abs(np.expm1(res))
    return ({"ridge_p": p, "bw_efficiency": x[0], "flops_efficiency": x[1], "attention_bw_efficiency": x[2],
             "layer_fixed_us": x[3]}, float(np.median(err)), float(err.max()))


def toml_lines(preset: str, v: dict, source: str, median: float, worst: float, latency: float | None) -> str:
    p = "\"inf\"" if v["ridge_p"] == float("inf") else f"{v['ridge_p']:g}"
    lines = [f"[{preset}]  # from benchmarks/refit_presets.py",
             f"bw_efficiency = {v['bw_efficiency']:.3f}", f"flops_efficiency = {v['flops_efficiency']:.3f}",
             f"attention_bw_efficiency = {v['attention_bw_efficiency']:.3f}", f"ridge_p = {p}",
             f"layer_fixed_us = {v['layer_fixed_us']:.1f}"]
    if latency is not None:
        lines.append(f"interconnect_latency_us = {latency * 1e6:.1f}")
    lines.append(f"rates_source = \"fitted by benchmarks/refit_presets.py to {source}: vLLM's measured GEMMs, decode "
                 f"attention and all-reduce priced into Llama-3.1-8B and 70B TP 4 passes (batch 1..256, 1 and 4 new "
                 f"tokens, contexts 1,088 and 4,096); the fit's median |error| {100 * median:.1f} %, max "
                 f"{100 * worst:.1f} %\"")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="one preset, e.g. h100-sxm")
    ap.add_argument("--check", action="store_true", help="say whether hardware.toml holds the fitted values")
    args = ap.parse_args()
    have = installed()
    print(f"AIConfigurator {package_version()}: systems {', '.join(sorted(have))}")
    failed = 0
    for system, preset in PRESET_OF.items():
        wanted = system in SYSTEMS and (not args.only or preset == args.only)
        if not wanted or system not in have or "vllm" not in have[system]:
            continue
        print(f"{preset} ({system}):")
        passes, source, latency = measured_passes(system, preset)
        if not passes:
            continue
        hw = load_hardware(preset)
        if latency is not None and hw.interconnect is not None:  # the measured all-reduce, not the engine preset's
            hw = replace(hw, interconnect=replace(hw.interconnect, latency_s=latency))
        values, median, worst = fit(hw, passes)
        print(toml_lines(preset, values, source, median, worst, latency))
        if args.check:
            shipped = load_hardware(preset)  # with the vllm engine preset, whose per-layer cost is its own
            held = {k: getattr(shipped, k) for k in ("bw_efficiency", "flops_efficiency", "attention_bw_efficiency")}
            held["layer_fixed_us"] = (shipped.overheads.layer_s - load_engine("vllm")[1].layer_s) * 1e6
            if latency is not None and shipped.interconnect is not None:
                held["interconnect_latency_us"] = shipped.interconnect.latency_s * 1e6
                values = {**values, "interconnect_latency_us": latency * 1e6}
            off = [k for k, v in held.items() if abs(v - values[k]) > 0.02 * abs(values[k]) + 0.05]
            if shipped.ridge_p != values["ridge_p"]:
                off.append("ridge_p")
            failed += bool(off)
            print(f"  hardware.toml {'differs in ' + ', '.join(off) if off else 'holds these'}")
        print()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
