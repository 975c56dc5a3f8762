"""Serving-benchmark result files: what the readers recover, what a manifest supplies, and bad files as one-line
errors (scenarios/bench_files.py; samples in scenarios/samples/bench/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from scenarios.bench_files import detect_tool, read_file, read_manifest
from simulator import SpecsimError

SAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "samples" / "bench"
VLLM = SAMPLES / "vllm-plain-rate12.json"


def test_vllm_serve_run_settings_and_percentiles_agree_with_its_own_requests():
    (run,) = read_file(str(VLLM))
    assert run.tool == "vllm" and run.rate_per_s == 12.0 and run.burstiness == 1.0 and run.max_concurrency is None
    assert run.requests == run.completed == 100 and run.model.endswith("Llama-3.1-8B-Instruct")
    assert run.per_request and len(run.input_lens) == 100 and len(run.itls_s) == 100
    # The summary's TPOT p50 is the median of (latency - TTFT) / (output - 1) over the requests it keeps.
    e2e = run.ttfts_s + np.array([g.sum() for g in run.itls_s])
    tpot = (e2e - run.ttfts_s) / (run.output_lens - 1)
    assert np.median(tpot) == pytest.approx(run.tpot.p50_s, rel=1e-3)
    assert run.throughput_tokens_per_s == pytest.approx(run.output_lens.sum() / run.duration_s, rel=1e-6)


def test_sglang_lines_are_runs_and_the_manifest_supplies_the_request_count(tmp_path):
    runs = read_file(str(SAMPLES / "sglang-bench-serving.jsonl"))
    assert [r.rate_per_s for r in runs] == [4, 12, 24, 40, 4, 12, 24]
    assert runs[4].accept_length and runs[4].accept_length > 1 and runs[0].accept_length is None
    m = read_manifest(SAMPLES / "sglang-manifest.toml")
    assert all(r.requests == 100 for r in m.runs)
    assert [r.k for r in m.runs] == [0, 0, 0, 0, 3, 3, 3]
    assert {r.label for r in m.fit_runs} == {"sglang-bench-serving.jsonl#1", "sglang-bench-serving.jsonl#3",
                                             "sglang-bench-serving.jsonl#6"}


def _manifest(tmp_path: Path, body: str, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "m.toml").write_text(body)
    return tmp_path / "m.toml"


def test_missing_settings_name_the_manifest_field(tmp_path):
    line = (SAMPLES / "sglang-bench-serving.jsonl").read_text().splitlines()[0]
    d = json.loads(line)
    for key in ("random_input_len", "total_input_tokens"):
        d.pop(key)
    path = _manifest(tmp_path, '[[run]]\nfile = "s.jsonl"\nrequests = 100\n', {"s.jsonl": json.dumps(d)})
    with pytest.raises(SpecsimError, match="give input_len = N"):
        read_manifest(path)
    path = _manifest(tmp_path, '[[run]]\nfile = "s.jsonl"\n', {"s.jsonl": line})
    with pytest.raises(SpecsimError, match="give requests = N"):
        read_manifest(path)
    path = _manifest(tmp_path, '[[run]]\nfile = "s.jsonl"\nrequests = 100\nspeculative = true\n', {"s.jsonl": line})
    with pytest.raises(SpecsimError, match="give k = N"):
        read_manifest(path)


def test_a_newer_file_with_unknown_fields_still_reads(tmp_path):
    d = json.loads(VLLM.read_text())
    d.update({"a_field_from_2027": [1, 2, 3], "nested": {"x": None}})
    (tmp_path / "new.json").write_text(json.dumps(d))
    (run,) = read_file(str(tmp_path / "new.json"))
    assert run.completed == 100


def _bad_files(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (text, what the one-line error says)."""
    good = json.loads(VLLM.read_text())
    zero = dict(good, completed=0, failed=100)
    negative = dict(good)
    negative["ttfts"] = [-0.5] + good["ttfts"][1:]
    neg_summary = dict(good, median_tpot_ms=-3.0)
    latency = (Path(__file__).resolve().parents[1] / "scenarios" / "samples" / "vllm" /
               "latency_b1_in512_out128.json").read_text()
    return {"empty.json": ("", "empty"),
            "truncated.json": (VLLM.read_text()[:5000], "cut short"),
            "latency.json": (latency, "not a result of"),
            "csv.json": ("batch,new_tokens,context,step_ms\n1,1,128,9.1\n", "not JSON"),
            "zero.json": (json.dumps(zero), "no request succeeded"),
            "negative.json": (json.dumps(negative), "negative latency"),
            "negative-summary.json": (json.dumps(neg_summary), "median_tpot_ms"),
            }


