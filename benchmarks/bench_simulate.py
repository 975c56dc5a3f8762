"""Simulator speed: 100,000 requests through one engine (H100 preset, Llama-3.1-8B drafted by Llama-3.2-1B,
iid 0.7, prompts 512, outputs 128 tokens) at light, medium and heavy load, each policy; median of repeats.

    python benchmarks/bench_simulate.py [--requests 100000] [--repeats 3]

Reports wall-clock seconds per run, requests/s and decode steps/s simulated. Not part of the test suite: the
machine is shared, so a time is a measurement to report, never an assertion.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from scenarios import load_hardware, load_model
from simulator.acceptance import parse_acceptance
from simulator.cost import CostModel
from simulator.policies import parse_policies
from simulator.serving import StepCosts, simulate
from simulator.workload import parse_lengths, synthetic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rates", default="10,30,45")
    ap.add_argument("--policies", default="off,fixed:4,adaptive")
    args = ap.parse_args()
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    target, draft = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    acc = parse_acceptance("iid:0.7")
    base = synthetic("poisson", args.requests, parse_lengths("512"), parse_lengths("128"), np.random.default_rng(0))
    print(f"{'rate':>5} {'policy':<10} {'wall s (median [min, max])':>28} {'requests/s':>11} {'steps/s':>9} "
          f"{'steps':>8} {'mean batch':>10}")
    for rate in (float(r) for r in args.rates.split(",")):
        for policy in parse_policies(args.policies, acc):
            walls = []
            for _ in range(args.repeats):
                costs = StepCosts(cost, target, draft)  # a fresh cache each time: the cost of warming it counts
                t0 = time.perf_counter()
                run = simulate(base.at_rate(rate), costs, policy, acc, np.random.default_rng(1))
                walls.append(time.perf_counter() - t0)
            med = statistics.median(walls)
            steps = len(run.step_batch)
            mean_batch = float((run.step_batch * run.step_duration_s).sum() / run.step_duration_s.sum())
            print(f"{rate:>5g} {policy.label:<10} {med:>10.2f} [{min(walls):.2f}, {max(walls):.2f}]{'':>7} "
                  f"{args.requests / med:>11,.0f} {steps / med:>9,.0f} {steps:>8,} {mean_batch:>10.1f}")


if __name__ == "__main__":
    main()
