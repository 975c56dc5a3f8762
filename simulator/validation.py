"""Predictions against measurements, as results: a measured configuration's summaries over repeats, each
predictor's point and error, the validation report, and a preset's step time against a published one. Pure data
(the measurement is in `calibrate`, the pictures in `plots`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Summary:
    """A measured quantity over repeats: median, interquartile range, extremes, count."""

    median: float
    iqr: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Summary:
        a = np.asarray(xs, dtype=float)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(q3 - q1), float(a.min()), float(a.max()), int(a.size))

    @property
    def spread(self) -> float:
        """Interquartile range over median."""
        return self.iqr / self.median if self.median else 0.0


@dataclass(frozen=True)
class MeasuredConfig:
    """One configuration's real runs: speed-up over plain decoding at the same batch (per repeat, then
    summarised), tokens per target pass, and the per-step phases."""

    batch: int
    k: int | None
    tree: str | None
    speedup: Summary
    tokens_per_pass: Summary
    step_s: Summary
    draft_s: Summary
    verify_s: Summary
    accept_s: Summary
    plain_step_s: Summary
    tokens_per_s: Summary
    cost_ratio: Summary | None = None  # per pair: the plain run's step over the speculative run's (speed-up / tokens
    # per pass: what the speed-up is at the acceptance the pair drew)
    pooled_tokens_per_pass: float | None = None  # every repeat's tokens over every repeat's passes
    tokens_per_pass_se: float | None = None  # the pooled figure's standard error over the sequences decoded
    #                                          (`ratio_standard_error`): what the acceptance draw alone leaves open

    @property
    def acceptance_noise(self) -> float | None:
        """The measured speed-up's relative standard error from its tokens per pass alone (the prompts and the
        accept/reject draws of a finite run; the cost ratio's own noise comes on top). None: not recorded."""
        if self.tokens_per_pass_se is None or not self.pooled_tokens_per_pass:
            return None
        return self.tokens_per_pass_se / self.pooled_tokens_per_pass

    @property
    def tokens_per_pass_estimate(self) -> float:
        """Tokens per pass over all the prompts the repeats decoded together (the median of per-repeat figures when
        the runs did not record their counts)."""
        return self.pooled_tokens_per_pass or self.tokens_per_pass.median

    @property
    def speedup_estimate(self) -> float:
        """The measured speed-up: tokens per pass pooled over the repeats times the median cost ratio.

        A pair's speed-up is its tokens per pass times its cost ratio (plain step over speculative step), and the two
        vary for different reasons: the cost ratio with the machine's minute (a median is robust to a noisy one),
        tokens per pass with the prompts and the draws (a sample mean, which pooling makes larger: on the built-in
        pair each prompt's figure over 48 tokens varies by 17 % at k = 4 (64 held-out prompts, sampled), so the eight
        prompts of a repeat measure it within about 6 %, the median of three repeats within about 5 %, and the 24
        pooled within 3.5 %). Without a cost ratio or counts: the median of the pairs' speed-ups."""
        if self.cost_ratio is None or self.pooled_tokens_per_pass is None:
            return self.speedup.median
        return self.pooled_tokens_per_pass * self.cost_ratio.median

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MeasuredConfig:
        """The inverse of `to_dict` (a validation's JSON row's ``measured``): stored runs priced again."""
        summaries = {k: Summary(**v) for k, v in d.items() if isinstance(v, Mapping)}
        rest = {k: v for k, v in d.items() if not isinstance(v, Mapping)}
        return cls(**rest, **summaries)


