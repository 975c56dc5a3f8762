"""`specsim calibrate --from bench:MANIFEST.toml --out P.json` writes a profile (calibrate/bench_profile.py) that
predict, simulate and policy read: it prices what the fit replayed, its numbers move with the benchmark, its trust
follows the cross-validated error by run, and bad inputs stay one-line errors."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import calibrate.bench_import as bench_import
import calibrate.bench_replay as bench_replay
from scenarios.bench_files import read_manifest
from scenarios.profile import load_profile
from scenarios.setup import resolve_setup
from simulator.kernel_kinds import KernelTerms
from simulator.step_costs import StepCosts
from simulator.sweep import verify_times
from specsim import cli

SAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "samples" / "bench"
RUNS = (("vllm-plain-rate4.json", None, True), ("vllm-plain-rate24.json", None, True),
        ("vllm-spec-rate12.json", "vllm-spec-rate12.prom", True), ("vllm-plain-rate12.json", None, False))
SETUP = '[setup]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\ndraft = "llama-3.2-1b"\nengine = "vllm"\n' \
        'max_batch = 256\n'


@pytest.fixture(autouse=True)
def few_seeds(monkeypatch):
    """Fewer acceptance and arrival draws per simulated run (the figures move by a percent or two, not more)."""
    monkeypatch.setattr(bench_replay, "SEEDS", 2)
    monkeypatch.setattr(bench_replay, "FIT_SEEDS", 1)
    monkeypatch.setattr(bench_import, "BISECTIONS", 7)


def dilated(src: Path, dst: Path, slower: float) -> None:
    """A vllm bench serve result as it would read on an engine `slower` times slower, arrivals included: every
    time x slower, every rate / slower (the same queueing, stretched)."""
    d = json.loads(src.read_text())
    for key, v in list(d.items()):
        if key.endswith("_ms") and isinstance(v, (int, float)) or key in ("duration", "ttfts"):
            d[key] = [x * slower for x in v] if isinstance(v, list) else v * slower
        elif key.endswith("throughput") or key == "request_rate":
            d[key] = v / slower if isinstance(v, (int, float)) else v
        elif key == "itls":
            d[key] = [[x * slower for x in row] for row in v]
    dst.write_text(json.dumps(d))


def manifest(folder: Path, slower: float = 1.0, runs=RUNS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = SETUP
    for name, prom, fit in runs:
        dilated(SAMPLES / name, folder / name, slower)
        text += f'[[run]]\nfile = "{name}"\nfit = {"true" if fit else "false"}\n'
        if prom:
            shutil.copy(SAMPLES / prom, folder / prom)
            text += f'k = 3\nmetrics = "{prom}"\n'
    (folder / "m.toml").write_text(text)
    return folder / "m.toml"


def calibrate(m: Path, out: Path) -> str:
    result = CliRunner().invoke(cli, ["calibrate", "--from", f"bench:{m}", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """The samples as measured, and as an engine 1.3x slower would have measured them, calibrated."""
    mp = pytest.MonkeyPatch()
    mp.setattr(bench_replay, "SEEDS", 2)
    mp.setattr(bench_replay, "FIT_SEEDS", 1)
    mp.setattr(bench_import, "BISECTIONS", 7)
    root = tmp_path_factory.mktemp("bench-profiles")
    out = {}
    for name, slower in (("as-measured", 1.0), ("slower", 1.3)):
        m = manifest(root / name, slower)
        calibrate(m, root / f"{name}.json")
        out[name] = (m, root / f"{name}.json")
    yield out
    mp.undo()


def moe_manifest(folder: Path) -> Path:
    """The sample manifest with an MoE target (Qwen3-30B-A3B, drafted by Qwen3-0.6B): the h100-sxm preset prices its
    MoE layers with the fused-MoE kernel it measured (`KernelTerms`), not the dense roofline."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in SAMPLES.glob("vllm-*"):
        shutil.copy(f, folder / f.name)
    text = (SAMPLES / "vllm-manifest.toml").read_text()
    text = re.sub(r'^target = ".*"$', 'target = "qwen3-30b-a3b"', text, flags=re.M)
    text = re.sub(r'^draft = ".*"$', 'draft = "qwen3-0.6b"', text, flags=re.M)
    (folder / "m.toml").write_text(text)
    return folder / "m.toml"


