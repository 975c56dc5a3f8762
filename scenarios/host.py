"""The host machine without torch: the CPU's name, its memory, and the identity a CPU profile is matched by.
`specsim predict` finds this machine's latest profile through here without importing torch."""

from __future__ import annotations

import os
import platform
from typing import Any


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9


def cpu_identity() -> dict[str, Any]:
    """The fields of `engine.device.device_identity` for a CPU that say which machine this is."""
    return {"kind": "cpu", "name": cpu_model_name(), "cores": os.cpu_count()}


def host_summary() -> dict[str, Any]:
    return {"hostname": platform.node(), "python": platform.python_version(), "platform": platform.platform()}


def gpu_identities() -> list[dict[str, Any]]:
    """The NVIDIA GPUs of this machine by name, through NVML (no torch, no CUDA context); none if NVML is absent."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append({"kind": "cuda", "name": name.decode() if isinstance(name, bytes) else str(name)})
        return names
    except pynvml.NVMLError:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def local_identities() -> list[dict[str, Any]]:
    """Every device of this machine a profile could belong to: its CPU and its NVIDIA GPUs."""
    return [cpu_identity(), *gpu_identities()]
