"""An outside engine decoding one request at a time, priced from its own measurements: its passes as measured (not
inferred between lengths: a CPU engine's pass of 2-3 tokens can cost more than one of 5) and the steps greedy
decoding takes along the calibration texts. Shared by `calibrate.transformers_engine` and `calibrate.llama_cpp`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.specs import ModelSpec


def replay(proposed: Sequence[Sequence[int]], accepted: Sequence[Sequence[int]], new_tokens: int
           ) -> list[tuple[int, int]]:
    """The steps greedy decoding takes along each calibration text: at position t a step proposes proposed[t] tokens
    and keeps accepted[t] + 1, and the next step starts where it stopped. Steps, not positions: averaging over every
    position would weigh a long copied stretch once per token where decoding crosses it in a few steps."""
    steps = []
    for m, a in zip(proposed, accepted):
        t, n = 0, min(len(m), new_tokens)
        while t < n:
            steps.append((int(m[t]), int(a[t])))
            t += int(a[t]) + 1
    return steps


def measured_pass_s(profile: Any, model: ModelSpec, new_tokens: int, context: int) -> float:
    """A pass as the engine ran it in the calibration: the measured times of these new tokens, linear in the
    context between (and beyond) the measured contexts; the fitted cost model where none was measured."""
    pts = sorted((p.context, p.median_s) for p in profile.passes
                 if p.model == model.name and p.batch == 1 and p.median_s and
                 (p.new_tokens == new_tokens if context > 0 else p.context == 0))
    if context == 0:  # a prefill: linear in its tokens between the measured ones
        pre = sorted((p.new_tokens, p.median_s) for p in profile.passes
                     if p.model == model.name and p.context == 0 and p.median_s)
        if len(pre) >= 2:
            n, t = np.array(pre, dtype=float).T
            if new_tokens <= n[-1]:
                return float(np.interp(new_tokens, n, t))
            slope = (t[-1] - t[-2]) / (n[-1] - n[-2])
            return float(t[-1] + slope * (new_tokens - n[-1]))
        return profile.cost_model().pass_time_s(model, 1, new_tokens, 0)
    if len(pts) >= 2:
        # Theil-Sen: the median of the pairwise slopes, so one slow measurement (a burst on a shared machine)
        # cannot turn the line over; never below the fastest measured pass
        c, t = np.array(pts, dtype=float).T
        slope = max(float(np.median([(t[j] - t[i]) / (c[j] - c[i]) for i in range(len(c))
                                     for j in range(i + 1, len(c)) if c[j] != c[i]])), 0.0)
        intercept = float(np.median(t - slope * c))
        return max(intercept + slope * context, float(t.min()) * 0.5)
    return profile.cost_model().pass_time_s(model, 1, new_tokens, context)
