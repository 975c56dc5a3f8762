"""Accepted lengths for a whole batch at once, each sequence following its own acceptance process.

The serving simulator draws A for every sequence in every step; a Python call per sequence would dominate its run
time, so these samplers keep per-sequence state in arrays indexed by the engine's batch slots and draw a step for
many slots in a few numpy operations. Each one follows the same law as its model's scalar ``stream`` (and, for a
fixed k, converges to its ``chain_pmf``):

- stateless models (iid, positional, ranks, measured probability traces): independent draws from ``chain_pmf(k)``;
- ``beta``: an alpha per sequence, drawn when the sequence is admitted;
- ``markov`` and ``hmm``: the hidden state per sequence, carried across steps;
- greedy ``trace``: a (request, position) cursor per sequence walking a real trace.

Trees draw from the per-rank model (every node's j-th ranked child accepted with probability r_j, exclusive), which
has no state across steps.

``draw_steps`` draws m consecutive steps of the same candidate at once (the serving simulator's bulk advance between
events that change the batch); ``keep`` then commits the per-sequence state after the first n of them, so that steps
drawn past a stopping time (a completion, an arrival, a policy switch) leave no trace. The draws after a stopping time
are independent of those before it, so discarding them leaves every sequence's law unchanged.
"""

from __future__ import annotations

import numpy as np

from . import SpecsimError
from .acceptance import (
    Acceptance,
    BetaAcceptance,
    HiddenChain,
    WithRanks,
)
from .context import ContextDependent
from .replay import TraceAcceptance
from .sweep import Candidate
from .trees import Ranks, Tree, rank_acceptance


