"""Reading AIConfigurator's database of measured kernels (PyPI `aiconfigurator-core`, Apache-2.0; `pip install
'specsim[aiconfigurator]'`) into `simulator.kernel_tables` for one configuration.

The database ships inside the package: ``aiconfigurator_core/systems/data/SYSTEM/OP/BACKEND/VERSION/*.parquet``, a
system per GPU (a100_sxm, h100_sxm, h200_sxm, b200_sxm, b300_sxm, gb200, gb300, ...), per operator the backends that
measured it (vllm, sglang, trtllm) and their versions, each table one kernel timed over its sizes (latency in ms):
``gemm/gemm_perf`` (m, n, k, gemm_dtype), ``attention/generation_attention_perf`` (batch, step = cached tokens,
heads, KV heads, head_dim, kv_cache_dtype), ``attention/context_attention_perf`` (prefill attention by batch, isl =
prompt tokens, heads, KV heads, head_dim, kv_cache_dtype; nothing cached), ``moe/moe_perf`` (num_tokens, hidden,
inter, topk, experts, TP/EP, moe_dtype, the routing distribution: balanced or power_law_ALPHA),
``mla/mla_generation_module_perf`` (DeepSeek-V3's MLA module by batch, step, heads per GPU),
``mla/mla_context_module_perf`` (its prefill by batch, isl, heads per GPU), ``comm/custom_allreduce_perf`` (message
elements, GPUs). Where several kernels of one engine measured a shape, the fastest is taken (what an engine tuned for
it runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from simulator import SpecsimError
from simulator.kernel_tables import Curve, Elementwise, Gemm, Grid2, LayerShapes, MeasuredKernels
from simulator.specs import ModelSpec

INSTALL = "pip install 'specsim[aiconfigurator]' (or: pip install aiconfigurator-core)"
MS = 1e-3
# the engine preset (scenarios/engines.toml) of each backend
ENGINE_OF = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
GEMM_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "nvfp4": "nvfp4"}
KV_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
MOE_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "w4a16_mxfp4"}


def _package_root() -> Path:
    try:
        import aiconfigurator_core
    except ImportError:
        raise SpecsimError(f"AIConfigurator's kernel database is not installed: {INSTALL}") from None
    return Path(aiconfigurator_core.__file__).resolve().parent


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return "unknown"


def data_root() -> Path:
    return _package_root() / "systems" / "data"


def _version_key(v: str) -> tuple:
    parts = []
    for p in v.replace("rc", ".").replace("post", ".").replace("dev", ".").split("."):
        parts.append(int(p) if p.isdigit() else -1)
    return tuple(parts)


@cache
def installed() -> dict[str, dict[str, list[str]]]:
    """system -> backend -> the versions whose GEMMs it measured (newest last)."""
    out: dict[str, dict[str, list[str]]] = {}
    for f in sorted(data_root().glob("*/gemm/*/*/gemm_perf.parquet")):
        system, backend, version = f.parts[-5], f.parts[-3], f.parts[-2]
        out.setdefault(system, {}).setdefault(backend, []).append(version)
    for backends in out.values():
        for versions in backends.values():
            versions.sort(key=_version_key)
    return out


@dataclass(frozen=True)
class Source:
    """Which measurements: a system, a backend and its version, in the installed database."""

    system: str
    backend: str
    version: str

    @property
    def label(self) -> str:
        return f"aiconfigurator:{self.system}/{self.backend}/{self.version}"

    @property
    def database(self) -> str:
        return f"AIConfigurator {package_version()} (aiconfigurator-core), {self.system}, {self.backend} {self.version}"


def parse_source(spec: str) -> Source:
    """``aiconfigurator:SYSTEM[/BACKEND[/VERSION]]`` (the prefix optional): the backend defaults to vllm where
    measured, the version to the newest one whose GEMMs were measured. One-line errors list what is installed."""
    body = spec.split(":", 1)[1] if spec.lower().startswith("aiconfigurator:") else spec
    parts = [p for p in body.strip().split("/") if p]
    have = installed()
    if not parts or parts[0] not in have:
        raise SpecsimError(f"--from aiconfigurator:{body}: no system {parts[0] if parts else '(none)'!r} in the "
                           f"installed database; it has {', '.join(sorted(have))}")
    system = parts[0]
    backends = have[system]
    backend = parts[1] if len(parts) > 1 else ("vllm" if "vllm" in backends else sorted(backends)[0])
    if backend not in backends:
        listed = "; ".join(f"{b} ({', '.join(v)})" for b, v in sorted(backends.items()))
        raise SpecsimError(f"--from aiconfigurator:{body}: {system} has no backend {backend!r}; it has {listed}")
    versions = backends[backend]
    version = parts[2] if len(parts) > 2 else versions[-1]
    if version not in versions:
        raise SpecsimError(f"--from aiconfigurator:{body}: {system}/{backend} has no version {version!r}; it has "
                           f"{', '.join(versions)}")
    return Source(system, backend, version)


def _table_path(src: Source, op: str, name: str) -> tuple[Path, str] | None:
    """An operator's table at the source's version, else the newest version of the same backend that measured it."""
    base = data_root() / src.system / op / src.backend
    own = base / src.version / f"{name}.parquet"
    if own.is_file():
        return own, src.version
    found = sorted((p.parent.name for p in base.glob(f"*/{name}.parquet")), key=_version_key)
    return (base / found[-1] / f"{name}.parquet", found[-1]) if found else None


@cache
def _read(path: Path, columns: tuple[str, ...]) -> Any:
    import pandas as pd

    return pd.read_parquet(path, columns=list(columns))


def _fastest(df: Any, keys: list[str]) -> Any:
    return df.groupby(keys, as_index=False)["latency"].min()


def gemm_table(src: Source, dtype: str) -> tuple[Gemm, str]:
    """The GEMMs of one dtype (bfloat16, fp8, fp8_block, nvfp4) as a full grid over m, n, k."""
    found = _table_path(src, "gemm", "gemm_perf")
    if found is None:
        raise SpecsimError(f"{src.label}: no GEMM table")
    path, version = found
    df = _read(path, ("gemm_dtype", "m", "n", "k", "latency"))
    have = sorted(df.gemm_dtype.unique())
    if dtype not in have:
        raise SpecsimError(f"{src.label}: no {dtype} GEMMs measured (it has {', '.join(have)})")
    d = _fastest(df[df.gemm_dtype == dtype], ["m", "n", "k"])
    ms, ns, ks = (np.sort(d[c].unique()) for c in ("m", "n", "k"))
    T = np.full((len(ms), len(ns), len(ks)), np.nan)
    T[np.searchsorted(ms, d.m), np.searchsorted(ns, d.n), np.searchsorted(ks, d.k)] = d.latency.to_numpy() * MS
    return Gemm(tuple(int(x) for x in ms), tuple(int(x) for x in ns), tuple(int(x) for x in ks), T), (
        f"gemm/{src.backend}/{version} gemm_perf, {dtype}, fastest kernel per shape")


def _grid(d: Any, a: str, b: str) -> Grid2:
    A, B = np.sort(d[a].unique()), np.sort(d[b].unique())
    T = np.full((len(A), len(B)), np.nan)
    T[np.searchsorted(A, d[a]), np.searchsorted(B, d[b])] = d.latency.to_numpy() * MS
    return Grid2(tuple(float(x) for x in A), tuple(float(x) for x in B), T)


def _attention_rows(path: Path, tokens: str, heads: int, kv_heads: int, head_dim: int, kv_dtype: str) -> Any:
    """An attention table's rows of these heads and this KV dtype, full attention only (older tables have no
    window_size: they measured nothing else); `tokens` is the table's length column (step, isl)."""
    import pyarrow.parquet as pq

    windowed = "window_size" in pq.read_schema(path).names
    df = _read(path, ("batch_size", tokens, "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype",
                      "latency", *(("window_size",) if windowed else ())))
    sel = df[(df.num_heads == heads) & (df.num_key_value_heads == kv_heads) & (df.head_dim == head_dim)
             & (df.kv_cache_dtype == kv_dtype)]
    return sel[sel.window_size == 0] if windowed else sel


