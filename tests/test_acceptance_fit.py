"""Fitting acceptance models to data and judging them on held-out requests: known models recovered from their own
step distributions, cross-validation on synthetic traces drawn from a known model, the choice rule, and the CLI."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import trace_path

from simulator import SpecsimError
from simulator.acceptance import HiddenStateAcceptance, IIDAcceptance, MarkovAcceptance
from simulator.acceptance_fit import (
    AcceptanceData,
    ModelError,
    choose,
    cross_validate,
    fit_models,
    fit_models_many,
    fit_positional,
)
from simulator.hidden_fit import fit_hidden, fit_hidden_many, hidden_starts
from simulator.minimize import nelder_mead, nelder_mead_many
from specsim import cli

KS = range(1, 9)


def test_nelder_mead_finds_a_known_minimum():
    x, value = nelder_mead(lambda x: float(((x - np.array([1.0, -2.0])) ** 2).sum()), np.zeros(2), iters=500)
    assert np.allclose(x, [1.0, -2.0], atol=1e-4) and value < 1e-8


def test_starts_in_lockstep_take_the_paths_they_take_alone():
    """`nelder_mead_many`: Rosenbrock's valley from three starts at once ends where each start ends alone (the
    same branches, point for point), each having stopped at its own iteration."""
    def rosenbrock(xs):
        xs = np.atleast_2d(xs)
        return (1 - xs[:, 0]) ** 2 + 100 * (xs[:, 1] - xs[:, 0] ** 2) ** 2

    starts = np.array([[-1.2, 1.0], [0.0, 0.0], [2.0, 3.5]])
    together = nelder_mead_many(rosenbrock, starts, step=0.3, iters=2000, rtol=1e-9)
    for x0, (x, value) in zip(starts, together):
        alone_x, alone_value = nelder_mead(lambda x: float(rosenbrock(x)[0]), x0, step=0.3, iters=2000, rtol=1e-9)
        assert np.array_equal(x, alone_x) and value == alone_value
    assert all(np.allclose(x, [1.0, 1.0], atol=1e-3) for x, _ in together)


def test_starts_minimising_different_functions_in_lockstep_end_where_each_ends_alone():
    """`nelder_mead_many(..., by_start=True)`: each start minimises its own function (Rosenbrock's valley moved to
    its own minimum), told by the start index every point comes with; each ends exactly where it ends alone."""
    shifts = np.array([[0.0, 0.0], [2.0, -1.0], [-1.5, 0.5]])

    def moved(xs, start):
        z = np.atleast_2d(xs) - shifts[start]
        return (1 - z[:, 0]) ** 2 + 100 * (z[:, 1] - z[:, 0] ** 2) ** 2

    starts = np.array([[-1.2, 1.0], [0.0, 0.0], [2.0, 3.5]])
    together = nelder_mead_many(moved, starts, step=0.3, iters=2000, rtol=1e-9, by_start=True)
    for i, (x0, (x, value)) in enumerate(zip(starts, together)):
        alone = nelder_mead_many(lambda xs, i=i: moved(xs, np.full(len(np.atleast_2d(xs)), i)), x0[None],
                                 step=0.3, iters=2000, rtol=1e-9)[0]
        assert np.array_equal(x, alone[0]) and value == alone[1]
        assert np.allclose(x, shifts[i] + 1.0, atol=1e-3)


def test_hidden_chains_fitted_together_are_the_fits_made_one_at_a_time():
    """`fit_hidden_many` (cross-validation's folds in one lockstep run) gives each target set the chain
    `fit_hidden` gives it alone, to the last digit, for 2 and 3 states; and the models fitted to several data sets
    at once are those fitted to each."""
    truths = [MarkovAcceptance(0.92, 0.35, 0.08, 0.25), MarkovAcceptance(0.8, 0.2, 0.3, 0.4),
              HiddenStateAcceptance((0.95, 0.6, 0.1), ((0.9, 0.08, 0.02), (0.1, 0.8, 0.1), (0.05, 0.15, 0.8)))]
    targets = [{k: t.chain_pmf(k) for k in KS} for t in truths]
    for S in (2, 3):
        alone = [fit_hidden(t, S, 0.7, np.random.default_rng(i)) for i, t in enumerate(targets)]
        together = fit_hidden_many([(t, hidden_starts(S, np.random.default_rng(i))) for i, t in enumerate(targets)], S)
        assert [m.spec for m in together] == [m.spec for m in alone]
    rng = np.random.default_rng(5)
    datas = [_markov_trace(t, 8, 120, rng) for t in truths[:2]]
    models = ("iid", "hmm3", "beta", "markov")
    each = [fit_models(d, (1, 2, 4), models, seed) for d, seed in zip(datas, (3, 9))]
    both = fit_models_many(datas, (1, 2, 4), models, (3, 9))
    assert [{m: f[m].spec for m in models} for f in both] == [{m: f[m].spec for m in models} for f in each]
    assert [list(f) for f in both] == [list(models)] * 2
    with pytest.raises(SpecsimError, match="unknown acceptance model 'hmm9'"):
        fit_models_many(datas, (1, 2), ("iid", "hmm9"), (0, 0))


def test_hidden_chain_pmfs_in_one_pass_equal_the_per_k_forward():
    h = HiddenStateAcceptance((0.95, 0.6, 0.1), ((0.9, 0.08, 0.02), (0.1, 0.8, 0.1), (0.05, 0.15, 0.8)))
    for k, pmf in h.chain_pmfs([1, 3, 8]).items():
        assert np.allclose(pmf, h.chain_pmf(k), atol=1e-12)


def test_a_markov_model_is_recovered_from_its_own_step_distributions():
    truth = MarkovAcceptance(0.92, 0.35, 0.08, 0.25)
    fitted = fit_hidden({k: truth.chain_pmf(k) for k in KS}, 2, truth.alpha, np.random.default_rng(0))
    for k in KS:
        assert np.allclose(fitted.chain_pmf(k), truth.chain_pmf(k), atol=2e-3)


def test_positional_fit_reads_the_replayed_steps():
    pmf8 = MarkovAcceptance(0.9, 0.3, 0.1, 0.3).chain_pmf(8)
    model = fit_positional({8: pmf8})
    assert np.allclose(model.chain_pmf(8), pmf8, atol=1e-12)


def _markov_trace(model: MarkovAcceptance, requests: int, length: int, rng) -> AcceptanceData:
    """Greedy traces drawn from a known hidden chain: per position the run of accepted drafts, capped at 16."""
    yields = []
    for _ in range(requests):
        s = int(rng.random() >= model.token_stationary[0])
        ok = np.zeros(length, dtype=bool)
        for t in range(length):
            ok[t] = rng.random() < model.alphas[s]
            s = int(rng.random() < model.transition[s, 1])
        run = np.zeros(length + 1, dtype=int)
        for t in range(length - 1, -1, -1):
            run[t] = run[t + 1] + 1 if ok[t] else 0
        yields.append(1 + np.minimum(run[:length], 16))
    return AcceptanceData.from_yields(yields, "synthetic markov")


def test_cross_validation_prefers_the_model_the_data_came_from():
    """Data drawn from a sticky two-state chain: the markov model's held-out error is far below i.i.d.'s."""
    truth = MarkovAcceptance(0.95, 0.3, 0.05, 0.15)
    data = _markov_trace(truth, 60, 300, np.random.default_rng(1))
    report = cross_validate(data, ks=(1, 2, 4, 6), folds=4, models=("iid", "positional", "markov"))
    err = {e.name: e.tokens_err for e in report.errors}
    assert err["markov"] < 0.5 * err["iid"] and report.chosen in ("markov", "positional")
    assert report.requests == 60 and report.folds == 4 and report.ks == (1, 2, 4, 6)


def test_choice_is_the_simplest_within_two_percent():
    def e(name, err):
        return ModelError(name, name, (err,), (0.0,))

    assert choose([e("iid", 0.100), e("markov", 0.0995), e("hmm3", 0.090)]) == "hmm3"
    assert choose([e("iid", 0.100), e("markov", 0.0985), e("hmm3", 0.0980)]) == "markov"


def test_iid_data_choose_iid():
    rng = np.random.default_rng(2)
    data = AcceptanceData(tuple(np.full(400, 0.7) for _ in range(10)), source="constant")
    report = cross_validate(data, ks=(1, 3), folds=3, models=("iid", "markov"), seed=3)
    assert report.chosen == "iid" and report.error("iid").tokens_err < 1e-9
    assert IIDAcceptance(0.7).expected_tokens(3) == pytest.approx(report.best.expected_tokens(3))
    del rng


def test_acceptance_fit_cli_on_a_production_trace(tmp_path):
    path = trace_path("gsm8k")
    out = tmp_path / "fit.json"
    r = CliRunner().invoke(cli, ["acceptance", "fit", f"trace:{path}:eagle", "--k", "1..6", "--folds", "3",
                                 "--models", "iid,positional,markov", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "held-out" in r.stdout and "chosen:" in r.stdout
    record = json.loads(out.read_text())
    assert record["chosen"] in ("iid", "positional", "markov") and record["spec"].startswith(record["chosen"][:3])
    # --acceptance fit:FILE uses the written fit at once.
    r = CliRunner().invoke(cli, ["predict", "--hardware", "h100-sxm", "--acceptance", f"fit:{out}", "--batch", "1,2",
                                 "--k", "0..3", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["acceptance"].startswith(record["chosen"][:3])


def test_acceptance_fit_bad_sources(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    for source, fragment in ((f"trace:{empty}", "no usable positions"), ("trace:/no/such.jsonl", "cannot read"),
                             ("iid:0.7", "not a source")):
        r = CliRunner().invoke(cli, ["acceptance", "fit", source])
        assert r.exit_code == 2 and fragment in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_context_fit_recovers_a_known_decay_and_says_it_helps_on_held_out_requests():
    """Synthetic requests whose per-token acceptance is 0.8 below 1,000 tokens of context and 0.4 above: the fitted
    factors fall across that line, and predicting held-out bins with them beats the pooled acceptance."""
    from simulator.acceptance_fit import AcceptanceData, fit_context

    rng = np.random.default_rng(0)
    prompts = rng.integers(100, 1800, size=300)
    alphas = tuple(np.where(p + np.arange(200) < 1000, 0.8, 0.4) for p in prompts)
    fit = fit_context(AcceptanceData(alphas, source="synthetic", prompt_tokens=tuple(int(p) for p in prompts)))
    pooled = np.concatenate(alphas).mean()
    for c, f in zip(fit.contexts, fit.factors):
        if c < 800:
            assert f * pooled == pytest.approx(0.8, abs=0.02)
        if c > 1300:
            assert f * pooled == pytest.approx(0.4, abs=0.02)
    assert fit.heldout_err_with < 0.02 < fit.heldout_err_without


def test_context_fit_needs_contexts():
    from simulator.acceptance_fit import AcceptanceData, fit_context

    with pytest.raises(SpecsimError, match="no prompt lengths"):
        fit_context(AcceptanceData((np.ones(5),), source="x"))


def test_context_decay_fit_recovers_a_logistic_step_and_a_flat_line():
    """The logistic step through noisy samples of a known one comes back within the noise; flat data give a flat
    fit (the same prediction everywhere); fewer than three points are refused."""
    from simulator.acceptance import IIDAcceptance
    from simulator.context import ContextDecay, fit_decay, with_context

    c = np.arange(16.0, 640.0, 32.0)
    true = ContextDecay(high=0.74, low=0.44, c50=310.0, width=25.0)
    a = true.alpha(c) + np.random.default_rng(0).normal(0.0, 0.005, c.size)
    got = fit_decay(c, a)
    assert got.high == pytest.approx(0.74, abs=0.01) and got.low == pytest.approx(0.44, abs=0.01)
    assert got.c50 == pytest.approx(310.0, abs=8.0) and got.width == pytest.approx(25.0, rel=0.3)
    flat = fit_decay(c, np.full(c.size, 0.7))
    assert np.allclose(flat.alpha(np.array([0.0, 300.0, 5000.0])), 0.7, atol=1e-9)
    scaled = with_context(IIDAcceptance(0.7), got.table(100.0, np.array([0.0, 320.0, 640.0])))
    assert scaled.context_factor(0) == pytest.approx(1.0, abs=0.01)
    assert scaled.context_factor(640) == pytest.approx(0.44 / 0.74, abs=0.02)
    with pytest.raises(SpecsimError, match="at least three"):
        fit_decay(c[:2], a[:2])


def test_builtin_pair_acceptance_against_context(builtin_profile):
    """The calibration's measurement against context: a window per start with an interval, each predicted from
    the others, and `measured@context` scales the measured model by the fitted decay (1 at the measurement's own
    context); a bare @context needs a profile."""
    from scenarios.setup import resolve_acceptance
    from simulator.context import ContextDependent

    bc = builtin_profile.acceptance.by_context
    assert len(bc["contexts"]) == len(bc["alpha"]) == len(bc["ci95"]) == len(bc["leave_one_out"]["predicted"]) == 6
    assert all(0.2 < a < 1.0 for a in bc["alpha"]) and all(0 < h < 0.3 for h in bc["ci95"])
    model = resolve_acceptance("measured@context", builtin_profile)
    assert isinstance(model, ContextDependent)
    reference = builtin_profile.acceptance.raw["prompt_tokens"] + builtin_profile.acceptance.tokens_per_prompt / 2
    assert model.context_factor(reference) == pytest.approx(1.0, abs=0.02)
    iid = resolve_acceptance("measured:iid@context:100=1,200=0.5", builtin_profile)
    assert iid.at_context(150).chain_pmf(1)[1] < iid.at_context(50).chain_pmf(1)[1]
    with pytest.raises(SpecsimError, match="bare @context"):
        resolve_acceptance("iid:0.7@context", None)


def test_the_batched_hidden_chain_is_the_forward_algorithm():
    """`hidden_chain_pmf_matrix` (all k at once, the fits' inner loop) against each k's own forward algorithm and
    stationary start (`HiddenChain.chain_pmf`), on random chains of 2 and 3 states."""
    from simulator.acceptance import HiddenStateAcceptance, hidden_chain_pmf_matrix

    rng = np.random.default_rng(7)
    for S in (2, 3):
        for _ in range(20):
            a = rng.uniform(0.05, 0.99, S)
            T = rng.dirichlet(np.ones(S), size=S) * 0.999 + 0.001 / S
            model = HiddenStateAcceptance(tuple(a), tuple(map(tuple, T)))
            matrix = hidden_chain_pmf_matrix(a, T, 8)
            for k in range(1, 9):
                assert np.allclose(matrix[k - 1, :k + 1], model.chain_pmf(k), atol=1e-12)
                assert np.all(matrix[k - 1, k + 1:] == 0)


def test_folds_side_by_side_give_the_serial_answer():
    """The folds and the final fit are independent jobs: two worker processes give exactly the serial report."""
    from simulator.executors import LocalProcesses

    rng = np.random.default_rng(3)
    yields = [np.minimum(rng.geometric(0.35, size=int(n)), 7) for n in rng.integers(20, 60, size=12)]
    data = AcceptanceData.from_yields(yields, source="synthetic")
    serial = cross_validate(data, ks=(1, 2, 4), folds=3, models=("iid", "beta", "markov"), seed=1)
    parallel = cross_validate(data, ks=(1, 2, 4), folds=3, models=("iid", "beta", "markov"), seed=1,
                              executor=LocalProcesses(2))
    assert serial.errors == parallel.errors and serial.chosen == parallel.chosen
    assert {m: serial.models[m].spec for m in serial.models} == {m: parallel.models[m].spec for m in parallel.models}
