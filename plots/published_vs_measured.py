"""Predicted against measured speed-up for the published corpus (benchmarks/published.py), one point per
measurement, coloured by engine."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

ENGINE_COLOURS = {"vllm": "#1f77b4", "sglang": "#d62728", "tensorrt-llm": "#2ca02c"}


def published_vs_measured(points: Sequence[tuple[str, float, float, str]], title: str = "") -> Figure:
    """`points`: (engine, measured speed-up, predicted speed-up, label). The y = x line and a +-10 % band; speed-up
    1 (speculation neither pays nor costs) marked on both axes."""
    fig = Figure(figsize=(6.4, 6.0))
    ax = fig.add_subplot()
    values = [v for _, m, p, _ in points for v in (m, p)]
    lo, hi = min(values + [1.0]) * 0.9, max(values + [1.0]) * 1.08
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.9", label="within 10 %")
    ax.plot([lo, hi], [lo, hi], color="0.4", lw=1, label="predicted = measured")
    ax.axhline(1.0, color="0.7", lw=0.8, ls=":")
    ax.axvline(1.0, color="0.7", lw=0.8, ls=":")
    for engine, colour in ENGINE_COLOURS.items():
        mine = [(m, p) for e, m, p, _ in points if e == engine]
        if mine:
            ax.scatter(*zip(*mine), s=28, color=colour, alpha=0.8, edgecolors="white", linewidths=0.5,
                       label=f"{engine} ({len(mine)})")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured speed-up (published)")
    ax.set_ylabel("predicted speed-up (its source left out of the fit)")
    ax.set_title(title or "Published speed-ups against specsim's, each point's own acceptance length", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return fig