@pytest.mark.parametrize("case", ["dense", "moe"])
def test_the_profile_prices_what_the_fit_replayed(profiles, case, tmp_path):
    """Every fit run replayed on the profile's own step costs gives the figures the fit reported for it: the
    profile carries the base preset's formula (its kernel kinds and routing among it), the step factors, the
    prefill factor and the acceptance whole."""
    if case == "dense":
        m, path = profiles["as-measured"]
        target, draft, runs = "llama-3.1-8b", "llama-3.2-1b", {n for n, _, f in RUNS if f}
    else:
        m, path = moe_manifest(tmp_path), tmp_path / "moe.json"
        calibrate(m, path)
        target, draft, runs = "qwen3-30b-a3b", "qwen3-0.6b", {r.label for r in read_manifest(m).fit_runs}
    profile = load_profile(path)
    setup = resolve_setup(None, path, None, None, "bf16", None)
    assert setup.acceptance.spec == profile.fitted_acceptance["spec"]
    assert "counters" in profile.fitted_acceptance["from"]
    bench = profile.fit.extra["bench"]
    assert bench["manifest"] == str(m) and {r["label"] for r in bench["runs"]} == runs
    assert bench["tools"] == {"vllm": "not in its files (give tool_version = \"...\" in the manifest's [[run]])"}
    # the base preset with the fit's factors, pass by pass
    base = resolve_setup("h100-sxm", None, target, draft, "bf16", None, need_acceptance=False)
    fitted = bench_import.costs_with(base, [tuple(k) for k in bench["knots"]], bench["prefill_scale"],
                                     [tuple(k) for k in bench["spec_knots"]])
    for model in (setup.target, setup.draft.module):
        for b, n, c in ((1, 1, 600), (3, 4, 600), (25, 1, 2000), (256, 4, 100), (1, 512, 0)):
            assert setup.cost.pass_time_s(model, b, n, c) == pytest.approx(fitted.cost.pass_time_s(model, b, n, c),
                                                                          rel=1e-12)
    # the verification passes' own factor, fitted to the speculative runs and carried whole
    assert bench["spec_knots"] and setup.cost.spec_drift == fitted.cost.spec_drift
    for b in (1, 3, 25, 256):
        assert verify_times(setup.cost, setup.target, np.array([b]), 4, 600)[0] == pytest.approx(
            verify_times(fitted.cost, fitted.target, np.array([b]), 4, 600)[0], rel=1e-12)
    assert setup.cost.kernels == base.cost.kernels and base.cost.kernels.moe
    costs = StepCosts(setup.cost, setup.target, setup.draft)
    assert costs.prefill_s(1, 560, False) == pytest.approx(fitted.prefill_s(1, 560, False), rel=1e-12)
    config = bench_replay.engine_config("vllm", 256, read_manifest(m).runs)
    for row, run in zip(bench["in_sample"], read_manifest(m).fit_runs):
        sim = bench_replay.replay(run, costs, setup.acceptance, config, bench["seed"])
        assert sim.tpot_p50_s == pytest.approx(row["tpot_p50_s"][1], rel=1e-9)
        assert sim.throughput_tokens_per_s == pytest.approx(row["throughput"][1], rel=1e-9)


def test_trust_follows_the_cross_validated_runs(profiles):
    profile = load_profile(profiles["as-measured"][1])
    h = profile.fit.heldout
    # two plain fit runs, each predicted by the fit to the other: throughput and TPOT p50 of each
    assert h.n == 4 and {p["run"] for p in h.points} == {"vllm-plain-rate4.json", "vllm-plain-rate24.json"}
    assert profile.trust.trusted == (h.median_abs_err <= 0.07 and h.p90_abs_err <= 0.20 and h.max_abs_err <= 0.25)
    assert "held-out run error median" in profile.describe()


