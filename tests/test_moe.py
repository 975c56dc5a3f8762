"""Mixture-of-experts targets: their shapes against the published counts, the experts a pass touches against Monte
Carlo and against the published measurements, what a verify pass costs at small and large batch, the attention
variants, config.json of each family, batch ranges where speculation pays, and bad input."""

import json

import numpy as np
import pytest
from conftest import one_line_error, run

from scenarios import load_hardware, load_model
from simulator.cost import CostModel
from simulator.specs import DEFAULT_EXPERT_SHARING, ModelSpec


@pytest.mark.parametrize("name, total_b, active_b", [
    # total and active parameters as their authors state them (model cards / reports); active here excludes the
    # input embedding, a gather (gpt-oss's "3.6 B active" excludes it; Mixtral's 12.9 B and Qwen's counts include
    # it, so their embedding is added back)
    ("mixtral-8x7b", 46.7, 12.9 - 0.131),  # Mistral AI, "Mixtral of experts", arXiv 2401.04088
    ("qwen3-30b-a3b", 30.5, 3.3 - 0.311),  # Qwen3 technical report, arXiv 2505.09388, table 2
    ("qwen3-235b-a22b", 235.0, 22.0 - 0.622),
    ("deepseek-v3", 671.0, 37.0 - 0.927),  # DeepSeek-V3 technical report, arXiv 2412.19437 (MTP module excluded)
    ("gpt-oss-20b", 21.0, 3.6),  # OpenAI gpt-oss model card: 20.9 B total, 3.61 B active
    ("gpt-oss-120b", 117.0, 5.1),
    ("qwen2-57b-a14b", 57.4, 14.0 - 0.545),  # Qwen2 technical report, arXiv 2407.10671
])
def test_moe_presets_count_their_published_parameters(name, total_b, active_b):
    m = load_model(name)
    assert m.n_params / 1e9 == pytest.approx(total_b, rel=0.015)
    assert m.matmul_params / 1e9 == pytest.approx(active_b, rel=0.04)


def test_a_dense_model_reads_all_its_weights_whatever_the_pass():
    m = load_model("llama-3.1-8b")
    assert not m.is_moe and m.experts_touched(4, 8) == 0.0
    for b, n in ((1, 1), (8, 5), (256, 9)):
        assert m.linear_weight_bytes(b, n) == m.weight_bytes_per_pass


def test_distinct_experts_of_independent_tokens_against_monte_carlo(rng):
    """Sharing 0: every token routes to top-k of E uniformly and independently, so an expert is missed by one token
    with probability 1 - k/E and the pass touches E (1 - (1 - k/E)^N); Monte Carlo of top-k draws agrees."""
    m = load_model("qwen3-30b-a3b")  # 128 experts, top-8
    E, k = m.n_experts, m.experts_per_token
    for batch, n in ((1, 1), (1, 4), (4, 4), (16, 1)):
        draws = [len({e for _ in range(batch * n) for e in rng.choice(E, k, replace=False)}) for _ in range(3000)]
        assert m.experts_touched(n, batch, sharing=0.0) == pytest.approx(np.mean(draws), rel=0.02)


def test_sharing_within_a_sequence_reproduces_the_published_measurements():
    """The default sharing 0.5 against three measurements of verify rows (sources in simulator/specs.py):
    Cohere, ~2.5x the expert bytes of one token for 4 verified tokens; Luce-Org/lucebox #501, 39.4 distinct experts
    for 8 rows of 256 top-8; aws-neuron/nkipy #63, ~13 for gpt-oss-20b at K = 7 (8 rows). Within 15 %."""
    big = ModelSpec("r", 4, 1024, 8, 8, 1024, 1000, n_experts=256, experts_per_token=8, d_ff_expert=256)
    s = DEFAULT_EXPERT_SHARING
    assert big.experts_touched(4, 1, s) / big.experts_touched(1, 1, s) == pytest.approx(2.5, rel=0.05)
    assert big.experts_touched(8, 1, s) == pytest.approx(39.4, rel=0.15)
    assert load_model("gpt-oss-20b").experts_touched(8, 1, s) == pytest.approx(13.0, rel=0.15)
    # independence (sharing 0) overstates each: the reason a sharing term exists
    assert big.experts_touched(8, 1, 0.0) > 1.3 * 39.4


