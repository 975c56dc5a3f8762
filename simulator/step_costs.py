"""The cost of every step a serving engine takes, from the cost model: a decode step of a batch at a mean context
with a draft shape (its grid over mean contexts, interpolated), the draft's catch-up, switching draft lengths, a
prefill, and how many KV-cache tokens fit beside the weights. `simulator.serving` and the real served loop charge
their steps with it."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from .cost import CostModel
from .drafts import Draft, as_draft
from .policies import PLAIN, Policy, StepDurations
from .specs import ModelSpec
from .sweep import Candidate, step_time

T = TypeVar("T", float, np.ndarray)

try:  # np.interp's compiled core for real values (its Python wrapper cost more than the interpolation: run per step)
    from numpy._core.multiarray import interp as _interp
except ImportError:  # numpy < 2
    _interp = np.interp


def always_proposes(k: int) -> float:
    """A draft that proposes on every step (a module-level function: the step costs travel to worker processes)."""
    return 1.0


class StepCosts(StepDurations):
    """Durations of decode and prefill steps from the cost model, cached for the simulator's inner loop.

    Decode steps are evaluated at mean contexts on a grid of ``context_step`` tokens and interpolated linearly;
    prefill steps at the mean prompt length rounded up to ``prompt_step`` tokens. The view ``for_policy`` gives an
    engine started with speculation its engine's tax (`SpeculationTax`): plain steps cost more, and so does a step
    that changes the draft length (``switch_s``)."""

    def __init__(self, cost: CostModel, target: ModelSpec, draft: Draft | ModelSpec | None, context_step: int = 32,
                 prompt_step: int = 16, proposal_rate: Callable[[int], float] | None = None) -> None:
        self.cost, self.target, self.draft = cost, target, as_draft(draft)
        # P(a step proposes for a sequence) by draft depth: a model-free draft's steps without a proposal are plain
        # (`Acceptance.proposal_rate`; the acceptance's own, given with it)
        self.proposal_rate = proposal_rate or always_proposes
        self.context_step, self.prompt_step = context_step, prompt_step
        self.tax = cost.hardware.speculation_tax
        self.speculating = False  # this view prices an engine started with speculation
        self._decode: dict[tuple[int, str, int, bool], float] = {}  # (batch, candidate, context cell, taxed)
        self._prefill: dict[tuple[int, int, bool], float] = {}
        self._sync: dict[tuple[int, int, int], float] = {}
        # per (batch, candidate): the grid from cell lo to hi, as (lo, hi, contexts, durations)
        self._grids: dict[tuple[int, str, bool], tuple[int, int, np.ndarray, np.ndarray]] = {}

    def for_policy(self, policy: Policy) -> StepCosts:
        """The view an engine running `policy` sees (the caches are shared): taxed if the policy speculates."""
        speculating = policy.uses_draft and self.tax.any
        if speculating == self.speculating:
            return self
        view = copy.copy(self)
        view.speculating = speculating
        return view

    def _grid(self, batch: int, candidate: Candidate, i: int, taxed: bool | None = None) -> float:
        taxed = self.speculating and candidate.is_plain if taxed is None else taxed
        key = (batch, candidate.label, i, taxed)
        t = self._decode.get(key)
        if t is None:
            t = step_time(self.cost, self.target, self.draft, batch, i * self.context_step, candidate,
                          self.proposal_rate(candidate.shape.depth)).total_s
            self._decode[key] = t = t * (1 + self.tax.off_fraction(batch)) if taxed else t
        return t

    def switch_s(self, batch: int, context_mean: float) -> float:
        """What a step pays for drafting a different length from the step before it."""
        if not (self.speculating and self.tax.switch_fraction):
            return 0.0
        return self.tax.switch_fraction * self._grid(batch, PLAIN, int(context_mean // self.context_step), False)

    def decode_s(self, batch: int, context_mean: float, candidate: Candidate) -> float:
        i, rest = divmod(context_mean, self.context_step)
        t0 = self._grid(batch, candidate, int(i))
        if rest == 0:
            return t0
        return t0 + (self._grid(batch, candidate, int(i) + 1) - t0) * rest / self.context_step

    def decode_many_s(self, batch: int, context_means: np.ndarray, candidate: Candidate) -> np.ndarray:
        """``decode_s`` at each of `context_means`, which never decrease (the same linear interpolation between
        the same grid points)."""
        lo, hi = int(context_means[0] // self.context_step), int(context_means[-1] // self.context_step) + 1
        key = (batch, candidate.label, self.speculating)
        known = self._grids.get(key)
        if known is None or lo < known[0] or hi > known[1]:
            if known is not None:
                lo, hi = min(lo, known[0]), max(hi, known[1])
            cells = range(lo, hi + 1)
            known = self._grids[key] = (lo, hi, np.array([i * self.context_step for i in cells], dtype=float),
                                        np.array([self._grid(batch, candidate, i) for i in cells]))
        return _interp(context_means, known[2], known[3], None, None)

    def draft_sync_s(self, batch: int, tokens_mean: float, context_mean: float) -> float:
        """One draft pass over `tokens_mean` tokens per sequence that the draft's caches miss."""
        tokens = max(1, math.ceil(tokens_mean))
        key = (batch, tokens, int(context_mean // self.context_step))
        t = self._sync.get(key)
        if t is None:
            assert self.draft is not None
            module = self.draft.module if self.draft.kind == "model" else None  # only a draft model lags behind
            t = self._sync[key] = 0.0 if module is None else self.cost.pass_time_s(module, batch, tokens,
                                                                                  key[2] * self.context_step)
        return t

    def step_s(self, batch: int, context: float, candidate: Candidate, previous: Candidate | None,
               draft_sync: str | None, draft_missing_mean: float = 0.0) -> float:
        """One decode step as the reference mode charges it: the step at `context`, a switch from `previous`, and
        the draft's upkeep (`draft_sync` None: no draft loaded; "eager": a plain step runs it over the current
        token too; "lazy": a speculative step first catches up on the `draft_missing_mean` tokens it lacks)."""
        t = self.decode_s(batch, context, candidate)
        if previous is not None and candidate != previous:
            t += self.switch_s(batch, context)
        if draft_sync == "eager" and candidate.is_plain:
            t += self.draft_sync_s(batch, 1, context)
        elif draft_sync is not None and not candidate.is_plain and draft_missing_mean > 0:
            t += self.draft_sync_s(batch, draft_missing_mean, context)
        return t

    def draft_sync_many_s(self, batch: int, context_means: np.ndarray) -> np.ndarray:
        """``draft_sync_s`` of one token per sequence at each of `context_means`."""
        return np.array([self.draft_sync_s(batch, 1, c) for c in context_means.tolist()])

    def engine_fixed_s(self, candidate: Candidate) -> float:
        """The engine's own work in a step of `candidate` that does not grow with the batch (its loop, the accept
        rule's fixed part): paid once by a step however many passes its batch is split into."""
        e = self.cost.overheads.engine
        if candidate.is_plain:
            return e.plain.fixed_s
        accept = e.tree_accept if candidate.tree is not None else e.chain_accept
        return max(e.verify.fixed_s - e.pass_draw.fixed_s, 0.0) + accept.fixed_s

    def over_runs(self, runs: Sequence[int], candidate: Candidate, price: Callable[[int], T]) -> T:
        """A step whose batch runs as one pass per run of `runs` sequences (`scheduler.slot_runs`): each run priced
        by `price` as a step of its own, the engine's fixed work (`engine_fixed_s`) counted once."""
        if len(runs) == 1:
            return price(runs[0])
        total = price(runs[0])
        for r in runs[1:]:
            total = total + price(r)
        return total - (len(runs) - 1) * self.engine_fixed_s(candidate)

    def riding_prefill_s(self, decode_rows: int, prompt_tokens: int) -> float:
        """What `prompt_tokens` new prompt tokens add to a target pass that already computes `decode_rows` rows
        (an engine that puts new prompts into the running batch's pass): the pass's time over the rows it grows to
        less its time over the rows it had, both as one packed sequence at context 0 (the decode rows' own
        attention over their caches is in the decode step already)."""
        tokens = self.prompt_step * math.ceil(prompt_tokens / self.prompt_step)
        key = (-decode_rows, tokens, False)  # negative: apart from prefill_s's (n_requests, tokens) keys
        t = self._prefill.get(key)
        if t is None:
            t = self._prefill[key] = max(0.0, self.cost.pass_time_s(self.target, 1, decode_rows + tokens, 0)
                                         - self.cost.pass_time_s(self.target, 1, decode_rows, 0)
                                         ) * self.cost.prefill_scale
        return t

    def prefill_s(self, n_requests: int, prompt_tokens_mean: float, with_draft: bool) -> float:
        """One pass of the target (and the draft) over `n_requests` prompts, and the engine's own work around it (times
        the cost model's `prefill_scale`)."""
        tokens = self.prompt_step * math.ceil(prompt_tokens_mean / self.prompt_step)
        key = (n_requests, tokens, with_draft)
        t = self._prefill.get(key)
        if t is None:
            t = self.cost.pass_time_s(self.target, n_requests, tokens, 0) + self.cost.overheads.engine.prefill.at(
                n_requests)
            if with_draft and self.draft is not None and self.draft.module is not None:
                t += self.cost.pass_time_s(self.draft.module, n_requests, tokens, 0)
            t *= self.cost.prefill_scale
            self._prefill[key] = t
        return t


def kv_capacity_tokens(cost: CostModel, target: ModelSpec, draft: Draft | ModelSpec | None) -> int:
    """Tokens of KV cache (target's plus draft's per token) that fit in device memory after both models' weights."""
    hw = cost.hardware
    free = hw.mem_capacity_bytes * hw.usable_memory_fraction - target.resident_weight_bytes
    per_token = target.kv_bytes_per_token
    if draft is not None:
        free -= draft.resident_weight_bytes
        per_token += draft.kv_bytes_per_token
    return max(int(free // per_token), 0)
