"""Continuous batching's decisions without a clock: the waiting queue, the running batch, first-come-first-served
admission under the batch, KV-cache and prompt-budget limits, preemption, the view the speculation policy chooses
from, and retirement. The simulator (`simulator.serving.Engine`) runs this scheduler on simpy's clock with sampled
acceptance; the real engine's served loop (`engine.served_loop.serve`) runs the same scheduler on the wall clock
with the accept/reject rule's acceptance, so a served validation tests the simulator's own decisions.

The step log both write is `StepLog` (runs of decode steps, each with one batch and one draft shape), and the
accepted lengths are counted once, by `AcceptedHistogram`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

import numpy as np

from .policies import BatchState, Policy
from .sweep import Candidate
from .workload import Workload


def total(a: np.ndarray) -> int:
    """The sum of a 1-D integer array as a Python int: a batch's rows, summed every step. Up to 64 rows a list's sum
    is cheaper than numpy's call overhead (measured in docs/serving.md, Speed)."""
    return sum(a.tolist()) if len(a) <= 64 else int(np.add.reduce(a))


def least(a: np.ndarray) -> int:
    """The minimum of a non-empty 1-D integer array as a Python int (as ``total``: up to 32 rows by a list)."""
    return min(a.tolist()) if len(a) <= 32 else int(np.minimum.reduce(a))


@dataclass(frozen=True)
class StepTotals:
    """What a run's decode steps add up to, all engines together: the figures `simulator.metrics` reports, kept as
    the steps are logged so that a simulation that keeps no per-step record (`StepLog(keep=False)`) still reports
    them. Per batch size (index = sequences in the step): the steps, their seconds and the tokens they emitted."""

    steps: int = 0
    duration_s: float = 0.0
    batch_duration_s: float = 0.0  # sum over steps of batch x duration (the time-weighted mean batch's numerator)
    sequence_steps: int = 0  # sum over steps of the batch (sequence-steps)
    drafted: int = 0  # sum over steps of batch x tokens drafted per sequence
    tokens: int = 0  # tokens emitted
    steps_by_batch: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    duration_by_batch_s: np.ndarray = field(default_factory=lambda: np.zeros(1))
    tokens_by_batch: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))


