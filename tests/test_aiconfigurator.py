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


def test_prompts_passes_match_aiconfigurators_context_estimate():
    """Llama-3.1-8B on an H100 under vLLM 0.24: a prompt's pass priced from the context-attention table and the
    GEMMs at every prompt token within 5 % of AIConfigurator's context-phase estimate, at batch 1 and 4."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    from calibrate.aiconfigurator import measured_kernels, parse_source
    from scenarios import load_hardware, load_model
    from simulator.kernel_tables import prefill_pass

    src = parse_source("h100_sxm/vllm")
    shapes, kernels, notes = measured_kernels(src, load_model("llama-3.1-8b"), load_hardware("h100-sxm"))
    assert kernels.context_attention is not None and any("context_attention_perf" in n for n in notes)
    theirs = EngineHandle.compile("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "vllm", backend_version=src.version)
    for batch, tokens in ((1, 128), (1, 1024), (1, 8192), (4, 2048)):
        ours = prefill_pass(shapes, kernels, batch, tokens).total_s
        assert ours == pytest.approx(theirs.predict_prefill_latency(batch, tokens) * 1e-3, rel=0.05)
    # a chunk of 1,024 on 4,096 cached: AIConfigurator's prefix estimate
    chunk = prefill_pass(shapes, kernels, 1, 1024, 4096).total_s
    assert chunk == pytest.approx(theirs.predict_prefill_latency(1, 5120, 4096) * 1e-3, rel=0.05)


@pytest.fixture(scope="module")
def qwen_profile():
    from calibrate.aiconfigurator_profile import aiconfigurator_profile

    return aiconfigurator_profile("h100_sxm/vllm", "qwen3-30b-a3b", "qwen3-0.6b", "bf16", 1, "test", {})


def test_a_profiles_prefill_is_the_tables_and_grows_linearly_then_quadratically(qwen_profile):
    """The profile's prompts' passes (what `simulate --profile` charges a prefill step) are the measured kernels'
    at the grid's points, and between them grow as a prompt's pass does: about linearly while the weights and the
    MoE kernel's fixed cost dominate, then faster than linearly as the causal attention's n^2 takes over."""
    from calibrate.aiconfigurator import measured_kernels, parse_source
    from scenarios import load_hardware
    from simulator.kernel_tables import prefill_pass
    from simulator.step_costs import StepCosts

    p = qwen_profile
    cost = p.cost_model()
    shapes, kernels, _ = measured_kernels(parse_source("h100_sxm/vllm"), p.target, load_hardware("h100-sxm"))
    assert cost.pass_time_s(p.target, 1, 4096, 0) == pytest.approx(prefill_pass(shapes, kernels, 1, 4096).total_s)
    t = {n: cost.pass_time_s(p.target, 1, n, 0) for n in (128, 256, 1024, 2048, 8192, 16384)}
    assert t[256] / t[128] < 1.2  # 128 more tokens: a few per cent (the weights and the MoE kernel's floor)
    assert 1.3 < t[2048] / t[1024] < 2.0
    assert t[16384] / t[8192] > 2.0  # each doubling now costs more than twice
    between = cost.pass_time_s(p.target, 1, 2500, 0)
    assert t[2048] < between < cost.pass_time_s(p.target, 1, 3072, 0)
    assert between == pytest.approx(prefill_pass(shapes, kernels, 1, 2500).total_s, rel=0.05)
    # a prefill step: the prompt's pass plus the engine's own work around it
    step = StepCosts(cost, p.target, None).prefill_s(1, 4096, with_draft=False)
    assert step == pytest.approx(cost.pass_time_s(p.target, 1, 4096, 0)
                                 + cost.overheads.engine.prefill.at(1))
    assert any("prefill attention: attention/vllm" in a for a in p.fit.extra["assumed"])


def test_a_missing_prefill_table_is_a_stated_fallback(monkeypatch):
    """A database without the context-attention table: the profile says the prompts' attention is priced by the
    roofline, and still prices them."""
    from calibrate import aiconfigurator
    from scenarios import load_hardware, load_model
    from simulator.kernel_tables import prefill_pass

    real = aiconfigurator._table_path
    monkeypatch.setattr(aiconfigurator, "_table_path",
                        lambda src, op, name: None if name == "context_attention_perf" else real(src, op, name))
    shapes, kernels, notes = aiconfigurator.measured_kernels(aiconfigurator.parse_source("h100_sxm/vllm"),
                                                            load_model("llama-3.1-8b"), load_hardware("h100-sxm"))
    assert kernels.context_attention is None
    assert "prefill attention: no context_attention_perf table, by the roofline" in notes
    a, b = prefill_pass(shapes, kernels, 1, 8192).attention_s, prefill_pass(shapes, kernels, 1, 16384).attention_s
    assert 3 < b / a < 4.2


def test_an_unmeasured_moe_shape_is_a_one_line_error_naming_what_is_measured():
    """Qwen3-30B-A3B's experts in nvfp4 on an H100: the table times its shape in bf16, fp8 and fp8_block only. The
    error says which shape is missing, at which TPs and dtypes it is measured, and what to give instead."""
    from dataclasses import replace

    from calibrate.aiconfigurator import measured_kernels, parse_source
    from scenarios import load_hardware, load_model
    from simulator import SpecsimError

    model = replace(load_model("qwen3-30b-a3b"), expert_dtype="nvfp4")
    with pytest.raises(SpecsimError) as e:
        measured_kernels(parse_source("h100_sxm/vllm"), model, load_hardware("h100-sxm"))
    says = str(e.value)
    assert "\n" not in says and "no fused-MoE timings for 128 experts top-8" in says and "TP 1 nvfp4" in says
    assert "bf16 at TP 1/2/4/8" in says and "--tp and --dtype" in says and "without --from aiconfigurator" in says
    assert "roofline" not in says
