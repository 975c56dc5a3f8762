"""Real speculative decoding runs timed against plain decoding: configurations interleaved (in a seeded random order
per repeat) so that drift of a noisy machine hits all of them alike; medians and spreads over the repeats."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from simulator import SpecsimError
from simulator.trees import Tree

from .speculative import Decoding, RealEngine


@dataclass(frozen=True)
class Config:
    batch: int
    k: int = 0
    tree: Tree | None = None

    @property
    def label(self) -> str:
        what = f"tree {self.tree.label}" if self.tree is not None else f"k={self.k}"
        return f"B={self.batch} {what}"

    def decoding(self, temperature: float) -> Decoding:
        return Decoding(k=self.k, tree=self.tree, temperature=temperature)


@dataclass(frozen=True)
class Summary:
    """A measured quantity over repeats: median, interquartile range, extremes, count."""

    median: float
    iqr: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Summary:
        a = np.asarray(xs, dtype=float)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(q3 - q1), float(a.min()), float(a.max()), int(a.size))

    @property
    def spread(self) -> float:
        """Interquartile range over median."""
        return self.iqr / self.median if self.median else 0.0


@dataclass(frozen=True)
class MeasuredConfig:
    """One configuration's real runs: speed-up over plain decoding at the same batch (per repeat, then
    summarised), tokens per target pass, and the per-step phases."""

    batch: int
    k: int | None
    tree: str | None
    speedup: Summary
    tokens_per_pass: Summary
    step_s: Summary
    draft_s: Summary
    verify_s: Summary
    accept_s: Summary
    plain_step_s: Summary
    tokens_per_s: Summary

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(engine: RealEngine, prompts: Sequence[Sequence[int]], configs: Sequence[Config], new_tokens: int,
            repeats: int, temperature: float = 1.0, seed: int = 0, tick: Callable[[], None] | None = None,
            min_sequences: int = 1) -> list[MeasuredConfig]:
    """Every configuration and the plain run at each batch, `repeats` times in a shuffled order per repeat. A run at
    batch B decodes ceil(min_sequences / B) groups of B prompts one after the other, so that small batches are
    measured over as many prompts as large ones (acceptance varies from prompt to prompt). With CUDA graphs, a
    first untimed round captures the shapes (steps that still capture later are left out)."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    batches = sorted({c.batch for c in configs})
    plain = {b: Config(b) for b in batches}
    runs = list(dict.fromkeys(list(plain.values()) + list(configs)))
    samples: dict[Config, list[dict[str, float]]] = {c: [] for c in runs}
    groups = {b: -(-min_sequences // b) for b in batches}
    per_repeat = max(b * groups[b] for b in batches)
    if engine.runner.mode == "graph":
        for cfg in runs:
            engine.generate([prompts[i % len(prompts)] for i in range(cfg.batch)], new_tokens,
                            cfg.decoding(temperature), gen, until="first")
    for r in range(repeats):
        order = list(runs)
        rng.shuffle(order)
        base = r * per_repeat
        for cfg in order:
            b = cfg.batch
            steps = []
            for g in range(groups[b]):
                chosen = [prompts[(base + g * b + i) % len(prompts)] for i in range(b)]
                res = engine.generate(chosen, new_tokens, cfg.decoding(temperature), gen, until="first")
                steps += res.steps
            timed = [s for s in steps if not s.captured]  # a step that captured a CUDA graph is not steady state
            if not timed:
                continue
            n_steps, decode_s = len(timed), sum(s.phases.total_s for s in timed)
            samples[cfg].append({
                # Every emitted token counts (also past max_new_tokens): a continuously batched engine refills a
                # finished sequence's slot, so its throughput is the mean rate, not the slowest sequence's.
                "emitted_per_s": sum(a + 1 for s in timed for a in s.accepted) / decode_s,
                "tokens_per_pass": (sum(a + 1 for s in steps for a in s.accepted)
                                    / sum(len(s.accepted) for s in steps)),
                "step_s": decode_s / n_steps,
                "draft_s": sum(s.phases.draft_s for s in timed) / n_steps,
                "verify_s": sum(s.phases.verify_s for s in timed) / n_steps,
                "accept_s": sum(s.phases.accept_s for s in timed) / n_steps,
            })
            if tick:
                tick()
    out = []
    for cfg in configs:
        reps, base = samples[cfg], samples[plain[cfg.batch]]
        if len(reps) != len(base) or not reps:
            raise SpecsimError(f"{cfg.label}: every step of a run captured a graph; generate more tokens per run")
        # Each repeat's speed-up uses the plain run of the same repeat (same prompts, same stretch of time):
        # emitted tokens per second, speculative over plain.
        out.append(MeasuredConfig(
            batch=cfg.batch, k=cfg.k if cfg.tree is None else None,
            tree=cfg.tree.label if cfg.tree is not None else None,
            speedup=Summary.of([r["emitted_per_s"] / b["emitted_per_s"] for r, b in zip(reps, base)]),
            tokens_per_pass=Summary.of([r["tokens_per_pass"] for r in reps]),
            step_s=Summary.of([r["step_s"] for r in reps]), draft_s=Summary.of([r["draft_s"] for r in reps]),
            verify_s=Summary.of([r["verify_s"] for r in reps]), accept_s=Summary.of([r["accept_s"] for r in reps]),
            plain_step_s=Summary.of([b["step_s"] for b in base]),
            tokens_per_s=Summary.of([r["emitted_per_s"] for r in reps]),
        ))
    return out