def attention_table(src: Source, heads: int, kv_heads: int, head_dim: int, kv_dtype: str
                    ) -> tuple[Grid2 | None, str]:
    """Decode attention of this GPU's heads by (batch, cached tokens); None where the shape was not measured."""
    found = _table_path(src, "attention", "generation_attention_perf")
    if found is None:
        return None, "decode attention: not measured, by the roofline"
    path, version = found
    sel = _attention_rows(path, "step", heads, kv_heads, head_dim, kv_dtype)
    if sel.empty:
        return None, (f"decode attention: {heads} heads / {kv_heads} KV heads / head_dim {head_dim} / {kv_dtype} "
                      "not measured, by the roofline")
    d = _fastest(sel, ["batch_size", "step"])
    d = d.assign(context=d.step + 1)
    return _grid(d.rename(columns={"batch_size": "batch"}), "batch", "context"), (
        f"attention/{src.backend}/{version} generation_attention_perf, {heads}/{kv_heads} heads, {kv_dtype} cache")


def context_attention_table(src: Source, heads: int, kv_heads: int, head_dim: int, kv_dtype: str
                            ) -> tuple[Grid2 | None, str]:
    """Prefill attention of this GPU's heads by (batch, prompt tokens), nothing cached; None where the shape was not
    measured (the prefill's attention is then priced by the roofline, `kernel_tables.prefill_pass`)."""
    found = _table_path(src, "attention", "context_attention_perf")
    if found is None:
        return None, "prefill attention: no context_attention_perf table, by the roofline"
    path, version = found
    sel = _attention_rows(path, "isl", heads, kv_heads, head_dim, kv_dtype)
    if sel.empty:
        return None, (f"prefill attention: {heads} heads / {kv_heads} KV heads / head_dim {head_dim} / {kv_dtype} "
                      "not measured, by the roofline")
    d = _fastest(sel, ["batch_size", "isl"]).rename(columns={"batch_size": "batch"})
    return _grid(d, "batch", "isl"), (
        f"prefill attention: attention/{src.backend}/{version} context_attention_perf, {heads}/{kv_heads} heads, "
        f"{kv_dtype} cache")