class StepLog:
    """Decode steps as logged, a run at a time (steps of one batch and one draft shape): per step its end time (s),
    duration (s), the batch's mean context at its start (tokens) and the tokens the whole batch emitted; per run the
    batch and the tokens drafted per sequence (k, tree nodes, 0 for a plain step).

    A run's arrays are kept as they come and joined a few hundred runs at a time into chunks: a run costs four list
    appends, not four slice writes (the simulator logs a run per event), and no single concatenation at the end has
    to join a day of traffic's hundreds of thousands of small arrays at once. Each join also adds the runs to the
    totals (`StepTotals`); with ``keep=False`` that is all it keeps, so a million requests' tens of millions of steps
    take no memory (a day of light traffic logged 29 steps a request, 48 bytes each)."""

    COLUMNS = (("step_time_s", np.float64), ("step_duration_s", np.float64), ("step_context", np.float64),
               ("step_tokens", np.int64))

    def __init__(self, fold_runs: int = 256, keep: bool = True) -> None:
        self.fold_runs, self.keep = fold_runs, keep
        self._pending: list[tuple] = []  # runs not yet joined: ends, durations, contexts, tokens, batch, drafted, lead
        self._chunks: tuple[list[np.ndarray], ...] = ([], [], [], [])
        self._batch: list[int] = []  # per run, joined (kept only with ``keep``)
        self._drafted: list[int] = []
        self._steps: list[int] = []
        self._sums = [0, 0.0, 0.0, 0, 0, 0]  # steps, duration, batch x duration, sequence-steps, drafted, tokens
        self._by_batch = (np.zeros(1, dtype=np.int64), np.zeros(1), np.zeros(1, dtype=np.int64))

    def add(self, ends_s: np.ndarray, durations_s: np.ndarray, context_means: np.ndarray, tokens: np.ndarray,
            batch: int, drafted: int, lead_drafted: int | None = None) -> None:
        """Log a run of steps (arrays the caller no longer changes); with `lead_drafted`, its first step drafted that
        instead (a run of its own)."""
        pending = self._pending
        pending.append((ends_s, durations_s, context_means, tokens, batch, drafted, lead_drafted))
        if len(pending) >= self.fold_runs:
            self._fold()

    def _fold(self) -> None:
        pending = self._pending
        if not pending:
            return
        ends, durations, contexts, toks, batches, drafts, leads = zip(*pending)
        pending.clear()
        joined = [np.concatenate(arrays, dtype=dtype, casting="unsafe")
                  for arrays, (_, dtype) in zip((ends, durations, contexts, toks), self.COLUMNS)]
        run_batch, run_drafted, run_steps = [], [], []
        for e, b, d, lead in zip(ends, batches, drafts, leads):
            n = len(e)
            if lead is not None:  # the run's first step drafted otherwise: a run of its own
                run_batch.append(b)
                run_drafted.append(lead)
                run_steps.append(1)
                n -= 1
            run_batch.append(b)
            run_drafted.append(d)
            run_steps.append(n)
        steps = np.array(run_steps, dtype=np.int64)
        batch = np.repeat(np.array(run_batch, dtype=np.int64), steps)  # (steps,)
        drafted = np.repeat(np.array(run_drafted, dtype=np.int64), steps)
        duration, tokens = joined[1], joined[3]
        s = self._sums
        s[0] += len(duration)
        s[1] += float(duration.sum())
        s[2] += float(np.dot(batch, duration))
        s[3] += int(batch.sum())
        s[4] += int(np.dot(batch, drafted))
        s[5] += int(tokens.sum())
        width = int(batch.max()) + 1 if len(batch) else 1
        if width > len(self._by_batch[0]):
            self._by_batch = tuple(np.concatenate([a, np.zeros(width - len(a), dtype=a.dtype)])
                                   for a in self._by_batch)
        count, secs, tok = self._by_batch
        count[:width] += np.bincount(batch, minlength=width)
        secs[:width] += np.bincount(batch, weights=duration, minlength=width)
        tok[:width] += np.bincount(batch, weights=tokens, minlength=width).astype(np.int64)
        if self.keep:  # else nothing per step is kept
            for chunks, column in zip(self._chunks, joined):
                chunks.append(column)
            self._batch += run_batch
            self._drafted += run_drafted
            self._steps += run_steps

    def totals(self) -> StepTotals:
        """What every logged step adds up to (`StepTotals`)."""
        self._fold()
        steps, duration, batch_duration, seq_steps, drafted, tokens = self._sums
        count, secs, toks = self._by_batch
        return StepTotals(steps, duration, batch_duration, seq_steps, drafted, tokens, count.copy(), secs.copy(),
                          toks.copy())

    def columns(self) -> dict[str, np.ndarray]:
        """Per-step columns in completion order (engines plan runs ahead of the clock, so the log is in planning
        order; one engine's already is in completion order, and a stable sort would leave it as it is); empty
        where the log keeps no steps."""
        self._fold()
        cols = {name: np.concatenate(chunks, dtype=dtype) if chunks else np.empty(0, dtype=dtype)
                for chunks, (name, dtype) in zip(self._chunks, self.COLUMNS)}
        steps = np.array(self._steps, dtype=np.int64)
        cols["step_batch"] = np.repeat(np.array(self._batch, dtype=np.int64), steps)
        cols["step_drafted"] = np.repeat(np.array(self._drafted, dtype=np.int64), steps)
        ends = cols["step_time_s"]
        if len(ends) > 1 and not (ends[1:] >= ends[:-1]).all():
            order = np.argsort(ends, kind="stable")
            return {name: col[order] for name, col in cols.items()}
        return cols


