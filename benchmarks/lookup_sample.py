"""How well the calibration's prompts stand for the held-out ones under prompt lookup: transformers' own
`PromptLookupCandidateGenerator` along the target's greedy text from prompts that repeat themselves (as
`specsim calibrate --engine transformers` measures it), tokens per step at K = 2, 4, 6, 8 pooled over the texts and
for the median text, on the first 12, 24, 32, 48 and all 64 calibration prompts and on the 8 held-out prompts the
validation uses. Greedy and deterministic: the figures depend on the pair, not on the machine.

    specsim export --out pair/ && python benchmarks/lookup_sample.py pair/ [--tokens 64]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.engine_steps import replay  # noqa: E402
from calibrate.ngram import repeating  # noqa: E402
from calibrate.transformers_engine import greedy_texts, load_hf, lookup_candidates  # noqa: E402
from engine.builtin import encode, prompts  # noqa: E402
from simulator import SpecsimError  # noqa: E402


def steps_per_text(texts: list[tuple[list[int], list[int]]], K: int, n: int) -> list[list[tuple[int, int]]]:
    import torch

    finder, out = lookup_candidates(K), []
    for prompt, text in texts:
        seq = torch.tensor([prompt + text])
        proposed, accepted = [], []
        for t in range(n - 1):
            ids = seq[:, :len(prompt) + t]
            drafted = finder.get_candidates(ids)[0][0, ids.shape[1]:].tolist()
            run = 0
            while run < len(drafted) and run < len(text) - t and drafted[run] == text[t + run]:
                run += 1
            proposed.append(len(drafted))
            accepted.append(run)
        out.append(replay([proposed], [accepted], n))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pair", type=Path, help="the exported pair (specsim export --out DIR)")
    ap.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt (the quick calibration's 64)")
    a = ap.parse_args()
    try:
        target = load_hf(a.pair / "target", "target")
    except SpecsimError as e:
        print(f"lookup_sample.py: {e}", file=sys.stderr)
        return 2
    sets = {"calibration": [repeating(encode(p)) for p in prompts("calibration")],
            "held-out": [repeating(encode(p)) for p in prompts("heldout")[:8]]}
    texts = {name: list(zip(ps, greedy_texts(target, ps, a.tokens, lambda: None))) for name, ps in sets.items()}
    cuts = (12, 24, 32, 48, len(texts["calibration"]))
    print("tokens per step, pooled / median text" + "".join(f"  | calib. first {c:>2}" for c in cuts)
          + "  | held-out 8")
    for K in (2, 4, 6, 8):
        per = {name: steps_per_text(t, K, a.tokens) for name, t in texts.items()}

        def both(steps: list[list[tuple[int, int]]]) -> str:
            pooled = np.mean([acc + 1 for s in steps for _, acc in s])
            median = np.median([np.mean([acc + 1 for _, acc in s]) for s in steps])
            return f"{pooled:.2f} / {median:.2f}"

        print(f"K = {K}{'':<32}" + "".join(f"  | {both(per['calibration'][:c]):>16}" for c in cuts)
              + f"  | {both(per['held-out']):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
