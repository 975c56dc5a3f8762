"""A real served stream: the real engine serving requests as they arrive, with continuous batching, on the wall clock.

The loop is the simulator's own scheduler (`simulator.scheduler.Scheduler`, the one `simulator.serving.Engine` runs
on simpy's clock) driven by real passes:

- requests arrive at their workload times and are submitted to the scheduler; between steps it admits the waiting
  ones first come, first served while a batch row, the KV cache (each request reserves its whole life plus the
  policy's lookahead: the simulator's ``reserve`` allocation) and the step's prompt budget allow;
- a step that admits requests is a prefill: one pass of the target (and of the draft, when the policy speculates)
  over the new prompts padded to the longest (on CUDA graphs, to a bucket, replayed), into the cache rows after
  the running batch's; it emits each one's first token (`RealEngine.join`);
- otherwise the running batch decodes one step: the policy chooses k (or a tree) from the scheduler's `BatchState`
  and the step costs the simulator gives it (every choice the stream can meet is made before the clock starts, so a
  step looks its choice up as a served policy table would: `Policy.warm`; cold, an adaptive choice evaluates the
  cost model, milliseconds a choice on a CPU, which a short stream's first run would otherwise spend on the clock);
  plain steps under a speculating policy also run the draft over the current token (the simulator's ``eager``
  draft sync); each sequence keeps at most the tokens it still needs;
- finished sequences leave and the last running rows move into their rows (`RealEngine.leave`); the scheduler takes
  the engine's new row order.

Timestamps are the wall clock (a GPU's step ends at its one host read), so everything the engine does between two
passes (the policy's choice, admission, the rows' moves) counts, as it does in a real server. With the built-in
pair the accept/reject rule decides which drafts are kept; with an acceptance model forced on the engine
(`RealEngine.force`: any pair, random weights allowed) the accepted lengths are replayed, everything else real.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator import SpecsimError
from simulator.policies import Policy
from simulator.scheduler import AcceptedHistogram, Scheduler, StepLog
from simulator.serving import EngineConfig, ServingRun
from simulator.step_costs import StepCosts
from simulator.sweep import Candidate
from simulator.workload import Workload

if TYPE_CHECKING:
    from engine.speculative import RealEngine

WARM_CONTEXT_STEP = 16  # tokens between the mean contexts at which a stream's decisions are made before it starts
# At most this long making them, batch by batch from one sequence up (a cold adaptive choice evaluates the cost model,
# 5-11 ms on a 2-core host: max batch 16 x 4 context cells takes about 0.5 s, max batch 256 x 60 cells would take
# minutes); a state left out is chosen cold in its step.
WARM_BUDGET_S = 5.0


@dataclass
class ServedStep:
    """One decode step as it ran, and what the simulator charges for the same step."""

    batch: int
    context_mean: float
    context_max: float
    candidate: Candidate  # what the policy chose
    previous: Candidate | None  # what the step before drafted
    tokens: int  # kept by the whole batch
    duration_s: float
    captured: bool  # a CUDA graph was captured during the step
    engine_s: float = float("nan")  # the engine's step alone (its phases: drafting, the passes, accept/reject)

    @property
    def loop_s(self) -> float:
        """The served loop's own work in the step, outside the engine's: the scheduler's view and the policy's
        look-up, keeping tokens, retiring and moving rows. Measured, not priced by the simulator."""
        return self.duration_s - self.engine_s

    def predicted_s(self, costs: StepCosts, policy: Policy) -> float:
        """The simulator's charge for this step; attention priced at the longest context (the engine pads to it)."""
        return costs.step_s(self.batch, self.context_max, self.candidate, self.previous,
                            "eager" if policy.uses_draft else None)


@dataclass
class ServedPrefill:
    requests: int
    tokens_per_request: int  # the longest prompt, padded as the pass runs (`RealEngine.prefill_length`)
    duration_s: float
    captured: bool = False  # a CUDA graph was captured during the prefill: not a steady-state time

    def predicted_s(self, costs: StepCosts, policy: Policy) -> float:
        return costs.prefill_s(self.requests, self.tokens_per_request, policy.uses_draft)


@dataclass
class Served:
    """A real served stream: the run in the simulator's terms (so one `summarize` reads both), its steps and
    prefills, and whether every request finished within the time cap."""

    run: ServingRun
    steps: list[ServedStep]
    prefills: list[ServedPrefill]
    held: bool
    wall_s: float
    tokens: list[list[int] | None]  # each request's output tokens (None: not finished within the time cap)

    @property
    def captures(self) -> int:
        return sum(s.captured for s in self.steps)


def served_scheduler(workload: Workload, policy: Policy, config: EngineConfig, kv_tokens: int) -> Scheduler:
    """The simulator's scheduler as the real engine runs it: whole-life KV reservations, the draft kept current."""
    return Scheduler(workload, policy, config.max_batch, config.max_prefill_tokens, kv_tokens,
                     config.lookahead(policy), on_demand=False, eager_draft=True)


