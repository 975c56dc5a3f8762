"""What specsim's own engine pays for speculation switched off, and for switching the draft length: measured, as a
serving engine's schedule would use them (`simulator.specs.SpeculationTax`).

Three runs per batch size, interleaved and repeated: plain decoding with no draft loaded; a schedule of six steps
at k = 4 then six plain steps (k = 0) with the draft loaded; six steps at k = 4 then six at k = 2. From their steps:

- the off-tax: a scheduled plain step over the step of the engine without speculation as far into the same text
  (the same context), minus one;
- the draft's catch-up: the drafting phase of the first k = 4 step after the plain ones over a steady k = 4 step's
  (the drafting phase alone: whole steps later in a run also read a longer context), against what the cost model
  prices for it (the draft re-reading the tokens it missed: a draft pass over lag + 2 tokens instead of 2),
  which is how the serving simulator charges it (``--draft-sync lazy``), so it is not counted again as a switch;
- the switch: the first k = 2 step after k = 4 steps over a steady k = 2 step, in units of a plain step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from simulator.cost import CostModel
from simulator.specs import ModelSpec

from .speculative import Decoding, RealEngine

BLOCK = 6
OFF = Decoding(k=4, schedule=(4,) * BLOCK + (0,) * BLOCK)
SWITCH = Decoding(k=4, schedule=(4,) * BLOCK + (2,) * BLOCK)


def _step_times(run: Any, how: Decoding) -> list[tuple[int, int, float, float, float]]:
    """(k of the step, k of the step before, its time, its drafting time, tokens emitted before it (the mean over
    the batch: how far into the text, so how long the context)) for every step that did not capture a graph."""
    before = np.concatenate([[0.0], np.cumsum([np.mean(s.accepted) + 1 for s in run.steps])])
    return [(how.k_at(i), how.k_at(i - 1) if i else -1, s.phases.total_s, s.phases.draft_s, float(before[i]))
            for i, s in enumerate(run.steps) if not s.captured]


def measure_tax(engine: RealEngine, prompts: Sequence[Sequence[int]], batches: Sequence[int], new_tokens: int,
                repeats: int, gen: torch.Generator, cost: CostModel, draft: ModelSpec,
                tick: Callable[[], None] | None = None) -> dict[str, Any]:
    kinds = ("plain", "off", "off_ratio", "after_off", "steady4", "after_switch", "steady2", "draft_after_off",
             "draft_steady4")
    samples: dict[int, dict[str, list[float]]] = {b: {k: [] for k in kinds} for b in batches}
    contexts: dict[int, int] = {}
    for _ in range(repeats):
        for b in batches:
            ps = [prompts[i % len(prompts)] for i in range(b)]
            contexts[b] = int(np.mean([len(p) for p in ps])) + new_tokens // 2
            s = samples[b]
            plain_at: Any = None  # the plain run's step time by how far into the text (the same prompts)
            for how in (Decoding(k=0), OFF, SWITCH):
                run = engine.generate(ps, new_tokens, how, gen, until="first")
                steps = _step_times(run, how)
                if how.k == 0:
                    xs, ts = [x for *_, x in steps], [t for _, _, t, _, _ in steps]
                    plain_at = lambda x, xs=xs, ts=ts: float(np.interp(x, xs, ts))  # noqa: E731
                for k, before, t, t_draft, x in steps:
                    if how is OFF:
                        key = {(0, 0): "off", (0, 4): "off", (4, 0): "after_off", (4, 4): "steady4"}.get((k, before))
                        if key == "off":  # against the plain run's step as far into the text (the same context)
                            s["off_ratio"].append(t / plain_at(x))
                        if key in ("after_off", "steady4"):
                            s[f"draft_{key}"].append(t_draft)
                    elif how is SWITCH:
                        key = {(2, 4): "after_switch", (2, 2): "steady2", (4, 4): "steady4"}.get((k, before))
                    else:
                        key = "plain"
                    if key:
                        s[key].append(t)
                if tick:
                    tick()
    out: dict[str, Any] = {"block": BLOCK, "batches": list(batches), "by_batch": {}}
    for b in batches:
        med = {k: float(np.median(v)) for k, v in samples[b].items() if v}
        if not set(kinds) <= set(med):
            continue
        catchup_pred = (cost.pass_time_s(draft, b, BLOCK + 2, contexts[b])
                        - cost.pass_time_s(draft, b, 2, contexts[b]))
        out["by_batch"][str(b)] = {
            "plain_step_s": med["plain"], "scheduled_plain_step_s": med["off"],
            "off_fraction": med["off_ratio"] - 1.0,
            "catchup_measured_s": med["draft_after_off"] - med["draft_steady4"], "catchup_predicted_s": catchup_pred,
            "switch_s": med["after_switch"] - med["steady2"],
            "switch_fraction": (med["after_switch"] - med["steady2"]) / med["plain"],
            "steps": {k: len(v) for k, v in samples[b].items()}}
    return out
