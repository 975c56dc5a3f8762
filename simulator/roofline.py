"""Points for a roofline chart: each pass's arithmetic intensity and the FLOP/s it achieved (or is predicted to)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .cost import CostModel
from .specs import ModelSpec


@dataclass(frozen=True)
class RooflinePoint:
    model: str
    batch: int
    new_tokens: int
    intensity_flops_per_byte: float
    achieved_flops_per_s: float
    measured: bool  # a timed pass (else the cost model's prediction)


def _point(cost: CostModel, spec: ModelSpec, batch: int, new_tokens: int, context: int, time_s: float,
           measured: bool) -> RooflinePoint:
    pc = cost.pass_cost(spec, batch, new_tokens, context)
    return RooflinePoint(spec.name, batch, new_tokens, pc.arithmetic_intensity, pc.flops / time_s, measured)


def measured_points(cost: CostModel, specs: Mapping[str, ModelSpec],
                    passes: Iterable[tuple[str, int, int, int, float]]) -> list[RooflinePoint]:
    """Timed passes (model, batch, new tokens, context, seconds) of the models in `specs`."""
    return [_point(cost, specs[m], b, n, c, t, True) for m, b, n, c, t in passes if t and m in specs]


def modelled_points(cost: CostModel, models: Sequence[ModelSpec], batches: Sequence[int],
                    new_tokens: Sequence[int], context: int) -> list[RooflinePoint]:
    """The cost model's own prediction for every (model, batch, new tokens) at one context."""
    return [_point(cost, m, b, n, context, cost.pass_time_s(m, b, n, context), False)
            for m in models for b in batches for n in new_tokens]
