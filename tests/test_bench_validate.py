"""`specsim calibrate --from bench:` and `specsim validate --against` on the vLLM and SGLang samples, end to end by
the documented commands, and the replay of a run's arrivals (calibrate/bench_*.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import calibrate.bench_import as bench_import
import calibrate.bench_replay as bench_replay
from scenarios.bench_files import read_file
from specsim import cli

SAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "samples" / "bench"


@pytest.fixture(autouse=True)
def few_seeds(monkeypatch):
    """Fewer acceptance and arrival draws per simulated run (the figures move by a percent or two, not more)."""
    monkeypatch.setattr(bench_replay, "SEEDS", 2)
    monkeypatch.setattr(bench_replay, "FIT_SEEDS", 1)
    monkeypatch.setattr(bench_import, "BISECTIONS", 7)


def test_calibrate_from_an_sglang_manifest_recovers_the_samples_acceptance(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["calibrate", "--from", f"bench:{SAMPLES / 'sglang-manifest.toml'}",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    profile = json.loads(out.read_text())  # a profile (calibrate/bench_profile.py); the fit's record in fit.bench
    fit = profile["fit"]["bench"]
    # the samples draw acceptance i.i.d. at 0.7 (benchmarks/bench_clients.py); SGLang's accept_length gives it back
    assert fit["acceptance"].startswith("iid:") and profile["acceptance_fitted"]["spec"] == fit["acceptance"]
    assert "accept_length" in profile["acceptance_fitted"]["from"]
    assert float(fit["acceptance"][4:]) == pytest.approx(0.7, abs=0.03)
    assert len(fit["knots"]) == 2 and all(0.5 < f < 2.0 for _, f in fit["knots"])
    assert "cross-validated by run" in result.output


def test_validate_against_a_vllm_manifest_judges_every_unfitted_run(tmp_path):
    result = CliRunner().invoke(cli, ["validate", "--against", str(SAMPLES / "vllm-manifest.toml"), "--plot",
                                      str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    rows = {r["label"]: r for r in report["rows"]}
    assert len(rows) == 7 and sum(r["fit"] for r in rows.values()) == 3
    judged = [r for r in rows.values() if not r["fit"]]
    # the samples' engine is not specsim's simulator, yet the fit on three runs predicts the other four closely
    assert np.median([abs(r["throughput"][2]) for r in judged]) < 0.05
    assert np.median([abs(r["tpot_p50_s"][2]) for r in judged]) < 0.10
    assert (tmp_path / "validation-serving.png").stat().st_size > 10_000


def test_validate_against_an_sglang_manifest_prints_the_table():
    result = CliRunner().invoke(cli, ["validate", "--against", str(SAMPLES / "sglang-manifest.toml")])
    assert result.exit_code == 0, result.output
    assert "TPOT p50 ms" in result.output and "goal (throughput within 5 %" in result.output
    assert result.output.count("sglang-bench-serving.jsonl#") >= 14  # every run read, then judged


def test_a_manifest_without_fit_runs_says_what_to_mark(tmp_path):
    text = (SAMPLES / "vllm-manifest.toml").read_text().replace("fit = true", "")
    (tmp_path / "m.toml").write_text(text.replace('file = "', f'file = "{SAMPLES}/')
                                     .replace('metrics = "', f'metrics = "{SAMPLES}/'))
    result = CliRunner().invoke(cli, ["validate", "--against", str(tmp_path / "m.toml")])
    assert result.exit_code == 2 and "fit = true" in result.output and "Traceback" not in result.output


def test_a_closed_loop_client_never_holds_more_than_its_concurrency():
    from calibrate.bench_replay import engine_config, replay_once
    from scenarios.setup import resolve_setup

    (run,) = read_file(str(SAMPLES / "vllm-plain-rate24.json"))
    base = resolve_setup("h100-sxm", None, "llama-3.1-8b", "llama-3.2-1b", "bf16", None, need_acceptance=False)
    costs = bench_replay.StepCosts(base.cost, base.target, base.draft)
    config = engine_config("vllm", 256, [run])
    closed = replace(run, rate_per_s=None, max_concurrency=4)
    four = replay_once(closed, costs, None, config, np.random.default_rng(0))
    paced = replay_once(run, costs, None, config, np.random.default_rng(0))
    assert four.mean_batch <= 4.0 + 1e-9 < paced.mean_batch
    # with four in flight and none queued in the engine, a request's TTFT is its prefill, not a wait
    assert four.ttft_p50_s < 2 * paced.ttft_p50_s
    one = replay_once(replace(run, rate_per_s=None, max_concurrency=1), costs, None, config,
                      np.random.default_rng(0))
    assert one.mean_batch == pytest.approx(1.0)
    assert one.throughput_tokens_per_s < four.throughput_tokens_per_s


def test_a_guidellm_report_is_replayed_at_its_own_send_times(tmp_path):
    """GuideLLM keeps every request's send time: the replay sends them then (constant 2/s: 0.5 s apart)."""
    from calibrate.bench_replay import paced_sends

    runs = read_file(str(SAMPLES / "guidellm-mock-server.json"))
    sends = paced_sends(runs[0], runs[0].completed, np.random.default_rng(0))
    assert np.allclose(sends, runs[0].start_s) and np.median(np.diff(sends)) == pytest.approx(0.5, rel=0.1)
    (tmp_path / "m.toml").write_text(f'[setup]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\nmax_batch = 4\n'
                                     f'[[run]]\nfile = "{SAMPLES / "guidellm-mock-server.json"}"\nindex = 1\n'
                                     f'fit = true\n[[run]]\nfile = "{SAMPLES / "guidellm-mock-server.json"}"\n'
                                     'index = 2\n')
    result = CliRunner().invoke(cli, ["validate", "--against", str(tmp_path / "m.toml")])
    assert result.exit_code == 0, result.output
    assert "guidellm-mock-server.json#2" in result.output and "goal (" in result.output


def test_a_client_that_sent_its_paced_run_as_a_burst_is_flagged_and_replayed_as_sent():
    """GuideLLM 0.8.1 sent a whole 1.13/s Poisson run's 24 requests within 0.08 s (its scheduler fell off its
    schedule): the table flags it, and the replay uses the send times, not the set rate. Ordinary Poisson gaps are
    not flagged: 2,000 draws of 24 requests, none."""
    from calibrate.bench_validate import off_pace_of

    run = read_file(str(SAMPLES / "guidellm-mock-server.json"))[0]
    assert run.start_s is not None and run.rate_per_s is not None
    rate, n = run.rate_per_s, 24

    def row(starts):
        r = replace(run, start_s=starts, requests=n)
        return {"paced": True, "rate_per_s": rate, "sent_span_s": r.sent_span_s, "requests": n}

    burst = np.linspace(0.0, 0.08, n)
    assert replace(run, start_s=burst).sent_rate_per_s == pytest.approx((n - 1) / 0.08)
    assert off_pace_of(row(burst))
    assert off_pace_of(row(np.arange(n) * 4.0 / rate))  # a client lagging 4x behind its schedule
    rng = np.random.default_rng(0)
    poisson = [np.concatenate([[0.0], np.cumsum(rng.exponential(1 / rate, n - 1))]) for _ in range(2000)]
    assert not any(off_pace_of(row(t)) for t in poisson)
    assert not off_pace_of(row(np.arange(n) / rate))
    sends = bench_replay.paced_sends(replace(run, start_s=burst), n, np.random.default_rng(0))
    assert sends.max() == pytest.approx(0.08)  # the replay sends the burst, not the schedule
