"""How each engine effect moves the answer to "above which batch (or load) should speculation be off?".

    python benchmarks/engine_effects.py [--requests 3000] [--seeds 3]

One realistic scenario: Llama-3.1-8B drafted by Llama-3.2-1B on an H100 (gpt-fast's per-step costs as the
tax-free base), per-position acceptance 0.844, 0.599, 0.385, 0.271 (the report in SGLang #22246 / vLLM #47602's
thread), prompts uniform in 512..1,536 and outputs in 64..448 tokens (mean 1,024 and 256). Effects, one at a time
and all together:

- lookahead slots: every running request holds k + 1 KV slots and k + 1 tokens of the step's budget;
- off-tax: a step at k = 0 in an engine started with speculation costs 6 % more (vLLM #49548 at low concurrency);
- switching: a step that changes k pays 14 % of a plain step (the same issue, single-stream);
- context: acceptance falls to 0.7x at 8k tokens of context (the shape of vLLM #47602).

Reports (1) the analytic table's "k = 0 from batch N" and "an engine without speculation is faster above batch N",
(2) the simulated serving crossover: the lowest rate at which adaptive's TPOT p50 is no better than off's, and the
largest gap between adaptive and off (positive: adaptive slower) over the rates, mean and spread over seeds, and
(3) the largest static batch that fits a small KV cache with and without lookahead slots, and the preemptions
on-demand allocation makes there.

`--fixed-lengths` uses prompts of exactly 1,024 and outputs of exactly 256 tokens instead. Past saturation that
workload runs in synchronised waves (a full batch admitted together, decoded together, finished together, so no
prefill ever lands in a decode step) as long as every step emits one token per sequence; any speculation staggers
the finishes, prefills then interleave, and TPOT rises by a third for reasons that have nothing to do with the step
cost. It is how the previous version of this benchmark came to report adaptive 38 % worse than off.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from scenarios import load_hardware, load_model
from simulator.acceptance_parse import parse_acceptance
from simulator.cost import CostModel
from simulator.metrics import summarize
from simulator.policies import parse_policy
from simulator.serving import EngineConfig, simulate
from simulator.serving_report import policy_table
from simulator.specs import SpeculationTax
from simulator.step_costs import StepCosts
from simulator.sweep import chains, sweep
from simulator.workload import parse_lengths, static_batch, synthetic

ACCEPTANCE = "positional:0.844,0.599,0.385,0.271"
DECAY = "@context:1024=1,8192=0.7"
TAX = SpeculationTax((1, 256), (0.06, 0.06), 0.0, "6 % off-tax (vLLM #49548, concurrency 2)")
SWITCH = SpeculationTax((), (), 0.14, "14 % per switch of k (vLLM #49548)")
BOTH = SpeculationTax((1, 256), (0.06, 0.06), 0.14, "both")
RATES = (2, 5, 10, 20, 30, 40, 50, 60)


def cost_with(tax: SpeculationTax) -> CostModel:
    hw = load_hardware("h100-sxm", "gpt-fast")
    return CostModel.from_hardware(replace(hw, speculation_tax=tax))


def table_answers(tax: SpeculationTax, spec: str, context: int = 1280) -> tuple[int | None, int | None]:
    target, draft = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    result = sweep(cost_with(tax), target, draft, parse_acceptance(spec), list(range(1, 257)), chains(range(5)),
                   [context])
    table = policy_table(result, tax)
    off = next((c.batch for c in table if c.k == 0), None)
    slower = next((c.batch for c in table if c.speedup < 1.0), None)
    return off, slower


def serving(tax: SpeculationTax, spec: str, seeds: int, n: int, prompts: str, outputs: str
            ) -> tuple[float | None, float, float]:
    """(lowest rate where adaptive's TPOT p50 >= off's, mean over seeds; the largest mean relative gap adaptive vs
    off over the rates; the seed spread (max - min) of the gap at that rate)."""
    target, draft = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    costs = StepCosts(cost_with(tax), target, draft)
    acc = parse_acceptance(spec)
    crossovers, gaps = [], np.zeros((seeds, len(RATES)))
    for seed in range(seeds):
        base = synthetic("poisson", n, parse_lengths(prompts), parse_lengths(outputs), np.random.default_rng(seed))
        cross = None
        for j, rate in enumerate(RATES):
            tpot = {}
            for p in ("off", "adaptive:4"):
                run = simulate(base.at_rate(rate), costs, parse_policy(p, acc), acc, np.random.default_rng(100 + seed))
                tpot[p] = summarize(run).tpot_s[0]
            gaps[seed, j] = tpot["adaptive:4"] / tpot["off"] - 1
            if cross is None and tpot["adaptive:4"] >= tpot["off"]:
                cross = rate
        crossovers.append(cross if cross is not None else np.inf)
    worst = int(np.argmax(gaps.mean(axis=0)))
    return float(np.mean(crossovers)), float(gaps[:, worst].mean()), float(np.ptp(gaps[:, worst]))


def kv_effects() -> tuple[int, int, int]:
    """Largest batch running at once in a 48k-token cache (prompt 1,024, output 256, fixed:4), with and without
    lookahead slots; preemptions of on-demand allocation at rate 40 in a 24k-token cache."""
    target, draft = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    costs = StepCosts(cost_with(SpeculationTax()), target, draft)
    acc = parse_acceptance(ACCEPTANCE)
    fixed = parse_policy("fixed:4", acc)
    batch = {}
    for slots in (True, False):
        run = simulate(static_batch(64, 1024, 256), costs, fixed, acc, np.random.default_rng(0),
                       EngineConfig(kv_capacity_tokens=48 * 1280, lookahead_slots=slots))
        batch[slots] = int(run.step_batch.max())
    work = synthetic("poisson", 2000, parse_lengths("1024"), parse_lengths("256"), np.random.default_rng(0))
    run = simulate(work.at_rate(40), costs, fixed, acc, np.random.default_rng(1),
                   EngineConfig(kv_capacity_tokens=24_000, kv_allocation="on-demand"))
    return batch[True], batch[False], run.preemptions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--fixed-lengths", action="store_true", help="prompts of 1,024 and outputs of 256 tokens exactly")
    args = ap.parse_args()
    lengths = ("1024", "256") if args.fixed_lengths else ("512..1536", "64..448")
    cases = [("none (tax-free engine)", SpeculationTax(), ACCEPTANCE), ("off-tax 6 %", TAX, ACCEPTANCE),
             ("switch 14 %", SWITCH, ACCEPTANCE), ("context decay", SpeculationTax(), ACCEPTANCE + DECAY),
             ("all together", BOTH, ACCEPTANCE + DECAY)]
    print(f"{'effect':<24} {'k = 0 from batch':>17} {'plain engine faster above':>26} "
          f"{'serving crossover req/s':>24} {'worst adaptive vs off [seed spread]':>36}")
    for name, tax, spec in cases:
        off, slower = table_answers(tax, spec)
        cross, gap, spread = serving(tax, spec, args.seeds, args.requests, *lengths)
        print(f"{name:<24} {off if off else '-':>17} {slower - 1 if slower else '-':>26} {cross:>24.1f} "
              f"{100 * gap:>+26.1f} % [{100 * spread:.1f} %]", flush=True)
    with_slots, without, preempted = kv_effects()
    print(f"static batch running at once in a 61,440-token cache: {with_slots} with lookahead slots, {without} without;"
          f" on-demand allocation in a 24,000-token cache at 40 req/s: {preempted} preemptions")


if __name__ == "__main__":
    main()
