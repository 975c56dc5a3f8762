"""The accept/reject rules of speculative sampling, chain and tree, for a whole batch on the device.

A chain (Leviathan et al. 2023, Chen et al. 2023): draft k tokens, verify k + 1 in one target pass, accept drafted
token x with probability min(1, p(x)/q(x)), on the first rejection resample from norm(max(p - q, 0)) and stop, else
take the bonus token from the last position. Greedy decoding is the same rule with one-hot p and q (temperature 0).

A tree (SpecInfer, Miao et al. 2024): every node verified in one pass, then a walk down with recursive rejection
sampling: the children of a node, drawn from q without replacement, are tried in order; x is accepted with
min(1, p(x)/q(x)); on rejection p <- norm(max(p - q, 0)) and x is removed from q (then q renormalised).

`rule` selects deliberately broken rules for the negative controls of `specsim exactness`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from simulator.trees import Tree

RULES = ("exact", "resample-from-p", "accept-q-over-p")


def distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Probabilities over the vocabulary (float32); temperature 0 is greedy: one-hot at the argmax."""
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits / temperature, dim=-1)


def sample(p: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """One token per row of p (..., V)."""
    flat = p.reshape(-1, p.shape[-1])
    return torch.multinomial(flat, 1, generator=gen).reshape(p.shape[:-1])


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(p - q, 0)); where p and q are equal (nothing to resample) fall back to p."""
    r = (p - q).clamp_min(0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp_min(1e-30), p)


def uniform(shape: tuple[int, ...], gen: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """U[0, 1) draws from the run's generator (which lives on the engine's device)."""
    return torch.rand(shape, generator=gen, device=device)


def accept_chain(p: torch.Tensor, q: torch.Tensor, d: torch.Tensor, rule: str,
                 gen: torch.Generator | None, forced: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The accept/reject rule over a batch, on the device: A per sequence (drafts accepted before the first
    rejection) and the next token (resampled at the rejection, or the bonus token). p (B, k + 1, V), q (B, k, V),
    d (B, k). With `forced` (B,) accepted lengths (`RealEngine.force`), the tests run as usual but their outcome is
    replaced: the next token comes from the residual at the forced rejection, so a replayed step does exactly the
    work of a real one."""
    B, k = d.shape
    p_d = p[:, :k].gather(-1, d[..., None])[..., 0]
    q_d = q.gather(-1, d[..., None])[..., 0]
    u = uniform((B, k), gen, d.device)
    if rule == "accept-q-over-p":  # broken on purpose: the ratio upside down
        ok = u * p_d < q_d
    else:
        ok = u * q_d < p_d  # u < p/q, without dividing by q
    rejected = ~ok
    A = torch.where(rejected.any(1), rejected.float().argmax(1), torch.full((B,), k, device=d.device))
    if forced is not None:
        A = forced.to(A.dtype)
    rows = torch.arange(B, device=d.device)
    p_A = p[rows, A]
    q_A = torch.where((A < k)[:, None], q[rows, A.clamp(max=k - 1)], torch.zeros_like(p_A))
    fix = p_A if rule == "resample-from-p" else residual(p_A, q_A)  # broken on purpose: ignore q
    return A, sample(fix, gen)


