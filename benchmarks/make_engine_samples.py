"""Make the sample engine measurements in scenarios/samples/ that `specsim calibrate --from` is tested on.

    python benchmarks/make_engine_samples.py

They are *made by specsim*, in the formats the engines write, not measured by us:

- ``vllm/``: `vllm bench latency --output-json` files (batch 1..64:x2 x input 512 and 2,048 x output 128 and 256,
  30 iterations each) and the manifest that gives their settings;
- ``sglang-bench-one-batch.jsonl``: `bench_one_batch` result lines (batch 1..64:x2 x input 512, 1,024, 2,048 x
  output 256);
- ``steps.csv``: the documented CSV (decode steps and k = 2, 4 verify passes at batch 1..128:x2 x context 512 and
  2,048).

All three take their step times from SpecDecode-Bench's linear model of vLLM step times measured on one H100 SXM with
Llama-3.1-8B (scenarios/references.toml, "llama-3.1-8b-h100-vllm"; a step of B sequences, n new tokens each, on c
cached tokens costs B (c + n) c_kv + B n c_token + c_fixed + c_step), with 2 % log-normal noise per step sum,
seeded. ``h200-specsim-steps.csv`` is different: real passes of specsim's own engine on an H200 (CUDA graphs, GQA
through SDPA), copied from ../shared/data/gpu-h200/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from scenarios import tomllib

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "scenarios" / "samples"
NOISE = 0.02


def step_model() -> dict:
    return tomllib.loads((ROOT / "scenarios" / "references.toml").read_text())["llama-3.1-8b-h100-vllm"]


def step_s(ref: dict, batch: int, new_tokens: int, context: int) -> float:
    return (batch * (context + new_tokens) * ref["c_kv_s"] + batch * new_tokens * ref["c_token_s"]
            + ref["c_fixed_s"] + ref["c_step_s"])


def request_s(ref: dict, batch: int, input_len: int, output_len: int) -> float:
    """A prefill of the prompts, then output_len - 1 decode steps."""
    return step_s(ref, batch, input_len, 0) + sum(step_s(ref, batch, 1, input_len + t) for t in range(output_len - 1))


def main() -> None:
    ref = step_model()
    rng = np.random.default_rng(0)
    runs = []
    for old in (OUT / "vllm").glob("latency_*.json"):
        old.unlink()
    for b in (1, 2, 4, 8, 16, 32, 64):
        for n_in in (512, 2048):
            for n_out in (128, 256):
                lat = request_s(ref, b, n_in, n_out) * np.exp(rng.normal(0.0, NOISE, 30))
                pct = [10, 25, 50, 75, 90, 99]
                name = f"latency_b{b}_in{n_in}_out{n_out}.json"
                (OUT / "vllm" / name).write_text(json.dumps({
                    "avg_latency": float(lat.mean()), "std_latency": float(lat.std()), "latencies": lat.tolist(),
                    "percentiles": {str(p): float(v) for p, v in zip(pct, np.percentile(lat, pct))}}) + "\n")
                runs.append((name, b, n_in, n_out))
    manifest = ["# Settings of the vllm bench latency runs beside this file (made by benchmarks/make_engine_samples.py",
                "# from SpecDecode-Bench's model of vLLM on an H100, with 2 % noise: a sample of the format, not a",
                "# measurement). Use: specsim calibrate --from vllm:scenarios/samples/vllm/manifest.toml \\",
                "#   --hardware h100-sxm --target llama-3.1-8b --draft llama-3.2-1b", ""]
    for name, b, n_in, n_out in runs:
        manifest += ["[[run]]", f'file = "{name}"', f"batch = {b}", f"input_len = {n_in}", f"output_len = {n_out}",
                     ""]
    (OUT / "vllm" / "manifest.toml").write_text("\n".join(manifest))
    lines = []
    for n_in in (512, 1024, 2048):
        for b in (1, 2, 4, 8, 16, 32, 64):
            decode = [step_s(ref, b, 1, n_in + t) for t in range(255)] * np.exp(rng.normal(0.0, NOISE, 255))
            prefill = step_s(ref, b, n_in, 0) * float(np.exp(rng.normal(0.0, NOISE)))
            med = float(np.median(decode))
            total = prefill + float(decode.sum())
            lines.append(json.dumps({
                "run_name": "sample", "batch_size": b, "input_len": n_in, "output_len": 256,
                "prefill_latency": prefill, "prefill_throughput": n_in * b / prefill,
                "median_decode_latency": med, "median_decode_throughput": b / med,
                "total_latency": total, "overall_throughput": (n_in + 256) * b / total}))
    (OUT / "sglang-bench-one-batch.jsonl").write_text("\n".join(lines) + "\n")
    rows = ["# Step times in the CSV specsim calibrate --from reads (made by benchmarks/make_engine_samples.py",
            "# from SpecDecode-Bench's model of vLLM on an H100, with 2 % noise: a sample of the format, not a",
            "# measurement).",
            "# Use: specsim calibrate --from csv:scenarios/samples/steps.csv --hardware h100-sxm \\",
            "#        --target llama-3.1-8b --draft llama-3.2-1b",
            "batch,new_tokens,context,step_ms,phase"]
    for b in (1, 2, 4, 8, 16, 32, 64, 128):
        for c in (512, 2048):
            for n, phase in ((1, "decode"), (3, "verify"), (5, "verify")):
                t = step_s(ref, b, n, c) * float(np.exp(rng.normal(0.0, NOISE)))
                rows.append(f"{b},{n},{c},{1e3 * t:.3f},{phase}")
    (OUT / "steps.csv").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
