"""Capacity planning: serving metrics over request rates, the highest rate that meets an SLO, engines for a load.

Every simulation of one plan uses the same requests (a unit-rate workload scaled to each rate) and the same seed for
acceptance draws, so differences between rates and policies are not sampling noise between workloads (common random
numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import SpecsimError
from .acceptance import Acceptance
from .executors import Executor, Serial, chunks
from .limits import MAX_ENGINES, WHY_ENGINES
from .metrics import SLO, ServingMetrics, summarize
from .policies import Policy
from .serving import EngineConfig, ServingRun, simulate
from .step_costs import StepCosts
from .workload import Workload

Tick = Callable[[], None]


@dataclass(frozen=True)
class Scenario:
    """Everything a simulation needs besides the policy and the rate."""

    workload: Workload  # drawn at unit rate (a trace keeps its own clock: rate None)
    costs: StepCosts
    acceptance: Acceptance
    config: EngineConfig = EngineConfig()
    seed: int = 0
    slo: SLO = SLO()
    keep_steps: bool = True  # False: the runs keep no per-step record, only what `summarize` reads (flat memory)

    def run(self, policy: Policy, rate_per_s: float | None, engines: int = 1,
            router: str = "least-loaded") -> tuple[ServingRun, ServingMetrics]:
        workload = self.workload if rate_per_s is None else self.workload.at_rate(rate_per_s)
        run = simulate(workload, self.costs, policy, self.acceptance, np.random.default_rng(self.seed), self.config,
                       engines, router, keep_steps=self.keep_steps)
        return run, summarize(run, self.slo, rate_per_s)


def run_jobs(job: tuple[Scenario, Policy, Sequence[float | None], int, str, bool]) -> list[Any]:
    """One policy at several rates in one scenario (scenario, policy, rates, engines, router, metrics only): what an
    executor runs. A task of several rates reuses the step-time and policy caches it builds at the first."""
    scenario, policy, rates, engines, router, metrics_only = job
    out = [scenario.run(policy, rate, engines, router) for rate in rates]
    return [m for _, m in out] if metrics_only else out


def sweep_tasks(scenario: Scenario, policies: Sequence[Policy], rates: Sequence[float | None], slots: int,
                engines: int = 1, router: str = "least-loaded", metrics_only: bool = False) -> list[tuple]:
    """The tasks of a rate sweep: per policy, the rates cut into enough chunks to keep `slots` workers busy (about
    two tasks per worker), each chunk one task."""
    parts = max(1, -(-2 * slots // max(len(policies), 1)))
    return [(scenario, p, [rates[i] for i in part], engines, router, metrics_only)
            for p in policies for part in chunks(len(rates), parts)]


def rate_sweep(scenario: Scenario, policies: Sequence[Policy], rates: Sequence[float | None], engines: int = 1,
               router: str = "least-loaded", tick: Tick | None = None,
               executor: Executor | None = None) -> list[tuple[ServingRun, ServingMetrics]]:
    """Every policy at every rate, in rate-major order; the simulations are independent and run by `executor`
    (serial by default) with the same results whatever runs them."""
    executor = executor or Serial()
    tasks = sweep_tasks(scenario, policies, rates, executor.slots, engines, router)
    done = executor.map(run_jobs, tasks, (lambda i: [tick() for _ in tasks[i][2]]) if tick else None)
    by = {(t[1].label, rate): r for t, rs in zip(tasks, done) for rate, r in zip(t[2], rs)}
    return [by[(p.label, rate)] for rate in rates for p in policies]


def meets(m: ServingMetrics, attainment: float) -> bool:
    """A run meets the SLO when the rate is sustained and at least `attainment` of requests meet every limit."""
    return m.sustained and m.slo_attainment >= attainment


@dataclass(frozen=True)
class MaxRate:
    policy: str
    rate_per_s: float  # highest rate found to meet the SLO (0 if even the lowest tried does not)
    metrics: ServingMetrics | None  # at that rate
    failed_rate_per_s: float  # lowest rate found not to meet it
    simulations: int


def max_rate(scenario: Scenario, policy: Policy, attainment: float = 0.9, start_rate: float = 1.0,
             rel_tol: float = 0.02, max_doublings: int = 16, tick: Tick | None = None) -> MaxRate:
    """The highest request rate (per engine) at which `policy` meets the scenario's SLO: double from `start_rate`
    until it fails (halve while it fails), then bisect to `rel_tol`. Assumes attainment falls with the rate."""
    if scenario.slo.tpot_s is None and scenario.slo.ttft_s is None:
        raise SpecsimError("a capacity plan needs an SLO: give --slo-tpot-ms and/or --slo-ttft-ms")
    if not 0 < attainment <= 1:
        raise SpecsimError(f"SLO attainment must be in (0, 1], got {attainment}")
    n = 0

    def check(rate: float) -> ServingMetrics:
        nonlocal n
        n += 1
        m = scenario.run(policy, rate)[1]
        if tick:
            tick()
        return m

    lo, lo_m, hi = 0.0, None, math.inf
    rate = start_rate
    for _ in range(max_doublings):
        m = check(rate)
        if meets(m, attainment):
            lo, lo_m = rate, m
            if hi < math.inf:
                break
            rate *= 2
        else:
            hi = rate
            if lo > 0:
                break
            rate /= 2
    if hi == math.inf or lo == 0:
        return MaxRate(policy.label, lo, lo_m, hi, n)
    while hi - lo > rel_tol * lo:
        mid = (lo + hi) / 2
        m = check(mid)
        if meets(m, attainment):
            lo, lo_m = mid, m
        else:
            hi = mid
    return MaxRate(policy.label, lo, lo_m, hi, n)


@dataclass(frozen=True)
class FleetPlan:
    policy: str
    load_per_s: float
    engines: int  # engines found to meet the SLO at the load (simulated as a fleet)
    estimate: int  # ceil(load / per-engine max rate)
    metrics: ServingMetrics | None


def engines_for_load(scenario: Scenario, policy: Policy, load_per_s: float, per_engine: MaxRate,
                     attainment: float = 0.9, router: str = "least-loaded", max_extra: int = 4,
                     tick: Tick | None = None) -> FleetPlan:
    """Fleet size for `load_per_s`: start from load / per-engine capacity, simulate the fleet behind the router, and
    add engines until it meets the SLO (a fleet pools its queues, so it may need fewer; it is never shrunk below the
    estimate minus one)."""
    if not load_per_s > 0:
        raise SpecsimError(f"the load must be > 0 requests/s, got {load_per_s:g}")
    if per_engine.rate_per_s <= 0:
        return FleetPlan(policy.label, load_per_s, 0, 0, None)
    estimate = max(1, math.ceil(load_per_s / per_engine.rate_per_s - 1e-9))
    if estimate > MAX_ENGINES:  # no fleet simulation: too many engines (the plan says so)
        return FleetPlan(policy.label, load_per_s, 0, estimate, None)
    n = max(1, estimate - 1)
    last = None
    while n <= estimate + max_extra:
        m = scenario.run(policy, load_per_s, engines=n, router=router)[1]
        if tick:
            tick()
        last = m
        if meets(m, attainment):
            return FleetPlan(policy.label, load_per_s, n, estimate, m)
        n += 1
    return FleetPlan(policy.label, load_per_s, 0, estimate, last)


def check_load(scenario: Scenario, policies: Sequence[Policy], load_per_s: float) -> None:
    """Refuse, before any simulation, a load no fleet of MAX_ENGINES engines could carry even if every step were the
    cheapest step there is (one sequence, no context) and emitted every drafted token for a full batch."""
    costs, w = scenario.costs, scenario.workload
    fastest_step_s = costs.cost.plain_step_s(costs.target, 1, 0)
    tokens_per_step = max(c.shape.verify_tokens for p in policies for c in p.candidates)
    per_engine = scenario.config.max_batch * tokens_per_step / fastest_step_s / float(np.mean(w.output_tokens))
    if load_per_s > MAX_ENGINES * per_engine:
        raise SpecsimError(f"--load-rps {load_per_s:g} needs more than {MAX_ENGINES:,} engines even at the fastest "
                           f"step ({per_engine:,.0f} req/s per engine at most): {WHY_ENGINES}")


def _plan_one(job: tuple[Scenario, Policy, float, float | None, str]) -> tuple[MaxRate, FleetPlan | None]:
    scenario, policy, attainment, load_per_s, router = job
    cap = max_rate(scenario, policy, attainment)
    return cap, engines_for_load(scenario, policy, load_per_s, cap, attainment, router) if load_per_s else None


def capacity_plan(scenario: Scenario, policies: Sequence[Policy], attainment: float, load_per_s: float | None,
                  router: str, progress: Callable[[str, int], Any],
                  executor: Executor | None = None) -> tuple[list[MaxRate], list[FleetPlan]]:
    """Per policy: the highest rate one engine sustains within the SLO, and (given a load) the fleet it needs; the
    policies' searches are independent and run by `executor` (serial by default). `progress(label, total)` gives a
    context manager with ``update(n)``, ticked once per policy searched."""
    if load_per_s:
        check_load(scenario, policies, load_per_s)
    if scenario.slo.tpot_s is None and scenario.slo.ttft_s is None:
        raise SpecsimError("a capacity plan needs an SLO: give --slo-tpot-ms and/or --slo-ttft-ms")
    with progress("searching rates (one search per policy)", len(policies)) as bar:
        done = (executor or Serial()).map(_plan_one, [(scenario, p, attainment, load_per_s, router)
                                                      for p in policies], lambda _: bar.update(1))
    return [cap for cap, _ in done], [fleet for _, fleet in done if fleet is not None]
