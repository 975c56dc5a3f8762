"""A GPU described in a file of its own (`--hardware my-gpu.toml`): the fields a preset of `scenarios/hardware.toml`
has, at the top level of one TOML file, checked on load (a missing, misspelt, zero, negative, non-finite or absurd
field is refused in one line naming the field and the file), and a preset written out as such a file to start from
(`specsim hardware show NAME`). The fields, their units and which are required: docs/hardware.md.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from simulator import SpecsimError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# (lowest, highest) a field may take, in its file's units; lowest is excluded where it is 0 and the field is a rate
# or a size. The highest are ten times past anything shipped (B300: 8 TB/s, 15,000 TFLOP/s fp4, 288 GB): a value
# beyond is a unit slip (TB/s typed as GB/s times a thousand), not a GPU.
REQUIRED = {"name": str, "mem_bw_GB_per_s": (0.0, 100_000.0), "peak_TFLOP_per_s": (0.0, 200_000.0),
            "mem_GB": (0.0, 10_000.0)}
FRACTION = (0.0, 1.0)
OPTIONAL: dict[str, Any] = {
    "source": str, "rates_source": str, "w4a16_source": str, "interconnect": str, "interconnect_source": str,
    "kernels_source": str,
    "bw_efficiency": FRACTION, "flops_efficiency": FRACTION, "attention_bw_efficiency": FRACTION,
    "usable_memory_fraction": FRACTION, "interconnect_allreduce_bw_efficiency": FRACTION,
    "ridge_p": (1.0, 64.0), "layer_fixed_us": (0.0, 100_000.0), "mla_layer_us": (0.0, 100_000.0),
    "interconnect_GB_per_s": (0.0, 10_000.0), "interconnect_latency_us": (0.0, 100_000.0),
    "rate_curve_rows": list, "rate_curve_bw": list, "rate_curve_flops": list, "moe_kernel": dict,
    "fp8_block_gemm_floor_rows": list, "fp8_block_gemm_floor_us": list, "kernels": dict,
}
LOW_ALLOWED = {"layer_fixed_us", "mla_layer_us", "interconnect_latency_us", "ridge_p"}  # may equal their lowest
# The rates a datasheet lists (peak_TFLOP_per_s's keys): a 4-bit weight format runs at fp4 or int4 where listed
COMPUTE_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8", "int8", "int4", "fp4", "w4a16")
FRACTIONS = ("bw_efficiency", "flops_efficiency", "attention_bw_efficiency", "ridge_p")


def is_hardware_file(name: str) -> bool:
    """Whether --hardware names a file (a path, or a name ending .toml) rather than a preset."""
    return name.lower().endswith(".toml") or "/" in name or "\\" in name


def _number(v: Any, key: str, where: str, bounds: tuple[float, float]) -> float:
    lo, hi = bounds
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecsimError(f"{where}: {key} = {v!r} must be a finite number (docs/hardware.md)")
    if v < lo or (v == lo and key not in LOW_ALLOWED) or v > hi:
        low = f">= {lo:g}" if key in LOW_ALLOWED else f"> {lo:g}"
        raise SpecsimError(f"{where}: {key} = {v!r} is out of range: it must be {low} and at most {hi:g}; check "
                           "its unit (docs/hardware.md)")
    return float(v)


def check_hardware_table(d: dict[str, Any], where: str) -> None:
    """Refuse, in one line naming the field and `where`, a table that is not a GPU: a required field missing, a
    field specsim does not know (a typo would silently take a default), or a number zero, negative, non-finite or
    absurd for its unit."""
    for key in REQUIRED:
        if key not in d:
            raise SpecsimError(f"{where}: {key} is missing; a hardware file needs {', '.join(REQUIRED)} "
                               "(specsim hardware show h100-sxm prints one to start from; docs/hardware.md)")
    for key, v in d.items():
        kind = REQUIRED.get(key, OPTIONAL.get(key))
        if kind is None:
            raise SpecsimError(f"{where}: {key} is not a hardware field; known: "
                               f"{', '.join([*REQUIRED, *OPTIONAL])} (docs/hardware.md)")
        if key == "peak_TFLOP_per_s":
            if not isinstance(v, dict) or not v:
                raise SpecsimError(f"{where}: peak_TFLOP_per_s must be a table of dtypes, e.g. "
                                   "{ bf16 = 989, fp8 = 1979 } (dense TFLOP/s)")
            for dt, rate in v.items():
                if dt not in COMPUTE_DTYPES:
                    raise SpecsimError(f"{where}: peak_TFLOP_per_s.{dt} is not a compute dtype; known: "
                                       f"{', '.join(COMPUTE_DTYPES)}")
                _number(rate, f"peak_TFLOP_per_s.{dt}", where, REQUIRED[key])
        elif key == "ridge_p" and v == "inf":
            continue
        elif isinstance(kind, tuple):
            _number(v, key, where, kind)
        elif not isinstance(v, kind):
            raise SpecsimError(f"{where}: {key} = {v!r} must be a {kind.__name__} (docs/hardware.md)")
    if "interconnect" in d and "interconnect_GB_per_s" not in d:
        raise SpecsimError(f"{where}: interconnect is given without interconnect_GB_per_s (per GPU, each way)")


def read_hardware_file(name: str) -> dict[str, Any]:
    """A hardware file's table, checked (`check_hardware_table`); a missing or malformed file in one line."""
    path = Path(name)
    if not path.is_file():
        raise SpecsimError(f"no such hardware file {name!r}; give a preset (specsim hardware list) or a TOML file "
                           "(specsim hardware show h100-sxm > my-gpu.toml writes one to edit)")
    try:
        d = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecsimError(f"{name}: not a TOML file ({e}); give one as specsim hardware show h100-sxm "
                           "writes it (docs/hardware.md)") from None
    check_hardware_table(d, name)
    d.setdefault("source", f"hardware file {name} (no source given)")
    if "rates_source" not in d and any(k in d for k in FRACTIONS):  # its own fractions, not the presets' defaults
        d["rates_source"] = f"set in hardware file {name} (no rates_source given)"
    return d


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if math.isfinite(v) else '"inf"'
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {v!r}")


def hardware_toml(name: str, d: dict[str, Any], defaults: dict[str, Any]) -> str:
    """A preset as a hardware file: its own fields, the defaults it takes written out (so the file says every
    fraction it prices with), and its engines' own kernels as [kernels.ENGINE] tables."""
    own = {k: v for k, v in d.items() if k != "kernels"}
    taken = [k for k in defaults if k not in own]
    lines = [f"# specsim hardware file, written from the preset {name!r} (scenarios/hardware.toml).",
             "# Units: GB/s and GB are 1e9 bytes, TFLOP/s 1e12 FLOP/s dense. Fields: docs/hardware.md.",
             f"# Use it: specsim predict --hardware {name}.toml --acceptance iid:0.7 ..."]
    if taken:
        lines.append(f"# {', '.join(taken)}: the presets' defaults (assumed, not measured on this GPU)")
    lines += [f"{k} = {_toml_value(v)}" for k, v in {**own, **{k: defaults[k] for k in taken}}.items()]
    for engine, table in d.get("kernels", {}).items():
        lines += ["", f"[kernels.{engine}]", *(f"{k} = {_toml_value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"
