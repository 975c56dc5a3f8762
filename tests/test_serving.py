"""The serving simulator: per-sequence acceptance samplers, the engine's exact event trace, agreement with the
analytic model on a static batch, workloads, fleets and metrics (the policies: tests/test_policies.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import pooled_requests

from simulator import SpecsimError
from simulator.acceptance import IIDAcceptance, beta_quadrature, tokens_given_alpha
from simulator.acceptance_parse import parse_acceptance
from simulator.capacity import Scenario, max_rate
from simulator.metrics import SLO, decode_tokens_per_s, summarize
from simulator.policies import parse_policy
from simulator.sampling import BetaSampler, batch_sampler
from simulator.scheduler import Scheduler, StepLog, slot_runs
from simulator.serving import EngineConfig, simulate
from simulator.step_costs import StepCosts
from simulator.sweep import Candidate, step_time
from simulator.trees import Tree
from simulator.workload import Workload, parse_lengths, static_batch, synthetic

# --- samplers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["iid:0.7", "positional:0.9,0.8,0.6", "beta:4,2", "markov:0.95,0.3,0.05,0.15",
                                  "ranks:0.6,0.2,0.1"])
@pytest.mark.parametrize("k", [1, 4])
def test_batch_sampler_follows_chain_pmf(spec, k):
    """Requests of equal length followed across their steps at a fixed k: the pooled distribution of A is the
    model's chain_pmf (for markov: the step-start stationary one; for beta: the mixture over sequences, each weighed
    by the steps it takes)."""
    acc = parse_acceptance(spec)
    slots = np.arange(400)
    a = pooled_requests(batch_sampler(acc, len(slots), np.random.default_rng(1)), slots, k, requests=8, tokens=60)
    observed = np.bincount(a, minlength=k + 1) / len(a)
    np.testing.assert_allclose(observed, acc.chain_pmf(k), atol=0.01)


def test_beta_requests_pool_below_their_mean_sequence():
    """Under beta a hard request stays longer: pooled over equal-length requests, tokens per step are the harmonic
    mean of the requests' own (chain_pmf), measurably below the mean over requests of a fixed number of steps each."""
    acc = parse_acceptance("beta:1,1")
    slots = np.arange(2000)
    by_requests = pooled_requests(batch_sampler(acc, len(slots), np.random.default_rng(2)), slots, 4, requests=4,
                                  tokens=60)
    fixed = batch_sampler(acc, len(slots), np.random.default_rng(3))
    fixed.admit(slots)
    by_steps = np.concatenate([fixed.draw(slots, 4) for _ in range(60)])
    x, w = beta_quadrature(1.0, 1.0)
    per_sequence = float(w @ tokens_given_alpha(x, 4))  # E over sequences of E[A + 1 | alpha]: 1 + 1/2 + ... + 1/5
    assert per_sequence == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5)
    assert np.mean(by_steps + 1) == pytest.approx(per_sequence, abs=0.02)
    assert np.mean(by_requests + 1) == pytest.approx(acc.expected_tokens(4), abs=0.02)
    assert acc.expected_tokens(4) < per_sequence - 0.2


def fixed_steps_pmf(acc, sampler, k: int) -> np.ndarray:
    """The pooled law of sequences that all take the same number of steps: chain_pmf, except under beta, where every
    sequence then weighs alike - the mean of its sequences' own geometric laws."""
    if not isinstance(sampler, BetaSampler):
        return acc.chain_pmf(k)
    return np.mean([IIDAcceptance(float(a)).chain_pmf(k) for a in sampler.alpha], axis=0)


@pytest.mark.parametrize("spec", ["iid:0.7", "positional:0.9,0.8,0.6", "beta:4,2", "markov:0.95,0.3,0.05,0.15",
                                  "hmm:0.95,0.6,0.1/0.9,0.05,0.05/0.1,0.8,0.1/0.05,0.15,0.8"])
@pytest.mark.parametrize("k", [1, 4])
def test_bulk_draws_follow_the_same_law_as_steps(spec, k):
    """Steps drawn m at a time and cut after a random n of them (``draw_steps``, then ``keep``: the serving
    simulator's bulk advance) pool to the same law as steps drawn one at a time (`fixed_steps_pmf`), with the same
    dependence from one kept step to the next (lag-1 correlation of a sequence's accepted lengths), cuts included."""
    acc = parse_acceptance(spec)
    slots = np.arange(4000)
    bulk = batch_sampler(acc, len(slots), np.random.default_rng(1))
    step = batch_sampler(acc, len(slots), np.random.default_rng(2))
    bulk.admit(slots)
    step.admit(slots)
    cuts = np.random.default_rng(3).integers(1, 4, size=30)
    kept = []
    for n in cuts:
        kept.append(bulk.draw_steps(slots, Candidate(k), 8)[:n])
        bulk.keep(slots, int(n))
    by_bulk = np.concatenate(kept)
    by_step = np.stack([step.draw(slots, k) for _ in range(len(by_bulk))])
    for a, sampler in ((by_bulk, bulk), (by_step, step)):
        observed = np.bincount(a.ravel(), minlength=k + 1) / a.size
        np.testing.assert_allclose(observed, fixed_steps_pmf(acc, sampler, k), atol=0.01)
    lag1 = [np.corrcoef(a[:-1].ravel(), a[1:].ravel())[0, 1] for a in (by_bulk, by_step)]
    assert lag1[0] == pytest.approx(lag1[1], abs=0.02)


