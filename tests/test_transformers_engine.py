"""Hugging Face transformers as the engine (calibrate/transformers_engine.py). The step structure specsim prices
is checked against transformers' own greedy assisted generation and prompt lookup: replaying the calibration's
measured matches must give exactly the verification passes transformers runs. Skipped, with the reason, where
transformers is not installed; the rest needs nothing."""

import sys

import numpy as np
import pytest
import torch

from calibrate.engine_steps import replay
from calibrate.transformers_engine import require_transformers
from simulator import SpecsimError


def test_replay_takes_steps_not_positions():
    # every position accepts all k = 3 drafts: steps of 4 tokens, 12 tokens in 3 steps
    assert replay([[3] * 12], [[3] * 12], 12) == [(3, 3)] * 3
    # a stretch copied well then badly: averaged over positions a step keeps (4 * 3 + 4 * 0) / 8 + 1 = 2.5 tokens;
    # decoding crosses the good stretch in one step and the bad one in four: 5 steps, 8 tokens, 1.6 a step
    steps = replay([[3] * 8], [[3, 3, 3, 3, 0, 0, 0, 0]], 8)
    assert [a for _, a in steps] == [3, 0, 0, 0, 0]
    assert sum(a + 1 for _, a in steps) == 8


def test_without_transformers_the_engine_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(SpecsimError, match="pip install"):
        require_transformers()


def test_the_validation_report_says_how_far_the_prompts_alone_move_a_row():
    """Each run's measured speed-up carries its prompts' bootstrap standard error, and the report counts the runs whose
    error is within two of them (k = 1: 2 % against 0.05 / 1.5; lookup: 10 % against 0.02 / 1.2); a report stored
    before the field prints without it."""
    from calibrate.transformers_validation import format_validation

    def row(run, measured, se, err):
        return {"run": run, "measured_speedup": measured, "measured_se": se, "predicted_speedup": measured * (1 + err),
                "rel_error": err, "measured_spread": [measured - 0.1, measured + 0.1], "plain_s": 1.0,
                "speculative_s": 1.0 / measured}

    report = {"engine": "transformers 5.24.0", "target": "t", "draft": "d", "prompts": 8, "repeats": 2, "tokens": 64,
              "rows": [row("assistant k=1", 1.5, 0.05, 0.02), row("lookup k=2", 1.2, 0.02, 0.10)],
              "median_abs_err_speedup": 0.06, "p90_abs_err_speedup": 0.09, "within_prompt_noise": 1,
              "outputs_differ": []}
    text = format_validation(report)
    assert "1.50x +/- 0.05" in text and "within two of them in 1 of 2 runs" in text
    for r in report["rows"]:
        del r["measured_se"]
    del report["within_prompt_noise"]
    assert "+/-" not in format_validation(report)


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    pytest.importorskip("transformers", reason="pip install transformers to check specsim against it")
    from calibrate.transformers_engine import load_hf
    from engine.builtin import load_pair
    from engine.export import export_hf

    folder = tmp_path_factory.mktemp("pair")
    target, draft = load_pair(expanded=False, dtype="fp32", max_seq_len=512)
    export_hf(target, folder / "target", "specsim-target")
    export_hf(draft, folder / "draft", "specsim-draft")
    return load_hf(folder / "target", "target"), load_hf(folder / "draft", "draft")


def count_target_calls(target, fn):
    calls = []
    handle = target.model.register_forward_hook(lambda m, args, kwargs, out: calls.append(1), with_kwargs=True)
    try:
        out = fn()
    finally:
        handle.remove()
    return len(calls), out


PROMPT = list(b"def tokens_per_step(alpha, k):\n    return (1 - alpha ** (k + 1)) / (1 - alpha)\n")
N = 40


def test_replayed_matches_give_transformers_own_assisted_steps(hf_pair):
    from calibrate.measure_acceptance import greedy_yields
    from calibrate.transformers_engine import generate, logits_of
    from calibrate.transformers_validation import HFRun

    target, draft = hf_pair
    text, _ = generate(target, PROMPT, N)
    seq = PROMPT + text
    sl = slice(len(PROMPT) - 1, len(PROMPT) - 1 + N)
    matches = (logits_of(target, seq)[sl].argmax(-1) == logits_of(draft, seq)[sl].argmax(-1)).numpy()
    y = np.asarray(greedy_yields(matches))
    for k in (1, 3):
        calls, (out, _) = count_target_calls(target, lambda k=k: generate(target, PROMPT, N,
                                                                           **HFRun("assisted", k).kwargs(draft)))
        assert out == text  # greedy: the speculative output is the plain one
        steps = replay([np.full(len(y), k)], [np.minimum(y - 1, k)], N)
        # transformers' first verification pass also reads the prompt; it stops drafting at the length limit
        assert abs(len(steps) - calls) <= 1, (k, len(steps), calls)
        assert 1 < len(steps) < N


def test_replayed_lookup_gives_transformers_own_lookup_steps(hf_pair):
    from calibrate.ngram import repeating
    from calibrate.transformers_engine import generate, measure_lookup
    from calibrate.transformers_validation import HFRun

    target, _ = hf_pair
    prompt = repeating(PROMPT)
    K = 4
    lookup = measure_lookup(target, [PROMPT], N, [K], lambda: None)["by_k"][str(K)]
    calls, (out, _) = count_target_calls(target, lambda: generate(target, prompt, N, **HFRun("lookup", K).kwargs(None)))
    assert out == generate(target, prompt, N)[0]
    steps = replay(lookup["proposed"], lookup["accepted"], N)
    assert abs(len(steps) - calls) <= 1, (len(steps), calls)
    assert lookup["proposal_rate"] > 0.5  # the prompt repeats itself: the lookup finds a continuation


def test_transformers_passes_are_timed_through_its_own_cache(hf_pair):
    from calibrate.transformers_engine import crop, forward, new_cache

    target, _ = hf_pair
    cache = new_cache(target)
    forward(target, torch.tensor([PROMPT[:20]]), cache)
    step = torch.tensor([PROMPT[20:23]])
    first = forward(target, step, cache)
    crop(cache, 20)
    assert cache.get_seq_length() == 20
    assert torch.allclose(forward(target, step, cache), first)  # the cropped cache computes the same pass


def test_greedy_texts_in_batches_are_generate_one_by_one(hf_pair):
    """The lookup's calibration texts, generated a chunk of same-length prompts at a time, are transformers' own
    greedy continuations of each prompt alone (prompts of two lengths, a chunk smaller than the group)."""
    from calibrate.transformers_engine import generate, greedy_texts

    target, _ = hf_pair
    prompts = [PROMPT[:48], PROMPT[10:58], PROMPT[20:68], PROMPT[:30]]
    ticks = []
    texts = greedy_texts(target, prompts, 12, lambda: ticks.append(1), chunk=2)
    assert texts == [generate(target, p, 12)[0] for p in prompts] and len(ticks) == len(prompts)
