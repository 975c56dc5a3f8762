"""The pass-cost roofline: one point by hand, and the properties the essay rests on."""

import json
from dataclasses import replace

import numpy as np
import pytest

from scenarios import hardware_names, load_hardware, load_model, model_names
from simulator import SpecsimError
from simulator.cost import CostModel, RateTable


def test_llama_3_1_8b_parameter_count():
    # Meta reports 8.03 B parameters for Llama-3.1-8B; 1.24 B for Llama-3.2-1B (tied embeddings).
    assert load_model("llama-3.1-8b").n_params / 1e9 == pytest.approx(8.03, abs=0.01)
    assert load_model("llama-3.2-1b").n_params / 1e9 == pytest.approx(1.24, abs=0.01)
    assert load_model("llama-2-7b").n_params / 1e9 == pytest.approx(6.74, abs=0.01)


def test_one_pass_by_hand():
    """H100 SXM preset (vLLM engine), Llama-3.1-8B bf16, batch 1, one new token on 128 cached ones, by hand.

    matmul params: per layer q,o 2*4096*4096 = 33,554,432; k,v 2*4096*1024 = 8,388,608; SwiGLU 3*4096*14336 =
    176,160,768 -> 218,103,808; x32 = 6,979,321,856; plus the head 128256*4096 = 525,336,576 -> 7,504,658,432.
    Weight bytes = (7,504,658,432 + 65*4096 norm gains) * 2 = 15,009,849,344. Activations for one row: per layer
    4096+6144+4096+4096+4096+28672+14336+4096 = 69,632, x32 + (4096 + 128256) = 2,360,576 elements = 4,721,152 B.
    Linear, memory and compute combined through the ridge (p = 2, the preset's fit to vLLM's measured kernels):
    15,014,570,496 B / (3350e9 * 0.843) = 5.316680e-3 s and 2 * 7,504,658,432 FLOP / (989e12 * 0.809) = 1.8759e-5 s
    -> (m^2 + c^2)^(1/2) = 5.316713e-3 s. KV: 131,072 B per token; read 129 tokens + write 1 = 17,039,360 B /
    (3350e9 * 0.910) = 5.5894e-6 s (its FLOPs, 6.8e7 / 8.0e14, overlap). 32 layers x 33.9 us the measured kernels
    spend beyond the roofline = 1.0848e-3 s. The vLLM engine adds no per-pass cost (its 1.01 ms is per step).
    Total 6.407103e-3 s.
    """
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    p = cost.pass_cost(load_model("llama-3.1-8b"), batch=1, new_tokens=1, context=128)
    assert p.weight_bytes == 15_009_849_344
    assert p.act_bytes == 4_721_152
    assert p.kv_bytes == 17_039_360
    mem, comp = 15_014_570_496 / (3350e9 * 0.843), 2 * 7_504_658_432 / (989e12 * 0.809)
    linear = (mem ** 2 + comp ** 2) ** (1 / 2)
    assert p.operators[0].time_s == pytest.approx(linear)
    assert p.time_s == pytest.approx(linear + 17_039_360 / (3350e9 * 0.910) + 32 * 33.9e-6)
    assert p.time_s == pytest.approx(6.407103e-3, rel=1e-6)
    assert p.bound == "memory"
    assert cost.plain_step_s(load_model("llama-3.1-8b"), 1, 128) == pytest.approx(p.time_s + 1.009e-3)