def test_keep_resumes_a_trace_walk_where_the_kept_steps_end():
    """A greedy trace is deterministic: 8 steps drawn, 3 kept, then 5 more drawn are the walk's steps 4 to 8."""
    from simulator.replay import TraceAcceptance

    acc = TraceAcceptance((np.array([3, 2, 1, 5, 4, 3, 2, 1, 1] * 5),))
    slots = np.arange(3)
    walk = batch_sampler(acc, 3, np.random.default_rng(5))
    walk.admit(slots)
    steps = np.stack([walk.draw(slots, 3) for _ in range(8)])
    cut = batch_sampler(acc, 3, np.random.default_rng(5))
    cut.admit(slots)
    assert np.array_equal(cut.draw_steps(slots, Candidate(3), 8), steps)
    cut.keep(slots, 3)
    assert np.array_equal(cut.draw_steps(slots, Candidate(3), 5), steps[3:])


@pytest.mark.parametrize("spec", ["iid:0.7", "beta:4,2", "markov:0.95,0.3,0.05,0.15"])
def test_a_lead_step_then_the_rest_is_drawn_as_a_step_kept_and_then_the_rest(spec):
    """``draw_steps_after`` (a catch-up step drafted with its own k, then the run's): the same accepted lengths, seed
    for seed, as drawing the lead step, keeping it and drawing the rest (the stateless sampler's single draw of
    uniforms included); a k of 0 in either place accepts nothing."""
    acc = parse_acceptance(spec)
    slots = np.arange(7)
    for lead, rest, m in ((Candidate(2), Candidate(5), 9), (Candidate(6), Candidate(1), 1), (Candidate(0), Candidate(3),
                                                                                               4)):
        one = batch_sampler(acc, 7, np.random.default_rng(11))
        parts = batch_sampler(acc, 7, np.random.default_rng(11))
        one.admit(slots)
        parts.admit(slots)
        got = one.draw_steps_after(slots, lead, rest, m)
        first = parts.draw_steps(slots, lead, 1)
        parts.keep(slots, 1)
        want = np.concatenate([first, parts.draw_steps(slots, rest, m - 1)])
        assert got.shape == (m, 7) and got.tolist() == want.tolist()
        assert (got[0] <= (lead.k or 0)).all() and (got[1:] <= rest.k).all()
        if lead.k == 0:
            assert not got[0].any()


def test_beta_sampler_keeps_alpha_per_sequence():
    """A sequence's steps share its alpha: accepted lengths of one sequence correlate across steps."""
    sampler = batch_sampler(parse_acceptance("beta:1,1"), 2000, np.random.default_rng(0))
    slots = np.arange(2000)
    sampler.admit(slots)
    first, second = sampler.draw(slots, 4), sampler.draw(slots, 4)
    assert np.corrcoef(first, second)[0, 1] > 0.2
    iid = batch_sampler(parse_acceptance("iid:0.5"), 2000, np.random.default_rng(0))
    assert abs(np.corrcoef(iid.draw(slots, 4), iid.draw(slots, 4))[0, 1]) < 0.06


def test_trace_sampler_replays_the_trace_exactly():
    """One sequence walking a greedy trace emits min(yield, k + 1) at each step start, in order."""
    from simulator.replay import TraceAcceptance

    acc = TraceAcceptance((np.array([3, 2, 1, 5, 4, 3, 2, 1, 1]),))
    sampler = batch_sampler(acc, 1, np.random.default_rng(0))
    slot = np.array([0])
    sampler.admit(slot)
    # k = 2: position 0 yields 3 -> A = 2, position 3 yields 5 -> capped 3 -> A = 2, position 6 yields 2 -> A = 1,
    # position 8 yields 1 -> A = 0
    assert [int(sampler.draw(slot, 2)[0]) for _ in range(4)] == [2, 2, 1, 0]


@pytest.mark.parametrize("branching", [(2, 2), (4, 2, 1), (1, 1, 1)])
def test_tree_sampler_matches_per_rank_expectation(branching):
    acc = parse_acceptance("ranks:0.55,0.2,0.1,0.05")
    tree = Tree.from_branching(branching)
    sampler = batch_sampler(acc, 50_000, np.random.default_rng(3))
    a = sampler.draw_tree(np.arange(50_000), tree)
    assert a.mean() == pytest.approx(tree.expected_accepted(acc.ranks), abs=0.02)
    assert a.max() <= tree.depth


# --- the engine's event trace ---------------------------------------------------------------------------------


class FixedCosts(StepCosts):
    """Round-number durations: prefill 5 ms, decode 10 ms + 1 ms per drafted token, a draft catch-up pass 1 ms."""

    def decode_s(self, batch, context_mean, candidate):
        return 0.010 + 0.001 * candidate.shape.n_nodes

    def decode_many_s(self, batch, context_means, candidate):
        return np.full(len(context_means), self.decode_s(batch, 0.0, candidate))

    def prefill_s(self, n_requests, prompt_tokens_mean, with_draft):
        return 0.005

    def draft_sync_s(self, batch, tokens_mean, context_mean):
        return 0.001

    def riding_prefill_s(self, decode_rows, prompt_tokens):
        return 0.002


