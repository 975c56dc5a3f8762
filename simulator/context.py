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
        if list(self.contexts) != sorted(set(self.contexts)) or self.contexts[0] < 0:
            raise SpecsimError(f"@context: contexts must increase from >= 0, got {list(self.contexts)}")
        if any(not (0.0 <= f <= 100.0 and np.isfinite(f)) for f in self.factors):
            raise SpecsimError(f"@context: factors must lie in [0, 100], got {list(self.factors)}")
        self.base.scaled(0.5)  # refuses a base that cannot scale

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"{self.base.spec}@context:" + ",".join(f"{c:g}={f:.4g}" for c, f in zip(self.contexts, self.factors))

    @property
    def ranks(self) -> tuple[float, ...] | None:  # type: ignore[override]
        return self.base.ranks

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

    def stream(self, rng: np.random.Generator) -> AcceptanceStream:
        return self.base.stream(rng)


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
