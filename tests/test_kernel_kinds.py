"""The kernel kinds a GPU preset measured apart from its roofline (simulator.kernel_kinds): the fused-MoE kernel,
block-scaled fp8 GEMM floors, MLA's module. They price only where their kind runs, and an engine's own tables
replace vLLM's."""

from dataclasses import replace

import numpy as np
import pytest

from scenarios import SpecsimError, _kernel_terms, load_hardware, load_model
from simulator.cost import CostModel
from simulator.kernel_kinds import KernelTerms, block_scaled, moe_kernel_dtype


def _without_kinds(hw):
    return replace(hw, kernels=KernelTerms())


def test_a_dense_bf16_model_is_priced_as_before():
    hw = load_hardware("h100-sxm")
    model = load_model("llama-3.1-8b")
    batches = np.array([1, 4, 16, 64, 256])
    with_kinds = CostModel.from_hardware(hw, "bf16").pass_times(model, batches, 1, 1088)
    without = CostModel.from_hardware(_without_kinds(hw), "bf16").pass_times(model, batches, 1, 1088)
    assert np.array_equal(with_kinds, without)


def test_a_moe_layer_pays_the_fused_kernels_fixed_time():
    hw = load_hardware("h100-sxm")
    model = load_model("qwen3-30b-a3b")
    kernel = hw.kernels.moe_kernel(moe_kernel_dtype(model))
    assert kernel is not None and kernel.one_token_s is not None
    cost = CostModel.from_hardware(hw, "bf16").pass_cost(model, 1, 1, 1088)
    moe = next(op for op in cost.operators if op.name == "moe")
    # one token wakes its top-k experts: at least the kernel's one-token fixed time a layer plus their bytes
    floor = model.n_moe_layers * (kernel.one_token_s + model.experts_per_token * model.expert_params
                                  * model.expert_bytes_per_param / hw.mem_bw_bytes_per_s)
    assert moe.time_s >= floor
    # the experts' bytes left the linear operator (not priced twice)
    linear = next(op for op in cost.operators if op.name == "linear")
    assert linear.bytes < model.dense_weight_bytes + 1e9


def test_deepseeks_block_scaled_gemms_take_at_least_the_measured_floor():
    hw = load_hardware("h200")
    model = load_model("deepseek-v3", "fp8").shard(8)
    assert block_scaled(model) and moe_kernel_dtype(model) == "fp8_block"
    floor_s = float(hw.kernels.fp8_block_floor_s(1))
    assert floor_s > 40e-6  # vLLM 0.24's block-scaled fp8 GEMMs on Hopper (~56 us)
    cost = CostModel.from_hardware(hw, "fp8").pass_cost(model, 1, 1, 1088)
    moe = next(op for op in cost.operators if op.name == "moe")
    assert moe.time_s >= model.n_moe_layers * 2 * floor_s  # the shared experts' two GEMMs, each at least the floor
    # and the MLA module's fixed time a layer is in the overheads
    assert cost.overhead_time_s >= model.n_layers * hw.kernels.mla_layer_s


def test_an_engines_own_tables_replace_vllms():
    vllm, sglang = load_hardware("h200", "vllm"), load_hardware("h200", "sglang")
    assert float(vllm.kernels.fp8_block_floor_s(1)) > 10 * float(sglang.kernels.fp8_block_floor_s(1))
    assert sglang.kernels.mla_layer_s == 0.0  # no MLA module measured under SGLang: the roofline prices it
    model = load_model("deepseek-v3", "fp8").shard(8)
    t_vllm = CostModel.from_hardware(vllm, "fp8").pass_time_s(model, 1, 1, 1088)
    t_sglang = CostModel.from_hardware(sglang, "fp8").pass_time_s(model, 1, 1, 1088)
    assert t_sglang < t_vllm


@pytest.mark.parametrize("name, gpu, dtype, tp", [("qwen3-30b-a3b", "h100-sxm", "bf16", 1),
                                                  ("deepseek-v3", "h200", "fp8", 8),
                                                  ("gpt-oss-20b", "b200-sxm", "bf16", 1)])
def test_scalar_and_vectorised_prices_agree(name, gpu, dtype, tp):
    model = load_model(name, dtype)
    model = model.shard(tp) if tp > 1 else model
    cost = CostModel.from_hardware(load_hardware(gpu), dtype)
    batches = np.array([1, 2, 16, 128])
    for n in (1, 4):
        many = cost.pass_times(model, batches, n, 2048)
        one = [cost.pass_time_s(model, int(b), n, 2048) for b in batches]
        assert np.allclose(many, one, rtol=1e-9)


def test_a_bad_kernel_value_is_a_one_line_error():
    with pytest.raises(SpecsimError, match="fixed_us"):
        _kernel_terms({"moe_kernel": {"bf16": {"fixed_us": -1.0, "bw_efficiency": 0.8, "flops_efficiency": 0.4}}},
                      "h100-sxm")
    with pytest.raises(SpecsimError, match="equally long"):
        _kernel_terms({"fp8_block_gemm_floor_rows": [1, 16], "fp8_block_gemm_floor_us": [50.0]}, "h100-sxm")


def test_the_moe_operators_bound_is_the_fused_kernels_own():
    """Qwen3-30B-A3B on the H100 (vLLM's bf16 fused MoE: its bytes at 85.5 % of the bandwidth, its FLOPs at 32.4 %
    of the bf16 peak): 512 rows (64 x 8) are memory bound; at 2,048 rows (256 x 8) the kernel's FLOPs outlast its
    bytes, compute bound, where the linear layers' rates (81 % of the peak) would still call it memory bound."""
    hw = load_hardware("h100-sxm")
    model = load_model("qwen3-30b-a3b")
    cost = CostModel.from_hardware(hw, "bf16")
    mk = hw.kernels.moe_kernel(moe_kernel_dtype(model))
    bw, flop_rate = hw.mem_bw_bytes_per_s * mk.bw_efficiency, hw.peak_flops("bf16") * mk.flops_efficiency
    linear_bw, linear_flop_rate = cost.linear_rates.at(2048)
    bounds = {}
    for batch in (64, 256):
        (op,) = [o for o in cost.pass_cost(model, batch, 8, 128).operators if o.name == "moe"]
        bounds[batch] = op.bound
        assert op.bound == ("memory" if op.bytes / bw >= op.flops / flop_rate else "compute")
        if batch == 256:
            assert op.bytes / linear_bw >= op.flops / linear_flop_rate  # what the linear rates would say
    assert bounds == {64: "memory", 256: "compute"}
