"""Validation figures: predicted against measured speed-up, and speed-up against batch (measured over predicted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from plots.axes import batch_axis  # noqa: E402
from simulator.validation import ValidationReport, ValidationRow  # noqa: E402

STYLE = {"calibrated": ("o", "tab:blue"), "leviathan": ("s", "tab:orange"), "roofline": ("^", "tab:gray")}


def repeat_bars(rows: Sequence[ValidationRow]) -> tuple[list[float], list[float]]:
    """Error bars from each row's measured speed-up to the least and most any single repeat measured (the pooled
    estimate can sit outside them when one repeat drew a low acceptance and another a slow minute)."""
    lo = [max(0.0, r.measured.speedup_estimate - r.measured.speedup.min) for r in rows]
    hi = [max(0.0, r.measured.speedup.max - r.measured.speedup_estimate) for r in rows]
    return lo, hi


def predicted_vs_measured(report: ValidationReport, band: float = 0.05, outer: float = 0.12) -> Figure:
    """Scatter of predicted against measured speed-up per predictor, with y = x and the +-5 % / +-12 % bands."""
    fig, ax = plt.subplots(figsize=(5.6, 6.4))
    rows = report.rows
    measured = [r.measured.speedup_estimate for r in rows]
    lo_err, hi_err = repeat_bars(rows)
    allv = list(measured)
    for name, (marker, color) in STYLE.items():
        pred = [r.predicted[name].speedup for r in rows]
        allv += pred
        s = report.predictors[name]
        ax.errorbar(measured, pred, xerr=[lo_err, hi_err], fmt=marker, color=color, alpha=0.8, markersize=5,
                    elinewidth=0.6, label=f"{name}: median |err| {100 * s.median_abs_err_speedup:.1f} %, "
                                          f"p90 {100 * s.p90_abs_err_speedup:.1f} %")
    lo, hi = min(allv) * 0.9, max(allv) * 1.1
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", linewidth=1, label="y = x")
    ax.fill_between(xs, [x * (1 - band) for x in xs], [x * (1 + band) for x in xs], color="tab:green", alpha=0.15,
                    label=f"±{100 * band:.0f} %")
    ax.fill_between(xs, [x * (1 - outer) for x in xs], [x * (1 + outer) for x in xs], color="tab:green",
                    alpha=0.07, label=f"±{100 * outer:.0f} %")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured speed-up (bars: min-max of the single pairs)")
    ax.set_ylabel("predicted speed-up")
    ax.set_title("predicted vs measured speed-up", fontsize=10)
    ax.grid(alpha=0.3)
    # below the axes, not over the points (they fill every corner when a predictor misses both ways)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def speedup_vs_batch(report: ValidationReport, curves: Mapping[str, Sequence[tuple[int, float]]]) -> Figure:
    """Measured speed-up (points, min-max bars) over the calibrated model's predicted curves, one colour per k."""
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    cmap = plt.get_cmap("viridis")
    labels = list(curves)
    for i, label in enumerate(labels):
        color = "tab:red" if label.startswith("tree") else cmap(i / max(len(labels) - 1, 1))
        xs, ys = zip(*curves[label])
        ax.plot(xs, ys, color=color, linestyle="--" if label.startswith("tree") else "-", linewidth=1.5,
                label=f"{label} predicted")
        pts = [r for r in report.rows if (f"tree {r.tree}" if r.tree else f"k = {r.k}") == label]
        if pts:
            mx = [r.batch for r in pts]
            my = [r.measured.speedup_estimate for r in pts]
            lo, hi = repeat_bars(pts)
            ax.errorbar(mx, my, yerr=[lo, hi], fmt="o", color=color, markersize=5, capsize=2,
                        label=f"{label} measured")
    ax.axhline(1.0, color="black", linewidth=1)
    batch_axis(ax, "real speculative decoding (points) against the calibrated prediction (lines)")
    ax.set_ylabel("speed-up over plain decoding")
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    return fig
