"""The CUDA-graph engine's first runs on a GPU (one H200, 2026-12-04, `benchmarks/gpu_check.sh`; the files and how
they were made: scenarios/samples/h200-graph/README.md), priced again by today's cost model.

The runs are stored measurements; the predictions are recomputed from the stored profiles. A change to the cost
model, the acceptance models or the fit that moves these predictions away from what the GPU measured fails here,
on a machine without a GPU."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line_error, run

from calibrate.validate import PRIMARY, SpotCheck, compare
from scenarios.profile import load_profile
from simulator.acceptance_parse import parse_acceptance
from simulator.trees import parse_branching
from simulator.validation import MeasuredConfig

RUNS = Path(__file__).resolve().parent.parent / "scenarios" / "samples" / "h200-graph"


@functools.cache  # each run priced once for the tests that read it
def repriced(profile_name: str, validation_name: str, lease: str = "h200-graph"):
    runs = RUNS.parent / lease
    profile = load_profile(runs / profile_name)
    stored = json.loads((runs / validation_name).read_text())
    settings = stored["settings"]
    measured = [MeasuredConfig.from_dict(r["measured"]) for r in stored["rows"]]
    forced = parse_acceptance(settings["acceptance"]) if "acceptance" in settings else None
    spot = SpotCheck.from_dict(stored["spot_check"]) if stored["spot_check"] else None
    report = compare(profile, measured, [parse_branching(t) for t in settings.get("trees", [])], stored["context"],
                     settings["batches"], settings, spot, forced)
    return profile, stored, report


@pytest.mark.parametrize("profile_name, validation_name, p90_bar", [
    ("builtin-profile.json", "validate.json", 0.12),  # the built-in pair, batch 1..64, k 1, 2, 4, 6, tree 2,2,1
    ("real-profile.json", "validate-shapes.json", 0.12),  # Llama-3.1-8B / 3.2-1B shapes, EAGLE-3 acceptance replayed
])
def test_the_h200_runs_are_predicted_within_the_bars(profile_name, validation_name, p90_bar):
    profile, stored, report = repriced(profile_name, validation_name)
    assert profile.engine_mode == "graph" and "H200" in profile.device.name
    errors = [abs(r.predicted[PRIMARY].err_speedup) for r in report.rows]
    assert len(errors) == len(stored["rows"]) >= 9
    summary = report.predictors[PRIMARY]
    assert summary.median_abs_err_speedup <= 0.05
    assert summary.p90_abs_err_speedup <= p90_bar
    # ... and the calibrated fit is what carries it: the datasheet roofline misses these runs by far more
    assert report.predictors["roofline"].median_abs_err_speedup > 4 * summary.median_abs_err_speedup


@pytest.mark.parametrize("lease", ["h200-graph", "h200-graph-2", "h200-graph-3"])
def test_repricing_reproduces_what_the_gpu_run_reported(lease):
    """Today's model prices the stored runs as the run itself did (to 1 %): a drift here means the cost model
    changed under a measured GPU, and the validation figures in docs/gpu.md need measuring again. (The second
    lease's built-in validation missed by more, 6.6 % / 17.8 %: it is kept as it was measured, docs/gpu.md.)"""
    for profile_name, validation_name in [("builtin-profile.json", "validate.json"),
                                          ("real-profile.json", "validate-shapes.json")]:
        _, stored, report = repriced(profile_name, validation_name, lease)
        for row, then in zip(report.rows, stored["rows"], strict=True):
            assert row.predicted[PRIMARY].speedup == pytest.approx(then["predicted"][PRIMARY]["speedup"], rel=0.01)


def test_the_graph_engine_is_the_gpu_engine_the_essay_describes():
    """Read off the stored 8B profile (its fit, checked against its own measured passes): at batch 1 a verify pass of
    5 tokens costs little more than one token's (weight reads bound it; the eager engine before it did not show
    this on this GPU, docs/gpu.md); at batch 256 the 1,280 rows are compute-bound at a short context (2.85x one
    token's, measured) and less so at a long one, where the KV-cache reads that one token pays too dominate (1.84x):
    the essay's arbitrage, lost with the batch and returning with the context."""
    profile = load_profile(RUNS / "real-profile.json")
    cost = profile.cost_model()

    def verify_over_plain(batch: int, context: int) -> float:
        return cost.pass_time_s(profile.target, batch, 5, context) / cost.pass_time_s(profile.target, batch, 1, context)

    assert verify_over_plain(1, 1024) < 1.3
    assert verify_over_plain(256, 128) > 2.5
    assert 1.3 < verify_over_plain(256, 1024) < verify_over_plain(256, 128) - 0.5
    measured = {(r.batch, r.new_tokens, r.context): r.median_s for r in profile.timed
                if r.model == profile.target.name}
    for batch, context in [(1, 1024), (256, 128), (256, 1024)]:
        ratio = measured[(batch, 5, context)] / measured[(batch, 1, context)]
        assert verify_over_plain(batch, context) == pytest.approx(ratio, rel=0.12)


def test_the_profiled_device_with_vllms_costs_is_the_h200_preset():
    """The H200 as calibrated through specsim's engine, priced with vLLM's per-step costs and the H200 preset's
    per-layer floor (`predict --profile FILE --engine vllm`), against the H200 preset (vLLM 0.24's kernels as
    AIConfigurator measured them): within 20 % on every pass from batch 1 to 256 (measured: 6-18 % above, the
    worst the 8B at batch 64, one token). Two measurements of one GPU disagree here: the profile's skinny GEMMs
    streamed weights at 0.62-0.70 of the datasheet, vLLM's GEMMs in AIConfigurator's tables at 0.835 with the floor
    beside them, so the profile prices the 8B pass at batch 1 13.9 % above the preset (docs/kernels.md, Gaps). The
    profile's own engine, unfused and launch bound, runs the 8B pass 1.30x and the 1B draft's 1.81x slower at batch 1
    than with vLLM's costs (1.48x and 1.98x the preset's: vLLM's kernels pay a floor a layer too), which is why its
    speed-ups differ."""
    from scenarios import load_hardware
    from simulator.cost import CostModel

    profile = load_profile(RUNS / "real-profile.json")
    with_vllm = CostModel.from_hardware(profile.device_preset("vllm"), "bf16")
    preset = CostModel.from_hardware(load_hardware("h200", "vllm"), "bf16")
    own = profile.cost_model()
    for model in (profile.target, profile.draft):
        for batch in (1, 8, 64, 256):
            for n in (1, 5):
                ours, theirs = with_vllm.pass_time_s(model, batch, n, 1024), preset.pass_time_s(model, batch, n, 1024)
                assert ours == pytest.approx(theirs, rel=0.20)
    assert own.pass_time_s(profile.target, 1, 1, 1024) > 1.2 * with_vllm.pass_time_s(profile.target, 1, 1, 1024)
    assert own.pass_time_s(profile.draft, 1, 1, 1024) > 1.6 * with_vllm.pass_time_s(profile.draft, 1, 1, 1024)
    hw = profile.device_preset("vllm")
    assert hw.overheads == load_hardware("h200", "vllm").overheads
    assert hw.mem_bw_bytes_per_s == profile.micro.read_bytes_per_s  # measured, not the datasheet's 4.8 TB/s


def test_predict_names_the_engine_it_prices():
    common = ["predict", "--profile", str(RUNS / "real-profile.json"), "--acceptance", "iid:0.7", "--batch", "1",
              "--k", "0..4", "--context", "1024", "--json"]
    own, vllm = run(*common), run(*common, "--engine", "vllm")
    assert own.exit_code == 0 and vllm.exit_code == 0, own.output + vllm.output
    own_d, vllm_d = (json.loads(r.stdout) for r in (own, vllm))
    assert own_d["engine"] == "graph" and vllm_d["engine"] == "vllm preset on the profiled device"
    assert "--engine vllm: the device's measured rates" in vllm.stderr
    # 1.09x as calibrated (specsim's engine), 1.49x with vLLM's costs (the h200 preset says 1.46x)
    assert own_d["best"][0]["speedup"] < 1.15 < 1.4 < vllm_d["best"][0]["speedup"]
    one_line_error(run(*common, "--engine", "nope"), "unknown engine 'nope'")


@pytest.mark.parametrize("profile_name, median_bar", [("builtin-profile.json", 0.02), ("real-profile.json", 0.02)])
def test_the_quick_grid_leaves_out_what_its_neighbours_price(profile_name, median_bar):
    """The quick grid measures 1, 2, 3, 5 and 8 new tokens (`Grid.default`): on the H200 profiles, which measured
    every count from 1 to 8, the passes of 4, 6 and 7 tokens are priced from the others (fit again without them,
    measured passes anchoring the shapes between) within 2 % median. (A quick CPU profile: 2.0 %, p90 3.8 %.)"""
    from dataclasses import replace

    from calibrate.calibration import Grid, probe_spec
    from simulator.rate_fit import PassPoint, fit_cost_model, monotone_times

    assert Grid.default(quick=True).target_new_tokens == (1, 2, 3, 5, 8)
    profile = load_profile(RUNS / profile_name)
    specs = {m.name: m for m in (profile.target, profile.draft, probe_spec(profile.target, 1),
                                 probe_spec(profile.target, 8))}
    points = [PassPoint(q.model, q.batch, q.new_tokens, q.context, q.median_s) for q in profile.timed]
    left_out = [q for q in points if q.model == profile.target.name and q.new_tokens in (4, 6, 7)]
    kept = [q for q in points if q not in left_out and q.model in specs]
    micro, dtype = profile.micro, profile.target.dtype
    fit = fit_cost_model(kept, specs, micro.hardware(profile.device.name, profile.device.memory_bytes),
                         micro.flops(dtype), micro.read_bytes_per_s, dtype)
    full = profile.cost_model()
    cost = replace(full, linear_rates=fit.cost.linear_rates, attention_rates=fit.cost.attention_rates,
                   overheads=replace(fit.cost.overheads, engine=full.overheads.engine),
                   measured=monotone_times({(q.model, q.batch, q.new_tokens, q.context): q.time_s for q in kept
                                            if q.model in (profile.target.name, profile.draft.name)}))
    errors = [abs(cost.pass_time_s(profile.target, q.batch, q.new_tokens, q.context) / q.time_s - 1)
              for q in left_out]
    assert len(errors) >= 40 and float(np.median(errors)) < median_bar


def test_an_imported_profile_has_no_device_for_another_engine(tmp_path):
    """A profile imported from an engine's step times (`calibrate --from`) carries a preset's datasheet, not a
    measured device: pricing it with another engine's costs is refused in one line, with what to do instead."""
    out = tmp_path / "vllm.json"
    r = run("calibrate", "--from", "vllm:scenarios/samples/vllm/manifest.toml", "--hardware", "h100-sxm",
            "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--out", str(out))
    assert r.exit_code == 0, r.output
    bad = run("predict", "--profile", str(out), "--engine", "gpt-fast", "--acceptance", "iid:0.7", "--batch", "1")
    one_line_error(bad, "measured no device", "--hardware NAME --engine gpt-fast")
