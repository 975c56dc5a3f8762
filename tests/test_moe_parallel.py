"""Expert parallelism and DP attention (simulator/moe_parallel.py, simulator/expert_comm.py): a GPU's share against
closed forms, the all-to-all against AIConfigurator's measured DeepEP table it reads, a verify's k + 1 tokens
through the dispatch, and the bad layouts as one-line errors."""

import numpy as np
import pytest
from conftest import one_line_error, run

from scenarios import load_hardware, load_model
from simulator.cost import CostModel
from simulator.expert_comm import COMBINE_BYTES, DISPATCH_BYTES, ExpertLinks
from simulator.moe_parallel import split

DS = ["--hardware", "h200", "--target", "deepseek-v3", "--draft", "mtp", "--dtype", "fp8", "--acceptance", "iid:0.8"]


def test_no_ep_and_no_dp_is_tensor_parallelism_as_before():
    m = load_model("deepseek-v3", "fp8")
    assert split(m, 8) == m.shard(8)


def test_a_gpu_holds_its_share_of_the_experts_and_of_the_cache():
    m = load_model("deepseek-v3", "fp8")
    s = split(m, 16, 16, 16)
    assert s.routed_params * 16 == m.routed_params  # 256 / 16 experts each, whole width
    assert s.kv_bytes_per_token * 16 == pytest.approx(m.kv_bytes_per_token)  # each sequence's latent on one GPU
    t = split(m, 8, 8, 1)  # attention TP 8: MLA's latent replicated on every GPU, as under TP
    assert t.kv_bytes_per_token == m.kv_bytes_per_token and t.n_heads == m.n_heads // 8


def test_the_links_model_is_latency_plus_bytes_over_the_slower_link():
    links = ExpertLinks(200e9, 40e9, 10e-6, domain_gpus=8)
    t, k, d = 64.0, 8, 7168
    per_token = k * d * (DISPATCH_BYTES + COMBINE_BYTES)
    inside = links.a2a_s(8, t, k, d)  # one node: every byte over NVLink
    assert inside == pytest.approx(2e-5 + t * per_token * 7 / 8 / 200e9)
    across = links.a2a_s(32, t, k, d)  # 24 of 31 other GPUs beyond the node: the NIC decides
    assert across == pytest.approx(2e-5 + t * per_token * 31 / 32 * 24 / 31 / 40e9)


def test_the_measured_table_is_read_as_measured():
    pytest.importorskip("aiconfigurator_core")
    from scenarios.layouts import links_for

    hw = load_hardware("h100-sxm", "sglang")
    links = links_for(hw, "h100-sxm", load_model("deepseek-v3", "fp8"))
    # aiconfigurator-core 0.12, h100_sxm/comm/sglang/0.5.6.post2/wideep_deepep_ll_perf.parquet, 8 nodes (EP 64),
    # 128 tokens a GPU: dispatch 166.77 us, combine 304.73 us
    assert float(links.a2a_s(64, 128.0, 8, 7168)) == pytest.approx(471.5e-6, rel=1e-3)
    assert float(links.a2a_s(8, 128.0, 8, 7168)) == pytest.approx((39.8287 + 72.3825) * 1e-6, rel=1e-3)


def test_a_verify_sends_its_k_plus_one_tokens_through_the_dispatch():
    from simulator.moe_parallel import comm_times

    hw = load_hardware("h200", "sglang")
    cost = CostModel.from_hardware(hw, "fp8")
    m = split(load_model("deepseek-v3", "fp8"), 16, 16, 16)
    b = np.array([256.0])
    assert comm_times(cost, m, b, np.array([4.0])) == pytest.approx(comm_times(cost, m, 4 * b, np.array([1.0])))
    assert comm_times(cost, m, b, np.array([4.0])) > comm_times(cost, m, b, np.array([1.0]))


def test_dp_attention_reads_each_groups_own_cache():
    """At long context the KV reads dominate: DP 8 reads an eighth of TP 8's per GPU (MLA's latent replicated
    under TP), so its step is faster at a batch that fits both."""
    cost = CostModel.from_hardware(load_hardware("h200", "sglang"), "fp8")
    m = load_model("deepseek-v3", "fp8")
    tp, dp = split(m, 8), split(m, 8, 8, 8)
    assert cost.pass_time_s(dp, 256, 1, 8000) < cost.pass_time_s(tp, 256, 1, 8000)
    assert cost.pass_times(dp, np.array([256]), 1, 8000)[0] == pytest.approx(cost.pass_time_s(dp, 256, 1, 8000))


@pytest.mark.parametrize("args, fragments", [
    (["--tp", "7", "--ep", "7"], ("--ep 7 does not divide", "256 experts")),
    (["--tp", "8", "--ep", "16"], ("--ep 16 with --tp 8", "give --tp 16")),
])
def test_bad_layouts_are_one_line_errors(args, fragments):
    one_line_error(run("predict", *DS, "--batch", "8", *args), *fragments)


@pytest.mark.parametrize("flag", ["--ep", "--dp"])
def test_spreading_a_dense_target_is_refused(flag):
    one_line_error(run("predict", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--tp", "2", flag, "2"),
                   f"{flag} spreads a mixture of experts", "dense")
