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


def acceptance_against_context(contexts: np.ndarray, alpha: np.ndarray, ci95: np.ndarray, fitted: np.ndarray,
                               dense: np.ndarray, leave_one_out: np.ndarray, trained_tokens: int | None = None,
                               caption: str = "") -> Figure:
    """Measured per-token acceptance by context window (with its 95 % interval), the fitted decay as a line, each
    window's prediction from the others as open markers, and where the models' training length ends."""
    fig, ax = plt.subplots(figsize=(8.5, 5.0))
    ax.errorbar(contexts, alpha, yerr=ci95, fmt="o", color="black", capsize=3, markersize=5,
                label="measured (mean over texts, 95 % interval)")
    ax.plot(dense[:, 0], dense[:, 1], color="#1f77b4", linewidth=1.6, label="fitted decay (logistic step)")
    err = np.abs(leave_one_out / alpha - 1.0)
    ax.plot(contexts, leave_one_out, "o", markerfacecolor="none", markeredgecolor="#d62728", markersize=8,
            label=f"each window predicted from the others: median |error| {100 * np.median(err):.1f} %, "
                  f"max {100 * err.max():.1f} %")
    if trained_tokens:
        ax.axvline(trained_tokens, color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"trained on {trained_tokens}-token windows", (trained_tokens, ax.get_ylim()[0]),
                    xytext=(4, 6), textcoords="offset points", fontsize=8, color="grey")
    ax.set_xlabel("context (tokens before the drafted one)")
    ax.set_ylabel("per-token acceptance α = Σ min(p, q)")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    if caption:
        ax.set_title(textwrap.fill(caption, width=110), fontsize=9)
    fig.tight_layout()
    return fig