def serve(engine: RealEngine, workload: Workload, prompts: Sequence[Sequence[int]], policy: Policy, costs: StepCosts,
          config: EngineConfig, kv_tokens: int, temperature: float, seed: int, time_cap_s: float,
          tick: Callable[[int], Any] | None = None) -> Served:
    """Serve `workload` (request i's prompt is `prompts[i]`) on the real engine as the module docstring says, until
    every request has finished or `time_cap_s` has passed since the last one arrived (then `held` is False and the
    unfinished requests have no times: the queue outgrew the engine). The cap counts from the last arrival so that
    a light load spread over a long trace is served, not cut off. `tick(n)` is told of n requests finished."""
    import torch

    from engine.rejection import TreeTables
    from engine.speculative import Decoding

    n = len(workload)
    if len(prompts) != n:
        raise SpecsimError(f"{len(prompts)} prompts for {n} requests")
    costs = costs.for_policy(policy)
    uses_draft = policy.uses_draft
    sched = served_scheduler(workload, policy, config, kv_tokens)
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    batch = engine.open_batch(config.max_batch, uses_draft)
    tables: dict[str, Any] = {}
    arrival = workload.arrival_s.tolist()
    outputs = workload.output_tokens.tolist()
    first_s, finish_s = np.full(n, np.nan), np.full(n, np.nan)
    tokens: list[list[int] | None] = [None] * n
    steps: list[ServedStep] = []
    prefills: list[ServedPrefill] = []
    log = StepLog()
    accepted = AcceptedHistogram()
    arrived = 0
    waiting_at_last_arrival = -1
    deadline_s = arrival[-1] + time_cap_s if n else time_cap_s
    if n:  # every decision the stream can meet, made before the clock starts (`Policy.warm`), within a budget
        lo = int(workload.prompt_tokens.min())
        hi = int((workload.prompt_tokens + workload.output_tokens).max()) + policy.lookahead_tokens
        contexts = range(lo, hi + WARM_CONTEXT_STEP, WARM_CONTEXT_STEP)
        until = time.perf_counter() + WARM_BUDGET_S
        for b in range(1, config.max_batch + 1):
            if time.perf_counter() > until:
                break
            policy.warm(costs, [b], contexts)
    t0 = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - t0

    def retire(end: float) -> None:
        done = sched.finished()
        if not done.any():
            return
        rows = np.flatnonzero(done)
        for r in rows:
            req = int(sched.request[r])
            tokens[req] = batch.out[r][:outputs[req]]
        order = engine.leave(batch, rows.tolist())
        finish_s[sched.retire(done, order)] = end
        if tick:
            tick(len(rows))

    with torch.inference_mode():
        while np.isnan(finish_s).any():
            now = clock()
            if now > deadline_s:
                break
            while arrived < n and arrival[arrived] <= now:
                sched.submit(arrived)
                arrived += 1
                if arrived == n:
                    waiting_at_last_arrival = len(sched.waiting)
            if not sched.outstanding:
                time.sleep(max(0.0, min(arrival[arrived] - now, deadline_s - now)))
                continue
            admission = sched.admit() if sched.waiting else None
            if admission is not None:
                reqs = admission.requests
                start, captures = now, engine.runner.captures
                engine.join(batch, [prompts[r] for r in reqs], uses_draft, temperature, gen)
                end = clock()
                sched.join(admission)
                prefills.append(ServedPrefill(len(reqs), engine.prefill_length(max(len(prompts[r]) for r in reqs)),
                                              end - start, engine.runner.captures != captures))
                first_s[reqs] = end
                retire(end)
                continue
            start = now
            state = sched.state()
            context_max = float(sched.context.max())
            cand = policy.choose(state, costs)
            if cand.tree is not None and cand.tree.label not in tables:
                tables[cand.tree.label] = TreeTables(cand.tree, engine.device)
            how = Decoding(k=cand.k or 0, tree=cand.tree, temperature=temperature)
            record = engine.step(batch, how, gen, tables.get(cand.tree.label) if cand.tree is not None else None,
                                 draft_current=uses_draft)
            kept = np.minimum(np.asarray(record.accepted, dtype=np.int64) + 1, sched.remaining)
            sched.keep(kept)
            previous = sched.last_cand
            sched.drafted(cand)
            retire(clock())
            end = clock()
            duration = end - start
            steps.append(ServedStep(state.batch, state.context_mean, context_max, cand, previous, int(kept.sum()),
                                    duration, record.captured, record.phases.total_s))
            log.add(np.array([end]), np.array([duration]), np.array([state.context_mean]), np.array([int(kept.sum())]),
                    state.batch, cand.shape.n_nodes)
            if not cand.is_plain:
                accepted.add(cand, np.asarray(record.accepted))
    wall = clock()
    held = not np.isnan(finish_s).any()
    run = ServingRun(workload=workload, policy=policy.label, engines=1, router="least-loaded",
                     first_token_s=first_s, finish_s=finish_s, engine_of=np.zeros(n, dtype=np.int64),
                     **log.columns(),
                     prefill_duration_s=np.array([p.duration_s for p in prefills]), accepted_hist=accepted.counts,
                     waiting_at_last_arrival=max(waiting_at_last_arrival, 0) if arrived == n else n,
                     kv_capacity_tokens=kv_tokens, step_totals=log.totals())
    return Served(run, steps, prefills, held, wall, tokens)
