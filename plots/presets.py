"""A preset against published step times of real engines: step time against batch, published as points, predicted
as lines, one colour per step kind."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from plots.axes import batch_axis  # noqa: E402
from simulator.validation import Comparison  # noqa: E402


def preset_vs_published(rows: Sequence[Comparison], caption: str = "", fitted_up_to: int | None = None) -> Figure:
    """One panel per context: published step time (markers) and the preset's (lines) against batch, for the plain
    step and each verification size; the batches beyond the source's own range shaded."""
    contexts = sorted({r.context for r in rows})
    fig, axes = plt.subplots(1, len(contexts), figsize=(6.0 * len(contexts), 4.6), squeeze=False, sharey=True)
    kinds = sorted({r.new_tokens for r in rows})
    cmap = plt.get_cmap("viridis")
    for ax, c in zip(axes[0], contexts):
        for i, n in enumerate(kinds):
            sel = sorted((r for r in rows if r.context == c and r.new_tokens == n), key=lambda r: r.batch)
            color = cmap(i / max(len(kinds) - 1, 1))
            label = "plain step" if n == 1 else f"verify {n} tokens"
            ax.plot([r.batch for r in sel], [1e3 * r.predicted_s for r in sel], "-", color=color, linewidth=1.6,
                    label=f"{label}: preset")
            ax.plot([r.batch for r in sel], [1e3 * r.published_s for r in sel], "o", color=color, markersize=5,
                    label=f"{label}: published")
        if fitted_up_to:
            ax.axvspan(fitted_up_to, max(r.batch for r in rows), color="tab:gray", alpha=0.1,
                       label="beyond the published range")
        batch_axis(ax, f"context {c} tokens")
    axes[0][0].set_ylabel("step time (ms)")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    if caption:
        fig.suptitle(textwrap.fill(caption, width=int(12 * fig.get_size_inches()[0])), fontsize=9)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    return fig
