"""Real speculative decoding: greedy equality, the built-in pair and its expansion, exactness, acceptance."""

import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from calibrate.exactness import chi2_sf, exactness_cases, verdict
from engine.builtin import encode, expand, prompts
from engine.model import causal_window
from engine.speculative import Decoding, Ngram, RealEngine
from scenarios.profile import MeasuredAcceptance
from simulator import SpecsimError
from simulator.acceptance import IIDAcceptance
from simulator.replay import ProbabilityTraceAcceptance
from simulator.trees import parse_branching
from specsim import cli


@pytest.fixture(scope="module")
def heldout():
    return [encode(p)[:48] for p in prompts("heldout")[:8]]


@pytest.mark.parametrize("batch", [1, 8])
def test_greedy_speculative_equals_greedy_plain(builtin_pair, heldout, batch):
    target, draft = builtin_pair
    engine = RealEngine(target, draft)
    ps = heldout[:batch]
    plain = engine.generate(ps, 24, Decoding(k=0, temperature=0)).tokens
    for k in range(1, 9):
        assert engine.generate(ps, 24, Decoding(k=k, temperature=0)).tokens == plain, f"k={k}"
    for tree in ("3,2,1", "2,2,2,1"):
        assert engine.generate(ps, 24, Decoding(tree=parse_branching(tree), temperature=0)).tokens == plain, tree
    assert engine.generate(ps, 24, Decoding(k=4, temperature=0, drafter="ngram")).tokens == plain


def test_runs_in_turns_keep_their_own_caches(builtin_pair, heldout):
    """Decoded in turns step by step, a plain run, a chain and a tree each keep their own cache: greedy, every one is
    exactly what it is decoded alone; each has its own steps (a run cut at its first sequence's max_new_tokens)."""
    from engine.pass_runner import EagerStandIn, GraphRunner

    target, draft = builtin_pair
    engine = RealEngine(target, draft)
    ps = heldout[:3]
    hows = [Decoding(k=0, temperature=0), Decoding(k=3, temperature=0),
            Decoding(tree=parse_branching("2,1"), temperature=0)]
    alone = [engine.generate(ps, 20, how, until="first") for how in hows]
    for _ in range(2):  # the second time reuses the caches the first left
        together = engine.generate_in_turns(ps, 20, hows[:2])
        assert [r.tokens for r in together] == [r.tokens for r in alone[:2]]
        assert [len(r.steps) for r in together] == [len(r.steps) for r in alone[:2]]
    plain, tree = engine.generate_in_turns(ps, 20, [hows[0], hows[2]])
    assert plain.tokens == alone[0].tokens and tree.tokens == alone[2].tokens
    assert engine.generate(ps, 20, hows[1], until="first").tokens == alone[1].tokens  # its own cache is back in place
    with pytest.raises(SpecsimError, match="at most one"):
        engine.generate_in_turns(ps, 8, hows[1:])
    with pytest.raises(SpecsimError, match="eager passes"):
        RealEngine(target, draft, GraphRunner(EagerStandIn())).generate_in_turns(ps, 8, hows[:2])


def test_graph_runner_engine_equals_eager_and_flags_the_steps_that_captured(builtin_pair, heldout):
    """Through the graph runner (driven by the eager stand-in) the engine decodes exactly what it decodes eagerly;
    only steps that captured a new shape are flagged, and a second run at the same batch replays every shape."""
    from engine.pass_runner import EagerStandIn, GraphRunner

    target, draft = builtin_pair
    ps = heldout[:3]
    eager = RealEngine(target, draft).generate(ps, 20, Decoding(k=3, temperature=0))
    backend = EagerStandIn()
    engine = RealEngine(target, draft, GraphRunner(backend))
    first = engine.generate(ps, 20, Decoding(k=3, temperature=0))
    assert first.tokens == eager.tokens and first.steps[0].captured and backend.captures >= 3
    captures = backend.captures
    again = engine.generate(ps, 20, Decoding(k=3, temperature=0))
    assert again.tokens == eager.tokens and backend.captures == captures and not any(s.captured for s in again.steps)
    assert len(again.timed_steps) == len(again.steps) and again.emitted_per_s > 0


