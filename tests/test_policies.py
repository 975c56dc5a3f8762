"""Speculation policies: parsing, what each chooses for a batch (against the analytic best k), and the policy
table an engine is given (tolerance, the engine's tax on turning speculation off and on)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import SpecsimError
from simulator.acceptance_parse import parse_acceptance
from simulator.policies import Adaptive, BatchState, parse_policies, parse_policy
from simulator.step_costs import StepCosts
from simulator.sweep import Candidate, tokens_per_pass

# --- policies ---------------------------------------------------------------------------------------------------


def test_parse_policies_joins_tree_branching():
    acc = parse_acceptance("ranks:0.6,0.2")
    labels = [p.label for p in parse_policies("off,tree:4,2,2,1,fixed:4,threshold:4@64,adaptive:6", acc)]
    assert labels == ["off", "tree:4,2,2,1", "fixed:4", "threshold:4@64", "adaptive:6"]


@pytest.mark.parametrize("bad", ["fixed:-1", "threshold:4", "threshold:0@8", "adaptive:0", "sometimes", "fixed:x"])
def test_bad_policies_are_one_line_errors(bad):
    with pytest.raises(SpecsimError, match="policy"):
        parse_policies(bad, parse_acceptance("ranks:0.6,0.2"))


def test_policies_within_what_the_heads_can_draft():
    """Medusa's 4 heads fill at most 4 positions a step: a bare adaptive chooses k up to 4 and says so in its label;
    a policy asking for more is refused in one line that names the limit; what fits is left as given."""
    acc = parse_acceptance("ranks:0.6,0.2")
    heads = parse_policies("off,fixed:4,adaptive,tree:2,2", acc, max_depth=4, drafter="medusa4")
    assert [p.label for p in heads] == ["off", "fixed:4", "adaptive:4", "tree:2,2"]
    assert heads[2].k_max == 4 and max(c.k for c in heads[2].candidates) == 4
    assert parse_policy("adaptive", acc).k_max == 8  # no limit: as before
    for bad in ("fixed:5", "adaptive:6", "threshold:5@8", "tree:2,2,1,1,1"):
        with pytest.raises(SpecsimError, match=r"medusa4 fills at most 4"):
            parse_policy(bad, acc, max_depth=4, drafter="medusa4")


def test_tree_policy_needs_ranks():
    with pytest.raises(SpecsimError, match="per-rank"):
        parse_policy("tree:2,2", parse_acceptance("iid:0.7"))


def test_threshold_switches_at_its_batch():
    p = parse_policy("threshold:4@64", parse_acceptance("iid:0.7"))
    assert p.choose(BatchState(64, 100.0), None).k == 4
    assert p.choose(BatchState(65, 100.0), None).k == 0


def test_adaptive_picks_the_analytic_best_k(h100):
    """With the draft's cache current, adaptive's k maximises E[A + 1] / T_step - the sweep's best at that batch."""
    cost, target, draft = h100
    acc = parse_acceptance("iid:0.7")
    costs = StepCosts(cost, target, draft)
    policy = parse_policy("adaptive", acc)
    assert isinstance(policy, Adaptive)
    for batch in (1, 32, 128, 256):
        chosen = policy.choose(BatchState(batch, 1024.0 + 32), costs)
        rates = {k: tokens_per_pass(Candidate(k), acc) / costs.decode_s(batch, 1024.0 + 32, Candidate(k))
                 for k in range(9)}
        assert chosen.k == max(rates, key=rates.get)


def test_adaptive_waits_out_a_large_draft_backlog(h100):
    """A cold draft with whole prompts to catch up does not start at a batch where speculation barely pays."""
    cost, target, draft = h100
    acc = parse_acceptance("iid:0.7")
    costs = StepCosts(cost, target, draft)
    policy = parse_policy("adaptive", acc)
    warm = policy.choose(BatchState(200, 600.0), costs)
    cold = policy.choose(BatchState(200, 600.0, draft_missing_mean=500.0, remaining_mean=20.0, draft_warm=False),
                         costs)
    assert warm.k > 0 and cold.k == 0



# --- the policy table and the engine's tax ------------------------------------------------------------------------


def _chain_sweep(h100, acceptance: str, batches=range(1, 401)):
    from simulator.sweep import chains, sweep

    cost, target, draft = h100
    return sweep(cost, target, draft, parse_acceptance(acceptance), list(batches), chains(range(0, 5)), [1024])


def test_policy_table_without_tax_is_the_best_k_per_batch(h100):
    from simulator.serving_report import policy_table

    result = _chain_sweep(h100, "iid:0.6")
    best = {b.batch: int(b.k or 0) for b in result.best}
    assert [(c.batch, c.k) for c in policy_table(result)] == sorted(best.items())


def _speed_table(speeds: dict[int, dict[int, float]]):
    """A chain sweep with these speed-ups (batch -> k -> speed-up), step times to match a 1 s plain step."""
    from simulator.sweep import SweepResult, SweepRow

    rows = tuple(SweepRow(b, k, None, 128, 1.0, 1.0 / x, 1.0, x, "memory", True)
                 for b, by_k in speeds.items() for k, x in by_k.items())
    return SweepResult(rows, (), None)


