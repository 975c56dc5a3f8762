"""Where a served stream's time goes on a GPU: the served engine's prefill (`RealEngine.join`, eager) at the prompt
lengths a stream meets, and its decode steps' wall time against their passes.

The H200 run of 2026-12-04 (second lease) measured a served stream of the built-in pair at TPOT p50 10.1 ms where
the simulator, from passes of 1.2-1.4 ms, said 1.3 ms: its report put the prefills 97 % under their measured time.
This times, on the device:

1. an eager `join` of one prompt, lengths drawn from 64..128 as the stream's are (every join a new shape), then one
   length repeated, each with SDPA's default backends and with the cuDNN backend off (a backend that plans per
   shape pays its planning at every new length); then the engine's join on CUDA graphs (padded to a multiple of
   PREFILL_BUCKET and replayed), capturing and then replayed;
2. plain and k = 4 decode steps of a batch of 8, wall per step, against the same passes timed alone by the runner.

    python benchmarks/gpu_prefill.py [--device cuda] [--joins 24]

Prints one line per variant: the median and the range of the join's wall time, and the first join's.
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
    ap.add_argument("--joins", type=int, default=24)
    args = ap.parse_args()

    import numpy as np
    import torch

    from engine.builtin import encode, load_pair, prompts
    from engine.pass_runner import make_runner
    from engine.speculative import Decoding, RealEngine

    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    target, draft = load_pair(expanded=True, dtype="bf16" if device.type == "cuda" else "fp32", max_seq_len=320,
                              device=device)
    engines = {"eager": RealEngine(target, draft, make_runner(device, eager=True)),
               "graphs": RealEngine(target, draft, make_runner(device))}
    text = [t for p in prompts("heldout") for t in encode(p)]
    rng = np.random.default_rng(0)
    drawn = rng.integers(64, 129, args.joins).tolist()
    gen = torch.Generator(device=device).manual_seed(0)

    def joins(engine: RealEngine, lengths: list[int], use_draft: bool) -> list[float]:
        batch = engine.open_batch(16, use_draft)
        out = []
        with torch.inference_mode():
            for n in lengths:
                sync()
                t0 = time.perf_counter()
                engine.join(batch, [text[:n]], use_draft, 1.0, gen)
                sync()
                out.append(time.perf_counter() - t0)
                engine.leave(batch, [0])
        return out

    def line(label: str, xs: list[float]) -> str:
        ms = [1e3 * x for x in xs]
        return (f"{label:<50} median {statistics.median(ms):8.2f} ms [{min(ms):.2f}, {max(ms):.2f}], "
                f"first {ms[0]:.2f} ms, n {len(ms)}")

    print(f"torch {torch.__version__}, {device}, built-in pair {target.dtype}")
    for use_draft in (False, True):
        who = "target+draft" if use_draft else "target"
        for cudnn in (True, False):
            if device.type == "cuda":
                torch.backends.cuda.enable_cudnn_sdp(cudnn)
            sdp = f"cudnn sdp {'on' if cudnn else 'off'}"
            print(line(f"eager join, lengths 64..128, {who}, {sdp}", joins(engines["eager"], drawn, use_draft)))
            print(line(f"eager join, one length (96), {who}, {sdp}", joins(engines["eager"], [96] * len(drawn),
                                                                            use_draft)))
        if device.type == "cuda":
            torch.backends.cuda.enable_cudnn_sdp(True)
        graphs = engines["graphs"]
        captures = graphs.runner.captures
        first = joins(graphs, drawn, use_draft)
        print(line(f"graph join, lengths 64..128, {who}, capturing", first)
              + f", {graphs.runner.captures - captures} captures")
        print(line(f"graph join, lengths 64..128, {who}, replayed", joins(graphs, drawn, use_draft)))
    engine = engines["graphs"]

    # Decode steps of a batch of 8, wall time per step, once their shapes are captured.
    for how in (Decoding(k=0), Decoding(k=4)):
        batch = engine.open_batch(16, True)
        with torch.inference_mode():
            engine.join(batch, [text[i * 50:i * 50 + 96] for i in range(8)], True, 1.0, gen)
            walls, phases = [], []
            for i in range(40):
                sync()
                t0 = time.perf_counter()
                record = engine.step(batch, how, gen, None, draft_current=True)
                sync()
                if i >= 5 and not record.captured:
                    walls.append(time.perf_counter() - t0)
                    phases.append(record.phases.total_s)
        print(line(f"step k={how.k}, batch 8, wall", walls))
        print(line(f"step k={how.k}, batch 8, its phases' sum", phases))


if __name__ == "__main__":
    main()
