"""How far a calibration's measurements reach: the largest batch, rows (batch x new tokens) and context of the
decoding passes it timed. A prediction beyond them extrapolates the fitted rates and overheads instead of
interpolating measured passes, and says so (`SweepRow.extrapolated_in`), as a prediction for more drafts than the
acceptance's source measured already does."""

from __future__ import annotations

from dataclasses import dataclass

from .cost import CostModel


@dataclass(frozen=True)
class MeasuredRange:
    """The reach of a calibration's decoding passes (prefill passes, at context 0, are left out: they price
    prompts, not steps)."""

    batch: int
    rows: int
    context: int
    what: str = "the passes the profile measured"  # or the benchmark's runs a profile was fitted to

    def beyond(self, batch: int, verify_tokens: int, context: int) -> tuple[str, ...]:
        """Which of batch, rows (batch x verified tokens) and context lie past what was measured."""
        out = []
        if batch > self.batch:
            out.append("batch")
        if batch * verify_tokens > self.rows:
            out.append("rows")
        if context > self.context:
            out.append("context")
        return tuple(out)

    def describe(self) -> str:
        return f"batches up to {self.batch}, {self.rows} rows a pass, contexts up to {self.context}"


def measured_range(cost: CostModel) -> MeasuredRange | None:
    """The reach of the passes measured of the calibrated models (`CostModel.measured`), else of the serving
    benchmark's runs a profile was fitted to (`CostModel.reach`); None where nothing was measured (a preset: its
    sources say what they cover)."""
    names = {m.name for m in cost.measured_models}
    keys = [(b, n, c) for (m, b, n, c) in cost.measured if m in names and c > 0]
    if not keys and cost.reach is not None:
        return MeasuredRange(*cost.reach, what="the benchmark runs the profile was fitted to")
    if not keys:
        return None
    return MeasuredRange(max(b for b, _, _ in keys), max(b * n for b, n, _ in keys), max(c for _, _, c in keys))
