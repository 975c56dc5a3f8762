"""Presets as TOML data, loaded into the model's frozen dataclasses.

``load_hardware(name, engine)``, ``load_engine(name)`` and ``load_model(name_or_config_json)`` are the entry points;
an unknown name gets a one-line error that suggests the closest preset names, a non-finite number in a preset a
one-line error naming it.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from scenarios.files import read_json
from scenarios.hardware_file import is_hardware_file, read_hardware_file, tomllib
from simulator import SpecsimError
from simulator.specs import (
    GIGA,
    TERA,
    EngineOverheads,
    HardwareSpec,
    Interconnect,
    KernelTerms,
    ModelSpec,
    MoeKernel,
    Overheads,
    SpeculationTax,
)

HERE = Path(__file__).resolve().parent
MICRO = 1e-6


@cache
def _table(name: str) -> dict[str, Any]:
    with open(HERE / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def hardware_names() -> list[str]:
    return [k for k in _table("hardware") if k != "defaults"]


def model_names() -> list[str]:
    return list(_table("models"))


def _unknown(kind: str, name: str, known: list[str], hint: str) -> SpecsimError:
    key = name.lower()
    prefixed = [k for k in known if k.startswith(key) or key.startswith(k)]
    close = (prefixed + [k for k in difflib.get_close_matches(key, known, n=3, cutoff=0.4) if k not in prefixed])[:3]
    suggestion = f"did you mean {', '.join(close)}? " if close else ""
    return SpecsimError(f"unknown {kind} {name!r}; {suggestion}known: {', '.join(known)}{hint}")


def engine_names() -> list[str]:
    """Every engine preset: each engine (its default version) and each of its versions as ENGINE@VERSION."""
    out = []
    for name, d in _table("engines").items():
        out += [name] + [f"{name}@{v}" for v in d.get("versions", {})]
    return out


def load_speculation_tax(name: str) -> SpeculationTax:
    """An engine preset's cost of speculation switched off and of switching draft lengths (engines.toml)."""
    d = _engine_table(name)
    batches, fractions = d.get("off_tax_batch", []), d.get("off_tax_fraction", [])
    for v in batches:
        _finite({"off_tax_batch": v}, "off_tax_batch", name, True)
    for v in fractions:
        _finite({"off_tax_fraction": v}, "off_tax_fraction", name)
    try:
        return SpeculationTax(tuple(int(b) for b in batches), tuple(float(f) for f in fractions),
                              _finite({"switch_fraction": d.get("switch_fraction", 0.0)}, "switch_fraction", name),
                              str(d.get("tax_source", "")))
    except ValueError as e:
        raise SpecsimError(f"engine preset {name!r}: {e}") from None


def engine_family(name: str) -> str:
    """The engine a preset name describes, without its version or settings: 'vllm@0.10+max_num_seqs=64' -> 'vllm'."""
    return name.lower().partition("+")[0].partition("@")[0]


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _engine_table(name: str) -> dict[str, Any]:
    """An engine preset's table: the engine's (engines.toml `[ENGINE]`, what its versions share) with its version's
    settings over it (`[ENGINE.versions.VERSION]`); a plain name takes the engine's `default_version`."""
    from scenarios.engine_presets import with_settings
    table, (name, _, overrides) = _table("engines"), name.partition("+")
    family, _, version = name.lower().partition("@")
    if family not in table or (version and version not in table[family].get("versions", {})):
        raise _unknown("engine", name, engine_names(), "")
    d = table[family]
    version = version or d.get("default_version", "")
    base = {k: v for k, v in d.items() if k not in ("versions", "default_version")}
    return with_settings(_merged(base, d.get("versions", {}).get(version, {})) if version else base, overrides)


def load_engine(name: str) -> tuple[EngineOverheads, Overheads, str]:
    """An engine preset: its per-step costs (as `EngineOverheads`), its per-pass and per-layer costs, its source."""
    preset = load_engine_preset(name)
    return preset.overheads.engine, preset.overheads, preset.source


def load_engine_preset(name: str):  # noqa: ANN201 - scenarios.engine_presets.EnginePreset (imported late: a cycle)
    """An engine preset with its version, sources and fitted range (`scenarios.engine_presets`)."""
    from scenarios.engine_presets import engine_preset

    return engine_preset(name.lower(), _engine_table(name))