def _mla_module_table(src: Source, name: str, length: str, heads: int, kv_dtype: str, gemm_type: str
                      ) -> tuple[Grid2 | None, str]:
    """One of DeepSeek's measured MLA modules (projections and attention) by (batch, `length`), the source's backend
    first, then the others that measured it."""
    for backend in (src.backend, "vllm", "sglang", "trtllm"):
        found = _table_path(Source(src.system, backend, src.version), "mla", name)
        if found is None:
            continue
        path, version = found
        df = _read(path, ("num_heads", "batch_size", length, "kv_cache_dtype", "gemm_type", "latency"))
        for gt in (gemm_type, "bfloat16", "fp8_block"):
            sel = df[(df.num_heads == heads) & (df.kv_cache_dtype == kv_dtype) & (df.gemm_type == gt)]
            if not sel.empty:
                d = _fastest(sel, ["batch_size", length]).rename(columns={"batch_size": "batch", length: "tokens"})
                return _grid(d, "batch", "tokens"), (
                    f"mla/{backend}/{version} {name}, {heads} heads a GPU, {kv_dtype} cache, {gt} projections")
    return None, ""


def mla_table(src: Source, heads: int, kv_dtype: str, gemm_type: str) -> tuple[Grid2 | None, str]:
    """DeepSeek's MLA generation module (its projections and attention) by (batch, cached tokens)."""
    grid, told = _mla_module_table(src, "mla_generation_module_perf", "step", heads, kv_dtype, gemm_type)
    return grid, told or "MLA: not measured, by the roofline"


def context_mla_table(src: Source, heads: int, kv_dtype: str, gemm_type: str) -> tuple[Grid2 | None, str]:
    """DeepSeek's MLA context module (its projections and the prefill's attention) by (batch, prompt tokens)."""
    grid, told = _mla_module_table(src, "mla_context_module_perf", "isl", heads, kv_dtype, gemm_type)
    return grid, (f"prefill MLA: {told}" if told else
                  "prefill MLA: not measured, the projections' GEMMs and the attention by the roofline")


