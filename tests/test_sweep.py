"""Sweeps: plain decoding is exactly 1, the essay's example, and the MagicDec shape of the crossover."""

import pytest

from scenarios import load_hardware, load_model
from simulator.acceptance import IIDAcceptance, MarkovAcceptance
from simulator.cost import CostModel
from simulator.sweep import Candidate, chains, disable_above, formula_sweep, leviathan_speedup, sweep


def h100_sweep(context, batches=tuple(range(1, 257)), ks=range(0, 9), acceptance=None):
    cost = CostModel.from_hardware(load_hardware("h100-sxm", "gpt-fast"))
    return sweep(cost, load_model("llama-3.1-8b"), load_model("llama-3.2-1b"), acceptance or IIDAcceptance(0.6),
                 list(batches), chains(ks), [context])


def test_essay_worked_example():
    """alpha 0.8, k 4, c 0.05: 3.36 tokens per pass, cost per token 0.36 of plain decoding, speed-up 2.80."""
    r = formula_sweep(IIDAcceptance(0.8), [Candidate(4)], 0.05).rows[0]
    assert round(r.tokens_per_pass, 2) == 3.36
    assert round(r.step_time_s / r.tokens_per_pass, 2) == 0.36
    assert round(r.speedup, 2) == 2.80 == round(leviathan_speedup(0.8, 4, 0.05), 2)


def test_plain_decoding_is_exactly_one_everywhere():
    result = h100_sweep(1024, batches=(1, 7, 64, 256))
    for row in result.rows:
        if row.k == 0:
            assert row.speedup == 1.0 and row.step_time_s == row.baseline_time_s


def test_perfect_acceptance_gives_k_plus_one_tokens():
    result = h100_sweep(128, batches=(1,), acceptance=IIDAcceptance(1.0))
    for row in result.rows:
        assert row.tokens_per_pass == pytest.approx(row.k + 1)


def test_speedup_falls_with_batch_and_crosses_one_at_short_context():
    result = h100_sweep(128)
    best = {b.batch: b.speedup for b in result.best}
    assert best[1] > 1.3
    assert best[1] >= best[32] >= best[128] >= best[256]
    crossover = result.disable_above_batch
    assert crossover is not None and 1 < crossover < 256
    assert all(b.k == 0 for b in result.best if b.batch > crossover)


def test_long_context_moves_the_crossover_out_unless_memory_runs_out():
    """MagicDec: each sequence's KV reads keep verification memory-bound at large batch."""
    short = h100_sweep(128).disable_above_batch
    for context in (1024, 8192):
        result = h100_sweep(context)
        d = result.disable_above_batch
        if d is None or d > short:
            continue
        # Otherwise speculation stopped because the two models and their caches no longer fit.
        assert all(not r.fits for r in result.rows if r.batch == d + 1 and r.k > 0)
    at_1k = {r.batch: r.speedup for r in h100_sweep(1024).rows if r.k == 1}
    at_128 = {r.batch: r.speedup for r in h100_sweep(128).rows if r.k == 1}
    assert at_1k[256] > at_128[256]


def test_rows_that_do_not_fit_are_never_best_and_batches_nothing_fits_are_left_out():
    """8192 cached tokens on an H100: at batch 48 plain decoding fits (the target's 15 GB and its KV cache) but the
    draft's weights and cache do not; from batch 64 on not even plain decoding fits."""
    result = h100_sweep(8192, batches=(32, 48, 64, 128))
    unfit = {(r.batch, r.k) for r in result.rows if not r.fits}
    assert {b for b, k in unfit} == {48} and all(k > 0 for _, k in unfit)
    for b in result.best:
        assert (b.batch, b.k) not in unfit or b.k == 0
    assert {r.batch for r in result.rows} == {32, 48} and result.unfit_from_batch == ((8192, 64),)


def test_disable_above_definition():
    from simulator.sweep import SweepRow

    def row(b, k, s):
        return SweepRow(b, k, None, 0, 1, 1, 1, s, "memory", True)

    assert disable_above([row(1, 1, 1.5), row(2, 1, 1.2), row(4, 1, 0.9)]) == 2
    assert disable_above([row(1, 1, 0.9), row(2, 1, 0.8)]) == 0
    assert disable_above([row(1, 1, 1.5), row(2, 1, 1.2)]) is None


def test_markov_sweep_runs_with_its_own_formula():
    m = MarkovAcceptance(0.9, 0.3, 0.1, 0.3)
    result = h100_sweep(1024, batches=(1, 2), acceptance=m)
    r = next(r for r in result.rows if r.k == 4)
    assert r.tokens_per_pass == pytest.approx(m.expected_tokens(4))
