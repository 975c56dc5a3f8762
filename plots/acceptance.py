"""Accepted-length histogram: what real speculative steps accepted against what acceptance models predict."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def accepted_length_histogram(measured_pmf: np.ndarray, models: Mapping[str, np.ndarray], k: int,
                              measured_label: str = "measured", caption: str = "") -> Figure:
    """Bars: the measured share of steps accepting A = 0..k drafts; markers: each model's P(A = a); the legend
    gives each one's mean tokens per step E[A + 1]."""
    a = np.arange(k + 1)
    fig, ax = plt.subplots(figsize=(8.5, 5.0))
    mean = float(np.dot(a + 1, measured_pmf))
    ax.bar(a, measured_pmf, width=0.7, color="#bbbbbb", edgecolor="black", linewidth=0.6,
           label=f"{measured_label}: E[A + 1] = {mean:.2f}")
    markers = "oD^sv<>"
    for i, (label, pmf) in enumerate(models.items()):
        ax.plot(a, pmf, marker=markers[i % len(markers)], linestyle="-", linewidth=1.2, markersize=6,
                color=plt.get_cmap("tab10")(i), label=f"{label}: E[A + 1] = {float(np.dot(a + 1, pmf)):.2f}")
    ax.set_xticks(a)
    ax.set_xlabel(f"accepted drafts A in a step of k = {k} (the step emits A + 1 tokens)")
    ax.set_ylabel("share of speculative steps")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if caption:
        ax.set_title(textwrap.fill(caption, width=110), fontsize=9)
    fig.tight_layout()
    return fig