def ratio_standard_error(tokens: Sequence[float], passes: Sequence[float]) -> float:
    """Standard error of a pooled ratio sum(tokens) / sum(passes) over independent units (here the sequences of a
    validation row: tokens each emitted over the passes it took), by the ratio estimator's linearisation
    (Cochran, *Sampling Techniques*, 3rd ed., section 6.3): with R = sum t / sum n over m units,
    se(R) = sqrt(sum (t_i - R n_i)^2 / (m (m - 1))) / mean(n). It counts every source of spread between the units
    (their prompts and their draws); nan with fewer than two units."""
    t, n = np.asarray(tokens, dtype=float), np.asarray(passes, dtype=float)
    m = t.size
    if m < 2 or n.sum() <= 0:
        return float("nan")
    r = t.sum() / n.sum()
    return float(np.sqrt(((t - r * n) ** 2).sum() / (m * (m - 1))) / n.mean())


def median_standard_error(xs: Sequence[float], rng: np.random.Generator, resamples: int = 2000) -> float:
    """Bootstrap standard error of the median of `xs` (a validation row's per-prompt figures: how much the median
    of these few prompts would move over another draw of as many prompts; Efron and Tibshirani, *An Introduction
    to the Bootstrap*, chapter 6). nan with fewer than two values."""
    a = np.asarray(xs, dtype=float)
    if a.size < 2:
        return float("nan")
    medians = np.median(a[rng.integers(0, a.size, size=(resamples, a.size))], axis=1)
    return float(medians.std(ddof=1))


@dataclass(frozen=True)
class PredictedPoint:
    tokens_per_pass: float
    step_s: float
    speedup: float
    tokens_per_s: float
    err_speedup: float  # predicted / measured - 1
    err_tokens_per_pass: float
    err_step: float


@dataclass(frozen=True)
class ValidationRow:
    batch: int
    k: int | None
    tree: str | None
    measured: MeasuredConfig
    predicted: Mapping[str, PredictedPoint]
    miss_terms: Mapping[str, float]  # the primary prediction's log miss, split by term
    extrapolated: bool  # beyond the profile's calibration grid

    @property
    def label(self) -> str:
        return f"tree {self.tree}" if self.tree else f"k={self.k}"

    @property
    def repeatability(self) -> float:
        return self.measured.speedup.spread


@dataclass(frozen=True)
class PredictorSummary:
    median_abs_err_speedup: float
    p90_abs_err_speedup: float
    median_abs_err_tokens_per_pass: float
    mean_abs_err_tokens_per_pass: float


@dataclass(frozen=True)
class Miss:
    batch: int
    k: int | None
    tree: str | None
    err_speedup: float
    main_term: str
    terms: Mapping[str, float]
    repeatability: float


@dataclass(frozen=True)
class ValidationReport:
    context: int
    rows: tuple[ValidationRow, ...]
    predictors: Mapping[str, PredictorSummary]
    crossover_measured: int | None  # smallest batch where the best measured speed-up is <= 1
    crossover_predicted: int | None
    crossover_grid_steps_apart: int
    repeatability_median: float  # speed-up IQR / median over repeats
    repeatability_max: float
    worst: tuple[Miss, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)  # profile, tokens, repeats, grid, threads
    spot_check: Mapping[str, Any] = field(default_factory=dict)  # `SpotCheck.to_dict`: the device now vs profiled

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def within_acceptance_noise(self, primary: str) -> tuple[float, int, int] | None:
        """How much of the miss a finite run leaves open: the median over the rows of the measured speed-up's
        relative standard error from its tokens per pass (`MeasuredConfig.acceptance_noise`), and in how many of the
        rows that record it the `primary` prediction's speed-up error is within two of them. None: no row records
        it (runs stored before it was measured)."""
        pairs = [(r.measured.acceptance_noise, r.predicted[primary].err_speedup) for r in self.rows
                 if r.measured.acceptance_noise is not None]
        if not pairs:
            return None
        return (float(np.median([n for n, _ in pairs])), sum(abs(e) <= 2 * n for n, e in pairs), len(pairs))


@dataclass(frozen=True)
class Comparison:
    reference: str
    what: str  # the step, in words
    batch: int
    new_tokens: int
    context: int
    published_s: float
    predicted_s: float

    @property
    def rel_error(self) -> float:
        return self.predicted_s / self.published_s - 1.0
