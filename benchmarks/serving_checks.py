"""The serving simulator's acceptance checks, with their spread over seeds (figures for the closing note).

    python benchmarks/serving_checks.py static    # simulator vs analytic tokens/s on a static batch
    python benchmarks/serving_checks.py load      # TPOT under Poisson load: off, fixed:4, adaptive

Setup: H100 preset, Llama-3.1-8B drafted by Llama-3.2-1B, prompts 512, outputs 128 tokens.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from scenarios import load_hardware, load_model
from simulator.acceptance_parse import parse_acceptance
from simulator.cost import CostModel
from simulator.metrics import decode_tokens_per_s, summarize
from simulator.policies import parse_policies, parse_policy
from simulator.serving import EngineConfig, simulate
from simulator.step_costs import StepCosts
from simulator.sweep import Candidate, step_time
from simulator.workload import parse_lengths, static_batch, synthetic

COST = CostModel.from_hardware(load_hardware("h100-sxm"))
TARGET, DRAFT = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")


def static(seeds: int) -> None:
    print("static batch, fixed:4: simulator tokens/s over full-batch steps vs B E[A+1] / T_step(B, mean context)")
    print(f"{'acceptance':<28} {'B':>3} {'tokens':>8} {'mean err':>9} {'max |err|':>9}  (over {seeds} seeds)")
    for spec, tokens in (("iid:0.7", 120_000), ("markov:0.95,0.3,0.05,0.15", 120_000),
                         ("markov:0.95,0.3,0.05,0.15", 400_000)):
        acc = parse_acceptance(spec)
        for batch in (1, 8, 64):
            errs = []
            for seed in range(seeds):
                run = simulate(static_batch(batch, 512, tokens // batch), StepCosts(COST, TARGET, DRAFT),
                               parse_policy("fixed:4", acc), acc, np.random.default_rng(seed),
                               EngineConfig(max_batch=batch, kv_capacity_tokens=10**7))
                full = run.step_batch == batch
                c = float(run.step_context[full].mean())
                analytic = batch * acc.expected_tokens(4) / step_time(COST, TARGET, DRAFT, batch, c,
                                                                      Candidate(4)).total_s
                errs.append(decode_tokens_per_s(run, batch) / analytic - 1)
            print(f"{spec:<28} {batch:>3} {tokens:>8,} {100 * statistics.mean(errs):>+8.2f}% "
                  f"{100 * max(abs(e) for e in errs):>8.2f}%")


def load(seeds: int, requests: int) -> None:
    acc = parse_acceptance("iid:0.7")
    policies = parse_policies("off,fixed:4,adaptive", acc)
    rates = [5, 10, 20, 30, 35, 40, 45, 50, 55]
    costs = StepCosts(COST, TARGET, DRAFT)
    tpot: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for seed in range(seeds):
        base = synthetic("poisson", requests, parse_lengths("512"), parse_lengths("128"),
                         np.random.default_rng(1000 + seed))
        for rate in rates:
            for p in policies:
                m = summarize(simulate(base.at_rate(rate), costs, p, acc, np.random.default_rng(seed)),
                              rate_per_s=rate)
                tpot.setdefault((p.label, rate), []).append((1e3 * m.tpot_s[0], 1e3 * m.tpot_s[2]))
    print(f"TPOT (ms) under Poisson load, {requests} requests, mean ± std over {seeds} seeds (workload and draws)")
    print(f"{'rate':>5} " + " ".join(f"{p.label + ' p50':>17} {p.label + ' p99':>17}" for p in policies)
          + f" {'adaptive - better p50':>22} {'p99':>14}")
    for rate in rates:
        cells = []
        for p in policies:
            for i in (0, 1):
                xs = [v[i] for v in tpot[(p.label, rate)]]
                cells.append(f"{statistics.mean(xs):>9.2f} ± {statistics.stdev(xs):>5.2f}")
        diffs = []
        for i in (0, 1):
            better = min(("off", "fixed:4"), key=lambda lab: statistics.mean(v[i] for v in tpot[(lab, rate)]))
            d = [a[i] - b[i] for a, b in zip(tpot[("adaptive", rate)], tpot[(better, rate)])]
            diffs.append(f"{statistics.mean(d):>+7.2f} ± {statistics.stdev(d):>4.2f} ({better})")
        print(f"{rate:>5} " + " ".join(cells) + " " + " ".join(diffs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["static", "load"])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=4000)
    args = ap.parse_args()
    static(args.seeds) if args.check == "static" else load(args.seeds, args.requests)


if __name__ == "__main__":
    main()