def test_one_plain_fit_run_holds_nothing_out_and_is_not_trusted(tmp_path):
    runs = (RUNS[0], (RUNS[1][0], None, False))
    out = calibrate(manifest(tmp_path, runs=runs), tmp_path / "one.json")
    assert "UNTRUSTED (nothing held out" in out
    result = CliRunner().invoke(cli, ["predict", "--profile", str(tmp_path / "one.json"), "--acceptance", "iid:0.7",
                                      "--batch", "1,8"])
    assert result.exit_code == 0, result.output
    assert "UNTRUSTED (nothing held out" in result.output


def _predicted_tokens_per_s(path: Path) -> dict[int, float]:
    result = CliRunner().invoke(cli, ["predict", "--profile", str(path), "--batch", "1,16,64", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output[result.output.index("{"):])["rows"]
    return {r["batch"]: r["batch"] / r["baseline_time_s"] for r in rows if r["k"] == 0}


def test_a_slower_measured_engine_predicts_fewer_tokens_per_second(profiles):
    fast = _predicted_tokens_per_s(profiles["as-measured"][1])
    slow = _predicted_tokens_per_s(profiles["slower"][1])
    for batch in (1, 16, 64):
        # 1.3x every measured time: the fitted steps 1.3x longer, so 1/1.3 the tokens per second (within the fit's
        # per-step costs, which the base prices and the factor does not scale)
        assert slow[batch] < fast[batch]
        assert slow[batch] / fast[batch] == pytest.approx(1 / 1.3, rel=0.08)


def _simulated(path: Path) -> dict[str, dict]:
    result = CliRunner().invoke(cli, ["simulate", "--profile", str(path), "--rate", "12", "--requests", "60",
                                      "--prompt-tokens", "560", "--output-tokens", "96", "--policy", "off,fixed:3",
                                      "--json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.output[result.output.index("{"):])["runs"]
    return {r["policy"]: r for r in runs}


def test_simulate_on_the_profile_moves_with_the_benchmark(profiles):
    fast = _simulated(profiles["as-measured"][1])
    slow = _simulated(profiles["slower"][1])
    for policy in ("off", "fixed:3"):
        assert slow[policy]["tpot_s"]["p50"] > 1.15 * fast[policy]["tpot_s"]["p50"]
        assert slow[policy]["ttft_s"]["p50"] > fast[policy]["ttft_s"]["p50"]
    # the measured plain run at 12/s (never fitted on): its TPOT p50 within 10 % of the profile's simulation
    measured = json.loads((SAMPLES / "vllm-plain-rate12.json").read_text())["median_tpot_ms"] / 1e3
    assert fast["off"]["tpot_s"]["p50"] == pytest.approx(measured, rel=0.10)
    # speculation shortens TPOT with the fitted acceptance
    assert fast["fixed:3"]["tpot_s"]["p50"] < fast["off"]["tpot_s"]["p50"]


def test_policy_reads_the_profile(profiles):
    result = CliRunner().invoke(cli, ["policy", "--profile", str(profiles["as-measured"][1])])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("["):])[0][0] == 1
    # its batches past the runs' are past the benchmark's runs, not past passes the profile measured
    assert "lies past the benchmark runs the profile was fitted to (batches up to" in result.output
    assert "past what the profile measured" not in result.output


def test_the_notes_say_a_benchmark_fitted_the_profile_and_which_models_take_no_factor(profiles):
    """Nothing was measured on a device: the note says which benchmark the profile was fitted to; another target
    is priced on the profile's formula without a step factor (the fit's are of its own models), and says so."""
    m, path = profiles["as-measured"]
    result = CliRunner().invoke(cli, ["predict", "--profile", str(path), "--batch", "1"])
    assert result.exit_code == 0, result.output
    assert f"was fitted to a serving benchmark ({m}) of llama-3.1-8b on h100-sxm, not measured" in result.output
    assert "measured on another machine" not in result.output
    result = CliRunner().invoke(cli, ["predict", "--profile", str(path), "--target", "qwen3-30b-a3b", "--draft",
                                      "qwen3-0.6b", "--acceptance", "iid:0.7", "--batch", "1"])
    assert result.exit_code == 0, result.output
    assert "qwen3-30b-a3b and qwen3-0.6b take no step factor (the serving benchmark it was fitted to measured " \
           "llama-3.1-8b and llama-3.2-1b)" in result.output


def test_bad_benchmarks_and_bad_profiles_are_one_line_errors(tmp_path, profiles):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "m.toml").write_text(SETUP + '[[run]]\nfile = "empty.json"\nfit = true\n')
    result = CliRunner().invoke(cli, ["calibrate", "--from", f"bench:{tmp_path / 'm.toml'}", "--out",
                                      str(tmp_path / "p.json")])
    assert result.exit_code == 2 and "empty.json" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "p.json").exists()
    d = json.loads(profiles["as-measured"][1].read_text())
    # older specsims refuse it rather than price without its factors: 4 for the speculative step's, 3 without it
    assert d["schema_version"] == 4 and d["fit"]["spec_drift"]
    no_spec = load_profile(profiles["as-measured"][1])
    no_spec = replace(no_spec, fit=replace(no_spec.fit, spec_drift=()))
    assert no_spec.to_dict()["schema_version"] == 3
    d["fit"]["drift"]["llama-3.1-8b"] = [[4, -1.0]]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    result = CliRunner().invoke(cli, ["predict", "--profile", str(tmp_path / "bad.json")])
    assert result.exit_code == 2 and "fit.drift of llama-3.1-8b" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_profile_without_a_benchmarks_fields_writes_schema_2(profiles):
    """A calibration without the benchmark's fields keeps schema 2 (older specsims read it) and prices without a
    drift or a prefill factor."""
    profile = load_profile(profiles["as-measured"][1])
    plain = replace(profile, fit=replace(profile.fit, drift={}, spec_drift=(), prefill_scale=1.0,
                                         linear_ridge_p=None), fitted_acceptance={})
    assert plain.to_dict()["schema_version"] == 2 and "drift" not in plain.to_dict()["fit"]
    assert not plain.cost_model().drift and plain.cost_model().prefill_scale == 1.0
    assert np.isfinite(plain.cost_model().pass_time_s(plain.target, 8, 1, 512))


