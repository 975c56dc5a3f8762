"""Draft trees: shapes, expected accepted tokens under a per-rank acceptance vector, and Sequoia's best tree.

A tree's nodes are drafted tokens; the root (the last accepted token) is not a node. Node i has a parent (0 is the
root) and a rank among its siblings (1 = the draft's most likely candidate). With a per-rank vector r, the probability
that a node's path is accepted is the product of r[rank] along it, so

    E[accepted] = sum over nodes of prod_{edges on the path} r[rank(edge)]      (Sequoia, Chen et al. 2024)

and a chain of k (every rank 1) gives sum_j r1^j, the i.i.d. formula minus its bonus token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import SpecsimError
from .limits import MAX_TREE_NODES, WHY_TREE

Ranks = Sequence[float] | Sequence[Sequence[float]]
"""Per-rank acceptance: one vector for every depth (Sequoia's), or one per depth (prediction heads: head d proposes
every node of depth d), the last repeating past its depth."""


def rank_acceptance(ranks: Ranks, depth: int, rank: int) -> float:
    """P(the rank-th candidate of a node at `depth` (1 = the root's children) is the one accepted)."""
    if ranks and isinstance(ranks[0], Sequence):
        row = ranks[min(depth, len(ranks)) - 1]
    else:
        row = ranks
    return float(row[rank - 1]) if rank <= len(row) else 0.0


@dataclass(frozen=True)
class Tree:
    """parents[i] and ranks[i] describe node i + 1; parents index nodes (0 = root), parents come first."""

    parents: tuple[int, ...]
    ranks: tuple[int, ...]
    label: str = ""

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.ranks):
            raise SpecsimError("tree parents and ranks must be equally long")
        for i, (p, r) in enumerate(zip(self.parents, self.ranks), 1):
            if not 0 <= p < i or r < 1:
                raise SpecsimError(f"tree node {i}: parent {p} must precede it and rank {r} must be >= 1")

    @classmethod
    def chain(cls, k: int) -> Tree:
        return cls(tuple(range(k)), (1,) * k, label=f"chain{k}")

    @classmethod
    def from_branching(cls, branching: Sequence[int]) -> Tree:
        """``(4, 2, 2, 1)``: the root has 4 children, each of those 2, and so on."""
        if not branching or any(b < 1 for b in branching):
            raise SpecsimError(f"tree branching must be positive integers per depth, e.g. 4,2,2,1; got "
                               f"{','.join(map(str, branching)) or 'nothing'}")
        nodes, width = 0, 1
        for b in branching:  # counted before any node is built
            width *= b
            nodes += width
            if nodes > MAX_TREE_NODES:
                raise SpecsimError(f"tree {','.join(map(str, branching))} has more than {MAX_TREE_NODES:,} nodes: "
                                   f"{WHY_TREE}")
        parents: list[int] = []
        ranks: list[int] = []
        frontier = [0]
        for b in branching:
            nxt = []
            for p in frontier:
                for r in range(1, b + 1):
                    parents.append(p)
                    ranks.append(r)
                    nxt.append(len(parents))
            frontier = nxt
        return cls(tuple(parents), tuple(ranks), label=",".join(map(str, branching)))

    @property
    def n_nodes(self) -> int:
        return len(self.parents)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Depth of each node (the root's children are at depth 1)."""
        d = [0]
        for p in self.parents:
            d.append(d[p] + 1)
        return tuple(d[1:])

    @cached_property
    def depth(self) -> int:
        return max(self.depths, default=0)

    @cached_property
    def widths(self) -> tuple[int, ...]:
        """Nodes at each depth 1..depth."""
        return tuple(int(c) for c in np.bincount(self.depths, minlength=self.depth + 1)[1:])

    @property
    def draft_pass_widths(self) -> tuple[int, ...]:
        """Tokens each draft pass processes: pass d runs the draft on the nodes of depth d - 1 (the root is 1)."""
        return (1,) + self.widths[:-1] if self.n_nodes else ()

    @property
    def verify_tokens(self) -> int:
        """Tokens of the single verification pass: every node plus the root."""
        return self.n_nodes + 1

    def path_probabilities(self, ranks: Ranks) -> np.ndarray:
        """Per node, the product of the rank acceptances along its path from the root (`rank_acceptance`)."""
        prob = np.ones(self.n_nodes + 1)
        for i, (p, rank) in enumerate(zip(self.parents, self.ranks), 1):
            prob[i] = prob[p] * rank_acceptance(ranks, self.depths[i - 1], rank)
        return prob[1:]

    def expected_accepted(self, ranks: Sequence[float]) -> float:
        return float(self.path_probabilities(ranks).sum())

    def sample_accepted(self, ranks: Ranks, rng: np.random.Generator, size: int) -> np.ndarray:
        """Accepted path lengths: at each node, child of rank j is accepted with probability r_j (exclusive)."""
        children: dict[int, list[tuple[int, int]]] = {}
        for i, (p, rank) in enumerate(zip(self.parents, self.ranks), 1):
            children.setdefault(p, []).append((rank, i))
        out = np.zeros(size, dtype=int)
        for s in range(size):
            node, u = 0, rng.random()
            while node in children:
                cum, nxt = 0.0, None
                for rank, child in sorted(children[node]):
                    cum += rank_acceptance(ranks, self.depths[child - 1], rank)
                    if u < cum:
                        nxt = child
                        break
                if nxt is None:
                    break
                out[s] += 1
                node, u = nxt, rng.random()
        return out


def parse_branching(text: str) -> Tree:
    """``"4,2,2,1"`` -> the tree with that branching per depth; a one-line error otherwise."""
    try:
        branching = [int(x) for x in text.split(",")]
    except ValueError:
        raise SpecsimError(f"tree {text!r} is not comma-separated branching factors per depth, e.g. 4,2,2,1") from None
    return Tree.from_branching(branching)


def best_tree(ranks: Sequence[float], budget: int, max_depth: int | None = None) -> Tree:
    """The tree of at most `budget` nodes maximising E[accepted] for the rank vector (Sequoia's DP).

    best[d][n] is the best value of n nodes hung under one node with d levels left. A node's children take ranks
    1, 2, ... and sizes s_j (the child and its subtree); a child of rank j is worth r_j * (1 + best[d-1][s_j - 1]).
    The knapsack over ranks runs from the last rank to the first.
    """
    if budget < 1:
        raise SpecsimError(f"tree budget must be >= 1 node, got {budget}")
    r = np.asarray(ranks, dtype=float)
    r = r[: int(np.argmax(r <= 0)) if (r <= 0).any() else r.size]  # ranks past the first zero never help
    if r.size == 0:
        raise SpecsimError("ranks are all zero: no tree accepts anything")
    n_ranks = r.size
    depth_limit = budget if max_depth is None else min(max_depth, budget)
    best_prev = np.zeros(budget + 1)  # best[d-1][n]
    # choice[d][j][m] = size given to the rank-(j+1) child when m nodes remain for ranks j+1.. at depth level d.
    choices: list[np.ndarray] = []
    for _ in range(depth_limit):
        child_val = np.concatenate([[0.0], 1.0 + best_prev[:-1]])  # child_val[s] = 1 + best[d-1][s-1]
        H = np.zeros(budget + 1)  # value for ranks > j
        choice = np.zeros((n_ranks, budget + 1), dtype=int)
        for j in range(n_ranks - 1, -1, -1):
            newH = np.zeros(budget + 1)
            for m in range(1, budget + 1):
                s = np.arange(1, m + 1)
                vals = r[j] * child_val[s] + H[m - s]
                i = int(np.argmax(vals))
                if vals[i] > 0:
                    newH[m], choice[j, m] = vals[i], s[i]
            H = newH
        choices.append(choice)
        if np.allclose(H, best_prev, rtol=0, atol=1e-13):
            choices.pop()
            break
        best_prev = H

    parents: list[int] = []
    node_ranks: list[int] = []

    def build(parent: int, m: int, level: int) -> None:
        if level < 0:
            return
        choice = choices[level]
        for j in range(n_ranks):
            s = int(choice[j, m]) if m > 0 else 0
            if s == 0:
                return
            parents.append(parent)
            node_ranks.append(j + 1)
            build(len(parents), s - 1, level - 1)
            m -= s

    build(0, budget, len(choices) - 1)
    return _bfs_order(Tree(tuple(parents), tuple(node_ranks), label=f"budget{budget}"))


def _bfs_order(tree: Tree) -> Tree:
    """Renumber nodes breadth-first (by depth, then parent, then rank): the order a verifier lays them out."""
    # A stable sort by depth keeps each parent before its children.
    order = sorted(range(1, tree.n_nodes + 1), key=lambda i: tree.depths[i - 1])
    new_index = {0: 0}
    for n, old in enumerate(order, 1):
        new_index[old] = n
    parents = tuple(new_index[tree.parents[old - 1]] for old in order)
    ranks = tuple(tree.ranks[old - 1] for old in order)
    return Tree(parents, ranks, tree.label)
