"""Published large-scale EP / PD deployments (scenarios/deployments/*.toml) priced from the presets, with the
errors: a decode point's output tokens/s a node at its batch, a prefill point's input tokens/s a node.

    python benchmarks/deployments.py

A decode point: per GPU, `batch_per_gpu` sequences at the prompt's context (plus half the output), one plain step of
the engine of `gpus` GPUs (EP, DP attention: simulator/moe_parallel.py; its all-to-alls from AIConfigurator's DeepEP
tables where measured); tokens/s a node = 8 x batch_per_gpu / step (an aggregated engine's: its batch's prompts
prefilled between the steps, 8 x batch_per_gpu x output / (output x step + the prefill pass)). A prefill point: per
GPU one pass over `tokens_per_gpu_pass` prompt tokens; tokens/s a node = 8 x those / the pass. Redundant experts
(EPLB) are priced as more physical experts of the same width, each GPU holding (experts + redundant) / EP.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios import tomllib  # noqa: E402
from scenarios.layouts import apply_layout  # noqa: E402
from scenarios.setup import resolve_setup  # noqa: E402

NODE = 8


def price(d: dict) -> float:
    s = resolve_setup(d["hardware"], None, d["target"], "mtp", d["dtype"], "iid:0.7", True, d["engine"], 1, None)
    if d.get("redundant_experts"):
        more = d["redundant_experts"]
        s = replace(s, target=replace(s.target, n_experts=s.target.n_experts + more),
                    draft=replace(s.draft, module=replace(s.draft.module, n_experts=s.draft.module.n_experts + more)))
    s = apply_layout(s, d["hardware"], d["gpus"], d["ep"], d["dp"])
    if d["phase"] == "decode":
        b = d["batch_per_gpu"] * d["gpus"]
        context = d["prompt_tokens"] + d.get("output_tokens", 0) // 2
        step = s.cost.plain_step_s(s.target, b, context)
        if not d.get("aggregated"):
            return NODE * d["batch_per_gpu"] / step
        # one engine prefills and decodes: each batch's prompts (a pass per GPU over its share) between its steps
        out = d["output_tokens"]
        prefill = s.cost.pass_time_s(s.target, b, d["prompt_tokens"], 0)
        return NODE * d["batch_per_gpu"] * out / (out * step + prefill)
    tokens = d["tokens_per_gpu_pass"]
    prompts = max(1, tokens // d["prompt_tokens"]) * d["dp"]  # the engine's prompts a pass, one rank's share each
    t = s.cost.pass_time_s(s.target, prompts, d["prompt_tokens"], 0)
    return NODE * tokens / t


def main() -> None:
    errors = []
    for path in sorted(Path(__file__).resolve().parents[1].glob("scenarios/deployments/*.toml")):
        d = tomllib.loads(path.read_text())
        predicted = price(d)
        published = d["published_tokens_per_s_per_node"]
        err = predicted / published - 1
        errors.append(abs(err))
        print(f"{path.stem:26s} {d['phase']:8s} {d['gpus']:3d} GPUs EP {d['ep']:<3d} DP {d['dp']:<3d} "
              f"published {published:8,.0f}  predicted {predicted:8,.0f} tok/s a node  error {err:+.0%}")
        print(f"{'':26s} source: {d['source']}")
    print(f"median |error| {np.median(errors):.0%} over {len(errors)} points")


if __name__ == "__main__":
    main()