def moe_table(src: Source, model: ModelSpec, tp: int, dtype: str, distribution: str | None
              ) -> tuple[Curve | None, str]:
    """The fused MoE layer (routed experts) by tokens, under the routing it was measured with (power-law by
    default, as AIConfigurator prices its models: alpha 1.01 for DeepSeek's family, 1.2 otherwise)."""
    instead = "or price it without --from aiconfigurator (`predict --hardware`: the preset's fitted fused-MoE kernel)"
    found = _table_path(src, "moe", "moe_perf")
    if found is None:
        return None, f"no fused-MoE table (moe_perf) in this database: give another --from system/backend {instead}"
    path, version = found
    df = _read(path, ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                      "moe_ep_size", "distribution", "latency"))
    sel = df[(df.hidden_size == model.d_model) & (df.topk == model.experts_per_token)
             & (df.num_experts == model.n_experts) & (df.moe_tp_size == tp) & (df.moe_ep_size == 1)
             & (df.moe_dtype == dtype)]
    # the expert width is the full one with the TP degree beside it (some tables hold it already split)
    full = model.d_ff_expert * max(model.tp, 1)
    for width in (full, full // tp):
        hit = sel[sel.inter_size == width]
        if not hit.empty:
            sel = hit
            break
    else:
        shape = df[(df.hidden_size == model.d_model) & (df.topk == model.experts_per_token)
                   & (df.num_experts == model.n_experts) & (df.moe_ep_size == 1)]
        ours = {v: k for k, v in reversed(MOE_DTYPE.items())}  # the table's dtype -> --dtype's (bfloat16 -> bf16)
        have = "; ".join(f"{ours.get(d, d)} at TP {'/'.join(str(t) for t in sorted(set(g.moe_tp_size)))}"
                         for d, g in shape.groupby("moe_dtype")) or "nowhere"
        return None, (f"no fused-MoE timings for {model.n_experts} experts top-{model.experts_per_token} width "
                      f"{full} at TP {tp} {ours.get(dtype, dtype)} (measured: {have}): give a --tp and --dtype "
                      f"among those {instead}")
    wanted = distribution or ("power_law_1.01" if model.attention == "mla" else "power_law_1.2")
    have = sorted(sel.distribution.unique())
    dist = wanted if wanted in have else have[0]
    d = _fastest(sel[sel.distribution == dist], ["num_tokens"]).sort_values("num_tokens")
    return Curve(tuple(float(x) for x in d.num_tokens), tuple(float(x) * MS for x in d.latency)), (
        f"moe/{src.backend}/{version} moe_perf, {dtype}, routing {dist}")


def all_reduce_table(src: Source, tp: int) -> tuple[Curve | None, str]:
    """The engine's custom all-reduce over `tp` GPUs by message size in bf16 elements, as AIConfigurator reads the
    table (its 70B TP 4 prefill of 4,096 tokens prices an all-reduce at the row of 4,096 x 8,192), CUDA-graph
    kernels where measured (`kernel_tables.decode_pass` and `prefill_pass` read it at rows x d_model)."""
    if tp <= 1:
        return None, ""
    found = _table_path(src, "comm", "custom_allreduce_perf")
    if found is None:
        return None, "all-reduce: not measured, the preset's interconnect"
    path, version = found
    df = _read(path, ("num_gpus", "message_size", "latency", "kernel_source"))
    sel = df[df.num_gpus == tp]
    graph = sel[sel.kernel_source.str.contains("graph", case=False)]
    sel = graph if not graph.empty else sel
    if sel.empty:
        return None, f"all-reduce over {tp} GPUs: not measured"
    d = _fastest(sel, ["message_size"]).sort_values("message_size")
    return Curve(tuple(float(x) for x in d.message_size), tuple(float(x) * MS for x in d.latency)), (
        f"comm/{src.backend}/{version} custom_allreduce_perf, {tp} GPUs")


def layer_shapes(model: ModelSpec) -> LayerShapes:
    """A (sharded: `ModelSpec.shard`) model's per-GPU shapes as the tables key them."""
    tp = max(model.tp, 1)
    hd = model.head_dim
    mla = model.attention == "mla"
    extra: tuple[tuple[int, int], ...] = ()
    if mla:
        qk = hd + model.qk_rope_head_dim
        v = model.v_head_dim or hd
        h = model.n_heads
        q = ((model.q_lora_rank, model.d_model), (h * qk, model.q_lora_rank)) if model.q_lora_rank else (
            (h * qk, model.d_model),)
        extra = (*q, (model.kv_lora_rank + model.qk_rope_head_dim, model.d_model), (model.d_model, h * v))
    per_row_token = (2.0 * model.n_heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim) if mla
                     else 4.0 * model.n_heads * hd)
    return LayerShapes(
        n_layers=model.n_layers, d_model=model.d_model, vocab_per_gpu=model.vocab_size, tp=tp,
        qkv_out=(model.n_heads + 2 * model.n_kv_heads) * hd, o_in=model.n_heads * hd,
        ffn_per_gpu=model.d_ff if model.dense_layers or not model.is_moe else 0,
        heads_per_gpu=model.n_heads, kv_heads_per_gpu=model.n_kv_heads, head_dim=hd,
        kv_bytes_per_token_layer=model.kv_bytes_per_token_layer, attention_flops_per_row_token=per_row_token,
        dense_layers=model.dense_layers if model.is_moe else model.n_layers, moe_layers=model.n_moe_layers,
        shared_ffn_per_gpu=model.d_ff_shared, n_experts=model.n_experts, expert_ffn_per_gpu=model.d_ff_expert,
        topk=model.experts_per_token, mla=mla, extra_linear=extra,
        qk_norm=model.name.lower().startswith("qwen3"))  # Qwen3 normalises q and k per head


