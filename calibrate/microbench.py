"""Micro-benchmarks: achieved memory bandwidth, matmul FLOP/s per dtype (large and skinny), and the cost of a call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from calibrate.timing import Timer

MIB = 2**20


def _dtypes(device: torch.device) -> list[str]:
    out = ["fp32", "bf16"]
    if device.type == "cuda":
        out.append("fp16")
    return out


TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def bandwidth(timer: Timer, buffer_bytes: int, max_time_s: float) -> dict[str, Any]:
    """Streaming read (a sum) and copy over a buffer far larger than the last-level cache."""
    n = buffer_bytes // 4
    src = torch.ones(n, dtype=torch.float32, device=timer.device)
    dst = torch.empty_like(src)
    read = timer.measure(lambda: src.sum(), max_time_s=max_time_s)
    copy = timer.measure(lambda: dst.copy_(src), max_time_s=max_time_s)
    out = {
        "buffer_bytes": buffer_bytes,
        "read_bytes_per_s": buffer_bytes / read.median_s,
        "copy_bytes_per_s": 2 * buffer_bytes / copy.median_s,  # read + write
        "read": read.to_dict(),
        "copy": copy.to_dict(),
    }
    return out


def matmul(timer: Timer, dtype: str, size: int, max_time_s: float) -> dict[str, Any]:
    a = torch.randn(size, size, device=timer.device).to(TORCH[dtype])
    b = torch.randn(size, size, device=timer.device).to(TORCH[dtype])
    t = timer.measure(lambda: a @ b, max_time_s=max_time_s)
    return {"size": size, "flops_per_s": 2 * size**3 / t.median_s, "timing": t.to_dict()}


def skinny(timer: Timer, dtype: str, rows: list[int], d_in: int, d_out: int, max_time_s: float) -> list[dict[str, Any]]:
    """rows x d_in activations times a (d_out, d_in) weight stored as nn.Linear stores it: the decode shape."""
    w = (torch.randn(d_out, d_in, device=timer.device) * 0.02).to(TORCH[dtype])
    weight_bytes = w.numel() * w.element_size()
    out = []
    for r in rows:
        x = torch.randn(r, d_in, device=timer.device).to(TORCH[dtype])
        t = timer.measure(lambda x=x: torch.nn.functional.linear(x, w), max_time_s=max_time_s)
        out.append({"rows": r, "weight_bytes": weight_bytes, "bytes_per_s": weight_bytes / t.median_s,
                    "flops_per_s": 2 * r * d_in * d_out / t.median_s, "timing": t.to_dict()})
    return out


def call_overhead(timer: Timer, max_time_s: float) -> dict[str, Any]:
    """A tiny op, many times per sample: the fixed cost of one framework call."""
    x = torch.ones(1, device=timer.device)
    reps = 200

    def many() -> None:
        for _ in range(reps):
            x.add(1.0)

    t = timer.measure(many, max_time_s=max_time_s)
    return {"per_call_s": t.median_s / reps, "timing": t.to_dict()}


def run_microbenchmarks(timer: Timer, quick: bool, tick: Callable[[], None], time_scale: float = 1.0) -> dict[str, Any]:
    """All micro-benchmarks; `tick` is called once per finished measurement (for a progress bar)."""
    gpu = timer.device.type == "cuda"
    cap = (0.4 if quick else 1.5) * time_scale
    out: dict[str, Any] = {}
    out["bandwidth"] = bandwidth(timer, (2048 if gpu else (256 if quick else 512)) * MIB, cap)
    tick()
    out["call_overhead"] = call_overhead(timer, cap)
    tick()
    size = 8192 if gpu else CPU_MATMUL_SIZE[0 if quick else 1]
    out["matmul"] = {}
    out["skinny"] = {}
    rows = skinny_rows(quick)
    for dt in _dtypes(timer.device):
        out["matmul"][dt] = matmul(timer, dt, size, cap)
        tick()
        d = 8192 if gpu else CPU_SKINNY_WIDTH
        out["skinny"][dt] = skinny(timer, dt, rows, d, 2 * d if gpu else d, cap / 2)
        tick()
    return out


CPU_MATMUL_SIZE = (1024, 2048)  # a CPU's square GEMM, quick and full
CPU_SKINNY_WIDTH = 4096  # a CPU's skinny GEMM: d x d weights, larger than its caches


def skinny_rows(quick: bool) -> list[int]:
    return [1, 2, 4, 8, 32, 128] if quick else [1, 2, 3, 4, 6, 8, 16, 32, 64, 128, 256]


def n_microbenchmarks(device: torch.device) -> int:
    return 2 + 2 * len(_dtypes(device))