def test_a_profile_as_the_base_gives_the_same_fit_as_its_preset(profiles, tmp_path):
    """The manifest's [setup] may name a profile: calibrated on the profile the preset's fit wrote, the same runs
    give the same factors (they are over the base's formula and replace its drift, not multiply it)."""
    m, path = profiles["as-measured"]
    text = m.read_text().replace('hardware = "h100-sxm"', f'profile = "{path}"')
    text = re.sub(r'^(file|metrics) = "', lambda g: f'{g[1]} = "{m.parent}/', text, flags=re.M)
    (tmp_path / "m.toml").write_text(text)
    calibrate(tmp_path / "m.toml", tmp_path / "again.json")
    first, again = load_profile(path), load_profile(tmp_path / "again.json")
    assert again.fit.extra["base_profile"] == str(path)
    for model, knots in first.fit.drift.items():
        assert np.allclose(again.fit.drift[model], knots, rtol=1e-9)
    assert again.fit.prefill_scale == pytest.approx(first.fit.prefill_scale, rel=1e-9)
    assert again.fitted_acceptance == first.fitted_acceptance


def test_the_tools_versions_come_from_their_files_or_the_manifest(tmp_path):
    from calibrate.bench_profile import tool_versions
    from scenarios.bench_files import read_file

    guidellm = read_file(str(SAMPLES / "guidellm-mock-server.json"))
    aiperf = read_file(str(SAMPLES / "aiperf-mock" / "profile_export_aiperf.json"))
    assert {r.tool_version for r in guidellm} == {"0.8.1"} and aiperf[0].tool_version == "0.13.0"
    assert tool_versions([*guidellm, *aiperf]) == {"aiperf": "0.13.0", "guidellm": "0.8.1"}
    (tmp_path / "m.toml").write_text(SETUP + f'[[run]]\nfile = "{SAMPLES / "vllm-plain-rate4.json"}"\n'
                                             'tool_version = "0.11.0"\n')
    assert tool_versions(read_manifest(tmp_path / "m.toml").runs) == {"vllm": "0.11.0"}


