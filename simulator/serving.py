"""A serving engine under load: a simpy discrete-event simulation of continuous batching with speculation.

Scenario: requests arrive (Poisson, bursty gamma gaps, or a trace) at a fleet of identical engines behind a router
(round-robin, or least-loaded: the fewest requests waiting or running). Each engine runs one step at a time:

- **admission and prefill**: while requests wait, a free batch slot exists and the KV cache has room for the head
  request's whole life (prompt + output + the policy's largest draft), requests are admitted first come, first
  served, up to ``max_prefill_tokens`` prompt tokens per step; a step that admits requests is a prefill step (the
  target over the new prompts, and the draft too under eager sync) and it emits each request's first token.
  Reserving the whole life up front means no preemption; vLLM allocates pages on demand and preempts instead.
- **decode**: otherwise the running batch decodes one step: the policy picks k (or a tree) for this batch, the step
  takes the cost model's time for this batch size and the batch's contexts, and each sequence draws its accepted
  length from its own acceptance process and emits A + 1 tokens (never more than it still needs).
- **the draft's cache** (``draft_sync``): ``lazy`` (default) - the draft sees a token only when it next drafts: a
  prefill runs the target alone, and a speculative step first runs the draft once over every token its sequences'
  caches miss (new prompts, tokens from plain steps), so a policy that turns speculation off also stops paying for the
  draft. ``eager`` - the draft is kept current every step, as vLLM's draft-model path does: prefills run both models
  and plain steps under a speculating policy run a one-token draft pass too.

A pass's context terms (each sequence's KV-cache reads, its attention FLOPs) are sums over the sequences of a
function linear in that sequence's context, so the batch's mean context prices a batch of mixed contexts exactly;
``StepCosts`` evaluates the cost model on a grid of mean contexts and interpolates linearly between grid points.

Simultaneous events: requests that arrive at the same instant are handed to the router together, before any engine
reacts; an engine that finishes a step at the instant a request arrives sees it at its next scheduling decision if
the arrival was scheduled first (simpy runs equal-time events in scheduling order), which a fixed seed reproduces.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from . import SpecsimError
from .acceptance import Acceptance
from .cost import CostModel
from .policies import BatchState, Policy, StepDurations
from .sampling import BatchSampler, batch_sampler
from .specs import ModelSpec
from .sweep import Candidate, step_time
from .workload import Workload

ROUTERS = ("least-loaded", "round-robin")
DRAFT_SYNC = ("lazy", "eager")


class StepCosts(StepDurations):
    """Durations of decode and prefill steps from the cost model, cached for the simulator's inner loop.

    Decode steps are evaluated at mean contexts on a grid of ``context_step`` tokens and interpolated linearly;
    prefill steps at the mean prompt length rounded up to ``prompt_step`` tokens."""

    def __init__(self, cost: CostModel, target: ModelSpec, draft: ModelSpec | None, context_step: int = 32,
                 prompt_step: int = 16) -> None:
        self.cost, self.target, self.draft = cost, target, draft
        self.context_step, self.prompt_step = context_step, prompt_step
        self._decode: dict[tuple[int, str, int], float] = {}  # (batch, candidate label, context grid index)
        self._prefill: dict[tuple[int, int, bool], float] = {}
        self._sync: dict[tuple[int, int, int], float] = {}

    def _grid(self, batch: int, candidate: Candidate, i: int) -> float:
        key = (batch, candidate.label, i)
        t = self._decode.get(key)
        if t is None:
            t = self._decode[key] = step_time(self.cost, self.target, self.draft, batch, i * self.context_step,
                                              candidate).total_s
        return t

    def decode_s(self, batch: int, context_mean: float, candidate: Candidate) -> float:
        i, rest = divmod(context_mean, self.context_step)
        t0 = self._grid(batch, candidate, int(i))
        if rest == 0:
            return t0
        return t0 + (self._grid(batch, candidate, int(i) + 1) - t0) * rest / self.context_step

    def draft_sync_s(self, batch: int, tokens_mean: float, context_mean: float) -> float:
        """One draft pass over `tokens_mean` tokens per sequence that the draft's caches miss."""
        tokens = max(1, math.ceil(tokens_mean))
        key = (batch, tokens, int(context_mean // self.context_step))
        t = self._sync.get(key)
        if t is None:
            assert self.draft is not None
            t = self._sync[key] = self.cost.pass_time_s(self.draft, batch, tokens, key[2] * self.context_step)
        return t

    def prefill_s(self, n_requests: int, prompt_tokens_mean: float, with_draft: bool) -> float:
        """One pass of the target (and the draft) over `n_requests` prompts."""
        tokens = self.prompt_step * math.ceil(prompt_tokens_mean / self.prompt_step)
        key = (n_requests, tokens, with_draft)
        t = self._prefill.get(key)
        if t is None:
            t = self.cost.pass_time_s(self.target, n_requests, tokens, 0)
            if with_draft and self.draft is not None:
                t += self.cost.pass_time_s(self.draft, n_requests, tokens, 0)
            self._prefill[key] = t
        return t


def kv_capacity_tokens(cost: CostModel, target: ModelSpec, draft: ModelSpec | None) -> int:
    """Tokens of KV cache (target's plus draft's per token) that fit in device memory after both models' weights."""
    hw = cost.hardware
    free = hw.mem_capacity_bytes * hw.usable_memory_fraction - target.resident_weight_bytes
    per_token = target.kv_bytes_per_token
    if draft is not None:
        free -= draft.resident_weight_bytes
        per_token += draft.kv_bytes_per_token
    return max(int(free // per_token), 0)


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 256  # sequences decoded together (vLLM's max_num_seqs)
    max_prefill_tokens: int = 8192  # prompt tokens one prefill step may take (vLLM's max_num_batched_tokens)
    kv_capacity_tokens: int | None = None  # None: what device memory holds after the weights
    draft_sync: str = "lazy"  # "lazy" or "eager": when the draft's KV cache catches up (module docstring)

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_prefill_tokens < 1:
            raise SpecsimError("max batch and max prefill tokens must be at least 1")
        if self.draft_sync not in DRAFT_SYNC:
            raise SpecsimError(f"draft sync {self.draft_sync!r} is not one of {', '.join(DRAFT_SYNC)}")


@dataclass
class _Log:
    """What the engines record while they run (mutable; frozen into a ServingRun at the end)."""

    first_token_s: np.ndarray
    finish_s: np.ndarray
    engine_of: np.ndarray
    step_time_s: list[float] = field(default_factory=list)  # end of each decode step
    step_duration_s: list[float] = field(default_factory=list)
    step_context: list[float] = field(default_factory=list)  # mean cached tokens per sequence at the step's start
    step_batch: list[int] = field(default_factory=list)
    step_drafted: list[int] = field(default_factory=list)  # drafted tokens per sequence (k, or tree nodes)
    step_tokens: list[int] = field(default_factory=list)  # tokens emitted by the whole batch
    prefill_duration_s: list[float] = field(default_factory=list)
    accepted_hist: dict[str, np.ndarray] = field(default_factory=dict)  # per candidate, counts of A per sequence-step
    waiting_at_last_arrival: int = 0


class Engine:
    """One device serving requests with continuous batching (see the module docstring)."""

    def __init__(self, env: simpy.Environment, index: int, workload: Workload, costs: StepCosts, policy: Policy,
                 sampler: BatchSampler, config: EngineConfig, kv_tokens: int, log: _Log) -> None:
        self.env, self.index, self.workload, self.costs = env, index, workload, costs
        self.policy, self.sampler, self.config, self.log = policy, sampler, config, log
        self.kv_free = kv_tokens
        self.lookahead = policy.lookahead_tokens
        self.with_draft = policy.uses_draft
        self.eager = config.draft_sync == "eager"
        # The running batch, aligned arrays in admission order: the sampler's slot, the request, its output tokens
        # still to come, its cached tokens, the tokens its draft cache lacks, the KV tokens it reserved.
        self.active = np.empty(0, dtype=np.int64)
        self.request = np.empty(0, dtype=np.int64)
        self.remaining = np.empty(0, dtype=np.int64)
        self.context = np.empty(0, dtype=np.int64)
        self.draft_missing = np.empty(0, dtype=np.int64)
        self.reserved = np.empty(0, dtype=np.int64)
        self.draft_warm = True  # the last decode step speculated
        self.free_slots = list(range(config.max_batch - 1, -1, -1))
        self.waiting: deque[int] = deque()
        self.wake = env.event()
        self.process = env.process(self.engine())

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.active)

    def submit(self, request: int) -> None:
        self.waiting.append(request)
        if not self.wake.triggered:
            self.wake.succeed()

    def need_tokens(self, request: int) -> int:
        return int(self.workload.prompt_tokens[request] + self.workload.output_tokens[request]) + self.lookahead

    def engine(self):  # noqa: ANN201 - a simpy process
        env = self.env
        while True:
            if not self.waiting and not len(self.active):
                self.wake = env.event()
                yield self.wake
                continue
            admitted = self._admit()
            if admitted:
                yield from self._prefill(*admitted)
            else:
                yield from self._decode()

    def _admit(self) -> tuple[list[int], list[int], list[int]] | None:
        """First come, first served while a slot, the KV cache and the prefill budget allow: (slots, requests,
        reserved tokens), or None."""
        slots: list[int] = []
        reqs: list[int] = []
        needs: list[int] = []
        budget = self.config.max_prefill_tokens
        w = self.workload
        while self.waiting and self.free_slots:
            req = self.waiting[0]
            need = self.need_tokens(req)
            prompt = int(w.prompt_tokens[req])
            if need > self.kv_free or (reqs and prompt > budget):
                break
            self.waiting.popleft()
            slots.append(self.free_slots.pop())
            reqs.append(req)
            needs.append(need)
            self.kv_free -= need
            budget -= prompt
        return (slots, reqs, needs) if reqs else None

    def _prefill(self, slots_list: list[int], reqs_list: list[int], needs: list[int]):  # noqa: ANN202
        slots, reqs = np.asarray(slots_list, dtype=np.int64), np.asarray(reqs_list, dtype=np.int64)
        w = self.workload
        prompts = w.prompt_tokens[reqs]
        duration = self.costs.prefill_s(len(slots), float(prompts.mean()), self.with_draft and self.eager)
        yield self.env.timeout(duration)
        self.log.prefill_duration_s.append(duration)
        self.log.first_token_s[reqs] = self.env.now
        self.log.engine_of[reqs] = self.index
        self.sampler.admit(slots)
        self.active = np.concatenate([self.active, slots])
        self.request = np.concatenate([self.request, reqs])
        self.remaining = np.concatenate([self.remaining, w.output_tokens[reqs] - 1])  # prefill emitted the first
        self.context = np.concatenate([self.context, prompts + 1])
        self.draft_missing = np.concatenate([self.draft_missing, np.zeros_like(prompts) if self.eager else prompts])
        self.reserved = np.concatenate([self.reserved, np.asarray(needs, dtype=np.int64)])
        self._retire()

    def _decode(self):  # noqa: ANN202
        batch = len(self.active)
        context_mean = int(self.context.sum()) / batch
        lazy = self.with_draft and not self.eager
        missing_mean = int(self.draft_missing.sum()) / batch if lazy else 0.0
        remaining_mean = int(self.remaining.sum()) / batch if missing_mean else 1.0
        cand = self.policy.choose(BatchState(batch, context_mean, missing_mean, remaining_mean, self.draft_warm),
                                  self.costs)
        plain = cand.is_plain
        self.draft_warm = not plain
        duration = self.costs.decode_s(batch, context_mean, cand)
        if self.with_draft:
            if plain:
                if self.eager:
                    duration += self.costs.draft_sync_s(batch, 1, context_mean)
            elif missing_mean > 0:
                duration += self.costs.draft_sync_s(batch, missing_mean, context_mean)
                self.draft_missing[:] = 0
        if plain:  # one token per sequence: no draws
            if lazy:
                self.draft_missing += 1
            yield self.env.timeout(duration)
            self.remaining -= 1
            self.context += 1
            tokens = batch
        else:
            if cand.tree is not None:
                accepted = self.sampler.draw_tree(self.active, cand.tree)
            else:
                accepted = self.sampler.draw(self.active, cand.k or 0)
            emitted = np.minimum(accepted + 1, self.remaining)
            yield self.env.timeout(duration)
            self.remaining -= emitted
            self.context += emitted
            tokens = int(emitted.sum())
        log = self.log
        drafted = cand.shape.n_nodes
        log.step_time_s.append(self.env.now)
        log.step_duration_s.append(duration)
        log.step_context.append(context_mean)
        log.step_batch.append(batch)
        log.step_drafted.append(drafted)
        log.step_tokens.append(tokens)
        if drafted:
            counts = np.bincount(accepted, minlength=cand.shape.depth + 1)
            hist = log.accepted_hist.get(cand.label)
            if hist is None:
                log.accepted_hist[cand.label] = counts
            else:
                hist += counts
        self._retire()

    def _retire(self) -> None:
        done = self.remaining <= 0
        if not done.any():
            return
        self.log.finish_s[self.request[done]] = self.env.now
        self.kv_free += int(self.reserved[done].sum())
        self.free_slots.extend(int(s) for s in self.active[done])
        keep = ~done
        self.active, self.request, self.remaining = self.active[keep], self.request[keep], self.remaining[keep]
        self.context, self.draft_missing = self.context[keep], self.draft_missing[keep]
        self.reserved = self.reserved[keep]


@dataclass(frozen=True, eq=False)
class ServingRun:
    """Everything one simulation produced. Per request (aligned with the workload): first-token and finish times
    and the engine that served it; per decode step (all engines, in completion order): end time, duration, batch,
    drafted tokens per sequence, tokens emitted."""

    workload: Workload
    policy: str
    engines: int
    router: str
    first_token_s: np.ndarray
    finish_s: np.ndarray
    engine_of: np.ndarray
    step_time_s: np.ndarray
    step_duration_s: np.ndarray
    step_context: np.ndarray
    step_batch: np.ndarray
    step_drafted: np.ndarray
    step_tokens: np.ndarray
    prefill_duration_s: np.ndarray
    accepted_hist: dict[str, np.ndarray]
    waiting_at_last_arrival: int
    kv_capacity_tokens: int


def _arrivals(env: simpy.Environment, workload: Workload, engines: Sequence[Engine], router: str, log: _Log):  # noqa: ANN202
    """Hands each request to an engine at its arrival time; requests arriving together are routed together."""
    turn = 0
    for req, t in enumerate(workload.arrival_s):
        if t > env.now:
            yield env.timeout(t - env.now)
        if router == "round-robin":
            target = engines[turn % len(engines)]
            turn += 1
        else:
            target = min(engines, key=lambda e: (e.outstanding, e.index))
        target.submit(req)
    log.waiting_at_last_arrival = sum(len(e.waiting) for e in engines)


def engine_kv_tokens(workload: Workload, costs: StepCosts, policy: Policy, config: EngineConfig) -> int:
    """KV-cache tokens one engine holds under `policy` (the draft's weights and cache only if it speculates),
    checked to fit the workload's largest request."""
    draft = costs.draft if policy.uses_draft else None
    if policy.uses_draft and draft is None:
        raise SpecsimError(f"policy {policy.label} speculates but no draft model was given")
    kv_tokens = config.kv_capacity_tokens
    if kv_tokens is None:
        kv_tokens = kv_capacity_tokens(costs.cost, costs.target, draft)
    biggest = int((workload.prompt_tokens + workload.output_tokens).max()) + policy.lookahead_tokens
    if biggest > kv_tokens:
        raise SpecsimError(f"a request needs {biggest:,} tokens of KV cache but an engine holds {kv_tokens:,} with "
                           f"policy {policy.label} on {costs.cost.hardware.name}: shorten prompts or outputs, or use "
                           "a device with more memory")
    return kv_tokens


def simulate(workload: Workload, costs: StepCosts, policy: Policy, acceptance: Acceptance, rng: np.random.Generator,
             config: EngineConfig = EngineConfig(), engines: int = 1, router: str = "least-loaded") -> ServingRun:
    """Serve `workload` with `engines` identical engines running `policy`; return what happened.

    All randomness (every sequence's acceptance) comes from `rng`."""
    if engines < 1:
        raise SpecsimError(f"a fleet needs at least one engine, got {engines}")
    if router not in ROUTERS:
        raise SpecsimError(f"unknown router {router!r}; use {' or '.join(ROUTERS)}")
    kv_tokens = engine_kv_tokens(workload, costs, policy, config)
    n = len(workload)
    log = _Log(np.full(n, np.nan), np.full(n, np.nan), np.full(n, -1, dtype=np.int64))
    env = simpy.Environment()
    fleet = [Engine(env, i, workload, costs, policy, batch_sampler(acceptance, config.max_batch, rng), config,
                    kv_tokens, log) for i in range(engines)]
    env.process(_arrivals(env, workload, fleet, router, log))
    env.run()
    if np.isnan(log.finish_s).any():  # cannot happen: every admitted request runs to completion
        raise RuntimeError("simulation ended with unfinished requests")
    return ServingRun(
        workload=workload, policy=policy.label, engines=engines, router=router,
        first_token_s=log.first_token_s, finish_s=log.finish_s, engine_of=log.engine_of,
        step_time_s=np.asarray(log.step_time_s), step_duration_s=np.asarray(log.step_duration_s),
        step_context=np.asarray(log.step_context),
        step_batch=np.asarray(log.step_batch, dtype=np.int64),
        step_drafted=np.asarray(log.step_drafted, dtype=np.int64),
        step_tokens=np.asarray(log.step_tokens, dtype=np.int64),
        prefill_duration_s=np.asarray(log.prefill_duration_s), accepted_hist=log.accepted_hist,
        waiting_at_last_arrival=log.waiting_at_last_arrival, kv_capacity_tokens=kv_tokens,
    )
