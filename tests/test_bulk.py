"""The serving simulator's bulk advance against its reference mode (one simpy event per decode step).

Two checks: where acceptance is deterministic the two modes must produce the same run, event for event; where it is
random they must agree in distribution, which a two-sample test over many seeds checks (and is shown to catch a
shifted mean and a wrong tail)."""

from __future__ import annotations

import numpy as np
import pytest

from scenarios import load_hardware
from simulator.acceptance_parse import parse_acceptance
from simulator.cost import CostModel
from simulator.policies import parse_policy
from simulator.replay import TraceAcceptance
from simulator.serving import EngineConfig, simulate
from simulator.step_costs import StepCosts
from simulator.workload import parse_lengths, synthetic


def _workload(seed: int, n: int, rate: float):
    rng = np.random.default_rng(seed)
    return synthetic("poisson", n, parse_lengths("16..1024"), parse_lengths("exp:96"), rng).at_rate(rate)


def _run(h100, acceptance, policy: str, rate: float, seed: int, bulk: bool, n: int = 200, costs=None, **kw):
    cost, target, draft = h100
    if kw.pop("engine", None) == "vllm":  # with vLLM's tax on speculation switched off and on switching k
        cost = CostModel.from_hardware(load_hardware("h100-sxm", "vllm"))
    acc = acceptance if not isinstance(acceptance, str) else parse_acceptance(acceptance)
    engines = kw.pop("engines", 1)
    router = kw.pop("router", "least-loaded")
    config = EngineConfig(bulk=bulk, max_batch=kw.pop("max_batch", 48), **kw)
    return simulate(_workload(seed, n, rate), costs or StepCosts(cost, target, draft), parse_policy(policy, acc), acc,
                    np.random.default_rng(10_000 + seed), config, engines, router)


RUN_ARRAYS = ("first_token_s", "finish_s", "engine_of", "step_time_s", "step_duration_s", "step_context",
              "step_batch", "step_drafted", "step_tokens", "prefill_duration_s")

DETERMINISTIC = [
    ("iid:1", "fixed:3", {}),
    ("iid:0", "fixed:2", {"draft_sync": "eager"}),
    ("iid:1", "adaptive:6", {}),
    ("iid:1", "adaptive:6", {"draft_sync": "eager"}),
    ("iid:1", "threshold:4@6", {}),
    ("iid:1", "threshold:4@6", {"draft_sync": "eager", "engines": 2, "router": "round-robin"}),
    ("ranks:1", "tree:2,2,1", {"engines": 3}),
    ("trace", "fixed:4", {}),
    ("trace", "adaptive:5", {}),
    ("trace", "adaptive:5", {"draft_sync": "eager", "engines": 2}),
    ("iid:1", "off", {"max_batch": 4}),
    ("iid:1", "fixed:3", {"kv_allocation": "on-demand", "kv_capacity_tokens": 6000}),
    ("trace", "adaptive:5", {"engine": "vllm"}),
    ("iid:1@context:0=1,700=1,701=0", "fixed:3", {}),  # every draft accepted below 704 tokens, none above
    ("iid:1@context:0=1,700=1,701=0", "adaptive:4", {"draft_sync": "eager"}),
    ("iid:1", "threshold:3@5", {"engine": "vllm", "draft_sync": "eager"}),
    ("trace", "adaptive:5", {"kv_allocation": "on-demand", "kv_capacity_tokens": 6000, "draft_sync": "eager"}),
    # a run cut at a context cell and then at the cache's room (the cut once broadcast a stale length: a crash)
    ("iid:1@context:0=1,700=1,701=0", "fixed:3", {"kv_allocation": "on-demand", "kv_capacity_tokens": 6000}),
]


@pytest.mark.parametrize(("acceptance", "policy", "kw"), DETERMINISTIC)
@pytest.mark.parametrize("rate", [3.0, 40.0, 400.0])
def test_bulk_is_the_reference_run_when_acceptance_is_deterministic(h100, acceptance, policy, kw, rate):
    """With acceptance 1, 0 or a single greedy trace nothing is drawn at random, so the bulk advance must make
    exactly the reference's events: same first tokens, finishes, steps (light load, near and past saturation, a
    fleet, both draft-sync modes, trees, a batch limit that queues requests)."""
    if acceptance == "trace":
        acceptance = TraceAcceptance((np.array([3, 1, 5, 2, 2, 4, 1, 1, 6] * 40),))
    bulk = _run(h100, acceptance, policy, rate, 7, True, **dict(kw))
    step = _run(h100, acceptance, policy, rate, 7, False, **dict(kw))
    for name in RUN_ARRAYS:
        np.testing.assert_allclose(getattr(bulk, name), getattr(step, name), rtol=1e-9, atol=1e-12, err_msg=name)
    assert bulk.preemptions == step.preemptions
    assert bulk.accepted_hist.keys() == step.accepted_hist.keys()
    for label, counts in bulk.accepted_hist.items():
        assert counts.tolist() == step.accepted_hist[label].tolist()


