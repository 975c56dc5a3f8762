"""Each served request's own acceptance from what it generated (calibrate/bench_traces.py), the simulator replaying it
request by request (`TraceAcceptance.by_request`), and the verification passes' own factor (`CostModel.spec_drift`)
that the speculative fit runs set."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from calibrate.bench_traces import (
    acceptance_traces,
    guidellm_texts,
    load_draft,
    replayed_counts,
    write_traces,
    yields_of,
)
from engine.builtin import encode
from scenarios.bench_files import read_manifest
from scenarios.setup import resolve_setup
from simulator import SpecsimError
from simulator.policies import parse_policy
from simulator.replay import TraceAcceptance
from simulator.serving import EngineConfig, simulate
from simulator.step_costs import StepCosts
from simulator.sweep import verify_times
from simulator.workload import Workload
from specsim import cli

SAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "samples" / "bench"
SAMPLE = SAMPLES / "guidellm-llama-spec.json"  # llama-server, 1 thread, the built-in pair at k = 4, GuideLLM 0.8.1


def test_yields_count_the_run_of_matches_from_each_position():
    match = np.array([True, True, False, True, True, True, False])  # position 0 is the prefill's token
    assert yields_of(match).tolist() == [2, 1, 4, 3, 2, 1]
    assert yields_of(match, lookahead=2).tolist() == [2, 1, 3, 3, 2, 1]


def test_replayed_counts_worked_by_hand():
    """Six tokens after the first, k = 2: a step at 0 drafts 2 and keeps both (3 tokens), a step at 3 drafts 2
    (3 tokens left) and keeps both; a draft never runs past the request's end."""
    assert replayed_counts([np.array([3, 1, 1, 5, 1, 1])], 2) == {"drafts": 2.0, "drafted": 4.0, "accepted": 4.0}
    assert replayed_counts([np.array([1, 1, 1])], 4) == {"drafts": 2.0, "drafted": 3.0, "accepted": 0.0}


def test_a_request_that_generated_the_drafts_own_text_accepts_every_draft():
    """An output that is the draft's own greedy continuation matches it everywhere: each position yields the rest
    of the output (capped at the lookahead); one token changed is rejected there."""
    draft = load_draft(256)
    prompt, out = encode("def main():\n    return "), []
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(12):
            out.append(int(draft.train_logits(torch.tensor([seq]))[0, -1].argmax()))
            seq.append(out[-1])
    [ys] = acceptance_traces([(prompt, out)], draft)
    assert ys.tolist() == [1 + min(12 - j, 8) for j in range(1, 12)]
    changed = out[:5] + [(out[5] + 1) % 256] + out[6:]
    [ys] = acceptance_traces([(prompt, changed)], draft)
    assert ys[:5].tolist() == [1 + (5 - j) for j in range(1, 5)] + [1]


def test_the_traced_requests_give_the_servers_own_counts(tmp_path):
    """llama-server served the sample's 24 requests with the built-in draft at k = 4 (temperature sampling, the
    target's samples checked against the draft's greedy tokens). Re-running the draft over each request's prompt and
    output and replaying the steps gives back exactly the drafts, drafted and accepted tokens its /metrics counted
    (417, 1617, 700)."""
    yields = acceptance_traces(guidellm_texts(SAMPLE), load_draft(1024))
    assert len(yields) == 24 and all(len(y) == 47 for y in yields)  # 48 tokens each, the first from the prefill
    write_traces(tmp_path / "t.jsonl", yields)
    m = _manifest(tmp_path, 'acceptance_trace = "t.jsonl"')
    run = read_manifest(m).runs[0]
    assert replayed_counts(yields, 4) == {k: run.counters[k] for k in ("drafts", "drafted", "accepted")}
    assert run.trace.by_request and [y.tolist() for y in run.trace.yields] == [y.tolist() for y in yields]


def _manifest(tmp_path: Path, extra: str, k: str = "k = 4") -> Path:
    (tmp_path / "m.toml").write_text(
        f'[setup]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\nmax_batch = 4\n[[run]]\nfile = "{SAMPLE}"\n'
        f'{k}\nmetrics_before = "{SAMPLES / "guidellm-llama-spec-before.prom"}"\n'
        f'metrics = "{SAMPLES / "guidellm-llama-spec-after.prom"}"\n{extra}\n')
    return tmp_path / "m.toml"


def test_a_trace_that_does_not_fit_its_run_is_a_one_line_error(tmp_path):
    (tmp_path / "few.jsonl").write_text('{"yields": [1, 2]}\n' * 23)
    (tmp_path / "long.jsonl").write_text('{"yields": [1, 2]}\n' * 23 + json.dumps({"yields": [1] * 48}) + "\n")
    (tmp_path / "bad.jsonl").write_text('{"yields": [0, 2]}\n' * 24)
    for name, says in (("few", "holds 23 requests' acceptance but the run completed 24"),
                       ("long", "line 24 holds 48 positions but that request generated 48 tokens"),
                       ("bad", "whole number >= 1")):
        with pytest.raises(SpecsimError, match=says) as e:
            read_manifest(_manifest(tmp_path, f'acceptance_trace = "{name}.jsonl"'))
        assert "\n" not in str(e.value)
    with pytest.raises(SpecsimError, match="belongs to a speculative run"):
        read_manifest(_manifest(tmp_path, 'acceptance_trace = "few.jsonl"\nspeculative = false', k=""))
    result = CliRunner().invoke(cli, ["validate", "--against", str(_manifest(tmp_path, 'acceptance_trace = '
                                                                                       '"missing.jsonl"'))])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "missing.jsonl" in result.output


