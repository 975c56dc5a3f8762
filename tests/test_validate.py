"""Validation plumbing: real runs on tiny models, predictors, the comparison and its report (no timing asserted)."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from calibrate.paired_runs import Config, MeasuredConfig, Summary, measure
from calibrate.validate import PRIMARY, REPLAYED, SpotCheck, compare, predicted_curves, predictors
from calibrate.validate_report import format_report
from engine.builtin import encode, load_pair, prompts
from engine.speculative import Decoding, RealEngine, next_turn
from simulator.sweep import Candidate
from simulator.trees import parse_branching
from specsim import cli


@pytest.fixture(scope="module")
def small_runs():
    target, draft = load_pair(expanded=False, dtype="fp32", max_seq_len=256)
    engine = RealEngine(target, draft)
    held = [encode(p)[:40] for p in prompts("heldout")[:4]]
    configs = [Config(1, 2), Config(2, 2), Config(2, 0, parse_branching("2,1"))]
    return measure(engine, held, configs, new_tokens=12, repeats=2, seed=0)


def test_real_runs_record_everything(small_runs):
    assert len(small_runs) == 3
    for r in small_runs:
        assert r.speedup.n == 2 and r.speedup.min <= r.speedup.median <= r.speedup.max
        assert 1.0 <= r.tokens_per_pass.median <= (4.0 if r.tree else 3.0)  # k = 2: at most 3; tree 2,1: depth 2
        assert r.draft_s.median > 0 and r.verify_s.median > 0
        # the repeats' tokens over their passes: a weighted mean of the repeats' own figures
        assert r.tokens_per_pass.min <= r.pooled_tokens_per_pass <= r.tokens_per_pass.max
        assert r.speedup_estimate == pytest.approx(r.pooled_tokens_per_pass * r.cost_ratio.median)


def test_the_measured_speedup_pools_acceptance_and_takes_the_median_cost_ratio():
    """Worked by hand: three pairs drew 3.0, 2.0 and 4.0 tokens per pass over 10, 10 and 20 passes (130 tokens over
    40 passes pooled: 3.25) at cost ratios 0.5, 0.6 and 0.7 (median 0.6): 3.25 x 0.6 = 1.95, where the median of the
    pairs' speed-ups (1.5, 1.2, 2.8) says 1.5 and leans on which prompts one repeat drew. Rows written before the
    counts were kept fall back to that median."""
    def s(*v):
        return Summary.of(v)

    pairs = s(1.5, 1.2, 2.8)
    m = MeasuredConfig(1, 4, None, pairs, s(3.0, 2.0, 4.0), *(s(1.0) for _ in range(6)), cost_ratio=s(0.5, 0.6, 0.7),
                       pooled_tokens_per_pass=(30 + 20 + 80) / 40)
    assert m.tokens_per_pass_estimate == pytest.approx(3.25)
    assert m.speedup_estimate == pytest.approx(3.25 * 0.6)
    old = MeasuredConfig(1, 4, None, pairs, s(3.0, 2.0, 4.0), *(s(1.0) for _ in range(6)))
    assert old.speedup_estimate == 1.5 and old.tokens_per_pass_estimate == 3.0


class DriftingEngine:
    """A stand-in engine on a machine that slows by 2 % with every step it takes: a plain step costs 1 time unit, a
    k = 2 step 1.5 and keeps one draft per sequence (2 tokens per pass), so the true speed-up is 2 / 1.5 at any speed.
    With `mode` "graph" `measure` runs a pair back to back (`generate`), with "eager" in turns (`generate_in_turns`)."""

    device = "cpu"

    def __init__(self, mode: str):
        self.runner = SimpleNamespace(mode=mode)
        self.calls = []  # (the runs' k, the prompts) per call
        self.steps_taken = 0

    def _step(self, how, batch):
        from engine.speculative import StepRecord
        from simulator.sweep import StepPhases

        slow = 1.02 ** self.steps_taken
        self.steps_taken += 1
        cost, accepted = (1.5, 1) if how.k else (1.0, 0)
        return StepRecord([accepted] * batch, [accepted] * batch, StepPhases(0.0, cost * slow, 0.0))

    def generate(self, prompts, new_tokens, how, gen, until="all"):
        from engine.speculative import RunResult

        self.calls.append(((how.k,), [tuple(p) for p in prompts]))
        steps = [self._step(how, len(prompts)) for _ in range(-(-new_tokens // (2 if how.k else 1)))]
        return RunResult([[0] * new_tokens for _ in prompts], steps)

    def generate_in_turns(self, prompts, new_tokens, hows, gen):
        from engine.speculative import RunResult

        self.calls.append((tuple(h.k for h in hows), [tuple(p) for p in prompts]))
        runs, emitted = [RunResult([[0] * new_tokens for _ in prompts]) for _ in hows], [0] * len(hows)
        while (i := next_turn(emitted, [len(r.steps) for r in runs], new_tokens)) is not None:
            runs[i].steps.append(self._step(hows[i], len(prompts)))
            emitted[i] += 2 if hows[i].k else 1
        return runs


PAIRED_CONFIGS = [Config(1, 2), Config(2, 2), Config(4, 2)]


def test_pairs_back_to_back_alternate_and_cancel_drift_in_the_median():
    """With CUDA graphs every speculative run has a plain run on the same prompts right before or after it (each
    order in turn), so a machine slowing 2 % a step (8 % within one batch-1 run) leaves the median speed-up within
    1 % of the truth; unpaired runs minutes apart would have measured the drift."""
    engine = DriftingEngine("graph")
    prompts_ = [[i, i + 1] for i in range(8)]
    rows = measure(engine, prompts_, PAIRED_CONFIGS, new_tokens=4, repeats=4, seed=0, min_sequences=4)
    calls = engine.calls[6:]  # after a first untimed round over the 3 plain and 3 speculative shapes (captures)
    assert len(calls) == 4 * 2 * (4 + 2 + 1)  # 4 repeats x 2 runs; a run is 4 groups at batch 1, 2 at 2, 1 at 4
    firsts = []
    for i in range(0, len(calls), 2):  # a pair: the same group of prompts, plain and speculative one after the other
        (a, pa), (b, pb) = calls[i], calls[i + 1]
        assert {a, b} == {(0,), (2,)} and pa == pb
        firsts.append(a)
    assert firsts.count((0,)) == firsts.count((2,))  # counterbalanced: plain first as often as second
    for r in rows:
        assert r.speedup.median == pytest.approx(2 / 1.5, rel=0.01)
        assert r.speedup.min < 2 / 1.5 < r.speedup.max  # each single pair is off by the drift, in both directions


def test_pairs_in_turns_cancel_drift_in_every_pair():
    """With eager passes a pair is decoded in turns, step by step, so both runs sample the same stretch of a
    drifting machine: every single pair's speed-up is within 1 % of the truth where back to back each was off by
    the drift (the machine slows 1.02^36 = 2x over one batch-1 pair here)."""
    engine = DriftingEngine("eager")
    prompts_ = [[i, i + 1] for i in range(8)]
    rows = measure(engine, prompts_, PAIRED_CONFIGS, new_tokens=12, repeats=4, seed=0, min_sequences=4)
    assert len(engine.calls) == 4 * (4 + 2 + 1)  # one call per group decodes both runs of the pair
    assert {ks for ks, _ in engine.calls} == {(0, 2), (2, 0)}  # which run takes the first turn alternates
    for r in rows:
        assert r.speedup.n == 4
        assert r.speedup.min == pytest.approx(2 / 1.5, rel=0.01) and r.speedup.max == pytest.approx(2 / 1.5, rel=0.01)
        assert r.speedup_estimate == pytest.approx(2 / 1.5, rel=0.01)
    back_to_back = measure(DriftingEngine("graph"), prompts_, PAIRED_CONFIGS, new_tokens=12, repeats=4, seed=0,
                           min_sequences=4)
    assert max(abs(r.speedup.max / (2 / 1.5) - 1) for r in back_to_back) > 0.1  # the drift each pair measured


def test_a_batch_counts_its_tokens_per_pass_as_a_servers_rows_would():
    """Worked by hand: a sequence emitting 5 tokens a step beside one emitting 1, four steps. Every sequence alike
    (fixed steps) gives 24 / 8 = 3.0 tokens per pass; as a server counts requests of equal length (the slowest's 4
    tokens: 1 step for the first, 4 for the second, 9 tokens over 5 passes) 1.8. One sequence alone is its plain
    ratio."""
    from types import SimpleNamespace

    from calibrate.paired_runs import as_served

    steps = [SimpleNamespace(accepted=[4, 0]) for _ in range(4)]
    assert as_served(steps).tolist() == [9.0, 5.0]
    alone = [SimpleNamespace(accepted=[a]) for a in (3, 0, 1)]
    assert as_served(alone).tolist() == [7.0, 3.0]


def test_batches_counted_as_served_pool_like_the_acceptance_models():
    """Batches of 8 sequences, each with its own alpha ~ Beta(8, 3), stepped at k = 4 until the first has 48 tokens
    (as `validate` runs them): counted as a server would, their tokens per pass are the Beta model's (its steps
    pooled over requests of equal length) within 1.5 % (the last step's overshoot of requests this short leaves
    +0.5 %); every sequence weighed alike, they are 5 % above it."""
    from types import SimpleNamespace

    from calibrate.paired_runs import as_served
    from simulator.acceptance import BetaAcceptance

    rng = np.random.default_rng(0)
    served, alike = np.zeros(2), np.zeros(2)
    for _ in range(1000):
        alpha = rng.beta(8, 3, size=8)
        steps, emitted = [], np.zeros(8)
        while emitted.max() < 48:
            a = (rng.random((8, 4)) < alpha[:, None]).cumprod(axis=1).sum(axis=1)
            steps.append(SimpleNamespace(accepted=a.tolist()))
            emitted += a + 1
        served += as_served(steps)
        alike += [emitted.sum(), 8 * len(steps)]
    model = BetaAcceptance(8, 3).expected_tokens(4)
    assert served[0] / served[1] == pytest.approx(model, rel=0.015)
    assert alike[0] / alike[1] > 1.03 * model


def test_ratio_standard_error_by_hand_and_against_monte_carlo():
    """By hand: units on one line through the origin leave no error; (6, 2) and (2, 2) tokens over passes pool to
    R = 2 with residuals +2 and -2, so se = sqrt(8 / 2) / 2 = 1. Monte Carlo: 24 sequences of 48 tokens, each with its
    own alpha ~ Beta(8, 3) at k = 4 (a validation row's shape), in 2,000 runs: the pooled tokens per pass spreads
    from run to run as the formula says each run alone (its median within 10 % of the spread)."""
    from simulator.validation import ratio_standard_error

    assert ratio_standard_error([6, 4], [3, 2]) == 0.0
    assert ratio_standard_error([6, 2], [2, 2]) == pytest.approx(1.0)
    assert np.isnan(ratio_standard_error([6], [2]))
    rng = np.random.default_rng(1)
    pooled, se = [], []
    for _ in range(2000):
        alpha = rng.beta(8, 3, size=24)
        a = (rng.random((48, 24, 4)) < alpha[None, :, None]).cumprod(axis=2).sum(axis=2)  # (steps, sequences)
        emitted = np.cumsum(a + 1, axis=0)
        passes = (emitted < 48).sum(axis=0) + 1  # steps each sequence took to reach 48 tokens
        tokens = emitted[passes - 1, np.arange(24)]
        pooled.append(tokens.sum() / passes.sum())
        se.append(ratio_standard_error(tokens, passes))
    assert np.median(se) == pytest.approx(np.std(pooled), rel=0.10)


def test_median_standard_error_against_its_large_sample_form():
    """The bootstrap standard error of a median of n normal values approaches sqrt(pi / 2) sigma / sqrt(n) (the
    median's asymptotic variance, 1 / (4 n f(m)^2)): over 200 samples of 101 values, its median within 10 %."""
    from simulator.validation import median_standard_error

    rng = np.random.default_rng(3)
    se = [median_standard_error(rng.normal(0.0, 2.0, 101), rng, resamples=500) for _ in range(200)]
    assert np.median(se) == pytest.approx(np.sqrt(np.pi / 2) * 2.0 / np.sqrt(101), rel=0.10)
    assert np.isnan(median_standard_error([1.0], rng))
    assert median_standard_error([2.0, 2.0, 2.0], rng) == 0.0


def test_report_says_what_the_acceptance_draw_leaves_open(builtin_profile):
    """Rows that record their tokens per pass's standard error: the report gives its median and counts the rows whose
    error is within two of them (here one of two: a 1 % error against 2 % noise, a 9 % error against 3 %)."""
    from dataclasses import replace

    preds = predictors(builtin_profile)

    def s(v):
        return Summary(v, 0.0, v, v, 1)

    measured = []
    for b, miss, noise in ((1, 1.01, 0.02), (2, 1.09, 0.03)):
        p = preds[PRIMARY](b, Candidate(2), 30)
        m = MeasuredConfig(b, 2, None, s(p.speedup / miss), s(p.tokens_per_pass / miss), s(p.step_s),
                           s(p.phases.draft_s), s(p.phases.verify_s), s(p.phases.accept_s), s(p.baseline_s),
                           s(1.0))
        measured.append(replace(m, pooled_tokens_per_pass=p.tokens_per_pass / miss,
                                tokens_per_pass_se=noise * p.tokens_per_pass / miss))
    report = compare(builtin_profile, measured, [], 30, [1, 2], {"new_tokens": 12, "repeats": 1, "profile": "p"})
    median, within, rows = report.within_acceptance_noise(PRIMARY)
    assert median == pytest.approx(0.025) and (within, rows) == (1, 2)
    assert f"{PRIMARY}'s error within two of them in 1 of 2 rows" in format_report(report, PRIMARY)
    stored = report.to_dict()["rows"][0]["measured"]
    assert MeasuredConfig.from_dict(stored).acceptance_noise == pytest.approx(0.02)
    del stored["tokens_per_pass_se"]  # a run stored before the field: no noise, no line
    assert MeasuredConfig.from_dict(stored).acceptance_noise is None


def test_predictors_and_perfect_measurements(builtin_profile):
    """Measurements made equal to the primary prediction give zero error for it, and the report says so."""
    preds = predictors(builtin_profile)
    assert {"calibrated", "calibrated+iid", "calibrated+markov", "calibrated+trace", "leviathan", "roofline"} <= set(
        preds)
    tree = parse_branching("2,1")
    measured = []
    for b in (1, 2):
        for cand in (Candidate(2), Candidate(None, tree)):
            p = preds[PRIMARY](b, cand, 30)

            def s(v):
                return Summary(v, 0.0, v, v, 1)

            measured.append(MeasuredConfig(b, cand.k, cand.tree_label, s(p.speedup), s(p.tokens_per_pass),
                                           s(p.step_s), s(p.phases.draft_s), s(p.phases.verify_s),
                                           s(p.phases.accept_s), s(p.baseline_s), s(1.0)))
    report = compare(builtin_profile, measured, [tree], 30, [1, 2], {"new_tokens": 12, "repeats": 1, "profile": "p"})
    assert report.predictors[PRIMARY].median_abs_err_speedup == pytest.approx(0, abs=1e-12)
    assert report.predictors[PRIMARY].p90_abs_err_speedup == pytest.approx(0, abs=1e-12)
    assert all(abs(v) < 1e-9 for w in report.worst for v in w.terms.values())
    text = format_report(report, PRIMARY)
    assert "calibrated             median   0.0 %" in text and "crossover" in text
    assert json.loads(json.dumps(report.to_dict(), default=float))["predictors"][PRIMARY]["p90_abs_err_speedup"] == 0
    curves = predicted_curves(builtin_profile, [Candidate(2)], [1, 2, 3], 30)
    assert len(curves["k = 2"]) == 3


def test_validation_plots_draw(builtin_profile, small_runs, tmp_path):
    from plots.validation import predicted_vs_measured, speedup_vs_batch

    report = compare(builtin_profile, small_runs, [parse_branching("2,1")], 50, [1, 2])
    fig = predicted_vs_measured(report)
    fig.savefig(tmp_path / "a.png")
    fig = speedup_vs_batch(report, predicted_curves(builtin_profile, [Candidate(2)], [1, 2], 50))
    fig.savefig(tmp_path / "b.png")
    for name in ("a.png", "b.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.isfinite(report.predictors["leviathan"].median_abs_err_speedup)


def test_validate_refuses_a_profile_without_acceptance(builtin_profile, tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({**builtin_profile.to_dict(), "acceptance": None}))
    r = CliRunner().invoke(cli, ["validate", "--profile", str(f), "--quick"])
    assert r.exit_code == 2 and "measured acceptance" in r.output and len(r.output.strip().splitlines()) == 1


def test_predict_with_measured_acceptance(builtin_profile, tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps(builtin_profile.to_dict()))
    for spec in ("measured", "measured:markov", "measured:trace", "measured:iid"):
        r = CliRunner().invoke(cli, ["predict", "--profile", str(f), "--acceptance", spec, "--batch", "1..4",
                                     "--k", "0..3", "--tree", "2,1", "--json"])
        assert r.exit_code == 0, r.output
        data = json.loads(r.stdout)
        assert data["mode"] == "profile" and any(row["tree"] == "2,1" for row in data["rows"])
    r = CliRunner().invoke(cli, ["predict", "--profile", str(f), "--acceptance", "measured:nope"])
    assert r.exit_code == 2 and "unknown measured variant" in r.output


def test_spot_check_reanchors_the_calibrated_prediction(builtin_profile):
    """Passes timed 20 % slower now than profiled: the calibrated predictor prices them so (baseline and step slower
    alike), `as-profiled` keeps the profile, and the report says the device drifted."""
    from calibrate.validate import spot_check

    t, d = builtin_profile.target.name, builtin_profile.draft.name
    cost = builtin_profile.cost_model()
    slow = {(m.name, b): 1.2 * cost.pass_time_s(m, b, 1, 30) for m in (builtin_profile.target,
                                                                       builtin_profile.draft) for b in (1, 2)}
    spot = spot_check(builtin_profile, slow, slow, 30)
    assert spot.largest == pytest.approx(0.2) and dict(spot.drift[t]) == pytest.approx({1: 1.2, 2: 1.2})
    preds = predictors(builtin_profile, spot.drift)
    now, then = preds[PRIMARY](1, Candidate(2), 30), preds["as-profiled"](1, Candidate(2), 30)
    assert now.phases.verify_s > then.phases.verify_s and now.baseline_s > 1.15 * then.baseline_s
    assert d in spot.drift
    measured = [MeasuredConfig(1, 2, None, *(Summary(v, 0.0, v, v, 1) for v in (
        then.speedup, then.tokens_per_pass, then.step_s, then.phases.draft_s, then.phases.verify_s,
        then.phases.accept_s, then.baseline_s, 1.0)))]
    report = compare(builtin_profile, measured, [], 30, [1], {"profile": "p"}, spot)
    assert report.predictors["as-profiled"].median_abs_err_speedup == pytest.approx(0, abs=1e-12)
    assert "runs up to 20 % off its profile" in format_report(report)


def test_replayed_error_is_the_cost_ratios_at_each_pairs_acceptance(tiny_profile):
    """A shape validation's calibrated@replayed prices each pair at the tokens per pass it drew: measured speed-ups
    scattered by acceptance draws (pairs kept 1.5, 2.5 and 3.5 tokens a pass) but whose plain / speculative step
    ratio is exactly the predicted one have zero error there, while the acceptance model's own prediction misses."""
    from simulator.acceptance_parse import parse_acceptance

    p = tiny_profile.profile
    acc = parse_acceptance("iid:0.6")
    pred = predictors(p, forced=acc)[PRIMARY](2, Candidate(3), 20)
    ratio = pred.baseline_s / pred.step_s

    def s(*xs):
        return Summary.of(xs)

    tpp = (1.5, 2.5, 3.5)
    m = MeasuredConfig(2, 3, None, s(*(t * ratio for t in tpp)), s(*tpp), s(pred.step_s), s(pred.phases.draft_s),
                       s(pred.phases.verify_s), s(pred.phases.accept_s), s(pred.baseline_s), s(1.0), s(ratio, ratio))
    report = compare(p, [m], [], 20, [2], {"profile": "p"}, None, acc)
    assert report.predictors[REPLAYED].median_abs_err_speedup == pytest.approx(0, abs=1e-12)
    assert report.predictors[PRIMARY].median_abs_err_speedup == pytest.approx(
        abs(pred.tokens_per_pass / 2.5 - 1), rel=1e-9)
    # With a spot check that finds the draft twice as slow as profiled, the profile's own ratio (here the measured
    # one) is scored as as-profiled@replayed, and the re-anchored one misses.
    d = p.draft.name
    spot = SpotCheck(20, ((d, 1, 1e-3, 2e-3, 2e-3), (d, 4, 1e-3, 2e-3, 2e-3)))
    drifted = compare(p, [m], [], 20, [2], {"profile": "p"}, spot, acc)
    assert drifted.predictors["as-profiled@replayed"].median_abs_err_speedup == pytest.approx(0, abs=1e-12)
    assert drifted.predictors[REPLAYED].median_abs_err_speedup > 0.01


def test_forced_acceptance_replays_the_model_and_keeps_the_passes_real(tiny_profile):
    """Random-weight models accept almost nothing of each other; forced, the engine's accepted lengths follow the
    acceptance model (mean within sampling error of E[A]) while every pass still runs."""
    import torch

    from engine.model import build_decoder
    from simulator.acceptance_parse import parse_acceptance

    p = tiny_profile.profile
    engine = RealEngine(build_decoder(p.target, 128, seed=0), build_decoder(p.draft, 128, seed=1))
    acc = parse_acceptance("markov:0.95,0.2,0.1,0.3")
    engine.force(acc, seed=0)
    rng = np.random.default_rng(0)
    prompts_ = [rng.integers(0, p.target.vocab_size, 12).tolist() for _ in range(8)]
    run = engine.generate(prompts_, 60, Decoding(k=3), torch.Generator().manual_seed(0), until="first")
    A = np.concatenate([s.accepted for s in run.steps])
    expected = acc.expected_tokens(3) - 1
    assert abs(A.mean() - expected) < 4 * A.std() / np.sqrt(A.size) + 0.05
    assert all(s.phases.draft_s > 0 and s.phases.verify_s > 0 for s in run.steps)
    engine.force(None)
    from simulator import SpecsimError

    engine.force(acc)
    with pytest.raises(SpecsimError, match="forced acceptance replays chains"):
        engine.generate(prompts_, 8, Decoding(tree=parse_branching("2,1")))


def test_shape_validation_at_the_profiles_shapes(tiny_profile, tmp_path):
    """`validate --acceptance SPEC` at a profile's own (tiny) shapes runs, reports every predictor with the replayed
    acceptance, and refuses shapes the profile was not calibrated at and trees."""
    from conftest import one_line_error, run, save_tiny

    path = tmp_path / "tiny.json"
    save_tiny(tiny_profile, path)
    r = run("validate", "--profile", str(path), "--acceptance", "iid:0.8", "--batch", "1,2", "--k", "1,3",
            "--repeats", "1", "--tokens", "12", "--tree", "", "--prompt-tokens", "8", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{"):])
    assert report["settings"]["shapes"] == "tiny-target / tiny-draft" and len(report["rows"]) == 4
    assert report["settings"]["pairs"] == "in turns"  # eager passes: each pair decoded step by step in turns
    assert {"calibrated", "calibrated+iid", "leviathan", "roofline", "calibrated@replayed"} <= set(report["predictors"])
    assert report["predictors"]["calibrated@replayed"]["median_abs_err_tokens_per_pass"] == 0
    one_line_error(run("validate", "--profile", str(path), "--acceptance", "iid:0.8", "--target", "llama-68m",
                       "--tree", ""), "calibrated at tiny-target / tiny-draft", "specsim calibrate --target llama-68m")
    r = run("validate", "--profile", str(path), "--acceptance", "iid:0.8")
    assert r.exit_code == 2 and "replays chains" in r.output


def test_spot_checks_time_passes_in_the_calibrations_cache_length(builtin_profile, monkeypatch):
    """A spot check's passes read a cache as long as the calibration's (its stride moves a pass by a few per cent):
    the grid's longest context plus its most new tokens plus one, per model."""
    import torch

    import calibrate.calibration as run_module
    from calibrate.validate import calibrated_cache_len, time_spot

    p = builtin_profile
    decoding = [q for q in p.timed if q.model == p.target.name and q.context > 0]
    want = max(q.context for q in decoding) + max(q.new_tokens for q in decoding) + 1
    assert calibrated_cache_len(p, p.target) == want > 6
    seen = []

    def fake(models, device, timer, runner, batches, contexts, bar, effort, seed=0, decoders=None, keep=False):
        seen.extend((m.spec.name, m.max_len) for m in models)
        return [{"model": m.spec.name, "batch": b, "new_tokens": 1, "context": contexts[0], "median_s": 1e-3}
                for m in models for b in batches]

    monkeypatch.setattr(run_module, "time_together", fake)
    out = time_spot(p, torch.device("cpu"), None, [1, 4], 4, 0, takes=1)  # a context shorter than the grid's
    assert set(out) == {(m.name, b) for m in (p.target, p.draft) for b in (1, 4)}
    assert dict(seen) == {p.target.name: want, p.draft.name: calibrated_cache_len(p, p.draft)}


def test_real_runs_use_the_threads_the_profile_was_timed_on(builtin_profile):
    """A CPU profile records its torch threads; a validation in a process with other threads runs on the profile's
    (and says so): a pass of several rows is split over the threads, one row is not, so the ratios it predicts
    belong to its own thread count. Nothing changes, and nothing is said, when they agree or on a GPU profile."""
    import dataclasses

    import torch

    from engine.device import match_threads

    before = torch.get_num_threads()
    try:
        one = dataclasses.replace(builtin_profile, device_state={"start": {"torch_threads": 1}})
        torch.set_num_threads(2)
        note = match_threads(one)
        assert torch.get_num_threads() == 1 and "1 torch thread " in note and "had 2" in note
        assert match_threads(one) is None  # now they agree
        gpu = dataclasses.replace(one, device=dataclasses.replace(one.device, kind="cuda"))
        torch.set_num_threads(2)
        assert match_threads(gpu) is None and torch.get_num_threads() == 2
        assert match_threads(dataclasses.replace(one, device_state={})) is None  # an old profile: as it is
    finally:
        torch.set_num_threads(before)


def test_a_served_streams_spot_checks_capture_their_passes_once(tiny_profile, monkeypatch):
    """The spot checks around every run of a served stream time the same passes again and again: given the same
    models (`decoders`), a graph runner captures each (model, batch) once for all of them. On the first H200 run the
    spot checks were 120 of a stream's 151 captures (each check built its models anew and captured them again)."""
    import torch

    from calibrate.timing import Effort
    from calibrate.validate import time_spot
    from engine.pass_runner import EagerStandIn, GraphRunner

    monkeypatch.setattr(Effort, "of", classmethod(lambda cls, quick, busy: cls(0.01, 3, 3, 0.5)))
    p = tiny_profile.profile
    backend, models = EagerStandIn(), {}
    runner = GraphRunner(backend)
    for _ in range(3):  # before the first run, between runs, after the last
        out = time_spot(p, torch.device("cpu"), runner, [1, 2], 8, 0, takes=2, decoders=models)
        assert set(out) == {(m.name, b) for m in (p.target, p.draft) for b in (1, 2)}
    assert backend.captures == 4 and backend.replays > 0  # two models x two batches, once
    without = EagerStandIn()
    for _ in range(2):
        time_spot(p, torch.device("cpu"), GraphRunner(without), [1, 2], 8, 0, takes=2)
    assert without.captures == 16  # each call, each take, again