def _fewest_ranges(speeds: dict[int, dict[int, float]], tolerance: float) -> int:
    """By dynamic programming: the fewest ranges of one k each such that every batch's k is within tolerance of
    its best (the brute-force answer the greedy table must reach)."""
    def near(by_k: dict[int, float]) -> set[int]:  # the tolerance trades draft lengths, never k > 0 against k = 0
        best = max(by_k, key=lambda k: (by_k[k], -k))
        return {k for k, x in by_k.items() if x >= by_k[best] * (1 - tolerance if (k == 0) == (best == 0) else 1)}

    near = [near(speeds[b]) for b in sorted(speeds)]
    fewest = {k: 1 for k in near[0]}
    for allowed in near[1:]:
        start = min(fewest.values()) + 1
        fewest = {k: min(fewest.get(k, start), start) for k in allowed}
    return min(fewest.values())


def test_policy_table_within_tolerance_keeps_a_k_across_near_ties():
    """Two draft lengths trading the lead by 0.1 % from batch to batch are one range at 1 % tolerance, each batch
    within 1 % of its best, and the alternation itself at none."""
    from simulator.serving_report import batch_ranges, policy_table

    speeds = {b: {0: 1.0, 2: 1.6 - 0.01 * b + (0.004 if b % 3 == 0 else 0.0), 3: 1.602 - 0.01 * b}
              for b in range(1, 13)}
    exact = policy_table(_speed_table(speeds))
    assert len(batch_ranges([(c.batch, c.k) for c in exact])) == 8
    kept = policy_table(_speed_table(speeds), tolerance=0.01)
    assert batch_ranges([(c.batch, c.k) for c in kept]) == [[1, 12, 3]]
    assert all(c.loss <= 0.01 and c.best_k == exact[i].k for i, c in enumerate(kept))


def test_policy_table_within_tolerance_has_the_fewest_ranges():
    """On random speed-up tables the greedy table (from each boundary, the k that stays near the best furthest) has
    as few ranges as dynamic programming finds, never picks a k outside the tolerance, and speculates exactly where
    the best k does."""
    from simulator.serving_report import batch_ranges, policy_table

    rng = np.random.default_rng(7)
    for _ in range(200):
        tolerance = float(rng.choice([0.0, 0.01, 0.03, 0.1]))
        # k = 0 is plain decoding (speed-up 1 in an engine without a tax); k = 1..3 drawn around it
        speeds = {b: {0: 1.0, **{k: float(x) for k, x in enumerate(rng.uniform(0.9, 1.2, 3), 1)}} for b in range(1, 16)}
        table = policy_table(_speed_table(speeds), tolerance=tolerance)
        assert all(c.speedup >= c.best_speedup * (1 - tolerance) - 1e-12 for c in table)
        assert all((c.k == 0) == (c.best_k == 0) for c in table)
        assert len(batch_ranges([(c.batch, c.k) for c in table])) == _fewest_ranges(speeds, tolerance)


def test_off_tax_keeps_speculation_on_longer_and_switch_cost_removes_boundaries(h100):
    """k = 0 in an engine started with speculation pays its off-tax, so the batch where the table turns
    speculation off moves up; with a switching cost a boundary survives only where the best k still wins after
    paying for the switch, so the table has no more ranges than without it, and k never increases with batch."""
    from simulator.serving_report import batch_ranges, policy_table
    from simulator.specs import SpeculationTax

    # speculation stops paying near batch 75, well before memory runs out at 319 (on the H100 preset refitted to
    # vLLM 0.24's kernels with the all-reduce at its key, iid:0.4 pays at k = 1 up to that limit)
    result = _chain_sweep(h100, "iid:0.3")

    def off_from(table):
        return min(c.batch for c in table if c.k == 0)

    free = policy_table(result)
    taxed = policy_table(result, SpeculationTax((1, 400), (0.06, 0.06)))
    assert off_from(taxed) > off_from(free)
    assert all(c.speedup == pytest.approx(1 / 1.06) for c in taxed if c.k == 0)
    sticky = policy_table(result, SpeculationTax((1, 400), (0.06, 0.06), switch_fraction=5.0))
    assert len(batch_ranges([(c.batch, c.k) for c in sticky])) <= len(batch_ranges([(c.batch, c.k) for c in taxed]))
    assert [c.k for c in sticky] == sorted((c.k for c in sticky), reverse=True)
    kept = [(c.batch, c.k) for c, c0 in zip(sticky, taxed) if c.k != c0.k]
    assert kept, "a switch cost this large must keep some batch on its previous k"


def test_warm_makes_every_choice_a_look_up(h100):
    """After `warm` over a stream's batches and contexts, choosing at any of them (after anything the policy may
    have drafted) evaluates no step time: a real engine's decision costs a table look-up, as an exported policy's."""
    cost, target, draft = h100
    costs = StepCosts(cost, target, draft)
    policy = parse_policy("adaptive:6", parse_acceptance("iid:0.7"))
    policy.warm(costs, range(1, 9), range(100, 400, 16))
    evaluated = []
    original = costs.decode_s
    costs.decode_s = lambda *a: evaluated.append(a) or original(*a)  # type: ignore[method-assign]
    for b in (1, 3, 8):
        for c in (100.0, 237.5, 399.0):
            for previous in (None, *policy.candidates):
                policy.choose(BatchState(b, c, previous=previous), costs)
    assert evaluated == []
    policy.choose(BatchState(32, 100.0), costs)  # a batch it was not warmed for is evaluated then
    assert evaluated
