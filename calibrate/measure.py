"""Timing like an experimentalist: warm up, synchronise, repeat until the median is stable or a cap is hit, and keep
every raw sample with its spread."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True)
class Timing:
    """Raw samples (seconds) of one measured operation, and their summary."""

    samples_s: tuple[float, ...]
    extra: dict = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return float(np.median(self.samples_s))

    @property
    def iqr_s(self) -> float:
        q1, q3 = np.percentile(self.samples_s, [25, 75])
        return float(q3 - q1)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return self.iqr_s / self.median_s if self.median_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"median_s": self.median_s, "iqr_s": self.iqr_s, "n": len(self.samples_s),
                "samples_s": [round(s, 9) for s in self.samples_s], **self.extra}


class Timer:
    """Wall time of a callable on one device: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def once(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def measure(self, fn: Callable[[], object], warmup: int = 2, min_reps: int = 5, max_reps: int = 200,
                max_time_s: float = 2.0, rel_tol: float = 0.02) -> Timing:
        """Repeat until the median of all samples moves by less than `rel_tol` over the last `min_reps` samples,
        or `max_reps` / `max_time_s` is reached."""
        for _ in range(warmup):
            fn()
        self.sync()
        samples: list[float] = []
        medians: list[float] = []
        t_start = time.perf_counter()
        while len(samples) < max_reps:
            samples.append(self.once(fn))
            medians.append(float(np.median(samples)))
            if len(samples) >= 2 * min_reps:
                recent = medians[-min_reps:]
                if (max(recent) - min(recent)) / max(recent[-1], 1e-12) < rel_tol:
                    break
            if time.perf_counter() - t_start > max_time_s and len(samples) >= min_reps:
                break
        return Timing(tuple(samples))
