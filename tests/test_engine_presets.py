"""Engine presets (scenarios/engines.toml): what each engine pays per draft kind, read as the model uses it, and
checked against the published points they were fitted to (benchmarks/published.py)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import run

from scenarios import engine_names, load_engine_preset, load_hardware, load_model
from scenarios.draft_specs import load_draft
from scenarios.engine_presets import engine_preset
from simulator import SpecsimError
from simulator.cost import CostModel
from simulator.specs import DraftKindCost, EngineOverheads, PerStep
from simulator.sweep import Candidate, step_time

ROOT = Path(__file__).resolve().parents[1]


def _published():
    spec = importlib.util.spec_from_file_location("published_check", ROOT / "benchmarks" / "published.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["published_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_engine_preset_loads_with_its_version_and_sources():
    assert {"vllm", "sglang", "tensorrt-llm", "gpt-fast"} <= set(engine_names())
    assert {"vllm@0.10", "vllm@0.2x", "sglang@0.4", "sglang@0.5", "tensorrt-llm@1.0"} <= set(engine_names())
    for name in ("vllm", "sglang", "tensorrt-llm", "vllm@0.10", "sglang@0.4"):
        p = load_engine_preset(name)
        assert p.version and p.fitted_on and p.fit_gpus and p.fit_kinds, name
        assert p.version in p.label and p.fitted_on[0] in p.label


def test_a_draft_pass_of_a_kind_pays_its_engine_cost_once_per_pass():
    """vLLM #20780: an EAGLE-3 step grows ~1 ms a drafted token; the head's bytes take ~0.3 ms of it, the engine's
    cost per pass the rest. Each added draft token adds exactly one pass's cost. (vLLM of July 2025, vllm@0.10: its
    EAGLE drafter ran outside CUDA graphs, #20059 to #25109; vLLM of 2026 drafts in graphs and pays no such cost.)"""
    hw = load_hardware("h100-sxm", "vllm@0.10")
    assert load_hardware("h100-sxm", "vllm").overheads.engine.drafting("eagle3").per_pass.fixed_s == 0.0
    cost = CostModel.from_hardware(hw)
    target = load_model("llama-3.1-8b")
    head = load_draft("eagle3", target)
    kind = hw.overheads.engine.drafting("eagle3")
    assert kind.per_pass.fixed_s > 0.3e-3
    bare = replace(cost, overheads=replace(cost.overheads, engine=replace(cost.overheads.engine, kinds=())))
    for k in (2, 4, 7):
        with_kind = step_time(cost, target, head, 1, 512, Candidate(k)).draft_s
        without = step_time(bare, target, head, 1, 512, Candidate(k)).draft_s
        generic = hw.overheads.engine.draft.fixed_s  # what a kind without an entry pays a pass instead
        assert with_kind - without == pytest.approx(k * (kind.per_pass.fixed_s - generic) + kind.per_step.fixed_s,
                                                    rel=1e-9)
    slope = (step_time(cost, target, head, 1, 512, Candidate(7)).total_s
             - step_time(cost, target, head, 1, 512, Candidate(2)).total_s) / 5
    assert 0.8e-3 < slope < 1.3e-3  # the published sweep: (15.19 - 10.20) ms / 5 drafted tokens


def test_a_kind_without_an_entry_pays_the_engines_draft_cost_and_nothing_per_step():
    e = EngineOverheads(draft=PerStep(1e-4), kinds=(DraftKindCost("eagle3", PerStep(5e-4), PerStep(2e-3)),))
    assert e.drafting("eagle3").per_pass.fixed_s == 5e-4
    other = e.drafting("model")
    assert other.per_pass.fixed_s == 1e-4 and other.per_step.fixed_s == 0.0


def test_kinds_survive_a_round_trip_through_a_dict():
    e = EngineOverheads(kinds=(DraftKindCost("mtp", PerStep(1e-4, 2e-6), PerStep(-1e-4)),))
    from dataclasses import asdict

    assert EngineOverheads.from_dict(asdict(e)) == e


@pytest.mark.parametrize("table, fragment", [
    ({"step_overhead_us": -1, "pass_overhead_us": 0, "layer_overhead_us": 0, "accept_overhead_us": 0},
     "step_overhead_us"),
    ({"step_overhead_us": 1, "pass_overhead_us": 0, "layer_overhead_us": 0, "accept_overhead_us": 0,
      "draft": {"lookahead": {"pass_us": 1}}}, "lookahead"),
    ({"step_overhead_us": 1, "pass_overhead_us": 0, "layer_overhead_us": 0, "accept_overhead_us": 0,
      "draft": {"eagle3": {"pass_ms": 1}}}, "pass_ms"),
    ({"step_overhead_us": 1, "pass_overhead_us": 0, "layer_overhead_us": 0, "accept_overhead_us": 0,
      "draft": {"eagle3": {"step_us": -50}}}, "step_us"),
    ({"step_overhead_us": 1, "pass_overhead_us": 0, "layer_overhead_us": 0, "accept_overhead_us": 0,
      "fit_batch": [8, 1]}, "fit_batch"),
])
def test_bad_engine_presets_are_one_line_errors(table, fragment):
    with pytest.raises(SpecsimError, match=fragment):
        engine_preset("bad", table)