def test_ridge_combination():
    from simulator.cost import ridge_combine

    assert ridge_combine(3.0, 4.0, float("inf")) == 4.0
    assert ridge_combine(3.0, 4.0, 1.0) == 7.0
    assert ridge_combine(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert ridge_combine(0.0, 0.0, 2.0) == 0.0


def test_verify_costs_little_more_than_one_pass_when_memory_bound_and_scales_when_compute_bound():
    """Batch 1: five tokens cost the weight read plus four more tokens' compute (the additive ridge of the vLLM
    fit): under 1 % more. Batch 256: compute dominates and 8 tokens cost nearly twice 4."""
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    m = load_model("llama-3.1-8b")
    t1 = cost.pass_time_s(m, 1, 1, 512)
    assert 1.0 < cost.pass_time_s(m, 1, 5, 512) / t1 < 1.02
    big = cost.pass_cost(m, 256, 8, 512)
    assert big.bound == "compute"
    assert big.time_s / cost.pass_time_s(m, 256, 4, 512) > 1.6


def test_preset_against_published_engine_step_times():
    """scenarios/references.toml: vLLM on an H100 (SpecDecode-Bench's fit of measured step times, batch 1..64,
    plain and verify steps) and gpt-fast on an A100 (Llama-2-7B, 104.9 tok/s at batch 1). The H100 preset's rates are
    vLLM 0.24's measured kernels (benchmarks/refit_presets.py) and vLLM's step cost these step times less its passes,
    so the median is near by construction; the verify passes of 96-384 rows come 13-22 % under these step times
    (vLLM 0.24's GEMMs there run at 81 % of the bf16 peak where SpecDecode-Bench's older vLLM took longer): the
    bound is that miss, stated in docs/kernels.md, not the 15 % it was while the rates were fitted here."""
    from scenarios.references import compare_presets

    rows = compare_presets()
    h100 = [r for r in rows if r.reference == "llama-3.1-8b-h100-vllm"]
    errors = sorted(abs(r.rel_error) for r in h100)
    assert len(h100) == 2 * 5 * 4 and errors[len(errors) // 2] < 0.05 and errors[-1] < 0.25
    a100 = next(r for r in rows if r.reference == "llama-2-7b-a100-gpt-fast")
    assert 1 / a100.predicted_s == pytest.approx(104.9, rel=0.10)


def test_kv_reads_grow_per_sequence():
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    m = load_model("llama-3.1-8b")
    assert cost.pass_cost(m, 64, 1, 8192).kv_bytes == pytest.approx(64 * cost.pass_cost(m, 1, 1, 8192).kv_bytes)


def test_measured_pass_wins_and_rate_table_interpolates():
    hw = load_hardware("l4")
    m = load_model("llama-68m")
    cost = CostModel(hw, RateTable((1, 4), (100e9, 200e9), (1e12, 1e12)), RateTable.constant(100e9, 1e12),
                     measured={("llama-68m", 2, 3, 16): 0.123})
    assert cost.pass_cost(m, 2, 3, 16).time_s == 0.123 and cost.pass_cost(m, 2, 3, 16).measured
    assert not cost.pass_cost(m, 2, 2, 16).measured
    bw1, _ = cost.linear_rates.at(1)
    bw2, _ = cost.linear_rates.at(2)
    bw8, _ = cost.linear_rates.at(8)
    assert bw1 == 100e9 and bw8 == 200e9 and 100e9 < bw2 < 200e9


def test_presets_load_and_cite_sources():
    for name in hardware_names():
        hw = load_hardware(name)
        assert hw.source and hw.mem_bw_bytes_per_s > 1e11 and hw.peak_flops("bf16") > 1e13
    for name in model_names():
        assert load_model(name).source


def test_unknown_preset_suggests_close_names():
    with pytest.raises(SpecsimError, match="did you mean h100-sxm"):
        load_hardware("h100")
    with pytest.raises(SpecsimError, match="llama-3.1-8b"):
        load_model("llama3.1-8b")


def test_config_json(tmp_path):
    cfg = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True, "head_dim": 64,
           "torch_dtype": "bfloat16", "model_type": "llama"}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    m = load_model(str(f))
    assert m.n_params == load_model("llama-3.2-1b").n_params
    assert load_model(str(tmp_path)).d_model == 2048
    del cfg["intermediate_size"]
    f.write_text(json.dumps(cfg))
    with pytest.raises(SpecsimError, match="lacks intermediate_size"):
        load_model(str(f))
    f.write_text("{not json")
    with pytest.raises(SpecsimError, match="not valid JSON"):
        load_model(str(f))


def test_measurements_anchor_other_contexts_and_shapes():
    """Unmeasured passes follow the measurements: across context by interpolation, across (batch, new tokens) by
    the measured/formula ratio interpolated over the measured grid."""
    m = load_model("llama-68m")
    base = CostModel.from_hardware(load_hardware("l4"))
    measured = {("llama-68m", b, n, c): 2.0 * base.pass_time_s(m, b, n, c) for b in (1, 4) for n in (1, 4)
                for c in (16, 64)}
    cost = replace(base, measured=measured, measured_models=(m,))
    assert cost.pass_time_s(m, 1, 4, 40) == pytest.approx(2.0 * base.pass_time_s(m, 1, 4, 40), rel=0.02)
    assert cost.pass_time_s(m, 2, 2, 40) == pytest.approx(2.0 * base.pass_time_s(m, 2, 2, 40), rel=1e-9)
    assert cost.pass_time_s(m, 64, 8, 40) == pytest.approx(2.0 * base.pass_time_s(m, 64, 8, 40), rel=1e-9)
    assert cost.pass_cost(m, 4, 4, 64).measured and cost.pass_time_s(m, 4, 4, 64) == measured[("llama-68m", 4, 4, 64)]


def test_prefill_shapes_at_a_few_batches_do_not_break_the_grid():
    """A calibration also times prefill-shaped passes (64 and 128 new tokens) at batches 1 and 2 only. The decoding
    grid (every batch x 1..4 new tokens) must still anchor the batches between its own - batch 3 is the measured /
    formula ratio interpolated between 2 and 4, not the bare formula, so a step's price has no jump at a measured
    batch - while the prefill shapes form their own grid; scalar and vectorised paths agree."""
    m = load_model("llama-68m")
    base = CostModel.from_hardware(load_hardware("l4"))
    measured = {("llama-68m", b, n, c): (1.5 if b <= 2 else 2.0) * base.pass_time_s(m, b, n, c)
                for b in (1, 2, 4, 8) for n in (1, 2, 4) for c in (16, 64)}
    measured |= {("llama-68m", b, n, c): 3.0 * base.pass_time_s(m, b, n, c) for b in (1, 2) for n in (64, 128)
                 for c in (16, 64)}
    cost = replace(base, measured=measured, measured_models=(m,))
    ratio3 = cost.pass_time_s(m, 3, 1, 40) / base.pass_time_s(m, 3, 1, 40)
    assert 1.5 < ratio3 < 2.0 and ratio3 == pytest.approx(1.5 + 0.5 * np.log2(1.5), rel=1e-9)
    assert cost.pass_time_s(m, 1, 64, 40) == pytest.approx(3.0 * base.pass_time_s(m, 1, 64, 40), rel=0.02)
    # between the grids (4 < n < 64) the ratio moves from one to the other, log-linearly in new tokens: no jump
    gap = [cost.pass_time_s(m, 1, n, 40) / base.pass_time_s(m, 1, n, 40) for n in (4, 8, 16, 32, 64)]
    assert gap == pytest.approx([1.5, 1.875, 2.25, 2.625, 3.0], rel=0.02)
    assert cost.pass_time_s(m, 4, 96, 40) / base.pass_time_s(m, 4, 96, 40) == pytest.approx(3.0, rel=0.02)
    b = np.arange(1, 11)
    assert cost.pass_times(m, b, 1, 40) == pytest.approx([cost.pass_time_s(m, int(x), 1, 40) for x in b])
    assert cost.pass_times(m, np.array([1, 2]), 64, 40) == pytest.approx(
        [cost.pass_time_s(m, x, 64, 40) for x in (1, 2)])


def test_drift_scales_passes_by_model_and_batch_in_both_paths():
    """A spot check's drift multiplies a model's passes (measured or not), log-linear in batch between its knots and
    constant beyond them; the scalar and the vectorised paths agree, and other models are untouched."""
    m, other = load_model("llama-68m"), load_model("llama-3.2-1b")
    base = CostModel.from_hardware(load_hardware("l4"))
    base = replace(base, measured={("llama-68m", 4, 1, 16): 0.01})
    cost = replace(base, drift={"llama-68m": ((1, 1.2), (16, 1.0))})
    assert cost.pass_time_s(m, 1, 1, 16) == pytest.approx(1.2 * base.pass_time_s(m, 1, 1, 16))
    assert cost.pass_time_s(m, 4, 1, 16) == pytest.approx(1.1 * 0.01)  # halfway in log2 batch, on a measurement
    assert cost.pass_time_s(m, 64, 3, 16) == pytest.approx(base.pass_time_s(m, 64, 3, 16))
    assert cost.pass_time_s(other, 1, 1, 16) == base.pass_time_s(other, 1, 1, 16)
    b = np.array([1, 2, 4, 8, 16, 64])
    assert cost.pass_times(m, b, 2, 16) == pytest.approx([cost.pass_time_s(m, int(x), 2, 16) for x in b])


def test_past_the_largest_measured_batch_each_shapes_ratio_fades_into_that_batchs_mean():
    """A calibration measured batches 1..8 with each new-token count off the formula by its own factor (noise, a
    kernel's whim); `predict` asks for batch 64. At batch 8 the prediction passes through every measurement; one
    doubling past it, every shape carries that batch's geometric-mean factor, so no draft length wins at batch 64
    by a wiggle measured at batch 8 (the first command's plot once showed k = 3 rising from batch 8 to 32 alone)."""
    m = load_model("llama-68m")
    base = CostModel.from_hardware(load_hardware("l4"))
    factor = {1: 1.0, 2: 1.2, 3: 0.8, 4: 1.1}
    measured = {("llama-68m", b, n, c): factor[n] * base.pass_time_s(m, b, n, c) for b in (1, 2, 4, 8)
                for n in factor for c in (16, 64)}
    cost = replace(base, measured=measured, measured_models=(m,))
    mean = float(np.exp(np.mean(np.log(list(factor.values())))))
    for n, f in factor.items():
        assert cost.pass_time_s(m, 8, n, 40) == pytest.approx(f * base.pass_time_s(m, 8, n, 40), rel=0.02)
        # one doubling past it, linearly in log2 batch
        assert cost.pass_time_s(m, 11, n, 40) / base.pass_time_s(m, 11, n, 40) == pytest.approx(
            f + (mean - f) * np.log2(11 / 8), rel=1e-9)
        for b in (16, 64):
            assert cost.pass_time_s(m, b, n, 40) == pytest.approx(mean * base.pass_time_s(m, b, n, 40), rel=1e-9)
    b = np.array([1, 6, 8, 12, 16, 64])
    assert cost.pass_times(m, b, 3, 40) == pytest.approx([cost.pass_time_s(m, int(x), 3, 40) for x in b])


def test_a_verification_step_pays_its_own_work_less_the_calibrated_passs_draw():
    """The verify phase's extra over its calibrated pass is a difference of two non-negative works (its own after
    the forward, and the calibrated pass's one draw per sequence); priced as the difference, as an older profile's
    signed term priced it."""
    from simulator.specs import EngineOverheads, Overheads, PerStep
    from simulator.sweep import Candidate, step_time

    t, d = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    base = CostModel.from_hardware(load_hardware("h100-sxm"))
    split = EngineOverheads(verify=PerStep(1e-4, 2e-5), pass_draw=PerStep(5e-5, 3e-4))
    signed = EngineOverheads(verify=PerStep(5e-5, -2.8e-4))
    for engine in (split, signed):
        assert float(engine.verify_extra_s(16)) == pytest.approx(5e-5 - 2.8e-4 * 16)
    times = [step_time(replace(base, overheads=Overheads(engine=e)), t, d, 16, 512, Candidate(3)).verify_s
             for e in (split, signed)]
    assert times[0] == pytest.approx(times[1], rel=1e-12)
    assert all(v >= 0 for p in (split.verify, split.pass_draw) for v in (p.fixed_s, p.per_sequence_s))
