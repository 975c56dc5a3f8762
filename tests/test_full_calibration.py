"""The full (not --quick) calibration of the built-in pair: acceptance against context, the tax on speculation and
128-token runs, none of which the quick one meets. Its every step at a small size (the counts of the full plan
shrunk, its lengths kept: they set every cache it needs) is a slow test; the step that once failed, at the full
plan's lengths, and what a cache too small says, run in the default suite. No timing is asserted."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import small_device_benchmarks

from calibrate import calibration
from calibrate.calibration import Grid, calibrate
from calibrate.pair_measurements import PAIR_SLOTS, BuiltinPlan
from engine.speculative import Decoding, RealEngine
from scenarios import load_model
from simulator import SpecsimError

PAIR = (load_model("specsim-target", "fp32"), load_model("specsim-draft", "fp32"))
needs_pair = pytest.mark.skipif(not calibration.builtin_pair(*PAIR),
                                reason="the built-in pair's weights are missing (python -m engine.train)")


def test_the_full_plan_measures_what_the_quick_one_leaves_out():
    full, quick = BuiltinPlan.of(False), BuiltinPlan.of(True)
    assert (full.tokens, full.by_context, full.tax) == (128, (64, 512), True)
    assert quick.by_context is None and not quick.tax and quick.tokens < full.tokens


@needs_pair
def test_the_lookup_step_at_the_full_plans_length_fits_the_pairs_cache():
    """The n-gram step of the full calibration (every prompt made to repeat itself: 145 tokens; 128 new; chains of
    4) on the pair as a calibration loads it: it failed there, decoding until the slowest sequence was done."""
    from calibrate.ngram import measure_ngram_acceptance
    from engine.builtin import encode, load_pair, prompts

    target, _ = load_pair(expanded=False, dtype="fp32", max_seq_len=PAIR_SLOTS)
    out = measure_ngram_acceptance(target, [encode(p) for p in prompts("calibration")[:2]],
                                   BuiltinPlan.of(False).tokens)
    assert out["steps"] > 0 and 0.0 <= out["proposal_rate"] <= 1.0


def test_a_cache_too_small_names_every_term_of_what_it_needs(builtin_pair):
    """The message adds up: prompt + new tokens + span + margin (+ the run-ahead of decoding until the slowest)."""
    target, _ = builtin_pair  # 320 slots
    prompt = list(range(2, 147))  # 145 tokens, as the n-gram step's longest repeated prompt
    with pytest.raises(SpecsimError) as e:
        RealEngine(target).generate([prompt], 128, Decoding(k=4, drafter="ngram"))
    text = str(e.value)
    assert "prompt (145) + new tokens (128) + drafted span (4) + margin (2) + run-ahead (512" in text
    assert "need 791" in text and 145 + 128 + 4 + 2 + 512 == 791


@pytest.mark.slow
@needs_pair
def test_every_step_of_the_full_calibration_at_a_small_size(monkeypatch):
    """Minutes on a busy 2-core host (most of it the engine's real steps and the acceptance fits)."""
    small_device_benchmarks(monkeypatch)
    full = Grid.default(quick=False)
    # the full grid's longest context and most new tokens (its caches), two of its batches
    grid = Grid(batches=(1, 2), target_new_tokens=(1, max(full.target_new_tokens)), draft_new_tokens=(1, 2),
                contexts=(max(full.contexts),), probe_layers=(1, 2))
    plan = replace(BuiltinPlan.of(False), prompts=2, ngram_prompts=3, by_context=(3, 512), repeats=1)
    monkeypatch.setattr("calibrate.ngram.HOST_BATCHES", (1, 4))  # the host lookup's own grid: 6 points, not 12
    # The engine's real steps (its overheads, its tax) on the trained target as it is, not widened to
    # specsim-target's cost: the same steps, each a tenth of the time.
    monkeypatch.setattr("engine.builtin.EXPANDED", {"n_layers": 4, "d_model": 256, "n_heads": 4, "d_ff": 768})
    profile = calibrate(*PAIR, torch.device("cpu"), grid, quick=False, command="test", plan=plan).profile
    assert not profile.quick and profile.not_measured == ()  # acceptance against context and the tax: measured
    acc = profile.acceptance
    assert acc is not None and acc.by_context and acc.ngram is not None
    assert profile.speculation_tax
    assert {p.context for p in profile.passes if p.model == PAIR[0].name} == {512}


def test_progress_estimates_the_whole_from_the_first_call(monkeypatch):
    """A block of 10 points (20 untimed calls of 2 s each, then 12 s of rounds): after the first call the share
    reported prices the whole at 20 x 2 + 12 = 52 s, as it will take, not the first point's time x the points."""
    from calibrate import timing

    clock = iter([0.0, 2.0, 4.0, 40.0, 46.0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    shares: list[float] = []
    est = timing.Estimate(calls=20, budget_s=12.0, report=shares.append)
    est.call()  # at 2 s
    est.call()  # at 4 s
    est.rounds(0.5)  # untimed calls took 40 s; half of the rounds' budget spent
    assert shares[0] == pytest.approx(2 / 52) and shares[1] == pytest.approx(4 / 52)
    assert shares[2] == pytest.approx((40 + 6) / 52)