def test_skew_touches_fewer_experts_and_none_is_uniform():
    m = load_model("qwen3-30b-a3b")
    uniform = m.experts_touched(4, 8, 0.5, 0.0)
    assert m.experts_touched(4, 8, 0.5, 1e-9) == pytest.approx(uniform, rel=1e-3)
    assert m.experts_touched(4, 8, 0.5, 1.0) < uniform
    assert m.experts_touched(10**6, 64, 0.0, 1.0) == pytest.approx(m.n_experts, rel=1e-6)


def test_verification_is_dear_at_batch_one_and_cheap_once_the_batch_wakes_every_expert():
    """The MoE shape of the essay's argument: at batch 1 verifying 4 tokens reads ~2x the weights of a one-token
    step (a dense model: 1x) and costs ~1.4x its time (the kernels' fixed cost a layer, 38 us on the H100 preset,
    is paid once either way; AIConfigurator's measured kernels: 1.4-1.7x); by batch 64 the one-token step already
    wakes nearly every expert and verifying is about as cheap as the essay says (a 3 B-active model is still
    memory-bound there, where the dense 8 B is not)."""
    cost = CostModel.from_hardware(load_hardware("h100-sxm"))
    moe, dense = load_model("qwen3-30b-a3b"), load_model("llama-3.1-8b")

    def ratio(m, b):
        return cost.pass_time_s(m, b, 4, 512) / cost.pass_time_s(m, b, 1, 512)

    read = cost.pass_cost(moe, 1, 4, 512).weight_bytes / cost.pass_cost(moe, 1, 1, 512).weight_bytes
    assert 1.6 < read < 2.6 and 1.3 < ratio(moe, 1) < read and ratio(dense, 1) < 1.1
    assert moe.experts_touched(1, 64) > 0.98 * moe.n_experts
    assert ratio(moe, 64) < 1.15 < ratio(dense, 64)
    # rejected drafts still wake their experts: the verify pass is priced on all k + 1 tokens
    assert cost.pass_cost(moe, 1, 4, 512).weight_bytes > cost.pass_cost(moe, 1, 2, 512).weight_bytes


def test_mla_and_sliding_windows_shrink_the_cache():
    ds, oss = load_model("deepseek-v3"), load_model("gpt-oss-20b")
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2  # one bf16 latent and rotary key per token and layer
    assert oss.kv_bytes_at(8192) == (12 * 8192 + 12 * 128) * 2 * 8 * 64 * 2  # half the layers keep 128 tokens
    assert oss.attention_flops(1, 8191, 1) == 4 * 64 * 64 * (12 * 8192 + 12 * 128)
    assert ds.resident_weight_bytes == pytest.approx(671e9, rel=0.01)  # fp8 weights: a byte each
    assert load_model("gpt-oss-20b").resident_weight_bytes / 1e9 == pytest.approx(13.7, rel=0.05)  # mxfp4 experts


CONFIGS = {
    "mixtral-8x7b": {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
                     "num_experts_per_tok": 2, "sliding_window": None, "torch_dtype": "bfloat16"},
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
                      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                      "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936, "sliding_window": None,
                      "use_sliding_window": False, "torch_dtype": "bfloat16"},
    "deepseek-v3": {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                    "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
                    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
                    "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16",
                    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
    "gpt-oss-20b": {"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880, "num_attention_heads": 64,
                    "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32,
                    "num_experts_per_tok": 4, "experts_per_token": 4, "sliding_window": 128, "vocab_size": 201088,
                    "layer_types": ["sliding_attention", "full_attention"] * 12, "torch_dtype": "bfloat16",
                    "quantization_config": {"quant_method": "mxfp4"}},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_familys_config_json_reads_as_its_preset(tmp_path, name):
    from scenarios import load_model as load

    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIGS[name]))
    got, preset = load(str(path)), load(name)
    for field in ("n_layers", "d_model", "n_experts", "experts_per_token", "d_ff_expert", "d_ff_shared",
                  "dense_layers", "attention", "kv_lora_rank", "sliding_layers", "expert_dtype", "mtp_modules"):
        assert getattr(got, field) == getattr(preset, field), field
    assert got.n_params == pytest.approx(preset.n_params, rel=1e-6)
    assert got.kv_bytes_per_token == preset.kv_bytes_per_token