@pytest.mark.parametrize("bulk", [True, False])
def test_engine_event_trace_is_exact(h100, bulk):
    """Two requests, acceptance 1 so every step of k = 2 emits 3 tokens. By hand:
    t=0 req 0 arrives, prefill -> first token 0.005 (5 left); decode, draft catch-up of its prompt: 13 ms -> 0.018
    (2 left); req 1 (arrived 0.012) prefill -> 0.023 (5 left); decode with catch-up of req 1: 13 ms -> 0.036, req 0
    emits its last 2 and finishes, req 1 has 2 left; decode, draft warm: 12 ms -> 0.048, req 1 finishes."""
    cost, target, draft = h100
    costs = FixedCosts(cost, target, draft)
    workload = Workload(np.array([0.0, 0.012]), np.array([4, 4]), np.array([6, 6]))
    acc = parse_acceptance("iid:1")
    run = simulate(workload, costs, parse_policy("fixed:2", acc), acc, np.random.default_rng(0),
                   EngineConfig(bulk=bulk))
    np.testing.assert_allclose(run.first_token_s, [0.005, 0.023])
    np.testing.assert_allclose(run.finish_s, [0.036, 0.048])
    np.testing.assert_allclose(run.step_time_s, [0.018, 0.036, 0.048])
    assert run.step_batch.tolist() == [1, 2, 1]
    assert run.step_tokens.tolist() == [3, 5, 2]
    m = summarize(run)
    # TPOT of req 0: (0.036 - 0.005) / 5; of req 1: (0.048 - 0.023) / 5
    assert m.tpot_s[0] == pytest.approx(np.median([0.031 / 5, 0.025 / 5]))
    assert m.ttft_s[0] == pytest.approx(np.median([0.005, 0.011]))


@pytest.mark.parametrize("bulk", [True, False])
def test_mixed_prefill_rides_in_the_running_batch_step(h100, bulk):
    """llama-server's schedule (``prefill_mixed``): the same two requests as above, by hand.
    t=0 req 0 prefills alone (nothing runs) -> first token 0.005; decode with catch-up: 13 ms -> 0.018, 2 left
    (req 1 arrived at 0.012, mid-step); req 1's prompt rides in the next step: 12 ms + 2 ms -> 0.032, req 0 emits
    its last 2 and finishes, req 1 joins with its first token at 0.032; catch-up of req 1's prompt: 13 ms -> 0.045;
    12 ms -> 0.057, req 1 finishes. No prefill step of its own for req 1."""
    cost, target, draft = h100
    costs = FixedCosts(cost, target, draft)
    workload = Workload(np.array([0.0, 0.012]), np.array([4, 4]), np.array([6, 6]))
    acc = parse_acceptance("iid:1")
    run = simulate(workload, costs, parse_policy("fixed:2", acc), acc, np.random.default_rng(0),
                   EngineConfig(bulk=bulk, prefill_mixed=True))
    np.testing.assert_allclose(run.first_token_s, [0.005, 0.032])
    np.testing.assert_allclose(run.finish_s, [0.032, 0.057])
    np.testing.assert_allclose(run.step_time_s, [0.018, 0.032, 0.045, 0.057])
    assert run.step_batch.tolist() == [1, 1, 1, 1]
    assert run.step_tokens.tolist() == [3, 2, 3, 2]
    assert run.prefill_duration_s.tolist() == [0.005]


def test_riding_prefill_costs_the_rows_it_adds_not_a_pass(h100):
    """A prompt riding in a decode pass costs the pass over the grown rows less the pass over the decode rows: more
    than nothing, less than a pass of its own (which also reads the weights), and it grows with the prompt."""
    cost, target, draft = h100
    costs = StepCosts(cost, target, draft)
    ride = costs.riding_prefill_s(8 * 5, 256)
    assert ride == pytest.approx(cost.pass_time_s(target, 1, 40 + 256, 0) - cost.pass_time_s(target, 1, 40, 0))
    assert 0 < ride < costs.prefill_s(1, 256, False)
    assert costs.riding_prefill_s(40, 1024) > ride


def test_a_prefill_pays_the_engines_own_work_around_its_passes(h100):
    """`EngineOverheads.prefill` (measured on a GPU: building the padded prompts, the first tokens' draw and read)
    is added once per prefill plus per request joining, whether or not the draft prefills too."""
    from dataclasses import replace

    from simulator.specs import PerStep

    cost, target, draft = h100
    engine = replace(cost.overheads.engine, prefill=PerStep(5e-4, 2e-5))
    with_work = StepCosts(replace(cost, overheads=replace(cost.overheads, engine=engine)), target, draft)
    bare = StepCosts(cost, target, draft)
    for with_draft in (False, True):
        assert with_work.prefill_s(4, 256, with_draft) - bare.prefill_s(4, 256, with_draft) == pytest.approx(5.8e-4)


def test_slot_runs_are_runs_of_consecutive_ids():
    """llama.cpp splits a batch into a micro-batch per run of consecutive busy slots (any order in)."""
    assert slot_runs(np.array([0, 2])) == [1, 1]
    assert slot_runs(np.array([3, 0, 1])) == [2, 1]
    assert slot_runs(np.array([3, 1, 2, 0])) == [4]
    assert slot_runs(np.array([], dtype=np.int64)) == []


