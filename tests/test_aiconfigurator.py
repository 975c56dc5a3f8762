"""Profiles from AIConfigurator's measured kernels (calibrate/aiconfigurator*.py): the database found and named, its
passes against AIConfigurator's own estimate, and the profile through the CLI."""

import importlib.util
import json

import pytest
from conftest import one_line_error, run

INSTALL = "pip install 'specsim[aiconfigurator]' (aiconfigurator-core, AIConfigurator's kernel database)"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None, reason=INSTALL)


def test_source_defaults_and_one_line_errors_list_what_is_installed():
    from calibrate.aiconfigurator import installed, parse_source

    src = parse_source("aiconfigurator:h100_sxm")
    assert (src.system, src.backend) == ("h100_sxm", "vllm") and src.version == installed()["h100_sxm"]["vllm"][-1]
    assert src.version in src.database and "AIConfigurator" in src.database
    for bad, says in (("nosuch", "b200_sxm"), ("h100_sxm/nosuch", "trtllm"), ("h100_sxm/vllm/0.0.1", "0.24")):
        r = run("calibrate", "--from", f"aiconfigurator:{bad}", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b")
        one_line_error(r, says)


def test_plain_steps_match_aiconfigurators_own_estimate():
    """Llama-3.1-8B on an H100 under vLLM 0.24, input 1,024 / output 128 (the mean context 1,088): the pass priced
    from the tables within 5 % of AIConfigurator's static estimate of a generation step."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    from calibrate.aiconfigurator import measured_kernels, parse_source
    from scenarios import load_hardware, load_model
    from simulator.kernel_tables import decode_pass

    src = parse_source("h100_sxm/vllm")
    shapes, kernels, notes = measured_kernels(src, load_model("llama-3.1-8b"), load_hardware("h100-sxm"))
    assert any("by the roofline" in n for n in notes)
    theirs = EngineHandle.compile("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "vllm", backend_version=src.version)
    for batch in (1, 16, 256):
        ours = decode_pass(shapes, kernels, batch, 1, 1088).total_s
        assert ours == pytest.approx(theirs.decode_step_latency(batch, 1024, 128) * 1e-3, rel=0.05)


def test_profile_through_the_cli_names_its_database(tmp_path):
    out = tmp_path / "p.json"
    r = run("calibrate", "--from", "aiconfigurator:h200_sxm/vllm", "--target", "llama-3.1-8b", "--draft",
            "llama-3.2-1b", "--out", str(out))
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    meta = d["fit"]["aiconfigurator"]
    assert meta["system"] == "h200_sxm" and meta["backend"] == "vllm" and meta["version"]
    assert any("by the roofline" in a for a in d["fit"]["assumed"])
    r = run("predict", "--profile", str(out), "--acceptance", "iid:0.7", "--batch", "1,256", "--k", "0..3",
            "--context", "1024")
    assert r.exit_code == 0, r.output
    assert f"aiconfigurator:h200_sxm/vllm/{meta['version']}" in r.output.splitlines()[0]


def test_blackwell_preset_holds_its_refit_to_the_measured_kernels():
    """benchmarks/refit_presets.py's fit of the B200 preset to vLLM's measured kernels is what hardware.toml holds,
    and it prices the fitted passes within its stated error (median under 10 %)."""
    import importlib.util
    from dataclasses import replace
    from pathlib import Path

    from scenarios import _table, load_hardware

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "refit_presets.py"
    spec = importlib.util.spec_from_file_location("refit_presets", path)
    refit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refit)
    passes, source, latency = refit.measured_passes("b200_sxm", "b200-sxm")
    hw = load_hardware("b200-sxm")
    # the preset's own latency (vLLM's engine preset prices its collectives with its own, engines.toml)
    assert _table("hardware")["b200-sxm"]["interconnect_latency_us"] == pytest.approx(latency * 1e6, abs=0.05)
    values, median, worst = refit.fit(replace(hw, interconnect=replace(hw.interconnect, latency_s=latency)), passes)
    assert median < 0.10 and worst < 0.25
    for key in ("bw_efficiency", "flops_efficiency", "attention_bw_efficiency", "ridge_p"):
        assert getattr(hw, key) == pytest.approx(values[key], rel=0.02), key
    assert hw.overheads.layer_s * 1e6 == pytest.approx(values["layer_fixed_us"], rel=0.02)
    assert "refit_presets.py" in hw.rates_source and source.split(",")[0] in hw.rates_source
