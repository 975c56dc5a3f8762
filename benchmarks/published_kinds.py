"""Published figures of MoE targets and of draft kinds, predicted from their sources' own setups.

    python benchmarks/published_kinds.py [--json]

Each case names its source, what it reports, what specsim predicts from the presets (no fitting to the reported
speculative figure), the error, and what had to be assumed where the source does not say. "within 15 %" is the
goal where the source gives enough to reproduce; a case marked `assumed` leans on a parameter the source leaves out.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios import load_hardware, load_model  # noqa: E402
from scenarios.acceptance_specs import acceptance_from_spec  # noqa: E402
from scenarios.draft_specs import load_draft  # noqa: E402
from scenarios.setup import shard_draft  # noqa: E402
from simulator.cost import CostModel  # noqa: E402
from simulator.specs import DEFAULT_EXPERT_SHARING, PerStep  # noqa: E402
from simulator.sweep import chains, sweep  # noqa: E402


@dataclass
class Case:
    name: str
    source: str
    reported: str
    predicted: str
    error_pct: float | None  # |predicted / reported - 1| where one number is compared
    assumed: str

    def line(self) -> str:
        err = "" if self.error_pct is None else f"  ({self.error_pct:+.1f} %)"
        return (f"- {self.name}\n    source:    {self.source}\n    reported:  {self.reported}\n"
                f"    predicted: {self.predicted}{err}\n    assumed:   {self.assumed}")


def cost_on(hardware: str, engine: str = "vllm") -> CostModel:
    return CostModel.from_hardware(load_hardware(hardware, engine))


def speedups(cost, target, draft, acceptance: str, batches, ks, context):
    result = sweep(cost, target, draft, acceptance_from_spec(acceptance), list(batches), chains([0, *ks]), [context])
    return {(r.batch, r.k): r for r in result.rows}


def cohere() -> Case:
    m = load_model("qwen3-30b-a3b")
    ratio = m.experts_touched(4, 1) / m.experts_touched(1, 1)
    return Case("expert bytes of a 4-token verification over a 1-token step, batch 1",
                "Cohere engineering blog, April 2026 (verifying 4 tokens loads ~2.5x the expert bytes of one)",
                "~2.5x", f"{ratio:.2f}x (Qwen3-30B-A3B's 128 experts, top-8)", 100 * (ratio / 2.5 - 1),
                f"the default expert sharing {DEFAULT_EXPERT_SHARING} was chosen from this and two other measurements "
                "(simulator/specs.py): a consistency check, not an independent one")


def cascade() -> Case:
    cost = cost_on("h100-sxm")
    ratios = {}
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "qwen2-57b-a14b"):
        m = load_model(name)
        tp = 2 if m.resident_weight_bytes > 70e9 else 1
        c = cost_on("h100-sxm")
        shard = m.shard(tp) if tp > 1 else m
        ratios[name] = [c.pass_time_s(shard, 1, k + 1, 512) / c.pass_time_s(shard, 1, 1, 512) for k in (3, 5)]
    lo = min(min(v) for v in ratios.values())
    hi = max(max(v) for v in ratios.values())
    del cost
    inside = sum(1 for v in ratios.values() for r in v if 1.7 <= r <= 3.45)
    return Case("verification pass time over a one-token pass at batch 1, K = 3 and 5 (MoE targets in vLLM)",
                "Saxena et al., Cascade, arXiv 2506.20675 (verification time 2-3x, speculation up to 1.5x slower)",
                "2-3x", f"{lo:.2f}-{hi:.2f}x over " + ", ".join(f"{k} {v[0]:.2f}/{v[1]:.2f}" for k, v in ratios.items())
                + f"; {inside} of {2 * len(ratios)} within 15 % of [2, 3]", None,
                "the paper's five MoEs and hardware not all named in its abstract: four of ours on an H100 (TP 2 "
                "where the weights need it), context 512")


def moesd() -> Case:
    cost = cost_on("a100-80gb-sxm")
    target = load_model("qwen2-57b-a14b").shard(2)
    draft = shard_draft(load_draft("qwen2.5-0.5b", load_model("qwen2-57b-a14b")), 2, load_hardware("a100-80gb-sxm"))
    batches = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256]
    rows = speedups(cost, target, draft, "iid:0.8", batches, (2, 3, 4), 256)
    best = {b: max(rows[(b, k)].speedup for k in (2, 3, 4) if (b, k) in rows and rows[(b, k)].fits)
            for b in batches if any((b, k) in rows and rows[(b, k)].fits for k in (2, 3, 4))}
    peak = max(best, key=best.get)
    curve = ", ".join(f"{b}: {s:.2f}" for b, s in best.items())
    rises_then_falls = best[peak] > best[min(best)] * 1.05 and best[peak] > best[max(best)] * 1.05
    return Case("speed-up against batch, Qwen2-57B-A14B on 2 A800s (rise, then fall)",
                "Huang et al., MoESD, arXiv 2505.19645 (up to 2.29x at medium batch sizes; 2x A800, 2x H800, ...)",
                "rises to 2.29x at a medium batch, falls after", f"best k by batch {{{curve}}}: peak {best[peak]:.2f}x "
                f"at batch {peak}; {'rises then falls' if rises_then_falls else 'NOT rise-then-fall'}",
                100 * (best[peak] / 2.29 - 1),
                "an A800 priced as the A100-80GB preset (the same HBM and SMs; its NVLink cut to 400 GB/s matters "
                "little at TP 2); a Qwen2.5-0.5B draft (the Qwen2 family's smallest) at i.i.d. acceptance 0.8 and "
                "context 256 (the paper's acceptance and its peak batch are in its figures, not its abstract)")


def specforge_339() -> list[Case]:
    """Qwen3-30B-A3B with an EAGLE-3 head on 2 H100s in SGLang: the baseline's steps, and a chain of 3 (topk 1,
    4 draft tokens) with acceptance length 1.86 at batch 1 and 4."""
    hw = load_hardware("h100-sxm")
    target = load_model("qwen3-30b-a3b").shard(2)
    head = shard_draft(load_draft("eagle3", load_model("qwen3-30b-a3b")), 2, hw)
    base_tok_s = {1: 222.47, 4: 566.21}
    spec_tok_s = {1: 159.78, 4: 447.90}
    cases = []
    for label, cost in (("vLLM's per-step costs", cost_on("h100-sxm")), ("fitted to the plain batch-1 step", None)):
        if cost is None:  # one parameter from the *plain* runs: the engine's per-step cost at batch 1
            c0 = cost_on("h100-sxm")
            pass_s = c0.plain_step_s(target, 1, 512) - c0.overheads.engine.plain.fixed_s
            step_s = 1 / base_tok_s[1] - pass_s
            engine = replace(c0.overheads.engine, plain=PerStep(step_s), verify=PerStep(step_s))
            cost = replace(c0, overheads=replace(c0.overheads, engine=engine))
        rows = speedups(cost, target, head, "accept-length:1.86@3", [1, 4], (3,), 512)
        for b in (1, 4):
            reported = spec_tok_s[b] / base_tok_s[b]
            pred = rows[(b, 3)].speedup
            cases.append(Case(f"EAGLE-3 on Qwen3-30B-A3B, SGLang, 2 H100s, batch {b}, chain of 3 ({label})",
                              "sgl-project/SpecForge #339 (the issue's sglang #14824): 222.47 / 566.21 tok/s plain at "
                              "batch 1 / 4; 159.78 / 447.90 with EAGLE-3 (steps 3, topk 1, 4 draft tokens), "
                              "acceptance length 1.86",
                              f"{reported:.2f}x (slower)", f"{pred:.2f}x (base {b / rows[(b, 0)].baseline_time_s:,.0f} "
                              f"tok/s)", 100 * (pred / reported - 1),
                              "SGLang priced with vLLM's per-step costs (no SGLang preset); context 512 (MT-bench); "
                              "the "
                              "acceptance length as i.i.d. acceptance; its head the SpecForge shape"
                              + ("; the engine's per-step cost set so the plain batch-1 step takes the measured "
                                 f"{1e3 / base_tok_s[1]:.2f} ms (nothing from the speculative runs)"
                                 if label.startswith("fitted") else "")))
    return cases


def eagle3_sglang_batch64() -> Case:
    cost = cost_on("h100-sxm")
    t = load_model("llama-3.1-8b")
    head = load_draft("eagle3", t)
    rows = speedups(cost, t, head, "iid:0.75", [64], (3, 4, 5), 512)
    k, r = max(((k, rows[(64, k)]) for k in (3, 4, 5)), key=lambda kr: kr[1].speedup)
    return Case("EAGLE-3 on Llama-3.1-8B, SGLang on an H100, batch 64",
                "Li et al., EAGLE-3, arXiv 2503.01840, table of SGLang throughput (1.38x at batch 64, no tree)",
                "1.38x", f"{r.speedup:.2f}x (k = {k})", 100 * (r.speedup / 1.38 - 1),
                "the paper's SGLang run's draft length and acceptance are not in the table: a chain with i.i.d. "
                "acceptance 0.75 (vLLM's K = 7 chain reaches a length of ~3.5 on MT-bench, vllm #26191), the best of "
                "k = 3..5; vLLM's per-step costs for SGLang's; context 512")


def deepseek_mtp() -> Case:
    hw = load_hardware("h200")
    cost = CostModel.from_hardware(hw)
    full = load_model("deepseek-v3")
    target = full.shard(8)
    mtp = shard_draft(load_draft("mtp", full), 8, hw)
    batches = [1, 8, 32, 64, 128]
    out = []
    for a in (0.85, 0.90):
        rows = speedups(cost, target, mtp, f"iid:{a}", batches, (1,), 2048)
        out.append({b: rows[(b, 1)].speedup for b in batches if rows[(b, 1)].fits})
    mid = {b: (out[0][b] + out[1][b]) / 2 for b in out[0]}
    text = "; ".join(f"batch {b}: {out[0][b]:.2f}-{out[1][b]:.2f}x" for b in out[0])
    within = [b for b, s in mid.items() if abs(s / 1.8 - 1) <= 0.15]
    return Case("DeepSeek-V3 with its MTP module (k = 1), second-token acceptance 85-90 %",
                "DeepSeek-AI, DeepSeek-V3 technical report, arXiv 2412.19437 sec. 5.4.3 (1.8x tokens per second)",
                "1.8x", f"{text} (within 15 % of 1.8x at batch {within or 'none'})",
                100 * (mid[32] / 1.8 - 1),
                "their deployment (expert parallelism over many H800 nodes) is not reproducible here: 8 H200s at "
                "TP 8, context 2048, vLLM's per-step costs; the error is at batch 32")


def qwen3_head_vs_model() -> list[Case]:
    cost = cost_on("h100-sxm")
    t = load_model("qwen3-8b")
    model, head = load_draft("qwen3-0.6b", t), load_draft("eagle3", t)
    out = []
    for b in (1, 64):
        s_model = speedups(cost, t, model, "accept-length:3.40@3", [b], (3,), 512)[(b, 3)].speedup
        s_head = speedups(cost, t, head, "accept-length:2.80@3", [b], (3,), 512)[(b, 3)].speedup
        winner = "the head" if s_head > s_model else "the draft model"
        out.append(Case(f"Qwen3-8B on gsm8k, K = 3, batch {b}: Qwen3-0.6B draft model against a 1-layer EAGLE-3 head",
                        "the issue's measurement: tokens per round 3.40 (Qwen3-0.6B) against 2.80 (EAGLE-3 head)",
                        "which pays more?", f"draft model {s_model:.2f}x, head {s_head:.2f}x: {winner} pays more",
                        None, "an H100 with vLLM's per-step costs, context 512, the lengths as i.i.d. acceptance"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    args = ap.parse_args()
    cases = [cohere(), cascade(), moesd(), *specforge_339(), eagle3_sglang_batch64(), deepseek_mtp(),
             *qwen3_head_vs_model()]
    if args.json:
        for c in cases:
            print(json.dumps(c.__dict__))
        return 0
    print("Published figures of MoE targets and draft kinds against specsim's predictions from their setups:\n")
    for c in cases:
        print(c.line())
    errs = [abs(c.error_pct) for c in cases if c.error_pct is not None]
    print(f"\n|error| where one number is compared: median {np.median(errs):.1f} %, "
          f"{sum(e <= 15 for e in errs)} of {len(errs)} within 15 %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