def _finite(d: dict[str, Any], key: str, where: str, positive: bool = False) -> float:
    """A number from a preset, refused (one line) if it is not finite and non-negative (or positive)."""
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise SpecsimError(f"preset {where!r}: {key} = {v!r} must be a finite number {'> 0' if positive else '>= 0'}")
    return float(v)


ENGINE_KERNEL_KEYS = {"bw_efficiency", "flops_efficiency", "attention_bw_efficiency", "ridge_p", "layer_fixed_us",
                      "rates_source"}


def _engine_kernels(engine: str, gpu: str) -> dict[str, Any]:
    """An engine's own kernels on one GPU where they were measured apart from the hardware preset's (which describe
    vLLM's): engines.toml's `[ENGINE.hardware.GPU]`, replacing those keys of the GPU's preset."""
    d = _engine_table(engine).get("hardware", {}).get(gpu, {})
    unknown = sorted(set(d) - ENGINE_KERNEL_KEYS)
    if unknown:
        raise SpecsimError(f"engine preset {engine!r}: hardware.{gpu}.{unknown[0]} is not one of "
                           f"{', '.join(sorted(ENGINE_KERNEL_KEYS))}")
    return d


def check_dtype_runs(name: str, dtype: str) -> None:
    """A weight format the preset's GPU runs no kernel for is refused: NVFP4 is NVIDIA's (Blackwell's tensor cores;
    weight-only dequantising kernels before them), and AMD's GPUs have none (their 4-bit format is MXFP4)."""
    full = str(hardware_table(name).get("name", name))
    if dtype == "nvfp4" and full.startswith("AMD"):
        raise SpecsimError(f"--dtype nvfp4 on {name} ({full}): NVFP4 is NVIDIA's 4-bit format and no AMD kernel runs "
                           "it; use --dtype mxfp4 (the OCP 4-bit format AMD's engines load) or fp8")


def hardware_table(name: str) -> dict[str, Any]:
    """A preset's table (hardware.toml), or a hardware file's (`scenarios.hardware_file`, checked) for a path."""
    if is_hardware_file(name):
        return read_hardware_file(name)
    if name.lower() not in _table("hardware") or name.lower() == "defaults":
        raise _unknown("hardware", name, hardware_names(), " (or a hardware file: path/to/gpu.toml, docs/hardware.md)")
    return _table("hardware")[name.lower()]


def load_hardware(name: str, engine: str = "vllm") -> HardwareSpec:
    """A GPU preset or hardware file, with the per-step costs of `engine` (engines.toml) around its passes (a file
    takes no engine's own kernels from engines.toml's [ENGINE.hardware.GPU]: they were measured on a preset's GPU)."""
    own_table, key = hardware_table(name), name if is_hardware_file(name) else name.lower()
    _, overheads, engine_source = load_engine(engine)
    kernels_here = {} if is_hardware_file(name) else _engine_kernels(engine, key)
    d = {**_table("hardware")["defaults"], **own_table, **kernels_here}
    by_engine = d.pop("kernels", {})
    if engine_family(engine) in by_engine:  # this engine's own kernels of those kinds (its backend's measured tables)
        own = by_engine[engine_family(engine)]
        unknown = sorted(set(own) - set(KERNEL_KIND_KEYS))
        if unknown:
            raise SpecsimError(f"preset {key!r}: kernels.{engine}.{unknown[0]} is not one of "
                               f"{', '.join(KERNEL_KIND_KEYS)}")
        d = {**{k: v for k, v in d.items() if k not in KERNEL_KIND_KEYS}, **own}
    curve: tuple[tuple[int, float, float], ...] = ()
    if "rate_curve_rows" in d:
        rows, bw, fl = d["rate_curve_rows"], d["rate_curve_bw"], d["rate_curve_flops"]
        if not (len(rows) == len(bw) == len(fl) >= 1):
            raise SpecsimError(f"preset {key!r}: rate_curve_rows, _bw and _flops must be equally long")
        curve = tuple((int(r), float(b), float(f)) for r, b, f in zip(rows, bw, fl))
    if _engine_table(engine).get("graphed_costs_add"):  # a graphed step's memory and compute times add
        d["ridge_p"] = 1.0
    ridge = d["ridge_p"]
    link = None
    if "interconnect" in d:
        link = Interconnect(str(d["interconnect"]), _finite(d, "interconnect_GB_per_s", key, True) * GIGA,
                            _finite(d, "interconnect_latency_us", key) * 1e-6, str(d.get("interconnect_source", "")),
                            _finite(d, "interconnect_allreduce_bw_efficiency", key, True)
                            if "interconnect_allreduce_bw_efficiency" in d else 1.0)
    engine_d = _engine_table(engine)
    if link is not None and "allreduce_latency_us" in engine_d:  # the engine's collectives, where measured
        link = replace(link, latency_s=_finite(engine_d, "allreduce_latency_us", engine) * 1e-6,
                       source=f"{link.source}; latency: {engine_d.get('allreduce_source', engine)}")
    if d.get("layer_fixed_us"):
        overheads = replace(overheads, layer_s=overheads.layer_s + _finite(d, "layer_fixed_us", key) * 1e-6)
    kernels = _kernel_terms(d, key)
    return HardwareSpec(
        name=key,
        mem_bw_bytes_per_s=_finite(d, "mem_bw_GB_per_s", key, True) * GIGA,
        peak_flops_per_s=tuple((dt, _finite(d["peak_TFLOP_per_s"], dt, key, True) * TERA)
                               for dt in d["peak_TFLOP_per_s"]),
        mem_capacity_bytes=_finite(d, "mem_GB", key, True) * GIGA,
        bw_efficiency=_finite(d, "bw_efficiency", key, True),
        flops_efficiency=_finite(d, "flops_efficiency", key, True),
        usable_memory_fraction=_finite(d, "usable_memory_fraction", key, True),
        overheads=overheads,
        source=d["source"],
        attention_bw_efficiency=_finite(d, "attention_bw_efficiency", key, True),
        ridge_p=float("inf") if ridge == "inf" else _finite(d, "ridge_p", key, True),
        rate_curve=curve,
        rates_source=f"{d['rates_source']}; engine {engine}: {engine_source}",
        speculation_tax=load_speculation_tax(engine),
        interconnect=link,
        kernels=kernels,
    )


