"""How many experts a pass wakes under the routing AIConfigurator measured its fused-MoE kernels with.

AIConfigurator's collectors (collector/*/collect_moe.py, `power_law_logits_v3`) draw each expert's load for a pass of
T tokens x top-k independently from a bounded power law, density ~ x^-alpha on [1, 0.8 T] (on [0.01, 2] when T k <=
E), scale the loads to sum to T k and round them: an expert whose share rounds to zero is not read. The database
holds alpha = 1.01 (DeepSeek's family in AIConfigurator's models) and 1.2 (Qwen3's), beside balanced routing.

`power_law_touched` is the expected number of experts with a load >= 1 under that draw: a seeded Monte Carlo (the
same numbers every call), at whole token counts, linear between them. It is far below uniform routing's
E (1 - (1 - k / E)^T) between a few and a few hundred tokens (Qwen3-30B-A3B, 128 experts top-8, at 16 tokens: 50
experts against 82) and never reaches all E.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

DRAWS = 256  # passes drawn per token count: the mean is known to ~1 %
SEED = 0


def _loads(n_experts: int, topk: int, tokens: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """(DRAWS, E) expert loads of passes of `tokens` tokens, drawn as AIConfigurator's collectors draw them."""
    E, total = n_experts, tokens * topk
    lo, hi = (1.0, 0.8 * tokens) if total > E else (0.01, 2.0)
    hi = max(hi, lo * (1 + 1e-9))
    u = rng.random((DRAWS, E))
    a = 1.0 - alpha
    x = ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)
    counts = np.rint(x / x.sum(axis=1, keepdims=True) * total).astype(np.int64)
    # the rounding's remainder goes to the busiest experts (or comes off the idlest loaded ones), as the collector's
    delta = total - counts.sum(axis=1)
    order = np.argsort(-counts, axis=1, kind="stable")
    for d in range(DRAWS):
        if delta[d] > 0:
            np.add.at(counts[d], order[d, np.arange(delta[d]) % E], 1)
        elif delta[d] < 0:
            loaded = order[d][counts[d, order[d]] > 0][::-1]
            np.add.at(counts[d], loaded[np.arange(-delta[d]) % len(loaded)], -1)
    return counts


@lru_cache(maxsize=4096)
def _touched_at(n_experts: int, topk: int, tokens: int, alpha: float) -> float:
    if tokens <= 0:
        return 0.0
    rng = np.random.default_rng([SEED, n_experts, topk, tokens, int(round(alpha * 1000))])
    return float((_loads(n_experts, topk, tokens, alpha, rng) > 0).sum(axis=1).mean())


def power_law_touched(n_experts: int, topk: int, tokens: np.ndarray | float, alpha: float) -> np.ndarray:
    """Expected distinct experts one MoE layer reads for `tokens` tokens (fractional: linear between whole counts)
    under AIConfigurator's power-law routing of exponent `alpha` (> 1)."""
    if alpha <= 1.0:
        raise ValueError(f"a power-law routing exponent must be > 1, got {alpha:g}")
    t = np.asarray(tokens, dtype=float)
    lo = np.floor(t).astype(np.int64)
    w = t - lo
    flat_lo, flat_w = lo.ravel(), w.ravel()
    out = np.empty(flat_lo.shape)
    for i, (a, f) in enumerate(zip(flat_lo.tolist(), flat_w.tolist())):
        y0 = _touched_at(n_experts, topk, a, alpha)
        out[i] = y0 if f == 0 else y0 + f * (_touched_at(n_experts, topk, a + 1, alpha) - y0)
    return out.reshape(t.shape)