def test_speculation_that_pays_only_between_two_batches_is_said_as_ranges():
    """Qwen3-30B-A3B with a 4-token EAGLE-3 draft at acceptance 0.4: verification wakes too many experts at small
    batches, pays once the plain step wakes most of them: the summary gives ranges, not "off above B", the JSON
    carries them, and the policy's vLLM table puts k = 0 below."""
    r = run("predict", "--hardware", "h100-sxm", "--target", "qwen3-30b-a3b", "--draft", "eagle3", "--acceptance",
            "iid:0.4", "--batch", "1..64", "--k", "0,4", "--context", "1024")
    assert r.exit_code == 0, r.output
    assert "speculation pays only at batches" in r.output and "disable speculation above" not in r.output
    r = run("predict", "--hardware", "h100-sxm", "--target", "qwen3-30b-a3b", "--draft", "eagle3", "--acceptance",
            "iid:0.4", "--batch", "1..64", "--k", "0,4", "--context", "1024", "--json")
    (pays,) = json.loads(r.stdout)["speculation_pays_in_batches"]
    assert len(pays["ranges"]) == 1 and pays["ranges"][0][0] > 1 and pays["ranges"][0][1] == 64
    r = run("policy", "--hardware", "h100-sxm", "--target", "qwen3-30b-a3b", "--draft", "eagle3", "--acceptance",
            "iid:0.4", "--k", "0,4", "--context", "1024", "--tolerance", "0")
    table = json.loads(next(line for line in r.output.splitlines() if line.startswith("[")))
    assert table[0][0] == 1 and table[0][2] == 0 and table[1][2] == 4


def test_paying_ranges_from_best_rows():
    from simulator.sweep import BestRow, paying_ranges

    best = [BestRow(b, 0, k, None, 1.0) for b, k in zip(range(1, 9), (0, 0, 2, 2, 0, 3, 3, 0))]
    assert paying_ranges(best) == ((3, 4), (6, 7))
    assert paying_ranges([BestRow(1, 0, 0, "2,1", 1.2), BestRow(2, 0, 0, None, 1.0)]) == ((1, 1),)


def test_policy_covers_the_batches_that_fit_and_says_where_memory_ends():
    r = run("policy", "--hardware", "h100-sxm", "--acceptance", "iid:0.6", "--context", "128,4096", "--format",
            "json")
    assert r.exit_code == 0, r.output
    record = json.loads(r.output[r.output.index("{"):])
    long = next(t for t in record["by_context"] if t["context"] == 4096)
    assert long["fits_up_to_batch"] == long["num_speculative_tokens_per_batch_size"][-1][1] < 256
    assert "nothing fits in memory" in r.output


@pytest.mark.parametrize("args, fragments", [
    (["--expert-sharing", "1.5"], ["--expert-sharing", "[0, 1]"]),
    (["--routing-skew", "-1"], ["--routing-skew"]),
])
def test_bad_moe_options_are_one_line(args, fragments):
    r = run("predict", "--hardware", "h100-sxm", "--target", "qwen3-30b-a3b", "--draft", "eagle3", "--acceptance",
            "iid:0.7", "--batch", "1,8", "--k", "0..2", *args)
    one_line_error(r, *fragments)


@pytest.mark.parametrize("change, fragment", [
    ({"num_experts_per_tok": 300}, "top-k routing 300"),
    ({"num_experts_per_tok": None}, "num_experts_per_tok"),
    ({"moe_intermediate_size": None}, "moe_intermediate_size"),
])
def test_a_bad_moe_config_json_is_one_line(tmp_path, change, fragment):
    cfg = {k: v for k, v in {**CONFIGS["qwen3-30b-a3b"], **change}.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = run("predict", "--hardware", "h100-sxm", "--target", str(path), "--draft", "eagle3", "--acceptance",
            "iid:0.7", "--batch", "1", "--k", "0..1")
    one_line_error(r, fragment)