# A preset's kernel kinds measured apart from its roofline (`KernelTerms`); [GPU.kernels.ENGINE] replaces them all
# for an engine whose own kernels of those kinds were measured (the preset's describe vLLM's)
KERNEL_KIND_KEYS = ("moe_kernel", "fp8_block_gemm_floor_rows", "fp8_block_gemm_floor_us", "mla_layer_us",
                    "kernels_source")


def _kernel_terms(d: dict[str, Any], key: str) -> KernelTerms:
    """A preset's measured kernel kinds (`KernelTerms`): moe_kernel = { DTYPE = { fixed_us, one_token_us,
    expert_us, bw_efficiency, flops_efficiency } }, fp8_block_gemm_floor_rows / _us, mla_layer_us, kernels_source."""
    moe = []
    table = d.get("moe_kernel", {})
    if not isinstance(table, dict):
        raise SpecsimError(f"preset {key!r}: moe_kernel must be a table of dtypes")
    for dt, v in table.items():
        if not isinstance(v, dict):
            raise SpecsimError(f"preset {key!r}: moe_kernel.{dt} must be a table (fixed_us, bw_efficiency, "
                               "flops_efficiency)")
        where = f"{key}.moe_kernel.{dt}"
        moe.append(MoeKernel(str(dt), _finite(v, "fixed_us", where) * 1e-6, _finite(v, "bw_efficiency", where, True),
                             _finite(v, "flops_efficiency", where, True),
                             _finite(v, "expert_us", where) * 1e-6 if "expert_us" in v else 0.0,
                             _finite(v, "one_token_us", where) * 1e-6 if "one_token_us" in v else None))
    floor: tuple[tuple[int, float], ...] = ()
    if "fp8_block_gemm_floor_rows" in d:
        rows, us = d["fp8_block_gemm_floor_rows"], d.get("fp8_block_gemm_floor_us", [])
        if not (isinstance(rows, list) and isinstance(us, list) and len(rows) == len(us) >= 1):
            raise SpecsimError(f"preset {key!r}: fp8_block_gemm_floor_rows and _us must be equally long lists")
        floor = tuple((int(_finite({"fp8_block_gemm_floor_rows": r}, "fp8_block_gemm_floor_rows", key, True)),
                       _finite({"fp8_block_gemm_floor_us": t}, "fp8_block_gemm_floor_us", key) * 1e-6)
                      for r, t in zip(rows, us))
        if [r for r, _ in floor] != sorted({r for r, _ in floor}):
            raise SpecsimError(f"preset {key!r}: fp8_block_gemm_floor_rows must be increasing")
    mla = _finite(d, "mla_layer_us", key) * 1e-6 if "mla_layer_us" in d else 0.0
    return KernelTerms(tuple(moe), floor, mla, str(d.get("kernels_source", "")))