def walk_tree(p: torch.Tensor, q_nodes: torch.Tensor, tokens: torch.Tensor, t: TreeTables, T: float, rule: str,
              gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling down every sequence's tree at once, on the device.

    At each depth, each live sequence tries its node's children in rank order: child x is accepted with
    min(1, p(x)/q(x)); on a rejection p <- norm(max(p - q, 0)) and x is removed from q. The first accepted child is
    the next node; if none is accepted (or the node is a leaf), the walk stops and the next token is drawn from the
    current p (the residual, or the bonus distribution at a leaf). Greedy (T = 0): a child is accepted if it is the
    target's argmax at the node. Returns the accepted path (B, depth; -1 padded), the next token (B,) and how many
    candidates each sequence tried."""
    B = p.shape[0]
    dev = p.device
    rows = torch.arange(B, device=dev)
    node = torch.zeros(B, dtype=torch.long, device=dev)
    alive = torch.ones(B, dtype=torch.bool, device=dev)
    path = torch.full((B, t.tree.depth), -1, dtype=torch.long, device=dev)
    tried = torch.zeros(B, dtype=torch.long, device=dev)
    p_cur, q_cur = p[:, 0].clone(), q_nodes[:, 0].clone()
    table = t.child_table
    for depth in range(t.tree.depth):
        kids = table[node]  # (B, most children)
        chosen = torch.full((B,), -1, dtype=torch.long, device=dev)
        for j in range(kids.shape[1]):
            c = kids[:, j]
            valid = alive & (c >= 0) & (chosen < 0)
            x = tokens[rows, c.clamp(min=0)]
            if T == 0:
                ok = x == p[rows, node].argmax(-1)
            else:
                u = uniform((B,), gen, dev)
                px, qx = p_cur[rows, x], q_cur[rows, x]
                ok = u * px < qx if rule == "accept-q-over-p" else u * qx < px
            ok &= valid
            tried += valid.long()
            chosen = torch.where(ok, c, chosen)
            if T > 0:
                rejected = (valid & ~ok)[:, None]
                if rule != "resample-from-p":
                    p_cur = torch.where(rejected, residual(p_cur, q_cur), p_cur)
                q_drop = q_cur.clone()
                q_drop[rows, x] = 0.0
                q_drop = q_drop / q_drop.sum(-1, keepdim=True).clamp_min(1e-30)
                q_cur = torch.where(rejected, q_drop, q_cur)
        step = chosen >= 0
        path[:, depth] = torch.where(step, chosen, path[:, depth])
        node = torch.where(step, chosen, node)
        p_cur = torch.where(step[:, None], p[rows, node], p_cur)
        q_cur = torch.where(step[:, None], q_nodes[rows, node], q_cur)
        alive &= step
    nxt = p[rows, node].argmax(-1) if T == 0 else sample(p_cur, gen)
    return path, nxt, tried


@dataclass(frozen=True)
class TreeTables:
    """A tree as tensors on the device: nodes 0..N (0 is the root, the current token), in breadth-first order."""

    tree: Tree
    device: torch.device

    @cached_property
    def depth(self) -> torch.Tensor:  # (N + 1,)
        return torch.tensor((0,) + self.tree.depths, device=self.device)

    @cached_property
    def children(self) -> list[list[int]]:
        """Each node's children in rank order (the order the walk tries them)."""
        kids: list[list[int]] = [[] for _ in range(self.tree.n_nodes + 1)]
        for i, parent in enumerate(self.tree.parents, 1):
            kids[parent].append(i)
        return [sorted(c, key=lambda i: self.tree.ranks[i - 1]) for c in kids]

    @cached_property
    def child_table(self) -> torch.Tensor:
        """(N + 1, most children) node ids of each node's children in rank order, -1 padded."""
        width = max(1, max(len(c) for c in self.children))
        rows = [kids + [-1] * (width - len(kids)) for kids in self.children]
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    @cached_property
    def ancestors(self) -> torch.Tensor:
        """(N + 1, N + 1) bool: node i sees node j (j is i or one of its ancestors)."""
        n = self.tree.n_nodes + 1
        anc = [[False] * n for _ in range(n)]
        anc[0][0] = True
        for i, parent in enumerate(self.tree.parents, 1):
            anc[i] = list(anc[parent])
            anc[i][i] = True
        return torch.tensor(anc, dtype=torch.bool, device=self.device)

    @cached_property
    def levels(self) -> list[list[int]]:
        """The nodes that have children, by depth: each level is one draft pass."""
        out: list[list[int]] = []
        level = [0]
        while level:
            parents = [n for n in level if self.children[n]]
            if not parents:
                break
            out.append(parents)
            level = [c for n in parents for c in self.children[n]]
        return out

    @cached_property
    def level_index(self) -> list[torch.Tensor]:
        return [torch.tensor(lv, dtype=torch.long, device=self.device) for lv in self.levels]
