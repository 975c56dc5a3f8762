"""Axes the figures share."""

from __future__ import annotations

import matplotlib.ticker
from matplotlib.axes import Axes


def batch_axis(ax: Axes, title: str | None = None) -> None:
    """Batch size on a log2 x-axis with plain tick labels, a grid, and the panel's title."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel("batch size (sequences)")
    if title is not None:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