def test_a_prediction_outside_the_fitted_range_says_so():
    p = load_engine_preset("vllm")
    assert p.outside("h100-sxm", "eagle3", (1,)) == []
    out = p.outside("l40s", "medusa", (1, 256))
    assert any("l40s" in o for o in out) and any("medusa" in o for o in out) and any("256" in o for o in out)
    assert load_engine_preset("gpt-fast").outside("h100-sxm") != []  # not fitted to published points


def test_sglang_is_selectable_and_the_header_names_its_version():
    r = run("predict", "--hardware", "h100-sxm", "--engine", "sglang", "--target", "qwen3-30b-a3b", "--tp", "2",
            "--draft", "eagle3", "--acceptance", "accept-length:1.86@3", "--batch", "1", "--k", "0,3",
            "--context", "512", "--json")
    assert r.exit_code == 0, r.output
    assert "sglang" in r.output and load_engine_preset("sglang").version in r.output


def test_qwen3_moe_eagle3_on_sglang_loses_at_batch_one_as_measured():
    """sglang #14824 (SpecForge #339): Qwen3-30B-A3B + EAGLE-3 on 2 H100s, 3 draft tokens, acceptance length 1.86:
    0.72x of plain decoding at batch 1."""
    hw = load_hardware("h100-sxm", "sglang")
    cost = CostModel.from_hardware(hw)
    full = load_model("qwen3-30b-a3b")
    target = full.shard(2)
    from scenarios.setup import shard_draft

    head = shard_draft(load_draft("eagle3", full), 2, hw)
    plain = step_time(cost, target, head, 1, 512, Candidate(0)).total_s
    spec = step_time(cost, target, head, 1, 512, Candidate(3)).total_s
    assert 1.86 * plain / spec < 1.0