def _llama_slots_after_three(workload: Workload) -> Scheduler:
    """A scheduler with llama-server's slots (4) whose first three requests have just joined, on slots 3, 2, 1."""
    acc = parse_acceptance("iid:0.7")
    sched = Scheduler(workload, parse_policy("off", acc), 4, 8192, 10**6, 1, False, False, llama_slots=True)
    for r in range(3):
        sched.submit(r)
    first = sched.admit()
    assert first.slots == [3, 2, 1]
    sched.join(first)
    return sched


def test_llama_slots_take_never_used_slots_from_the_highest_then_the_least_recently_freed():
    """llama-server's choice of slot: never-used ones first, highest id first (its LRU scan keeps the last of equal
    `t_last_used`), then the one freed longest ago."""
    sched = _llama_slots_after_three(Workload(np.zeros(6), np.full(6, 8), np.full(6, 4)))
    sched.remaining[:] = [0, 5, 0]  # the requests on slots 3 and 1 finish, slot 3 first
    sched.retire(sched.finished())
    for r in range(3, 6):
        sched.submit(r)
    assert sched.admit().slots == [0, 3, 1]


def test_llama_slots_prefer_the_slot_whose_cached_prompt_shares_a_prefix():
    """With the prompts' ids, llama-server takes the free slot whose cached tokens share the longest prefix with the
    new prompt when that is more than a tenth of it; otherwise the least recently used."""
    a, b, c = tuple(range(1, 21)), tuple(range(50, 70)), tuple(range(90, 110))
    b_again = b[:15] + (7,) * 5  # 15 of its 20 tokens in common with b
    other = tuple(range(200, 220))
    ids = (a, b, c, b_again, other)
    sched = _llama_slots_after_three(Workload(np.zeros(5), np.full(5, 20), np.full(5, 4), prompt_ids=ids))
    sched.remaining[:] = 0
    sched.retire(sched.finished())  # free, least recently used first: 0 (never used), 3, 2, 1
    sched.submit(3)
    sched.submit(4)
    assert sched.admit().slots == [2, 0]  # b's slot by similarity; then the least recently used


def test_a_workload_refuses_prompt_ids_of_other_lengths():
    with pytest.raises(SpecsimError, match="prompt token ids"):
        Workload(np.zeros(1), np.array([3]), np.array([2]), prompt_ids=((1, 2),))


@pytest.mark.parametrize("bulk", [True, False])
def test_slot_runs_price_a_pass_per_run_of_busy_slots(h100, bulk):
    """Three requests together on slots 2, 1, 0; the one on slot 1 finishes first, and every step after it runs
    slots 0 and 2 as two one-sequence passes (the engine's fixed work once), where one pass of two sequences runs
    without slot runs."""
    cost, target, draft = h100
    costs = StepCosts(cost, target, draft)
    workload = Workload(np.zeros(3), np.full(3, 64), np.array([12, 4, 12]))
    acc = parse_acceptance("iid:0.7")
    off = parse_policy("off", acc)
    plain = Candidate(0)
    runs = simulate(workload, costs, off, acc, np.random.default_rng(0), EngineConfig(bulk=bulk, slot_runs=True))
    one = simulate(workload, costs, off, acc, np.random.default_rng(0), EngineConfig(bulk=bulk))
    for run, split in ((runs, True), (one, False)):
        assert run.step_batch.tolist() == [3] * 3 + [2] * 8
        for b, c, d in zip(run.step_batch.tolist(), run.step_context.tolist(), run.step_duration_s.tolist()):
            whole = costs.decode_s(b, c, plain)
            if split and b == 2:
                assert d == pytest.approx(2 * costs.decode_s(1, c, plain) - costs.engine_fixed_s(plain))
                assert d > whole
            else:
                assert d == pytest.approx(whole)
    assert runs.finish_s[1] == pytest.approx(one.finish_s[1])  # the same until slot 1 frees
    assert runs.finish_s[0] > one.finish_s[0]


def test_a_riding_prompt_joins_its_slots_run_and_its_rest_is_a_pass_of_its_own(h100):
    """llama-server's slots with a prompt riding in a decode step: the new slot (3, then 2) joins the running one's
    run for one token, as a decoding row, and the rest of its prompt is a micro-batch of its own at context 0."""
    cost, target, draft = h100
    costs = StepCosts(cost, target, draft)
    workload = Workload(np.array([0.0, 1e-6]), np.array([64, 64]), np.array([6, 6]))
    acc = parse_acceptance("iid:0.7")
    run = simulate(workload, costs, parse_policy("off", acc), acc, np.random.default_rng(0),
                   EngineConfig(prefill_mixed=True, slot_runs=True))
    plain = Candidate(0)
    assert run.prefill_duration_s.tolist() == [pytest.approx(costs.prefill_s(1, 64, False))]
    c = float(run.step_context[0])
    assert run.step_duration_s[0] == pytest.approx(costs.decode_s(2, c, plain) + costs.prefill_s(1, 63, False))
    assert run.first_token_s[1] == pytest.approx(run.step_time_s[0])


