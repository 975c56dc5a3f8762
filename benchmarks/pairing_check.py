"""How steady a measured speed-up is when each speculative run and its plain pair are decoded in turns, step by step,
against the two run back to back (what CUDA graphs still do).

    python benchmarks/pairing_check.py [--blocks 6] [--repeats 4] [--tokens 48] [--configs 1:4,4:1,8:4]
    python benchmarks/pairing_check.py --profile tinyllama.json --acceptance trace:FILE:eagle --configs 1:1,8:4

The built-in pair on this machine's CPU, eager, configurations batch:k measured by `calibrate.paired_runs.measure` as
`specsim validate` measures them (each run at least four held-out prompts); with `--profile` (a calibration at a
preset's or config.json's shapes) random-weight models of its shapes on random prompts of 128 tokens, acceptance
replayed from `--acceptance`, as `specsim validate --acceptance` runs them. Blocks alternate the two ways,
`--repeats` pairs per configuration each, so both see the same hour of a shared machine. Reports per way: the spread
of the step-cost ratio (plain step over speculative step) within a block (interquartile range over median, median
over blocks and configurations), how much each configuration's median speed-up and mean cost ratio move from block
to block (coefficient of variation), and the mean levels, which should agree between the ways (a difference there
would be a bias of the pairing, not noise).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from calibrate.paired_runs import Config, MeasuredConfig, measure
from calibrate.validate import MIN_SEQUENCES
from engine.builtin import encode, load_pair, prompts
from engine.model import build_decoder
from engine.speculative import RealEngine
from scenarios.profile import load_profile
from scenarios.setup import resolve_acceptance
from simulator import SpecsimError

WAYS = ("in turns", "back to back")


class BackToBack:
    """The eager runner reporting itself as a graph runner, so `measure` runs each pair back to back."""

    mode = "graph"

    def __init__(self, runner):
        self.runner = runner

    @property
    def captures(self) -> int:
        return self.runner.captures

    def __call__(self, *args):
        return self.runner(*args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--configs", default="1:4,4:1,8:4", help="batch:k, comma separated")
    ap.add_argument("--profile", help="a calibration at a preset's shapes (default: the built-in pair)")
    ap.add_argument("--acceptance", help="with --profile: the acceptance to replay (trace:FILE[:eagle], iid:A, ...)")
    args = ap.parse_args()
    configs = [Config(*map(int, c.split(":"))) for c in args.configs.split(",")]
    span = max(c.k for c in configs) + 12
    if args.profile:
        if not args.acceptance:
            ap.error("--profile needs --acceptance (random weights accept nothing of each other)")
        try:
            profile = load_profile(args.profile)
            acceptance = resolve_acceptance(args.acceptance, profile)
        except SpecsimError as e:
            ap.error(str(e))
        rng = np.random.default_rng(0)
        held = [rng.integers(0, profile.target.vocab_size, 128).tolist() for _ in range(64)]
        engine = RealEngine(build_decoder(profile.target, 128 + args.tokens + span, "cpu", seed=0),
                            build_decoder(profile.draft, 128 + args.tokens + span, "cpu", seed=1))
        engine.force(acceptance, seed=0)
    else:
        held = [encode(p) for p in prompts("heldout")]
        longest = max(map(len, held)) + args.tokens + span
        engine = RealEngine(*load_pair(expanded=True, dtype="fp32", max_seq_len=longest))
    eager = engine.runner
    rows: dict[str, list[MeasuredConfig]] = {w: [] for w in WAYS}
    for block in range(args.blocks):
        for way in WAYS:
            engine.runner = eager if way == "in turns" else BackToBack(eager)
            measured = measure(engine, held, configs, args.tokens, args.repeats, seed=block,
                               min_sequences=MIN_SEQUENCES)
            rows[way] += measured
            print(f"block {block + 1}/{args.blocks} {way:>12}: " + ", ".join(
                f"B={r.batch} k={r.k} cost ratio {r.cost_ratio.median:.3f} ±{r.cost_ratio.spread:.3f}"
                for r in measured), flush=True)
    print(f"\n{torch.get_num_threads()} torch threads; {args.blocks} blocks x {args.repeats} pairs per configuration")
    for way in WAYS:
        within = np.median([r.cost_ratio.spread for r in rows[way]])
        print(f"{way}: cost ratio IQR / median within a block, median {100 * within:.1f} %")
        for cfg in configs:
            mine = [r for r in rows[way] if (r.batch, r.k) == (cfg.batch, cfg.k)]
            speedups = np.array([r.speedup.median for r in mine])
            ratios = np.array([r.cost_ratio.median for r in mine])
            moves = (lambda x: f"{100 * x.std(ddof=1) / x.mean():.1f} %") if len(mine) > 1 else (lambda x: "-")
            print(f"  B={cfg.batch} k={cfg.k}: speed-up {np.median(speedups):.3f} (moves {moves(speedups)} block to "
                  f"block), cost ratio {ratios.mean():.3f} (moves {moves(ratios)})")


if __name__ == "__main__":
    main()