def test_the_corpus_is_predicted_within_the_issues_bars_leaving_each_source_out():
    """Issue 56: leave-one-source-out median |speed-up error| <= 10 %, p90 <= 25 %, no source's median above 20 %
    (issue 64 asks 8 % and 15 %: the median holds at 7.4 %, the worst source, trtllm-pr-5146, is at 19.6 %).
    The two one-point Llama-3.1-70B sources on 8 GPUs are the closest (trtllm-pr-5146 19.2 %, sglang-pr-4716 18.1 %
    since the all-reduce table is read at its key and the presets refitted with the all-reduce's measured
    bandwidth; 20.4 and 21.0 % before that, when they missed the bar)."""
    pub = _published()
    priced, held_out, _ = pub.corpus()  # the held-out sources are predicted, never fitted
    assert held_out and not {q.point.source.id for q in held_out} & {q.point.source.id for q in priced}
    assert len(priced) >= 30 and len({q.point.source.id for q in priced}) >= 8
    cross = pub.loso(priced)
    errs = [abs(pub.error_pct(pred, q.measured)) for rows in cross.values() for q, pred in rows]
    assert np.median(errs) <= 10.0 and np.percentile(errs, 90) <= 25.0
    medians = [np.median([abs(pub.error_pct(pred, q.measured)) for q, pred in rows]) for rows in cross.values()]
    assert max(medians) <= 20
    shipped = pub.preset_params({q.engine for q in priced})
    for q in priced[:: max(len(priced) // 8, 1)]:  # the fit's arithmetic is the model's
        assert pub.through_the_model(q) == pytest.approx(shipped.predict(q), rel=1e-9)


def test_an_engines_own_kernels_on_a_gpu_replace_the_gpu_presets(monkeypatch):
    """The GPU presets hold vLLM's kernels (AIConfigurator's measurements); gpt-fast's compiled graph on an A100 was
    measured apart (its tensor-parallel table): its bandwidth and per-layer time replace the A100's there, nowhere
    else. A key that is not a rate is refused in one line."""
    import scenarios

    vllm, fast = load_hardware("a100-80gb-sxm", "vllm"), load_hardware("a100-80gb-sxm", "gpt-fast")
    assert (vllm.bw_efficiency, fast.bw_efficiency) == (0.708, 0.86)
    assert vllm.overheads.layer_s == pytest.approx(34.5e-6) and fast.overheads.layer_s == pytest.approx(60e-6)
    assert fast.ridge_p == vllm.ridge_p and "gpt-fast's tensor-parallel table" in fast.rates_source
    assert load_hardware("a100-80gb-sxm", "vllm@0.10").ridge_p == 1.0  # its graphed step's times add
    assert load_hardware("h100-sxm", "gpt-fast").bw_efficiency == load_hardware("h100-sxm").bw_efficiency
    monkeypatch.setattr(scenarios, "_engine_table", lambda name: {"hardware": {"l4": {"mem_GB": 48}}})
    with pytest.raises(SpecsimError, match=r"^engine preset 'x': hardware.l4.mem_GB is not one of"):
        scenarios._engine_kernels("x", "l4")


def test_no_engine_cost_is_negative_and_every_preset_cites_its_mechanisms():
    """Issue 64: a negative time is a symptom, not a finding. Every number of every engine preset (each version) is
    >= 0, and a preset with a capture ceiling says where it comes from."""
    from scenarios import _table

    def numbers(d):
        for v in d.values():
            if isinstance(v, dict):
                yield from numbers(v)
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                yield v
    assert min(numbers(_table("engines"))) >= 0
    for name in engine_names():
        p = load_engine_preset(name)
        if p.overheads.graphs is not None:
            assert p.overheads.graphs.source and p.overheads.graphs.eager_layer_s > 0, name


def test_plain_names_are_their_engines_default_version():
    assert load_engine_preset("vllm").overheads == load_engine_preset("vllm@0.2x").overheads
    assert load_engine_preset("sglang").overheads == load_engine_preset("sglang@0.5").overheads
    with pytest.raises(SpecsimError, match="unknown engine 'vllm@0.3'"):
        load_engine_preset("vllm@0.3")


def test_a_verify_above_vllm_010s_capture_ceiling_runs_eager():
    """vLLM 0.10 captures graphs up to 512 batched tokens: at k = 3 a verify of 128 requests replays one, 129 run
    eager and pay each layer's launches; plain decoding stays graphed to 512."""
    hw = load_hardware("h100-sxm", "vllm@0.10")
    cost = CostModel.from_hardware(hw)
    target = load_model("llama-3.1-8b")
    graphs = hw.overheads.graphs
    launch = graphs.eager_layer_s * target.n_layers

    def jump(n):
        formula = replace(cost, overheads=replace(cost.overheads, graphs=None))
        return (cost.pass_time_s(target, 129, n, 1024) - formula.pass_time_s(target, 129, n, 1024),
                cost.pass_time_s(target, 128, n, 1024) - formula.pass_time_s(target, 128, n, 1024))
    assert jump(4) == pytest.approx((launch, 0.0))
    assert jump(1) == (0.0, 0.0)
    words = load_engine_preset("vllm@0.10").mechanisms(129, 3)
    assert any("above the capture ceiling of 512" in w for w in words)


def test_under_graphs_a_verified_token_is_never_free():
    """SpecDecode-Bench's vLLM 0.10.1 fit: a step's cost grows 21 us a batched token from batch 1 (its memory and
    compute times add): a 4-token verify of 64 requests costs more than a 1-token pass by at least 192 x that
    share of the H100's compute."""
    cost = CostModel.from_hardware(load_hardware("h100-sxm", "vllm@0.10"))
    target = load_model("llama-3.1-8b")
    per_token = 2 * target.matmul_params / (cost.hardware.peak_flops("bf16") * cost.hardware.flops_efficiency)
    extra = cost.pass_time_s(target, 64, 4, 1024) - cost.pass_time_s(target, 64, 1, 1024)
    assert extra >= 0.9 * 192 * per_token


def test_sglang_spec_v2_overlap_hides_the_speculative_steps_host_work():
    """SGLang's spec v2 (--engine-setting spec_overlap=true) overlaps the speculative step's host work: it pays a
    plain step's engine work, nothing a request and no draft kind's step cost; spec v1 (the default) pays them."""
    v1, v2 = load_engine_preset("sglang@0.5"), load_engine_preset("sglang@0.5+spec_overlap=true")
    e1, e2 = v1.overheads.engine, v2.overheads.engine
    assert e1.verify.per_sequence_s > 0 and e1.drafting("eagle3").per_step.fixed_s > 0
    assert e2.verify == PerStep(e2.plain.fixed_s) and e2.drafting("eagle3").per_step == PerStep()
    assert any("spec v2" in m for m in v2.mechanisms(8, 3)) and not any("spec v2" in m for m in v1.mechanisms(8, 3))
    hw1, hw2 = load_hardware("h100-sxm", "sglang@0.5"), load_hardware("h100-sxm", "sglang@0.5+spec_overlap=true")
    target = load_model("llama-3.1-8b")
    head = load_draft("eagle3", target, target.dtype)
    s1, s2 = (step_time(CostModel.from_hardware(hw), target, head, 8, 512, Candidate(3)).total_s for hw in (hw1, hw2))
    assert s2 < s1
