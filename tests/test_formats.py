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
