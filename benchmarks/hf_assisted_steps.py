"""Where an assisted step of transformers' `generate` spends its time, against what a profile prices: when
`validate --engine transformers` misses, is it something the calibration leaves out, or the host's speed moving?
Outside the test suite; one process, a few minutes on a 2-core CPU.

1. The target's verification pass inside assisted `generate` (its forward hooked) against the same lengths timed
   alone as the calibration times them (`pass_step`) and alone with the attention mask `generate` passes, in
   interleaved rounds.
2. Per k, an assisted call's steps split into the target's forwards, the draft's forwards and the rest
   (transformers' loop, the assistant's call), against the profile's price of that rest.
3. At `--k`, each held-out prompt's plain and assisted call, the median speed-up against the profile's prediction.

    specsim export --out pair/ --format hf
    specsim calibrate --quick --engine transformers --target pair/target --draft pair/draft --out hf.json
    python benchmarks/hf_assisted_steps.py pair/ --profile hf.json [--k 4] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.transformers_engine import HFModel, crop, generate, load_hf, new_cache  # noqa: E402
from calibrate.transformers_validation import HFRun, predict_call  # noqa: E402
from engine.builtin import encode, prompts  # noqa: E402
from scenarios.profile import load_profile  # noqa: E402
from simulator import SpecsimError  # noqa: E402

NEW_TOKENS = 64


def hook(m: HFModel, record: Any) -> Any:
    """Time every forward of `m` into `record(input_ids, seconds)`; returns the unhooked forward."""
    forward = m.model.forward

    def timed(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        out = forward(*a, **kw)
        record(kw.get("input_ids", a[0] if a else None), time.perf_counter() - t0)
        return out

    m.model.forward = timed
    return forward


def assisted(target: HFModel, draft: HFModel, prompt: list[int], k: int) -> float:
    g = draft.model.generation_config
    g.num_assistant_tokens, g.num_assistant_tokens_schedule, g.assistant_confidence_threshold = k, "constant", 0.0
    return generate(target, prompt, NEW_TOKENS, assistant_model=draft.model)[1]


def alone(target: HFModel, forward: Any, n: int, context: int, mask: bool, gen: torch.Generator) -> Any:
    vocab = target.spec.vocab_size
    cache = new_cache(target)
    forward(torch.randint(0, vocab, (1, context), generator=gen), use_cache=True, past_key_values=cache)
    tokens = torch.randint(0, vocab, (1, n), generator=gen)
    kw = {"attention_mask": torch.ones(1, context + n, dtype=torch.long)} if mask else {}

    def step() -> float:
        crop(cache, context)
        t0 = time.perf_counter()
        forward(input_ids=tokens, past_key_values=cache, use_cache=True, **kw)
        return time.perf_counter() - t0

    return step


def draft_lengths(text: str) -> list[int]:
    """`--ks`: comma-separated draft lengths, each at least 1."""
    try:
        ks = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of draft lengths, e.g. 1,4,5,6") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every draft length must be at least 1")
    return ks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pair", type=Path, help="the folder `specsim export --format hf` wrote")
    ap.add_argument("--profile", type=Path, required=True, help="a profile from calibrate --engine transformers")
    ap.add_argument("--k", type=int, default=4, help="the draft length of parts 1 and 3")
    ap.add_argument("--ks", type=draft_lengths, default=[1, 4, 5, 6], help="the draft lengths of part 2 (1,4,5,6)")
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    for path in (a.pair / "target", a.pair / "draft", a.profile):
        if not path.exists():
            print(f"hf_assisted_steps.py: {path} does not exist (make the pair with specsim export --out "
                  f"{a.pair} --format hf, the profile with specsim calibrate --engine transformers)", file=sys.stderr)
            return 1
    if a.k < 1 or a.rounds < 1:
        ap.error("--k and --rounds must be at least 1")
    try:
        profile = load_profile(a.profile)
    except SpecsimError as e:
        print(f"hf_assisted_steps.py: {e}", file=sys.stderr)
        return 1
    target, draft = load_hf(a.pair / "target", "target"), load_hf(a.pair / "draft", "draft")
    held = [encode(p) for p in prompts("heldout")[:8]]
    torch.set_grad_enabled(False)
    inside: dict[int, list[float]] = defaultdict(list)
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)

    def on_target(ids: Any, s: float) -> None:
        inside[ids.shape[1]].append(s)
        spent["target"] += s
        calls["target"] += 1

    def on_draft(ids: Any, s: float) -> None:
        spent["draft"] += s
        calls["draft"] += 1

    forward = hook(target, on_target)
    hook(draft, on_draft)
    gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    context = len(held[0]) + NEW_TOKENS // 2
    lengths = sorted({1, a.k + 1, a.k + 2})
    steps = {(n, m): alone(target, forward, n, context, m, gen) for n in lengths for m in (False, True)}
    timed_alone: dict[tuple[int, bool], list[float]] = defaultdict(list)
    print(f"1. the target's pass inside assisted generate (k = {a.k}) and alone at context {context}, "
          f"{a.rounds} interleaved rounds", flush=True)
    for _ in range(a.rounds):
        for job in rng.permutation(len(steps) + 1):
            if job == len(steps):
                for p in held[:4]:
                    assisted(target, draft, p, a.k)
            else:
                key = list(steps)[job]
                timed_alone[key] += [steps[key]() for _ in range(12)]
    for n in lengths:
        if inside.get(n):
            print(f"   {n} new tokens: inside {1e3 * statistics.median(inside[n]):.1f} ms (n = {len(inside[n])}), "
                  f"alone {1e3 * statistics.median(timed_alone[(n, False)]):.1f} ms, with generate's mask "
                  f"{1e3 * statistics.median(timed_alone[(n, True)]):.1f} ms")
    loop = profile.acceptance.raw.get("transformers_loop", {}) if profile.acceptance else {}
    priced = 1e3 * (loop.get("target_loop_s", 0.0) + loop.get("draft_call_s", 0.0))
    print(f"2. an assisted step's parts (8 prompts, {NEW_TOKENS} tokens); the profile prices the rest at "
          f"{priced:.2f} ms + {1e3 * loop.get('draft_loop_s', 0.0):.2f} ms a drafted token", flush=True)
    for k in a.ks:
        spent.clear()
        calls.clear()
        total = sum(assisted(target, draft, p, k) for p in held)
        n = calls["target"]
        rest = total - spent["target"] - spent["draft"]
        print(f"   k = {k}: {NEW_TOKENS * len(held) / n:.2f} tokens a step; target {1e3 * spent['target'] / n:.2f} ms, "
              f"draft {1e3 * spent['draft'] / n:.2f} ms ({calls['draft'] / n:.1f} passes), "
              f"rest {1e3 * rest / n:.2f} ms a step", flush=True)
    print(f"3. k = {a.k}, each held-out prompt alone: plain and assisted call, speed-up against the profile's")
    measured, predicted = [], []
    for i, p in enumerate(held):
        plain = generate(target, p, NEW_TOKENS)[1]
        spec = assisted(target, draft, p, a.k)
        pred = predict_call(profile, None, len(p), NEW_TOKENS) / predict_call(profile, HFRun("assisted", a.k), len(p),
                                                                              NEW_TOKENS)
        measured.append(plain / spec)
        predicted.append(pred)
        print(f"   prompt {i}: plain {plain:.3f} s, assisted {spec:.3f} s, {plain / spec:.2f}x (predicted {pred:.2f}x)")
    m, q = float(np.median(measured)), float(np.median(predicted))
    print(f"   median {m:.2f}x measured, {q:.2f}x predicted: {100 * (q / m - 1):+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
