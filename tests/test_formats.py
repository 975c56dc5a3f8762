"""Blackwell presets and the FP8 / FP4 weight formats: bytes with their scales, which tensor-core rate runs them,
the cache they keep, and the CLI choosing them."""

import pytest
from conftest import run

from scenarios import load_hardware, load_model
from simulator import SpecsimError
from simulator.cost import CostModel
from simulator.specs import dtype_bytes

BLACKWELL = ("b200-sxm", "b300-sxm", "gb200", "gb300")


@pytest.mark.parametrize("name", BLACKWELL)
def test_blackwell_presets_cite_datasheets_and_rank_their_rates(name):
    hw = load_hardware(name)
    assert "datasheet" in hw.source and hw.interconnect is not None
    assert hw.mem_bw_bytes_per_s >= 7.7e12 and hw.mem_capacity_bytes >= 190e9
    # each halving of the bits doubles the dense tensor-core rate, at least
    assert hw.peak_flops("nvfp4") >= 2 * hw.peak_flops("fp8") >= 4 * hw.peak_flops("bf16") > 2e15
    assert hw.peak_flops("mxfp4") == hw.peak_flops("nvfp4") == dict(hw.peak_flops_per_s)["fp4"]


def test_fp4_formats_count_their_scales():
    # nvfp4: 4 bits + one 8-bit scale per 16 values; mxfp4: + one 8-bit scale per 32
    assert dtype_bytes("nvfp4") == pytest.approx((16 * 4 + 8) / 16 / 8)
    assert dtype_bytes("mxfp4") == pytest.approx((32 * 4 + 8) / 32 / 8)
    bf16, fp4 = load_model("llama-3.1-8b"), load_model("llama-3.1-8b", "nvfp4")
    assert fp4.weight_bytes_per_pass / bf16.weight_bytes_per_pass == pytest.approx(0.28125)
    # the cache stays in fp8 beside 4-bit weights: half of bf16's, not a quarter
    assert fp4.kv_bytes_per_token == bf16.kv_bytes_per_token / 2 == load_model("llama-3.1-8b", "fp8").kv_bytes_per_token


def test_fp4_weights_run_on_fp4_tensor_cores_or_dequantised_to_bf16():
    b200, h100 = load_hardware("b200-sxm"), load_hardware("h100-sxm")
    assert b200.peak_flops("nvfp4") == 4 * b200.peak_flops("bf16")
    assert h100.peak_flops("nvfp4") == h100.peak_flops("bf16")  # Hopper has no fp4 tensor cores: weight-only
    with pytest.raises(SpecsimError, match="no fp8 compute"):
        load_hardware("a100-80gb-sxm").peak_flops("fp8")
    # a compute-bound pass (8B, batch 256) is faster in nvfp4 than in fp8 on a B200, not on an H100
    m8, m4 = load_model("llama-3.1-8b", "fp8"), load_model("llama-3.1-8b", "nvfp4")
    for hw, faster in ((b200, True), (h100, False)):
        t8 = CostModel.from_hardware(hw, "fp8").pass_time_s(m8, 256, 4, 1024)
        t4 = CostModel.from_hardware(hw, "nvfp4").pass_time_s(m4, 256, 4, 1024)
        assert (t4 < t8) == faster


def test_predict_on_a_b200_in_nvfp4():
    r = run("predict", "--hardware", "b200-sxm", "--dtype", "nvfp4", "--acceptance", "iid:0.7", "--batch", "1,64",
            "--k", "0..2", "--context", "1024")
    assert r.exit_code == 0, r.output
    assert "on b200-sxm, nvfp4" in r.output


# -- weight-only formats (#68): AWQ/GPTQ through Marlin-style kernels, llama.cpp's GGUF types ------------------------

@pytest.mark.parametrize("dtype, bits", [("w4a16", 4.25), ("q4_k_m", 4.85), ("q5_k_m", 5.69), ("q8_0", 8.5)])
def test_weight_only_formats_read_their_bits_and_keep_a_16_bit_cache(dtype, bits):
    m, bf16 = load_model("llama-3.1-8b", dtype), load_model("llama-3.1-8b")
    assert dtype_bytes(dtype) == bits / 8
    assert m.weight_bytes_per_pass == pytest.approx(bf16.weight_bytes_per_pass * bits / 16, rel=1e-6)
    assert m.kv_bytes_per_token == bf16.kv_bytes_per_token  # activations and cache stay 16-bit


def test_w4a16_runs_at_its_measured_rate_where_a_source_gives_one_else_at_bf16():
    thor, h100 = load_hardware("jetson-agx-thor"), load_hardware("h100-sxm")
    assert thor.peak_flops("w4a16") == pytest.approx(35.4e12)  # TensorRT Edge-LLM's INT4-AWQ prefill
    assert h100.peak_flops("w4a16") == h100.peak_flops("bf16")
    assert load_hardware("rtx-3090").peak_flops("q4_k_m") == 284e12  # llama.cpp's MMQ on int8 tensor cores


def test_w4a16_turns_a_verify_pass_compute_bound_sooner_than_nvfp4_at_about_the_same_bytes():
    """Jetson AGX Thor, Qwen3-8B, batch 8: a verify pass of 6 tokens a sequence costs more over a plain step in
    W4A16 (its dequantising matmuls at 35 TFLOP/s) than in NVFP4 (fp4 tensor cores), whose bytes are within 6 %."""
    hw = load_hardware("jetson-agx-thor", "tensorrt-llm")
    ratios = {}
    for dtype in ("w4a16", "nvfp4"):
        cost, m = CostModel.from_hardware(hw, dtype), load_model("qwen3-8b", dtype)
        ratios[dtype] = cost.pass_cost(m, 8, 6, 512).time_s / cost.pass_cost(m, 8, 1, 512).time_s
    assert ratios["w4a16"] > 1.3 * ratios["nvfp4"]
