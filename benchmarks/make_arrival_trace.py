"""Make the sample arrival trace in scenarios/samples/ that `validate --serving --arrivals trace:FILE` and `simulate`
read: arrival_s, prompt_tokens, output_tokens per request.

    python benchmarks/make_arrival_trace.py

It is *made by specsim*, not recorded from a service: a Markov-modulated Poisson process of 240 requests at a mean
of 1 request/s (a calm state at 0.4 req/s and a burst state at 4 req/s, left at rates 0.08/s and 0.4/s: bursts take
a sixth of the time and two thirds of the requests, and the gaps' coefficient of variation is about 2, where
Poisson's is 1 — the burstiness production traces such as Azure's LLM inference trace show), seeded. Lengths suit
the built-in pair (trained on 256-token windows): prompts 64..128 and outputs 16..80 tokens, uniform.
`validate --serving --rate R` scales the gaps to a mean of R req/s; without --rate the trace keeps its own clock.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "scenarios" / "samples" / "arrivals-bursty.csv"
RATES = {"calm": 0.4, "burst": 4.0}  # requests/s in each state
LEAVE = {"calm": 0.08, "burst": 0.4}  # state changes/s


def arrivals(n: int, rng: np.random.Generator) -> np.ndarray:
    t, state, out = 0.0, "calm", []
    while len(out) < n:
        rate, leave = RATES[state], LEAVE[state]
        gap = rng.exponential(1.0 / (rate + leave))
        t += gap
        if rng.random() < rate / (rate + leave):
            out.append(t)
        else:
            state = "burst" if state == "calm" else "calm"
    a = np.array(out)
    return a * (len(a) - 1) / (a[-1] - a[0])  # a mean rate of 1 request/s


def main() -> None:
    rng = np.random.default_rng(20261201)
    n = 240
    a = arrivals(n, rng)
    prompts, outputs = rng.integers(64, 129, n), rng.integers(16, 81, n)
    gaps = np.diff(a)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["arrival_s", "prompt_tokens", "output_tokens"])
        for row in zip(a, prompts, outputs):
            w.writerow([f"{row[0]:.4f}", int(row[1]), int(row[2])])
    print(f"wrote {OUT}: {n} requests over {a[-1] - a[0]:.0f} s, gaps' coefficient of variation "
          f"{gaps.std() / gaps.mean():.2f}")


if __name__ == "__main__":
    main()
