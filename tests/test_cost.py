"""The pass-cost roofline: one point by hand, and the properties the essay rests on."""

import json

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
    """H100 SXM preset, Llama-3.1-8B bf16, batch 1, one new token on 128 cached ones, worked out by hand.

    matmul params: per layer q,o 2*4096*4096 = 33,554,432; k,v 2*4096*1024 = 8,388,608; SwiGLU 3*4096*14336 =
    176,160,768 -> 218,103,808; x32 = 6,979,321,856; plus the head 128256*4096 = 525,336,576 -> 7,504,658,432.
    Weight bytes = (7,504,658,432 + 65*4096 norm gains) * 2 = 15,009,849,344. Activations for one row: per layer
    4096+6144+4096+4096+4096+28672+14336+4096 = 69,632, x32 + (4096 + 128256) = 2,360,576 elements = 4,721,152 B.
    Linear: 15,014,570,496 B / (3350e9 * 0.8) = 5.60245e-3 s (memory; compute 1.5e10 FLOP / 692.3e12 = 2.2e-5 s).
    KV: 131,072 B per token; read 129 tokens + write 1 = 17,039,360 B / 2.68e12 = 6.358e-6 s.
    Overheads: 150 us + 32 * 4 us = 278 us.  Total 5.88681e-3 s.
    """
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    p = cost.pass_cost(load_model("llama-3.1-8b"), batch=1, new_tokens=1, context=128)
    assert p.weight_bytes == 15_009_849_344
    assert p.act_bytes == 4_721_152
    assert p.kv_bytes == 17_039_360
    assert p.operators[0].time_s == pytest.approx(15_014_570_496 / 2.68e12)
    assert p.time_s == pytest.approx(15_014_570_496 / 2.68e12 + 17_039_360 / 2.68e12 + 278e-6)
    assert p.time_s == pytest.approx(5.88681e-3, rel=1e-5)
    assert p.bound == "memory"


def test_verify_costs_about_one_pass_when_memory_bound_and_scales_when_compute_bound():
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    m = load_model("llama-3.1-8b")
    t1 = cost.pass_time_s(m, 1, 1, 512)
    assert cost.pass_time_s(m, 1, 5, 512) / t1 < 1.02
    big = cost.pass_cost(m, 256, 8, 512)
    assert big.bound == "compute"
    assert big.time_s / cost.pass_time_s(m, 256, 4, 512) > 1.7


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
    cost = CostModel(base.hardware, base.linear_rates, base.attention_rates, base.overheads, measured,
                     measured_models=(m,))
    assert cost.pass_time_s(m, 1, 4, 40) == pytest.approx(2.0 * base.pass_time_s(m, 1, 4, 40), rel=0.02)
    assert cost.pass_time_s(m, 2, 2, 40) == pytest.approx(2.0 * base.pass_time_s(m, 2, 2, 40), rel=1e-9)
    assert cost.pass_time_s(m, 64, 8, 40) == pytest.approx(2.0 * base.pass_time_s(m, 64, 8, 40), rel=1e-9)
    assert cost.pass_cost(m, 4, 4, 64).measured and cost.pass_time_s(m, 4, 4, 64) == measured[("llama-68m", 4, 4, 64)]