def test_a_report_whose_texts_are_not_the_servers_tokens_is_refused(tmp_path):
    data = json.loads(SAMPLE.read_text())
    data["benchmarks"][0]["requests"]["successful"][3]["output"] += "é"
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(SpecsimError, match="request 4's texts are 64 \\+ 50 bytes but the server counted 64 \\+ 48"):
        guidellm_texts(tmp_path / "r.json")


def _setup():
    return resolve_setup("h100-sxm", None, "llama-3.1-8b", "llama-3.2-1b", "bf16", None, need_acceptance=False)


def test_each_request_walks_its_own_trace_in_the_served_simulation():
    """Two requests far apart, 21 tokens each, k = 4: the one whose trace accepts every draft takes 4 steps after its
    first token, the one whose trace accepts none 20; swapping the traces swaps their times."""
    s = _setup()
    costs = StepCosts(s.cost, s.target, s.draft)
    work = Workload(np.array([0.0, 10.0]), np.array([100, 100]), np.array([21, 21]), "two")
    eager, never = np.full(20, 5), np.full(20, 1)

    def decode_s(traces):
        trace = TraceAcceptance(traces, source="two", by_request=True)
        run = simulate(work, costs, parse_policy("fixed:4", trace), trace, np.random.default_rng(0),
                       EngineConfig(max_batch=4))
        return run.finish_s - run.first_token_s, len(run.step_batch)

    times, steps = decode_s((eager, never))
    assert steps == 4 + 20 and times[1] > 4 * times[0]
    swapped, _ = decode_s((never, eager))
    assert swapped == pytest.approx(times[::-1], rel=0.01)


def test_the_verification_factor_moves_verification_passes_only():
    s = _setup()
    plain = s.cost
    tuned = replace(plain, spec_drift=((1.0, 0.5), (4.0, 2.0)))
    extra = plain.overheads.engine.verify_extra_s(np.array([1, 2, 4, 8]))
    b = np.array([1, 2, 4, 8])
    ratio = (verify_times(tuned, s.target, b, 5, 500) - extra) / (verify_times(plain, s.target, b, 5, 500) - extra)
    assert ratio == pytest.approx([0.5, 1.25, 2.0, 2.0])  # log-linear in batch between the knots, flat beyond
    assert np.allclose(tuned.plain_step_times(s.target, b, 500), plain.plain_step_times(s.target, b, 500))
    assert tuned.pass_time_s(s.draft.module, 4, 1, 500) == plain.pass_time_s(s.draft.module, 4, 1, 500)
    assert StepCosts(tuned, s.target, s.draft).prefill_s(2, 300, False) == \
        StepCosts(plain, s.target, s.draft).prefill_s(2, 300, False)


def test_the_per_request_fit_recovers_the_step_factors_that_made_the_requests():
    """Two plain runs whose every request's TPOT the simulator itself made, at step factors 1.3, 1.1 and 0.9 on the
    passes at batches 1, 2 and 4: fitted request by request from flat factors of 1, the knots come back."""
    from calibrate.bench_import import costs_with, fit_by_request, request_aligned
    from calibrate.bench_replay import request_tpots
    from scenarios.bench_files import BenchRun, Latency

    s = _setup()
    config = EngineConfig(max_batch=4)
    truth = ((1.0, 1.3), (2.0, 1.1), (4.0, 0.9))
    rng = np.random.default_rng(3)
    runs = []
    for rate in (0.5, 40.0):  # a light run (requests mostly alone) and a loaded one
        n = 40
        starts = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / rate, n - 1))])
        flat = Latency(np.nan, np.nan, np.nan)
        run = BenchRun(f"r{rate:g}", "guidellm", "-", rate, None, 1.0, 200, 64, n, n, False, 0, "m", 1.0, 1.0,
                       flat, flat, flat, input_lens=np.full(n, 200.0), output_lens=rng.integers(32, 96, n) * 1.0,
                       ttfts_s=np.zeros(n), start_s=starts, tpots_s=np.ones(n))
        made = request_tpots(run, costs_with(s, truth, 1.0), None, config, 0)
        runs.append(replace(run, tpots_s=made, tpot=Latency(np.nan, float(np.median(made)), np.nan)))
    assert request_aligned(runs)
    knots, said = fit_by_request(runs, config, ((1.0, 1.0), (4.0, 1.0)), 0, 4.0, lambda k: costs_with(s, k, 1.0))
    assert [b for b, _ in knots] == [1.0, 2.0, 4.0]
    assert [f for _, f in knots] == pytest.approx([f for _, f in truth], rel=0.03)
    assert "80 requests' TPOT" in said
