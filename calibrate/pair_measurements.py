"""What a calibration measures of the built-in pair beyond the pass grid (`BuiltinPlan`): the pair's acceptance, its
prediction heads and n-gram lookup, and the engine's own work and tax on speculation in short real runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from calibrate.engine_overheads import measure_engine_overheads
from calibrate.progress import Progress
from calibrate.timing import Effort, Timer
from engine.pass_runner import PassRunner
from engine.rejection import distribution, sample
from engine.speculative import RealEngine
from simulator.cost import CostModel
from simulator.specs import EngineOverheads, ModelSpec

PAIR_SLOTS = 512  # cache slots per sequence of the built-in pair as a calibration loads it (twice its training length)


@dataclass(frozen=True)
class BuiltinPlan:
    """What a calibration of the built-in pair measures beyond the pass grid, and how much: acceptance on `prompts`
    calibration prompts of `tokens` generated tokens each (the heads' too), the n-gram lookup on every prompt,
    acceptance against context on `by_context` = (texts, tokens) of real text (None: not measured), and the
    engine's own work and (with `tax`) its tax on speculation in real runs of `engine_tokens` tokens, `repeats`
    times. A test shrinks the counts of the full plan but keeps its lengths, which set every cache it needs."""

    prompts: int
    tokens: int
    by_context: tuple[int, int] | None
    engine_tokens: int
    repeats: int
    tax: bool
    ngram_prompts: int | None = None  # None: every calibration prompt (its acceptance varies most by prompt)

    @classmethod
    def of(cls, quick: bool) -> BuiltinPlan:
        # Against context: windows of 32 tokens every 32 from the start to twice the 256 tokens the pair trained on.
        if quick:
            return cls(prompts=16, tokens=64, by_context=None, engine_tokens=16, repeats=2, tax=False)
        return cls(prompts=64, tokens=128, by_context=(64, 512), engine_tokens=32, repeats=3, tax=True)


def heads_trained() -> bool:
    from engine.builtin import WEIGHTS

    return (WEIGHTS / "builtin-heads.safetensors").exists()


def measure_heads(target: Any, device: torch.device, dtype: str, calib: Sequence[Sequence[int]], n_tokens: int,
                  seed: int, runner: PassRunner, batches: Sequence[int], quick: bool,
                  progress: Progress, text: tuple[Any, torch.Tensor] | None = None) -> dict[str, Any]:
    """The built-in target's trained prediction heads: their acceptance on the calibration prompts
    (`measure_head_acceptance`, on the unexpanded target, which computes the same function) and their pass as a
    step drafts with it (the widened heads over one hidden state per sequence, every head's distribution and a
    sample from each) at each grid batch, recorded as passes of their draft preset (`BUILTIN_HEADS`: one new
    token, no context)."""
    from calibrate.measure_acceptance import measure_head_acceptance
    from engine.builtin import load_heads
    from scenarios.draft_specs import BUILTIN_HEADS

    effort = Effort.of(quick, False)
    timer = Timer(device)
    with progress("prediction heads (acceptance, passes)", 1 + len(batches)) as bar:
        small = load_heads(expanded=False, dtype=dtype, device=device)
        out = measure_head_acceptance(target, small, calib, n_tokens, 1.0, seed, text=text)
        bar.update(1)
        big = load_heads(expanded=True, dtype=dtype, device=device)
        gen = torch.Generator(device=device).manual_seed(seed)
        records = []
        for b in batches:
            features = torch.randn(b, big.d_model, device=device, generator=gen).to(big.lm[0].weight.dtype)

            def draft(features: torch.Tensor = features) -> torch.Tensor:
                q = distribution(big(features), 1.0)
                return torch.stack([sample(q[:, j], gen) for j in range(big.n_heads)], 1)

            with torch.inference_mode():
                t = timer.measure(draft, warmup=2, min_reps=effort.min_samples, max_reps=effort.max_samples,
                                  max_time_s=effort.per_point_s * 2)
            records.append({"model": BUILTIN_HEADS, "batch": b, "new_tokens": 1, "context": 0, **t.to_dict()})
            bar.update(1)
    out["passes"] = records
    return out


def measure_ngram(target: Any, device: torch.device, calib: Sequence[Sequence[int]], n_tokens: int, seed: int,
                  quick: bool, progress: Progress) -> dict[str, Any]:
    """specsim's own n-gram lookup (`calibrate.ngram`): its acceptance on the calibration prompts made to repeat
    themselves, and the host time of a step's lookups over batch x context (`HostCost`, with its held-out error)."""
    from calibrate.ngram import HOST_BATCHES, HOST_CONTEXTS, measure_host, measure_ngram_acceptance
    from engine.builtin import long_texts

    with progress("n-gram lookup (acceptance, host time)", 2) as bar:
        out = measure_ngram_acceptance(target, calib, n_tokens, 1.0, seed)
        bar.update(1)
        texts = long_texts(16, max(HOST_CONTEXTS), seed)
        out["host"] = measure_host(texts, Timer(device), Effort.of(quick, False), HOST_BATCHES, HOST_CONTEXTS,
                                   seed=seed)
        bar.update(1)
    return out


def measure_builtin(device: torch.device, runner: PassRunner, dtype: str, quick: bool, max_batch: int,
                    progress: Progress, seed: int, cost: CostModel, target_spec: ModelSpec,
                    draft_spec: ModelSpec, bounds: list[str] | None = None,
                    grid_batches: Sequence[int] = (1,),
                    plan: BuiltinPlan | None = None) -> tuple[dict[str, Any], EngineOverheads]:
    """Acceptance of the trained pair on the calibration prompts, and against context on longer real text; then
    short real runs at batch 1 and the largest batch that give the engine's own work around the passes
    (`calibrate.engine_overheads`) and its tax on speculation (`calibrate.speculation_tax`), as `plan` says. A quick
    calibration measures neither acceptance against context nor the tax (a third of its time;
    `Profile.not_measured` says so, and `policy` and ``measured@context`` ask for the full calibration)."""
    from calibrate.measure_acceptance import measure_acceptance, measure_by_context, target_text
    from calibrate.speculation_tax import measure_tax
    from engine.builtin import encode, load_pair, long_texts, prompts

    plan = plan or BuiltinPlan.of(quick)
    n_tokens = plan.tokens
    calib = [encode(p) for p in prompts("calibration")[:plan.prompts]]
    # The unexpanded target computes the same function as the expanded one, faster.
    target, draft = load_pair(expanded=False, dtype=dtype, max_seq_len=PAIR_SLOTS, device=device)
    with progress("acceptance (calibration prompts)", plan.prompts + 1) as bar:
        text = target_text(target, calib, n_tokens, 1.0, seed)  # the draft and the heads are measured along it
        acc = measure_acceptance(target, draft, calib, n_tokens, 1.0, seed, tick=lambda: bar.update(1), text=text)
    if plan.by_context:
        texts, length = plan.by_context
        with progress("acceptance against context (real text)", 1) as bar:
            acc["by_context"] = measure_by_context(target, draft, long_texts(texts, length, seed),
                                                   list(range(0, length, 32)), 32, 1.0)
            bar.update(1)
    if heads_trained():
        acc["heads"] = measure_heads(target, device, dtype, calib, n_tokens, seed, runner, grid_batches, quick,
                                     progress, text)
    # the lookup's acceptance varies from prompt to prompt more than a draft's: every calibration prompt, even quick
    acc["ngram"] = measure_ngram(target, device, [encode(p) for p in prompts("calibration")[:plan.ngram_prompts]],
                                 n_tokens, seed, quick, progress)
    big_target, _ = load_pair(expanded=True, dtype=dtype, max_seq_len=PAIR_SLOTS, device=device)
    engine = RealEngine(big_target, draft, runner)
    gen = torch.Generator(device=device).manual_seed(seed)
    new_tokens, repeats = plan.engine_tokens, plan.repeats
    batches = sorted({1, max_batch})
    with progress("engine overheads (real steps)", 3 * len(batches) * repeats) as bar:
        extras, engine_overheads = measure_engine_overheads(engine, calib, batches, new_tokens, repeats, gen,
                                                            cost.draft_catchup_tokens, tick=lambda: bar.update(1),
                                                            bounds=bounds)
    acc["engine_extras_by_batch_s"] = extras
    if plan.tax:  # three repeats: a cost is priced only where every repeat measured it above the noise
        with progress("speculation off and switching k (real steps)", 4 * len(batches) * repeats) as bar:
            acc["speculation_tax"] = measure_tax(engine, calib, batches, 2 * new_tokens, repeats, gen, cost,
                                                 draft_spec, tick=lambda: bar.update(1))
    return acc, engine_overheads