# --- in distribution: a paired sign-flip test over seeds ------------------------------------------------------------

QUANTILES = (0.10, 0.50, 0.90, 0.99)
SEEDS = range(24)


def _summary(run) -> np.ndarray:
    """Per-request TPOT and TTFT: their 10th, 50th, 90th and 99th percentiles and their means."""
    w = run.workload
    tpot = ((run.finish_s - run.first_token_s) / np.maximum(w.output_tokens - 1, 1))[w.output_tokens > 1]
    ttft = run.first_token_s - w.arrival_s
    return np.concatenate([np.quantile(tpot, QUANTILES), np.quantile(ttft, QUANTILES), [tpot.mean(), ttft.mean()]])


def sign_flip_p(a: np.ndarray, b: np.ndarray, flips: int = 4000, seed: int = 0) -> float:
    """p-value of the paired sign-flip test that runs a and b (rows: seeds, sharing a workload and a seed; columns:
    statistics) come from the same law. Under that null each seed's difference is as likely negated, so the
    statistic - the largest self-normalised sum of differences over the columns, |sum d| / sqrt(sum d^2) - is
    compared with its value under random sign flips; taking the largest over columns accounts for testing many
    statistics at once, and exchangeability holds however the requests within a run depend on each other."""
    d = np.asarray(a) - np.asarray(b)
    scale = np.sqrt((d ** 2).sum(axis=0)) + 1e-300
    observed = (np.abs(d.sum(axis=0)) / scale).max()
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(flips, len(d)))
    null = (np.abs(signs @ d) / scale).max(axis=1)
    return float((1 + (null >= observed).sum()) / (flips + 1))


RANDOM = {
    "iid, adaptive, near saturation": ("iid:0.7", "adaptive", 20.0, {}),
    "markov, fixed:4": ("markov:0.9,0.3,0.1,0.3", "fixed:4", 25.0, {}),
    "beta, threshold, eager, 2 engines": ("beta:2,1", "threshold:4@8", 30.0, {"draft_sync": "eager", "engines": 2}),
    "ranks, tree": ("ranks:0.6,0.2,0.1", "tree:2,2,1", 15.0, {}),
    "beta, fixed:4, light load": ("beta:2,1", "fixed:4", 4.0, {}),
}
_REFERENCE: dict[str, np.ndarray] = {}


def _summaries(h100, case: str, bulk: bool, acceptance: str | None = None, costs=None) -> np.ndarray:
    spec, policy, rate, kw = RANDOM[case]
    if not bulk and acceptance is None and costs is None and case in _REFERENCE:
        return _REFERENCE[case]
    rows = np.array([_summary(_run(h100, acceptance or spec, policy, rate, s, bulk, n=120, costs=costs, **dict(kw)))
                     for s in SEEDS])
    if not bulk and acceptance is None and costs is None:
        _REFERENCE[case] = rows
    return rows


# 5-25 s each, run by `python -m pytest -m slow` (benchmarks/waits.py --only slow); in the default suite the
# deterministic runs above (event for event) and test_serving's `draw_steps` distribution check stand in for them.
SLOW = pytest.mark.slow


@SLOW
@pytest.mark.parametrize("case", list(RANDOM))
def test_bulk_matches_the_reference_in_distribution(h100, case):
    """24 seeds of 120 requests, each a workload and acceptance draws shared by both modes: TPOT and TTFT
    percentiles (10 to 99) and means agree (sign-flip p > 0.001; the lowest of the five cases is 0.05, while a 3 %
    slower step and a wrong tail below are caught at the test's floor, p = 1 / 4001)."""
    assert sign_flip_p(_summaries(h100, case, True), _summaries(h100, case, False)) > 0.001


@SLOW
def test_the_comparison_catches_a_shifted_mean(h100):
    """Decode steps 3 % slower in the bulk run: caught (the test has power where it matters)."""
    cost, target, draft = h100

    class Slower(StepCosts):
        def decode_s(self, batch, context_mean, candidate):
            return 1.03 * super().decode_s(batch, context_mean, candidate)

        def decode_many_s(self, batch, context_means, candidate):
            return 1.03 * super().decode_many_s(batch, context_means, candidate)

    case = "iid, adaptive, near saturation"
    assert sign_flip_p(_summaries(h100, case, True, costs=Slower(cost, target, draft)),
                       _summaries(h100, case, False)) < 0.001


@SLOW
def test_the_comparison_catches_a_wrong_tail(h100):
    """Per-sequence acceptance Beta(4, 2) instead of Beta(2, 1): the same mean, half the spread. Mean TPOT moves by
    under 5 % but its tails move more, and the test catches it."""
    case = "beta, fixed:4, light load"
    wrong, ref = _summaries(h100, case, True, acceptance="beta:4,2"), _summaries(h100, case, False)
    mean_tpot = len(QUANTILES) * 2
    assert abs(wrong[:, mean_tpot].mean() / ref[:, mean_tpot].mean() - 1) < 0.05
    assert sign_flip_p(wrong, ref) < 0.001