def test_bad_files_are_one_line_errors(tmp_path):
    for name, (text, says) in _bad_files(tmp_path).items():
        (tmp_path / name).write_text(text)
        with pytest.raises(SpecsimError, match=says) as e:
            read_file(str(tmp_path / name))
        assert "\n" not in str(e.value), name


def test_bad_files_through_the_cli_exit_2_without_a_traceback(tmp_path):
    from click.testing import CliRunner

    from specsim import cli

    shutil.copy(SAMPLES / "vllm-plain-rate4.json", tmp_path / "ok.json")
    for name, (text, says) in _bad_files(tmp_path).items():
        (tmp_path / name).write_text(text)
        (tmp_path / "m.toml").write_text('[setup]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\n'
                                         f'[[run]]\nfile = "ok.json"\nfit = true\n[[run]]\nfile = "{name}"\n'
                                         'tool = "vllm"\n')
        result = CliRunner().invoke(cli, ["validate", "--against", str(tmp_path / "m.toml")])
        assert result.exit_code == 2, (name, result.output)
        assert "Traceback" not in result.output and says.split()[0] in result.output, (name, result.output)


def test_tools_are_told_apart():
    assert detect_tool(str(VLLM)) == "vllm"
    assert detect_tool(str(SAMPLES / "sglang-bench-serving.jsonl")) == "sglang"


def test_a_guidellm_report_is_one_run_per_benchmark():
    """A real report: GuideLLM 0.8.1 against its own mock server (ttft 40 ms, itl 8 ms, 4 requests at a time),
    constant rates 2 and 6/s, 12 requests each."""
    runs = read_file(str(SAMPLES / "guidellm-mock-server.json"))
    assert detect_tool(str(SAMPLES / "guidellm-mock-server.json")) == "guidellm"
    assert [r.rate_per_s for r in runs] == [2.0, 6.0] and all(np.isinf(r.burstiness) for r in runs)
    assert all(r.completed == r.requests == 12 and r.per_request for r in runs)
    # the mock's 40 ms first token and 8 ms a token, plus the client's and the server's own time
    assert all(0.04 <= r.ttft.p50_s < 0.2 and 0.008 <= r.tpot.p50_s < 0.05 for r in runs)
    assert runs[0].start_s[0] == 0 and np.all(np.diff(runs[0].start_s) >= 0)


def test_aiperf_summary_and_records_agree(tmp_path):
    """A real export: AIPerf 0.13.0 against GuideLLM's mock server, Poisson 2/s, 10 requests."""
    (summary,) = read_file(str(SAMPLES / "aiperf-mock" / "profile_export_aiperf.json"))
    (records,) = read_file(str(SAMPLES / "aiperf-mock" / "profile_export.jsonl"))
    assert summary.tool == records.tool == "aiperf" and summary.rate_per_s == 2.0 and summary.burstiness == 1.0
    assert summary.per_request and summary.completed == 10
    assert records.ttft.p50_s == pytest.approx(summary.ttft.p50_s, rel=1e-6)
    assert records.tpot.p50_s == pytest.approx(summary.tpot.p50_s, rel=0.02)
    # the records alone hold no pacing: a manifest must say it
    path = SAMPLES / "aiperf-mock" / "profile_export.jsonl"
    with pytest.raises(SpecsimError, match="give rate = R or max_concurrency = N"):
        read_manifest(_manifest(tmp_path, f'[[run]]\nfile = "{path}"\n', {}))


def test_aiperf_runs_of_one_manifest_are_told_apart_by_their_folders(tmp_path):
    """AIPerf writes profile_export_aiperf.json into every run's artifact folder: two runs in one manifest are two
    runs (labelled by folder), not one run named twice; the same file twice still is."""
    for name in ("aiperf-rate1", "aiperf-rate2"):
        shutil.copytree(SAMPLES / "aiperf-mock", tmp_path / name)
    manifest = tmp_path / "m.toml"
    manifest.write_text('[setup]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\n\n'
                        + "".join(f'[[run]]\nfile = "{n}/profile_export_aiperf.json"\n\n'
                                  for n in ("aiperf-rate1", "aiperf-rate2")))
    labels = [r.label for r in read_manifest(manifest).runs]
    assert labels == ["aiperf-rate1/profile_export_aiperf.json", "aiperf-rate2/profile_export_aiperf.json"]
    manifest.write_text(manifest.read_text().replace("aiperf-rate2/", "aiperf-rate1/"))
    with pytest.raises(SpecsimError, match="named twice"):
        read_manifest(manifest)
