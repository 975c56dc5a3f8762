"""Plain decode steps and verify passes, GPU work only, priced three ways against each other, per configuration and
batch 1..256 (input 1,024, output 128: the mean context 1,088, as AIConfigurator's static generation estimate):

  (a) preset   specsim's hardware preset (scenarios/hardware.toml): its roofline and the kernel kinds it measured
               apart (fused MoE, block-scaled fp8 GEMM floors, MLA's module); an MoE model under specsim's default
               uniform routing, and on a line below under the power law the kernels were measured with; "refit":
               the preset re-anchored to the measured kernels as benchmarks/refit_presets.py fits its rates today;
  (b) profile  `calibrate --from aiconfigurator:SYSTEM/vllm`: passes priced from AIConfigurator's measured kernels,
               a verify pass reading each KV cache once (what predictions use: the profile's cost model);
  (c) AIC      AIConfigurator's own static estimate (its Python API, `EngineHandle.decode_step_latency`), a verify
               pass of k + 1 tokens priced as its generation step of B (k + 1) sequences.

The engine's own per-step cost (the vLLM preset's) is printed apart, in no column. At batch 128-256 the verify
passes of (b) and (c) side by side with the speed-up each implies for k = 3 at acceptance 0.7 (tokens per step x
plain step / verify pass; the draft's cost left out of both).

    pip install 'specsim[aiconfigurator]' && python benchmarks/kernels_check.py [--k 3] [--alpha 0.7] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibrate.aiconfigurator import parse_source  # noqa: E402
from calibrate.aiconfigurator_profile import aiconfigurator_profile  # noqa: E402
from scenarios import load_hardware, load_model  # noqa: E402
from simulator.cost import CostModel  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ISL, OSL = 1024, 128
CONTEXT = ISL + OSL // 2
# name, specsim target, dtype, AIConfigurator model, system, preset, TP, AIConfigurator's settings beside TP, dense
CONFIGS = (
    ("Llama-3.1-8B, H100", "llama-3.1-8b", "bf16", "meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "h100-sxm", 1, {}, True),
    ("Llama-3.1-8B, H200", "llama-3.1-8b", "bf16", "meta-llama/Meta-Llama-3.1-8B", "h200_sxm", "h200", 1, {}, True),
    ("Llama-3.1-8B, B200", "llama-3.1-8b", "bf16", "meta-llama/Meta-Llama-3.1-8B", "b200_sxm", "b200-sxm", 1, {},
     True),
    ("Llama-3.1-70B, TP 4, H100", "llama-3.1-70b", "bf16", "meta-llama/Meta-Llama-3.1-70B", "h100_sxm", "h100-sxm", 4,
     {}, True),
    ("Qwen3-30B-A3B, H100", "qwen3-30b-a3b", "bf16", "Qwen/Qwen3-30B-A3B", "h100_sxm", "h100-sxm", 1, {}, False),
    ("DeepSeek-V3, TP 8, H200 (fp8, fp8 cache)", "deepseek-v3", "fp8", "deepseek-ai/DeepSeek-V3", "h200_sxm", "h200",
     8, {"moe_tp_size": 8}, False),
)


def compared(target: str, dtype: str, hf: str, system: str, preset: str, tp: int, extra: dict, script: str
             ) -> tuple[Any, ...]:
    """What a configuration is compared across (here and in prefill_check.py): the database's source, the model and
    its shard on one GPU, the preset and its cost model, the aiconfigurator profile, and AIConfigurator's engine."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    src = parse_source(f"{system}/vllm")
    model = load_model(target, dtype)
    if model.attention == "mla":  # AIConfigurator serves DeepSeek-V3 in vLLM with an fp8 cache: price the same
        model = replace(model, kv_dtype="fp8")
    shard = model.shard(tp) if tp > 1 else model
    hw = load_hardware(preset)
    profile = aiconfigurator_profile(f"{system}/vllm", target, "llama-3.2-1b", dtype, tp, script, {},
                                     model_override=model)
    aic = EngineHandle.compile(hf, system, "vllm", backend_version=src.version, tp_size=tp, **extra)
    return src, model, shard, hw, CostModel.from_hardware(hw, dtype), profile, aic


def run_config(name: str, target: str, dtype: str, hf: str, system: str, preset: str, tp: int, extra: dict,
               k: int, alpha: float) -> dict:
    src, model, shard, hw, preset_cost, profile, aic = compared(target, dtype, hf, system, preset, tp, extra,
                                                                "kernels_check")
    # an MoE model's preset also under the routing the fused-MoE kernels were measured with (AIConfigurator's power
    # law, 1.01 for DeepSeek's family, 1.2 otherwise: `--power-law-routing`); specsim's default is uniform routing
    routed_cost = replace(preset_cost, routing_power_law=(1.01 if model.attention == "mla" else 1.2)
                          if model.is_moe else 0.0)
    refit_cost = CostModel.from_hardware(refit_hardware(system, preset), dtype)
    prof_cost = profile.cost_model()
    rows = []
    for b in BATCHES:
        r = {"batch": b,
             "preset_ms": 1e3 * preset_cost.pass_time_s(shard, b, 1, CONTEXT),
             "routed_ms": 1e3 * routed_cost.pass_time_s(shard, b, 1, CONTEXT),
             "refit_ms": 1e3 * refit_cost.pass_time_s(shard, b, 1, CONTEXT),
             "profile_ms": 1e3 * prof_cost.pass_time_s(profile.target, b, 1, CONTEXT),
             "aic_ms": aic.decode_step_latency(b, ISL, OSL),
             "preset_verify_ms": 1e3 * preset_cost.pass_time_s(shard, b, k + 1, CONTEXT),
             "profile_verify_ms": 1e3 * prof_cost.pass_time_s(profile.target, b, k + 1, CONTEXT),
             "aic_verify_ms": aic.decode_step_latency(b * (k + 1), ISL, OSL),
             "engine_step_ms": 1e3 * hw.overheads.engine.plain.at(b)}
        rows.append(r)
    tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
    for r in rows:
        r["profile_speedup"] = tokens * r["profile_ms"] / r["profile_verify_ms"]
        r["aic_speedup"] = tokens * r["aic_ms"] / r["aic_verify_ms"]
    return {"name": name, "source": src.database, "tp": tp, "rows": rows}


