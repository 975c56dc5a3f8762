"""specsim's own n-gram drafting (prompt lookup, `engine.speculative.Ngram`) measured: the host time of one step's
lookups over batch x context, fitted as `simulator.drafts.HostCost` with its error on held-out points, and how
often the lookup proposes and how much of a proposal the target accepts, on prompts that repeat themselves.

The lookup scans each sequence's text on the host, so its time grows with the batch and, where no recent match
stops the scan early, with the context; it is timed on real text (standard-library source, which repeats itself
as code does), as the engine runs it in a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from calibrate.timing import Effort, Timer
from engine.model import Decoder
from engine.speculative import Decoding, Ngram, RealEngine
from simulator.drafts import HostCost

K_LOOKUP = 4  # the draft length the lookup is timed and measured at (its cost hardly depends on it)
HOST_BATCHES = (1, 4, 16, 64)
HOST_CONTEXTS = (128, 512, 2048)


def repeating(prompt: Sequence[int]) -> list[int]:
    """A prompt that repeats itself: the text, a newline, and its first half again (what prompt lookup is for:
    an edit, a summary, code that restates what it was given). Its continuation may go on copying."""
    p = list(prompt)
    return p + [10] + p[:len(p) // 2]


def measure_host(texts: Sequence[Sequence[int]], timer: Timer, effort: Effort,
                 batches: Sequence[int] = HOST_BATCHES, contexts: Sequence[int] = HOST_CONTEXTS,
                 heldout: int = 3, seed: int = 0) -> dict[str, Any]:
    """One step's lookups for `batch` sequences of `context` tokens of real text each, timed at every grid point;
    a fixed cost, a cost per sequence and one per sequence and context token fitted by non-negative least squares
    on relative error to all but `heldout` random points, which it then predicts. Where a lookup stops depends on
    the text (a recent match ends the scan early, none scans it all): a batch smaller than the texts is timed
    group by group over all of them (each group's median), and the point is the mean over the groups, the time a
    step of that batch takes on average."""
    points = []
    n = len(texts)
    for b in batches:
        for c in contexts:
            cut = [list(t[:c]) for t in texts]
            groups = [[cut[(g * b + i) % n] for i in range(b)] for g in range(max(1, n // b))]
            medians, spreads = [], []
            for group in groups:
                def step(group: list[list[int]] = group) -> list[list[int]]:
                    return [Ngram().propose(h, K_LOOKUP) for h in group]

                t = timer.measure(step, warmup=1, min_reps=effort.min_samples, max_reps=effort.max_samples,
                                  max_time_s=effort.per_point_s / len(groups))
                medians.append(t.median_s)
                spreads.append(t.iqr_s)
            points.append({"batch": b, "context": c, "median_s": float(np.mean(medians)),
                           "iqr_s": float(np.mean(spreads)), "groups": len(groups)})
    rng = np.random.default_rng(seed)
    test = set(rng.choice(len(points), size=min(heldout, len(points) - 3), replace=False).tolist())
    train = [p for i, p in enumerate(points) if i not in test]
    host = fit_host(train)
    errors = [float(host.at(p["batch"], p["context"]) / p["median_s"] - 1.0)
              for i, p in enumerate(points) if i in test]
    return {"fixed_s": host.fixed_s, "per_sequence_s": host.per_sequence_s,
            "per_context_token_s": host.per_context_token_s, "k": K_LOOKUP, "points": points,
            "heldout": {"points": sorted(test), "rel_error": errors,
                        "median_abs_err": float(np.median(np.abs(errors))) if errors else None}}


def fit_host(points: Sequence[dict[str, Any]]) -> HostCost:
    """t = fixed + batch (per_sequence + context per_token), each term >= 0, least squares on relative error
    (projected gradient: three non-negative unknowns)."""
    A = np.array([[1.0, p["batch"], p["batch"] * p["context"]] for p in points])
    t = np.array([p["median_s"] for p in points])
    A = A / t[:, None]
    scale = np.abs(A).max(axis=0)
    A_s = A / scale
    x = np.zeros(3)
    step = 1.0 / np.linalg.norm(A_s.T @ A_s, 2)
    for _ in range(20000):
        x = np.maximum(x - step * (A_s.T @ (A_s @ x - 1.0)), 0.0)
    fixed, per_seq, per_tok = (x / scale).tolist()
    return HostCost(fixed, per_seq, per_tok, "measured: specsim's own n-gram lookup on this machine")


@torch.inference_mode()
def measure_ngram_acceptance(target: Decoder, prompts: Sequence[Sequence[int]], new_tokens: int,
                             temperature: float = 1.0, seed: int = 0, k: int = K_LOOKUP) -> dict[str, Any]:
    """Prompt lookup run for real on `prompts` (made to repeat themselves) with chains of `k`: per sequence and
    step, whether the lookup proposed, and how many of its tokens the target accepted. A proposal is a point mass,
    so a drafted token is accepted with the target's own probability of it; P(A >= i | proposed) for i <= k does
    not depend on k, and serves chains of any length up to it. Every sequence decodes the same steps, until the
    first has `new_tokens` (as in a continuously batched engine): decoding until the slowest had them let one that
    copies run ahead by up to k tokens a step, a cache of new_tokens x (k + 1) past its prompt for positions
    nothing else reaches."""
    gen = torch.Generator(device=target.device).manual_seed(seed)
    run = RealEngine(target).generate([repeating(p) for p in prompts], new_tokens,
                                      Decoding(k=k, temperature=temperature, drafter="ngram"), gen, until="first")
    proposed = [(a, t) for s in run.steps for a, t in zip(s.accepted, s.tried)]
    steps = len(proposed)
    with_proposal = [a for a, t in proposed if t > 0]
    n = max(len(with_proposal), 1)
    survival = [sum(a >= i for a in with_proposal) / n for i in range(1, k + 1)]
    conditional = [s / prev if prev > 0 else 0.0 for s, prev in zip(survival, [1.0] + survival[:-1])]
    return {"k": k, "temperature": temperature, "prompts": len(prompts), "prompt_form": "repeating",
            "steps": steps, "proposal_rate": len(with_proposal) / max(steps, 1),
            "survival_given_proposal": survival, "conditional_alpha": conditional}