def test_predictions_past_the_benchmarks_runs_are_marked(profiles):
    """The runs held batches up to about 25 at contexts up to about 620: a prediction past them extrapolates the
    fitted factor and says so, as one past a calibration's passes does."""
    reach = load_profile(profiles["as-measured"][1]).fit.reach
    assert 20 <= reach[0] <= 30 and reach[1] >= reach[0] and 550 <= reach[2] <= 700
    result = CliRunner().invoke(cli, ["predict", "--profile", str(profiles["as-measured"][1]), "--batch", "1,64",
                                      "--k", "0..3", "--context", "512", "--json"])
    rows = json.loads(result.output[result.output.index("{"):])["rows"]
    assert all(not r["extrapolated"] for r in rows if r["batch"] == 1)
    assert all(r["extrapolated"] and "batch" in r["extrapolated_in"] for r in rows if r["batch"] == 64)
    text = CliRunner().invoke(cli, ["predict", "--profile", str(profiles["as-measured"][1]), "--batch", "1,64",
                                    "--k", "0..3", "--context", "512"]).output
    assert "^ past the benchmark runs the profile was fitted to (batches up to" in text


def test_a_profile_with_another_engine_keeps_its_presets_kernel_kinds_and_interconnect():
    """`predict --profile FILE --engine vllm` prices the profiled device with the preset's measured kernel kinds
    (an MoE target's fused-MoE kernel) and interconnect, as `--hardware` does."""
    from scenarios import load_hardware, load_model
    from simulator.cost import CostModel

    profile = load_profile(SAMPLES.parent / "h200-graph" / "real-profile.json")
    hw, preset = profile.device_preset("vllm"), load_hardware("h200", "vllm")
    assert hw.kernels == preset.kernels and hw.kernels.moe and hw.interconnect == preset.interconnect
    moe = load_model("qwen3-30b-a3b", "bf16")
    without = CostModel.from_hardware(replace(hw, kernels=KernelTerms()), "bf16")
    assert CostModel.from_hardware(hw, "bf16").pass_time_s(moe, 1, 1, 1024) != without.pass_time_s(moe, 1, 1, 1024)


def test_figures_a_tools_file_lacks_are_null_in_the_profile(tmp_path):
    """vllm bench serve results without the ITL fields: the profile is still JSON (no NaN), those figures null."""
    m = manifest(tmp_path)
    for name, _, _ in RUNS:
        d = json.loads((tmp_path / name).read_text())
        (tmp_path / name).write_text(json.dumps({k: v for k, v in d.items() if "itl" not in k}))
    calibrate(m, tmp_path / "p.json")
    d = json.loads((tmp_path / "p.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the profile"))
    assert all(r["itl_p50_s"] is None for r in d["fit"]["bench"]["runs"])
    assert load_profile(tmp_path / "p.json").fit.drift


def test_a_profiles_stored_routing_holds_unless_a_flag_replaces_it(profiles, tmp_path):
    """A profile fitted over an MoE routing keeps pricing with it when predict names no routing (the CLI's defaults
    once reset it to uniform); --routing-skew or --power-law-routing given replaces both."""
    d = json.loads(profiles["as-measured"][1].read_text())
    d["fit"]["routing"] = {"skew": 0.0, "power_law": 1.2}
    path = tmp_path / "routed.json"
    path.write_text(json.dumps(d))
    kept = resolve_setup(None, path, None, None, "bf16", None).cost
    assert (kept.routing_power_law, kept.routing_skew) == (1.2, 0.0)
    skewed = resolve_setup(None, path, None, None, "bf16", None, routing_skew=0.8).cost
    assert (skewed.routing_power_law, skewed.routing_skew) == (0.0, 0.8)
    uniform = resolve_setup(None, path, None, None, "bf16", None, power_law_routing=0.0).cost
    assert (uniform.routing_power_law, uniform.routing_skew) == (0.0, 0.0)