class AcceptedHistogram:
    """Per draft shape (its label), how many sequence-steps accepted A = 0, 1, ..., depth drafts.

    Runs of accepted lengths are kept as they come and counted a few hundred at a time (one ``bincount`` each time,
    not one per run: the simulator adds a run per event), or sooner once they hold many cells (a kept run is a view
    that holds its whole draw alive)."""

    FOLD_RUNS = 256  # runs kept before they are counted
    FOLD_CELLS = 1 << 16  # or sequence-steps kept

    def __init__(self) -> None:
        self._counts: dict[str, np.ndarray] = {}
        self._pending: dict[str, list[np.ndarray]] = {}
        self._depth: dict[str, int] = {}
        self._kept = self._cells = 0

    def add(self, cand: Candidate, accepted: np.ndarray) -> None:
        label = cand.label
        runs = self._pending.get(label)
        if runs is None:
            runs = self._pending[label] = []
            self._depth[label] = cand.shape.depth
        runs.append(accepted)
        self._kept += 1
        self._cells += accepted.size
        if self._kept >= self.FOLD_RUNS or self._cells >= self.FOLD_CELLS:
            self._fold()

    def _fold(self) -> None:
        for label, runs in self._pending.items():
            if not runs:
                continue
            depth = self._depth[label]
            a = np.concatenate(runs, axis=None).astype(np.int64, copy=False)  # (axis None: each run flattened)
            c = np.bincount(a, minlength=depth + 1)[:depth + 1]
            known = self._counts.get(label)
            self._counts[label] = c if known is None else known + c
            runs.clear()
        self._kept = self._cells = 0

    @property
    def counts(self) -> dict[str, np.ndarray]:
        self._fold()
        return self._counts


def admissible(needs: Sequence[int], prefill_tokens: Sequence[int], kv_free: int, budget: int) -> int:
    """How many of the requests at the head of the queue (their KV-cache needs and prefill tokens, in order, as many
    as the batch has room for) join it: first come, first served while the cache holds each one's need and the
    step's prompt budget its prefill (the first one always fits the budget: a long prompt is not starved)."""
    n = 0
    for need, tokens in zip(needs, prefill_tokens):
        if need > kv_free or (n and tokens > budget):
            break
        kv_free -= need
        budget -= tokens
        n += 1
    return n


SLOT_PROMPT_SIMILARITY = 0.1  # llama-server's --slot-prompt-similarity default


def slot_runs(slots: np.ndarray) -> list[int]:
    """Lengths of the runs of consecutive ids among `slots` (busy slots, in any order): llama.cpp's non-unified KV
    cache computes a batch as one micro-batch per such run (`llama_batch_allocr::split_equal`, sequential), so a
    step over slots 0 and 2 runs two passes where slots 0 and 1 run one."""
    ids = np.sort(np.asarray(slots, dtype=np.int64))
    if not len(ids):
        return []
    cuts = np.flatnonzero(np.diff(ids) != 1) + 1
    return np.diff(np.concatenate([[0], cuts, [len(ids)]])).tolist()


class Admission(NamedTuple):
    """Requests admitted together: their batch slots, request indices and the KV tokens each reserved (named
    tuples: one is built per admission)."""

    slots: list[int]
    requests: list[int]
    needs: list[int]


class Joined(NamedTuple):
    """What a prefill of admitted requests computes, per request (slots and requests as arrays): prompt tokens,
    the tokens it emits (its first token; for a preempted request, every token it had emitted) and the tokens the
    pass computes."""

    slots: np.ndarray
    requests: np.ndarray
    prompts: np.ndarray
    emitted: np.ndarray | int  # 1: every one a new request
    computed: np.ndarray