def test_expansion_preserves_the_function(builtin_pair):
    target, _ = builtin_pair
    big = expand(target, n_layers=12, d_model=768, n_heads=12, d_ff=2048)
    assert sum(p.numel() for p in big.parameters()) > 20 * sum(p.numel() for p in target.parameters())
    tokens = torch.tensor([encode("import os\ndef f(x):\n    return")])
    window = causal_window(torch.zeros(1, dtype=torch.long), tokens.shape[1], tokens.shape[1])
    with torch.inference_mode():
        target.setup_cache(1)
        big.setup_cache(1)
        small_logits, big_logits = target(tokens, window), big(tokens, window)
    assert torch.allclose(small_logits, big_logits, atol=1e-4, rtol=1e-4)
    assert (small_logits.argmax(-1) == big_logits.argmax(-1)).all()


def test_ngram_proposer():
    """The latest earlier occurrence of the last 3-gram (or 2-gram) proposes what followed it, padded by its last
    token; no match of at least two tokens proposes nothing (vLLM's prompt_lookup_min)."""
    assert Ngram().propose([1, 2, 3, 9, 1, 2, 3], 3) == [9, 1, 2]
    assert Ngram().propose([4, 2, 3, 8, 1, 2, 3], 2) == [8, 1]  # the 2-gram (2, 3)
    assert Ngram().propose([7, 2, 3, 2, 3], 4) == [2, 3, 3, 3]
    assert Ngram().propose([5, 6, 7], 2) == []
    assert Ngram().propose([5, 6, 7, 1, 6], 2) == []  # a lone repeated token is no match


def test_a_step_without_a_proposal_is_a_plain_step(builtin_pair):
    """Prompt lookup on text that repeats nothing: every step finds nothing, runs the plain step (one target pass over
    one token) and emits one token; greedy, the output is greedy decoding's."""
    target, draft = builtin_pair
    engine = RealEngine(target, draft)
    prompt = list(range(40, 120))  # no two-byte sequence repeats; the continuation may repeat later
    run = engine.generate([prompt], 6, Decoding(k=4, temperature=0, drafter="ngram"))
    assert run.tokens == engine.generate([prompt], 6, Decoding(k=0, temperature=0)).tokens
    assert run.steps[0].accepted == [0] and run.steps[0].tried == [0]


def test_exactness_small_seeded_version():
    """The falsification test at 3,000 samples: the exact rule passes and both broken rules are caught."""
    checks, controls = exactness_cases("poor", [2], [parse_branching("2,1")], 3000, seed=0)
    for r in checks:
        assert verdict(r, "check")[0], verdict(r, "check")[1]
    for r in controls:
        assert verdict(r, "control")[0], verdict(r, "control")[1]
    spec = [r for r in checks if r.acceptance_rate is not None]
    assert all(r.acceptance_rate < 0.8 for r in spec)  # the poor draft shows up here, and only here


def test_too_few_samples_to_catch_a_broken_rule_says_so():
    """At 100 completions a case the test has no power: a broken rule goes uncaught, the run fails, and it says that
    the sample, not the exact rule, is what to change (it only said '1 case(s) failed')."""
    from calibrate.exactness import run_exactness

    lines: list[str] = []
    assert run_exactness("poor", [1], [], 100, seed=0, echo=lines.append) >= 1
    assert any("MISSED" in line for line in lines) and "raise --samples" in lines[-1]


def test_chi2_survival_function():
    # Reference values of the chi-square upper tail (e.g. scipy.stats.chi2.sf).
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(124.342, 100) == pytest.approx(0.05, rel=1e-3)
    assert chi2_sf(10.0, 10) == pytest.approx(0.4404932850652124, rel=1e-6)


