"""The roofline: achieved FLOP/s against arithmetic intensity, with the device's ceilings and real passes."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from simulator.roofline import RooflinePoint  # noqa: E402


def roofline_chart(points: Sequence[RooflinePoint], mem_bw_bytes_per_s: float, peak_flops_per_s: float,
                   caption: str = "", ceiling_label: str = "") -> Figure:
    """Log-log roofline: min(peak, bandwidth x intensity), the ridge point marked, and each pass at its intensity
    (FLOPs over weight + KV + activation bytes) and achieved FLOP/s (FLOPs over its time); colour by model, marker
    size by tokens per sequence in the pass, filled if measured."""
    fig, ax = plt.subplots(figsize=(9.0, 5.8))
    xs = np.array([p.intensity_flops_per_byte for p in points] or [1.0])
    lo, hi = max(xs.min() / 4, 1e-2), max(xs.max() * 4, 4 * peak_flops_per_s / mem_bw_bytes_per_s)
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.plot(x, np.minimum(peak_flops_per_s, mem_bw_bytes_per_s * x), color="black", linewidth=2.0,
            label=f"ceiling {ceiling_label}".strip())
    ridge = peak_flops_per_s / mem_bw_bytes_per_s
    ax.axvline(ridge, color="gray", linestyle=":", linewidth=1.0)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", xy=(ridge, peak_flops_per_s), xytext=(4, -14),
                textcoords="offset points", fontsize=8, color="dimgray")
    models = list(dict.fromkeys(p.model for p in points))
    cmap = plt.get_cmap("tab10")
    for i, model in enumerate(models):
        sel = [p for p in points if p.model == model]
        for measured in (True, False):
            group = [p for p in sel if p.measured == measured]
            if not group:
                continue
            sizes = [14 + 10 * np.log2(p.new_tokens) ** 2 for p in group]
            ax.scatter([p.intensity_flops_per_byte for p in group], [p.achieved_flops_per_s for p in group],
                       s=sizes, color=cmap(i) if measured else "none", edgecolors=cmap(i), alpha=0.8,
                       label=f"{model} ({'measured' if measured else 'modelled'})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("each pass: marker size grows with tokens per sequence (1 = plain/draft, k + 1 = verify)",
                 fontsize=9)
    if caption:
        fig.suptitle(textwrap.fill(caption, width=120), fontsize=9)
    fig.tight_layout()
    return fig
