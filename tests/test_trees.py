"""Trees: the per-rank formula against Monte Carlo and against brute force over every small tree."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import SpecsimError
from simulator.trees import Tree, best_tree, parse_branching


def test_branching_shape():
    t = parse_branching("4,2,2,1")
    assert t.n_nodes == 4 + 8 + 16 + 16 == 44
    assert t.widths == (4, 8, 16, 16) and t.depth == 4
    assert t.verify_tokens == 45
    assert t.draft_pass_widths == (1, 4, 8, 16)


def test_chain_is_the_iid_sum():
    r = [0.7]
    assert Tree.chain(5).expected_accepted(r) == pytest.approx(sum(0.7**j for j in range(1, 6)))
    assert Tree.chain(3).draft_pass_widths == (1, 1, 1)


def test_branching_closed_form():
    """For a branching tree the sum over paths factorises: sum_d prod_{i<=d} (r_1 + ... + r_{b_i})."""
    r = [0.5, 0.2, 0.1, 0.05]
    t = parse_branching("4,2,2,1")
    s = [sum(r[:b]) for b in (4, 2, 2, 1)]
    assert t.expected_accepted(r) == pytest.approx(s[0] + s[0] * s[1] + s[0] * s[1] * s[2] + np.prod(s))


@settings(max_examples=10, deadline=None)
@given(branching=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       r1=st.floats(0.2, 0.7), r2=st.floats(0.0, 0.25), r3=st.floats(0.0, 0.05))
def test_tree_expectation_matches_monte_carlo(branching, r1, r2, r3):
    r = [r1, r2, r3]
    t = Tree.from_branching(branching)
    rng = np.random.default_rng(7)
    n = 6000
    draws = t.sample_accepted(r, rng, n)
    se = draws.std() / np.sqrt(n) + 1e-9
    assert abs(draws.mean() - t.expected_accepted(r)) < 5 * se + 1e-3


def all_trees(n):
    """Every rooted ordered tree with n nodes, as parent arrays (node i's parent among 0..i-1)."""
    for parents in itertools.product(*[range(i) for i in range(1, n + 1)]):
        seen: dict[int, int] = {}
        ranks = []
        for p in parents:
            seen[p] = seen.get(p, 0) + 1
            ranks.append(seen[p])
        yield Tree(tuple(parents), tuple(ranks))


@pytest.mark.parametrize("ranks", [(0.6, 0.2, 0.1), (0.8, 0.1), (0.4, 0.3, 0.2), (0.9,)])
@pytest.mark.parametrize("budget", [1, 2, 4, 6])
def test_sequoia_dp_is_optimal_against_brute_force(ranks, budget):
    brute = max(t.expected_accepted(ranks) for t in all_trees(budget))
    tree = best_tree(ranks, budget)
    assert tree.n_nodes <= budget
    assert tree.expected_accepted(ranks) == pytest.approx(brute)


def test_dp_respects_depth_limit_and_beats_chains():
    r = (0.7, 0.15, 0.05)
    t = best_tree(r, 32, max_depth=4)
    assert t.depth <= 4
    assert best_tree(r, 32).expected_accepted(r) >= Tree.chain(32).expected_accepted(r)


@pytest.mark.parametrize("text", ["4,0,1", "a,b", "", "4,-1", "64,64,64"])
def test_malformed_trees_refused(text):
    with pytest.raises(SpecsimError):
        parse_branching(text)


def test_ranks_by_depth_in_closed_form_and_by_monte_carlo(rng):
    """Prediction heads rank their candidates per depth (head d proposes depth d): the expected accepted length with
    one rank vector per depth against sampling the same tree, and a flat vector as the special case of every depth
    alike; the serving simulator's per-node table draws the same distribution."""
    from simulator.sampling import _TreeTable

    tree = parse_branching("3,2,1")
    by_depth = ((0.6, 0.15, 0.05), (0.45, 0.1), (0.35,))
    draws = tree.sample_accepted(by_depth, rng, 40_000)
    assert draws.mean() == pytest.approx(tree.expected_accepted(by_depth), rel=0.02)
    assert tree.expected_accepted(((0.6, 0.15, 0.05),) * 3) == pytest.approx(tree.expected_accepted((0.6, 0.15, 0.05)))
    # by hand: depth 1 has three candidates, each node's children ranked by the next depth's vector
    d1, d2, d3 = by_depth
    p1 = sum(d1)
    p2 = sum(r * (d2[0] + d2[1]) for r in d1)
    p3 = sum(r * s * d3[0] for r in d1 for s in d2)
    assert tree.expected_accepted(by_depth) == pytest.approx(p1 + p2 + p3)
    table_draws = _TreeTable(tree, by_depth).draw(40_000, rng)
    assert table_draws.mean() == pytest.approx(tree.expected_accepted(by_depth), rel=0.02)


def test_ranks_by_depth_scale_with_context():
    from simulator.acceptance import IIDAcceptance, WithRanks

    acc = WithRanks(IIDAcceptance(0.6), ((0.6, 0.1), (0.4, 0.2)))
    half = acc.scaled(0.5)
    assert half.ranks == ((0.3, 0.05), (0.2, 0.1))