def test_prompt_longer_than_the_cache_and_k_too_large(builtin_pair):
    target, draft = builtin_pair
    engine = RealEngine(target, draft)
    with pytest.raises(SpecsimError, match="cache holds 320"):
        engine.generate([list(range(2, 255)) * 2], 4, Decoding(k=0))
    with pytest.raises(SpecsimError, match="lower k"):
        engine.generate([[1, 2, 3]], 16, Decoding(k=250))


def test_unknown_draft_name_is_a_usage_error():
    r = CliRunner().invoke(cli, ["exactness", "--draft", "gpt2"])
    assert r.exit_code == 2 and "gpt2" in r.output and len(r.output.strip().splitlines()) == 1


def test_probability_trace_with_constant_alpha_is_iid():
    trace = ProbabilityTraceAcceptance((np.full(400, 0.7), np.full(300, 0.7)))
    for k in (1, 3, 6):
        assert trace.expected_tokens(k) == pytest.approx(IIDAcceptance(0.7).expected_tokens(k), rel=1e-9)


def test_acceptance_measurement_on_the_built_in_pair(builtin_pair, heldout):
    from calibrate.measure_acceptance import measure_acceptance

    target, draft = builtin_pair
    acc = measure_acceptance(target, draft, heldout[:4], new_tokens=32, seed=0, sims=4)
    alphas = np.concatenate([np.asarray(a) for a in acc["trace"]["alpha"]])
    assert acc["alpha"] == pytest.approx(alphas.mean(), abs=1e-5)  # the trace keeps 5 decimals
    assert 0.6 < acc["alpha"] < 0.9  # the built-in pair at temperature 1 (README: 0.78-0.81 on more prompts)
    yields = np.concatenate([np.asarray(y) for y in acc["trace"]["greedy_yields"]])
    assert acc["greedy_match"] == pytest.approx((yields > 1).mean(), rel=1e-9)  # a match yields a second token
    s = np.array(acc["survival"])  # P(A >= i) over replayed steps at k = 8 (steps start after a rejection)
    replay = ProbabilityTraceAcceptance(tuple(np.asarray(a) for a in acc["trace"]["alpha"]))
    assert (np.diff(s) <= 1e-12).all() and np.allclose(s, replay.survival(8), atol=1e-4)
    assert set(acc["heldout"]) == {"iid", "positional", "beta", "markov", "trace"} and acc["chosen"] in acc["heldout"]
    chosen_err = np.mean(acc["heldout"][acc["chosen"]]["tokens_err_by_k"])
    assert chosen_err <= 1.02 * min(np.mean(e["tokens_err_by_k"]) for e in acc["heldout"].values()) + 1e-12
    # Rank 1 is accepted with probability sum_x min(p, q) = alpha: the Monte Carlo estimate agrees within noise.
    assert acc["ranks"][0] == pytest.approx(acc["alpha"], abs=0.06) and sum(acc["ranks"]) <= 1 + 1e-9
    measured = MeasuredAcceptance.from_dict(acc)
    assert measured.model("positional").expected_tokens(4) == pytest.approx(1 + s[:4].sum(), rel=1e-9)
    a = acc["alpha"]
    assert measured.model("iid").expected_tokens(4) == pytest.approx((1 - a**5) / (1 - a), rel=1e-9)
    assert measured.model("ranks").expected_tokens(4) == pytest.approx(IIDAcceptance(acc["ranks"][0])
                                                                        .expected_tokens(4), rel=1e-9)
    for variant in ("markov", "beta", "trace"):  # fitted / replayed: close to the replayed steps, not equal
        assert measured.model(variant).expected_tokens(4) == pytest.approx(replay.expected_tokens(4), rel=0.05)
    assert measured.model().ranks == tuple(acc["ranks"])


