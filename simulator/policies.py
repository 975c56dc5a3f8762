"""Speculation policies: what a serving engine drafts in each decoding step, given the batch it is about to run.

Spec strings (``parse_policies`` takes a comma-separated list of them):

- ``off`` - plain decoding (the draft is not even loaded, so its weights and KV cache free memory);
- ``fixed:K`` - a chain of K drafts every step;
- ``tree:B1,B2,...`` - a draft tree by branching per depth, every step;
- ``threshold:K@B`` - a chain of K while the batch is at most B sequences, plain decoding above;
- ``adaptive[:KMAX]`` - per step, the k in 0..KMAX (default 8) that maximises the goodput of this batch: expected
  tokens per step over the step's duration, both from the analytic model (SmartSpec, Liu et al. 2024, which uses
  the same ratio with an estimated acceptance rate).

Ties: a policy that finds plain decoding and speculation equally fast picks plain decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from . import SpecsimError
from .acceptance import Acceptance
from .limits import MAX_DRAFT_TOKENS, WHY_DRAFT
from .sweep import Candidate, tokens_per_pass
from .trees import parse_branching

PLAIN = Candidate(0)


class StepDurations:
    """What a policy may ask about the step it is choosing: its duration for this batch and context."""

    def decode_s(self, batch: int, context_mean: float, candidate: Candidate) -> float:
        raise NotImplementedError

    def draft_sync_s(self, batch: int, tokens_mean: float, context_mean: float) -> float:
        raise NotImplementedError

    def switch_s(self, batch: int, context_mean: float) -> float:
        """What a step pays for drafting a different length from the step before it (the engine's tax)."""
        return 0.0


class BatchState(NamedTuple):
    """What the engine knows about the batch it is about to step (a named tuple: built every step)."""

    batch: int
    context_mean: float  # cached tokens per sequence
    draft_missing_mean: float = 0.0  # tokens per sequence the draft's cache lacks (lazy sync)
    remaining_mean: float = 1.0  # output tokens per sequence still to generate
    draft_warm: bool = True  # the previous step speculated, so only newly admitted sequences lag
    previous: Candidate | None = None  # what the previous step drafted (None: no step yet)


@dataclass(frozen=True)
class Policy:
    label: str

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """Everything this policy may draft (the engine reserves KV-cache room for the largest)."""
        raise NotImplementedError

    @property
    def uses_draft(self) -> bool:
        return any(not c.is_plain for c in self.candidates)

    @property
    def lookahead_tokens(self) -> int:
        """KV-cache tokens a step may write beyond what it keeps: the largest verification pass."""
        return max(c.shape.verify_tokens for c in self.candidates)

    def choose(self, state: BatchState, durations: StepDurations) -> Candidate:
        raise NotImplementedError

    def warm(self, durations: StepDurations, batches: Sequence[int], contexts: Sequence[float]) -> None:
        """Make every choice at these batch sizes and mean contexts now (with the draft current, after each thing
        the policy may have drafted), so that a real engine's step pays a table look-up for its decision, as a
        serving engine's exported policy does, not the first evaluation of the cost model (ms each on a host)."""
        for b in batches:
            for c in contexts:
                for previous in (None, *self.candidates):
                    self.choose(BatchState(b, float(c), previous=previous), durations)

    def holds(self, state: BatchState, context_means: np.ndarray, durations: StepDurations, draft_lags: bool,
              chosen: Candidate | None = None) -> int:
        """How many of the coming steps of this batch, at these mean contexts (the first is `state`'s, and they
        never decrease), make the same choice as ``choose(state)`` (`chosen`, where the caller has it): the serving
        simulator advances that many in bulk. `draft_lags`: the choice is plain decoding and the draft's cache falls
        one token further behind every step. By default the choice depends on the batch size alone."""
        return len(context_means)


@dataclass(frozen=True)
class Off(Policy):
    label: str = "off"

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return (PLAIN,)

    def choose(self, state: BatchState, durations: StepDurations) -> Candidate:
        return PLAIN


@dataclass(frozen=True)
class Fixed(Policy):
    """The same chain or tree every step."""

    candidate: Candidate = PLAIN

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return (self.candidate,)

    def choose(self, state: BatchState, durations: StepDurations) -> Candidate:
        return self.candidate


@dataclass(frozen=True)
class Threshold(Policy):
    """A chain of k up to a batch size, plain decoding above it (vLLM's `speculative_disable_by_batch_size`)."""

    k: int = 0
    max_batch: int = 0

    @cached_property
    def candidates(self) -> tuple[Candidate, ...]:  # type: ignore[override]
        return (PLAIN, Candidate(self.k))

    def choose(self, state: BatchState, durations: StepDurations) -> Candidate:
        return self.candidates[1] if state.batch <= self.max_batch else PLAIN


@dataclass(frozen=True, eq=False)
class Adaptive(Policy):
    """Goodput-optimal k per step: the k in 0..k_max (plain decoding included) that emits the most tokens per second
    for this batch, E[A + 1](k) / T_step(B, c, k), both from the analytic model.

    Where the draft's cache lags (lazy sync), speculating also costs a catch-up pass C over the missing tokens.
    While the draft is warm (the last step speculated), C covers only the sequences admitted since, and recurs every
    step: the rate is E[A + 1] / (T_step + C). After plain steps C is a backlog paid once for the rest of the batch's
    life, R output tokens per sequence, i.e. R / E[A + 1] steps: the rate is E[A + 1] / (T_step + C E[A + 1] / R);
    and since the backlog is wasted if speculation stops again soon, a cold draft starts only where speculation beats
    plain decoding by ``switch_on_margin`` even before the catch-up (a hysteresis band: near the batch size where
    the two break even, the engine does not flip between them, paying the backlog each time).
    Where the engine charges for changing the draft length (``switch_s``), a steady step keeps the previous step's k
    unless the best k, paying the switch once over ``switch_horizon`` steps, still beats it (a second hysteresis).
    Step times are cached per batch size and context bucket of ``context_step`` tokens."""

    k_max: int = 8
    acceptance: Acceptance | None = None
    context_step: int = 64
    switch_on_margin: float = 0.3  # 0.05 flip-flops near saturation, 0.5 forgoes the gain at 0.8x capacity
    switch_horizon: int = 16  # steps over which a change of k must pay for its switch
    _table: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, int]] = field(default_factory=dict, repr=False)
    _loaded: dict[tuple, int] = field(default_factory=dict, repr=False)  # warm choices with a catch-up, by inputs
    _steady_choice: dict[tuple, int] = field(default_factory=dict, repr=False)  # by (costs, batch, cell, previous)

    @cached_property
    def candidates(self) -> tuple[Candidate, ...]:  # type: ignore[override]
        return tuple(Candidate(k) for k in range(self.k_max + 1))

    def _rates(self, batch: int, context_mean: float, durations: StepDurations) -> tuple[np.ndarray, np.ndarray, int]:
        """(E[A + 1], T_step, the best index with the draft's cache current) for k = 0..k_max at this batch and
        context bucket."""
        key = (id(durations), batch, int(context_mean // self.context_step))
        table = self._table.get(key)
        if table is None:
            assert self.acceptance is not None
            c = (key[2] + 0.5) * self.context_step
            at = self.acceptance.at_context(c)
            tokens = np.array([tokens_per_pass(cand, at) for cand in self.candidates])
            times = np.array([durations.decode_s(batch, c, cand) for cand in self.candidates])
            table = self._table[key] = (tokens, times, _first_best(tokens / times))
        return table

    def _steady(self, batch: int, cell: int, durations: StepDurations, previous: Candidate | None) -> int:
        """The choice with the draft's cache current, at this batch and context cell, after `previous`."""
        stay = previous.k if previous is not None and previous.tree is None else None
        key = (id(durations), batch, cell, stay)
        choice = self._steady_choice.get(key)
        if choice is None:
            tokens, times, choice = self._rates(batch, cell * self.context_step, durations)
            if stay is not None and stay <= self.k_max and stay != choice:
                switch = durations.switch_s(batch, (cell + 0.5) * self.context_step)
                if switch and tokens[stay] / times[stay] >= tokens[choice] / (times[choice] +
                                                                              switch / self.switch_horizon):
                    choice = stay
            self._steady_choice[key] = choice
        return choice

    def choose(self, state: BatchState, durations: StepDurations) -> Candidate:
        if state.draft_missing_mean == 0:
            cell = int(state.context_mean // self.context_step)
            return self.candidates[self._steady(state.batch, cell, durations, state.previous)]
        if not state.draft_missing_mean > 0:  # (negative or NaN: no catch-up to price)
            return self.candidates[self._rates(state.batch, state.context_mean, durations)[2]]
        catchup = durations.draft_sync_s(state.batch, state.draft_missing_mean, state.context_mean)
        # a cold draft's choice depends on the remaining length too (a new request's is its output length)
        key = (id(durations), state.batch, int(state.context_mean // self.context_step), catchup,
               None if state.draft_warm else state.remaining_mean)
        best = self._loaded.get(key, -1)
        if best < 0:
            if len(self._loaded) >= LOADED_CHOICES:  # bounded: remaining lengths can take many values
                self._loaded.clear()
            tokens, times, _ = self._rates(state.batch, state.context_mean, durations)
            best = self._loaded[key] = self._best_with_catchup(tokens, times, catchup, state)
        return self.candidates[best]

    def _best_with_catchup(self, tokens: np.ndarray, times: np.ndarray, catchup: float, state: BatchState) -> int:
        rates = tokens / times
        if state.draft_warm:
            loaded = tokens / (times + catchup)
        else:
            loaded = tokens / (times + catchup * tokens / max(state.remaining_mean, 1.0))
            loaded[rates < rates[0] * (1 + self.switch_on_margin)] = 0.0
        loaded[0] = rates[0]
        return _first_best(loaded)

    def holds(self, state: BatchState, context_means: np.ndarray, durations: StepDurations, draft_lags: bool,
              chosen: Candidate | None = None) -> int:
        if state.draft_missing_mean > 0 or draft_lags:
            return 1  # the catch-up term changes every step
        step = self.context_step
        first, last = int(float(context_means[0]) // step), int(float(context_means[-1]) // step)
        if first == last:
            return len(context_means)  # (Python floats: numpy scalars' arithmetic costs more than this test)
        if chosen is None:  # from the second step on, the previous step drafted this
            chosen = self.choose(state, durations)
        for cell in range(first + 1, last + 1):  # the contexts never fall: each new cell once, in order
            if self._steady(state.batch, cell, durations, chosen) != chosen.k:
                i = int(np.searchsorted(context_means, cell * step))  # the first step in this cell or past it
                if int(float(context_means[i]) // step) == cell:  # (a cell the steps skip over is no change)
                    return i
        return len(context_means)


LOADED_CHOICES = 1 << 16  # most choices with a catch-up an Adaptive policy remembers


def _first_best(rates: np.ndarray) -> int:
    """Index of the highest rate; ties (within rounding) go to the shorter draft, plain decoding first."""
    return int(np.flatnonzero(rates >= rates.max() * (1 - 1e-9))[0])


def parse_policy(text: str, acceptance: Acceptance, max_depth: int | None = None, drafter: str = "the draft"
                 ) -> Policy:
    """One policy from its spec string (see the module docstring). `max_depth`: the most positions `drafter` can
    draft in a step (Medusa's heads): a bare ``adaptive`` chooses k up to it (and says so in its label), a policy that
    asks for more is refused."""
    policy = _parse_policy(text, acceptance)
    if max_depth is None:
        return policy
    if isinstance(policy, Adaptive) and text.strip().lower() == "adaptive" and policy.k_max > max_depth:
        return Adaptive(f"adaptive:{max_depth}", max_depth, acceptance)
    deepest = max(c.shape.depth for c in policy.candidates)
    if deepest > max_depth:
        raise SpecsimError(f"policy {policy.label!r} drafts {deepest} positions a step but {drafter} fills at most "
                           f"{max_depth} (one per head): give --policy with k <= {max_depth}, e.g. "
                           f"off,fixed:{max_depth},adaptive")
    return policy


def _parse_policy(text: str, acceptance: Acceptance) -> Policy:
    s = text.strip()
    kind, _, body = s.partition(":")
    kind = kind.lower()
    try:
        if kind == "off" and not body:
            return Off()
        if kind == "fixed":
            k = _draft_length(int(body), s)
            return Fixed(f"fixed:{k}", Candidate(k)) if k else Off()
        if kind == "tree":
            tree = parse_branching(body)
            if acceptance.ranks is None:
                raise SpecsimError(f"policy {s!r} drafts a tree, which needs per-rank acceptance: give --acceptance "
                                   f"ranks:R1,R2,... or measured ({acceptance.spec} has none)")
            return Fixed(f"tree:{tree.label}", Candidate(None, tree))
        if kind == "threshold":
            k_text, at, b_text = body.partition("@")
            k, b = _draft_length(int(k_text), s), int(b_text)
            if not at or k < 1 or b < 1:
                raise ValueError
            return Threshold(f"threshold:{k}@{b}", k, b)
        if kind == "adaptive":
            k_max = _draft_length(int(body), s) if body else 8
            if k_max < 1:
                raise ValueError
            return Adaptive(f"adaptive:{k_max}" if body else "adaptive", k_max, acceptance)
    except SpecsimError:
        raise
    except ValueError:
        pass
    raise SpecsimError(f"policy {s!r} is not one of off, fixed:K, tree:B1,B2,..., threshold:K@BATCH or "
                       "adaptive[:KMAX] (K >= 0, BATCH >= 1, KMAX >= 1)")


def _draft_length(k: int, spec: str) -> int:
    if k < 0:
        raise ValueError
    if k > MAX_DRAFT_TOKENS:
        raise SpecsimError(f"policy {spec!r}: k = {k:,} is above the largest, {MAX_DRAFT_TOKENS}: {WHY_DRAFT}")
    return k


def parse_policies(text: str, acceptance: Acceptance, max_depth: int | None = None, drafter: str = "the draft"
                   ) -> list[Policy]:
    """``off,fixed:4,tree:4,2,2,1,threshold:4@64,adaptive``: bare numbers continue the tree before them
    (`max_depth`, `drafter`: as `parse_policy`)."""
    parts: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if piece.isdigit() and parts and parts[-1].lower().startswith("tree:"):
            parts[-1] += "," + piece
        elif piece:
            parts.append(piece)
    if not parts:
        raise SpecsimError("give at least one policy, e.g. off,fixed:4,threshold:4@64,adaptive")
    policies = [parse_policy(p, acceptance, max_depth, drafter) for p in parts]
    labels = [p.label for p in policies]
    if len(set(labels)) != len(labels):
        raise SpecsimError(f"policy list {text!r} names the same policy twice")
    return policies
