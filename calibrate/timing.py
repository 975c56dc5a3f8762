"""Timing like an experimentalist: warm up, synchronise, repeat until the median is stable or a cap is hit, and keep
every raw sample with its spread."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping
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


@dataclass(frozen=True)
class Effort:
    """How hard to measure: the time budget per measured point, spent in interleaved rounds, and when a point is done
    (enough samples and the median's standard error below `rel_tol` / 2.2 of it, or `max_samples`)."""

    per_point_s: float
    min_samples: int
    max_samples: int
    rel_tol: float

    @classmethod
    def of(cls, quick: bool, busy: bool) -> Effort:
        """Quick: a minute on a laptop; busy: a machine others are using (three times the time, more samples, and
        every point measured in every round, so interference hits all of them alike)."""
        base = cls(0.35, 5, 60, 0.05) if quick else cls(1.2, 7, 200, 0.03)
        return cls(base.per_point_s * 3, 15, base.max_samples * 3, base.rel_tol) if busy else base


class Estimate:
    """How far a block of measurement is, as a share of its estimated time: `calls` untimed calls first (each
    point's first call and its warm-ups: on a busy host or at large shapes minutes of it), priced at their mean so
    far, then rounds with a budget of `budget_s` (`interleaved`'s progress). From the first call on, the share
    reported times the time elapsed is an honest estimate of the whole."""

    def __init__(self, calls: int, budget_s: float, report: Callable[[float], None]) -> None:
        self.calls, self.budget_s, self.report = max(calls, 1), budget_s, report
        self.done, self.t0 = 0, time.perf_counter()
        self.untimed_s: float | None = None

    def call(self) -> None:
        """One untimed call done."""
        self.done += 1
        elapsed = time.perf_counter() - self.t0
        self.report(elapsed / (elapsed / self.done * self.calls + self.budget_s))

    def rounds(self, fraction: float) -> None:
        """The rounds `fraction` of the way (their budget spent or their points done)."""
        if self.untimed_s is None:
            self.untimed_s = time.perf_counter() - self.t0
        total = self.untimed_s + self.budget_s
        self.report((self.untimed_s + fraction * self.budget_s) / total if total > 0 else fraction)


def interleaved(points: Mapping[Hashable, Callable[[], object]], timer: Timer, effort: Effort,
                rng: np.random.Generator,
                group: Callable[[Hashable], Hashable] | None = None, warmup: int = 2,
                progress: Callable[[float], None] | None = None,
                warmed: Callable[[], None] | None = None) -> dict[Hashable, Timing]:
    """Time every point in rounds, each round in a new random order, until every point is done or the budget
    (`effort.per_point_s` per point) is spent: drift of a noisy machine and warm-up effects hit all points alike
    instead of whichever was measured first. Each point is called `warmup` times first (a CUDA graph is captured
    then; a caller that has already called each point once needs fewer).

    With `group` (a point's model, say), each round visits the groups in a random order and a group's points
    together, in a random order, after one untimed call of one of them: a small draft's weights sit in the CPU's
    caches while it runs pass after pass, as it does drafting, and a pass timed right after a target's pass found
    them evicted (the built-in draft's 0.4 ms passes took up to 0.7 ms so, two modes that made three quick
    calibrations' held-out p90 17-29 % instead of 10-15 %).

    `progress` is told after every round how far the measurement is, from 0 to 1: the larger of the budget's share
    spent and the share of points done (the rounds, not the points, take the time: every point finishes together
    when the budget runs out); `warmed` after every warm-up call (`Estimate` prices the rest by them)."""
    keys = list(points)
    for key in keys:
        for _ in range(warmup):
            points[key]()
            if warmed is not None:
                warmed()
    timer.sync()
    samples: dict[Hashable, list[float]] = {k: [] for k in keys}
    budget = effort.per_point_s * len(keys)
    t0 = time.perf_counter()

    def done(k: Hashable) -> bool:
        # done when the median is known well, not when the samples stop spreading: the median's standard error is
        # about 0.93 IQR / sqrt(n) (1.2533 sigma / sqrt(n), sigma = IQR / 1.349), held at rel_tol / 2.2 of the
        # median (the spread that ``rel_tol`` allows at the minimum of 5 samples); a sub-millisecond pass that
        # spreads 8-10 % on a busy host stops at ~15 samples instead of running to max_samples
        s = samples[k]
        if len(s) >= effort.max_samples:
            return True
        if len(s) < effort.min_samples:
            return False
        q1, med, q3 = np.percentile(s, [25, 50, 75])
        return (q3 - q1) / med / math.sqrt(len(s)) <= effort.rel_tol / 2.2

    while True:
        todo = [k for k in keys if not done(k)]
        spent = time.perf_counter() - t0
        over = spent > budget and all(len(samples[k]) >= effort.min_samples for k in keys)
        if not todo or over:
            break
        if progress is not None:
            progress(max(min(spent / budget, 1.0) if budget > 0 else 0.0, 1.0 - len(todo) / len(keys)))
        if group is None:
            for i in rng.permutation(len(todo)):
                samples[todo[i]].append(timer.once(points[todo[i]]))
            continue
        blocks: dict[Hashable, list[Hashable]] = {}
        for k in todo:
            blocks.setdefault(group(k), []).append(k)
        # a group whose points are all done keeps its place in the rounds with one untimed call, so the points
        # still running are timed between the others' passes as before, not back to back (a small draft's passes
        # timed alone, its weights never evicted, came out 18-37 % cheaper than between the target's)
        for k in keys:
            blocks.setdefault(group(k), [])
        groups = list(blocks.items())
        for g in rng.permutation(len(groups)):
            name, block = groups[g]
            if not block:
                points[next(k for k in keys if group(k) == name)]()
                continue
            order = [block[i] for i in rng.permutation(len(block))]
            points[order[0]]()  # untimed: this group's weights back in the caches
            for k in order:
                samples[k].append(timer.once(points[k]))
    return {k: Timing(tuple(v)) for k, v in samples.items()}