def test_a_schedule_of_k_keeps_the_output_and_the_draft_catches_up(builtin_pair, heldout):
    """A schedule with plain steps between speculative ones decodes the greedy text exactly (the draft re-reads the
    tokens it missed), and the draft right after its catch-up is accepted as often as in steady steps (a wrong
    catch-up would leave it predicting from a stale cache)."""
    target, draft = builtin_pair
    engine = RealEngine(target, draft)
    ps = heldout[:4]
    plain = engine.generate(ps, 40, Decoding(k=0, temperature=0)).tokens
    for schedule in ((4, 0, 0, 3, 1), (2, 0), (0, 0, 0, 5)):
        how = Decoding(k=max(schedule), schedule=schedule, temperature=0)
        assert engine.generate(ps, 40, how).tokens == plain, schedule
    first, steady = [], []
    for seed in range(3):
        how = Decoding(k=4, schedule=(4, 4, 0, 0, 0, 0))
        run = engine.generate(ps, 60, how, torch.Generator().manual_seed(seed), until="first")
        for i, s in enumerate(run.steps):
            (first if i % 6 == 0 and i else steady if i % 6 == 1 else []).append(np.mean(s.accepted))
    assert np.mean(first) > 0.7 * np.mean(steady) > 0.5
    with pytest.raises(SpecsimError, match="k must be its largest"):
        Decoding(k=2, schedule=(4, 0))


@pytest.mark.parametrize(("off", "null", "priced"), [
    ([0.20, 0.22], [0.03, -0.05], 0.21),  # every repeat above what two runs of the same steps differ by
    ([0.29, -0.03], [0.07, 0.08], 0.0),  # one repeat says no tax: noise (measured on this host: +13 % median)
    ([0.04, 0.06], [-0.24, -0.17], 0.0),  # runs of the same steps differ by more than the tax
    ([-0.05, -0.01], [0.0, 0.0], 0.0),  # faster with the draft loaded: no tax
])
def test_an_off_tax_is_priced_only_where_every_repeat_exceeds_the_runs_noise(off, null, priced):
    from calibrate.speculation_tax import priced_over_noise

    assert priced_over_noise(off, max(abs(f) for f in null)) == pytest.approx(priced)


@pytest.mark.parametrize(("tax", "drift", "priced"), [
    (0.20, 0.02, True),  # a real tax over a quiet host: priced
    (0.00, 0.02, False),  # no tax: not priced
    (0.20, 0.30, False),  # a tax smaller than what the same work differs by: not priced
])
def test_measure_tax_prices_a_tax_the_runs_resolve(builtin_pair, builtin_profile, heldout, monkeypatch, tax, drift,
                                                    priced):
    """The real engine runs its schedules, but every step's time is replaced by a known one: 10 ms plus 0.02 ms per
    token into the text, times (1 + tax) for a scheduled plain step, times a run's drift that grows through the runs
    (the second plain run and the fourth run `drift` slower than the first and second). The bracketing plain runs
    recover the tax (a steady drift cancels); it is priced only where it exceeds what the same work differed by."""
    import calibrate.speculation_tax as tax_module

    real = tax_module._step_times
    runs = iter(range(10_000))

    def known(run, how):
        factor = 1 + drift * (next(runs) % 4) / 2  # plain 1, off 1 + d/2, plain again 1 + d, switch 1 + 3d/2
        return [(k, before, (0.010 + 2e-5 * x) * factor * (1 + tax if how is tax_module.OFF and k == 0 else 1),
                 t_draft, x) for k, before, _, t_draft, x in real(run, how)]

    monkeypatch.setattr(tax_module, "_step_times", known)
    target, draft = builtin_pair
    out = tax_module.measure_tax(RealEngine(target, draft), heldout, [1], 24, 3, torch.Generator().manual_seed(0),
                                 builtin_profile.cost_model(), builtin_profile.draft)["by_batch"]["1"]
    assert out["off_fraction"] == pytest.approx(tax, abs=1e-9)
    assert out["off_noise"] == pytest.approx(drift, rel=0.01)
    assert out["off_priced"] == (pytest.approx(tax) if priced else 0.0)


