"""Serving-engine presets (`scenarios/engines.toml`): what an engine pays around the GPU's passes, per step, per
pass, per draft kind and per version, with the published points each was fitted to and the range they span.

A preset's table:

    version, source, fitted_on, fit_gpus, fit_batch, fit_kinds   what it describes and where it was fitted
    step_overhead_us          a plain decoding step's engine work (what an overlap scheduler leaves unhidden)
    spec_step_overhead_us     a speculative step's instead (default: the plain step's): the host work a step pays
                              when the engine cannot overlap it with the device (SGLang's overlap scheduler is off
                              for speculation before its spec v2)
    pass_overhead_us, layer_overhead_us   every forward pass, every decoder layer of every pass
    draft_pass_us             around each draft pass of a kind without its own entry
    accept_overhead_us        every speculative step: the rejection sampler and the KV-cache roll-back
    tree_overhead_us          a tree's step on top (its mask, the tree walk, cache compaction)
    [NAME.draft.KIND]         per draft kind: pass_us / pass_per_sequence_us around each draft pass (launches, the
                              proposer's own work, sampling over the draft vocabulary), step_us /
                              step_per_sequence_us once per speculative step (preparing the proposer's inputs, the
                              head's catch-up over the accepted tokens; step_us may be below zero, down to minus the
                              speculative step's common cost, for a kind that costs less than the others)

and the speculation tax and all-reduce latency keys `scenarios.load_speculation_tax` and `load_hardware` read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator import SpecsimError
from simulator.specs import DraftKindCost, EngineOverheads, Overheads, PerStep

MICRO = 1e-6
KIND_KEYS = {"pass_us", "pass_per_sequence_us", "step_us", "step_per_sequence_us", "source"}


@dataclass(frozen=True)
class EnginePreset:
    """An engine preset as data: its costs (`overheads`, with `EngineOverheads` inside) and what it describes."""

    name: str
    version: str
    overheads: Overheads
    source: str
    fitted_on: tuple[str, ...] = ()  # published sources (scenarios/published/) the costs were fitted to
    fit_gpus: tuple[str, ...] = ()  # hardware presets of those points
    fit_batch: tuple[int, int] | None = None  # the smallest and largest batch (or concurrency) among them
    fit_kinds: tuple[str, ...] = ()  # draft kinds among them
    kind_sources: tuple[tuple[str, str], ...] = ()  # (kind, source) of each per-kind entry

    @property
    def label(self) -> str:
        """The header's words: name, version and what it was fitted to."""
        version = f" {self.version}" if self.version else ""
        fitted = f", fitted to {', '.join(self.fitted_on)}" if self.fitted_on else ""
        return f"{self.name}{version} preset{fitted}"

    def outside(self, hardware: str | None = None, kind: str | None = None,
                batches: tuple[int, ...] = ()) -> list[str]:
        """Where a prediction leaves the range this preset was fitted on, in words (empty: inside it)."""
        out = []
        if not self.fitted_on:
            return ["any published measurement (the preset is not fitted to the corpus: its source says where its "
                    "costs come from)"]
        if hardware and self.fit_gpus and hardware not in self.fit_gpus:
            out.append(f"{hardware} (fitted on {', '.join(self.fit_gpus)})")
        if kind and kind not in ("model",) + self.fit_kinds and self.fit_kinds:
            out.append(f"a {kind} draft (fitted on {', '.join(self.fit_kinds)})")
        if batches and self.fit_batch and (min(batches) < self.fit_batch[0] or max(batches) > self.fit_batch[1]):
            out.append(f"batch {min(batches)}..{max(batches)} (fitted on {self.fit_batch[0]}..{self.fit_batch[1]})")
        return out


def _number(d: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecsimError(f"engine preset {where!r}: {key} = {v!r} must be a finite number >= 0")
    return float(v)


def _kinds(d: dict[str, Any], where: str, spec_step_us: float
           ) -> tuple[tuple[DraftKindCost, ...], tuple[tuple[str, str], ...]]:
    table = d.get("draft", {})
    if not isinstance(table, dict):
        raise SpecsimError(f"engine preset {where!r}: [{where}.draft] must hold one table per draft kind")
    from simulator.drafts import DRAFT_KINDS

    costs, sources = [], []
    for kind, k in table.items():
        if kind not in DRAFT_KINDS:
            raise SpecsimError(f"engine preset {where!r}: draft kind {kind!r} is not one of {', '.join(DRAFT_KINDS)}")
        if not isinstance(k, dict):
            raise SpecsimError(f"engine preset {where!r}: [{where}.draft.{kind}] must be a table")
        unknown = sorted(set(k) - KIND_KEYS)
        if unknown:
            raise SpecsimError(f"engine preset {where!r}: draft.{kind}.{unknown[0]} is not one of "
                               f"{', '.join(sorted(KIND_KEYS))}")
        w = f"{where}.draft.{kind}"
        step = k.get("step_us", 0)
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
            raise SpecsimError(f"engine preset {w!r}: step_us = {step!r} must be a finite number")
        if step < 0 and -step > spec_step_us:
            raise SpecsimError(f"engine preset {w!r}: step_us = {step!r} may be below zero (a kind whose step costs "
                               f"less than the engine's common speculative step) but not below "
                               f"-spec_step_overhead_us ({-spec_step_us:g})")
        costs.append(DraftKindCost(kind, PerStep(_number(k, "pass_us", w, 0) * MICRO,
                                                 _number(k, "pass_per_sequence_us", w, 0) * MICRO),
                                   PerStep(float(step) * MICRO, _number(k, "step_per_sequence_us", w, 0) * MICRO)))
        sources.append((kind, str(k.get("source", ""))))
    return tuple(costs), tuple(sources)


def engine_preset(name: str, d: dict[str, Any]) -> EnginePreset:
    """A preset from its table (engines.toml's `[name]`); a bad value is a one-line error naming it."""
    step = _number(d, "step_overhead_us", name)
    spec_step = _number(d, "spec_step_overhead_us", name, step)
    accept = _number(d, "accept_overhead_us", name)
    tree = _number(d, "tree_overhead_us", name, 0)
    kinds, kind_sources = _kinds(d, name, spec_step + accept)
    # the serving engines of the presets pack each sequence's own rows into a step (vLLM's and SGLang's flattened
    # token batches): a sequence with no proposal verifies one token
    engine = EngineOverheads(plain=PerStep(step * MICRO), verify=PerStep(spec_step * MICRO),
                             draft=PerStep(_number(d, "draft_pass_us", name, 0) * MICRO),
                             chain_accept=PerStep(accept * MICRO), tree_accept=PerStep((accept + tree) * MICRO),
                             ragged_verify=True, kinds=kinds)
    passes = Overheads(pass_s=_number(d, "pass_overhead_us", name) * MICRO,
                       layer_s=_number(d, "layer_overhead_us", name) * MICRO, engine=engine)
    batch = d.get("fit_batch")
    if batch is not None and (not isinstance(batch, list) or len(batch) != 2 or not all(
            isinstance(b, int) and b >= 1 for b in batch) or batch[0] > batch[1]):
        raise SpecsimError(f"engine preset {name!r}: fit_batch = {batch!r} must be [smallest, largest]")
    return EnginePreset(name, str(d.get("version", "")), passes, str(d.get("source", "")),
                        tuple(str(s) for s in d.get("fitted_on", [])), tuple(str(g) for g in d.get("fit_gpus", [])),
                        (int(batch[0]), int(batch[1])) if batch else None,
                        tuple(str(k) for k in d.get("fit_kinds", [])), kind_sources)
