"""Acceptance models: closed forms against Monte Carlo, limits, and the published trace figures."""

import numpy as np
import pytest
from conftest import pooled_requests, trace_path
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios.acceptance_specs import acceptance_from_spec
from scenarios.traces import load_acceptance_trace
from simulator import SpecsimError
from simulator.acceptance import (
    BetaAcceptance,
    IIDAcceptance,
    MarkovAcceptance,
    PositionalAcceptance,
    RanksAcceptance,
    beta_quadrature,
    tokens_given_alpha,
)
from simulator.acceptance_parse import parse_acceptance

N_MC = 40_000
prob = st.floats(0.02, 0.98)
ks = st.integers(1, 8)


def assert_mc_matches(model, k, rng, n=N_MC):
    """The sample mean of A + 1 lies within 5 standard errors of the closed form, and so does each P(A = a)."""
    draws = model.sample_chain(k, rng, n)
    pmf = model.chain_pmf(k)
    assert pmf.shape == (k + 1,) and np.isclose(pmf.sum(), 1.0) and (pmf >= -1e-15).all()
    expected = model.expected_tokens(k)
    se = np.sqrt(np.var(draws + 1) / n) + 1e-9
    assert abs(np.mean(draws + 1) - expected) < 5 * se + 1e-3
    freq = np.bincount(draws, minlength=k + 1) / n
    assert np.all(np.abs(freq - pmf) < 5 * np.sqrt(pmf * (1 - pmf) / n) + 2e-3)


@settings(max_examples=15, deadline=None)
@given(a=prob, k=ks)
def test_iid_closed_form_matches_monte_carlo(a, k):
    assert_mc_matches(IIDAcceptance(a), k, np.random.default_rng(1))


@settings(max_examples=15, deadline=None)
@given(alphas=st.lists(prob, min_size=1, max_size=6), k=ks)
def test_positional_closed_form_matches_monte_carlo(alphas, k):
    model = PositionalAcceptance(tuple(alphas))
    cond = model.conditional(k)
    assert model.expected_tokens(k) == pytest.approx(1 + np.cumprod(cond).sum())
    assert_mc_matches(model, k, np.random.default_rng(2))


@settings(max_examples=15, deadline=None)
@given(a=st.floats(0.3, 20), b=st.floats(0.3, 20), k=ks)
def test_beta_closed_form_matches_monte_carlo(a, b, k):
    assert_mc_matches(BetaAcceptance(a, b), k, np.random.default_rng(3))


@settings(max_examples=15, deadline=None)
@given(ae=prob, ah=prob, peh=st.floats(0.01, 0.99), phe=st.floats(0.01, 0.99), k=ks)
def test_markov_forward_algorithm_matches_monte_carlo(ae, ah, peh, phe, k):
    assert_mc_matches(MarkovAcceptance(ae, ah, peh, phe), k, np.random.default_rng(4))


@settings(max_examples=5, deadline=None)  # 30,000 steps each, one Python call per step: ~0.7 s an example
@given(ae=prob, ah=prob, peh=st.floats(0.02, 0.5), phe=st.floats(0.02, 0.5), k=st.integers(1, 6))
def test_markov_step_start_distribution_is_the_long_run_of_a_persistent_stream(ae, ah, peh, phe, k):
    """A sequence followed step after step (state carried over) yields, in the long run, the closed-form mean."""
    model = MarkovAcceptance(ae, ah, peh, phe)
    step = model.stream(np.random.default_rng(5))
    draws = np.array([step(k) for _ in range(30_000)]) + 1
    # Steps are correlated: allow for it with a generous band (batch means would be tighter; this is a mean check).
    assert abs(draws.mean() - model.expected_tokens(k)) < 0.05 * model.expected_tokens(k)


def test_k0_is_plain_decoding_and_alpha_one_gives_k_plus_one():
    models = [IIDAcceptance(1.0), PositionalAcceptance((1.0,)), MarkovAcceptance(1.0, 1.0, 0.2, 0.3),
              RanksAcceptance((1.0,))]
    for m in models:
        assert m.expected_tokens(0) == 1.0
        for k in range(1, 9):
            assert m.expected_tokens(k) == pytest.approx(k + 1)
    for m in [IIDAcceptance(0.3), BetaAcceptance(2, 5), MarkovAcceptance(0.9, 0.2, 0.1, 0.3)]:
        assert m.expected_tokens(0) == 1.0
    # Beta concentrated at 1.
    assert BetaAcceptance(1e6, 1e-6).expected_tokens(5) == pytest.approx(6, rel=1e-4)