MOE_FIELDS = ("n_experts", "experts_per_token", "d_ff_expert", "d_ff_shared", "dense_layers", "kv_lora_rank",
              "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "sliding_window", "sliding_layers", "mtp_modules")


def _model_from_dict(name: str, d: dict[str, Any], dtype: str) -> ModelSpec:
    """A shape from a preset's table or a config.json's translated fields; a bad value is a one-line error naming
    it. A preset's own dtype (DeepSeek-V3's fp8 checkpoint) wins over the command's default bf16 unless `dtype` is
    given otherwise; its expert and cache dtypes stay."""
    def count(key: str, default: Any = None, least: int = 1) -> int:
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < least:
            raise SpecsimError(f"model {name!r}: {key} = {v!r} must be a whole number >= {least}")
        return int(v)

    def text(key: str, allowed: tuple[str, ...]) -> str:
        v = d.get(key, "")
        if v and v not in allowed:
            raise SpecsimError(f"model {name!r}: {key} = {v!r} is not one of {', '.join(allowed)}")
        return str(v)

    from simulator.specs import ATTENTION_KINDS, DTYPE_BYTES

    dtypes = tuple(DTYPE_BYTES)
    try:
        return ModelSpec(
            name=name,
            n_layers=count("n_layers"),
            d_model=count("d_model"),
            n_heads=count("n_heads"),
            n_kv_heads=count("n_kv_heads", d.get("n_heads")),
            d_ff=count("d_ff"),
            vocab_size=count("vocab_size"),
            tied_embeddings=bool(d.get("tied_embeddings", False)),
            dtype=text("dtype", dtypes) or dtype,
            head_dim=count("head_dim") if d.get("head_dim") else 0,
            source=str(d.get("source", "")),
            **{key: count(key, 0, 0) for key in MOE_FIELDS},
            expert_dtype=text("expert_dtype", dtypes),
            kv_dtype=text("kv_dtype", dtypes),
            attention=text("attention", ATTENTION_KINDS) or "gqa",
        )
    except ValueError as e:
        raise SpecsimError(f"{e}; check the model's fields") from None


# Hugging Face config.json keys (Llama, Mistral, Qwen2 families) -> ModelSpec fields.
HF_KEYS = {
    "num_hidden_layers": "n_layers",
    "hidden_size": "d_model",
    "num_attention_heads": "n_heads",
    "intermediate_size": "d_ff",
    "vocab_size": "vocab_size",
}
HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


# The families whose config.json fields this reader knows (model_type, or the architecture's name without
# "ForCausalLM"), and near ones read as a Llama-family decoder (their own norms, activations or embedding scaling
# move little of a pass's bytes and FLOPs; a note says so). Any other is refused: its layers are not a decoder of
# this shape (Mamba's state-space blocks, an encoder-decoder, ...).
CONFIG_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2",
                   "deepseek_v3", "gpt_oss")
READ_AS_LLAMA = ("phi3", "gemma", "gemma2", "granite", "olmo", "olmo2", "internlm2", "exaone")
READ_AS = " read as a Llama-family decoder"  # the words a model's source carries when it was read as another family
MOE_FAMILIES = ("qwen2_moe", "qwen3_moe", "mixtral", "gpt_oss")


def _family(cfg: dict[str, Any], path: Path) -> tuple[str, str]:
    """(family, how it was read): a known family as it is, a near one as Llama (said), no family at all (a config
    written by hand) as Llama (said); any other refused in one line."""
    kind = str(cfg.get("model_type") or "").lower().replace("-", "_")
    archs = cfg.get("architectures") or []
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    if not kind and arch:
        kind = arch.lower().removesuffix("forcausallm").replace("-", "_")
        kind = {"qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe", "deepseekv3": "deepseek_v3",
                "deepseekv2": "deepseek_v2", "gptoss": "gpt_oss"}.get(kind, kind)
    if kind in CONFIG_FAMILIES:
        return kind, ""
    if not kind:
        return "llama", f"no model_type or architectures:{READ_AS}"
    if kind in READ_AS_LLAMA:
        return "llama", f"model_type {kind}{READ_AS} (its own norms and activations not modelled)"
    raise SpecsimError(f"{path}: model_type {kind!r}{f' ({arch})' if arch else ''} is not a family specsim reads; "
                       f"it reads {', '.join(CONFIG_FAMILIES)} (and {', '.join(READ_AS_LLAMA)} as Llama): give a "
                       "preset (--target NAME) or the config.json of one of those")


