"""What specsim's own engine pays for speculation switched off, and for switching the draft length: measured, as a
serving engine's schedule would use them (`simulator.specs.SpeculationTax`).

Four runs per batch size, interleaved and repeated: plain decoding with no draft loaded; a schedule of six steps
at k = 4 then six plain steps (k = 0) with the draft loaded; plain decoding again; six steps at k = 4 then six at
k = 2. From their steps:

- the off-tax: a scheduled plain step over the mean of the two plain runs' steps as far into the same text (the
  same context; one run before it and one after, so a steady drift cancels), minus one; and its noise: what the
  same work differed by two runs apart (the second plain run over the first, the k = 4 steps before the change in
  the fourth run over the second's); priced (`off_priced`) only where every repeat measured more than its noise;
- the draft's catch-up: the drafting phase of the first k = 4 step after the plain ones over a steady k = 4 step's
  (the drafting phase alone: whole steps later in a run also read a longer context), against what the cost model
  prices for it (the draft re-reading the tokens it missed: a draft pass over lag + 2 tokens instead of 2),
  which is how the serving simulator charges it (``--draft-sync lazy``), so it is not counted again as a switch;
- the switch: the first k = 2 step after k = 4 steps over a steady k = 2 step, in units of a plain step; priced
  (`switch_priced`) only where every repeat measured more than any steady k = 2 step of the run strayed from their
  median.

Both rules are `priced_over_noise`: on a shared host two runs of the same steps differ by tens of per cent, and
a quick calibration would otherwise price that as a tax.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from engine.speculative import Decoding, RealEngine
from simulator.cost import CostModel
from simulator.specs import ModelSpec

BLOCK = 6
PLAIN = Decoding(k=0)
OFF = Decoding(k=4, schedule=(4,) * BLOCK + (0,) * BLOCK)
SWITCH = Decoding(k=4, schedule=(4,) * BLOCK + (2,) * BLOCK)


def _step_times(run: Any, how: Decoding) -> list[tuple[int, int, float, float, float]]:
    """(k of the step, k of the step before, its time, its drafting time, tokens emitted before it (the mean over
    the batch: how far into the text, so how long the context)) for every step that did not capture a graph."""
    before = np.concatenate([[0.0], np.cumsum([np.mean(s.accepted) + 1 for s in run.steps])])
    return [(how.k_at(i), how.k_at(i - 1) if i else -1, s.phases.total_s, s.phases.draft_s, float(before[i]))
            for i, s in enumerate(run.steps) if not s.captured]


def priced_over_noise(by_repeat: Sequence[float], noise: float) -> float:
    """What a cost model should pay for a measured cost: the median of the repeats' where every repeat measured more
    than `noise` (what the same work differs by, measured beside it), else zero."""
    return float(np.median(by_repeat)) if min(by_repeat) > noise else 0.0


def _by_context(steps: Sequence[tuple[int, int, float, float, float]]) -> Callable[[float], float]:
    """Step time as a function of how far into the text, interpolated between these steps."""
    xs, ts = [x for *_, x in steps], [t for _, _, t, _, _ in steps]
    return lambda x: float(np.interp(x, xs, ts))


def measure_tax(engine: RealEngine, prompts: Sequence[Sequence[int]], batches: Sequence[int], new_tokens: int,
                repeats: int, gen: torch.Generator, cost: CostModel, draft: ModelSpec,
                tick: Callable[[], None] | None = None) -> dict[str, Any]:
    kinds = ("plain", "off", "after_off", "steady4", "after_switch", "steady2", "draft_after_off", "draft_steady4")
    samples: dict[int, dict[str, list[float]]] = {b: {k: [] for k in kinds} for b in batches}
    # per repeat, as fractions: the off-tax; what the same work differed by a run or two apart; the switch and the
    # largest stray of a steady k = 2 step from their median (both in plain steps)
    per_repeat: dict[int, dict[str, list[float]]] = {b: {"off": [], "null": [], "switch": [], "stray": []}
                                                     for b in batches}
    contexts: dict[int, int] = {}
    for _ in range(repeats):
        for b in batches:
            ps = [prompts[i % len(prompts)] for i in range(b)]
            contexts[b] = int(np.mean([len(p) for p in ps])) + new_tokens // 2
            s = samples[b]
            at: dict[str, Callable[[float], float]] = {}  # step time by how far into the text (the same prompts)
            off_at: list[tuple[float, float]] = []  # (time, how far into the text) of each scheduled plain step
            nulls: dict[str, list[float]] = {"plain": [], "k4": []}
            switch: list[float] = []
            steady2: list[float] = []
            for name, how in (("plain", PLAIN), ("off", OFF), ("plain again", PLAIN), ("switch", SWITCH)):
                run = engine.generate(ps, new_tokens, how, gen, until="first")
                steps = _step_times(run, how)
                if name == "plain":
                    plain = float(np.median([t for _, _, t, _, _ in steps]))
                elif name == "plain again":  # the same work as the first plain run, two runs later
                    nulls["plain"] += [t / at["plain"](x) for _, _, t, _, x in steps]
                if how is not SWITCH:  # what the later runs' steps are compared with
                    at[name] = _by_context(steps if how is PLAIN else [st for st in steps if st[:2] == (4, 4)])
                for k, before, t, t_draft, x in steps:
                    if how is OFF:
                        key = {(0, 0): "off", (0, 4): "off", (4, 0): "after_off", (4, 4): "steady4"}.get((k, before))
                        if key == "off":
                            off_at.append((t, x))
                        if key in ("after_off", "steady4"):
                            s[f"draft_{key}"].append(t_draft)
                    elif how is SWITCH:
                        key = {(2, 4): "after_switch", (2, 2): "steady2", (4, 4): "steady4"}.get((k, before))
                        if key == "steady4":  # the same work as OFF's k = 4 steps, two runs later
                            nulls["k4"].append(t / at["off"](x))
                        (switch if key == "after_switch" else steady2 if key == "steady2" else []).append(t)
                    else:
                        key = "plain"
                    if key:
                        s[key].append(t)
                if tick:
                    tick()
            r = per_repeat[b]
            if off_at and nulls["plain"] and nulls["k4"]:
                # each scheduled plain step against the plain runs either side of it, as far into the text
                r["off"].append(float(np.median([t / (0.5 * (at["plain"](x) + at["plain again"](x)))
                                                 for t, x in off_at])) - 1.0)
                r["null"].append(max(abs(float(np.median(v)) - 1.0) for v in nulls.values()))
            if switch and steady2:
                mid = float(np.median(steady2))
                r["switch"].append((switch[0] - mid) / plain)
                r["stray"].append(max(abs(t - mid) for t in steady2) / plain)
    out: dict[str, Any] = {"block": BLOCK, "batches": list(batches), "by_batch": {}}
    for b in batches:
        med = {k: float(np.median(v)) for k, v in samples[b].items() if v}
        r = per_repeat[b]
        if not set(kinds) <= set(med) or not r["off"] or not r["switch"]:
            continue
        off_noise, switch_noise = max(r["null"]), max(r["stray"])
        catchup_pred = (cost.pass_time_s(draft, b, BLOCK + 2, contexts[b])
                        - cost.pass_time_s(draft, b, 2, contexts[b]))
        out["by_batch"][str(b)] = {
            "plain_step_s": med["plain"], "scheduled_plain_step_s": med["off"],
            "off_fraction": float(np.median(r["off"])), "off_noise": off_noise,
            "off_priced": priced_over_noise(r["off"], off_noise),
            "off_fraction_by_repeat": r["off"], "noise_by_repeat": r["null"],
            "catchup_measured_s": med["draft_after_off"] - med["draft_steady4"], "catchup_predicted_s": catchup_pred,
            "switch_s": med["after_switch"] - med["steady2"],
            "switch_fraction": (med["after_switch"] - med["steady2"]) / med["plain"], "switch_noise": switch_noise,
            "switch_priced": priced_over_noise(r["switch"], switch_noise), "switch_fraction_by_repeat": r["switch"],
            "steps": {k: len(v) for k, v in samples[b].items()}}
    return out