class Scheduler:
    """The running batch of one engine and the rules that change it (`simulator.serving`'s docstring says which).

    The batch is held as aligned arrays in row order: the sampler's slot, the request, its output tokens still to
    come, its cached tokens, the tokens its draft's cache lacks (lazy draft sync), and the KV tokens it reserved."""

    def __init__(self, workload: Workload, policy: Policy, max_batch: int, max_prefill_tokens: int,
                 kv_tokens: int, lookahead: int, on_demand: bool, eager_draft: bool, llama_slots: bool = False) -> None:
        self.workload, self.policy = workload, policy
        self._prompts = workload.prompt_tokens.astype(np.int64).tolist()  # as Python ints: admission reads them
        self._outputs = workload.output_tokens.astype(np.int64).tolist()
        # Which free slot a new request takes: the last freed (default), or llama-server's choice
        # (`server_context::get_available_slot`): the slot whose cached tokens share the longest prefix with the
        # prompt, if more than SLOT_PROMPT_SIMILARITY of it (where the workload has the prompts' ids), else the
        # least recently used, never-used slots first from the highest id.
        self.llama_slots = llama_slots
        self.slot_tokens: dict[int, tuple[int, ...]] = {}  # what each slot last cached (its prompt)
        self.max_prefill_tokens = max_prefill_tokens
        self.kv_capacity = self.kv_free = kv_tokens  # kv_free: what reservations leave (reserve mode)
        self.lookahead = lookahead
        self.on_demand = on_demand
        self.with_draft = policy.uses_draft
        self.eager = eager_draft
        # The token budget of a step: each running request's verification pass counts against it.
        self.batch_cap = min(max_batch, max_prefill_tokens // max(lookahead, 1))
        self.resumed: dict[int, int] = {}  # preempted requests waiting again: output tokens they had emitted
        self.admit_blocked = False  # after a preemption, until a request finishes
        self.preemptions = 0
        self.active = np.empty(0, dtype=np.int64)
        self.request = np.empty(0, dtype=np.int64)
        self.remaining = np.empty(0, dtype=np.int64)
        self.context = np.empty(0, dtype=np.int64)
        self.draft_missing = np.empty(0, dtype=np.int64)
        self.reserved = np.empty(0, dtype=np.int64)
        self.draft_warm = True  # the last decode step speculated
        self.last_cand: Candidate | None = None  # what the last decode step drafted
        self.context_total = 0  # cached tokens over the batch, as of the last state()
        self.free_slots = list(range(max_batch - 1, -1, -1))
        self.waiting: deque[int] = deque()

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.active)

    @property
    def running(self) -> int:
        return len(self.active)

    def submit(self, request: int) -> None:
        self.waiting.append(request)

    def need_tokens(self, request: int) -> int:
        """KV-cache tokens admitting `request` takes: its whole life (reserve), or what it holds once its prefill
        has run (on-demand: prompt and the tokens it had emitted, or the first token, plus lookahead)."""
        if self.on_demand:
            return self._prompts[request] + max(self.resumed.get(request, 0), 1) + self.lookahead
        return self._prompts[request] + self._outputs[request] + self.lookahead

    def prefill_tokens(self, request: int) -> int:
        """Tokens a prefill of `request` computes: its prompt, and for a preempted one the tokens it had emitted."""
        return self._prompts[request] + self.resumed.get(request, 0)

    def kv_free_now(self) -> int:
        if not self.on_demand:
            return self.kv_free
        return self.kv_capacity - int(self.context.sum()) - len(self.active) * self.lookahead

    def preempt_until_fits(self) -> None:
        """On-demand allocation: while the next step's cache (every running request's tokens plus its lookahead)
        does not fit, the newest running request is preempted to the head of the queue."""
        while len(self.active) > 1 and self.kv_free_now() < 0:
            req = int(self.request[-1])
            self.resumed[req] = int(self.workload.output_tokens[req] - self.remaining[-1])
            self.waiting.appendleft(req)
            self.free_slots.append(int(self.active[-1]))
            self.active, self.request, self.remaining = self.active[:-1], self.request[:-1], self.remaining[:-1]
            self.context, self.draft_missing = self.context[:-1], self.draft_missing[:-1]
            self.reserved = self.reserved[:-1]
            self.preemptions += 1
            self.admit_blocked = True

    def admit(self) -> Admission | None:
        """First come, first served while a slot, the KV cache and the prefill budget allow (`admissible`)."""
        if self.admit_blocked or not self.waiting:
            return None
        room = min(self.batch_cap - len(self.active), len(self.free_slots))
        head = list(islice(self.waiting, max(room, 0)))
        needs = [self.need_tokens(r) for r in head]
        n = admissible(needs, [self.prefill_tokens(r) for r in head], self.kv_free_now(), self.max_prefill_tokens)
        if not self.on_demand:
            self.kv_free -= sum(needs[:n])
        if not n:
            return None
        reqs = [self.waiting.popleft() for _ in range(n)]
        slots = [self._llama_slot(r) for r in reqs] if self.llama_slots else [self.free_slots.pop() for _ in reqs]
        return Admission(slots, reqs, needs[:n])

    def _llama_slot(self, request: int) -> int:
        """llama-server's choice of a free slot for `request` (see ``llama_slots``), taken out of the free list."""
        pick = 0  # the least recently used
        ids = self.workload.prompt_ids
        if ids is not None:
            prompt = ids[request]
            best = SLOT_PROMPT_SIMILARITY
            for i in sorted(range(len(self.free_slots)), key=lambda i: self.free_slots[i]):  # in slot order
                cached = self.slot_tokens.get(self.free_slots[i], ())
                same = next((j for j, (a, b) in enumerate(zip(cached, prompt)) if a != b), min(len(cached),
                                                                                              len(prompt)))
                if same / len(prompt) > best:
                    best, pick = same / len(prompt), i
            self.slot_tokens[self.free_slots[pick]] = prompt
        return self.free_slots.pop(pick)

    def join(self, admission: Admission) -> Joined:
        """The admitted requests join the running batch after its last row, as their prefill leaves them."""
        slots = np.asarray(admission.slots, dtype=np.int64)
        reqs = np.asarray(admission.requests, dtype=np.int64)
        w = self.workload
        prompts = w.prompt_tokens[reqs]
        if self.resumed:  # a preempted request recomputes the tokens it had emitted
            emitted = np.array([self.resumed.pop(r, 1) for r in admission.requests], dtype=np.int64)
            computed = prompts + emitted - 1
        else:  # a new request's prefill computes its prompt and emits its first token
            emitted, computed = 1, prompts
        self.active = np.concatenate([self.active, slots])
        self.request = np.concatenate([self.request, reqs])
        self.remaining = np.concatenate([self.remaining, w.output_tokens[reqs] - emitted])
        self.context = np.concatenate([self.context, prompts + emitted])
        missing = np.zeros(len(prompts), dtype=prompts.dtype) if self.eager else computed
        self.draft_missing = np.concatenate([self.draft_missing, missing])
        self.reserved = np.concatenate([self.reserved, np.asarray(admission.needs, dtype=np.int64)])
        return Joined(slots, reqs, prompts, emitted, computed)

    def state(self) -> BatchState:
        """What the policy chooses from: the batch, its mean context, what the draft's cache lacks, what was
        drafted last."""
        batch = len(self.active)
        lazy = self.with_draft and not self.eager
        missing_mean = total(self.draft_missing) / batch if lazy else 0.0
        remaining_mean = total(self.remaining) / batch if missing_mean else 1.0
        self.context_total = total(self.context)
        return BatchState(batch, self.context_total / batch, missing_mean, remaining_mean, self.draft_warm,
                          self.last_cand)

    def drafted(self, cand: Candidate) -> None:
        """The step just scheduled drafted `cand` (plain: k = 0)."""
        self.last_cand = cand
        self.draft_warm = not cand.is_plain

    def keep(self, emitted: np.ndarray | int) -> None:
        """Every running sequence keeps `emitted` tokens (per sequence, or the same for all)."""
        self.remaining -= emitted
        self.context += emitted

    def finished(self) -> np.ndarray:
        """Rows whose request has every output token."""
        return self.remaining <= 0

    def retire(self, done: np.ndarray, order: Sequence[int] | None = None) -> np.ndarray:
        """Finished rows leave: their KV reservation and slots are freed; the rest keep their order, or take the
        rows `order` gives (old row per new row: an engine that moves its last rows into the freed ones). Returns
        the finished requests."""
        finished = self.request[done]
        if not len(finished):
            return finished
        self.admit_blocked = False
        self.kv_free += total(self.reserved[done])
        self.free_slots.extend(self.active[done].tolist())
        rows = (~done).nonzero()[0] if order is None else np.asarray(order, dtype=np.int64)
        self.active, self.request, self.remaining = self.active[rows], self.request[rows], self.remaining[rows]
        self.context, self.draft_missing = self.context[rows], self.draft_missing[rows]
        self.reserved = self.reserved[rows]
        return finished
