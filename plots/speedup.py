"""Capacity-planning figure: predicted speed-up against batch size, one line per draft length or tree."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from plots.axes import batch_axis  # noqa: E402
from simulator.sweep import SweepResult, SweepRow  # noqa: E402


def past_passes(r: SweepRow) -> bool:
    """Past the calibration's measured passes (batch, rows a pass or context): what predict's table marks '^'."""
    return any(w != "k" for w in r.extrapolated_in)


def extrapolated_label(result: SweepResult) -> str:
    reach = result.measured_range
    return f"extrapolated past {reach.what if reach else 'the passes the profile measured'}"


def draw_measured(ax: Axes, xs: list[float], ys: list[float], past: list[bool], **style) -> bool:
    """A curve solid where it rests on measured passes and dotted (fainter) on every segment that reaches past
    them, so a curve that climbs again out there does not read as measured. Returns whether anything was dotted."""
    n = len(xs)
    solid = [(j > 0 and not past[j - 1] and not past[j]) or (j < n - 1 and not past[j] and not past[j + 1])
             or (n == 1 and not past[j]) for j in range(n)]
    dotted = [(j > 0 and (past[j - 1] or past[j])) or (j < n - 1 and (past[j] or past[j + 1]))
              or (n == 1 and past[j]) for j in range(n)]
    nan = float("nan")
    ax.plot(xs, [y if keep else nan for y, keep in zip(ys, solid)], **style)
    if any(dotted):
        faint = {**style, "label": None, "linestyle": ":", "alpha": 0.7}
        ax.plot(xs, [y if keep else nan for y, keep in zip(ys, dotted)], **faint)
    return any(dotted)


def speedup_vs_batch(result: SweepResult, title: str = "") -> Figure:
    """One panel per context: speed-up vs batch (log x) for every k and tree, the break-even line, the batch above
    which speculation should be disabled, and points that do not fit in memory left out."""
    unfit_from = dict(result.unfit_from_batch)
    contexts = sorted({r.context for r in result.rows} | set(unfit_from))
    fig, axes = plt.subplots(1, len(contexts), figsize=(max(6.2 * len(contexts), 9.0), 4.8), squeeze=False,
                             sharey=True)
    by_ctx = dict(result.disable_above_batch_by_context)
    cmap = plt.get_cmap("viridis")
    for ax, context in zip(axes[0], contexts):
        rows = [r for r in result.rows if r.context == context]
        if not rows:  # not even plain decoding at the smallest batch asked for: say so where its curves would be
            ax.text(0.5, 0.5, f"nothing fits from batch {unfit_from[context]:,} on:\nthe target's weights and KV "
                    "cache\nexceed the device's memory\n(split the target with --tp N, or a smaller --dtype)",
                    transform=ax.transAxes, ha="center", va="center", fontsize=9, color="tab:red")
            ax.set_xticks([])
            ax.set_title(f"context {context} tokens", fontsize=10)
            continue
        keys = []
        for r in rows:
            key = (r.tree is not None, r.tree or "", r.k if r.k is not None else -1)
            if key not in keys:
                keys.append(key)
        chains = [k for k in keys if not k[0]]
        dotted = False
        for key in keys:
            sel = [r for r in rows if (r.tree is not None, r.tree or "", r.k if r.k is not None else -1) == key
                   and r.fits]
            if not sel:
                continue
            is_tree, tree, k = key
            if not is_tree and k == 0:
                continue  # plain decoding is the y = 1 line
            label = f"tree {tree}" if is_tree else f"k = {k}"
            color = "tab:red" if is_tree else cmap(chains.index(key) / max(len(chains) - 1, 1))
            dotted |= draw_measured(ax, [r.batch for r in sel], [r.speedup for r in sel], [past_passes(r) for r in sel],
                                    label=label, color=color, linestyle="--" if is_tree else "-", linewidth=1.6)
        ax.axhline(1.0, color="black", linewidth=1.0, label="plain decoding")
        disable = by_ctx.get(context)
        fitting = [r.batch for r in rows if r.fits]
        top = max(fitting) if fitting else max(r.batch for r in rows)
        ranges = result.pays_in(context)
        if fitting and ranges and (len(ranges) > 1 or ranges[0][0] > min(fitting)):
            # speculation pays in ranges (an MoE target): shade every stretch between them where it does not
            edges = [min(fitting)] + [x for lo, hi in ranges for x in (lo, hi)] + [top]
            label = "speculation off"
            for a, b in zip(edges[::2], edges[1::2]):
                if b > a:
                    ax.axvspan(a, b, color="tab:gray", alpha=0.12, label=label)
                    label = None
            for lo, hi in ranges:
                ax.annotate(f"pays {lo}-{hi}" if hi > lo else f"pays at {lo}", xy=(lo, 1.0), xytext=(2, -14),
                            textcoords="offset points", fontsize=8)
        elif disable == 0:
            ax.axvspan(min(r.batch for r in rows), top, color="tab:gray", alpha=0.12, label="speculation off")
        elif disable:
            ax.axvspan(disable, top, color="tab:gray", alpha=0.12, label="speculation off")
            ax.axvline(disable, color="tab:gray", linestyle=":", linewidth=1.4)
            crossing = next((b.speedup for b in result.best if b.context == context and b.batch == disable), 1.0)
            ax.plot([disable], [crossing], marker="o", color="black", markersize=6, zorder=4)
            drafted_fit = [r.batch for r in rows if r.fits and (r.k != 0 or r.tree)]
            memory = drafted_fit and disable == max(drafted_fit) and top > disable
            text = (f"the draft no longer fits above B = {disable}" if memory else
                    f"crossover: off above B = {disable}")
            ax.annotate(text, xy=(disable, crossing), xytext=(-6 if memory else 6, 10), textcoords="offset points",
                        fontsize=8, color="black", ha="right" if memory else "left")
        unfit = sorted({r.batch for r in rows if not r.fits})
        if unfit:
            ax.axvspan(unfit[0], max(r.batch for r in rows), color="tab:red", alpha=0.07, label="does not fit")
        # past the measured passes even without drafting (batch or context): the whole stretch, hatched; past them
        # only for the deeper k (rows a pass): those curves' dotted segments
        beyond = sorted(r.batch for r in rows if r.k == 0 and r.tree is None and past_passes(r))
        if beyond:  # from the last measured batch, where the curves turn dotted
            start = max((r.batch for r in rows if r.batch < beyond[0]), default=beyond[0])
            ax.axvspan(start, max(r.batch for r in rows), facecolor="none", edgecolor="tab:blue", alpha=0.35,
                       hatch="//", linewidth=0, label=extrapolated_label(result))
        elif dotted:
            ax.add_line(Line2D([], [], color="tab:gray", linestyle=":", label=extrapolated_label(result)))
        best = sorted((b.batch, b.speedup) for b in result.best if b.context == context)
        if best:
            ax.plot(*zip(*best), color="black", linewidth=3.0, alpha=0.25, label="best choice")
        batch_axis(ax, f"context {context} tokens")
    axes[0][0].set_ylabel("speed-up over plain decoding")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    for ax in axes[0][:-1]:  # spans and lines drawn only in other panels
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if labels:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6 if len(contexts) == 1 else 8),
                   fontsize=8, frameon=False)
    if title:
        fig.suptitle(textwrap.fill(title, width=int(11 * fig.get_size_inches()[0])), fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def drafts_vs_batch(results: dict[str, SweepResult], context: int, title: str = "") -> Figure:
    """Several drafts for one target: each draft's best speed-up over its draft lengths against batch (the best k
    written at the powers of two), plain decoding the y = 1 line; where a draft's best is plain decoding its line
    sits on it."""
    fig, ax = plt.subplots(figsize=(9.0, 4.8))
    cmap = plt.get_cmap("tab10")
    dotted = False
    for i, (label, result) in enumerate(results.items()):
        best = sorted((b.batch, b.speedup, b.k) for b in result.best if b.context == context)
        if not best:
            continue
        xs, ys, ks = zip(*best)
        row = {(r.batch, r.k): r for r in result.rows if r.context == context and r.tree is None}
        past = [row[(x, k)] is not None and past_passes(row[(x, k)]) if (x, k) in row else False
                for x, k in zip(xs, ks)]
        dotted |= draw_measured(ax, list(xs), list(ys), past, color=cmap(i), linewidth=2.0, label=label)
        for x, y, k in best:
            if x & (x - 1) == 0:  # the powers of two: which k is best there
                ax.annotate(str(k), xy=(x, y), xytext=(0, 5), textcoords="offset points", fontsize=7,
                            color=cmap(i), ha="center")
    ax.axhline(1.0, color="black", linewidth=1.0, label="plain decoding")
    if dotted:
        ax.add_line(Line2D([], [], color="tab:gray", linestyle=":",
                           label=extrapolated_label(next(iter(results.values())))))
    batch_axis(ax, f"context {context} tokens; numbers: the best draft length")
    ax.set_ylabel("best speed-up over plain decoding")
    ax.legend(fontsize=8, frameon=False, loc="best")
    if title:
        fig.suptitle(textwrap.fill(title, width=110), fontsize=10)
    fig.tight_layout()
    return fig
