"""Extrapolation is visible in every picture drawn from a profile, as predict's table marks it with '^': speed-up
curves turn dotted past the measured passes under a hatched span with its legend entry; the best-k map's cells carry
the '^'."""

from __future__ import annotations

from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from plots.capacity import best_k_map
from plots.speedup import drafts_vs_batch, speedup_vs_batch
from scenarios import load_hardware, load_model
from simulator.acceptance import IIDAcceptance
from simulator.cost import CostModel
from simulator.measured_range import MeasuredRange
from simulator.sweep import chains, sweep

MEASURED = MeasuredRange(batch=8, rows=40, context=4096)


def past_eight() -> object:
    """A preset's sweep marked as a profile measured only batches 1-8 would be (rows and batches past it)."""
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    r = sweep(cost, load_model("llama-3.1-8b"), load_model("llama-3.2-1b"), IIDAcceptance(0.7),
              [1, 2, 4, 8, 16, 32], chains(range(4)), [1024])
    rows = tuple(replace(x, extrapolated_in=MEASURED.beyond(x.batch, (x.k or 0) + 1, x.context),
                         extrapolated=bool(MEASURED.beyond(x.batch, (x.k or 0) + 1, x.context))) for x in r.rows)
    return replace(r, rows=rows, measured_range=MEASURED)


def test_speedup_curves_turn_dotted_past_the_measured_passes():
    fig = speedup_vs_batch(past_eight())
    ax = fig.axes[0]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "extrapolated past the passes the profile measured" in labels
    k1 = [ln for ln in ax.get_lines() if ln.get_label() == "k = 1"][0]
    x, y = list(k1.get_xdata()), np.asarray(k1.get_ydata(), dtype=float)
    assert not np.isnan(y[x.index(8)]) and np.isnan(y[x.index(32)])  # the solid line stops where measured ends
    dotted = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":" and ln.get_color() == k1.get_color()]
    assert dotted and not np.isnan(np.asarray(dotted[0].get_ydata(), dtype=float)[x.index(32)])
    plt.close(fig)


def test_the_best_k_map_and_drafts_mark_what_is_extrapolated():
    r = past_eight()
    fig = best_k_map(r)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.endswith("^") for t in texts) and not all(t.endswith("^") for t in texts)
    assert "cells marked ^" in fig.axes[0].get_title()
    plt.close(fig)
    fig = drafts_vs_batch({"1B": r}, 1024)
    assert any("extrapolated past" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    plt.close(fig)
