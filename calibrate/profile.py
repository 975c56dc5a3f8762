"""The calibration profile: versioned JSON, written atomically, refused with a clear message when it is corrupt,
from a newer schema or from another device. No torch here: `specsim predict` reads profiles without it."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

from simulator import SpecsimError
from simulator.cost import CostModel, RateTable
from simulator.specs import HardwareSpec, ModelSpec, Overheads

from .files import atomic_write_text, cache_dir

SCHEMA = "specsim-profile"
SCHEMA_VERSION = 1


def spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    return asdict(spec)


def spec_from_dict(d: dict[str, Any]) -> ModelSpec:
    return ModelSpec(**d)


def current_cpu_identity() -> dict[str, Any]:
    """The CPU's identity without importing torch (what `device_identity` records for a CPU)."""
    from .device import cpu_model_name

    return {"kind": "cpu", "name": cpu_model_name(), "cores": os.cpu_count()}


def same_device(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("kind") == b.get("kind") and a.get("name") == b.get("name")


def save_profile(profile: dict[str, Any], out: str | Path | None) -> Path:
    """Write atomically to `out`, or to the cache folder as profile-<device>-<time>.json."""
    from .device import device_key

    if out is None:
        stamp = profile["created"].replace(":", "").replace("-", "")[:15]
        out = cache_dir() / f"profile-{device_key(profile['device'])}-{stamp}.json"
    return atomic_write_text(out, json.dumps(profile, indent=1))


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read and check a profile; one-line errors for anything that cannot be trusted."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise SpecsimError(f"cannot read profile {str(path)!r}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SpecsimError(f"profile {path} is corrupt (not JSON); run specsim calibrate again") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SpecsimError(f"{path} is not a specsim profile")
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise SpecsimError(f"profile {path} has no schema version; run specsim calibrate again")
    if version > SCHEMA_VERSION:
        raise SpecsimError(f"profile {path} has schema {version}, newer than this specsim reads ({SCHEMA_VERSION}); "
                           "upgrade specsim or calibrate again")
    for key in ("device", "fit", "models", "passes"):
        if key not in data:
            raise SpecsimError(f"profile {path} is incomplete (no {key!r}); run specsim calibrate again")
    return data


def check_device(profile: dict[str, Any], here: dict[str, Any], path: str | Path) -> None:
    if not same_device(profile["device"], here):
        raise SpecsimError(f"profile {path} was measured on {profile['device'].get('name')!r}, not this "
                           f"{here.get('kind')} ({here.get('name')!r}); calibrate here or pass that device's profile "
                           "on that device")


def latest_profile(identity: dict[str, Any]) -> Path | None:
    """The newest profile in the cache folder measured on this device."""
    folder = cache_dir()
    if not folder.is_dir():
        return None
    best: tuple[float, Path] | None = None
    for f in folder.glob("profile-*.json"):
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and same_device(data.get("device", {}), identity):
            key = (f.stat().st_mtime, f)
            if best is None or key > best:
                best = key
    return best[1] if best else None


def hardware_from_microbenchmarks(name: str, micro: dict[str, Any], memory_bytes: float | None,
                                  source: str = "micro-benchmarks") -> HardwareSpec:
    """The device as its micro-benchmarks saw it: streaming read bandwidth and GEMM FLOP/s per dtype taken as the
    peaks (efficiency 1), memory from the device or, for a CPU, the host."""
    return HardwareSpec(
        name=name,
        mem_bw_bytes_per_s=micro["bandwidth"]["read_bytes_per_s"],
        peak_flops_per_s=tuple((dt, m["flops_per_s"]) for dt, m in micro["matmul"].items()),
        mem_capacity_bytes=float(memory_bytes or _host_memory_bytes()),
        bw_efficiency=1.0,
        flops_efficiency=1.0,
        source=source,
    )


def cost_model_from_profile(profile: dict[str, Any], with_measurements: bool = True) -> CostModel:
    """The calibrated cost model: fitted rates and overheads, plus every measured pass (which wins where it
    exists)."""
    fit = profile["fit"]
    lin, att, ov = fit["linear_rates"], fit["attention_rates"], fit["overheads"]
    device = profile["device"]
    hw = hardware_from_microbenchmarks(device.get("name", "this device"), profile["microbenchmarks"],
                                       device.get("memory_bytes"), f"calibrated {profile.get('created', '')}")
    measured: dict[tuple[str, int, int, int], float] = {}
    if with_measurements:
        for p in profile["passes"]:
            if p.get("median_s"):
                measured[(p["model"], p["batch"], p["new_tokens"], p["context"])] = p["median_s"]
    return CostModel(
        hardware=hw,
        linear_rates=RateTable(tuple(lin["rows"]), tuple(lin["mem_bw_bytes_per_s"]), tuple(lin["flops_per_s"])),
        attention_rates=RateTable(tuple(att["rows"]), tuple(att["mem_bw_bytes_per_s"]), tuple(att["flops_per_s"])),
        overheads=Overheads.from_dict(ov),
        measured=measured,
        label="calibrated",
        draft_catchup_tokens=int(fit.get("draft_catchup_tokens", 1)),
        measured_models=tuple(spec_from_dict(profile["models"][k]) for k in ("target", "draft")),
        attention_overlap=bool(fit.get("attention_overlap", True)),
    )


def rates_to_dict(rates: RateTable) -> dict[str, Any]:
    return {"rows": list(rates.rows), "mem_bw_bytes_per_s": list(rates.mem_bw_bytes_per_s),
            "flops_per_s": list(rates.flops_per_s)}


def _host_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9


def host_summary() -> dict[str, Any]:
    return {"hostname": platform.node(), "python": platform.python_version(), "platform": platform.platform()}
