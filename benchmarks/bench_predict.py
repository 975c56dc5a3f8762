"""Benchmark of the predict sweep (outside the test suite): median of 5 runs, whole process and compute alone.

    python benchmarks/bench_predict.py

Sweeps --batch 1..256 --k 0..16 with three tree shapes under ranks acceptance, and the same chain sweep under markov.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from scenarios import load_hardware, load_model
from simulator.acceptance_parse import parse_acceptance
from simulator.cost import CostModel
from simulator.sweep import Candidate, sweep
from simulator.trees import parse_branching

TREES = ["4,2,2,1", "2,2,2,2,1", "8,4,2"]
CASES = {
    "ranks + 3 trees": ("ranks:0.6,0.15,0.05,0.02", TREES),
    "markov chains": ("markov:0.9,0.3,0.1,0.3", []),
}


def compute_once(spec: str, trees: list[str]) -> float:
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    acceptance = parse_acceptance(spec)
    cands = [Candidate(k) for k in range(17)] + [Candidate(None, parse_branching(t)) for t in trees]
    t0 = time.perf_counter()
    sweep(cost, load_model("llama-3.1-8b"), load_model("llama-3.2-1b"), acceptance, list(range(1, 257)), cands,
          [1024])
    return time.perf_counter() - t0


def process_once(spec: str, trees: list[str]) -> float:
    args = [sys.executable, "-m", "specsim", "predict", "--hardware", "h100-sxm", "--acceptance", spec,
            "--batch", "1..256", "--k", "0..16", "--json"]
    for t in trees:
        args += ["--tree", t]
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    for name, (spec, trees) in CASES.items():
        compute = [compute_once(spec, trees) for _ in range(5)]
        process = [process_once(spec, trees) for _ in range(5)]
        for label, xs in (("compute", compute), ("process", process)):
            print(f"{name:18s} {label}: median {statistics.median(xs):.3f} s  "
                  f"(min {min(xs):.3f}, max {max(xs):.3f}, n=5)")


if __name__ == "__main__":
    main()
