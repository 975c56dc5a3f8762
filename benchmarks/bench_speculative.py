"""Real speculative decoding with the built-in (expanded, bf16) pair on this machine, against plain decoding:
batch 1, k = 1..6, each run paired with a plain run (back to back, counterbalanced), repeated; medians and spreads.
Outside the test suite.

    python benchmarks/bench_speculative.py [--repeats 7] [--tokens 96] [--profile FILE]

Beside the measured tokens per target pass it prints the i.i.d. formula with the measured alpha and the markov
model's prediction, from the calibration profile's acceptance (the latest profile of this device by default).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from calibrate.paired_runs import Config, measure
from engine.builtin import encode, load_pair, prompts
from engine.speculative import RealEngine
from scenarios.files import cache_dir
from scenarios.host import local_identities
from scenarios.profile import latest_profile, load_profile


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--profile", type=Path, default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    target, draft = load_pair(expanded=True, dtype="bf16", max_seq_len=512)
    engine = RealEngine(target, draft)
    held = [encode(p) for p in prompts("heldout")]
    configs = [Config(1, k) for k in range(1, 7)]
    rows = measure(engine, held, configs, a.tokens, a.repeats, temperature=1.0, seed=0)
    path = a.profile or latest_profile(local_identities())
    acc = load_profile(path).acceptance if path else None
    print(f"built-in pair, target expanded to 85 M params (bf16), batch 1, {a.tokens} tokens, {a.repeats} repeats "
          f"each paired with a plain run; profile {path or '(none in ' + str(cache_dir()) + ')'}")
    print("  k  speed-up median [min, max]   tokens/pass measured  iid(alpha)  markov  positional  "
          "step ms  (draft / verify / accept)")
    for r in rows:
        k = r.k
        preds = ""
        if acc:
            variants = ("iid", "markov", "positional")
            preds = "  ".join(f"{acc.model(v).expected_tokens(k):6.2f}" for v in variants)
        s, t = r.speedup, r.tokens_per_pass
        print(f"  {k}  {s.median:.2f} [{s.min:.2f}, {s.max:.2f}]              {t.median:.2f}"
              f"            {preds}   {1e3 * r.step_s.median:.1f}  ({1e3 * r.draft_s.median:.1f} / "
              f"{1e3 * r.verify_s.median:.1f} / {1e3 * r.accept_s.median:.2f})")
    print(f"  plain decoding step: {1e3 * rows[0].plain_step_s.median:.1f} ms median")
    if acc:
        print(f"  measured alpha {acc.alpha:.3f} on the calibration prompts; held-out prompts here")


if __name__ == "__main__":
    main()
