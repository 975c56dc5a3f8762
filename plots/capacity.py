"""Capacity-planning maps: the best draft length over batch size x context length; a sweep's capacity by
configuration and policy."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

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
    row = {(r.batch, r.context, r.k): r for r in result.rows if r.tree is None}
    past = {key: any(w != "k" for w in getattr(row.get((*key, b.k)), "extrapolated_in", ()))
            for key, b in best.items()}  # predict's '^': past the calibration's measured passes
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
                text = f"{best[(b, c)].speedup:.2f}" + ("^" if past[(b, c)] else "")
                ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=7,
                        color="black" if (best[(b, c)].k or 0) in (0, k_max) else "white")
            else:
                ax.add_patch(plt.Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="tab:red", linewidth=0))
    ax.set_xticks(np.arange(len(batches)) + 0.5, [str(b) for b in batches], fontsize=8)
    ax.set_yticks(np.arange(len(contexts)) + 0.5, [f"{c:,}" for c in contexts], fontsize=8)
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("context length (cached tokens per sequence)")
    bar = fig.colorbar(mesh, ax=ax, ticks=np.arange(k_max + 1))
    bar.set_label("best draft length k (0 = speculation off)")
    reach = result.measured_range
    ax.set_title("best k per batch and context; cell text: predicted speed-up; hatched: does not fit in memory"
                 + (f"\ncells marked ^: extrapolated past {reach.what} ({reach.describe()})"
                    if any(past.values()) and reach else ""), fontsize=9)
    if caption:
        fig.suptitle(textwrap.fill(caption, width=int(14 * fig.get_size_inches()[0])), fontsize=9)
    fig.tight_layout()
    return fig


def capacity_bars(caps: Sequence[Mapping[str, Any]], caption: str = "") -> Figure:
    """Per configuration (hardware, pair, TP) a group of bars, one per policy: the highest rate of the sweep's grid
    that meets the SLO; a hatched bar where even the lowest rate fails. Read with the grid in mind: the true
    capacity lies between a bar and the next rate of the grid."""
    configs = list(dict.fromkeys((c["hardware"], c["target"], c["draft"], c["tp"]) for c in caps))
    policies = list(dict.fromkeys(c["policy"] for c in caps))
    value = {(c["hardware"], c["target"], c["draft"], c["tp"], c["policy"]): c["max_rate_per_s"] for c in caps}
    open_top = {(c["hardware"], c["target"], c["draft"], c["tp"], c["policy"]) for c in caps
                if c["first_failing_rate_per_s"] is None}
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(min(16.0, max(7.0, 0.95 * len(configs) + 2.5)), 5.4))
    top = max(value.values(), default=1.0) or 1.0
    for j, p in enumerate(policies):
        xs = np.arange(len(configs)) + (j - (len(policies) - 1) / 2) * width
        ys = [value.get((*c, p), 0.0) for c in configs]
        bars = ax.bar(xs, [y if y > 0 else top * 0.02 for y in ys], width, label=p,
                      color=plt.get_cmap("tab10")(j % 10), edgecolor="black", linewidth=0.5)
        for b, y, c in zip(bars, ys, configs):
            if y <= 0:
                b.set_hatch("///")
                b.set_facecolor("white")
            elif (*c, p) in open_top:  # met at the grid's highest rate: the capacity is at least this
                ax.annotate("≥", (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(np.arange(len(configs)))
    ax.set_xticklabels([f"{h}\n{t}\nTP {tp}" for h, t, _, tp in configs], fontsize=7)  # the draft: the pair
    ax.set_ylabel("highest rate meeting the SLO (req/s per engine)\n≥: met at the highest rate swept; hatched: none")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylim(0, top * 1.08)  # room for the marks above the tallest bars
    ax.legend(fontsize=8, title="policy", title_fontsize=8)
    if caption:  # wrapped to the figure's width: a sweep's caption names its file, which can be long
        ax.set_title(textwrap.fill(caption, width=int(13 * fig.get_size_inches()[0])), fontsize=9)
    fig.tight_layout()
    return fig
