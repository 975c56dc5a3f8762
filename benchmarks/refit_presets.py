"""Re-anchor the GPU presets (scenarios/hardware.toml) to AIConfigurator's measured kernels.

For every preset the database covers, the dense decode passes of Llama-3.1-8B and Llama-3.2-1B (one GPU) and
Llama-3.1-70B (TP 4) at batch 1..256, 1 and 4 new tokens, contexts 1,088 and 4,096 are priced from the measured
kernels under vLLM (`simulator.kernel_tables.decode_pass`: GEMMs, decode attention, the engine's all-reduce; norms
and activations by AIConfigurator's element-wise rule), and the preset's roofline is fitted to them (least squares
in log time):

  bw_efficiency, flops_efficiency  the linear layers' achieved bandwidth and FLOP/s;
  ridge_p                          how their memory and compute times combine (the best of 1 .. inf: measured
                                   kernels sit near the larger of the two, not their sum);
  attention_bw_efficiency          the decode-attention kernels' KV read;
  layer_fixed_us                   GPU time per layer the roofline does not see (launch floors, norms);
                                   the bandwidth fractions held at 95 % at most (the floors take the rest);
  interconnect_latency_us          the engine's custom all-reduce of a decode-sized message (8,192 - 65,536
                                   elements, the table's key: 16 - 128 KB of bf16), from the table directly;
  interconnect_allreduce_bw_efficiency  the fraction of the link's datasheet bandwidth its ring term reaches, fitted
                                   to the table's messages of 2 - 32 MB (`all_reduce_bw_efficiency`), and
                                   held while the rates are fitted.

Llama-3.2-1B is in the fit because 8B's and 70B TP 4's layers hold the same bytes a GPU (~0.22 GB): with those two
alone, the bandwidth and the time a layer trade off (two fits as good, 0.95 and 40 us or 0.70 and 0 us); 1B's
layers (~0.06 GB) tell them apart.

Prints, per preset, the fitted values, the fit's error, and the TOML lines (with their source) to paste into
scenarios/hardware.toml; --check says whether the TOML holds them (to 2 %), and fails where a fit was skipped for a
missing table (its values would go unchecked).

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
    all_reduce_table,
    installed,
    measured_kernels,
    package_version,
    parse_source,
)
from scenarios import load_engine, load_hardware, load_model  # noqa: E402
from scenarios.kernel_systems import PRESET_OF  # noqa: E402
from simulator import SpecsimError  # noqa: E402
from simulator.cost import CostModel  # noqa: E402
from simulator.kernel_tables import decode_pass  # noqa: E402

BATCHES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])
NEW_TOKENS = (1, 4)
CONTEXTS = (1088, 4096)
RIDGES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, float("inf"))
# 1B's layers hold a quarter of the others' bytes a GPU: it separates the bandwidth from the time a layer
MODELS = (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("llama-3.2-1b", 1))
SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")  # the data-centre GPUs
MAX_BW_EFFICIENCY = 0.95  # no kernel streams HBM at its datasheet peak; the fit's launch floors take the rest
SKIPPED: list[str] = []  # the fits left out for a missing table, this run: --check fails on any


def skipped(what: str, why: str) -> None:
    """Say a fit was left out (a table the database lacks) and note it for --check."""
    print(f"  {what}: skipped ({why})")
    SKIPPED.append(what)


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
        except SpecsimError as e:  # a table this system lacks (an all-reduce over 4 GPUs, ...)
            skipped(f"{name} TP {tp}", str(e))
            continue
        if tp > 1 and kernels.all_reduce is None:
            skipped(f"{name} TP {tp}", "no all-reduce table")
            continue
        for n in NEW_TOKENS:
            for c in CONTEXTS:
                t = np.array([decode_pass(shapes, kernels, int(b), n, c).total_s for b in BATCHES])
                out.append((shard, n, c, t))
    latency = None
    for tp in (2, 4, 8):
        ar, _ = all_reduce_table(src, tp)
        if ar is not None:
            # the table's key is bf16 elements: 70B's decode passes at batch 1-8 (16-128 KB)
            small = np.array([8192.0, 16384.0, 32768.0, 65536.0])
            latency = float(np.median(ar.at(small)))  # the bandwidth term is < 0.3 us at these sizes
            break
    return out, src.database, latency


# messages of 2 - 32 MB in bf16, where the ring term outweighs the latency: a 8,192-wide model's passes of 128 to
# 2,048 rows (below, the latency is the all-reduce; vLLM's Blackwell kernels step from one algorithm to another
# at ~0.5 MB, which no latency + bandwidth line follows)
AR_FIT_ELEMENTS = (1048576.0, 16777216.0)


def all_reduce_bw_efficiency(system: str, hw, latency_s: float) -> tuple[float, float, float] | None:
    """The fraction of the preset's link bandwidth vLLM's custom all-reduce reaches in the ring term of
    `Interconnect.all_reduce_s` (latency + 2 (n - 1) / n x bytes / bandwidth), fitted (least squares in log time,
    the latency held) to the table over 2, 4 and 8 GPUs at 1,048,576 - 16,777,216 elements (bytes = 2 x elements).
    (efficiency, median |err|, max |err|); None where nothing is measured."""
    from scipy.optimize import least_squares

    src = parse_source(f"{system}/vllm")
    n_gpus, nbytes, t = [], [], []
    for tp in (2, 4, 8):
        ar, _ = all_reduce_table(src, tp)
        if ar is None:
            continue
        keys = np.array([m for m in ar.sizes if AR_FIT_ELEMENTS[0] <= m <= AR_FIT_ELEMENTS[1]])
        n_gpus += [tp] * len(keys)
        nbytes += list(2.0 * keys)
        t += list(ar.at(keys))
    if not t or hw.interconnect is None:
        return None
    n, b, t = np.array(n_gpus, float), np.array(nbytes), np.array(t)

    def model(eff: float) -> np.ndarray:
        return latency_s + 2 * (n - 1) / n * b / (hw.interconnect.bw_bytes_per_s * eff)

    r = least_squares(lambda x: np.log(model(x[0])) - np.log(t), x0=[0.5], bounds=([0.05], [1.0]))
    err = np.abs(model(r.x[0]) / t - 1)
    return float(r.x[0]), float(np.median(err)), float(err.max())


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


# AIConfigurator's fused-MoE dtypes -> specsim's (simulator.cost.moe_kernel_dtype); int4 and w4a8 are not presets'
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "w4a16_mxfp4": "mxfp4"}
MOE_MAX_TOKENS = 1024  # decode and verify passes: batch 256 x 4 rows at most
FLOOR_KNOTS = (1, 16, 32)  # block-scaled fp8 GEMMs: one floor to 16 rows, another from 32 (the tables' two kernels)


def fit_moe(src, hw) -> dict[str, tuple[float, float, float, float, float, int]]:
    """Per expert dtype: the fused-MoE kernel as `simulator.kernel_kinds` prices it (a fixed time a layer, a time
    per woken expert, the woken experts' bytes and the routed FLOPs at fractions of the datasheet, through the
    preset's ridge), fitted (least squares in log time, robust) to every shape moe_perf measured with one
    expert-parallel rank, up to 1,024 tokens, under its power-law routings (the woken experts counted as
    `simulator.routing` draws them).
    {dtype: (fixed_us, bw_eff, flops_eff, median |err|, max |err|, points, expert_us, one_token_us)}."""
    from scipy.optimize import least_squares

    from calibrate.aiconfigurator import _read, _table_path
    from simulator.cost import ridge_combine_many
    from simulator.formats import dtype_bytes
    from simulator.kernel_kinds import MOE_COMPUTE
    from simulator.routing import power_law_touched

    found = _table_path(src, "moe", "moe_perf")
    if found is None:
        return {}
    df = _read(found[0], ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                          "moe_tp_size", "moe_ep_size", "distribution", "latency"))
    df = df[(df.moe_ep_size == 1) & df.distribution.str.startswith("power_law") & (df.num_tokens <= MOE_MAX_TOKENS)]
    out = {}
    for table_dtype, dt in MOE_DTYPES.items():
        d = df[df.moe_dtype == table_dtype]
        if d.empty:
            continue
        d = d.groupby(["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                       "distribution"], as_index=False).latency.min()
        alpha = d.distribution.str.replace("power_law_", "").astype(float).to_numpy()
        tokens = d.num_tokens.to_numpy(dtype=float)
        touched = np.array([float(power_law_touched(int(e), int(k), t, a))
                            for e, k, t, a in zip(d.num_experts, d.topk, tokens, alpha)])
        params = 3.0 * d.hidden_size.to_numpy() * d.inter_size.to_numpy() / d.moe_tp_size.to_numpy()  # an expert
        nbytes = touched * params * (1.0 if dt == "fp8_block" else dtype_bytes(dt))
        flops = 2.0 * tokens * d.topk.to_numpy() * params
        t = d.latency.to_numpy() * 1e-3
        try:
            peak = hw.peak_flops(MOE_COMPUTE[dt])
        except SpecsimError:  # a dtype this GPU has no tensor cores for (not a fit: nothing to price it with)
            continue

        def resid(x: np.ndarray, touched=touched, nbytes=nbytes, flops=flops, peak=peak, t=t) -> np.ndarray:
            return np.log(x[0] * 1e-6 + x[3] * 1e-6 * touched
                          + ridge_combine_many(nbytes / (hw.mem_bw_bytes_per_s * x[1]), flops / (peak * x[2]),
                                               hw.ridge_p)) - np.log(t)

        # robust (soft L1 beyond 10 % in log time): a few shapes run another kernel (SGLang's bf16 tables time some
        # at a fraction of the bandwidth) and must not set every other shape's price
        r = least_squares(resid, x0=[20.0, 0.7, 0.4, 0.2], bounds=([0.0, 0.05, 0.02, 0.0], [500.0, 1.0, 1.0, 50.0]),
                          loss="soft_l1", f_scale=0.1)
        # one token: vLLM's fused MoE runs one row with its own configuration; its fixed time is what the one-token
        # passes take beyond the rest of the fitted kernel (the median over shapes)
        one = tokens == 1
        rest = (r.x[3] * 1e-6 * touched + ridge_combine_many(nbytes / (hw.mem_bw_bytes_per_s * r.x[1]),
                                                            flops / (peak * r.x[2]), hw.ridge_p))
        one_us = max(float(np.median(t[one] - rest[one])), 0.0) * 1e6 if one.any() else float(r.x[0])
        fitted = r.x[0] * 1e-6 + np.where(one, (one_us - r.x[0]) * 1e-6, 0.0) + rest
        err = np.abs(fitted / t - 1)
        out[dt] = (float(r.x[0]), float(r.x[1]), float(r.x[2]), float(np.median(err)), float(err.max()), len(t),
                   float(r.x[3]), one_us)
    return out


def fit_fp8_block_floor(src, hw) -> tuple[tuple[float, ...], dict] | None:
    """The block-scaled fp8 GEMMs' floor by rows: the fastest GEMM gemm_perf measured at each row count (whatever
    its n x k), the median of those over rows 1-16 and over 32-4,096 (`FLOOR_KNOTS`). Says how well the GEMMs
    are priced as max(roofline, floor) against roofline + floor (the preset's rates, rows 1..512)."""
    from calibrate.aiconfigurator import gemm_table
    from simulator.cost import ridge_combine_many

    try:
        g, _ = gemm_table(src, "fp8_block")
    except SpecsimError:  # no block-scaled fp8 GEMMs measured on this GPU: no floor to fit
        return None
    ms = np.asarray(g.m, dtype=float)
    T = g.times_s.reshape(len(ms), -1)
    fastest = np.nanmin(T, axis=1)
    small = float(np.median(fastest[ms <= 16]))
    large = float(np.median(fastest[(ms >= 32) & (ms <= 4096)]))
    floors = (small, small, large)
    peak, bw = hw.peak_flops("fp8") * hw.flops_efficiency, hw.mem_bw_bytes_per_s * hw.bw_efficiency
    M, N, K = np.meshgrid(ms, np.asarray(g.n, float), np.asarray(g.k, float), indexing="ij")
    ok = np.isfinite(g.times_s) & (M <= 512)
    roof = ridge_combine_many(N * K / bw, 2 * M * N * K / peak, hw.ridge_p)[ok]
    floor = np.interp(np.log2(M[ok]), np.log2(FLOOR_KNOTS), floors)
    t = g.times_s[ok]
    errs = {"max": np.median(np.abs(np.maximum(roof, floor) / t - 1)), "sum": np.median(np.abs((roof + floor) / t - 1))}
    return floors, errs


def fit_mla(src, hw) -> tuple[float, int] | None:
    """MLA's generation module (vLLM's: projections, latent attention, its launches) of DeepSeek-V3 at 16 heads a
    GPU (TP 8), fp8 cache, block-scaled fp8 projections, batch 1-8, every cached length measured up to 4,096: its
    time less the preset's roofline of the same work (the projections' bytes and FLOPs at the linear rates, the
    latent cache at the attention bandwidth) and less the preset's time a layer. (median us, points)."""
    from calibrate.aiconfigurator import _read, _table_path
    from simulator.cost import ridge_combine_many

    found = _table_path(src, "mla", "mla_generation_module_perf")
    if found is None:
        return None
    df = _read(found[0], ("num_heads", "batch_size", "step", "kv_cache_dtype", "gemm_type", "latency"))
    d = df[(df.num_heads == 16) & (df.kv_cache_dtype == "fp8") & (df.gemm_type == "fp8_block")
           & (df.batch_size <= 8) & (df.step <= 4096)]
    if d.empty:
        return None
    d = d.groupby(["batch_size", "step"], as_index=False).latency.min()
    m = load_model("deepseek-v3", "fp8").shard(8)
    from dataclasses import replace as _r
    m = _r(m, kv_dtype="fp8")
    b, c = d.batch_size.to_numpy(dtype=float), d.step.to_numpy(dtype=float)
    proj = ridge_combine_many(m.attention_params * 1.0 / (hw.mem_bw_bytes_per_s * hw.bw_efficiency),
                              2.0 * b * m.attention_params / (hw.peak_flops("fp8") * hw.flops_efficiency), hw.ridge_p)
    kv = b * (c + 1) * m.kv_bytes_per_token_layer / (hw.mem_bw_bytes_per_s * hw.attention_bw_efficiency)
    att = np.maximum(kv, m.attention_flops(b, c, 1) / m.n_layers / (hw.peak_flops("bf16") * hw.flops_efficiency))
    # the preset charges every layer its per-layer time already (layer_fixed_us: the dense fit's launch floors of
    # attention, GEMMs and norms): the module's term is what its measured time exceeds that and the roofline by
    layer_s = hw.overheads.layer_s - load_engine("vllm")[1].layer_s
    extra = d.latency.to_numpy() * 1e-3 - proj - att - layer_s
    return max(float(np.median(extra)), 0.0) * 1e6, len(extra)


# the other engines whose kernels AIConfigurator measured: engines.toml's name -> the database's backend
OTHER_ENGINES = {"sglang": "sglang", "tensorrt-llm": "trtllm"}


def kernel_terms(system: str, preset: str, hw, backend: str = "vllm") -> tuple[dict, list[str]]:
    """The MoE, fp8-block and MLA kernel terms of one GPU under one backend (printed), and their TOML lines."""
    src = parse_source(f"{system}/{backend}")
    fits = []
    for f in (fit_moe, fit_fp8_block_floor, fit_mla):
        try:
            fits.append(f(src, hw))
        except SpecsimError as e:  # a table this backend lacks
            skipped(f"{f.__name__} ({backend})", str(e).splitlines()[0][:120])
            fits.append({} if f is fit_moe else None)
    moe, floor, mla = fits
    lines, values = [], {}
    if moe:
        for dt, (fixed, bw, fl, med, worst, n, per, one) in moe.items():
            print(f"  fused MoE {dt}: {fixed:.1f} us a layer ({one:.1f} at one token) + {per:.2f} us a woken expert "
                  f"+ their bytes at "
                  f"{100 * bw:.0f} % of the "
                  f"bandwidth, FLOPs at {100 * fl:.0f} % ({n} shapes x tokens; median |err| {100 * med:.1f} %, "
                  f"max {100 * worst:.1f} %)")
        values["moe_kernel"] = {dt: (v[0], v[7], v[6], v[1], v[2]) for dt, v in moe.items()}
        cells = ", ".join(f"{dt} = {{ fixed_us = {v[0]:.1f}, one_token_us = {v[7]:.1f}, expert_us = {v[6]:.2f}, "
                          f"bw_efficiency = {v[1]:.3f}, flops_efficiency = {v[2]:.3f} }}" for dt, v in moe.items())
        lines.append(f"moe_kernel = {{ {cells} }}")
    if floor is not None:
        floors, errs = floor
        print(f"  fp8 block-scaled GEMM floor: {1e6 * floors[0]:.1f} us to 16 rows, {1e6 * floors[2]:.1f} us from "
              f"32 (median |err| of the GEMMs to 512 rows: max(roofline, floor) {100 * errs['max']:.1f} %, "
              f"roofline + floor {100 * errs['sum']:.1f} %)")
        values["fp8_block_floor_us"] = tuple(1e6 * f for f in floors)
        lines += [f"fp8_block_gemm_floor_rows = [{', '.join(str(r) for r in FLOOR_KNOTS)}]",
                  f"fp8_block_gemm_floor_us = [{', '.join(f'{1e6 * f:.1f}' for f in floors)}]"]
    if mla is not None:
        print(f"  MLA generation module: {mla[0]:.1f} us a layer beyond the roofline and layer_fixed_us "
              f"({mla[1]} points)")
        values["mla_layer_us"] = mla[0]
        lines.append(f"mla_layer_us = {mla[0]:.1f}")
    if lines:
        parts = []
        if moe:
            parts.append(f"fused MoE from moe_perf (power-law routing, one EP rank, to {MOE_MAX_TOKENS} tokens)")
        if floor is not None:
            parts.append("fp8 block-scaled GEMM floor from gemm_perf (the fastest shape at each row count)")
        parts.append("MLA from mla_generation_module_perf (16 heads a GPU, fp8 cache, batch 1-8) less the preset's "
                     "roofline and layer_fixed_us" if mla is not None else "no MLA module measured (MLA by the "
                     "roofline)")
        lines.append(f"kernels_source = \"fitted by benchmarks/refit_presets.py to {src.database}: "
                     f"{'; '.join(parts)}\"")
    return values, lines


def toml_lines(preset: str, v: dict, source: str, median: float, worst: float, latency: float | None,
               ar: tuple[float, float, float] | None = None) -> str:
    p = "\"inf\"" if v["ridge_p"] == float("inf") else f"{v['ridge_p']:g}"
    lines = [f"[{preset}]  # from benchmarks/refit_presets.py",
             f"bw_efficiency = {v['bw_efficiency']:.3f}", f"flops_efficiency = {v['flops_efficiency']:.3f}",
             f"attention_bw_efficiency = {v['attention_bw_efficiency']:.3f}", f"ridge_p = {p}",
             f"layer_fixed_us = {v['layer_fixed_us']:.1f}"]
    if latency is not None:
        lines.append(f"interconnect_latency_us = {latency * 1e6:.1f}")
    if ar is not None:
        lines.append(f"interconnect_allreduce_bw_efficiency = {ar[0]:.3f}  # the table's 2 - 32 MB messages: "
                     f"median |error| {100 * ar[1]:.1f} %, max {100 * ar[2]:.1f} %")
    lines.append(f"rates_source = \"fitted by benchmarks/refit_presets.py to {source}: vLLM's measured GEMMs, decode "
                 f"attention and all-reduce priced into Llama-3.1-8B, Llama-3.2-1B and 70B TP 4 passes (batch "
                 f"1..256, 1 and 4 new tokens, contexts 1,088 and 4,096); the fit's median |error| "
                 f"{100 * median:.1f} %, max "
                 f"{100 * worst:.1f} %\"")
    return "\n".join(lines)


def kernel_terms_differ(shipped, kinds: dict) -> list[str]:
    """Which of the kernel terms hardware.toml holds differ from the fit (by more than 2 %)."""
    k = shipped.kernels
    off = []
    for dt, v in kinds.get("moe_kernel", {}).items():
        held = k.moe_kernel(dt)
        have = None if held is None else (held.fixed_s * 1e6, (held.one_token_s or held.fixed_s) * 1e6,
                                          held.expert_s * 1e6, held.bw_efficiency, held.flops_efficiency)
        if have is None or any(abs(a - b) > 0.02 * abs(b) + 0.05 for a, b in zip(have, v)):
            off.append(f"moe_kernel.{dt}")
    if "fp8_block_floor_us" in kinds:
        have = tuple(t * 1e6 for _, t in k.fp8_block_floor)
        if len(have) != 3 or any(abs(a - b) > 0.02 * b + 0.05 for a, b in zip(have, kinds["fp8_block_floor_us"])):
            off.append("fp8_block_gemm_floor_us")
    mla = kinds.get("mla_layer_us")
    if mla is not None and abs(k.mla_layer_s * 1e6 - mla) > 0.02 * mla + 0.05:
        off.append("mla_layer_us")
    return off


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
            skipped(preset, "no dense pass priced")
            continue
        hw = load_hardware(preset)
        ar = None
        if latency is not None and hw.interconnect is not None:  # the measured all-reduce, not the engine preset's
            ar = all_reduce_bw_efficiency(system, hw, latency)
            hw = replace(hw, interconnect=replace(hw.interconnect, latency_s=latency,
                                                  all_reduce_bw_efficiency=ar[0] if ar else 1.0))
        values, median, worst = fit(hw, passes)
        print(toml_lines(preset, values, source, median, worst, latency, ar))
        # the kernel kinds beside the rates hardware.toml holds (what the preset's cost model combines them with)
        kinds, kind_lines = kernel_terms(system, preset, hw)
        if kind_lines:
            print("\n".join(kind_lines))
        engine_kinds = {}
        for engine, backend in OTHER_ENGINES.items():
            if backend in have.get(system, {}):
                print(f"[{preset}.kernels.{engine}]  # {backend}'s own kernels of these kinds")
                engine_kinds[engine], lines = kernel_terms(system, preset, hw, backend)
                print("\n".join(lines))
        if args.check:
            shipped = load_hardware(preset)  # with the vllm engine preset, whose per-layer cost is its own
            held = {k: getattr(shipped, k) for k in ("bw_efficiency", "flops_efficiency", "attention_bw_efficiency")}
            held["layer_fixed_us"] = (shipped.overheads.layer_s - load_engine("vllm")[1].layer_s) * 1e6
            if latency is not None and shipped.interconnect is not None:
                held["interconnect_latency_us"] = shipped.interconnect.latency_s * 1e6
                values = {**values, "interconnect_latency_us": latency * 1e6}
            if ar is not None and shipped.interconnect is not None:
                held["interconnect_allreduce_bw_efficiency"] = shipped.interconnect.all_reduce_bw_efficiency
                values = {**values, "interconnect_allreduce_bw_efficiency": ar[0]}
            off = [k for k, v in held.items() if abs(v - values[k]) > 0.02 * abs(values[k]) + 0.05]
            off += kernel_terms_differ(shipped, kinds)
            for engine, ek in engine_kinds.items():
                off += [f"kernels.{engine}.{k}" for k in kernel_terms_differ(load_hardware(preset, engine), ek)]
            if shipped.ridge_p != values["ridge_p"]:
                off.append("ridge_p")
            failed += bool(off)
            print(f"  hardware.toml {'differs in ' + ', '.join(off) if off else 'holds these'}")
        print()
    if args.check and SKIPPED:
        print(f"--check: {len(SKIPPED)} fit(s) skipped for a missing table ({', '.join(SKIPPED)}): their values in "
              "hardware.toml are not checked")
    sys.exit(1 if failed or (args.check and SKIPPED) else 0)


if __name__ == "__main__":
    main()
