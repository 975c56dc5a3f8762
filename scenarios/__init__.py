"""Presets as TOML data, loaded into the model's frozen dataclasses.

``load_hardware(name, engine)``, ``load_engine(name)`` and ``load_model(name_or_config_json)`` are the entry points;
an unknown name gets a one-line error that suggests the closest preset names, a non-finite number in a preset a
one-line error naming it.
"""

from __future__ import annotations

import difflib
import math
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from scenarios.files import read_json
from simulator import SpecsimError
from simulator.specs import (
    GIGA,
    TERA,
    EngineOverheads,
    HardwareSpec,
    Interconnect,
    ModelSpec,
    Overheads,
    PerStep,
    SpeculationTax,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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
    return list(_table("engines"))


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


def _engine_table(name: str) -> dict[str, Any]:
    table = _table("engines")
    key = name.lower()
    if key not in table:
        raise _unknown("engine", name, engine_names(), "")
    return table[key]


def load_engine(name: str) -> tuple[EngineOverheads, Overheads, str]:
    """An engine preset: its per-step costs (as `EngineOverheads`), its per-pass and per-layer costs, its source."""
    key = name.lower()
    d = _engine_table(name)
    step = PerStep(_finite(d, "step_overhead_us", key) * MICRO)
    accept = PerStep(_finite(d, "accept_overhead_us", key) * MICRO)
    # the serving engines of the presets pack each sequence's own rows into a step (vLLM's and SGLang's flattened
    # token batches): a sequence with no proposal verifies one token
    engine = EngineOverheads(plain=step, verify=step, chain_accept=accept, tree_accept=accept, ragged_verify=True)
    passes = Overheads(pass_s=_finite(d, "pass_overhead_us", key) * MICRO,
                       layer_s=_finite(d, "layer_overhead_us", key) * MICRO, engine=engine)
    return engine, passes, str(d.get("source", ""))


def _finite(d: dict[str, Any], key: str, where: str, positive: bool = False) -> float:
    """A number from a preset, refused (one line) if it is not finite and non-negative (or positive)."""
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise SpecsimError(f"preset {where!r}: {key} = {v!r} must be a finite number {'> 0' if positive else '>= 0'}")
    return float(v)


def load_hardware(name: str, engine: str = "vllm") -> HardwareSpec:
    """A GPU preset, with the per-step costs of `engine` (engines.toml) around its passes."""
    table = _table("hardware")
    key = name.lower()
    if key not in table or key == "defaults":
        raise _unknown("hardware", name, hardware_names(), "")
    d = {**table["defaults"], **table[key]}
    _, overheads, engine_source = load_engine(engine)
    curve: tuple[tuple[int, float, float], ...] = ()
    if "rate_curve_rows" in d:
        rows, bw, fl = d["rate_curve_rows"], d["rate_curve_bw"], d["rate_curve_flops"]
        if not (len(rows) == len(bw) == len(fl) >= 1):
            raise SpecsimError(f"preset {key!r}: rate_curve_rows, _bw and _flops must be equally long")
        curve = tuple((int(r), float(b), float(f)) for r, b, f in zip(rows, bw, fl))
    ridge = d["ridge_p"]
    link = None
    if "interconnect" in d:
        link = Interconnect(str(d["interconnect"]), _finite(d, "interconnect_GB_per_s", key, True) * GIGA,
                            _finite(d, "interconnect_latency_us", key) * 1e-6, str(d.get("interconnect_source", "")))
    engine_d = _engine_table(engine)
    if link is not None and "allreduce_latency_us" in engine_d:  # the engine's collectives, where measured
        link = replace(link, latency_s=_finite(engine_d, "allreduce_latency_us", engine) * 1e-6,
                       source=f"{link.source}; latency: {engine_d.get('allreduce_source', engine)}")
    if d.get("layer_fixed_us"):
        overheads = replace(overheads, layer_s=overheads.layer_s + _finite(d, "layer_fixed_us", key) * 1e-6)
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
    )


def _model_from_dict(name: str, d: dict[str, Any], dtype: str) -> ModelSpec:
    def count(key: str, default: Any = None) -> int:
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < 1:
            raise SpecsimError(f"model {name!r}: {key} = {v!r} must be a whole number >= 1")
        return int(v)

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
            dtype=dtype,
            head_dim=count("head_dim") if d.get("head_dim") else 0,
            source=str(d.get("source", "")),
        )
    except ValueError as e:
        raise SpecsimError(str(e)) from None


# Hugging Face config.json keys (Llama, Mistral, Qwen2 families) -> ModelSpec fields.
HF_KEYS = {
    "num_hidden_layers": "n_layers",
    "hidden_size": "d_model",
    "num_attention_heads": "n_heads",
    "intermediate_size": "d_ff",
    "vocab_size": "vocab_size",
}
HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def model_from_config_json(path: str | Path, dtype: str | None = None) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` of the Llama, Mistral or Qwen2 families."""
    path = Path(path)
    cfg = read_json(path, "model config")
    if not isinstance(cfg, dict):
        raise SpecsimError(f"{path} holds no JSON object")
    missing = [k for k in HF_KEYS if k not in cfg]
    if missing:
        raise SpecsimError(f"{path} lacks {', '.join(missing)}: not a Llama/Mistral/Qwen2 config.json")
    d: dict[str, Any] = {field: cfg[key] for key, field in HF_KEYS.items()}
    d["n_kv_heads"] = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    d["tied_embeddings"] = cfg.get("tie_word_embeddings", False)
    d["head_dim"] = cfg.get("head_dim") or 0
    d["source"] = str(path)
    name = cfg.get("_name_or_path") or path.parent.name or path.stem
    chosen = dtype or HF_DTYPES.get(str(cfg.get("torch_dtype", "bfloat16")), "bf16")
    return _model_from_dict(str(name), d, chosen)


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
            raise SpecsimError(f"no such config file {str(p)!r}")
        return model_from_config_json(p, dtype)
    table = _table("models")
    key = name_or_path.lower()
    if key not in table:
        raise _unknown("model", name_or_path, model_names(), " (or give a path to a config.json)")
    return _model_from_dict(key, table[key], dtype)