def refit_hardware(system: str, preset: str):
    """The preset re-anchored to the measured kernels by benchmarks/refit_presets.py as the script fits it today
    (hardware.toml holds the fit for every preset the database covers: this column checks it), with the measured
    all-reduce latency."""
    from refit_presets import fit, measured_passes

    passes, _, latency = measured_passes(system, preset)
    hw = load_hardware(preset)
    if latency is not None and hw.interconnect is not None:
        hw = replace(hw, interconnect=replace(hw.interconnect, latency_s=latency))
    v, _, _ = fit(hw, passes)
    return replace(hw, bw_efficiency=v["bw_efficiency"], flops_efficiency=v["flops_efficiency"],
                   attention_bw_efficiency=v["attention_bw_efficiency"], ridge_p=v["ridge_p"], rate_curve=(),
                   overheads=replace(hw.overheads, pass_s=0.0, layer_s=v["layer_fixed_us"] * 1e-6))


def _err(a: float, b: float) -> float:
    return 100.0 * (a / b - 1.0)


def report(result: dict, k: int, dense: bool) -> str:
    rows = result["rows"]
    out = [f"{result['name']} ({result['source']})",
           "  batch | plain step: preset   refit  profile     AIC  (pre/AIC ref/AIC pro/AIC) | verify k+1: preset  "
           "profile     AIC | engine/step"]
    for r in rows:
        out.append(f"  {r['batch']:5d} |        {r['preset_ms']:7.2f} {r['refit_ms']:7.2f}  {r['profile_ms']:7.2f} "
                   f"{r['aic_ms']:7.2f}  ({_err(r['preset_ms'], r['aic_ms']):+6.1f}% "
                   f"{_err(r['refit_ms'], r['aic_ms']):+6.1f}% {_err(r['profile_ms'], r['aic_ms']):+6.1f}%) |"
                   f"        {r['preset_verify_ms']:7.2f}  {r['profile_verify_ms']:7.2f} {r['aic_verify_ms']:7.2f}"
                   f" | {r['engine_step_ms']:6.2f}")
    pre = np.abs([_err(r["preset_ms"], r["aic_ms"]) for r in rows])
    pro = np.abs([_err(r["profile_ms"], r["aic_ms"]) for r in rows])
    ref = np.abs([_err(r["refit_ms"], r["aic_ms"]) for r in rows])
    out.append(f"  plain steps against AIC: profile median |err| {np.median(pro):.1f} % (max {pro.max():.1f}); "
               f"preset {np.median(pre):.1f} % (max {pre.max():.1f}); re-anchored preset {np.median(ref):.1f} % "
               f"(max {ref.max():.1f}){' [dense]' if dense else ''}")
    if not dense:
        rou = np.abs([_err(r["routed_ms"], r["aic_ms"]) for r in rows])
        out.append(f"  the preset under the kernels' own power-law routing (--power-law-routing): median |err| "
                   f"{np.median(rou):.1f} % (max {rou.max():.1f}): " + ", ".join(
                       f"batch {r['batch']} {r['routed_ms']:.2f} ms ({_err(r['routed_ms'], r['aic_ms']):+.1f} %)"
                       for r in rows if r["batch"] in (1, 4, 16, 64, 256)))
    for r in rows:
        if r["batch"] >= 128:
            out.append(f"  batch {r['batch']}: verify of {k + 1} tokens, KV read once {r['profile_verify_ms']:.2f} ms "
                       f"(speed-up {r['profile_speedup']:.2f}x) vs AIConfigurator's {r['aic_verify_ms']:.2f} ms "
                       f"({r['aic_speedup']:.2f}x)")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=0.7)
    ap.add_argument("--only", default=None, help="a configuration's name starts with this")
    ap.add_argument("--json", default=None, help="write every row here")
    args = ap.parse_args()
    results = []
    for cfg in CONFIGS:
        if args.only and not cfg[0].lower().startswith(args.only.lower()):
            continue
        res = run_config(*cfg[:8], args.k, args.alpha)
        res["dense"] = cfg[8]
        results.append(res)
        print(report(res, args.k, cfg[8]), flush=True)
        print()
    dense = [abs(_err(r["preset_ms"], r["aic_ms"])) for res in results if res["dense"] for r in res["rows"]]
    refit = [abs(_err(r["refit_ms"], r["aic_ms"])) for res in results if res["dense"] for r in res["rows"]]
    prof = [abs(_err(r["profile_ms"], r["aic_ms"])) for res in results for r in res["rows"]]
    if prof:
        print(f"all configurations: profile vs AIC median |err| {np.median(prof):.1f} % (max {max(prof):.1f} %)")
    if dense:
        print(f"dense configurations: preset vs AIC median |err| {np.median(dense):.1f} % (max {max(dense):.1f} %); "
              f"re-anchored presets {np.median(refit):.1f} % (max {max(refit):.1f} %)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
