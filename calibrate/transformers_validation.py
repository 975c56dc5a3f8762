"""transformers' assisted generation and prompt lookup predicted from a profile of its plain passes
(`calibrate.transformers_engine`), and validated against its own runs: each speculative `generate` paired with a
plain one on the same held-out prompt, in turns, greedy, token for token equal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.engine_steps import measured_pass_s, replay
from calibrate.transformers_engine import HFModel, generate, load_hf, require_transformers
from scenarios.profile import Profile
from simulator import SpecsimError
from simulator.validation import median_standard_error


@dataclass(frozen=True)
class HFRun:
    """What one transformers call does: assisted generation with k drafts, or prompt lookup with K."""

    kind: str  # "assisted" | "lookup"
    k: int

    @property
    def label(self) -> str:
        return f"{'assistant' if self.kind == 'assisted' else 'lookup'} k={self.k}"

    def kwargs(self, draft: HFModel | None) -> dict[str, Any]:
        if self.kind == "lookup":
            return {"prompt_lookup_num_tokens": self.k}
        assert draft is not None
        g = draft.model.generation_config
        g.num_assistant_tokens, g.num_assistant_tokens_schedule = self.k, "constant"
        g.assistant_confidence_threshold = 0.0
        return {"assistant_model": draft.model}


def predict_call(profile: Profile, run: HFRun | None, prompt_tokens: int, new_tokens: int) -> float:
    """Seconds transformers takes to generate `new_tokens` greedy tokens after a prompt (None: plain), from the
    profile alone: the passes as calibrated, the loop's measured work, and the steps greedy decoding took along each
    calibration text (`replay`: the draft model's greedy matches, or the lookup's proposals and their matches at
    this K), the median text's call: the validation measures the median held-out prompt's speed-up, and what a
    text accepts is skewed (a lookup on a text that copies itself whole accepts every proposal; pooled over the
    texts, the held-out prompts' tokens per step stood 3-7 % above their median prompt's). The speculative call's
    first verification pass also reads the prompt (transformers does not prefill it apart), and the assistant
    prefills it in its first call."""
    acc = profile.acceptance
    assert acc is not None
    eng = profile.fit.overheads.engine
    target, draft = profile.target, profile.draft
    c = prompt_tokens + new_tokens // 2  # passes are linear in the context: the middle one is their mean
    if run is None:
        return (measured_pass_s(profile, target, prompt_tokens, 0)
                + (new_tokens - 1) * (measured_pass_s(profile, target, 1, c) + eng.plain.fixed_s))
    if run.kind == "assisted":
        k = run.k
        texts = [(np.full(len(y), k), np.minimum(np.asarray(y) - 1, k)) for y in acc.greedy_yields]
        drafting = (measured_pass_s(profile, draft, eng.draft_catchup_tokens, c)
                    + (k - 1) * measured_pass_s(profile, draft, 1, c) + k * eng.draft.fixed_s)
        first = measured_pass_s(profile, target, prompt_tokens + k, 0) + measured_pass_s(profile, draft,
                                                                                        prompt_tokens, 0)
        step_s = {m: drafting + measured_pass_s(profile, target, m + 1, c) + eng.verify.fixed_s
                  for m in range(k + 1)}
    else:
        lk = acc.raw["lookup"]["by_k"][str(run.k)]
        texts = list(zip(lk["proposed"], lk["accepted"]))
        first = measured_pass_s(profile, target, prompt_tokens + run.k, 0)
        step_s = {m: measured_pass_s(profile, target, m + 1, c) + eng.plain.fixed_s + lk["host_s"]
                  for m in range(run.k + 1)}
    calls = []
    for proposed, accepted in texts:
        steps = replay([proposed], [accepted], new_tokens)
        tokens = float(np.mean([a + 1 for _, a in steps]))
        per_step = float(np.mean([step_s[min(m, max(step_s))] for m, _ in steps]))
        calls.append(first + max(new_tokens - tokens, 0.0) / tokens * per_step)
    return float(np.median(calls))


def check_profile(profile: Profile) -> None:
    if not str(profile.origin or "").startswith("transformers:") or profile.acceptance is None:
        raise SpecsimError("validate --engine transformers needs a profile from specsim calibrate --engine "
                           "transformers --target DIR --draft DIR")


# -- validation ------------------------------------------------------------------------------------------------------


def default_runs(quick: bool) -> list[HFRun]:
    ks = (1, 2, 4, 8) if quick else (1, 2, 3, 4, 6, 8)
    lookups = (2, 4) if quick else (2, 4, 6, 8)
    return [HFRun("assisted", k) for k in ks] + [HFRun("lookup", k) for k in lookups]


def validate_hf(profile: Profile, target_dir: str | Path, draft_dir: str | Path, runs: Sequence[HFRun],
                n_prompts: int, new_tokens: int, repeats: int, seed: int, progress: Any) -> dict[str, Any]:
    """Each run of transformers' assisted generation and prompt lookup on held-out prompts (lookup: made to repeat
    themselves), each paired with a plain `generate` of the same prompt in the same round, the order shuffled every
    round; the measured speed-up (plain time over speculative time, medians over rounds) against `predict_call`'s.
    Greedy decoding: every speculative output must equal the plain one, token for token."""
    from calibrate.ngram import repeating
    from engine.builtin import encode, prompts

    check_profile(profile)
    target, draft = load_hf(target_dir, "target"), load_hf(draft_dir, "draft")
    rng = np.random.default_rng(seed)
    held = [encode(p) for p in prompts("heldout")[:n_prompts]]
    forms = {"assisted": held, "lookup": [repeating(p) for p in held]}
    times: dict[tuple[str, int, int], list[float]] = {}  # (run label | "plain <kind>", prompt) -> seconds
    mismatched: list[str] = []
    jobs = [(run, i) for run in runs for i in range(len(held))]
    with progress("transformers: speculative runs, each paired with a plain run", repeats * len(jobs)) as bar:
        for _ in range(repeats):
            for j in rng.permutation(len(jobs)):
                run, i = jobs[j]
                p = forms[run.kind][i]
                order = [None, run] if rng.random() < 0.5 else [run, None]
                outs = {}
                for r in order:
                    kw = r.kwargs(draft) if r is not None else {}
                    outs[r], t = generate(target, p, new_tokens, **kw)
                    times.setdefault((r.label if r else f"plain {run.label}", i, 0), []).append(t)
                if outs[run] != outs[None] and run.label not in mismatched:
                    mismatched.append(run.label)
                bar.update(1)
    rows = []
    for run in runs:
        per_prompt = []
        for i in range(len(held)):
            plain = float(np.median(times[(f"plain {run.label}", i, 0)]))
            spec = float(np.median(times[(run.label, i, 0)]))
            L = len(forms[run.kind][i])
            predicted = predict_call(profile, None, L, new_tokens) / predict_call(profile, run, L, new_tokens)
            per_prompt.append((plain / spec, predicted, plain, spec))
        a = np.array(per_prompt)
        measured, predicted = float(np.median(a[:, 0])), float(np.median(a[:, 1]))
        rows.append({"run": run.label, "kind": run.kind, "k": run.k, "measured_speedup": measured,
                     "measured_se": median_standard_error(a[:, 0], np.random.default_rng(seed)) if len(a) > 1
                     else None,
                     "predicted_speedup": predicted, "rel_error": predicted / measured - 1,
                     "measured_spread": [float(np.percentile(a[:, 0], 25)), float(np.percentile(a[:, 0], 75))],
                     "plain_s": float(np.median(a[:, 2])), "speculative_s": float(np.median(a[:, 3]))})
    err = np.abs([r["rel_error"] for r in rows])
    within = sum(r["measured_se"] is not None and abs(r["rel_error"]) <= 2 * r["measured_se"] / r["measured_speedup"]
                 for r in rows)
    return {"engine": f"transformers {require_transformers().__version__}", "target": str(target.folder),
            "draft": str(draft.folder), "prompts": len(held), "tokens": new_tokens, "repeats": repeats,
            "decoding": "greedy", "rows": rows, "median_abs_err_speedup": float(np.median(err)),
            "p90_abs_err_speedup": float(np.percentile(err, 90)), "within_prompt_noise": int(within),
            "outputs_differ": mismatched}


def format_validation(report: Mapping[str, Any]) -> str:
    lines = [f"{report['engine']}: {report['target']} with {report['draft']}, batch 1, greedy, "
             f"{report['prompts']} held-out prompts x {report['repeats']} rounds, {report['tokens']} tokens",
             f"{'run':<16}{'measured':>16}{'predicted':>11}{'error':>9}   plain -> speculative (median s)"]
    for r in report["rows"]:
        lo, hi = r["measured_spread"]
        se = r.get("measured_se")  # absent from reports written before it was measured
        noise = f" +/- {se:.2f}" if se is not None else " " * 7
        lines.append(f"{r['run']:<16}{r['measured_speedup']:>9.2f}x{noise}{r['predicted_speedup']:>10.2f}x"
                     f"{100 * r['rel_error']:>+8.1f}%   {r['plain_s']:.2f} -> {r['speculative_s']:.2f} "
                     f"(IQR of prompts {lo:.2f}-{hi:.2f}x)")
    lines.append(f"speed-up |error|: median {100 * report['median_abs_err_speedup']:.1f} %, p90 "
                 f"{100 * report['p90_abs_err_speedup']:.1f} %")
    if "within_prompt_noise" in report:
        lines.append(f"measured: the median over the prompts, +/- its bootstrap standard error (another draw of as "
                     f"many prompts); the error is within two of them in {report['within_prompt_noise']} of "
                     f"{len(report['rows'])} runs")
    lines.append("every speculative output equalled the plain one" if not report["outputs_differ"] else
                 f"outputs differ from plain generate for: {', '.join(report['outputs_differ'])}")
    return "\n".join(lines)
