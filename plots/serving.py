"""Serving under load: TPOT (and TTFT) percentiles against the request rate, one colour per policy."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from plots.axes import plain_log_axis  # noqa: E402
from simulator.metrics import SLO, ServingMetrics  # noqa: E402


def tpot_vs_rate(metrics: Sequence[ServingMetrics], slo: SLO | None = None, caption: str = "") -> Figure:
    """Left: TPOT p50 (solid) and p99 (dashed) per policy against the offered rate, overloaded rates hollow, the TPOT
    SLO as a line, and where speculation stops lowering TPOT marked. Right: TTFT p50 and p99 likewise (log scale)."""
    slo = slo or SLO()
    policies = list(dict.fromkeys(m.policy for m in metrics))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12.5, 5.0))
    colors = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(policies)}
    for p in policies:
        rows = sorted((m for m in metrics if m.policy == p), key=lambda m: m.rate_per_s)
        rate = [m.rate_per_s for m in rows]
        for axis, attr in ((ax, "tpot_s"), (ax2, "ttft_s")):
            p50 = [1e3 * getattr(m, attr)[0] for m in rows]
            p99 = [1e3 * getattr(m, attr)[2] for m in rows]
            axis.plot(rate, p50, "-", color=colors[p], linewidth=1.8, label=f"{p} p50")
            axis.plot(rate, p99, "--", color=colors[p], linewidth=1.2, label=f"{p} p99")
            over = [i for i, m in enumerate(rows) if not m.sustained]
            axis.scatter([rate[i] for i in over], [p50[i] for i in over], facecolors="none", edgecolors=colors[p],
                         s=50, zorder=3)
    off = {m.rate_per_s: m.tpot_s[0] for m in metrics if m.policy == "off"}
    if off:
        # The lowest rate at which no speculating policy beats plain decoding's median TPOT any more.
        crossing = None
        for rate in sorted(off):
            spec = [m.tpot_s[0] for m in metrics if m.policy != "off" and m.rate_per_s == rate and m.sustained]
            if spec and min(spec) >= off[rate]:
                crossing = rate
                break
        if crossing is not None:
            ax.axvline(crossing, color="dimgray", linestyle=":", linewidth=1.3)
            last = crossing >= max(off)  # at the right edge: the words go left of the line, inside the axes
            ax.annotate(f"speculation stops paying\nby {crossing:g} req/s", xy=(crossing, 0.97),
                        xycoords=("data", "axes fraction"), xytext=(-4 if last else 4, -4),
                        textcoords="offset points", va="top", ha="right" if last else "left", fontsize=8,
                        color="dimgray")
    if slo.tpot_s:
        ax.axhline(1e3 * slo.tpot_s, color="tab:red", linewidth=1.0, alpha=0.6, label="TPOT SLO")
    if slo.ttft_s:
        ax2.axhline(1e3 * slo.ttft_s, color="tab:red", linewidth=1.0, alpha=0.6, label="TTFT SLO")
    ax.set_ylabel("time per output token (ms)")
    ax2.set_ylabel("time to first token (ms)")
    ax2.set_yscale("log")
    plain_log_axis(ax2)
    for axis in (ax, ax2):
        axis.set_xlabel("request rate (requests/s)")
        axis.grid(True, which="both", alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.set_title("TPOT: p50 solid, p99 dashed; hollow = overloaded", fontsize=10)
    ax2.set_title("TTFT (queueing + prefill)", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    if slo.ttft_s:  # the right panel's SLO line, named too
        more = ax2.get_legend_handles_labels()
        handles, labels = handles + more[0][-1:], labels + more[1][-1:]
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    if caption:
        fig.suptitle("\n".join(textwrap.fill(line, width=150) for line in caption.splitlines()), fontsize=9)
    fig.tight_layout(rect=(0, 0.1 + 0.03 * (len(labels) // 7), 1, 1))
    return fig


def throughput_vs_rate(metrics: Sequence[ServingMetrics], caption: str = "") -> Figure:
    """Output tokens per second against the offered rate, one colour per policy, overloaded rates hollow: where the
    lines part, one policy saturates the engine first."""
    policies = list(dict.fromkeys(m.policy for m in metrics))
    fig, ax = plt.subplots(figsize=(8.0, 4.4))
    for i, p in enumerate(policies):
        rows = sorted((m for m in metrics if m.policy == p), key=lambda m: m.rate_per_s)
        color = plt.get_cmap("tab10")(i % 10)
        rate = [m.rate_per_s for m in rows]
        tok = [m.throughput_tokens_per_s for m in rows]
        ax.plot(rate, tok, "-o", color=color, linewidth=1.6, markersize=4, label=p)
        over = [j for j, m in enumerate(rows) if not m.sustained]
        ax.scatter([rate[j] for j in over], [tok[j] for j in over], facecolors="white", edgecolors=[color],
                   s=50, zorder=3)
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("output tokens per second")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, title="policy (hollow: overloaded)", title_fontsize=8)
    if caption:
        ax.set_title(textwrap.fill(caption, width=100), fontsize=9)
    fig.tight_layout()
    return fig


def served_vs_predicted(report: Any) -> Figure:
    """A served stream against its simulation (`calibrate.served_validation.ServingValidation`): TPOT p50, TPOT p90 and
    throughput against the offered rate, the simulation's predictions as lines and the real engine's measurements as
    points, one colour per policy, and around each line the band two sampling deviations wide either side where
    acceptance's chance alone would put a measured point (`ServedRow.sampling`); a rate the engine did not serve
    within its time cap is a cross (not scored). Each prediction is also a dash at its rate, and with a single rate
    the band a bar, so that a run at one rate (a trace on its own clock) shows its predictions too."""
    policies = list(report.policies)
    colors = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(policies)}
    fig, axes = plt.subplots(1, 3, figsize=(15.0, 4.8))
    panels = (("TPOT p50 (ms)", "tpot_p50", lambda m: 1e3 * m.tpot_s[0]),
              ("TPOT p90 (ms)", "tpot_p90", lambda m: 1e3 * m.tpot_s[1]),
              ("throughput (output tokens/s)", "throughput", lambda m: m.throughput_tokens_per_s))
    for ax, (title, key, value) in zip(axes, panels):
        top = 0.0
        for p in policies:
            rows = sorted((r for r in report.rows if r.policy == p), key=lambda r: r.rate_per_s)
            rates, predicted = [r.rate_per_s for r in rows], np.array([value(r.predicted) for r in rows])
            ax.plot(rates, predicted, "-", marker="_", markersize=14, markeredgewidth=2, color=colors[p],
                    linewidth=1.6, label=f"{p} predicted")
            sd = np.nan_to_num(np.array([r.sampling.get(key, 0.0) for r in rows], dtype=float))
            if sd.any() and len(rates) > 1:
                ax.fill_between(rates, predicted * (1 - 2 * sd), predicted * (1 + 2 * sd), color=colors[p],
                                alpha=0.15, linewidth=0)
            elif sd.any():
                ax.vlines(rates, predicted * (1 - 2 * sd), predicted * (1 + 2 * sd), color=colors[p], alpha=0.3,
                          linewidth=8)
            top = max(top, np.nanmax(predicted * (1 + 2 * sd), initial=0.0),
                      max((value(r.measured) for r in rows), default=0.0))
            held = [r for r in rows if r.held]
            ax.scatter([r.rate_per_s for r in held], [value(r.measured) for r in held], color=colors[p], s=36,
                       zorder=3, edgecolors="black", linewidths=0.5, label=f"{p} measured")
            missed = [r for r in rows if not r.held]
            ax.scatter([r.rate_per_s for r in missed], [value(r.measured) for r in missed], marker="x",
                       color=colors[p], s=50, zorder=3)
        ax.set_xlabel("request rate (requests/s)")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 1.1 * top if top > 0 else None)
        ax.grid(True, alpha=0.3)
    for pol, c in report.crossovers().items():
        for which, style in (("measured", ":"), ("predicted", "--")):
            if c[which] is not None:
                axes[0].axvline(c[which], color=colors[pol], linestyle=style, linewidth=1.0, alpha=0.7)
    s = report.summary()
    st = report.settings
    title = (f"served stream ({st.get('pair', '')}; {st.get('workload', '')}; {st.get('requests')} requests per run, "
             f"max batch {st.get('max_batch')}; acceptance {st.get('acceptance', '')}) against its simulation: TPOT "
             f"p50 |error| median {100 * s['tpot_p50']['median']:.1f} %, throughput "
             f"{100 * s['throughput']['median']:.1f} %; vertical lines: where speculation stops paying (dotted "
             "measured, dashed predicted); bands: where acceptance's chance alone puts a measured point (±2 SD)")
    fig.suptitle(textwrap.fill(title, width=170), fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 0.93))
    return fig


def engine_stream_vs_simulated(report: dict[str, Any]) -> Figure:
    """A stream served by another engine (`calibrate.llama_served.validate_llama_serving`'s report) against its
    simulation: throughput, TPOT p50 and TTFT p50 (log) against the offered rate, the simulation as lines and the
    engine's measurements as points, one colour per policy; each measured point labelled with the simulation's
    error, the median row ringed."""
    rows = report["rows"]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    colors = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(policies)}
    med = report.get("median_row", {})
    fig, axes = plt.subplots(1, 3, figsize=(15.0, 4.8))
    panels = (("throughput (output tokens/s)", "throughput", 1.0), ("TPOT p50 (ms)", "tpot_p50_s", 1e3),
              ("TTFT p50 (ms, log)", "ttft_p50_s", 1e3))
    for ax, (title, key, scale) in zip(axes, panels):
        for p in policies:
            mine = sorted((r for r in rows if r["policy"] == p), key=lambda r: r["rate_per_s"])
            rates = [r["rate_per_s"] for r in mine]
            ax.plot(rates, [scale * r[key][1] for r in mine], "-", color=colors[p], linewidth=1.6,
                    label=f"{p} simulated")
            ax.scatter(rates, [scale * r[key][0] for r in mine], color=colors[p], s=36, zorder=3,
                       edgecolors="black", linewidths=0.5, label=f"{p} measured")
            for r in mine:
                if np.isfinite(r[key][2]):
                    ax.annotate(f"{100 * r[key][2]:+.0f}%", (r["rate_per_s"], scale * r[key][0]), fontsize=7,
                                xytext=(4, 4), textcoords="offset points", color=colors[p])
                if r["rate_per_s"] == med.get("rate_per_s") and p == med.get("policy"):
                    ax.scatter([r["rate_per_s"]], [scale * r[key][0]], s=160, facecolors="none",
                               edgecolors="black", linewidths=1.0, zorder=4)
        ax.set_xlabel("request rate (requests/s)")
        ax.set_title(title, fontsize=10)
        if key == "ttft_p50_s":
            ax.set_yscale("log")
            plain_log_axis(ax)
        else:
            ax.set_ylim(0, None)
        ax.grid(True, alpha=0.3)
    e = report.get("median_abs_err", {})
    title = (f"{report.get('engine', 'engine')} on {report.get('threads', '?')} threads, {report.get('slots')} slots, "
             f"{report.get('requests')} Poisson requests x {report.get('tokens')} tokens per run, against its "
             f"simulation; labels: simulated less measured; ringed: the median row ({med.get('rate_per_s', '?'):g}/s "
             f"{med.get('policy', '?')}); median |error| over the rows: throughput "
             f"{100 * e.get('throughput', np.nan):.1f} %, TPOT p50 {100 * e.get('tpot_p50_s', np.nan):.1f} %")
    fig.suptitle(textwrap.fill(title, width=170), fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 0.93))
    return fig
