"""Real speculative decoding, batched: B sequences, each at its own position and accepting its own number of tokens.

In the style of gpt-fast's `speculative_decode`: draft k tokens, verify k + 1 in one target pass, accept drafted token
x with probability min(1, p(x)/q(x)), on the first rejection resample from norm(max(p - q, 0)) and stop, else take the
bonus token from the last position. Greedy decoding is the same rule with one-hot p and q (temperature 0).

Trees verify every node in one target pass with a tree attention mask and walk down with recursive rejection
sampling: the children of a node, drawn from q without replacement, are tried in order; x is accepted with
min(1, p(x)/q(x)); on rejection p <- norm(max(p - q, 0)) and x is removed from q (then q renormalised). The
accepted path's cache entries are then moved to consecutive slots.

Caches roll back by position: every sequence b keeps P[b], the slot of its current (last emitted, not yet cached)
token; a rejected draft's entries beyond P simply get overwritten later. Each draft phase starts with a two-token
pass over [previous, current] at [P - 1, P], which (re)writes whatever the draft had not yet cached.

`rule` selects deliberately broken rules for the negative controls of `specsim exactness`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from simulator import SpecsimError
from simulator.sweep import StepPhases
from simulator.trees import Tree

from .model import Decoder

RULES = ("exact", "resample-from-p", "accept-q-over-p")


@dataclass
class StepRecord:
    accepted: list[int]  # A per sequence
    outcomes: list[list[int]]  # per sequence, 1/0 per drafted position tried (up to and including the rejection)
    phases: StepPhases  # measured: drafting, the verification (or plain) pass, accept/reject and bookkeeping


@dataclass
class RunResult:
    tokens: list[list[int]]  # generated tokens per sequence (exactly max_new_tokens each)
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float = 0.0
    prefill_s: float = 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Mean tokens emitted per sequence per target pass (A + 1), over every step of every sequence."""
        n = sum(len(s.accepted) for s in self.steps)
        return sum(a + 1 for s in self.steps for a in s.accepted) / max(n, 1)

    @property
    def decode_s(self) -> float:
        return sum(s.phases.total_s for s in self.steps)



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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Ngram:
    """Prompt lookup: propose the k tokens that followed the latest earlier occurrence of the text's last n-gram
    (n = max_n down to 1); with no match, repeat the last token. A proposal is a point mass (q one-hot)."""

    def __init__(self, max_n: int = 3) -> None:
        self.max_n = max_n

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        h = list(history)
        for n in range(min(self.max_n, len(h) - 1), 0, -1):
            suffix = h[-n:]
            for start in range(len(h) - n - 1, -1, -1):
                if h[start:start + n] == suffix:
                    cont = h[start + n:start + n + k]
                    if cont:
                        return (cont + [cont[-1]] * k)[:k]
        return [h[-1]] * k


@dataclass
class Decoding:
    """What to run: plain (k = 0), a chain of k, or a tree; drafted by the draft model or by prompt lookup."""

    k: int = 0
    tree: Tree | None = None
    drafter: str = "model"  # "model" or "ngram"
    temperature: float = 1.0
    rule: str = "exact"

    def __post_init__(self) -> None:
        if self.k < 0:
            raise SpecsimError(f"k must be >= 0, got {self.k}")
        if self.rule not in RULES:
            raise SpecsimError(f"unknown rule {self.rule!r}; use one of {', '.join(RULES)}")
        if self.drafter not in ("model", "ngram"):
            raise SpecsimError(f"unknown drafter {self.drafter!r}; use model or ngram")
        if self.tree is not None and self.drafter == "ngram":
            raise SpecsimError("prompt lookup proposes one continuation; trees need the draft model")
        if self.temperature < 0:
            raise SpecsimError("temperature must be >= 0")

    @property
    def span(self) -> int:
        """Cache slots one step may write past the current token."""
        return self.tree.n_nodes if self.tree is not None else self.k


