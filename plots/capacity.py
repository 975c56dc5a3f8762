"""Capacity-planning maps: the best draft length over batch size x context length."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from simulator.sweep import SweepResult  # noqa: E402


def best_k_map(result: SweepResult, caption: str = "") -> Figure:
    """A cell per (batch, context): its colour the best chain length (0 = speculation off, grey), its label the
    predicted speed-up of that choice; cells where the models and caches do not fit are hatched."""
    batches = sorted({r.batch for r in result.rows})
    contexts = sorted({r.context for r in result.rows})
    ks = sorted({r.k for r in result.rows if r.k is not None})
    best = {(b.batch, b.context): b for b in result.best}
    grid = np.full((len(contexts), len(batches)), np.nan)
    for i, c in enumerate(contexts):
        for j, b in enumerate(batches):
            if (b, c) in best:
                grid[i, j] = best[(b, c)].k or 0
    k_max = max(ks) if ks else 1
    colors = ["#d9d9d9"] + [plt.get_cmap("viridis")(x) for x in np.linspace(0.15, 0.95, max(k_max, 1))]
    cmap = matplotlib.colors.ListedColormap(colors[: k_max + 1])
    norm = matplotlib.colors.BoundaryNorm(np.arange(-0.5, k_max + 1.5), cmap.N)
    fig, ax = plt.subplots(figsize=(max(7.5, 0.55 * len(batches) + 3), max(3.8, 0.5 * len(contexts) + 2.4)))
    mesh = ax.pcolormesh(np.arange(len(batches) + 1), np.arange(len(contexts) + 1), np.ma.masked_invalid(grid),
                         cmap=cmap, norm=norm, edgecolors="white", linewidth=0.5)
    for i, c in enumerate(contexts):
        for j, b in enumerate(batches):
            if (b, c) in best:
                ax.text(j + 0.5, i + 0.5, f"{best[(b, c)].speedup:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if (best[(b, c)].k or 0) in (0, k_max) else "white")
            else:
                ax.add_patch(plt.Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="tab:red", linewidth=0))
    ax.set_xticks(np.arange(len(batches)) + 0.5, [str(b) for b in batches], fontsize=8)
    ax.set_yticks(np.arange(len(contexts)) + 0.5, [f"{c:,}" for c in contexts], fontsize=8)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("context length (cached tokens per sequence)")
    bar = fig.colorbar(mesh, ax=ax, ticks=np.arange(k_max + 1))
    bar.set_label("best draft length k (0 = speculation off)")
    ax.set_title("best k per batch and context; cell text: predicted speed-up; hatched: does not fit in memory",
                 fontsize=9)
    if caption:
        fig.suptitle(textwrap.fill(caption, width=int(14 * fig.get_size_inches()[0])), fontsize=9)
    fig.tight_layout()
    return fig
