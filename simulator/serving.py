"""A serving engine under load: a simpy discrete-event simulation of continuous batching with speculation.

Scenario: requests arrive (Poisson, bursty gamma gaps, or a trace) at a fleet of identical engines behind a router
(round-robin, or least-loaded: the fewest requests waiting or running). Each engine runs one step at a time:

- **admission and prefill**: while requests wait, a free batch slot exists and the KV cache has room, requests are
  admitted first come, first served, up to ``max_prefill_tokens`` prompt tokens per step; a step that admits
  requests is a prefill step (the target over the new prompts, and the draft too under eager sync) and it emits each
  request's first token. Every running request holds lookahead slots: the policy's largest verification pass, k + 1
  tokens (vLLM's ``num_lookahead_slots``), and counts that many tokens against the step's token budget
  (``max_prefill_tokens``, vLLM's ``max_num_batched_tokens``), which caps the batch at budget // (k + 1).
  With ``prefill_mixed`` (llama-server, which builds one ``llama_decode`` batch per step from the running slots'
  tokens and any pending prompt) a prefill admitted while a batch runs is no step of its own: its prompt rides in
  the running batch's next decode step, which costs what the prompt's rows add to the target pass
  (`StepCosts.riding_prefill_s`), and the new requests join with their first token when that step ends.
- **slot runs** (``slot_runs``, llama-server with several slots): its KV cache keeps one stream per slot and splits
  a step's batch into one micro-batch per run of consecutive busy slot ids, each micro-batch a pass that reads the
  weights again (`scheduler.slot_runs`; two busy slots apart decode a step much slower than two adjacent ones, as
  `benchmarks/llama_slots.py` measures: docs/validation.md). A new request takes a free slot as llama-server picks
  one: the slot whose cached prompt shares more than a tenth of its own (where the workload carries the prompts'
  ids), else the least recently used; so gaps between busy slots are the rule at moderate load. A riding prompt's
  slot joins its run for as many tokens as a running row computes; the rest of the prompt is a pass of its own.
- **the KV cache** (``kv_allocation``): ``reserve`` (default) - a request is admitted only when its whole life fits
  (prompt + output + lookahead), so nothing is ever preempted (TensorRT-LLM's guaranteed-no-evict scheduling);
  ``on-demand`` - as vLLM does: admitted when its prompt and lookahead fit, the cache grows as tokens are kept, and
  when a step would not fit the newest running request is preempted (its cache dropped, back to the head of the
  queue, its prompt and the tokens it has generated recomputed by a prefill when it is readmitted); after a
  preemption nothing is admitted until a request finishes, so a request is not readmitted only to be preempted again.
- **decode**: otherwise the running batch decodes one step: the policy picks k (or a tree) for this batch, the step
  takes the cost model's time for this batch size and the batch's contexts, and each sequence draws its accepted
  length from its own acceptance process and emits A + 1 tokens (never more than it still needs).
- **the draft's cache** (``draft_sync``): ``lazy`` (default) - the draft sees a token only when it next drafts: a
  prefill runs the target alone, and a speculative step first runs the draft once over every token its sequences'
  caches miss (new prompts, tokens from plain steps), so a policy that turns speculation off also stops paying for the
  draft. ``eager`` - the draft is kept current every step, as vLLM's draft-model path does: prefills run both models
  and plain steps under a speculating policy run a one-token draft pass too.

- **static shapes** (``prefill_padded``, ``attention_padded``, both off by default): an engine without paged
  attention (specsim's own, `calibrate.served_validation`) pads a prefill to its longest prompt and has every sequence's
  attention read as many cache slots as the batch's longest context; vLLM packs prompts and reads each sequence's own.

A pass's context terms (each sequence's KV-cache reads, its attention FLOPs) are sums over the sequences of a
function linear in that sequence's context, so the batch's mean context prices a batch of mixed contexts exactly;
``StepCosts`` evaluates the cost model on a grid of mean contexts and interpolates linearly between grid points.

Simultaneous events: requests that arrive at the same instant are handed to the router together, before any engine
reacts; an engine that finishes a step at the instant a request arrives sees it at its next scheduling decision if
the arrival was scheduled first (simpy runs equal-time events in scheduling order), which a fixed seed reproduces.

One concept past 500 lines: one engine's step loop, whose reference path (a simpy event per step) and bulk path
(runs of steps planned ahead) must charge every step alike, so they stay side by side.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from . import SpecsimError
from .acceptance import Acceptance
from .policies import BatchState, Policy
from .sampling import BatchSampler, batch_sampler
from .scheduler import AcceptedHistogram, Admission, Joined, Scheduler, StepLog, StepTotals, least, slot_runs, total
from .step_costs import StepCosts, kv_capacity_tokens
from .sweep import Candidate
from .workload import Workload

ROUTERS = ("least-loaded", "round-robin")
DRAFT_SYNC = ("lazy", "eager")
KV_ALLOCATION = ("reserve", "on-demand")


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 256  # sequences decoded together (vLLM's max_num_seqs)
    max_prefill_tokens: int = 8192  # prompt tokens one prefill step may take (vLLM's max_num_batched_tokens)
    kv_capacity_tokens: int | None = None  # None: what device memory holds after the weights
    draft_sync: str = "lazy"  # "lazy" or "eager": when the draft's KV cache catches up (module docstring)
    bulk: bool = True  # advance decode steps of an unchanged batch as one event; False: one event per step
    kv_allocation: str = "reserve"  # "reserve" or "on-demand" (module docstring)
    lookahead_slots: bool = True  # False: reserve only the tokens a request keeps (what engines do not do)
    prefill_padded: bool = False  # a prefill pass pads every prompt to its longest (static shapes, specsim's own
    #                               engine); False: the prompts' tokens are packed, as vLLM does
    prefill_bucket: int = 1  # with prefill_padded: the longest prompt rounded up to a multiple of this many tokens
    #                          (specsim's engine on CUDA graphs: a graph per bucket, not per length)
    attention_padded: bool = False  # every sequence's attention reads as many cache slots as the batch's longest
    #                                 (static shapes, specsim's own engine); False: its own (paged attention, vLLM)
    prefill_mixed: bool = False  # new prompts ride in the running batch's decode pass (llama-server's one
    #                              llama_decode per step); False: a prefill is a step of its own
    slot_runs: bool = False  # llama-server's slots: a request takes the slot llama-server would pick, and a step
    #                          runs one pass per run of consecutive busy slots (module docstring)

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_prefill_tokens < 1 or self.prefill_bucket < 1:
            raise SpecsimError("max batch, max prefill tokens and the prefill bucket must be at least 1")
        if self.draft_sync not in DRAFT_SYNC:
            raise SpecsimError(f"draft sync {self.draft_sync!r} is not one of {', '.join(DRAFT_SYNC)}")
        if self.kv_allocation not in KV_ALLOCATION:
            raise SpecsimError(f"KV allocation {self.kv_allocation!r} is not one of {', '.join(KV_ALLOCATION)}")

    def lookahead(self, policy: Policy) -> int:
        """KV-cache slots and token budget each running request holds beyond the tokens it keeps."""
        return policy.lookahead_tokens if self.lookahead_slots else 0


@dataclass
class _Log:
    """What the engines record while they run (mutable; frozen into a ServingRun at the end)."""

    first_token_s: np.ndarray
    finish_s: np.ndarray
    engine_of: np.ndarray
    steps: StepLog = field(default_factory=StepLog)
    prefill_duration_s: array = field(default_factory=lambda: array("d"))  # (8 bytes a prefill, not a float object)
    accepted: AcceptedHistogram = field(default_factory=AcceptedHistogram)
    waiting_at_last_arrival: int = 0


BULK_CELLS = 1 << 15  # most (step, sequence) draws one bulk advance makes

# The bulk path's reductions on small arrays, called as ufuncs: ndarray.sum/.any/.min go through Python wrappers
# that cost more than the reduction itself where a batch is a sequence or two (docs/serving.md, Speed).
_sum, _cumsum = np.add.reduce, np.add.accumulate


@dataclass
class _NextArrival:
    """When the next request reaches the router (inf after the last): a bulk advance never runs past it while its
    engine could admit the request."""

    next_s: float = math.inf


class Engine(Scheduler):
    """One device serving requests with continuous batching (see the module docstring): the shared `Scheduler` on
    simpy's clock, each step's duration from the cost model and each sequence's acceptance sampled."""

    def __init__(self, env: simpy.Environment, index: int, workload: Workload, costs: StepCosts, policy: Policy,
                 sampler: BatchSampler, config: EngineConfig, kv_tokens: int, log: _Log,
                 arrivals: _NextArrival) -> None:
        super().__init__(workload, policy, config.max_batch, config.max_prefill_tokens, kv_tokens,
                         config.lookahead(policy), config.kv_allocation == "on-demand", config.draft_sync == "eager",
                         llama_slots=config.slot_runs)
        self.env, self.index, self.costs = env, index, costs
        self.sampler, self.config, self.log = sampler, config, log
        self.arrivals = arrivals
        self._tokens_per_step: dict[int, float] = {}  # E[A + 1] at chains of k (`_steps_to_finish`)
        self.wake = env.event()
        self.process = env.process(self.engine())

    def submit(self, request: int) -> None:
        super().submit(request)
        if not self.wake.triggered:
            self.wake.succeed()

    def engine(self):  # noqa: ANN201 - a simpy process
        env = self.env
        while True:
            if not self.waiting and not len(self.active):
                self.wake = env.event()
                yield self.wake
                continue
            admitted = self.admit()
            if admitted is None and not self.config.bulk:
                yield from self._decode_step()
                continue
            if admitted is not None and self.config.prefill_mixed and len(self.active):
                yield from self._decode_step(riding=admitted)
                continue
            if admitted is None:
                end, finishes = self._decode_run(env.now)
            else:
                end = self._prefill(admitted)
                finishes = True  # (a request of one output token is done at its prefill)
                if self.config.bulk and not self.waiting and self.arrivals.next_s > end and least(self.remaining) > 0:
                    end, finishes = self._decode_run(end)  # nothing to admit when the prefill ends: decode on
            yield env.timeout(end - env.now)  # (one simpy event for a prefill and the run after it)
            if finishes:
                self._retire()

    def _prefill(self, admission: Admission) -> float:
        """Start a prefill of the admitted requests: they join the batch, with their first token at the returned
        end time (nothing outside the engine sees the batch before then)."""
        joined = self.join(admission)
        computed = joined.computed
        if self.config.prefill_padded:
            bucket = self.config.prefill_bucket
            per_request = float(-(-int(computed.max()) // bucket) * bucket)
        else:
            per_request = total(computed) / len(computed)
        eager = self.with_draft and self.eager
        if self.config.slot_runs:  # a pass per run of consecutive slots
            duration = sum(self.costs.prefill_s(r, per_request, eager) for r in slot_runs(np.asarray(admission.slots)))
        else:
            duration = self.costs.prefill_s(len(computed), per_request, eager)
        end = self.env.now + duration
        self.log.prefill_duration_s.append(duration)
        self._first_tokens(joined, end)
        return end

    def _first_tokens(self, joined: Joined, end: float) -> None:
        """The joined requests' prefill ends at `end`: their first token then (a readmitted one's is kept)."""
        first_token_s, engine_of = self.log.first_token_s, self.log.engine_of
        for r in joined.requests.tolist():  # (a few at a time: scalars cost less than numpy's calls)
            if math.isnan(first_token_s[r]):
                first_token_s[r] = end
            engine_of[r] = self.index
        self.sampler.admit(joined.slots, joined.requests)  # a readmitted sequence starts afresh

    def _decode_step(self, riding: Admission | None = None):  # noqa: ANN202
        """One decode step (the reference mode: every step a simpy event). With `riding` (``prefill_mixed``): the
        admitted requests' prompts ride in its target pass, and they join the batch with their first token when it
        ends."""
        if self.on_demand:
            self.preempt_until_fits()
        state = self.state()
        cand = self.policy.choose(state, self.costs)
        batch, context_mean, missing_mean = state.batch, state.context_mean, state.draft_missing_mean
        lazy = self.with_draft and not self.eager
        plain = cand.is_plain
        self.draft_warm = not plain
        priced = context_mean + self._padding()  # the context the step's attention reads per sequence
        draft = (self.config.draft_sync if self.with_draft else None)
        if self.config.slot_runs:
            duration = self._slot_runs_step_s(cand, priced, draft, missing_mean, riding)
        else:
            duration = self.costs.step_s(batch, priced, cand, self.last_cand, draft, missing_mean)
            if riding is not None:
                prompts = sum(self.prefill_tokens(r) for r in riding.requests)
                duration += self.costs.riding_prefill_s(batch * cand.shape.verify_tokens, prompts)
        self.last_cand = cand
        if self.with_draft and not plain and missing_mean > 0:
            self.draft_missing[:] = 0
        self.sampler.at_context(context_mean)
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
        self._log_steps(cand, np.array([self.env.now]), np.array([duration]), np.array([context_mean]), batch,
                        np.array([tokens]), None if plain else accepted)
        self._retire()
        if riding is not None:
            self._first_tokens(self.join(riding), self.env.now)

    def _slot_runs_step_s(self, cand: Candidate, priced: float, draft: str | None, missing_mean: float,
                          riding: Admission | None) -> float:
        """A decode step of llama-server's slots (`EngineConfig.slot_runs`): a pass per run of consecutive busy slots,
        a riding prompt's slot among them for the tokens a running row computes, the rest of each prompt a pass of
        its own at context 0."""
        costs, extra = self.costs, np.asarray(riding.slots if riding is not None else (), dtype=np.int64)
        runs = slot_runs(np.concatenate([self.active, extra]))
        duration = costs.over_runs(runs, cand, lambda b: costs.step_s(b, priced, cand, self.last_cand, draft,
                                                                      missing_mean))
        for r in riding.requests if riding is not None else ():
            rest = self.prefill_tokens(r) - cand.shape.verify_tokens
            duration += costs.prefill_s(1, rest, False) if rest > 0 else 0.0
        return duration

    def _padding(self) -> float:
        """What attention reads per sequence beyond the batch's mean context: the longest's lead when attention is
        padded to it (`EngineConfig.attention_padded`; within a run of steps the lead is taken as constant)."""
        if not self.config.attention_padded or not len(self.context):
            return 0.0
        return float(self.context.max() - self.context.mean())

    def _decode_run(self, start: float) -> tuple[float, bool]:
        """Decode steps of an unchanged batch in bulk, from `start` (now, or later after a prefill): the steps are
        planned ahead of the clock, a run at a time (``_plan``), until a sequence finishes or a request arrives that
        this engine could admit; one simpy event then covers them all (the caller's). Nothing outside the engine
        sees its batch between those events (the router counts requests, which change only when one finishes), so
        the order of events is the reference mode's. Returns (end time, a sequence finished)."""
        t = start
        while True:
            t, finishes, arrives = self._plan(t)
            if finishes or arrives:
                return t, finishes

    def _plan(self, t: float) -> tuple[float, bool, bool]:
        """Advance the batch from time `t` by the steps ``_decode_step`` would take in a row with one choice: every
        sequence's accepted lengths for up to m steps drawn at once, then cut at the first step after which
        something changes - a sequence finishes or a request arrives that this engine could admit (both stop the
        run), or the policy would choose differently. Returns (end time, a sequence finished, a request arrived).
        A first step that catches the draft's cache up may choose differently from the steps after it, which see a
        current draft: it is drafted with its own choice, `first`, and the rest with theirs.
        On-demand allocation: the run also ends before the first step whose cache would not fit."""
        if self.on_demand:
            self.preempt_until_fits()
        state = self.state()
        batch, remaining, costs, policy = state.batch, self.remaining, self.costs, self.policy
        runs = slot_runs(self.active) if self.config.slot_runs else None  # None: the batch is one pass
        first = cand = policy.choose(state, costs)
        lags = cand.is_plain and self.with_draft and not self.eager  # the draft falls one token behind every step
        catchup = 0.0
        shortest = least(remaining)
        m = max(1, min(shortest, BULK_CELLS // batch))
        if not cand.is_plain and state.draft_missing_mean > 0:
            catchup = (costs.draft_sync_s(batch, state.draft_missing_mean, state.context_mean) if runs is None else
                       sum(costs.draft_sync_s(r, state.draft_missing_mean, state.context_mean) for r in runs))
            cand = policy.choose(BatchState(batch, state.context_mean, previous=first), costs)  # draft current
            if cand.is_plain:  # the catch-up step alone; the next run decides afresh
                cand, m = first, 1
        if cand.tree is None and cand.k and m > 8:  # draw about the steps until the shortest finishes, not all
            m = min(m, self._steps_to_finish(shortest, cand.k))  # its tokens' worth (a longer run plans again)
        next_arrival = self.arrivals.next_s if self.free_slots and not self.waiting else math.inf
        if next_arrival < math.inf and m * batch > 4096:  # durations never fall as contexts grow: it comes within
            m = max(1, min(m, int((next_arrival - t) / costs.decode_s(batch, state.context_mean, cand)) + 2))
        self.sampler.at_context(state.context_mean)
        if cand.is_plain:  # one token per sequence per step, no draws: the shortest finishes after min(remaining)
            accepted = done = None
            n = m
            first_finish = shortest - 1  # the step after which a sequence has its last token (none within m if >= m)
            step_tokens = np.full(m, batch, dtype=np.int64)
        else:
            if first is cand:
                accepted = self.sampler.draw_steps(self.active, cand, m)
            else:
                accepted = self.sampler.draw_steps_after(self.active, first, cand, m)
            done = _cumsum(accepted + 1)  # tokens each sequence has emitted after each step (down axis 0)
            hit = done >= remaining  # done only grows: a row once hit stays hit
            at = int(hit.argmax())  # row-major: the first hit's row is the first step a sequence finishes in
            first_finish = at // batch if hit.item(at) else m
            n = min(first_finish + 1, m)
            step_tokens = _sum(accepted[:n], axis=1) + batch
        before = _cumsum(step_tokens)  # tokens the batch emitted before each step
        before -= step_tokens
        context_means = (before + self.context_total) / batch
        context_model = self.sampler.context
        if context_model is not None and not cand.is_plain:  # acceptance changes with the context's cell
            q = context_model.quantum
            cells = context_means // q
            n = min(n, int(np.searchsorted(cells, cells[0], side="right")))
            context_means = context_means[:n]
        if self.on_demand:  # cached tokens before each step, plus every request's lookahead
            cache = before[:n] + (self.context_total + batch * self.lookahead)
            n = min(n, max(1, int(np.searchsorted(cache, self.kv_capacity, side="right"))))
            context_means = context_means[:n]
        if not catchup:
            n = policy.holds(state, context_means, costs, lags, cand)
        elif n > 1:  # the second step sees a current draft: is `cand` its choice, and for how long?
            warm = BatchState(batch, float(context_means[1]), previous=first)
            again = policy.choose(warm, costs)
            n = 1 + policy.holds(warm, context_means[1:], costs, lags, again) if again is cand or again == cand else 1
        pad = self._padding()
        priced = context_means[:n] + pad if pad else context_means[:n]  # the contexts the steps' attention reads
        if runs is None:
            durations = costs.decode_many_s(batch, priced, cand)
            if first is not cand:
                durations[0] = costs.decode_s(batch, state.context_mean + pad, first)
        else:
            durations = costs.over_runs(runs, cand, lambda b: costs.decode_many_s(b, priced, cand))
            if first is not cand:
                at = state.context_mean + pad
                durations[0] = costs.over_runs(runs, first, lambda b: costs.decode_s(b, at, first))
        if catchup:
            durations[0] += catchup
        if self.last_cand is not None and first is not self.last_cand and first != self.last_cand:
            durations[0] += costs.switch_s(batch, state.context_mean + pad)
        if first is not cand and n > 1:
            durations[1] += costs.switch_s(batch, float(priced[1]))
        if cand.is_plain and self.with_draft and self.eager:  # the draft is kept current
            durations += (costs.draft_sync_many_s(batch, priced) if runs is None else
                          sum(costs.draft_sync_many_s(r, priced) for r in runs))
        ends = t + _cumsum(durations)
        arrives = next_arrival <= ends[-1]
        if arrives:
            n = int(ends.searchsorted(next_arrival)) + 1  # the step during which it arrives
        if accepted is not None:
            self.sampler.keep(self.active, n - (first is not cand))
        self.last_cand = cand if n > 1 or first is cand else first
        self.draft_warm = not self.last_cand.is_plain
        if lags:
            self.draft_missing += n
        elif catchup:
            self.draft_missing[:] = 0
        finishes = n > first_finish
        if done is None:
            per_sequence = n
        elif finishes:
            per_sequence = np.minimum(done[n - 1], remaining)  # the last step emits only what a sequence needs
            step_tokens = step_tokens[:n].copy()
            step_tokens[n - 1] -= total(done[n - 1] - per_sequence)
        else:
            per_sequence = done[n - 1]  # no sequence finishes: each keeps all it emitted
        self.remaining -= per_sequence
        self.context += per_sequence
        self.log.steps.add(ends[:n], durations[:n], context_means[:n], step_tokens[:n], batch, cand.shape.n_nodes,
                           None if first is cand else first.shape.n_nodes)
        if accepted is None:
            pass
        elif first is cand:
            self.log.accepted.add(cand, accepted[:n])
        else:
            self.log.accepted.add(first, accepted[:1])
            self.log.accepted.add(cand, accepted[1:n])
        return float(ends[n - 1]), finishes, arrives

    def _steps_to_finish(self, tokens: int, k: int) -> int:
        """Steps to draw ahead for a sequence that needs `tokens` more at chains of k: half again the expected
        steps (E[A + 1] tokens a step) and eight more, so that a run rarely needs a second draw and seldom draws
        two or three times the steps it keeps (each step emits at least one token: never more than `tokens`)."""
        per_step = self._tokens_per_step.get(k)
        if per_step is None:
            expected = getattr(self.sampler.acceptance, "expected_tokens", None)
            per_step = self._tokens_per_step[k] = max(1.0, float(expected(k))) if expected else 1.0
        return min(tokens, int(1.5 * tokens / per_step) + 8)

    def _log_steps(self, cand: Candidate, ends: np.ndarray, durations: np.ndarray, context_means: np.ndarray,
                   batch: int, tokens: np.ndarray, accepted: np.ndarray | None) -> None:
        self.log.steps.add(ends, durations, context_means, tokens, batch, cand.shape.n_nodes)
        if accepted is not None:
            self.log.accepted.add(cand, accepted)

    def _retire(self) -> None:
        if len(self.remaining) and least(self.remaining) <= 0:
            self.log.finish_s[self.retire(self.finished())] = self.env.now


@dataclass(frozen=True, eq=False)
class ServingRun:
    """Everything one simulation produced. Per request (aligned with the workload): first-token and finish times
    and the engine that served it; per decode step (all engines, in completion order): end time, duration, batch,
    drafted tokens per sequence, tokens emitted (empty where the simulation kept no steps: ``keep_steps=False``);
    what those steps add up to in `step_totals` either way."""

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
    preemptions: int = 0  # requests preempted (on-demand KV allocation), all engines
    step_totals: StepTotals = field(default_factory=StepTotals)


def _arrivals(env: simpy.Environment, workload: Workload, engines: Sequence[Engine], router: str, log: _Log,
              upcoming: _NextArrival):  # noqa: ANN202
    """Hands each request to an engine at its arrival time; requests arriving together are routed together."""
    turn = 0
    times = workload.arrival_s.tolist()
    for req, t in enumerate(times):
        if t > env.now:
            upcoming.next_s = t
            yield env.timeout(t - env.now)
        upcoming.next_s = times[req + 1] if req + 1 < len(times) else math.inf
        if len(engines) == 1:
            target = engines[0]
        elif router == "round-robin":
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
    biggest = int((workload.prompt_tokens + workload.output_tokens).max()) + config.lookahead(policy)
    if kv_tokens == 0:
        raise SpecsimError(f"the weights leave no room for a KV cache on {costs.cost.hardware.name} with policy "
                           f"{policy.label}: split the target over GPUs with --tp N, a smaller --dtype, or a device "
                           "with more memory")
    if biggest > kv_tokens:
        raise SpecsimError(f"a request needs {biggest:,} tokens of KV cache but an engine holds {kv_tokens:,} with "
                           f"policy {policy.label} on {costs.cost.hardware.name}: shorten prompts or outputs, or use "
                           "a device with more memory")
    return kv_tokens


def simulate(workload: Workload, costs: StepCosts, policy: Policy, acceptance: Acceptance, rng: np.random.Generator,
             config: EngineConfig = EngineConfig(), engines: int = 1, router: str = "least-loaded",
             keep_steps: bool = True) -> ServingRun:
    """Serve `workload` with `engines` identical engines running `policy`; return what happened. With
    ``keep_steps=False`` no per-step record is kept, only what the steps add up to (`StepTotals`, all that
    `simulator.metrics.summarize` reads): memory stays flat however many requests are served.

    All randomness (every sequence's acceptance) comes from `rng`."""
    if engines < 1:
        raise SpecsimError(f"a fleet needs at least one engine, got {engines}")
    if router not in ROUTERS:
        raise SpecsimError(f"unknown router {router!r}; use {' or '.join(ROUTERS)}")
    kv_tokens = engine_kv_tokens(workload, costs, policy, config)
    n = len(workload)
    log = _Log(np.full(n, np.nan), np.full(n, np.nan), np.full(n, -1, dtype=np.int64), StepLog(keep=keep_steps))
    costs = costs.for_policy(policy)
    env = simpy.Environment()
    upcoming = _NextArrival(float(workload.arrival_s[0]) if n else math.inf)
    fleet = [Engine(env, i, workload, costs, policy, batch_sampler(acceptance, config.max_batch, rng), config,
                    kv_tokens, log, upcoming) for i in range(engines)]
    env.process(_arrivals(env, workload, fleet, router, log, upcoming))
    env.run()
    if np.isnan(log.finish_s).any():  # cannot happen: every admitted request runs to completion
        raise RuntimeError("simulation ended with unfinished requests")
    return ServingRun(
        workload=workload, policy=policy.label, engines=engines, router=router,
        first_token_s=log.first_token_s, finish_s=log.finish_s, engine_of=log.engine_of,
        **log.steps.columns(),
        prefill_duration_s=np.asarray(log.prefill_duration_s), accepted_hist=log.accepted.counts,
        waiting_at_last_arrival=log.waiting_at_last_arrival, kv_capacity_tokens=kv_tokens,
        preemptions=sum(e.preemptions for e in fleet), step_totals=log.steps.totals(),
    )