def test_the_engine_tax_is_measured_and_reaches_the_cost_model(builtin_pair, builtin_profile, heldout):
    """`measure_tax` returns per batch the off-tax, the catch-up and the switch; a profile carrying it gives its
    hardware a `SpeculationTax` (negative noise clamped to zero)."""
    import dataclasses

    from calibrate.speculation_tax import measure_tax

    target, draft = builtin_pair
    tax = measure_tax(RealEngine(target, draft), heldout, [1, 2], 36, 1, torch.Generator().manual_seed(0),
                      builtin_profile.cost_model(), builtin_profile.draft)
    by = tax["by_batch"]
    assert set(by) == {"1", "2"} and all(v["steps"]["after_off"] >= 1 and v["steps"]["off"] >= 4 for v in by.values())
    # (magnitudes are not checked: steps of a few ms on a shared CPU drift between runs; calibration repeats them)
    assert all(np.isfinite(v["off_fraction"]) and v["catchup_predicted_s"] >= 0 for v in by.values())
    assert all(v["off_noise"] >= 0 and v["off_priced"] in (0.0, v["off_fraction"]) for v in by.values())
    assert all(v["switch_noise"] >= 0 and v["switch_priced"] in (0.0, float(np.median(v["switch_fraction_by_repeat"])))
               for v in by.values())
    fake = {"block": 6, "by_batch": {
        "1": {**by["1"], "off_fraction": 0.05, "off_priced": 0.05, "switch_fraction": -0.01, "switch_priced": 0.0},
        "8": {**by["2"], "off_fraction": 0.10, "off_priced": 0.10, "switch_fraction": 0.03, "switch_priced": 0.03}}}
    hw = dataclasses.replace(builtin_profile, speculation_tax=fake).hardware
    assert hw.speculation_tax.off_fraction(1) == pytest.approx(0.05)
    assert hw.speculation_tax.off_fraction(8) == pytest.approx(0.10)
    assert hw.speculation_tax.switch_fraction == pytest.approx(0.015)  # median of the priced 0 and 0.03
    assert "measured by specsim calibrate" in hw.speculation_tax.source
    noisy = {"block": 6, "by_batch": {"1": {**fake["by_batch"]["1"], "off_priced": 0.0}}}  # measured 5 %, not priced
    assert dataclasses.replace(builtin_profile, speculation_tax=noisy).hardware.speculation_tax.off_fraction(1) == 0
    old = {"block": 6, "by_batch": {"1": {k: v for k, v in fake["by_batch"]["1"].items() if k != "off_priced"}}}
    assert dataclasses.replace(builtin_profile, speculation_tax=old).hardware.speculation_tax.off_fraction(1) == 0.05
    from scenarios.profile import load_profile, save_profile

    path = save_profile(dataclasses.replace(builtin_profile, speculation_tax=fake), Path(tempfile.mkdtemp()) / "p.json")
    assert load_profile(path).speculation_tax == fake  # kept through the file


def test_exactness_with_ngram_drafts_needs_no_tree_flag():
    """Prompt lookup proposes one continuation: its default is no tree, so the README's command runs as shown;
    asking for a tree with it is a one-line error."""
    r = CliRunner().invoke(cli, ["exactness", "--draft", "ngram", "--k", "2", "--samples", "500"])
    assert r.exit_code == 0, r.output
    assert "tree" not in r.stdout and "negative control" in r.stdout
    assert "sampling 4 cases x 500" in r.stderr
    r = CliRunner().invoke(cli, ["exactness", "--draft", "ngram", "--tree", "2,2", "--samples", "500"])
    assert r.exit_code == 2 and "drop --tree" in r.output
