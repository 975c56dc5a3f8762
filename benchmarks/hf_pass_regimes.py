"""How much a transformers verify pass's cost moves on this machine from one stretch of time to the next, relative to
a one-token pass: the floor under `validate --engine transformers` (its predictions come from passes timed in the
calibration's minute or two, its measurements from runs spread over ten). Outside the test suite.

One process times the exported target's cached passes of 1..9 new tokens at one context, in interleaved rounds (a
fresh random order each round), for `--windows` stretches of `--seconds` each; per window, each length's median and
its ratio to the one-token pass, then per length the ratio's range over the windows and the within-window standard
error of a median (1.25 sd / sqrt n), so that a move between windows larger than the error is the machine's, not
the sample's.

    specsim export --out pair/ --format hf
    python benchmarks/hf_pass_regimes.py pair/ [--windows 8] [--seconds 15] [--context 192]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from calibrate.transformers_engine import load_hf, pass_step


def window(steps: dict[int, object], seconds: float, rng: np.random.Generator) -> dict[int, np.ndarray]:
    samples: dict[int, list[float]] = {n: [] for n in steps}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for n in rng.permutation(list(steps)):
            t0 = time.perf_counter()
            steps[n]()  # type: ignore[operator]
            samples[n].append(time.perf_counter() - t0)
    return {n: np.array(s) for n, s in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pair", type=Path, help="the folder `specsim export --format hf` wrote")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--context", type=int, default=192)
    ap.add_argument("--max-tokens", type=int, default=9)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    m = load_hf(a.pair / "target", "target")
    gen = torch.Generator().manual_seed(0)
    steps = {n: pass_step(m, n, a.context, gen) for n in range(1, a.max_tokens + 1)}
    for f in steps.values():  # warm up: the first calls allocate
        f()
        f()
    rng = np.random.default_rng(0)
    ratios, errors = [], []
    print(f"{m.spec.name}: cached passes of n new tokens at context {a.context}, {a.windows} windows of "
          f"{a.seconds:g} s; per window the median ms of n = 1 and each n's ratio to it")
    for w in range(a.windows):
        s = window(steps, a.seconds, rng)
        one = float(np.median(s[1]))
        r = [float(np.median(s[n])) / one for n in steps]
        ratios.append(r)
        errors.append([1.25 * float(np.std(s[n])) / np.sqrt(len(s[n])) / float(np.median(s[n])) for n in steps])
        print(f"window {w + 1}: n=1 {1e3 * one:5.1f} ms ({len(s[1])} samples); ratios "
              + " ".join(f"{n}:{x:.2f}" for n, x in zip(steps, r)), flush=True)
    rr, ee = np.array(ratios), np.array(errors)
    print("per n: the ratio's median [min, max] over the windows, and a window median's own error")
    for j, n in enumerate(steps):
        print(f"  n = {n}: {np.median(rr[:, j]):.2f} [{rr[:, j].min():.2f}, {rr[:, j].max():.2f}]  "
              f"(+-{100 * np.median(ee[:, j]):.1f} % per window)")


if __name__ == "__main__":
    main()
