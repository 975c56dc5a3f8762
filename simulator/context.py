"""Acceptance that changes with context: any parametric model with every drafted token's acceptance scaled by a
factor of the sequence's context (``SPEC@context:C1=F1,C2=F2,...``, parsed by `simulator.acceptance`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import SpecsimError
from .acceptance import Acceptance, AcceptanceStream


@dataclass(frozen=True, repr=False, eq=False)
class ContextDependent(Acceptance):
    """`base` at every context scaled by a factor on each drafted token's acceptance (``SPEC@context:C=F,...``):
    F(c) interpolated linearly between the points and flat beyond them. The model itself (``chain_pmf`` and the
    rest) is the base, i.e. at factor 1; ``at_context`` gives it at a context. Scaled models are cached per context
    rounded to ``quantum`` tokens, which is also the resolution the simulators use."""

    base: Acceptance
    contexts: tuple[float, ...]
    factors: tuple[float, ...]
    quantum: int = 64
    _cache: dict[int, Acceptance] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.base, ContextDependent):
            raise SpecsimError("give one @context: factor table per acceptance model")
        if not self.contexts or len(self.contexts) != len(self.factors):
            raise SpecsimError("@context: needs CONTEXT=FACTOR pairs, e.g. iid:0.75@context:1024=1,4096=0.7")
        if not all(np.isfinite(self.contexts)) or list(self.contexts) != sorted(set(self.contexts)) or \
                self.contexts[0] < 0:
            raise SpecsimError(f"@context: contexts must increase from >= 0, got {list(self.contexts)}")
        if any(not (0.0 <= f <= 100.0 and np.isfinite(f)) for f in self.factors):
            raise SpecsimError(f"@context: factors must lie in [0, 100], got {list(self.factors)}")
        self.base.scaled(0.5)  # refuses a base that cannot scale
        first = float(self.base.chain_pmf(1)[1])  # P(the first drafted token is accepted): the base's acceptance
        worst = max(range(len(self.factors)), key=lambda i: self.factors[i])
        if first * self.factors[worst] > 1.0 + 1e-9:
            raise SpecsimError(f"@context: factor {self.factors[worst]:g} at context {self.contexts[worst]:g} takes "
                               f"{self.base.spec}'s acceptance {first:.3g} to {first * self.factors[worst]:.3g}, above "
                               f"1: a factor scales a probability; keep every factor at most {1 / first:.3g}")

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"{self.base.spec}@context:" + ",".join(f"{c:g}={f:.4g}" for c, f in zip(self.contexts, self.factors))

    @property
    def ranks(self) -> tuple[float, ...] | None:  # type: ignore[override]
        return self.base.ranks

    @property
    def measured_up_to_k(self) -> int | None:
        return self.base.measured_up_to_k

    def context_factor(self, context: float) -> float:
        return float(np.interp(context, self.contexts, self.factors))

    def at_context(self, context: float) -> Acceptance:
        cell = int(context // self.quantum)
        model = self._cache.get(cell)
        if model is None:
            model = self._cache[cell] = self.base.scaled(self.context_factor((cell + 0.5) * self.quantum))
        return model

    def chain_pmf(self, k: int) -> np.ndarray:
        return self.base.chain_pmf(k)

    def sample_chain(self, k: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.base.sample_chain(k, rng, size)

    def stream(self, rng: np.random.Generator, stationary: bool = False) -> AcceptanceStream:
        return self.base.stream(rng, stationary)


def with_context(model: Acceptance, table: str) -> ContextDependent:
    """`model` with the factor table of a ``@context:C1=F1,C2=F2,...`` suffix (given without the ``@``)."""
    kind, _, body = table.partition(":")
    pairs = [p.partition("=") for p in body.split(",") if p.strip()]
    try:
        if kind.strip().lower() != "context" or not pairs or any(not eq for _, eq, _ in pairs):
            raise ValueError
        points = sorted((float(c), float(f)) for c, _, f in pairs)
    except ValueError:
        raise SpecsimError(f"@{table!r} is not @context:CONTEXT=FACTOR,..., e.g. iid:0.75@context:1024=1,4096=0.7"
                           ) from None
    return ContextDependent(model, tuple(c for c, _ in points), tuple(f for _, f in points))


@dataclass(frozen=True)
class ContextDecay:
    """Acceptance against context as a logistic step: alpha(c) = low + (high - low) / (1 + exp((c - c50) / width)).
    Flat at `high` while the context is short, falling to `low` around `c50` over a few `width`s: a model pushed
    past the context it was trained on (the built-in pair at ~1.2x its 256 training tokens), and, with c50 beyond
    the range measured, the slow decline engines report (vLLM #47602)."""

    high: float
    low: float
    c50: float
    width: float

    def alpha(self, context: np.ndarray | float) -> np.ndarray:
        z = np.clip((np.asarray(context, dtype=float) - self.c50) / self.width, -60.0, 60.0)
        return self.low + (self.high - self.low) / (1.0 + np.exp(z))

    def table(self, reference: float, contexts: np.ndarray) -> str:
        """A ``context:C=F,...`` table (for `with_context`): alpha at each context over alpha at `reference`."""
        base = float(self.alpha(reference))
        return "context:" + ",".join(f"{c:.0f}={float(self.alpha(c)) / base:.4f}" for c in contexts)


def fit_decay(contexts: np.ndarray, alpha: np.ndarray, weights: np.ndarray | None = None) -> ContextDecay:
    """Least-squares logistic step through (context, alpha): for each (c50, width) on a grid the levels are linear
    least squares, and the best grid point is refined on a finer grid around it. Needs three points; with fewer
    distinct levels than that the fit is flat (high = low = the weighted mean)."""
    c = np.asarray(contexts, dtype=float)
    a = np.asarray(alpha, dtype=float)
    w = np.ones_like(a) if weights is None else np.asarray(weights, dtype=float)
    if c.size < 3 or c.size != a.size or c.size != w.size:
        raise SpecsimError(f"a context decay needs at least three (context, alpha) points; got {c.size}")
    span = float(c.max() - c.min())
    mean = float(np.average(a, weights=w))
    best = (float(np.average((a - mean) ** 2, weights=w)), ContextDecay(mean, mean, float(c.max()) * 2, span))
    sw = np.sqrt(w)

    def search(c50s: np.ndarray, widths: np.ndarray) -> None:
        nonlocal best
        for c50 in c50s:
            for width in widths:
                s = 1.0 / (1.0 + np.exp(np.clip((c - c50) / width, -60.0, 60.0)))  # 1 short, 0 long
                X = np.stack([s, 1.0 - s], axis=1)  # alpha = high * s + low * (1 - s)
                (high, low), *_ = np.linalg.lstsq(X * sw[:, None], a * sw, rcond=None)
                high, low = float(np.clip(high, 0.0, 1.0)), float(np.clip(low, 0.0, 1.0))
                sse = float(np.average((a - (high * s + low * (1 - s))) ** 2, weights=w))
                if sse < best[0] - 1e-15:
                    best = (sse, ContextDecay(high, low, float(c50), float(width)))

    step = span / 64
    search(np.linspace(c.min() - span / 4, c.max() + span / 4, 97), np.geomspace(max(step, 1.0), span, 24))
    d = best[1]
    search(np.linspace(d.c50 - 2 * step, d.c50 + 2 * step, 41), np.geomspace(d.width / 2, d.width * 2, 41))
    return best[1]