@pytest.mark.parametrize("alpha, k, expected", [(0.6, 2, 1.96), (0.7, 3, 2.53), (0.8, 2, 2.44), (0.8, 5, 3.69),
                                                (0.9, 2, 2.71), (0.9, 10, 6.86)])
def test_leviathan_table_1_at_zero_cost(alpha, k, expected):
    """Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML 2023),
    Table 1: expected walltime improvement at c = 0, which is the expected tokens per target pass."""
    assert round(IIDAcceptance(alpha).expected_tokens(k), 2) == expected


def test_beta_closed_forms_at_uniform_alpha():
    """Beta(1, 1): alpha uniform over sequences, each sequence's steps weighted by 1 / E[A + 1 | alpha]. Worked by
    hand: k = 1, E[A + 1] = 1 / E[1 / (1 + x)] = 1 / ln 2; k = 2, 1 / integral of dx / (1 + x + x^2) over [0, 1]
    = 1 / (pi / (3 sqrt 3)) = 3 sqrt(3) / pi."""
    beta = BetaAcceptance(1, 1)
    assert beta.expected_tokens(1) == pytest.approx(1 / np.log(2), rel=1e-12)
    assert beta.expected_tokens(2) == pytest.approx(3 * np.sqrt(3) / np.pi, rel=1e-12)


