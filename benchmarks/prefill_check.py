"""Prompts' passes (prefills), GPU work only, priced three ways against each other, per configuration and prompt
length 128..8,192 at batch 1 (and a few batches):

  (a) preset   specsim's hardware preset (scenarios/hardware.toml) and its roofline, a prompt as one pass of n new
               tokens on nothing cached;
  (b) profile  `calibrate --from aiconfigurator:SYSTEM/vllm`: what `simulate --profile` charges a prefill step
               (the profile's cost model; its prompts' passes priced by `kernel_tables.prefill_pass` from the measured
               context-attention / MLA context tables and the GEMMs at every prompt token);
  (c) AIC      AIConfigurator's own context-phase estimate (its Python API, `EngineHandle.predict_prefill_latency`).

For the MoE models a fourth column, AIC less its MoE dispatch ops (`run_static_per_op`'s context_moe_pre_dispatch
and _post_dispatch): AIConfigurator prices vLLM's tensor-parallel MoE with them (each the size of an all-reduce of
the layer's activations), where vLLM runs two all-reduces a layer and no dispatch; specsim's decode passes leave
them out too. A chunk of 1,024 tokens on 4,096 cached ones closes each configuration's table: the profile (its
prompt's pass carried to the cached context by the preset's roofline), `prefill_pass` at that context (the measured
kernel at 5,120 tokens times the chunk's share of its causal pairs) and AIC with prefix 4,096.

    pip install 'specsim[aiconfigurator]' && python benchmarks/prefill_check.py [--only NAME] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibrate.aiconfigurator import measured_kernels  # noqa: E402
from simulator.kernel_tables import prefill_pass  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels_check import CONFIGS as KERNEL_CONFIGS  # noqa: E402
from kernels_check import compared  # noqa: E402

PROMPTS = (128, 256, 512, 1024, 2048, 2500, 4096, 5000, 8192)  # 2,500 and 5,000: between the profile's grid points
BATCHED = ((4, 512), (4, 2048), (16, 512), (16, 2048))  # (prompts, tokens each)
CHUNK, CACHED = 1024, 4096
# name, specsim target, dtype, AIConfigurator model, system, preset, TP, AIConfigurator's settings beside TP
CONFIGS = tuple(c[:8] for c in KERNEL_CONFIGS)  # kernels_check.py's configurations


def run_config(name: str, target: str, dtype: str, hf: str, system: str, preset: str, tp: int, extra: dict) -> dict:
    src, model, shard, hw, preset_cost, profile, aic = compared(target, dtype, hf, system, preset, tp, extra,
                                                                "prefill_check")
    prof_cost = profile.cost_model()
    shapes, kernels, _ = measured_kernels(src, shard, hw)

    def aic_ms(batch: int, tokens: int, prefix: int = 0) -> tuple[float, float]:
        ops, _ = aic.run_static_per_op(batch_size=batch, isl=tokens + prefix, osl=2, prefix=prefix)
        dispatch = sum(v for op, v, *_ in ops if "dispatch" in op)
        total = aic.predict_prefill_latency(batch, tokens + prefix, prefix)
        return total, total - dispatch

    rows = []
    for batch, tokens in [(1, n) for n in PROMPTS] + list(BATCHED):
        aic_total, aic_kernels = aic_ms(batch, tokens)
        rows.append({"batch": batch, "tokens": tokens,
                     "preset_ms": 1e3 * preset_cost.pass_time_s(shard, batch, tokens, 0),
                     "profile_ms": 1e3 * prof_cost.pass_time_s(profile.target, batch, tokens, 0),
                     "tables_ms": 1e3 * prefill_pass(shapes, kernels, batch, tokens).total_s,
                     "aic_ms": aic_total, "aic_no_dispatch_ms": aic_kernels})
    aic_total, aic_kernels = aic_ms(1, CHUNK, CACHED)
    chunk = {"batch": 1, "tokens": CHUNK, "cached": CACHED,
             "preset_ms": 1e3 * preset_cost.pass_time_s(shard, 1, CHUNK, CACHED),
             "profile_ms": 1e3 * prof_cost.pass_time_s(profile.target, 1, CHUNK, CACHED),
             "tables_ms": 1e3 * prefill_pass(shapes, kernels, 1, CHUNK, CACHED).total_s,
             "aic_ms": aic_total, "aic_no_dispatch_ms": aic_kernels}
    return {"name": name, "source": src.database, "tp": tp, "moe": model.is_moe, "rows": rows, "chunk": chunk}


def _err(a: float, b: float) -> float:
    return 100.0 * (a / b - 1.0)


def _stats(rows: list[dict], ours: str, theirs: str) -> np.ndarray:
    return np.abs([_err(r[ours], r[theirs]) for r in rows])


def report(result: dict) -> str:
    rows, moe = result["rows"], result["moe"]
    head = "  batch x tokens |  preset  profile   tables      AIC" + ("  AIC-disp" if moe else "") + \
           " | pre/AIC pro/AIC" + (" pro/AIC-disp" if moe else "")
    out = [f"{result['name']} ({result['source']})", head]
    for r in rows + [result["chunk"]]:
        shape = f"{r['batch']:3d} x {r['tokens']:5d}" + (f" on {r['cached']}" if "cached" in r else "")
        line = (f"  {shape:>14s} | {r['preset_ms']:7.2f} {r['profile_ms']:8.2f} {r['tables_ms']:8.2f} "
                f"{r['aic_ms']:8.2f}")
        if moe:
            line += f"  {r['aic_no_dispatch_ms']:8.2f}"
        line += f" | {_err(r['preset_ms'], r['aic_ms']):+6.1f}% {_err(r['profile_ms'], r['aic_ms']):+6.1f}%"
        if moe:
            line += f" {_err(r['profile_ms'], r['aic_no_dispatch_ms']):+8.1f}%"
        out.append(line)
    pro, pre = _stats(rows, "profile_ms", "aic_ms"), _stats(rows, "preset_ms", "aic_ms")
    line = (f"  prompts against AIC: profile median |err| {np.median(pro):.1f} % (max {pro.max():.1f}); preset "
            f"{np.median(pre):.1f} % (max {pre.max():.1f})")
    if moe:
        nod = _stats(rows, "profile_ms", "aic_no_dispatch_ms")
        line += f"; profile vs AIC less its MoE dispatch {np.median(nod):.1f} % (max {nod.max():.1f})"
    out.append(line)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="a configuration's name starts with this")
    ap.add_argument("--json", default=None, help="write every row here")
    args = ap.parse_args()
    results = []
    for cfg in CONFIGS:
        if args.only and not cfg[0].lower().startswith(args.only.lower()):
            continue
        res = run_config(*cfg)
        results.append(res)
        print(report(res), flush=True)
        print()
    rows = [r for res in results for r in res["rows"]]
    if rows:
        pro, pre = _stats(rows, "profile_ms", "aic_ms"), _stats(rows, "preset_ms", "aic_ms")
        kern = [r for res in results for r in res["rows"]]
        nod = _stats(kern, "profile_ms", "aic_no_dispatch_ms")
        print(f"all configurations: profile vs AIC median |err| {np.median(pro):.1f} % (max {pro.max():.1f} %); "
              f"against AIC less its MoE dispatch {np.median(nod):.1f} % (max {nod.max():.1f} %); preset vs AIC "
              f"{np.median(pre):.1f} % (max {pre.max():.1f} %)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
