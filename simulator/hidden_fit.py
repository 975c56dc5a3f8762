"""Hidden-chain acceptance models (``markov``, two states; ``hmm3``, three) fitted to accepted-length
distributions: the parameters whose step distributions at k = 1..K come closest (least squares, plus the squared
relative error of tokens per step) to the targets, by Nelder-Mead over unconstrained parameters (logits of the
states' acceptance, softmax rows of the transitions) from three starts, then a restart from where they ended.
Several target sets - cross-validation's folds - are fitted in one lockstep run (`fit_hidden_many`): each fit is the
one it would be alone, and they cost about what one does. `simulator.acceptance_fit` fits and judges every model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .acceptance import HiddenChain, HiddenStateAcceptance, MarkovAcceptance, hidden_chain_pmf_stack
from .minimize import nelder_mead_many

MIN_TRANSITION = 1e-4  # keeps a fitted chain ergodic (a state nobody leaves has no unique stationary law)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.minimum(np.maximum(x, -30.0), 30.0)))  # np.clip's wrapper costs more here


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return float(np.log(p / (1 - p)))


def matrix_loss(pmfs: np.ndarray, targets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`acceptance_fit.pmf_loss` of a stack of candidates (B, K, K + 1) against distributions padded into rows
    (zeros past each k, one target stack per candidate or one for all): the same sum per candidate, no loop."""
    tokens = (pmfs @ lengths) / (targets @ lengths)
    return ((pmfs - targets) ** 2).sum(axis=(1, 2)) + ((tokens - 1.0) ** 2).sum(axis=1)


def _hidden_from(x: np.ndarray, S: int) -> tuple[np.ndarray, np.ndarray]:
    """Parameter vectors (B, S + S (S - 1)) -> alphas (B, S) and transition matrices (B, S, S)."""
    alphas = _sigmoid(x[:, :S])
    logits = np.concatenate([x[:, S:].reshape(-1, S, S - 1), np.zeros((len(x), S, 1))], axis=2)  # last column 0
    T = np.exp(logits - logits.max(axis=2, keepdims=True))
    T = T / T.sum(axis=2, keepdims=True)
    return alphas, T * (1 - S * MIN_TRANSITION) + MIN_TRANSITION  # every state reachable: one stationary law


def hidden_starts(S: int, rng: np.random.Generator) -> np.ndarray:
    """Three starts (3, S + S (S - 1)) for an S-state hidden chain's fit: easy states above hard ones, sticky
    transitions; the first fixed, the other two drawn from `rng`."""
    starts = []
    for i in range(3):
        spread = np.linspace(0.97, 0.15, S) if i == 0 else np.sort(rng.uniform(0.05, 0.99, S))[::-1]
        stick = 0.85 if i == 0 else rng.uniform(0.6, 0.97)
        off = (1 - stick) / (S - 1)
        logits = np.zeros((S, S - 1))  # log(T[s, j] / T[s, S - 1]) for j < S - 1
        for s in range(S):
            for j in range(S - 1):
                logits[s, j] = np.log((stick if j == s else off) / (stick if s == S - 1 else off))
        starts.append(np.concatenate([[_logit(a) for a in spread], logits.ravel()]))
    return np.array(starts)


def fit_hidden(targets: Mapping[int, np.ndarray], S: int, mean_alpha: float,
               rng: np.random.Generator) -> HiddenChain:
    """The S-state hidden chain whose step distributions best match `targets`, from several starts (easy states
    above the mean alpha, hard ones below, sticky transitions), run side by side (`nelder_mead_many`)."""
    return fit_hidden_many([(targets, hidden_starts(S, rng))], S)[0]


def fit_hidden_many(problems: Sequence[tuple[Mapping[int, np.ndarray], np.ndarray]], S: int) -> list[HiddenChain]:
    """`fit_hidden` of several target sets (the same ks), each from its own starts, in one lockstep run of every
    start (`nelder_mead_many` with ``by_start``): each start takes the path it takes alone, so each fit is the one
    it would be alone, while an evaluation's cost - numpy's per-call overhead - is shared. Cross-validation's six
    fits of a 3-state chain cost about what one does (the first `fit:` answered in 2.5 s, most of it these fits
    one after the other)."""
    ks = sorted(problems[0][0])
    if any(sorted(t) != ks for t, _ in problems):
        raise ValueError("fit_hidden_many: every problem needs the same ks")
    rows = np.asarray(ks) - 1  # each target's row of `hidden_chain_pmf_matrix`
    targets = np.zeros((len(problems), len(ks), ks[-1] + 1))
    for p, (t, _) in enumerate(problems):
        for i, k in enumerate(ks):
            targets[p, i, :k + 1] = t[k]
    lengths = np.arange(1, ks[-1] + 2, dtype=float)
    starts = np.concatenate([st for _, st in problems])
    owner = np.repeat(np.arange(len(problems)), [len(st) for _, st in problems])  # each start's problem

    def loss(xs: np.ndarray, start: np.ndarray) -> np.ndarray:
        a, T = _hidden_from(xs, S)
        return matrix_loss(hidden_chain_pmf_stack(a, T, ks[-1])[:, rows], targets[owner[start]], lengths)

    ends = nelder_mead_many(loss, starts, step=0.6, iters=150 * S * S, by_start=True)
    ends = nelder_mead_many(loss, np.array([x for x, _ in ends]), step=0.15, iters=100 * S * S,  # a restart:
                            by_start=True)  # Nelder-Mead stalls otherwise
    out = []
    for p in range(len(problems)):
        mine = [ends[i] for i in np.flatnonzero(owner == p)]
        x = min(mine, key=lambda end: end[1])[0]  # the first start wins ties
        alphas, T = (v[0] for v in _hidden_from(x[None], S))
        order = np.argsort(-alphas)  # easiest state first
        alphas, T = alphas[order], T[np.ix_(order, order)]
        if S == 2:
            out.append(MarkovAcceptance(float(alphas[0]), float(alphas[1]), float(T[0, 1]), float(T[1, 0])))
        else:
            out.append(HiddenStateAcceptance(tuple(float(a) for a in alphas),
                                             tuple(tuple(float(q) for q in r) for r in T)))
    return out


