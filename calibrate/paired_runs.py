"""Real speculative decoding runs timed against plain decoding: each run paired with a plain run on the same prompts,
the two decoded in turns step by step (or, with CUDA graphs, back to back in counterbalanced order), configurations
in a seeded random order per repeat, so that drift of a noisy machine cancels in each speed-up; medians and spreads
over the repeats."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.speculative import Decoding, RealEngine
from simulator import SpecsimError
from simulator.trees import Tree
from simulator.validation import MeasuredConfig, Summary, ratio_standard_error


@dataclass(frozen=True)
class Config:
    batch: int
    k: int = 0
    tree: Tree | None = None
    drafter: str = "model"  # engine.speculative.DRAFTERS

    @property
    def label(self) -> str:
        what = f"tree {self.tree.label}" if self.tree is not None else f"k={self.k}"
        return f"B={self.batch} {what}"

    def decoding(self, temperature: float) -> Decoding:
        return Decoding(k=self.k, tree=self.tree, temperature=temperature, drafter=self.drafter)


def measure(engine: RealEngine, prompts: Sequence[Sequence[int]], configs: Sequence[Config], new_tokens: int,
            repeats: int, temperature: float = 1.0, seed: int = 0, tick: Callable[[], None] | None = None,
            min_sequences: int = 1) -> list[MeasuredConfig]:
    """Every configuration `repeats` times, each run paired with a plain run at its batch on the same prompts,
    configurations in a shuffled order per repeat. A speed-up is the ratio of the two: on a shared machine whose speed
    moves by 10-20 % over a minute, unpaired runs far apart in time measured that drift, not the speed-up (two passes
    alternated hold their ratio within 1-2 % while each moves by 4-7 %). With eager passes the pair is decoded in
    turns, step by step (`RealEngine.generate_in_turns`), so that both runs sample the same seconds of the machine;
    with CUDA graphs (one cache per captured graph) the two run back to back, which goes first alternating repeat by
    repeat, and a first untimed round captures the shapes (steps that still capture later are left out). A run at
    batch B decodes ceil(min_sequences / B) groups of B prompts, so that small batches are measured over as many
    prompts as large ones (acceptance varies from prompt to prompt)."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    batches = sorted({c.batch for c in configs})
    plain = {b: Config(b) for b in batches}
    specs = list(dict.fromkeys(c for c in configs if c != plain[c.batch]))
    groups = {b: -(-min_sequences // b) for b in batches}
    per_repeat = max(b * groups[b] for b in batches)
    in_turns = pairing(engine) == "in turns"
    if not in_turns:
        for cfg in list(plain.values()) + specs:
            engine.generate([prompts[i % len(prompts)] for i in range(cfg.batch)], new_tokens,
                            cfg.decoding(temperature), gen, until="first")

    def summary(groups_steps: list[list[Any]], b: int) -> dict[str, float] | None:
        """One run's figures from its groups' steps."""
        rows = [as_served_rows(g) for g in groups_steps]
        seq_tokens = [float(x) for t, _ in rows for x in t]
        seq_passes = [float(x) for _, n in rows for x in n]
        counted = np.array([sum(seq_tokens), sum(seq_passes)])
        timed = [s for g in groups_steps for s in g if not s.captured]  # a capturing step is not steady state
        if not timed:
            return None
        n_steps, decode_s = len(timed), sum(s.phases.total_s for s in timed)
        tokens_per_pass = float(counted[0] / counted[1])
        return {
            # A continuously batched engine refills a finished sequence's row, so a row's throughput is its
            # requests' tokens per pass as a server counts them (`as_served`), at this run's step time.
            "emitted_per_s": b * tokens_per_pass / (decode_s / n_steps),
            "tokens_per_pass": tokens_per_pass,
            "tokens": float(counted[0]), "passes": float(counted[1]),
            "seq_tokens": seq_tokens, "seq_passes": seq_passes,  # per sequence, as counted
            "step_s": decode_s / n_steps,
            "draft_s": sum(s.phases.draft_s for s in timed) / n_steps,
            "verify_s": sum(s.phases.verify_s for s in timed) / n_steps,
            "accept_s": sum(s.phases.accept_s for s in timed) / n_steps,
        }

    def run_pair(first: Config, second: Config, base: int) -> tuple[dict[str, float] | None, ...]:
        b = first.batch
        steps: tuple[list[list[Any]], list[list[Any]]] = ([], [])
        for g in range(groups[b]):
            chosen = [prompts[(base + g * b + i) % len(prompts)] for i in range(b)]
            hows = [first.decoding(temperature), second.decoding(temperature)]
            if in_turns:
                runs = engine.generate_in_turns(chosen, new_tokens, hows, gen)
            else:
                runs = [engine.generate(chosen, new_tokens, how, gen, until="first") for how in hows]
            for mine, run in zip(steps, runs):
                mine.append(run.steps)
        if tick:
            tick()
            tick()
        return summary(steps[0], b), summary(steps[1], b)

    pairs: dict[Config, list[tuple[dict[str, float], dict[str, float]]]] = {c: [] for c in specs}
    for r in range(repeats):
        order = list(specs)
        rng.shuffle(order)
        for cfg in order:  # each configuration alternates which of its pair goes first, repeat by repeat
            first, second = (plain[cfg.batch], cfg) if (r + specs.index(cfg)) % 2 == 0 else (cfg, plain[cfg.batch])
            a, b = run_pair(first, second, r * per_repeat)
            if a is not None and b is not None:
                pairs[cfg].append((b, a) if first is plain[cfg.batch] else (a, b))
    out = []
    for cfg in configs:
        if cfg == plain[cfg.batch]:
            continue
        if not pairs[cfg]:
            raise SpecsimError(f"{cfg.label}: every step of a run captured a graph; generate more tokens per run")
        reps, base = [r for r, _ in pairs[cfg]], [b for _, b in pairs[cfg]]
        # Each repeat's speed-up: emitted tokens per second, speculative over its paired plain run.
        out.append(MeasuredConfig(
            batch=cfg.batch, k=cfg.k if cfg.tree is None else None,
            tree=cfg.tree.label if cfg.tree is not None else None,
            speedup=Summary.of([r["emitted_per_s"] / b["emitted_per_s"] for r, b in zip(reps, base)]),
            tokens_per_pass=Summary.of([r["tokens_per_pass"] for r in reps]),
            step_s=Summary.of([r["step_s"] for r in reps]), draft_s=Summary.of([r["draft_s"] for r in reps]),
            verify_s=Summary.of([r["verify_s"] for r in reps]), accept_s=Summary.of([r["accept_s"] for r in reps]),
            plain_step_s=Summary.of([b["step_s"] for b in base]),
            tokens_per_s=Summary.of([r["emitted_per_s"] for r in reps]),
            cost_ratio=Summary.of([b["step_s"] / r["step_s"] for r, b in zip(reps, base)]),
            pooled_tokens_per_pass=sum(r["tokens"] for r in reps) / sum(r["passes"] for r in reps),
            tokens_per_pass_se=se if np.isfinite(se := ratio_standard_error(
                [t for r in reps for t in r["seq_tokens"]], [n for r in reps for n in r["seq_passes"]])) else None,
        ))
    return out


def as_served(steps: Sequence[Any]) -> np.ndarray:
    """`as_served_rows` summed: (tokens, passes) of one batch decoded together."""
    tokens, needed = as_served_rows(steps)
    return np.array([tokens.sum(), needed.sum()], dtype=float)


def as_served_rows(steps: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence of one batch decoded together, (tokens, passes) counted as a server's rows would count them: each
    sequence up to the first step at which it has emitted as many tokens as the batch's slowest one did in the run.

    A batch run until its first sequence is done gives every sequence the same number of steps, so its plain tokens
    per pass weighs a hard sequence (low acceptance) like an easy one. In a server a request's length does not depend
    on its acceptance: a hard one holds its row for more steps and weighs more (`simulator.acceptance`'s models pool
    their steps that way). Cutting every sequence at the same number of tokens gives each the steps it needed for
    them, the count of requests of equal length. (On the built-in pair's calibration prompts, per-sequence tokens per
    pass averaged alike are 1.5 % above the pooled count at k = 4 and 2.9 % at k = 6. Simulated with every sequence's
    alpha ~ Beta(12, 3.35), 8 a batch, 48 tokens: alike +3.6 / +6.5 % at k = 4 / 6, this count +0.6 / +1.6 %, the
    last step's overshoot in requests this short.)"""
    if not steps:
        return np.zeros(0), np.zeros(0)
    emitted = np.cumsum([[a + 1 for a in s.accepted] for s in steps], axis=0)  # (steps, sequences)
    reach = emitted[-1].min()
    needed = (emitted < reach).sum(axis=0) + 1  # steps each sequence took to emit `reach` tokens
    tokens = emitted[needed - 1, np.arange(emitted.shape[1])]
    return tokens.astype(float), needed.astype(float)


def pairing(engine: RealEngine) -> str:
    """How `measure` decodes a pair on this engine: "in turns" (eager passes) or "back to back" (CUDA graphs)."""
    return "back to back" if engine.runner.mode == "graph" else "in turns"


def runs_per_repeat(configs: Sequence[Config]) -> int:
    """Runs `measure` makes per repeat: each speculative configuration and its paired plain run."""
    return 2 * len({c for c in configs if c.k or c.tree is not None})
