"""A few of `benchmarks/bad_inputs.py`'s cases, one or two of each kind (the script runs all of them): refused in one
line that says what to do, or answered with what the input means; never a traceback, never nonsense with exit 0."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bad_inputs", ROOT / "benchmarks" / "bad_inputs.py")
bad = importlib.util.module_from_spec(_spec)
sys.modules["bad_inputs"] = bad  # dataclasses look their module up there
_spec.loader.exec_module(bad)

# The issue's own examples (#54) and one of each kind of file.
CHOSEN = ("ngram:us_per_seq=nan", "ngram:us_per_seq=inf", "'mtp:2'", "eagle3:layers=2,layers=3", "{D}/unk",
          "{D}/moe0", "iid:0.6@context:1024=5", "eagle3:layers=100000", "steps_11d.csv", "m_dup.toml",
          "hf_noweights", "m_unknown.toml", "m_topkey.toml", "eagle3:layers=-1", "--batch '1..0'",
          "tensorrt:{D}/steps_ok.csv", "--tolerance nan", "--routing-skew nan", "--power-law-routing nan",
          "{D}/trunc.json",
          "--profile {D}/empty.json", "vllm:{D}/m_spec_nolen.toml", "{D}/w4096/qwen3-30b-a3b --draft eagle3",
          "--tp 4 --draft eagle3 --acceptance iid:0.7", "sw_badhw.toml", "trace:{D}/empty.csv",
          # #66: counters that contradict their run, settings that do not apply, a choice said, a wrong refusal
          "mb_k7.toml", "mb_twice.toml", "mb_nok.toml", "mb_plainmetrics.toml", "mb_llamak3.toml", "mb_allruns.toml",
          "--against {D}/mb_nofit.toml", "--draft eagle3 --acceptance iid:0.7 --expert-sharing 0.3",
          "--draft eagle3 --acceptance iid:0.7 --power-law-routing 1.2", "--dtype nvfp4", "--dtype fp8",
          "--engine ''", "--tp 3",
          # #68: a hardware file of one's own, absurd and misspelt
          "hw_absurd.toml", "hw_typo.toml")
CASES = [c for c in bad.cases() if any(s in c.command for s in CHOSEN)]


def test_the_list_is_long_and_each_kind_is_sampled_here():
    assert len(bad.cases()) >= 150
    assert len(CASES) >= len(CHOSEN)
    assert all(any(s in c.command for c in CASES) for s in CHOSEN)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    bad.write_files(d)
    return d


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.category}:{c.command[-48:]}")
def test_a_bad_input_is_answered_as_it_should(case, folder, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
    verdict, detail = bad.run_case(case, folder, 60)
    assert verdict == "ok", detail


def test_a_policy_ranges_why_agrees_with_its_loss_and_the_tolerance():
    """`policy --format json`: a range whose k is further from the best than the tolerance says so (and why), one
    within it says it is within (#54: 0.0248 beside a tolerance of 0.02 read 'the fastest k within the tolerance')."""
    import json

    from conftest import run

    for tolerance in ("1", "0"):
        r = run("policy", "--hardware", "h100-sxm", "--acceptance", "iid:0.6", "--context", "128", "--format", "json",
                "--tolerance", tolerance)
        record = json.loads(r.stdout)
        for rng in record["ranges"]:
            if rng["k"] == 0:
                continue
            beyond = rng["loss_vs_best_max"] > record["tolerance"] + 1e-12
            assert ("beyond the" in rng["why"]) == beyond, rng
            assert beyond or "within the tolerance" in rng["why"] or rng["why"] == "the fastest k", rng


def test_a_bench_manifests_choices_are_said_on_stderr_and_in_json(folder, monkeypatch):
    """#66: a manifest with no run marked fit = true is fitted on every run (validate --against refuses it), a rate
    over the file's and a target the files' model_id contradicts are said, on stderr and in --json's notes."""
    import json

    from click.testing import CliRunner

    from specsim import cli

    monkeypatch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
    manifest = folder / "mb_one.toml"
    manifest.write_text((folder / "mb_nofit.toml").read_text().replace("llama-3.1-8b", "qwen3-8b")
                        .replace("llama-3.2-1b", "qwen3-0.6b"))
    r = CliRunner().invoke(cli, ["calibrate", "--from", f"bench:{manifest}", "--json"], prog_name="specsim")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    for said in ("rate = 5/s from the manifest, over the file's 4/s", "names model 'meta-llama/Llama-3.1-8B-Instruct'",
                 "no run is marked fit = true, so every run is fitted (1 plain, 0 speculative)"):
        assert sum(said in n for n in notes) == 1, (said, notes)
        assert said in r.stderr