def test_eager_draft_sync_pays_in_prefill_and_plain_steps(h100):
    """Eager: no catch-up in speculative steps; a plain step under a speculating policy pays a one-token draft pass."""
    cost, target, draft = h100
    costs = FixedCosts(cost, target, draft)
    workload = Workload(np.array([0.0]), np.array([4]), np.array([7]))
    acc = parse_acceptance("iid:1")
    eager = EngineConfig(draft_sync="eager")
    run = simulate(workload, costs, parse_policy("fixed:2", acc), acc, np.random.default_rng(0), eager)
    np.testing.assert_allclose(run.step_duration_s, [0.012, 0.012])
    both = Workload(np.array([0.0, 0.0]), np.array([4, 4]), np.array([4, 4]))
    run = simulate(both, costs, parse_policy("threshold:2@1", acc), acc, np.random.default_rng(0), eager)
    np.testing.assert_allclose(run.step_duration_s, [0.011] * 3)  # batch 2 > 1: plain steps + a one-token draft pass


# --- agreement with the analytic model ------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "batch"), [("iid:0.7", 1), ("iid:0.7", 8), ("markov:0.95,0.3,0.05,0.15", 8),
                                             ("markov:0.95,0.3,0.05,0.15", 32)])
def test_static_batch_matches_analytic_tokens_per_s(h100, spec, batch):
    """A static batch decoding 100,000+ tokens: the simulator's tokens/s over the full-batch steps equals
    B x E[A + 1] / T_step at the steps' mean context within 1 % (markov: E[A + 1] at the stationary step start).
    This markov model is sticky (a hard spell lasts ~7 tokens), so its tokens per step average slowly: 100,000
    tokens leave ~0.8 % of Monte Carlo noise; it gets 400,000 (the KV capacity is lifted to hold them)."""
    cost, target, draft = h100
    acc = parse_acceptance(spec)
    tokens = 400_000 if spec.startswith("markov") else 120_000
    run = simulate(static_batch(batch, 512, tokens // batch), StepCosts(cost, target, draft),
                   parse_policy("fixed:4", acc), acc, np.random.default_rng(7),
                   EngineConfig(max_batch=batch, kv_capacity_tokens=10**7))
    full = run.step_batch == batch
    assert run.step_tokens[full].sum() >= 100_000
    context = float(run.step_context[full].mean())
    analytic = batch * acc.expected_tokens(4) / step_time(cost, target, draft, batch, context, Candidate(4)).total_s
    assert decode_tokens_per_s(run, batch) == pytest.approx(analytic, rel=0.01)


def test_plain_decoding_is_exact(h100):
    """Policy off: one token per sequence-step, durations the plain step at each step's context."""
    cost, target, draft = h100
    run = simulate(static_batch(4, 256, 300), StepCosts(cost, target, draft), parse_policy("off", None),
                   parse_acceptance("iid:0.5"), np.random.default_rng(0), EngineConfig(max_batch=4))
    assert set(run.step_tokens.tolist()) == {4}
    expect = [cost.plain_step_s(target, 4, int(c)) for c in run.step_context[:5]]
    np.testing.assert_allclose(run.step_duration_s[:5], expect, rtol=1e-3)


# --- workloads, seeds, fleets, capacity -------------------------------------------------------------------------


def test_workload_rates_and_lengths():
    rng = np.random.default_rng(0)
    w = synthetic("poisson", 20_000, parse_lengths("512"), parse_lengths("64..192"), rng)
    assert w.at_rate(8.0).mean_rate_per_s == pytest.approx(8.0, rel=0.03)
    assert w.output_tokens.min() >= 64 and w.output_tokens.max() <= 192
    bursty = synthetic("gamma:3", 20_000, parse_lengths("exp:100"), parse_lengths("1"), rng)
    gaps = np.diff(bursty.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)
    assert bursty.prompt_tokens.mean() == pytest.approx(100, rel=0.05)


@pytest.mark.parametrize("bad", ["0", "8..1", "exp:0", "lots", "-5"])
def test_bad_lengths(bad):
    with pytest.raises(SpecsimError, match="token count"):
        parse_lengths(bad)


def test_bad_rate():
    w = static_batch(1, 8, 8)
    with pytest.raises(SpecsimError, match="rate"):
        w.at_rate(0)


def test_same_seed_same_result(h100):
    cost, target, draft = h100
    acc = parse_acceptance("markov:0.9,0.4,0.1,0.2")
    w = synthetic("poisson", 300, parse_lengths("256"), parse_lengths("exp:64"), np.random.default_rng(5)).at_rate(20)
    runs = [simulate(w, StepCosts(cost, target, draft), parse_policy("adaptive", acc), acc,
                     np.random.default_rng(seed)) for seed in (1, 1, 2)]
    np.testing.assert_array_equal(runs[0].finish_s, runs[1].finish_s)
    assert not np.array_equal(runs[0].finish_s, runs[2].finish_s)


def test_fleet_routers(h100):
    cost, target, draft = h100
    acc = parse_acceptance("iid:0.7")
    w = synthetic("poisson", 400, parse_lengths("128"), parse_lengths("32"), np.random.default_rng(0)).at_rate(40)
    costs = StepCosts(cost, target, draft)
    rr = simulate(w, costs, parse_policy("fixed:2", acc), acc, np.random.default_rng(0), engines=4,
                  router="round-robin")
    assert np.bincount(rr.engine_of).tolist() == [100, 100, 100, 100]
    ll = simulate(w, costs, parse_policy("fixed:2", acc), acc, np.random.default_rng(0), engines=4)
    assert set(np.unique(ll.engine_of)) == {0, 1, 2, 3}
    one = simulate(w, costs, parse_policy("fixed:2", acc), acc, np.random.default_rng(0))
    assert summarize(ll).tpot_s[0] < summarize(one).tpot_s[0]  # four engines share the load: smaller batches


def test_request_too_big_for_memory(h100):
    cost, target, draft = h100
    acc = parse_acceptance("iid:0.7")
    with pytest.raises(SpecsimError, match="KV cache"):
        simulate(static_batch(1, 2_000_000, 10), StepCosts(cost, target, draft), parse_policy("fixed:2", acc), acc,
                 np.random.default_rng(0))


def test_max_rate_brackets_the_slo(h100):
    """The rate found meets the SLO and the next rate bisected above it does not."""
    cost, target, draft = h100
    acc = parse_acceptance("iid:0.7")
    w = synthetic("poisson", 400, parse_lengths("256"), parse_lengths("64"), np.random.default_rng(0))
    scenario = Scenario(w, StepCosts(cost, target, draft), acc, seed=0, slo=SLO(tpot_s=0.012))
    found = max_rate(scenario, parse_policy("fixed:3", acc), start_rate=4.0, rel_tol=0.05)
    assert found.metrics is not None and found.metrics.slo_attainment >= 0.9
    assert found.rate_per_s < found.failed_rate_per_s <= found.rate_per_s * 1.06
    failed = scenario.run(parse_policy("fixed:3", acc), found.failed_rate_per_s)[1]
    assert failed.slo_attainment < 0.9 or not failed.sustained


def test_speculation_lowers_tpot_at_low_load_and_raises_it_past_the_crossover(h100):
    """Poisson load on the H100 preset: fixed:4 beats plain decoding's median TPOT at 10 req/s and loses at 50 req/s
    (its draft passes eat the capacity plain decoding needs: requests queue; on the preset of vLLM 0.24's measured
    kernels plain decoding keeps up at 50 req/s, TTFT 26 ms against fixed:4's 804, 30x, asserted > 10x; at 40 req/s
    fixed:4 is already 8 % slower but queues less, TTFT 1.5x), while adaptive stays within a few percent of the better
    of the two at both."""
    cost, target, draft = h100
    acc = parse_acceptance("iid:0.7")
    costs = StepCosts(cost, target, draft)
    base = synthetic("poisson", 1500, parse_lengths("512"), parse_lengths("128"), np.random.default_rng(11))
    tpot, ttft = {}, {}
    for rate in (10, 50):
        for label in ("off", "fixed:4", "adaptive"):
            m = summarize(simulate(base.at_rate(rate), costs, parse_policy(label, acc), acc, np.random.default_rng(0)))
            tpot[(label, rate)], ttft[(label, rate)] = m.tpot_s[0], m.ttft_s[0]
    assert tpot[("fixed:4", 10)] < 0.8 * tpot[("off", 10)]
    assert tpot[("fixed:4", 50)] > 1.05 * tpot[("off", 50)] and ttft[("fixed:4", 50)] > 10 * ttft[("off", 50)]
    for rate in (10, 50):
        better = min(tpot[("off", rate)], tpot[("fixed:4", rate)])
        assert tpot[("adaptive", rate)] <= 1.05 * better


@pytest.mark.parametrize("bulk", [True, False])
def test_on_demand_kv_preempts_the_newest_request_by_hand(h100, bulk):
    """Two requests at t = 0, prompt 30, output 40, plain decoding (lookahead 1), a cache of 100 tokens, prefill 5 ms,
    a step 10 ms. By hand: both admitted (30 + 1 + 1 = 32 each), first tokens at 0.005 with 31 cached each; a step
    needs 2 (c + 1) <= 100, so 19 steps run (c = 31..49) to t = 0.195, when c = 50 and request 1, the newest, is
    preempted with 20 tokens emitted. Request 0 runs its last 20 steps alone to 0.395; then request 1 is readmitted,
    recomputes 30 + 20 - 1 tokens (5 ms) and runs its last 20 steps: 0.400 + 0.200 = 0.600. One preemption.
    Reserving each whole life instead (30 + 40 + 1 = 71) runs them one after the other: 0.395 and 0.790."""
    cost, target, draft = h100
    workload = Workload(np.array([0.0, 0.0]), np.array([30, 30]), np.array([40, 40]))
    acc = parse_acceptance("iid:0.5")
    runs = {kv: simulate(workload, FixedCosts(cost, target, draft), parse_policy("off", acc), acc,
                         np.random.default_rng(0), EngineConfig(kv_capacity_tokens=100, kv_allocation=kv, bulk=bulk))
            for kv in ("on-demand", "reserve")}
    on_demand, reserve = runs["on-demand"], runs["reserve"]
    np.testing.assert_allclose(on_demand.first_token_s, [0.005, 0.005])
    np.testing.assert_allclose(on_demand.finish_s, [0.395, 0.600])
    assert on_demand.preemptions == 1
    assert on_demand.step_batch.tolist() == [2] * 19 + [1] * 40
    np.testing.assert_allclose(reserve.finish_s, [0.395, 0.790])
    assert reserve.preemptions == 0


def test_lookahead_slots_admit_one_sequence_fewer(h100):
    """A static batch of 4 whose whole lives fit the cache exactly (4 x (100 + 20) = 480 tokens): with fixed:4 each
    running request also holds 5 lookahead slots, so one sequence fewer runs at once than when only kept tokens are
    reserved."""
    cost, target, draft = h100
    workload = static_batch(4, 100, 20)
    acc = parse_acceptance("iid:0.6")
    batch = {}
    for slots in (True, False):
        config = EngineConfig(kv_capacity_tokens=480, lookahead_slots=slots)
        run = simulate(workload, StepCosts(cost, target, draft), parse_policy("fixed:4", acc), acc,
                       np.random.default_rng(0), config)
        batch[slots] = int(run.step_batch.max())
    assert batch == {True: 3, False: 4}


def test_token_budget_caps_the_batch_at_budget_over_verification_tokens(h100):
    """max_num_batched_tokens 64 with fixed:7 (8 tokens per verification): at most 8 sequences run together."""
    cost, target, draft = h100
    acc = parse_acceptance("iid:0.6")
    run = simulate(static_batch(20, 64, 16), StepCosts(cost, target, draft), parse_policy("fixed:7", acc), acc,
                   np.random.default_rng(0), EngineConfig(max_prefill_tokens=64))
    assert int(run.step_batch.max()) == 8


@pytest.mark.parametrize("bad", [{"max_batch": 0}, {"max_prefill_tokens": 0}, {"prefill_bucket": 0},
                                 {"draft_sync": "sometimes"}, {"kv_allocation": "paged"}])
def test_an_engine_config_that_cannot_run_is_refused_in_one_line(bad):
    with pytest.raises(SpecsimError, match="must be at least 1|is not one of"):
        EngineConfig(**bad)


def test_a_bucketed_prefill_is_priced_at_the_padded_length(h100):
    """Padded to a bucket (specsim's engine on CUDA graphs), a prefill of prompts of 40 and 70 tokens is priced as
    two prompts of 96; padded to the longest, of 70; packed, at their mean."""
    from simulator.policies import parse_policy
    from simulator.serving import simulate

    cost, target, draft = h100
    costs = StepCosts(cost, target, draft)
    acc = parse_acceptance("iid:0.7")
    w = Workload(np.zeros(2), np.array([40, 70]), np.array([4, 4]), "two")
    runs = {name: simulate(w, costs, parse_policy("off", acc), acc, np.random.default_rng(0), config)
            for name, config in [("bucket", EngineConfig(prefill_padded=True, prefill_bucket=32)),
                                 ("longest", EngineConfig(prefill_padded=True)), ("packed", EngineConfig())]}
    assert runs["bucket"].prefill_duration_s[0] == pytest.approx(costs.prefill_s(2, 96, False))
    assert runs["longest"].prefill_duration_s[0] == pytest.approx(costs.prefill_s(2, 70, False))
    assert runs["packed"].prefill_duration_s[0] == pytest.approx(costs.prefill_s(2, 55, False))
    assert runs["bucket"].prefill_duration_s[0] > runs["longest"].prefill_duration_s[0]


def test_the_accepted_histogram_counts_every_run_it_was_given_however_it_folds():
    """Runs are counted in batches (by runs kept and by cells kept); the counts must be those of every run given,
    per draft shape, whether they were folded once, many times or not yet (read before a fold)."""
    from simulator.scheduler import AcceptedHistogram
    from simulator.sweep import Candidate

    rng = np.random.default_rng(3)
    k2, k4 = Candidate(2), Candidate(4)
    runs = [(k2 if i % 3 else k4, rng.integers(0, (2 if i % 3 else 4) + 1, size=(int(rng.integers(1, 40)),
                                                                                 int(rng.integers(1, 9)))))
            for i in range(700)]
    runs.append((k4, rng.integers(0, 5, size=(300, 256))))  # past the cells' fold on its own
    hist = AcceptedHistogram()
    for i, (cand, a) in enumerate(runs):
        hist.add(cand, a[: max(1, len(a) - 1)])  # a view of the draw, as the simulator keeps it
        if i == 10:
            early = {label: c.copy() for label, c in hist.counts.items()}
    want = {c.label: np.zeros(c.shape.depth + 1, dtype=np.int64) for c in (k2, k4)}
    for cand, a in runs:
        want[cand.label] += np.bincount(a[: max(1, len(a) - 1)].ravel(), minlength=cand.shape.depth + 1)
    assert set(hist.counts) == set(want)
    for label, counts in want.items():
        assert hist.counts[label].tolist() == counts.tolist()
    assert sum(int(c.sum()) for c in early.values()) == sum(a[: max(1, len(a) - 1)].size for _, a in runs[:11])


def test_the_step_log_gives_every_step_in_completion_order_as_the_runs_were_logged():
    """Runs logged past many folds of the log, from two engines whose runs interleave in time: the columns are
    every step's, ordered by end time, ties in the order logged (a stable sort); one engine's log comes back as
    logged."""
    from simulator.scheduler import StepLog

    rng = np.random.default_rng(5)
    runs = []
    for engine in (0, 1):
        t = 0.0
        for _ in range(300):
            n = int(rng.integers(1, 12))
            ends = t + np.cumsum(rng.choice([0.5, 1.0], size=n))  # ties between the engines' step ends
            runs.append((ends, rng.random(n), rng.random(n) * 900, rng.integers(1, 40, size=n),
                         int(rng.integers(1, 64)), int(rng.integers(0, 9)), engine))
            t = float(ends[-1])
    order = rng.permutation(len(runs))  # the engines' runs interleave in the log
    log, one = StepLog(fold_runs=16), StepLog(fold_runs=16)
    for i in order:
        log.add(*runs[i][:6])
    for run in runs[:300]:
        one.add(*run[:6])

    def reference(rs):
        cat = [np.concatenate([r[j] for r in rs]) for j in range(4)]
        lengths = [len(r[0]) for r in rs]
        cols = dict(step_time_s=cat[0], step_duration_s=cat[1], step_context=cat[2], step_tokens=cat[3],
                    step_batch=np.repeat([r[4] for r in rs], lengths),
                    step_drafted=np.repeat([r[5] for r in rs], lengths))
        by_end = np.argsort(cat[0], kind="stable")
        return {name: col[by_end] for name, col in cols.items()}

    for got, want in ((log.columns(), reference([runs[i] for i in order])), (one.columns(), reference(runs[:300]))):
        assert set(got) == set(want)
        for name in want:
            assert got[name].tolist() == want[name].tolist(), name
    assert one.columns()["step_time_s"].tolist() == np.concatenate([r[0] for r in runs[:300]]).tolist()


def test_a_run_logged_with_a_lead_step_is_two_runs():
    """``StepLog.add`` with `lead_drafted` (a catch-up step that drafted its own k): the first step carries that
    k, the rest the run's, as if logged as two runs."""
    from simulator.scheduler import StepLog

    ends, durations, contexts, tokens = np.arange(1.0, 5.0), np.full(4, 0.5), np.arange(4.0) * 10, np.arange(4)
    split, two = StepLog(), StepLog()
    split.add(ends, durations, contexts, tokens, 3, 4, lead_drafted=2)
    two.add(ends[:1], durations[:1], contexts[:1], tokens[:1], 3, 2)
    two.add(ends[1:], durations[1:], contexts[1:], tokens[1:], 3, 4)
    got, want = split.columns(), two.columns()
    assert got["step_drafted"].tolist() == [2, 4, 4, 4]
    for name in want:
        assert got[name].tolist() == want[name].tolist(), name


def test_a_batchs_totals_are_numpys_on_either_side_of_the_list_threshold():
    """``total`` and ``least`` (a batch's sums and minimum, by a list up to a few dozen rows, by numpy above): the
    same Python ints as numpy's reductions at every size around the switch, an empty batch summing to 0."""
    from simulator.scheduler import least, total

    rng = np.random.default_rng(3)
    assert total(np.empty(0, dtype=np.int64)) == 0
    for size in (1, 2, 31, 32, 33, 63, 64, 65, 300):
        a = rng.integers(-10**12, 10**12, size=size)
        assert type(total(a)) is int and total(a) == int(a.sum())
        assert type(least(a)) is int and least(a) == int(a.min())


def test_a_run_that_keeps_no_steps_reports_what_one_that_keeps_them_does(h100):
    """`keep_steps=False` (what the commands run): no per-step record, yet the same metrics, the steps' totals
    equal to the kept columns' sums, and the step log's own lists never longer than one fold (flat memory)."""
    cost, target, draft = h100
    acc = parse_acceptance("markov:0.95,0.3,0.05,0.15")
    costs = StepCosts(cost, target, draft)
    w = synthetic("poisson", 400, parse_lengths("256"), parse_lengths("64"), np.random.default_rng(3)).at_rate(20)
    policy = parse_policy("adaptive", acc)
    kept = simulate(w, costs, policy, acc, np.random.default_rng(4))
    lean = simulate(w, costs, policy, acc, np.random.default_rng(4), keep_steps=False)
    assert len(lean.step_time_s) == 0 and len(kept.step_time_s) > 1000
    assert summarize(lean) == summarize(kept)
    t = lean.step_totals
    assert t.steps == len(kept.step_batch) and t.tokens == int(kept.step_tokens.sum())
    assert t.duration_s == pytest.approx(float(kept.step_duration_s.sum()), rel=1e-12)
    assert t.batch_duration_s == pytest.approx(float((kept.step_batch * kept.step_duration_s).sum()), rel=1e-12)
    assert t.drafted == int((kept.step_batch * kept.step_drafted).sum())
    common = int(np.bincount(kept.step_batch).argmax())
    assert decode_tokens_per_s(lean, common) == pytest.approx(decode_tokens_per_s(kept, common), rel=1e-12)
    log = StepLog(fold_runs=8, keep=False)
    for i in range(100):
        log.add(np.array([i, i + 0.5]), np.array([0.5, 0.5]), np.array([10.0, 11.0]), np.array([3, 3]), 3, 2)
        assert len(log._pending) < 8 and not log._steps
    assert log.totals().steps == 200 and log.totals().sequence_steps == 600 and log.columns()["step_batch"].size == 0
