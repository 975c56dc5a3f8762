"""llama-server's steps piece by piece against a llama.cpp profile: which slots are busy decides what a step costs.

    python benchmarks/llama_slots.py PROFILE.json pair/ [--rounds 2]

Needs a built llama.cpp (`bash benchmarks/build_llama_cpp.sh`, or $SPECSIM_LLAMA_CPP) and the exported pair
(`specsim export --out pair/`); PROFILE from `specsim calibrate --engine llama.cpp`. Prints:

1. plain steps with requests pinned to slots (``id_slot``), per step: a batch over slots 0 and 2 runs two passes
   where slots 0 and 1 run one (llama.cpp's non-unified KV cache cuts a batch into a micro-batch per run of
   consecutive sequence ids), against the profile priced without and with slot runs (`StepCosts.over_runs`);
2. B requests of one length sent together, plain and drafting k = 4 (per step: decode time over the steps
   llama-server counts, drafted / k), against the profile's step.

Each figure is the median over the requests of `--rounds` rounds. The machine is shared: run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.llama_cpp import Server, gguf_of, threads  # noqa: E402
from engine.builtin import encode, prompts  # noqa: E402
from scenarios.profile import load_profile  # noqa: E402
from simulator.scheduler import slot_runs  # noqa: E402
from simulator.step_costs import StepCosts  # noqa: E402
from simulator.sweep import Candidate  # noqa: E402

PINNED = ((0,), (0, 1), (0, 2), (0, 3), (1, 2), (0, 1, 2), (0, 1, 3), (0, 2, 3), (0, 1, 2, 3))
NEW_TOKENS = 64


def together(server: Server, batch: list[list[int]], k: int, slots: tuple[int, ...] | None = None) -> list[float]:
    """Seconds per step of each request when `batch` is sent at once (on `slots`, if given)."""
    out: list[float] = [0.0] * len(batch)

    def one(j: int) -> None:
        t = server.complete(batch[j], NEW_TOKENS, None if slots is None else slots[j])["timings"]
        steps = t["draft_n"] / k if k and t.get("draft_n") else t["predicted_n"] - 1
        out[j] = t["predicted_ms"] * 1e-3 / steps

    workers = [threading.Thread(target=one, args=(j,)) for j in range(len(batch))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("pair")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    profile = load_profile(a.profile)
    costs = StepCosts(profile.cost_model(), profile.target, profile.draft)
    target, draft = gguf_of(Path(a.pair) / "target", "target"), gguf_of(Path(a.pair) / "draft", "draft")
    calib = [encode(p) for p in prompts("calibration")[:16]]
    length = min(len(p) for p in calib)
    cut = [list(p[:length]) for p in calib]
    context = length + NEW_TOKENS // 2
    n_threads = threads(profile)
    plain = Candidate(0)
    print(f"llama-server, 4 slots, {n_threads} threads; prompts of {length} tokens, {NEW_TOKENS} new; "
          f"priced at context {context}")
    print("\n1. plain steps, requests pinned to slots      measured    priced: one pass / a pass per run")
    with Server(target, ctx=4 * (length + NEW_TOKENS + 64), slots=4, threads=n_threads) as server:
        server.complete(cut[0], 8)
        for slots in PINNED:
            per = [s for r in range(a.rounds) for s in together(server, cut[r:r + len(slots)], 0, slots)]
            runs = slot_runs(np.array(slots))
            split = costs.over_runs(runs, plain, lambda b: costs.decode_s(b, context, plain))
            print(f"   slots {str(slots):14s} runs {str(runs):10s} {1e3 * np.median(per):6.1f} ms   "
                  f"{1e3 * costs.decode_s(len(slots), context, plain):6.1f} / {1e3 * split:6.1f} ms")
    print("\n2. B requests together (one run of slots)     measured    priced")
    for k in (0, 4):
        cand = Candidate(k)
        for b in (1, 2, 4):
            with Server(target, draft if k else None, k, ctx=b * (length + NEW_TOKENS + 64), slots=b,
                        threads=n_threads) as server:
                server.complete(cut[0], 8)
                per = [s for r in range(a.rounds) for s in together(server, cut[r * b:(r + 1) * b], k)]
            print(f"   k = {k}, B = {b}                              {1e3 * np.median(per):6.1f} ms   "
                  f"{1e3 * costs.decode_s(b, context, cand):6.1f} ms")


if __name__ == "__main__":
    from simulator import SpecsimError

    try:
        main()
    except SpecsimError as e:
        sys.exit(f"llama_slots.py: {e}")
