"""A figure rendered to the bytes of a file (PNG, SVG, PDF), and let go: pyplot keeps every figure it made until it
is closed, so a command that draws many would hold them all."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def render(fig: Figure, fmt: str, dpi: int = 130) -> bytes:
    """`fig` as a `fmt` file ("png", "svg", "pdf"); the figure is closed afterwards."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    plt.close(fig)
    return buf.getvalue()
