"""Where a real decode step's time goes against the passes the calibration times alone (built-in pair).

The H200's third lease (2026-12-04) validated the built-in pair's chains 7-13 % under their measured speed-up with
each chain step priced within 5 %: the plain step (the speed-up's denominator) was priced ~10 % short (1.30 ms
measured at batch 1, 1.16-1.20 priced), and the served stream's `off` steps 23-31 % short. This times, on one engine
with CUDA graphs, at a few batches:

- alone, as the calibration times them: the target's pass with its draw (`RealEngine.calibrated_pass`), its
  forward only, and the draw only (`calibrate.engine_overheads.timed_alone`);
- real plain and k = 4 steps (`RealEngine.step`, no draft sync), their shapes captured first: each phase (CUDA
  events), the target's forward inside the step (`StepRecord.verify_pass_s`), the phases' sum and the wall time from
  the call to the step's host read (the host's work outside the phases: building inputs before the first kernel is
  launched, the host read and the bookkeeping after it).

    python benchmarks/gpu_steps.py [--device cuda] [--batches 1,8,64] [--profile PROFILE.json]

With `--profile`, each plain line ends with what that profile prices for the step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()

    import torch

    from calibrate.timing import Timer
    from engine.builtin import encode, load_pair, prompts
    from engine.pass_runner import make_runner
    from engine.rejection import distribution, sample
    from engine.speculative import Decoding, RealEngine

    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    cost = None
    dtype = "bf16" if device.type == "cuda" else "fp32"
    if args.profile:
        from scenarios.profile import load_profile
        from simulator import SpecsimError
        try:
            profile = load_profile(args.profile)
        except SpecsimError as e:
            sys.exit(f"gpu_steps.py: {e}")
        cost, spec, dtype = profile.cost_model(), profile.target, profile.dtype
    target, draft = load_pair(expanded=True, dtype=dtype, max_seq_len=320, device=device)
    engine = RealEngine(target, draft, make_runner(device))
    timer = Timer(device)
    text = [t for p in prompts("heldout") for t in encode(p)]
    gen = torch.Generator(device=device).manual_seed(0)

    def ms(xs: list[float]) -> str:
        return f"{1e3 * statistics.median(xs):7.3f} ms [{1e3 * min(xs):.3f}, {1e3 * max(xs):.3f}]"

    print(f"torch {torch.__version__}, {device}, built-in pair {target.dtype}, {engine.runner.mode}")
    for b in [int(x) for x in args.batches.split(",")]:
        context = 120
        with torch.inference_mode():
            logits = torch.randn(b, 1, engine.target.cfg.vocab_size, device=device, dtype=target.output.weight.dtype)
            runs = {"pass + draw": engine.calibrated_pass(engine.target, b, 1, context),
                    "forward": engine.calibrated_pass(engine.target, b, 1, context, draw=False),
                    "draw": lambda logits=logits: sample(distribution(logits[:, -1], 1.0), None)}
            alone = {label: timer.measure(fn, warmup=2, min_reps=20, max_reps=50, max_time_s=2.0)
                     for label, fn in runs.items()}
        for label, t in alone.items():
            print(f"batch {b:3d} alone  {label:<12} {1e3 * t.median_s:7.3f} ms (IQR {1e3 * t.iqr_s:.3f})")
        for how in (Decoding(k=0), Decoding(k=4)):
            batch = engine.open_batch(b, how.k > 0)
            rec: dict[str, list[float]] = {k: [] for k in ("draft", "verify", "accept", "forward", "sum", "wall")}
            with torch.inference_mode():
                engine.join(batch, [text[i * 37 % 4000:i * 37 % 4000 + 96] for i in range(b)], how.k > 0, 1.0, gen)
                for i in range(args.steps):
                    sync()
                    t0 = time.perf_counter()
                    record = engine.step(batch, how, gen, None, index=i)
                    wall = time.perf_counter() - t0
                    if i < 3 or record.captured:
                        continue
                    p = record.phases
                    for k, v in (("draft", p.draft_s), ("verify", p.verify_s), ("accept", p.accept_s),
                                 ("forward", record.verify_pass_s or 0.0), ("sum", p.total_s), ("wall", wall)):
                        rec[k].append(v)
            line = "  ".join(f"{k} {ms(v)}" for k, v in rec.items())
            priced = ""
            if cost is not None and how.k == 0:
                ctx = 96 + args.steps // 2
                priced = f"  priced {1e3 * cost.plain_step_s(spec, b, ctx):.3f} ms"
            print(f"batch {b:3d} k={how.k}  {line}{priced}")


if __name__ == "__main__":
    main()
