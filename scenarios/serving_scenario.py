"""A serving scenario from the CLI's options: the requests (synthetic, resampled from a length trace, or a timed
request trace), the engine's limits, the SLO, and the cost of every step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scenarios.traces import load_lengths, load_request_trace
from simulator import SpecsimError
from simulator.acceptance import Acceptance
from simulator.capacity import Scenario, rate_sweep
from simulator.cost import CostModel
from simulator.drafts import Draft, as_draft
from simulator.executors import parse_executor
from simulator.metrics import SLO, ServingMetrics
from simulator.policies import Policy, parse_policies
from simulator.serving import EngineConfig, ServingRun, engine_kv_tokens
from simulator.specs import ModelSpec
from simulator.step_costs import StepCosts
from simulator.workload import parse_lengths, resampled, synthetic


@dataclass(frozen=True)
class ServingOptions:
    """What `simulate`, `plan` and `plot tpot` take besides the setup and the rates (see their --help)."""

    policy_text: str = "off,fixed:4,adaptive"
    n_requests: int = 2000
    arrivals: str = "poisson"  # poisson, gamma:CV or trace:FILE
    prompt_tokens: str = "512"
    output_tokens: str = "128"
    lengths_from: Path | None = None
    max_batch: int = 256
    max_prefill_tokens: int = 8192
    draft_sync: str = "lazy"
    kv_allocation: str = "reserve"  # or "on-demand" (simulator.serving)
    router: str = "least-loaded"  # how a fleet spreads requests over its engines
    slo_tpot_s: float | None = None
    slo_ttft_s: float | None = None
    seed: int = 0
    step_by_step: bool = False  # the simulator's reference mode (one simpy event per decode step)
    executor: str = "local"  # where independent simulations run (simulator.executors.parse_executor)

    def __post_init__(self) -> None:
        parse_executor(self.executor)  # a bad --executor is refused before any work

    @property
    def timed_trace(self) -> bool:
        """The requests carry their own arrival times (no rate to scale)."""
        return self.arrivals.startswith("trace:")


def build_scenario(cost: CostModel, target: ModelSpec, draft: Draft | ModelSpec, acceptance: Acceptance,
                   o: ServingOptions) -> tuple[Scenario, list[Policy]]:
    """The scenario and the policies to run in it; a workload that cannot fit the KV cache under any of the
    policies is refused here, before any simulation (and any progress bar) starts."""
    limit = as_draft(draft)
    policies = parse_policies(o.policy_text, acceptance, limit.max_depth if limit else None,
                              limit.name if limit else "the draft")
    rng = np.random.default_rng(np.random.SeedSequence(o.seed).spawn(1)[0])
    if o.timed_trace:
        workload = load_request_trace(o.arrivals[len("trace:"):]).head(o.n_requests)
    elif o.lengths_from is not None:
        prompts, outputs = load_lengths(o.lengths_from)
        workload = resampled(o.arrivals, o.n_requests, prompts, outputs, rng, Path(o.lengths_from).name)
    else:
        workload = synthetic(o.arrivals, o.n_requests, parse_lengths(o.prompt_tokens, "--prompt-tokens"),
                             parse_lengths(o.output_tokens, "--output-tokens"), rng)
    config = EngineConfig(max_batch=o.max_batch, max_prefill_tokens=o.max_prefill_tokens, draft_sync=o.draft_sync,
                          bulk=not o.step_by_step, kv_allocation=o.kv_allocation)
    costs = StepCosts(cost, target, draft, proposal_rate=acceptance.proposal_rate)
    # the commands report metrics and accepted-length histograms only: no per-step record (a million requests'
    # tens of millions of steps would take gigabytes)
    scenario = Scenario(workload, costs, acceptance, config, o.seed, SLO(o.slo_tpot_s, o.slo_ttft_s),
                        keep_steps=False)
    for policy in policies:
        engine_kv_tokens(workload, scenario.costs, policy, config)
    return scenario, policies


def simulate_rates(scenario: Scenario, policies: Sequence[Policy], rates: Sequence[float] | None, engines: int,
                   router: str, timed_trace: bool, progress: Callable[[str, int], Any],
                   executor: str = "serial") -> list[tuple[ServingRun, ServingMetrics]]:
    """Every policy at every rate (a timed trace: at its own clock), with a progress bar over the simulations."""
    if timed_trace and rates:
        raise SpecsimError("a trace keeps its own arrival times: drop --rate (or use --arrivals poisson with "
                           "--lengths-from FILE)")
    grid: list[float | None] = [None] if timed_trace else list(rates or [1, 2, 4, 8, 16, 32, 64])
    with progress("simulating", len(grid) * len(policies)) as bar:
        return rate_sweep(scenario, policies, grid, engines, router, tick=lambda: bar.update(1),
                          executor=parse_executor(executor))