# A ModelSpec's fields that make it the same model as another: everything but its name, where it was read from
# and its dtypes.
NOT_SHAPE = ("name", "source", "dtype", "expert_dtype", "kv_dtype")


def same_shape(a: ModelSpec, b: ModelSpec) -> bool:
    """Whether two specs are one model (or one shard) by their fields: layers, widths, heads, vocabulary, experts,
    attention, sharding."""
    from dataclasses import fields

    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a) if f.name not in NOT_SHAPE)


def preset_of(spec: ModelSpec) -> str | None:
    """The models.toml preset `spec` is by its fields (never by its name), if any: a head or a repository of a
    preset is taken only for the model it was made for."""
    names = sorted(_table("models"), key=lambda n: n != spec.name)  # its own name first: the usual answer
    for name in names:
        try:
            preset = _model_from_dict(name, _table("models")[name], spec.dtype).shard(spec.tp)
        except (SpecsimError, ValueError):
            continue
        if same_shape(preset, spec):
            return name
    return None


def model_from_config_json(path: str | Path, dtype: str | None = None) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` as its family writes it: Llama, Mistral, Qwen2/3 (dense), and
    the mixtures of experts Mixtral, Qwen2-MoE / Qwen3-MoE, DeepSeek-V3 (MLA, shared experts, leading dense layers,
    MTP modules, FP8) and gpt-oss (sliding-window layers, MXFP4 experts), by their own field names; a near family
    read as Llama says so in its source (`READ_AS`), an unknown one is refused. Its name is the config's
    ``_name_or_path`` or its folder's, unless that is a preset's name and its fields are another model's: then its
    folder's path (a folder named ``qwen3-30b-a3b/`` is not that preset unless its fields are)."""
    path = Path(path)
    cfg = read_json(path, "model config")
    if not isinstance(cfg, dict):
        raise SpecsimError(f"{path} holds no JSON object: give the model's config.json (its fields as one object)")
    missing = [k for k in HF_KEYS if k not in cfg]
    if missing:
        raise SpecsimError(f"{path} lacks {', '.join(missing)}: not a Llama/Mistral/Qwen/Mixtral/DeepSeek/gpt-oss "
                           "config.json; give the model's own config.json")
    family, reading = _family(cfg, path)
    d: dict[str, Any] = {field: cfg[key] for key, field in HF_KEYS.items()}
    d["n_kv_heads"] = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    d["tied_embeddings"] = cfg.get("tie_word_embeddings", False)
    d["head_dim"] = cfg.get("head_dim") or 0
    d["source"] = f"{path} ({reading})" if reading else str(path)
    d.update(_moe_fields(cfg, path, family))
    name = str(cfg.get("_name_or_path") or path.parent.name or path.stem)
    quant = str((cfg.get("quantization_config") or {}).get("quant_method", "")).lower()
    chosen = dtype or HF_DTYPES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))), "bf16")
    if quant == "fp8" and dtype is None:  # DeepSeek-V3's checkpoint: fp8 weights, the cache in the compute dtype
        d["dtype"], d["kv_dtype"] = "fp8", chosen
    spec = _model_from_dict(name, d, chosen)
    if name.lower() in _table("models") and preset_of(spec) != name.lower():
        spec = replace(spec, name=str(path.parent if path.name == "config.json" else path))
    return spec


EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _moe_fields(cfg: dict[str, Any], path: Path, family: str = "") -> dict[str, Any]:
    """The mixture-of-experts, attention-variant and quantisation fields of a config.json, by its family's names;
    an MoE config missing one it needs, or whose fields contradict each other (no experts but top-k routing, an MoE
    family with no experts), is refused naming them."""
    def need(*keys: str) -> Any:
        for key in keys:
            if cfg.get(key) is not None:
                return cfg[key]
        raise SpecsimError(f"{path}: an MoE config.json needs {' or '.join(keys)}; it is missing")

    kind = str(cfg.get("model_type", "")).lower()
    out: dict[str, Any] = {}
    experts = next((cfg[k] for k in EXPERT_KEYS if cfg.get(k)), None)
    given = ", ".join(f"{k} {cfg[k]!r}" for k in EXPERT_KEYS if k in cfg)
    top_k = cfg.get("num_experts_per_tok") or cfg.get("experts_per_token")
    if not experts and top_k:
        raise SpecsimError(f"{path}: {given or 'no expert count'} but num_experts_per_tok {top_k!r}: the fields "
                           "contradict each other (a dense model routes to no experts); fix the config.json (an "
                           "expert count >= the top-k, or no num_experts_per_tok for a dense model)")
    if not experts and family in MOE_FAMILIES:
        raise SpecsimError(f"{path}: model_type {family} is a mixture of experts but {given or 'no expert count'} "
                           f"is given; give its {' or '.join(EXPERT_KEYS)}")
    if experts:
        out["n_experts"] = experts
        out["experts_per_token"] = need("num_experts_per_tok", "experts_per_token")
        if "moe_intermediate_size" in cfg or kind.startswith(("qwen", "deepseek")):
            out["d_ff_expert"] = need("moe_intermediate_size")
        else:  # Mixtral and gpt-oss: every expert is intermediate_size wide
            out["d_ff_expert"] = cfg["intermediate_size"]
        if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert of its own width
            out["d_ff_shared"] = cfg["shared_expert_intermediate_size"]
        elif cfg.get("n_shared_experts"):  # DeepSeek: n shared experts as wide as a routed one
            out["d_ff_shared"] = int(cfg["n_shared_experts"]) * int(out["d_ff_expert"])
        out["dense_layers"] = int(cfg.get("first_k_dense_replace") or 0)
        if cfg.get("mlp_only_layers"):
            raise SpecsimError(f"{path}: mlp_only_layers {cfg['mlp_only_layers']} (dense layers among the MoE ones) "
                               "is not modelled; only leading dense layers are (first_k_dense_replace)")
    if cfg.get("kv_lora_rank"):
        out.update(attention="mla", kv_lora_rank=cfg["kv_lora_rank"], q_lora_rank=cfg.get("q_lora_rank") or 0,
                   qk_rope_head_dim=need("qk_rope_head_dim"), v_head_dim=need("v_head_dim"),
                   head_dim=need("qk_nope_head_dim"))
    if cfg.get("num_nextn_predict_layers"):
        out["mtp_modules"] = cfg["num_nextn_predict_layers"]
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if window and (cfg.get("use_sliding_window", True) is not False):
        sliding = sum(t == "sliding_attention" for t in types) if isinstance(types, list) else cfg["num_hidden_layers"]
        if sliding and window < 10**7:
            out.update(sliding_window=window, sliding_layers=sliding)
    quant = str((cfg.get("quantization_config") or {}).get("quant_method", "")).lower()
    if quant == "mxfp4" and experts:  # gpt-oss: experts in MXFP4, everything else in the compute dtype
        out["expert_dtype"] = "mxfp4"
    return out


def datasheet_for(device_name: str) -> HardwareSpec | None:
    """The hardware preset whose name matches a device's (an "NVIDIA H100 80GB HBM3" is the h100 preset), if any:
    its datasheet peaks are the ceilings a calibration's fitted rates may not pass."""
    low = device_name.lower().replace(" ", "")
    for preset in hardware_names():
        if preset.split("-")[0] in low:
            return load_hardware(preset)
    return None


BUILTIN_TARGET = "specsim-target"  # the built-in pair's presets (models.toml), trained weights in engine/weights/
BUILTIN_DRAFT = "specsim-draft"


def is_builtin_pair(target: str | ModelSpec, draft: str | ModelSpec | None = None) -> bool:
    """Whether `target` (and `draft`, when given) are the built-in pair's models, whose trained weights can
    measure acceptance: the one rule every command uses."""
    def name(m: str | ModelSpec) -> str:
        return m if isinstance(m, str) else m.name

    return name(target) == BUILTIN_TARGET and (draft is None or name(draft) == BUILTIN_DRAFT)


def load_model(name_or_path: str, dtype: str = "bf16") -> ModelSpec:
    """A preset by name, or a ``config.json`` (or a folder holding one) on disk."""
    p = Path(name_or_path)
    if name_or_path.endswith(".json") or p.is_dir() or p.is_file():
        if p.is_dir():
            p = p / "config.json"
        if not p.exists():
            raise SpecsimError(f"no such config file {str(p)!r}; give a preset name (specsim predict --help) or a "
                               "config.json (or the folder holding one)")
        return model_from_config_json(p, dtype)
    table = _table("models")
    key = name_or_path.lower()
    if key not in table:
        raise _unknown("model", name_or_path, model_names(), " (or give a path to a config.json)")
    return _model_from_dict(key, table[key], dtype)