@pytest.mark.parametrize("a, b", [(0.3, 0.3), (0.3, 20), (20, 0.3), (16, 5), (1e6, 1e-6), (200, 50)])
def test_beta_quadrature_reproduces_the_beta_moments(a, b):
    """Gauss-Jacobi with 48 nodes is exact for polynomials of degree < 96: E[x^j] against the closed-form moments
    E[x^j] = prod_{i<j} (a + i) / (a + b + i), densities that diverge at 0 or 1 included."""
    x, w = beta_quadrature(a, b)
    i = np.arange(15)
    moments = np.concatenate([[1.0], np.cumprod((a + i) / (a + b + i))])
    np.testing.assert_allclose([w @ x**j for j in range(16)], moments, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("a, b", [(1, 1), (7, 3), (2, 8), (0.5, 0.5), (20, 0.3), (0.3, 20)])
def test_beta_heterogeneity_at_the_same_mean_lowers_tokens_per_pass(a, b):
    """Over steps, a per-sequence alpha gives 1 / E[1 / E[A + 1 | alpha]]: the harmonic mean of the sequences' own
    tokens per pass, below their plain mean. And 1 / (1 + x + ... + x^k) is convex on [0, 1], so by Jensen it is
    also at most iid at the same mean alpha, at every k: spread in acceptance across requests costs tokens per pass
    (strictly where the spread is wide)."""
    beta, iid = BetaAcceptance(a, b), IIDAcceptance(a / (a + b))
    x, w = beta_quadrature(float(a), float(b))
    assert beta.expected_tokens(0) == 1.0
    for k in range(1, 9):
        assert beta.expected_tokens(k) < float(w @ tokens_given_alpha(x, k))
        assert beta.expected_tokens(k) <= iid.expected_tokens(k) + 1e-12
    if a * b / ((a + b) ** 2 * (a + b + 1)) > 0.13**2:  # a wide spread of alpha
        assert all(beta.expected_tokens(k) < iid.expected_tokens(k) - 0.01 for k in (2, 4, 8))


def iid_with_same_mean(tokens: float, k: int) -> IIDAcceptance:
    """The i.i.d. model whose E[A + 1] at this k equals `tokens` (bisection; E[A + 1] rises with alpha)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if IIDAcceptance(mid).expected_tokens(k) < tokens else (lo, mid)
    return IIDAcceptance(lo)


def test_markov_is_bursty():
    """A persistent hidden state makes all-accepted and all-rejected steps likelier than i.i.d. with the same mean
    tokens per step (what an engine's acceptance counters report): the distribution of A is wider."""
    markov = MarkovAcceptance(0.95, 0.3, 0.05, 0.15)
    for k, factor in ((3, 1.1), (5, 1.4), (8, 1.8)):
        iid = iid_with_same_mean(markov.expected_tokens(k), k)
        assert markov.chain_pmf(k)[k] > factor * iid.chain_pmf(k)[k]
        assert markov.chain_pmf(k)[0] > iid.chain_pmf(k)[0]


def test_trace_replay_matches_the_published_means():
    """data/acceptance-traces/README.md: replayed at k = 3, EAGLE-3 gives 2.33 tokens per step on cnn and the
    n-gram proposer 1.33."""
    path = trace_path("cnn")
    assert round(acceptance_from_spec(f"trace:{path}").expected_tokens(3), 2) == 2.33
    assert round(acceptance_from_spec(f"trace:{path}:ngram").expected_tokens(3), 2) == 1.33


def test_trace_replay_is_exact_on_a_tiny_trace(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"eagle": [3, 2, 1, 1, 4, 3, 2, 1]}\n')
    trace = load_acceptance_trace(f)
    # k = 1: steps at 0 (2 tokens), 2 (1), 3 (1), 4 (2), 6 (2) -> A = 1, 0, 0, 1, 1
    assert sorted(trace.replay(1).tolist()) == [0, 0, 1, 1, 1]
    # k = 3: steps at 0 (3), 3 (1), 4 (4) -> A = 2, 0, 3
    assert trace.replay(3).tolist() == [2, 0, 3]
    with pytest.raises(SpecsimError, match="lookaheads up to 3"):
        trace.replay(4)


@pytest.mark.parametrize("spec", ["iid:1.5", "iid:-0.1", "iid", "iid:a", "positional:", "beta:0,1", "beta:1",
                                  "markov:0.9,0.3", "ranks:0.7,0.5", "nope:1", "trace:/no/such/file.jsonl", "0.7"])
def test_bad_specs_raise_one_line_errors(spec):
    with pytest.raises(SpecsimError) as e:
        acceptance_from_spec(spec)
    assert "\n" not in str(e.value)


def test_every_fitted_models_printed_spec_parses_back():
    """`acceptance fit` prints each model's spec at four significant digits; each parses back to (nearly) the same
    model, hmm rows included (their rounding leaves sums of 1 +- 1e-4), while a row that is really off is refused."""
    from simulator.acceptance import HiddenStateAcceptance

    hmm = HiddenStateAcceptance((0.8817, 0.6407, 0.07342), ((0.903, 0.04214, 0.05486),
                                                            (0.06914, 0.6495, 0.28136), (0.0001, 0.9998, 0.0001)))
    again = parse_acceptance(hmm.spec)
    assert again.expected_tokens(5) == pytest.approx(hmm.expected_tokens(5), rel=1e-3)
    with pytest.raises(SpecsimError, match="sums to 1.01"):
        parse_acceptance("hmm:0.9,0.3/0.91,0.1/0.3,0.7")


# --- acceptance that changes with context ---------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["iid:0.7", "positional:0.9,0.7,0.5", "beta:3,1.5", "markov:0.95,0.3,0.05,0.15",
                                  "hmm:0.95,0.6,0.1/0.9,0.05,0.05/0.1,0.8,0.1/0.05,0.15,0.8", "ranks:0.6,0.2,0.1"])
@pytest.mark.parametrize("factor", [0.6, 1.2])
def test_scaled_model_matches_the_simulator_draws_at_that_factor(spec, factor):
    """A model scaled by a context factor (closed form, or quadrature for beta) against the serving simulator's
    sampler drawing with that factor: equal-length requests' pooled accepted lengths follow the scaled chain_pmf."""
    from simulator.sampling import batch_sampler

    acc = parse_acceptance(spec)
    scaled = acc.scaled(factor)
    slots = np.arange(2000)
    sampler = batch_sampler(acc, len(slots), np.random.default_rng(4))
    sampler.factor = factor
    draws = pooled_requests(sampler, slots, 4, requests=2, tokens=400)  # long requests: a hidden state's start fades
    np.testing.assert_allclose(np.bincount(draws, minlength=5) / draws.size, scaled.chain_pmf(4), atol=0.012)


