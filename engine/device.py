"""Which device this is and what state it is in: torch for CUDA and the CPU, pynvml for an NVIDIA GPU's clocks,
power and throttling. pynvml being absent or failing is recorded, never fatal."""

from __future__ import annotations

import os
from typing import Any

import torch

from scenarios.host import cpu_model_name
from simulator import SpecsimError


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA if present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; a one-line error if unavailable."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SpecsimError(f"--device {name}: this torch ({torch.__version__}) sees no CUDA device; use "
                               "--device cpu or auto")
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise SpecsimError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present")
        return torch.device(f"cuda:{index}")
    raise SpecsimError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N")


def nvml_state(index: int) -> dict[str, Any]:
    """Clocks, power, temperature, driver and throttle reasons via pynvml; {'error': ...} if NVML is unusable."""
    try:
        import pynvml
    except ImportError as e:
        return {"error": f"pynvml not importable: {e}"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {"error": f"nvmlInit failed: {e}"}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        state: dict[str, Any] = {
            "name": _s(pynvml.nvmlDeviceGetName(h)),
            "driver": _s(pynvml.nvmlSystemGetDriverVersion()),
            "memory_total_bytes": int(mem.total),
            "memory_used_bytes": int(mem.used),
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "max_mem_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        }
        for key, fn in (("power_limit_w", pynvml.nvmlDeviceGetPowerManagementLimit),
                        ("power_draw_w", pynvml.nvmlDeviceGetPowerUsage)):
            try:
                state[key] = fn(h) / 1000.0
            except pynvml.NVMLError as e:
                state[key] = f"unavailable: {e}"
        try:
            reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        except (pynvml.NVMLError, AttributeError):
            reasons = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        state["throttle_reasons_mask"] = int(reasons)
        return state
    except pynvml.NVMLError as e:
        return {"error": f"NVML query failed: {e}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def available_bytes(device: torch.device) -> int | None:
    """Memory a new allocation can take now: the GPU's free memory, or the host's available memory (MemAvailable:
    free plus what the kernel can reclaim); None where the system does not say."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(device: torch.device, need_bytes: float, what: str, fix: str) -> None:
    """A one-line error when `what` needs more than 90 % of what the device can allocate now (`available_bytes`),
    before anything is allocated: on a CPU the kernel kills a process that runs out, with nothing said."""
    free = available_bytes(device)
    if free is not None and need_bytes > 0.9 * free:
        raise SpecsimError(f"{what} need {need_bytes / 2**30:,.1f} GiB but {free / 2**30:,.1f} GiB is free on "
                           f"{device}: {fix}")


def match_threads(profile: Any) -> str | None:
    """Run real passes with the torch threads a CPU profile's passes were timed with (its device state records
    them): a pass of several rows is split over the threads and a single row is not, so a validation on other
    threads would test another machine. Returns a note when it changed them."""
    recorded = profile.device_state.get("start", {}).get("torch_threads")
    now = torch.get_num_threads()
    if profile.device.kind != "cpu" or not isinstance(recorded, int) or recorded < 1 or recorded == now:
        return None
    torch.set_num_threads(recorded)
    name = f"profile {profile.path.name}" if profile.path else "the profile"
    return (f"running on {recorded} torch thread{'s' if recorded > 1 else ''} as {name} was calibrated (this "
            f"process had {now}; OMP_NUM_THREADS sets them)")


def device_identity(device: torch.device) -> dict[str, Any]:
    """What the device is: stable fields that say whether a profile belongs to this machine."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"kind": "cuda", "name": props.name, "memory_bytes": int(props.total_memory),
                "compute_capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
                "torch": torch.__version__, "cuda": torch.version.cuda}
    return {"kind": "cpu", "name": cpu_model_name(), "cores": os.cpu_count(), "torch": torch.__version__}


def device_state(device: torch.device) -> dict[str, Any]:
    """What state it is in now (taken at the start and at the end of a calibration)."""
    if device.type == "cuda":
        return {"nvml": nvml_state(device.index or 0),
                "memory_allocated_bytes": int(torch.cuda.memory_allocated(device))}
    state: dict[str, Any] = {"torch_threads": torch.get_num_threads(),
                             "matmul_backend": _cpu_backend()}
    try:
        state["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    return state


def _cpu_backend() -> str:
    cfg = torch.__config__.show()
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        for line in cfg.splitlines():
            if key in line:
                return line.strip()
    return "mkldnn" if torch.backends.mkldnn.is_available() else "unknown"
