"""Simulator speed and agreement: 100,000 requests through one engine at every rate from light load to past
saturation, advanced in bulk (the default) and step by step (the reference), and the analytic sweep of `predict`.

    python benchmarks/bench_simulate.py [--requests 100000] [--repeats 5] [--reference-repeats 3]
                                        [--rates 1,2,5,10,20,30,40,60] [--policy adaptive]

The issue's scenario: H100 preset (vLLM's per-step costs), Llama-3.1-8B drafted by Llama-3.2-1B, iid 0.7, Poisson
arrivals, prompts 512 and outputs 128 tokens. Each repeat is another seed (workload and draws), so the spread of a
percentile over repeats is the seed-to-seed spread the two modes are compared against. Reports per rate: wall
seconds of the bulk run (median [min, max]), the decode steps simulated, the mean batch, and TPOT p50/p90/p99 and
TTFT p50/p99 of both modes (mean over seeds), with the difference in units of the seed-to-seed standard deviation.
Then the predict sweep (256 batches x 17 k x 3 trees): compute seconds, median [min, max] of 5.

Not part of the test suite: the machine is shared, so a time is a measurement to report, never an assertion.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_predict import CASES, compute_once  # noqa: E402

from scenarios import load_hardware, load_model  # noqa: E402
from simulator.acceptance_parse import parse_acceptance  # noqa: E402
from simulator.cost import CostModel  # noqa: E402
from simulator.metrics import summarize  # noqa: E402
from simulator.policies import parse_policy  # noqa: E402
from simulator.serving import EngineConfig, simulate  # noqa: E402
from simulator.step_costs import StepCosts  # noqa: E402
from simulator.workload import parse_lengths, synthetic  # noqa: E402

STATS = ("TPOT p50", "TPOT p90", "TPOT p99", "TTFT p50", "TTFT p99")


def one_run(rate: float, seed: int, n: int, policy_text: str, bulk: bool) -> tuple[float, np.ndarray, int, float]:
    """(wall seconds, the five latency statistics in ms, decode steps, time-weighted mean batch)."""
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    target, draft = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    acc = parse_acceptance("iid:0.7")
    workload = synthetic("poisson", n, parse_lengths("512"), parse_lengths("128"),
                         np.random.default_rng(seed)).at_rate(rate)
    costs = StepCosts(cost, target, draft)  # a fresh cache each run: warming it counts
    t0 = time.perf_counter()
    run = simulate(workload, costs, parse_policy(policy_text, acc), acc, np.random.default_rng(1000 + seed),
                   EngineConfig(bulk=bulk))
    wall = time.perf_counter() - t0
    m = summarize(run)
    stats = 1e3 * np.array([*m.tpot_s, m.ttft_s[0], m.ttft_s[2]])
    mean_batch = float((run.step_batch * run.step_duration_s).sum() / run.step_duration_s.sum())
    return wall, stats, len(run.step_batch), mean_batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5, help="bulk runs per rate (seeds 0, 1, ...)")
    ap.add_argument("--reference-repeats", type=int, default=3, help="step-by-step runs per rate (0: skip)")
    ap.add_argument("--rates", default="1,2,5,10,20,30,40,60")
    ap.add_argument("--policy", default="adaptive")
    args = ap.parse_args()
    print(f"{args.requests:,} requests per run, policy {args.policy}; bulk x{args.repeats}, "
          f"step-by-step x{args.reference_repeats} (seeds 0..)", flush=True)
    print(f"{'rate':>5} {'bulk wall s':>22} {'ref wall s':>10} {'steps':>10} {'batch':>6}  "
          + "  ".join(f"{s + ' bulk/ref (z)':>26}" for s in STATS), flush=True)
    for rate in (float(r) for r in args.rates.split(",")):
        bulk = [one_run(rate, s, args.requests, args.policy, True) for s in range(args.repeats)]
        ref = [one_run(rate, s, args.requests, args.policy, False) for s in range(args.reference_repeats)]
        walls = [b[0] for b in bulk]
        b_stats, r_stats = np.array([b[1] for b in bulk]), np.array([r[1] for r in ref])
        cells = []
        for j in range(len(STATS)):
            if len(ref) >= 2 and len(bulk) >= 2:
                spread = np.sqrt((b_stats[:, j].var(ddof=1) + r_stats[:, j].var(ddof=1)) / 2) + 1e-12
                z = (b_stats[:, j].mean() - r_stats[:, j].mean()) / spread
                cells.append(f"{b_stats[:, j].mean():>9.2f}/{r_stats[:, j].mean():<9.2f} ({z:+.2f})")
            else:
                cells.append(f"{b_stats[:, j].mean():>9.2f}/{'-':<9} {'':>7}")
        ref_wall = f"{statistics.median([r[0] for r in ref]):.1f}" if ref else "-"
        print(f"{rate:>5g} {statistics.median(walls):>8.2f} [{min(walls):.2f}, {max(walls):.2f}] {ref_wall:>10} "
              f"{bulk[0][2]:>10,} {bulk[0][3]:>6.1f}  " + "  ".join(f"{c:>26}" for c in cells), flush=True)
    print("z: (bulk mean - reference mean) / seed-to-seed standard deviation of one run")
    for name, (spec, trees) in CASES.items():
        xs = [compute_once(spec, trees) for _ in range(5)]
        print(f"predict sweep, {name}: compute {statistics.median(xs):.3f} s median [{min(xs):.3f}, {max(xs):.3f}] "
              "(256 batches x 17 k" + (f" x {len(trees)} trees)" if trees else ")"))


if __name__ == "__main__":
    main()