class Engine:
    """A target and an optional draft decoder on one device, decoding batches of prompts."""

    def __init__(self, target: Decoder, draft: Decoder | None, device: torch.device | str = "cpu") -> None:
        self.target, self.draft = target, draft
        self.device = torch.device(device)

    # -- set-up --------------------------------------------------------------------------------------------------
    def _check(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, how: Decoding, until: str) -> None:
        if not prompts:
            raise SpecsimError("no prompts to decode")
        vocab = self.target.cfg.vocab_size
        for p in prompts:
            if len(p) < 2:
                raise SpecsimError("each prompt needs at least 2 tokens")
            if max(p) >= vocab or min(p) < 0:
                raise SpecsimError(f"prompt token out of the vocabulary of {vocab}")
        if until not in ("all", "first"):
            raise SpecsimError(f"until must be 'all' or 'first', got {until!r}")
        # A sequence runs ahead of the one that decides when to stop: by a step's span with until="first", by up to
        # depth accepted tokens per step of the slowest with until="all"; a step writes span slots past P.
        depth = how.tree.depth if how.tree is not None else how.k
        ahead = how.span + 2 if until == "first" else max_new_tokens * depth + how.span + 2
        need = max(len(p) for p in prompts) + max_new_tokens + ahead
        for name, m in (("target", self.target), ("draft", self.draft)):
            if m is None:
                continue
            if need > m.cfg.max_seq_len:
                longest = max(len(p) for p in prompts)
                raise SpecsimError(
                    f"the {name}'s cache holds {m.cfg.max_seq_len} tokens but prompt ({longest}) + new tokens "
                    f"({max_new_tokens}) + drafted span ({how.span}) need {need}; shorten the prompt, lower k or "
                    "the tree, or generate fewer tokens")
        if how.span and how.drafter == "model" and self.draft is None:
            raise SpecsimError("speculation with a draft model needs one")
        if self.draft is not None and self.draft.cfg.vocab_size != vocab:
            raise SpecsimError("draft and target vocabularies differ")

    def _prefill(self, prompts: Sequence[Sequence[int]], use_draft: bool) -> torch.Tensor:
        """Cache every prompt token but the last; returns P (B,), the slot of each current token."""
        B = len(prompts)
        longest = max(len(p) for p in prompts)
        padded = torch.tensor([list(p[:-1]) + [0] * (longest - len(p)) for p in prompts], device=self.device)
        slots = torch.arange(longest - 1, device=self.device).expand(B, -1).contiguous()
        models = [self.target] + ([self.draft] if use_draft and self.draft is not None else [])
        for m in models:
            m.setup_cache(B)
            m(padded, slots)  # padding sits past each prompt's end and is overwritten before it is ever attended
        return torch.tensor([len(p) - 1 for p in prompts], device=self.device)

    # -- the run -------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, how: Decoding,
                 gen: torch.Generator | None = None, until: str = "all") -> RunResult:
        """Decode until every sequence (``until="all"``) or the first one (``"first"``: every sequence stays active
        to the end, as in a continuously batched engine) has `max_new_tokens`; records per step what was accepted
        and where the time went. Returned tokens are cut to `max_new_tokens`."""
        self._check(prompts, max_new_tokens, how, until)
        done = max if until == "first" else min
        t0 = time.perf_counter()
        use_draft = how.span > 0 and how.drafter == "model"
        P = self._prefill(prompts, use_draft)
        _sync(self.device)
        prefill_s = time.perf_counter() - t0
        history = [list(p) for p in prompts]
        out: list[list[int]] = [[] for _ in prompts]
        result = RunResult(out, prefill_s=prefill_s)
        while done(len(o) for o in out) < max_new_tokens:
            if how.span == 0:
                step, emitted = self._plain_step(P, history, how, gen)
            elif how.tree is not None:
                step, emitted = self._tree_step(P, history, how, gen)
            else:
                step, emitted = self._chain_step(P, history, how, gen)
            result.steps.append(step)
            for b, toks in enumerate(emitted):
                history[b].extend(toks)
                out[b].extend(toks)
                P[b] += len(toks)
        result.tokens = [o[:max_new_tokens] for o in out]
        result.wall_s = time.perf_counter() - t0
        return result

    def _cur(self, history: list[list[int]]) -> torch.Tensor:
        return torch.tensor([[h[-1]] for h in history], device=self.device)

    def _plain_step(self, P, history, how, gen):
        t0 = time.perf_counter()
        logits = self.target(self._cur(history), P[:, None])
        nxt = sample(distribution(logits[:, -1], how.temperature), gen)
        _sync(self.device)
        t1 = time.perf_counter()
        emitted = [[int(x)] for x in nxt.tolist()]
        return StepRecord([0] * len(history), [[] for _ in history],
                          StepPhases(0.0, t1 - t0, time.perf_counter() - t1)), emitted

    def _draft_window(self, P: torch.Tensor, history: list[list[int]]) -> torch.Tensor:
        """Draft logits at the current token after (re)caching [previous, current] at [P - 1, P]."""
        assert self.draft is not None
        toks = torch.tensor([h[-2:] for h in history], device=self.device)
        slots = torch.stack([P - 1, P], dim=1)
        return self.draft(toks, slots)[:, -1]

    def _chain_step(self, P, history, how, gen):
        k, T = how.k, how.temperature
        t0 = time.perf_counter()
        if how.drafter == "ngram":
            proposals = [Ngram().propose(h, k) for h in history]
            d = torch.tensor(proposals, device=self.device)
            q = torch.nn.functional.one_hot(d, self.target.cfg.vocab_size).float()
        else:
            qs, ds = [], []
            logits = self._draft_window(P, history)
            for j in range(k):
                qj = distribution(logits, T)
                dj = sample(qj, gen)
                qs.append(qj)
                ds.append(dj)
                if j + 1 < k:
                    logits = self.draft(dj[:, None], (P + j + 1)[:, None])[:, -1]
            q, d = torch.stack(qs, 1), torch.stack(ds, 1)  # (B, k, V), (B, k)
        _sync(self.device)
        t1 = time.perf_counter()
        verify_tokens = torch.cat([self._cur(history), d], dim=1)
        slots = P[:, None] + torch.arange(k + 1, device=self.device)
        p = distribution(self.target(verify_tokens, slots), T)  # (B, k + 1, V)
        _sync(self.device)
        t2 = time.perf_counter()
        accepted, outcomes, emitted = self._accept_chain(p, q, d, how.rule, gen)
        t3 = time.perf_counter()
        return StepRecord(accepted, outcomes, StepPhases(t1 - t0, t2 - t1, t3 - t2)), emitted

    @staticmethod
    def _accept_chain(p, q, d, rule, gen):
        """The accept/reject rule over a batch: returns A per sequence, the per-position outcomes, and the emitted
        tokens (A accepted drafts, then a resampled or bonus token)."""
        B, k = d.shape
        p_d = p[:, :k].gather(-1, d[..., None])[..., 0]
        q_d = q.gather(-1, d[..., None])[..., 0]
        u = _uniform((B, k), gen, d.device)
        if rule == "accept-q-over-p":  # broken on purpose: the ratio upside down
            ok = u * p_d < q_d
        else:
            ok = u * q_d < p_d  # u < p/q, without dividing by q
        rejected = ~ok
        A = torch.where(rejected.any(1), rejected.float().argmax(1), torch.full((B,), k, device=d.device))
        rows = torch.arange(B, device=d.device)
        p_A = p[rows, A]
        q_A = torch.where((A < k)[:, None], q[rows, A.clamp(max=k - 1)], torch.zeros_like(p_A))
        fix = p_A if rule == "resample-from-p" else residual(p_A, q_A)  # broken on purpose: ignore q
        nxt = sample(fix, gen)
        A_list, d_list, n_list = A.tolist(), d.tolist(), nxt.tolist()
        ok_list = ok.tolist()
        accepted = A_list
        outcomes = [[int(x) for x in ok_list[b][:min(A_list[b] + 1, k)]] for b in range(B)]
        emitted = [d_list[b][:A_list[b]] + [n_list[b]] for b in range(B)]
        return accepted, outcomes, emitted

    # -- trees ---------------------------------------------------------------------------------------------------
    def _tree_step(self, P, history, how, gen):
        assert self.draft is not None and how.tree is not None
        tree, T = how.tree, how.temperature
        B, N = len(history), tree.n_nodes
        depth = torch.tensor((0,) + tree.depths, device=self.device)
        children: dict[int, list[int]] = {}
        for i, (par, _) in enumerate(zip(tree.parents, tree.ranks), 1):
            children.setdefault(par, []).append(i)
        anc = _ancestor_matrix(tree).to(self.device)  # (N + 1, N + 1): node i sees node j
        t0 = time.perf_counter()
        tokens = torch.zeros(B, N + 1, dtype=torch.long, device=self.device)
        tokens[:, 0] = self._cur(history)[:, 0]
        q_nodes = torch.zeros(B, N + 1, self.target.cfg.vocab_size, device=self.device)
        q_logits = self._draft_window(P, history)[:, None]  # (B, nodes in this level, V)
        level = [0]
        while level:
            q_level = distribution(q_logits, T if T > 0 else 1.0)  # greedy trees rank candidates by q at T = 1
            nxt_level = []
            for li, node in enumerate(level):
                kids = children.get(node, [])
                q_nodes[:, node] = q_level[:, li]
                if not kids:
                    continue
                if T == 0:
                    picks = q_level[:, li].topk(len(kids), dim=-1).indices
                else:
                    picks = torch.multinomial(q_level[:, li], len(kids), replacement=False, generator=gen)
                tokens[:, kids] = picks
                nxt_level.extend(kids)
            if not nxt_level or all(not children.get(n) for n in nxt_level):
                break
            parents_needed = [n for n in nxt_level if children.get(n)]
            idx = torch.tensor(parents_needed, device=self.device)
            slots = P[:, None] + idx
            q_logits = self.draft(tokens[:, idx], slots, positions=P[:, None] + depth[idx],
                                  mask=_tree_mask(P, idx, anc))
            level = parents_needed
        _sync(self.device)
        t1 = time.perf_counter()
        all_idx = torch.arange(N + 1, device=self.device)
        p = distribution(self.target(tokens, P[:, None] + all_idx, positions=P[:, None] + depth,
                                     mask=_tree_mask(P, all_idx, anc)), T)
        _sync(self.device)
        t2 = time.perf_counter()
        accepted, outcomes, emitted = [], [], []
        tok_list = tokens.tolist()
        for b in range(B):
            path, tried, nxt = self._walk(p[b], q_nodes[b], tok_list[b], children, T, how.rule, gen)
            accepted.append(len(path))
            outcomes.append(tried)
            emitted.append([tok_list[b][n] for n in path] + [nxt])
            if path:
                src = P[b] + torch.tensor(path, device=self.device)
                dst = P[b] + torch.arange(1, len(path) + 1, device=self.device)
                self.target.move_cache(b, src, dst)
                self.draft.move_cache(b, src, dst)
        t3 = time.perf_counter()
        return StepRecord(accepted, outcomes, StepPhases(t1 - t0, t2 - t1, t3 - t2)), emitted

    @staticmethod
    def _walk(p, q_nodes, tokens, children, T, rule, gen):
        """Recursive rejection sampling down one sequence's tree: (accepted node path, outcomes, next token)."""
        node, path, tried = 0, [], []
        p_cur, q_cur = p[0].clone(), q_nodes[0].clone()
        while True:
            chosen = None
            for child in children.get(node, []):
                x = tokens[child]
                if T == 0:
                    ok = x == int(p[node].argmax())
                else:
                    u = float(_uniform((1,), gen, p.device))
                    if rule == "accept-q-over-p":
                        ok = u * float(p_cur[x]) < float(q_cur[x])
                    else:
                        ok = u * float(q_cur[x]) < float(p_cur[x])
                tried.append(int(ok))
                if ok:
                    chosen = child
                    break
                if T > 0:
                    if rule != "resample-from-p":
                        p_cur = residual(p_cur, q_cur)
                    q_cur[x] = 0.0
                    q_cur = q_cur / q_cur.sum().clamp_min(1e-30)
            if chosen is None:
                nxt = int(p[node].argmax()) if T == 0 else int(sample(p_cur, gen))
                return path, tried, nxt
            path.append(chosen)
            node = chosen
            p_cur, q_cur = p[node].clone(), q_nodes[node].clone()


