"""Acceptance measured on this pair: along target-generated text from calibration prompts, per position t,

- alpha_t = sum_x min(p_t(x), q_t(x)), the probability that a drafted token is accepted at temperature T
  (Leviathan et al., Cor. 3.6) - measured without sampling noise;
- the greedy match m_t = [argmax p_t == argmax q_t];
- by Monte Carlo, which rank of a without-replacement candidate list recursive rejection sampling accepts
  (Sequoia's per-rank vector).

From these: P(A >= i) for chains up to k = 8, the lag-1 dependence of acceptance, fitted `beta` (per-prompt alpha)
and `markov` (hidden easy/hard state) models, and the per-token traces for replay.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from simulator.acceptance import MarkovAcceptance

from .model import Decoder, causal_window
from .speculative import Decoding, RealEngine, distribution

K_MAX = 8
N_RANKS = 8


@torch.inference_mode()
def teacher_forced(model: Decoder, seqs: torch.Tensor) -> torch.Tensor:
    """Logits for every position of `seqs` (B, T) in one cached pass."""
    model.setup_cache(seqs.shape[0])
    start = torch.zeros(seqs.shape[0], dtype=torch.long, device=seqs.device)
    return model(seqs, causal_window(start, seqs.shape[1], seqs.shape[1])).float()


def rank_acceptance(p: torch.Tensor, q: torch.Tensor, n_ranks: int, sims: int, gen: torch.Generator) -> np.ndarray:
    """Frequencies with which the j-th candidate (drawn from q without replacement) is the one recursive rejection
    sampling accepts, for j = 1..n_ranks. p, q: (N, V) per position."""
    N, V = p.shape
    p = p.repeat_interleave(sims, 0).double()
    q = q.repeat_interleave(sims, 0).double()
    done = torch.zeros(p.shape[0], dtype=torch.bool, device=p.device)
    counts = np.zeros(n_ranks)
    rows = torch.arange(p.shape[0], device=p.device)
    for j in range(min(n_ranks, V)):
        x = torch.multinomial(q.float().clamp_min(0), 1, generator=gen)[:, 0]
        u = torch.rand(p.shape[0], generator=gen, dtype=torch.float64, device=p.device)
        ok = (u * q[rows, x] < p[rows, x]) & ~done
        counts[j] = ok.sum().item()
        done |= ok
        r = (p - q).clamp_min(0)
        tot = r.sum(1, keepdim=True)
        p = torch.where(tot > 0, r / tot.clamp_min(1e-300), p)
        q[rows, x] = 0
        q = q / q.sum(1, keepdim=True).clamp_min(1e-300)
    return counts / (N * sims)


def survival_from_alphas(alphas: Sequence[np.ndarray], k_max: int) -> np.ndarray:
    """P(A >= i), i = 1..k_max: the mean over start positions of prod_{j<i} alpha_{t+j}."""
    num = np.zeros(k_max)
    den = np.zeros(k_max)
    for a in alphas:
        prod = np.ones(len(a))
        for i in range(k_max):
            if len(a) <= i:
                break
            prod = prod[: len(a) - i] * a[i:]
            num[i] += prod.sum()
            den[i] += len(prod)
    return num / np.maximum(den, 1)


def markov_stationary_survival(m: MarkovAcceptance, k: int) -> np.ndarray:
    """P(A >= i) for a step starting in the token-level stationary state (how survival_from_alphas averages)."""
    f = m.token_stationary.copy()
    out = []
    for _ in range(k):
        f = f * m.alphas
        out.append(f.sum())
        f = f @ m.transition
    return np.array(out)


def fit_markov(survival: np.ndarray, p_acc_acc: float, p_acc_rej: float) -> MarkovAcceptance:
    """Grid search, then a local refinement, for the markov model closest to the measured survival curve and the
    measured lag-1 conditionals (squared error)."""
    target = np.concatenate([survival, [p_acc_acc, p_acc_rej]])

    def loss(params: tuple[float, float, float, float]) -> float:
        ae, ah, peh, phe = params
        if not (0 <= ah <= ae <= 1 and 0 < peh <= 1 and 0 < phe <= 1):
            return np.inf
        m = MarkovAcceptance(ae, ah, peh, phe)
        pi, T, a = m.token_stationary, m.transition, m.alphas
        both = float((pi * a) @ T @ a)
        mean = float(pi @ a)
        acc_acc = both / mean if mean > 0 else 0.0
        acc_rej = (mean - both) / (1 - mean) if mean < 1 else 0.0
        pred = np.concatenate([markov_stationary_survival(m, len(survival)), [acc_acc, acc_rej]])
        return float(((pred - target) ** 2).sum())

    grid_a = np.linspace(0.05, 0.99, 12)
    grid_p = np.array([0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9])
    best = min(((ae, ah, peh, phe) for ae, ah in itertools.product(grid_a, grid_a) if ah <= ae
                for peh, phe in itertools.product(grid_p, grid_p)), key=loss)
    step = np.array([0.04, 0.04, 0.03, 0.03])
    cur, cur_loss = np.array(best), loss(best)
    for _ in range(6):  # coordinate search with shrinking steps
        for _ in range(20):
            improved = False
            for i in range(4):
                for sgn in (1, -1):
                    trial = cur.copy()
                    trial[i] = np.clip(trial[i] + sgn * step[i], 1e-3, 1.0)
                    tl = loss(tuple(trial))
                    if tl < cur_loss:
                        cur, cur_loss, improved = trial, tl, True
            if not improved:
                break
        step /= 2
    return MarkovAcceptance(*map(float, cur))


def greedy_yields(matches: np.ndarray, lookahead: int = 16) -> list[int]:
    """Per position, the tokens a greedy step starting there yields with `lookahead` drafts: 1 + the run of
    consecutive matches (the format of data/acceptance-traces)."""
    n = len(matches)
    run = np.zeros(n + 1, dtype=int)
    for t in range(n - 1, -1, -1):
        run[t] = run[t + 1] + 1 if matches[t] else 0
    return [int(1 + min(run[t], lookahead)) for t in range(n)]


def measure_acceptance(target: Decoder, draft: Decoder, prompts: Sequence[Sequence[int]], new_tokens: int = 128,
                       temperature: float = 1.0, seed: int = 0, sims: int = 16,
                       tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """Generate with the target from each prompt, then measure the draft against it along that text."""
    device = target.device
    gen = torch.Generator(device=device).manual_seed(seed)
    run = RealEngine(target).generate(prompts, new_tokens, Decoding(k=0, temperature=temperature), gen)
    if tick:
        tick()
    alphas, matches, ranks_acc = [], [], np.zeros(N_RANKS)
    for b, prompt in enumerate(prompts):
        seq = torch.tensor([list(prompt) + run.tokens[b]], device=device)
        lp, lq = teacher_forced(target, seq)[0], teacher_forced(draft, seq)[0]
        sl = slice(len(prompt) - 1, len(prompt) - 1 + new_tokens)  # distributions of the generated tokens
        p = distribution(lp[sl], temperature if temperature > 0 else 1.0)
        q = distribution(lq[sl], temperature if temperature > 0 else 1.0)
        alphas.append(torch.minimum(p, q).sum(-1).cpu().numpy().astype(float))
        matches.append((lp[sl].argmax(-1) == lq[sl].argmax(-1)).cpu().numpy())
        ranks_acc += rank_acceptance(p, q, N_RANKS, sims, gen)
        if tick:
            tick()
    ranks = ranks_acc / len(prompts)
    a_all = np.concatenate(alphas)
    mean = float(a_all.mean())
    pairs = np.concatenate([a[:-1] * a[1:] for a in alphas])
    firsts = np.concatenate([a[:-1] for a in alphas])
    both = float(pairs.mean())
    p_acc_acc = both / float(firsts.mean())
    p_acc_rej = (float(firsts.mean()) - both) / (1 - float(firsts.mean()))
    lag1 = (both - float(firsts.mean()) * mean) / max(mean * (1 - mean), 1e-12)
    survival = survival_from_alphas(alphas, K_MAX)
    per_prompt = np.array([a.mean() for a in alphas])
    var = float(per_prompt.var(ddof=1)) if len(per_prompt) > 1 else 0.0
    if var > 0:
        nu = mean * (1 - mean) / var - 1
        beta = {"a": mean * nu, "b": (1 - mean) * nu} if nu > 0 else None
    else:
        beta = None
    markov = fit_markov(survival, p_acc_acc, p_acc_rej)
    return {
        "temperature": temperature,
        "prompts": len(prompts),
        "tokens_per_prompt": new_tokens,
        "alpha": mean,
        "greedy_match": float(np.concatenate(matches).mean()),
        "survival": survival.tolist(),
        "conditional_alpha": (survival[0:1].tolist() + (survival[1:] / np.maximum(survival[:-1], 1e-12)).tolist()),
        "ranks": ranks.tolist(),
        "lag1": {"p_accept_after_accept": p_acc_acc, "p_accept_after_reject": p_acc_rej, "correlation": lag1},
        "beta": beta,
        "markov": {"alpha_easy": markov.alpha_easy, "alpha_hard": markov.alpha_hard,
                   "p_easy_to_hard": markov.p_easy_to_hard, "p_hard_to_easy": markov.p_hard_to_easy},
        "trace": {"alpha": [np.round(a, 5).tolist() for a in alphas],
                  "greedy_yields": [greedy_yields(m) for m in matches]},
    }
