"""llama-server's published GPU runs (scenarios/published/, engine = "llama.cpp", all held out) predicted through the
model with the llama.cpp preset as shipped (`specsim predict --engine llama.cpp` on the point's GPU, target, format,
draft length, streams and its own acceptance length): each point's error, each source's median and worst, and
whether speculation's verdict (gain or loss) lands on the measured side of 1.0 by stream count. Nothing is fitted.

    python benchmarks/llama_cpp_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.published import error_pct, price, through_the_model  # noqa: E402
from scenarios.published import load_corpus  # noqa: E402

TIE = 0.05  # within 5 % of 1.0 a run neither gains nor loses (the sources' own spread between passes is ~5 %)


def verdict(speedup: float) -> str:
    return "tie" if abs(speedup - 1.0) <= TIE else "gain" if speedup > 1.0 else "loss"


def main() -> int:
    by_source: dict[str, list[float]] = {}
    print(f"{'source':28s} {'gpu':12s} {'tp':>2s} {'k':>2s} {'streams':>7s} {'AL':>5s} {'measured':>8s} "
          f"{'predicted':>9s} {'err%':>6s}  verdict")
    for p in load_corpus():
        if p.engine != "llama.cpp":
            continue
        q = price(p)
        pred = through_the_model(q)
        err = error_pct(pred, q.measured)
        by_source.setdefault(p.source.id, []).append(err)
        same = verdict(pred) == verdict(q.measured)
        print(f"{p.source.id:28s} {p.gpu:12s} {p.tp or 1:2d} {p.k:2d} {q.batch:7d} {q.acceptance_length:5.2f} "
              f"{q.measured:7.2f}x {pred:8.2f}x {err:+6.1f}  measured {verdict(q.measured)}, predicted {verdict(pred)}"
              + ("" if same else " (WRONG)"))
    every = [abs(e) for errs in by_source.values() for e in errs]
    for sid, errs in by_source.items():
        a = np.abs(errs)
        print(f"  {sid:28s} {len(a)} points: median |error| {np.median(a):.1f} %, worst {a.max():.1f} %")
    print(f"all {len(every)} points: median |error| {np.median(every):.1f} %, worst {max(every):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