def _uniform(shape: tuple[int, ...], gen: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """U[0, 1) draws from the run's generator (which lives on the engine's device)."""
    return torch.rand(shape, generator=gen, device=gen.device if gen is not None else device)


def _ancestor_matrix(tree: Tree) -> torch.Tensor:
    """anc[i, j]: node j is node i or one of its ancestors (node 0 is the root, the current token)."""
    n = tree.n_nodes + 1
    anc = torch.zeros(n, n, dtype=torch.bool)
    anc[0, 0] = True
    for i, par in enumerate(tree.parents, 1):
        anc[i] = anc[par]
        anc[i, i] = True
    return anc


def _tree_mask(P: torch.Tensor, idx: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """(B, len(idx), used): the queries (tree nodes idx) see every slot before P and their own ancestors."""
    n = anc.shape[0]
    used = int(P.max()) + n
    cols = torch.arange(used, device=P.device)
    prefix = cols[None, None, :] < P[:, None, None]
    rel = cols[None, :] - P[:, None]  # (B, used): position in the tree, or out of range
    inside = (rel >= 0) & (rel < n)
    tree_part = anc[idx][:, rel.clamp(0, n - 1)]  # (len(idx), B, used)
    tree_part = tree_part.permute(1, 0, 2) & inside[:, None, :]
    return prefix | tree_part
