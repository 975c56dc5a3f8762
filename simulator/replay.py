"""Acceptance replayed from traces: what a real run accepted, position by position.

- `TraceAcceptance`: a greedy trace (the per-request lines of ``data/acceptance-traces``: per position, the tokens one
  step starting there yields); exact for every k up to the lookahead it recorded.
- `ProbabilityTraceAcceptance`: a sampled measurement (per position, the probability sum_x min(p, q) that a token
  drafted there is accepted, as `calibrate.measure_acceptance` measures it); the distribution of A is the exact
  expectation
  over the steps' random starts.

Both pool the steps of whole requests walked from their starts, as a server's counters do (`simulator.acceptance`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import SpecsimError
from .acceptance import Acceptance, AcceptanceStream, check_k


@dataclass(frozen=True, repr=False, eq=False)
class TraceAcceptance(Acceptance):
    """Replay of a greedy acceptance trace.

    ``yields[r][t]`` is how many tokens a step starting at position t of request r emits with the draft's full
    lookahead. Under greedy decoding a step of k drafts emits exactly min(yields[t], k + 1), so the replay is exact
    for every k up to the lookahead.
    """

    yields: tuple[np.ndarray, ...]
    source: str = "trace"
    lookup: bool = False  # a model-free lookup's trace: a step that yielded one token is read as one with no proposal
    # request i of a served workload walks yields[i] (a benchmark's own requests replayed, `calibrate.bench_traces`);
    # else each sequence walks a random request's trace
    by_request: bool = False
    _pmf_cache: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    _starts: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.yields or all(len(y) == 0 for y in self.yields):
            raise SpecsimError(f"trace {self.source!r} holds no positions")
        if any((y < 1).any() for y in self.yields):
            raise SpecsimError(f"trace {self.source!r}: every per-position yield must be >= 1")

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"trace:{self.source}"

    @cached_property
    def max_k(self) -> int:
        """Largest k the trace can replay: the most tokens any step yielded, minus the bonus token."""
        return int(max(y.max() for y in self.yields if len(y))) - 1

    def replay(self, k: int) -> np.ndarray:
        """Accepted lengths of every step when each request is decoded from its start with chains of k."""
        k = check_k(k)
        if k > self.max_k:
            raise SpecsimError(f"trace {self.source!r} records lookaheads up to {self.max_k}; k={k} cannot be "
                               f"replayed (use k <= {self.max_k})")
        out: list[int] = []
        for y in self.yields:
            ys = y.tolist()
            t, n = 0, len(ys)
            while t < n:
                step = min(ys[t], k + 1)
                out.append(step - 1)
                t += step
        return np.asarray(out, dtype=int)

    def proposal_rate(self, k: int) -> float:
        """A lookup's trace (`lookup`) cannot tell a step that proposed nothing from one whose first drafted token
        was rejected: both yield one token. Read as no proposal (a plain step, the cheaper verification), so the
        rate is the share of steps that yielded more; for any other draft, 1."""
        return 1.0 - float(self.chain_pmf(min(k, self.max_k))[0]) if self.lookup else 1.0

    def chain_pmf(self, k: int) -> np.ndarray:
        if k not in self._pmf_cache:
            counts = np.bincount(self.replay(k), minlength=k + 1)
            self._pmf_cache[k] = counts / counts.sum()
        return self._pmf_cache[k]

    def step_starts(self, k: int) -> np.ndarray:
        """(request, position) of every step of the replay at k: what ``chain_pmf`` averages over."""
        if k not in self._starts:
            starts = []
            for r, y in enumerate(self.yields):
                ys, t = y.tolist(), 0
                while t < len(ys):
                    starts.append((r, t))
                    t += min(ys[t], k + 1)
            self._starts[k] = np.asarray(starts, dtype=int)
        return self._starts[k]

    def stream(self, rng: np.random.Generator, stationary: bool = False) -> AcceptanceStream:
        # From a request's start; or (stationary) from a step of the replay drawn uniformly at the first call's k,
        # so that a short run's steps are distributed as `chain_pmf`'s.
        pos = [int(rng.integers(len(self.yields))), 0, stationary]

        def step(k: int) -> int:
            if pos[2]:
                starts = self.step_starts(min(k, self.max_k))
                pos[0], pos[1] = (int(v) for v in starts[int(rng.integers(len(starts)))])
                pos[2] = False
            y = self.yields[pos[0]]
            while pos[1] >= len(y):
                pos[0], pos[1] = int(rng.integers(len(self.yields))), 0
                y = self.yields[pos[0]]
            n = min(int(y[pos[1]]), k + 1)
            pos[1] += n
            return n - 1

        return step


@dataclass(frozen=True, repr=False, eq=False)
class ProbabilityTraceAcceptance(Acceptance):
    """Replay of a sampled-acceptance trace: alphas[r][t] is the probability that a token drafted at position t of
    request r is accepted (sum_x min(p, q)). Steps walk each request from its start; the distribution of A is the
    exact expectation over the random step starts (a forward recursion over positions)."""

    alphas: tuple[np.ndarray, ...]
    source: str = "measured"
    _pmf_cache: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"trace:{self.source}"

    def chain_pmf(self, k: int) -> np.ndarray:
        k = check_k(k)
        if k in self._pmf_cache:
            return self._pmf_cache[k]
        # All requests at once, padded: start[r, t] = P(a step of request r starts at position t).
        n = np.array([len(a) for a in self.alphas])
        width = int(n.max()) + k + 2
        a = np.zeros((len(n), width))
        for r, x in enumerate(self.alphas):
            a[r, :len(x)] = x
        start = np.zeros((len(n), width))
        start[:, 0] = 1.0
        total = np.zeros(k + 1)
        for t in range(max(int(n.max()) - k, 0)):
            w = start[:, t] * (t < n - k)  # only steps whose k drafts lie inside the trace
            alive = np.ones(len(n))
            for j in range(k):
                stop = w * alive * (1.0 - a[:, t + j])
                total[j] += stop.sum()
                start[:, t + j + 1] += stop
                alive = alive * a[:, t + j]
            total[k] += (w * alive).sum()
            start[:, t + k + 1] += w * alive
        pmf = total / total.sum() if total.sum() > 0 else np.eye(k + 1)[0]
        self._pmf_cache[k] = pmf
        return pmf