class BatchSampler:
    """Stateless: every step an independent draw from the model's ``chain_pmf(k)``.

    ``factor`` (default 1): every drafted token's acceptance scaled by it, the model's context dependence at the
    batch's context (``Acceptance.scaled``); stateful samplers scale their per-sequence probabilities."""

    def __init__(self, acceptance: Acceptance, slots: int, rng: np.random.Generator) -> None:
        self.acceptance = acceptance.base if isinstance(acceptance, ContextDependent) else acceptance
        self.rng = rng
        self.slots = slots
        self.factor = 1.0
        self.context: ContextDependent | None = None  # where the factor comes from (set by batch_sampler)
        self._cdf: dict[tuple[int, float], np.ndarray] = {}
        self._trees: dict[tuple[Tree, float], _TreeTable] = {}

    def admit(self, slots: np.ndarray, requests: np.ndarray | None = None) -> None:
        """New sequences take these slots (state, if any, starts afresh); `requests`: the workload's index of each
        (a trace replayed by request follows it)."""

    def at_context(self, context_mean: float) -> None:
        """Set the factor for a batch at this mean context (the model's cell of ``quantum`` tokens)."""
        if self.context is not None:
            q = self.context.quantum
            self.factor = self.context.context_factor((int(context_mean // q) + 0.5) * q)

    def draw(self, slots: np.ndarray, k: int) -> np.ndarray:
        """A for one step of k drafts, for each sequence in `slots`."""
        if k == 0:
            return np.zeros(len(slots), dtype=np.int64)
        return self._chain_cdf(k).searchsorted(self.rng.random(len(slots)), side="right")

    def _chain_cdf(self, k: int) -> np.ndarray:
        cdf = self._cdf.get((k, self.factor))
        if cdf is None:
            cdf = np.cumsum(self.acceptance.scaled(self.factor).chain_pmf(k))
            cdf[-1] = np.inf  # rounding never leaves u above the last bin
            self._cdf[(k, self.factor)] = cdf
        return cdf

    def draw_tree(self, slots: np.ndarray, tree: Tree) -> np.ndarray:
        """A for one step drafting `tree`: the accepted path's length."""
        return self._tree_table(tree).draw(len(slots), self.rng)

    def _tree_table(self, tree: Tree) -> _TreeTable:
        table = self._trees.get((tree, self.factor))
        if table is None:
            ranks = self.acceptance.scaled(self.factor).ranks
            if ranks is None:
                raise ValueError(f"tree {tree.label} needs per-rank acceptance")
            table = self._trees[(tree, self.factor)] = _TreeTable(tree, ranks)
        return table

    def draw_steps(self, slots: np.ndarray, candidate: Candidate, m: int) -> np.ndarray:
        """A for m consecutive steps drafting `candidate`, shape (m, len(slots)); follow with ``keep``."""
        if candidate.tree is not None:
            return self._tree_table(candidate.tree).draw(m * len(slots), self.rng).reshape(m, len(slots))
        return self._chain_steps(slots, candidate.k or 0, m)

    def _chain_steps(self, slots: np.ndarray, k: int, m: int) -> np.ndarray:
        if k == 0:
            return np.zeros((m, len(slots)), dtype=np.int64)
        return self._chain_cdf(k).searchsorted(self.rng.random((m, len(slots))), side="right")  # (the method:
        # np.searchsorted's wrapper costs a microsecond, and this runs per event)

    def keep(self, slots: np.ndarray, n: int) -> None:
        """Commit the state after the first n steps of the last ``draw_steps`` (stateless: nothing to do)."""

    def draw_steps_after(self, slots: np.ndarray, lead: Candidate, candidate: Candidate, m: int) -> np.ndarray:
        """A for a step drafting `lead` (kept) and then m - 1 steps drafting `candidate`, shape (m, len(slots));
        follow with ``keep`` of the later steps."""
        if type(self) is BatchSampler and lead.k and candidate.k:  # two chains: one draw of uniforms, the same
            u = self.rng.random((m, len(slots)))  # stream as a row and then m - 1 rows
            accepted = self._chain_cdf(candidate.k).searchsorted(u, side="right")
            accepted[0] = self._chain_cdf(lead.k).searchsorted(u[0], side="right")
            return accepted
        first = self.draw_steps(slots, lead, 1)
        self.keep(slots, 1)
        return np.concatenate([first, self.draw_steps(slots, candidate, m - 1)])


class _TreeTable:
    """Per node, its children ordered by rank with cumulative acceptance thresholds (padded with +inf)."""

    def __init__(self, tree: Tree, ranks: Ranks) -> None:
        n = tree.n_nodes + 1
        kids: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for i, (parent, rank) in enumerate(zip(tree.parents, tree.ranks), 1):
            kids[parent].append((rank, i))
        width = max(1, max(len(c) for c in kids))
        self.child = np.zeros((n, width), dtype=np.int64)
        self.cum = np.full((n, width), np.inf)
        for node, children in enumerate(kids):
            total = 0.0
            for j, (rank, child) in enumerate(sorted(children)):
                total += rank_acceptance(ranks, tree.depths[child - 1], rank)
                self.child[node, j], self.cum[node, j] = child, total
        self.depth = tree.depth

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        node = np.zeros(n, dtype=np.int64)
        accepted = np.zeros(n, dtype=np.int64)
        alive = np.ones(n, dtype=bool)
        for _ in range(self.depth):
            u = rng.random(n)
            j = (u[:, None] >= self.cum[node]).sum(axis=1)  # first child whose cumulative threshold exceeds u
            j_clipped = np.minimum(j, self.cum.shape[1] - 1)
            ok = alive & (j < self.cum.shape[1]) & np.isfinite(self.cum[node, j_clipped])
            accepted += ok
            node = np.where(ok, self.child[node, j_clipped], node)
            alive = ok
        return accepted


class BetaSampler(BatchSampler):
    """A per-sequence alpha ~ Beta(a, b), fixed for the sequence's life; steps are i.i.d. given it."""

    def __init__(self, acceptance: BetaAcceptance, slots: int, rng: np.random.Generator,
                 ranks_from: Acceptance | None = None) -> None:
        super().__init__(ranks_from or acceptance, slots, rng)
        self.model = acceptance
        self.alpha = np.full(slots, acceptance.a / (acceptance.a + acceptance.b))
        self.model_factor = getattr(acceptance, "factor", 1.0)  # a Beta already scaled (ScaledBetaAcceptance)

    def admit(self, slots: np.ndarray, requests: np.ndarray | None = None) -> None:
        self.alpha[slots] = self.rng.beta(self.model.a, self.model.b, size=len(slots))

    def _alpha(self, slots: np.ndarray) -> np.ndarray:
        f = self.factor * self.model_factor
        return self.alpha[slots] if f == 1.0 else np.minimum(self.alpha[slots] * f, 1.0)

    def draw(self, slots: np.ndarray, k: int) -> np.ndarray:
        if k == 0:
            return np.zeros(len(slots), dtype=np.int64)
        return _leading_successes(self._alpha(slots), self.rng.random(len(slots)), k)

    def _chain_steps(self, slots: np.ndarray, k: int, m: int) -> np.ndarray:
        if k == 0:
            return np.zeros((m, len(slots)), dtype=np.int64)
        return _leading_successes(self._alpha(slots), self.rng.random((m, len(slots))), k)


def _leading_successes(alpha: np.ndarray, u: np.ndarray, k: int) -> np.ndarray:
    """Leading successes of Bernoulli(alpha) among k, from uniforms u: P(A >= i) = alpha^i, so
    A = floor(log u / log alpha) capped at k (k where alpha is 1, 0 where it is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.floor(np.log(u) / np.log(alpha))
    a = np.where(alpha >= 1.0, k, np.nan_to_num(a, nan=0.0, posinf=k, neginf=0.0))
    return np.minimum(a, k).astype(np.int64)


class HiddenChainSampler(BatchSampler):
    """The hidden state per sequence, moving one token position at a time (as ``HiddenChain.stream``: the emitted
    token sits at the last examined position; the next step's first draft is one position further)."""

    def __init__(self, acceptance: HiddenChain, slots: int, rng: np.random.Generator,
                 ranks_from: Acceptance | None = None) -> None:
        super().__init__(ranks_from or acceptance, slots, rng)
        self.model = acceptance
        self.state = np.zeros(slots, dtype=np.int64)
        self.alphas = acceptance.alphas
        self.cum = np.cumsum(acceptance.transition, axis=1)  # next state: first column whose cumsum exceeds u
        self.pi = np.cumsum(acceptance.token_stationary)
        self.top = acceptance.n_states - 1
        self._kernels: dict[tuple[int, float], np.ndarray] = {}
        self._pending: np.ndarray | None = None  # per-step start states of the last draw_steps

    def admit(self, slots: np.ndarray, requests: np.ndarray | None = None) -> None:
        self.state[slots] = (self.rng.random(len(slots))[:, None] >= self.pi).sum(axis=1).clip(max=self.top)

    def _advance(self, s: np.ndarray) -> np.ndarray:
        return (self.rng.random(len(s))[:, None] >= self.cum[s]).sum(axis=1).clip(max=self.top)

    def draw(self, slots: np.ndarray, k: int) -> np.ndarray:
        s = self.state[slots]
        accepted = np.zeros(len(slots), dtype=np.int64)
        alive = np.ones(len(slots), dtype=bool)
        alphas = self.alphas if self.factor == 1.0 else np.minimum(self.alphas * self.factor, 1.0)
        for _ in range(k):
            ok = alive & (self.rng.random(len(slots)) < alphas[s])
            accepted += ok
            s = np.where(ok, self._advance(s), s)
            alive = ok
        self.state[slots] = self._advance(s)
        return accepted

    def _kernel(self, k: int) -> np.ndarray:
        """Per start state, the cdf over the joint outcome (A, next step's start state), flattened as
        A * n_states + state: the law of one ``draw`` from that state, so that a step is one categorical draw."""
        table = self._kernels.get((k, self.factor))
        if table is None:
            alphas, T = np.minimum(self.model.alphas * self.factor, 1.0), self.model.transition
            f = np.eye(self.model.n_states)  # f[s0, s]: all drafts so far accepted, current token in state s
            joint = []
            for _ in range(k):
                joint.append((f * (1.0 - alphas)) @ T)  # rejected here; the next step starts one position further
                f = (f * alphas) @ T
            joint.append(f @ T)  # all k accepted: the bonus token's position, then one further
            table = np.cumsum(np.concatenate(joint, axis=1), axis=1)
            table[:, -1] = np.inf
            table = self._kernels[(k, self.factor)] = table
        return table

    def _chain_steps(self, slots: np.ndarray, k: int, m: int) -> np.ndarray:
        if k == 0:
            return np.zeros((m, len(slots)), dtype=np.int64)
        cdf, n = self._kernel(k), self.model.n_states
        u = self.rng.random((m, len(slots)))
        outcome = np.empty((m, len(slots)), dtype=np.int64)
        states = np.empty((m + 1, len(slots)), dtype=np.int64)
        states[0] = s = self.state[slots]
        for j in range(m):
            outcome[j] = o = (u[j][:, None] >= cdf[s]).sum(axis=1)
            states[j + 1] = s = o % n
        self._pending = states
        return outcome // n

    def keep(self, slots: np.ndarray, n: int) -> None:
        if self._pending is not None:
            self.state[slots] = self._pending[n]
            self._pending = None


class TraceSampler(BatchSampler):
    """Each sequence walks a real greedy trace from a random request's start: a step of k drafts at position t
    emits min(yields[t], k + 1) tokens; a sequence that runs off its trace continues on another random one.
    A trace replayed by request (`TraceAcceptance.by_request`): workload request i walks the i-th trace from its
    start, and past its end accepts nothing (its request has no more measured positions)."""

    def __init__(self, acceptance: TraceAcceptance, slots: int, rng: np.random.Generator,
                 ranks_from: Acceptance | None = None) -> None:
        super().__init__(ranks_from or acceptance, slots, rng)
        lengths = np.array([len(y) for y in acceptance.yields], dtype=np.int64)
        self.by_request = acceptance.by_request
        keep = lengths > 0 if not self.by_request else np.ones(len(lengths), dtype=bool)  # request i: trace i
        self.flat = np.concatenate([y for y in acceptance.yields if len(y)]).astype(np.int64)
        self.start = np.concatenate([[0], np.cumsum(lengths[keep])[:-1]])
        self.length = lengths[keep]
        self.trace = np.zeros(slots, dtype=np.int64)
        self.pos = np.zeros(slots, dtype=np.int64)
        self._pending: tuple[np.ndarray, np.ndarray] | None = None  # (trace, position) at each drawn step's start

    def admit(self, slots: np.ndarray, requests: np.ndarray | None = None) -> None:
        if self.by_request:
            if requests is None or len(requests) and int(np.max(requests)) >= len(self.length):
                raise SpecsimError(f"trace {self.acceptance.spec} replays {len(self.length)} requests by request; "
                                   "the workload holds more (one trace line per request, in send order)")
            self.trace[slots] = requests
        else:
            self.trace[slots] = self.rng.integers(len(self.length), size=len(slots))
        self.pos[slots] = 0

    def draw(self, slots: np.ndarray, k: int) -> np.ndarray:
        ended = self.pos[slots] >= self.length[self.trace[slots]]
        if self.by_request:  # past its measured positions a request accepts nothing
            at = np.minimum(self.pos[slots], self.length[self.trace[slots]] - 1)
            emitted = np.where(ended, 1, np.minimum(self.flat[self.start[self.trace[slots]] + at], k + 1))
            self.pos[slots] += emitted
            return emitted - 1
        if ended.any():
            self.admit(slots[ended])
        emitted = np.minimum(self.flat[self.start[self.trace[slots]] + self.pos[slots]], k + 1)
        self.pos[slots] += emitted
        return emitted - 1

    def _chain_steps(self, slots: np.ndarray, k: int, m: int) -> np.ndarray:
        out = np.empty((m, len(slots)), dtype=np.int64)
        trace, pos = np.empty_like(out), np.empty_like(out)
        for j in range(m):
            trace[j], pos[j] = self.trace[slots], self.pos[slots]
            out[j] = self.draw(slots, k)
        self._pending = (trace, pos)
        return out

    def keep(self, slots: np.ndarray, n: int) -> None:
        if self._pending is not None and n < len(self._pending[0]):
            self.trace[slots], self.pos[slots] = self._pending[0][n], self._pending[1][n]
        self._pending = None


def batch_sampler(acceptance: Acceptance, slots: int, rng: np.random.Generator) -> BatchSampler:
    """The sampler that follows `acceptance` per sequence (a measured model's chain part decides; its per-rank
    vector stays available for trees)."""
    sampler = _sampler(acceptance.base if isinstance(acceptance, ContextDependent) else acceptance, slots, rng)
    sampler.context = acceptance if isinstance(acceptance, ContextDependent) else None
    return sampler


def _sampler(acceptance: Acceptance, slots: int, rng: np.random.Generator) -> BatchSampler:
    chain = acceptance.chain if isinstance(acceptance, WithRanks) else acceptance
    if isinstance(chain, BetaAcceptance):
        return BetaSampler(chain, slots, rng, acceptance)
    if isinstance(chain, HiddenChain):
        return HiddenChainSampler(chain, slots, rng, acceptance)
    if isinstance(chain, TraceAcceptance):
        return TraceSampler(chain, slots, rng, acceptance)
    return BatchSampler(acceptance, slots, rng)
