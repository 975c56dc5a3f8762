"""Acceptance measured on this pair: along target-generated text from calibration prompts, per position t,

- alpha_t = sum_x min(p_t(x), q_t(x)), the probability that a drafted token is accepted at temperature T
  (Leviathan et al., Cor. 3.6) - measured without sampling noise;
- the greedy match m_t = [argmax p_t == argmax q_t];
- by Monte Carlo, which rank of a without-replacement candidate list recursive rejection sampling accepts
  (Sequoia's per-rank vector).

From these: the per-token traces for replay; every acceptance model fitted to the replayed steps (see
`simulator.acceptance_fit`: positional, beta, markov) with its error on held-out prompts, so that `measured` means
the variant that predicts unseen prompts best; P(A >= i) for chains up to k = 8; the lag-1 dependence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from engine.model import Decoder, causal_window
from engine.rejection import distribution
from engine.speculative import Decoding, RealEngine
from simulator.acceptance_fit import AcceptanceData, cross_validate

K_MAX = 8
KS = tuple(range(1, K_MAX + 1))
N_RANKS = 8
# Monte Carlo draws per position for the per-rank frequencies (`rank_acceptance`). The positions, not the draws, set
# the estimate's spread: 4 draws a position spread the built-in heads' rank frequencies no more than 16 do, at
# about a third of the time (docs/calibration.md, Figures behind the docstrings).
RANK_SIMS = 4
VARIANTS = ("iid", "positional", "beta", "markov", "trace")  # what `measured:VARIANT` can mean (ranks aside)


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


def greedy_yields(matches: np.ndarray, lookahead: int = 16) -> list[int]:
    """Per position, the tokens a greedy step starting there yields with `lookahead` drafts: 1 + the run of
    consecutive matches (the format of data/acceptance-traces)."""
    n = len(matches)
    run = np.zeros(n + 1, dtype=int)
    for t in range(n - 1, -1, -1):
        run[t] = run[t + 1] + 1 if matches[t] else 0
    return [int(1 + min(run[t], lookahead)) for t in range(n)]


def target_text(target: Decoder, prompts: Sequence[Sequence[int]], new_tokens: int, temperature: float, seed: int
                ) -> tuple[Any, torch.Tensor]:
    """The target's own text from each prompt (sampled at `temperature`, seeded), and the generator's state as
    generating left it: what both acceptance measurements read, generated once (`_after`)."""
    gen = torch.Generator(device=target.device).manual_seed(seed)
    run = RealEngine(target).generate(prompts, new_tokens, Decoding(k=0, temperature=temperature), gen)
    return run, gen.get_state()


def _after(text: tuple[Any, torch.Tensor], device: torch.device) -> tuple[Any, torch.Generator]:
    """The text and a generator where generating it left the seeded one (each measurement draws from its own)."""
    run, state = text
    gen = torch.Generator(device=device)
    gen.set_state(state)
    return run, gen


def measure_acceptance(target: Decoder, draft: Decoder, prompts: Sequence[Sequence[int]], new_tokens: int = 128,
                       temperature: float = 1.0, seed: int = 0, sims: int = RANK_SIMS,
                       tick: Callable[[], None] | None = None,
                       text: tuple[Any, torch.Tensor] | None = None) -> dict[str, Any]:
    """Generate with the target from each prompt, then measure the draft against it along that text (`text`: the
    target's text already generated with this seed, `target_text`, shared with `measure_head_acceptance`)."""
    device = target.device
    run, gen = _after(text or target_text(target, prompts, new_tokens, temperature, seed), device)
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
    return summarize_acceptance(alphas, matches, ranks_acc / len(prompts), prompts, new_tokens, temperature, seed)


def summarize_acceptance(alphas: Sequence[np.ndarray], matches: Sequence[np.ndarray], ranks: np.ndarray,
                         prompts: Sequence[Sequence[int]], new_tokens: int, temperature: float, seed: int
                         ) -> dict[str, Any]:
    """The measurement as a profile keeps it, from per-prompt traces along the target's text: alpha_t, the greedy
    matches, the per-rank vector; every acceptance variant fitted and judged on held-out prompts."""
    a_all = np.concatenate(alphas)
    mean = float(a_all.mean())
    pairs = np.concatenate([a[:-1] * a[1:] for a in alphas])
    firsts = np.concatenate([a[:-1] for a in alphas])
    both = float(pairs.mean())
    p_acc_acc = both / float(firsts.mean())
    p_acc_rej = (float(firsts.mean()) - both) / (1 - float(firsts.mean()))
    lag1 = (both - float(firsts.mean()) * mean) / max(mean * (1 - mean), 1e-12)
    yields = [np.asarray(greedy_yields(m)) for m in matches]
    data = (AcceptanceData(tuple(alphas), source="calibration prompts") if temperature > 0
            else AcceptanceData.from_yields(yields, "calibration prompts"))
    # Every variant `measured` can mean, judged on prompts it was not fitted to; `measured` is then the best.
    report = cross_validate(data, KS, folds=min(5, len(prompts)), models=VARIANTS, seed=seed)
    fitted = report.models
    positional = fitted["positional"]
    survival = np.cumprod(positional.conditional(K_MAX))  # P(A >= i) over replayed steps, i = 1..K_MAX
    beta, markov = fitted["beta"], fitted["markov"]
    return {
        "temperature": temperature,
        "prompts": len(prompts),
        "prompt_tokens": float(np.mean([len(p) for p in prompts])),
        "tokens_per_prompt": new_tokens,
        "alpha": mean,
        "greedy_match": float(np.concatenate(matches).mean()),
        "survival": survival.tolist(),
        "conditional_alpha": list(positional.conditional(K_MAX)),
        "ranks": ranks.tolist(),
        "lag1": {"p_accept_after_accept": p_acc_acc, "p_accept_after_reject": p_acc_rej, "correlation": lag1},
        "beta": {"a": beta.a, "b": beta.b},
        "markov": {"alpha_easy": markov.alpha_easy, "alpha_hard": markov.alpha_hard,
                   "p_easy_to_hard": markov.p_easy_to_hard, "p_hard_to_easy": markov.p_hard_to_easy},
        "heldout": {e.name: {"tokens_err_by_k": list(e.tokens_err_by_k), "tv_by_k": list(e.tv_by_k)}
                    for e in report.errors},
        "heldout_folds": report.folds,
        "chosen": report.chosen,
        "trace": {"alpha": [np.round(a, 5).tolist() for a in alphas],
                  "greedy_yields": [y.tolist() for y in yields]},
    }


@torch.inference_mode()
def measure_by_context(target: Decoder, draft: Decoder, texts: Sequence[Sequence[int]], starts: Sequence[int],
                       span: int, temperature: float = 1.0) -> dict[str, Any]:
    """Acceptance against context on real text: both models teacher-forced over `texts` (each at least
    max(starts) + span tokens), alpha_t = sum_x min(p_t, q_t) at every position; per window of `span` positions
    from each start, the mean over every text with a 95 % interval of that mean (spread over texts). The logistic
    decay (`simulator.context.fit_decay`) is fitted to all windows, and each window is predicted by the decay
    fitted to the others (leave one out) to show what a context not measured would be predicted at."""
    from simulator.context import fit_decay

    length = max(starts) + span
    seqs = torch.tensor([list(t[:length]) for t in texts], device=target.device)
    t_eff = temperature if temperature > 0 else 1.0
    p = distribution(teacher_forced(target, seqs)[:, :-1], t_eff)
    q = distribution(teacher_forced(draft, seqs)[:, :-1], t_eff)
    alpha = torch.minimum(p, q).sum(-1).cpu().numpy().astype(float)  # (texts, length - 1): column t saw t + 1 tokens
    per_text = np.stack([alpha[:, s:s + span].mean(axis=1) for s in starts], axis=1)  # (texts, windows)
    mean = per_text.mean(axis=0)
    half = 1.96 * per_text.std(axis=0, ddof=1) / np.sqrt(len(texts))
    centre = np.asarray(starts, dtype=float) + 1 + (span - 1) / 2  # a window's mean context (tokens seen)
    decay = fit_decay(centre, mean)
    loo = []
    for i in range(len(starts)):
        keep = np.arange(len(starts)) != i
        loo.append(float(fit_decay(centre[keep], mean[keep]).alpha(centre[i])))
    err = np.asarray(loo) / mean - 1.0
    return {"texts": len(texts), "span": span, "temperature": temperature,
            "contexts": centre.tolist(), "alpha": mean.tolist(), "ci95": half.tolist(),
            "decay": {"high": decay.high, "low": decay.low, "c50": decay.c50, "width": decay.width},
            "leave_one_out": {"predicted": loo, "rel_error": err.tolist(),
                              "median_abs_err": float(np.median(np.abs(err))),
                              "max_abs_err": float(np.max(np.abs(err)))}}


@torch.inference_mode()
def measure_head_acceptance(target: Decoder, heads: Any, prompts: Sequence[Sequence[int]], new_tokens: int = 128,
                            temperature: float = 1.0, seed: int = 0, sims: int = RANK_SIMS,
                            text: tuple[Any, torch.Tensor] | None = None) -> dict[str, Any]:
    """The prediction heads (`engine.heads`) against the target along target-generated text from the prompts: per
    position t and head i, alpha_i(t) = sum_x min(p_{t+i}(x), q_i(x | h_t)), where h_t is the target's hidden state
    at t and p_{t+i} its distribution i positions on (the token head i proposes). A chain from t accepts its first
    i drafts with probability prod_{j <= i} alpha_j(t) (each head's draw independent given t), so P(A >= i) =
    E_t[prod_{j <= i} alpha_j(t)]: a position hard for one head is hard for the rest, which the per-head means
    would hide. Per head also the per-rank vector of its candidates (trees: head d proposes depth d)."""
    device = target.device
    run, gen = _after(text or target_text(target, prompts, new_tokens, temperature, seed), device)
    H = heads.n_heads
    t_eff = temperature if temperature > 0 else 1.0
    products: list[np.ndarray] = []  # per prompt: (positions, H) running products
    per_head, ranks = np.zeros(H), np.zeros((H, N_RANKS))
    keep = target.keep_hidden
    target.keep_hidden = True
    try:
        for b, prompt in enumerate(prompts):
            seq = torch.tensor([list(prompt) + run.tokens[b]], device=device)
            logits = teacher_forced(target, seq)[0]
            assert target.hidden is not None
            hidden = target.hidden[0]
            p = distribution(logits, t_eff)  # row t: the token after position t
            q = distribution(heads(hidden).float(), t_eff)  # (T, H, V): row t, head i: the token i + 1 after t
            first = len(prompt) - 1  # the first generated token's position is `first` + 1
            n = new_tokens - H  # starts whose every head's target lies in the generated text
            alphas = torch.stack([torch.minimum(p[first + i:first + i + n], q[first:first + n, i - 1]).sum(-1)
                                  for i in range(1, H + 1)], 1).cpu().numpy().astype(float)  # (n, H)
            products.append(np.cumprod(alphas, axis=1))
            per_head += alphas.mean(0)
            ranks += np.array([rank_acceptance(p[first + i:first + i + n], q[first:first + n, i - 1], N_RANKS, sims,
                                               gen) for i in range(1, H + 1)])
    finally:
        target.keep_hidden = keep
    survival = np.concatenate(products).mean(0)
    conditional = survival / np.concatenate([[1.0], survival[:-1]])
    return {"n_heads": H, "temperature": temperature, "prompts": len(prompts), "tokens_per_prompt": new_tokens,
            "alpha_by_head": (per_head / len(prompts)).tolist(), "survival": survival.tolist(),
            "conditional_alpha": conditional.tolist(), "ranks": (ranks / len(prompts)).mean(0).tolist(),
            "ranks_by_head": (ranks / len(prompts)).tolist()}