def measured_kernels(src: Source, model: ModelSpec, hardware: Any, distribution: str | None = None
                     ) -> tuple[LayerShapes, MeasuredKernels, list[str]]:
    """Every table one (sharded) model needs, read from the database; the notes say what came from where and what
    the roofline prices instead."""
    shapes = layer_shapes(model)
    tp = shapes.tp
    wdtype = model.dtype
    gemm_dtype = "fp8_block" if (wdtype == "fp8" and model.attention == "mla") else GEMM_DTYPE.get(wdtype)
    if gemm_dtype is None:
        raise SpecsimError(f"{src.label}: no {wdtype} GEMMs in AIConfigurator's tables; use --dtype bf16, fp8 or "
                           "nvfp4")
    gemm, gsrc = gemm_table(src, gemm_dtype)
    logits, lsrc = gemm_table(src, "bfloat16")
    kv = model.kv_dtype or ("fp8" if wdtype in ("nvfp4", "mxfp4") else wdtype)
    kv_name = KV_DTYPE.get(kv, "bfloat16")
    notes = [f"GEMMs: {gsrc}", f"output head: {lsrc}"]
    attention = mla = context_attention = context_mla = None
    if model.attention == "mla":  # a measured module holds the projections: not priced again as GEMMs
        projections = "fp8_block" if wdtype == "fp8" else "bfloat16"
        mla, msrc = mla_table(src, model.n_heads, kv_name, projections)
        context_mla, psrc = context_mla_table(src, model.n_heads, kv_name, projections)
        notes += [msrc, psrc]
    else:
        attention, asrc = attention_table(src, model.n_heads, model.n_kv_heads, model.head_dim, kv_name)
        context_attention, psrc = context_attention_table(src, model.n_heads, model.n_kv_heads, model.head_dim,
                                                          kv_name)
        notes += [asrc, psrc]
    moe = None
    if model.is_moe:
        edtype = model.expert_dtype or wdtype
        name = "fp8_block" if (edtype == "fp8" and model.attention == "mla") else MOE_DTYPE.get(edtype, edtype)
        moe, esrc = moe_table(src, model, tp, name, distribution)
        if moe is None:
            raise SpecsimError(f"{src.label}: {esrc}")
        notes.append(esrc)
    ar, csrc = all_reduce_table(src, tp)
    if csrc:
        notes.append(csrc)
    peak = hardware.peak_flops(wdtype if wdtype in ("bf16", "fp16") else "bf16")
    notes.append("not measured, by the roofline (bytes at 80 % of the datasheet bandwidth + 3 us a kernel, "
                 "AIConfigurator's own element-wise rule): norms, activations, the embedding; the extra query rows "
                 "of a verify pass's attention at 70 % of the bf16 tensor-core peak")
    kernels = MeasuredKernels(gemm=gemm, logits_gemm=logits, attention=attention, mla=mla,
                              context_attention=context_attention, context_mla=context_mla, moe=moe, all_reduce=ar,
                              elementwise=Elementwise(hardware.mem_bw_bytes_per_s), tensor_flops_per_s=0.7 * peak,
                              sources={"notes": "; ".join(notes)})
    return shapes, kernels, notes


def describe(src: Source) -> Mapping[str, str]:
    return {"database": src.database, "system": src.system, "backend": src.backend, "version": src.version,
            "package": package_version()}
