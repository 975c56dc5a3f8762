"""Axes the figures share."""

from __future__ import annotations

import math

import matplotlib.ticker
from matplotlib.axes import Axes


def plain(value: float) -> str:
    """A tick label as people write numbers: 60, 400, 1,500, 0.5 (never 6x10^1)."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def plain_log_axis(ax: Axes, which: str = "y") -> None:
    """A log-scaled axis labelled in plain numbers: its decades; where it spans less than two decades its 2s and 5s
    too, and within one decade every tick (matplotlib's own labels there read 4x10^1)."""
    axis = ax.yaxis if which == "y" else ax.xaxis

    def minor(value: float, _: object) -> str:
        lo, hi = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
        if lo <= 0 or hi / lo > 100:
            return ""
        lead = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return plain(value) if hi / lo <= 10 or round(lead) in (2, 5) else ""

    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: plain(v)))
    axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))


def batch_axis(ax: Axes, title: str | None = None) -> None:
    """Batch size on a log2 x-axis with plain tick labels, a grid, and the panel's title."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel("batch size (sequences)")
    if title is not None:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
