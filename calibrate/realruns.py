"""Real speculative decoding runs timed against plain decoding: configurations interleaved (in a seeded random order
per repeat) so that drift of a noisy machine hits all of them alike; medians and spreads over the repeats."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simulator.trees import Tree

from .speculative import Decoding, Engine


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


def _summary(xs: Sequence[float]) -> dict[str, float]:
    a = np.asarray(xs, dtype=float)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median": float(med), "iqr": float(q3 - q1), "min": float(a.min()), "max": float(a.max()),
            "n": int(a.size)}


def measure(engine: Engine, prompts: Sequence[Sequence[int]], configs: Sequence[Config], new_tokens: int,
            repeats: int, temperature: float = 1.0, seed: int = 0,
            tick: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Per configuration: the speed-up over plain decoding at the same batch (per repeat, then summarised), tokens
    per target pass, and per-step draft / verify / bookkeeping times."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    batches = sorted({c.batch for c in configs})
    plain = {b: Config(b) for b in batches}
    runs = list(dict.fromkeys(list(plain.values()) + list(configs)))
    samples: dict[Config, list[dict[str, float]]] = {c: [] for c in runs}
    offset = 0
    for _ in range(repeats):
        order = list(runs)
        rng.shuffle(order)
        chosen = {b: [prompts[(offset + i) % len(prompts)] for i in range(b)] for b in batches}
        offset += max(batches)
        for cfg in order:
            res = engine.generate(chosen[cfg.batch], new_tokens, cfg.decoding(temperature), gen, until="first")
            n_steps = len(res.steps)
            # Every emitted token counts (also past max_new_tokens): a continuously batched engine refills a
            # finished sequence's slot, so its throughput is the mean rate, not the slowest sequence's.
            emitted = sum(a + 1 for s in res.steps for a in s.accepted)
            samples[cfg].append({
                "emitted_per_s": emitted / res.decode_s,
                "decode_s": res.decode_s,
                "tokens_per_pass": res.tokens_per_pass,
                "step_s": res.decode_s / n_steps,
                "draft_s": sum(s.draft_s for s in res.steps) / n_steps,
                "verify_s": sum(s.verify_s for s in res.steps) / n_steps,
                "accept_s": sum(s.accept_s for s in res.steps) / n_steps,
                "steps": n_steps,
            })
            if tick:
                tick()
    out = []
    for cfg in configs:
        reps = samples[cfg]
        base = samples[plain[cfg.batch]]
        # Each repeat's speed-up uses the plain run of the same repeat (same prompts, same stretch of time):
        # emitted tokens per second, speculative over plain.
        speedups = [r["emitted_per_s"] / b["emitted_per_s"] for r, b in zip(reps, base)]
        out.append({
            "batch": cfg.batch, "k": cfg.k if cfg.tree is None else None,
            "tree": cfg.tree.label if cfg.tree is not None else None,
            "speedup": _summary(speedups),
            "tokens_per_pass": _summary([r["tokens_per_pass"] for r in reps]),
            "step_s": _summary([r["step_s"] for r in reps]),
            "draft_s": _summary([r["draft_s"] for r in reps]),
            "verify_s": _summary([r["verify_s"] for r in reps]),
            "accept_s": _summary([r["accept_s"] for r in reps]),
            "plain_step_s": _summary([b["step_s"] for b in base]),
            "tokens_per_s": _summary([r["emitted_per_s"] for r in reps]),
        })
    return out