def test_scaled_probabilities_are_capped_at_one():
    assert parse_acceptance("iid:0.9").scaled(1.5).alpha == 1.0
    assert parse_acceptance("positional:0.5,0.9").scaled(2.0).chain_pmf(2).tolist() == [0.0, 0.0, 1.0]
    # alpha = min(2x, 1), x uniform, steps weighted by 1 / (1 + alpha): E[1 / (1 + alpha)] = ln(2) / 2 + 1 / 4,
    # and P(A = 1) = E[alpha / (1 + alpha)] / E[1 / (1 + alpha)] = (3 / 4 - ln(2) / 2) / (1 / 4 + ln(2) / 2).
    pmf = parse_acceptance("beta:1,1").scaled(2.0).chain_pmf(1)
    assert pmf[1] == pytest.approx((0.75 - np.log(2) / 2) / (0.25 + np.log(2) / 2), abs=1e-4)


def test_context_table_interpolates_and_is_flat_beyond():
    acc = parse_acceptance("iid:0.8@context:1000=1,3000=0.5")
    assert [acc.context_factor(c) for c in (0, 1000, 2000, 3000, 9000)] == [1.0, 1.0, 0.75, 0.5, 0.5]
    assert acc.at_context(2000).alpha == pytest.approx(0.8 * acc.context_factor(2016), rel=1e-9)  # cell midpoint
    assert acc.spec == "iid:0.8@context:1000=1,3000=0.5"
    assert acc.expected_tokens(3) == parse_acceptance("iid:0.8").expected_tokens(3)  # the model itself: the base


@pytest.mark.parametrize(("spec", "message"), [
    ("iid:0.8@context:1000", "CONTEXT=FACTOR"),
    ("iid:0.8@ctx:1000=1", "CONTEXT=FACTOR"),
    ("iid:0.8@context:2000=1,1000=0.5", None),  # sorted: accepted
    ("iid:0.8@context:1000=-1", "factors must lie"),
    ("iid:0.8@context:1000=1,1000=0.5", "must increase"),
    ("iid:0.8@context:1000=nan", "factors must lie"),
])
def test_context_table_refuses_bad_input(spec, message):
    if message is None:
        assert parse_acceptance(spec).context_factor(1500) == pytest.approx(0.75)
        return
    with pytest.raises(SpecsimError, match=message):
        parse_acceptance(spec)


def test_a_trace_takes_no_context_factor():
    from simulator.context import with_context
    from simulator.replay import TraceAcceptance

    with pytest.raises(SpecsimError, match="carries its own contexts"):
        with_context(TraceAcceptance((np.array([2, 1, 3]),)), "context:0=1,100=0.5")


def test_a_trace_spec_with_a_context_table_gets_one_line_saying_why(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt_len": 10, "eagle": [2, 1, 3]}\n')
    with pytest.raises(SpecsimError, match="carries its own contexts"):
        acceptance_from_spec(f"trace:{path}@context:0=1,100=0.5")
    scaled = acceptance_from_spec("accept-length:2.5@3@context:0=1,4000=0.5")  # an engine's '@K', then the table
    assert scaled.context_factor(4000) == 0.5


def test_a_stationary_trace_stream_replays_the_traces_step_distribution():
    """Streams started at a request's opening see only openings (EAGLE's acceptance is lower there); started at a
    uniformly drawn step of the replay, 16 steps of each of 600 streams have the mean tokens per step that
    `chain_pmf` gives, within sampling error."""
    trace = load_acceptance_trace(trace_path("sharegpt"), "eagle")
    rng = np.random.default_rng(0)
    for k in (2, 4):
        means = {}
        for stationary in (False, True):
            a = [s(k) for s in (trace.stream(rng, stationary) for _ in range(600)) for _ in range(16)]
            means[stationary] = (np.mean(a) + 1, np.std(a) / np.sqrt(600))  # streams independent, steps not
        exact = trace.expected_tokens(k)
        assert abs(means[True][0] - exact) < 4 * means[True][1]
        assert means[False][0] < exact - 4 * means[False][1]
