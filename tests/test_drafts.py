"""Every kind of draft: what its drafting reads and computes on the same roofline as every pass, steps with no
proposal as plain steps (closed form and Monte Carlo), memory, and the one-line refusals of bad pairings."""

import json

import numpy as np
import pytest
from conftest import one_line_error, run

from scenarios import load_hardware, load_model
from scenarios.draft_specs import load_draft
from simulator.acceptance import IIDAcceptance, Proposing
from simulator.cost import CostModel
from simulator.drafts import VLLM_NGRAM_HOST, Draft, eagle3_head
from simulator.sweep import Candidate, chains, step_time, sweep
from simulator.trees import parse_branching

H100 = CostModel.from_hardware(load_hardware("h100-sxm"))
LLAMA = load_model("llama-3.1-8b")


def test_an_eagle3_heads_parameters_by_hand():
    """One Llama layer at 4096 whose q/k/v read 8192 (token embedding beside the hidden state), its LM head over
    32,000 tokens, and the 3h -> h fusion; the embedding is the target's (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)."""
    head = load_draft("eagle3", LLAMA)
    h = 4096
    attention = 2 * h * 32 * 128 + 2 * h * 8 * 128
    widened = h * (32 + 2 * 8) * 128
    mlp = 3 * h * 14336
    norms = 3 * h
    assert head.n_params == attention + widened + mlp + 32000 * h + 3 * h * h + norms
    assert head.name == "llama-3.1-8b-eagle3" and "EAGLE3-LLaMA3.1" in head.source
    assert head.resident_weight_bytes == head.n_params * 2


def test_a_heads_drafting_costs_a_fraction_of_a_draft_models():
    """k = 3 at batch 1: three passes of Llama-3.2-1B's 16 layers against three passes of one layer plus a 32k-token
    LM head; the head's first pass reads the k + 1 verified rows, its fusion once. Around them the engine's own cost
    for the kind (engines.toml: vLLM pays ~0.7 ms a head's pass, vllm #20780), apart from the passes' own time."""
    model = load_draft("llama-3.2-1b", LLAMA)
    head = load_draft("eagle3", LLAMA)
    step_model = step_time(H100, LLAMA, model, 1, 1024, Candidate(3))
    step_head = step_time(H100, LLAMA, head, 1, 1024, Candidate(3))
    assert step_head.verify_s == step_model.verify_s
    kind = H100.overheads.engine.drafting("eagle3")
    around = 3 * kind.per_pass.fixed_s + kind.per_step.fixed_s
    assert step_head.draft_s - around < 0.5 * step_model.draft_s
    one_pass = H100.pass_time_s(head.module, 1, 4, 1024) + 2 * H100.pass_time_s(head.module, 1, 1, 1025)
    fusion = float(H100.linear_times(3 * 4096 * 4096 * 2, 2.0 * 3 * 4096 * 4096 * 4, 4))
    assert step_head.draft_s == pytest.approx(one_pass + fusion + around, rel=0.02)


def test_mtp_reads_the_shared_lm_head_every_pass_but_holds_it_once():
    ds = load_model("deepseek-v3")
    mtp = load_draft("mtp", ds)
    assert mtp.kind == "mtp" and mtp.positions == 1 and mtp.module.is_moe
    assert mtp.module.vocab_size == ds.vocab_size  # the head it reads each pass is the target's
    own = mtp.module.n_params  # block, 2h -> h projection and the shared head
    assert mtp.n_params == own - ds.vocab_size * ds.d_model
    assert mtp.n_params / 1e9 == pytest.approx(14.0 - 0.93 * 2 + 0.1, rel=0.25)  # "685 B with the 14 B MTP module"


def test_medusa_drafts_every_position_in_one_pass_and_refuses_more_than_its_heads():
    vicuna = load_model("vicuna-7b")
    med = load_draft("medusa", vicuna)
    assert med.positions == 5 and "medusa-vicuna-7b" in med.source
    k2, k5 = (step_time(H100, vicuna, med, 4, 512, Candidate(k)).draft_s for k in (2, 5))
    assert k2 == k5 > 0  # one pass whatever the depth
    tree = step_time(H100, vicuna, med, 4, 512, Candidate(None, parse_branching("4,2,2")))
    assert tree.draft_s == k2
    r = run("predict", "--hardware", "h100-sxm", "--target", "vicuna-7b", "--draft", "medusa:3", "--acceptance",
            "iid:0.7", "--batch", "1", "--k", "0..4")
    one_line_error(r, "3 heads", "--k 3")


def test_a_model_free_draft_costs_no_device_pass_but_host_time_that_grows_with_batch_and_context():
    ngram = load_draft("ngram", LLAMA)
    assert not ngram.on_device and ngram.resident_weight_bytes == 0 and ngram.kv_bytes_per_token == 0
    a = step_time(H100, LLAMA, ngram, 1, 1024, Candidate(3))
    b = step_time(H100, LLAMA, ngram, 64, 8192, Candidate(3))
    assert a.draft_s == pytest.approx(VLLM_NGRAM_HOST.at(1, 1024))
    assert b.draft_s == pytest.approx(VLLM_NGRAM_HOST.at(64, 8192)) and b.draft_s > 50 * a.draft_s
    # vLLM #56732's figure: 70 ms per step at 512 requests x 129k context
    assert VLLM_NGRAM_HOST.at(512, 129_000) == pytest.approx(0.070, rel=0.05)
    over = load_draft("ngram:overlap,us_per_seq=100", LLAMA)
    t = step_time(H100, LLAMA, over, 8, 1024, Candidate(3))
    assert t.total_s == pytest.approx(max(over.host.at(8, 1024), t.verify_s + t.accept_s))


def test_steps_without_a_proposal_are_plain_steps_closed_form():
    """At batch 1 a model-free step is a plain step with probability 1 - p and a verification of k + 1 otherwise,
    the lookup paid every time: E[T] = (1 - p) T_plain + p T_spec + host, E[tokens] = (1 - p) + p E[A + 1]."""
    ngram = load_draft("ngram", LLAMA)
    p, k = 0.3, 4
    acc = Proposing(IIDAcceptance(0.8), p)
    plain = H100.plain_step_s(LLAMA, 1, 1024)
    spec = step_time(H100, LLAMA, ngram, 1, 1024, Candidate(k))  # p = 1: every step verifies
    mixed = step_time(H100, LLAMA, ngram, 1, 1024, Candidate(k), acc.proposal_rate(k))
    host = ngram.host.at(1, 1024)
    assert mixed.total_s == pytest.approx((1 - p) * plain + p * (spec.total_s - host) + host, rel=1e-9)
    assert acc.expected_tokens(k) == pytest.approx((1 - p) + p * IIDAcceptance(0.8).expected_tokens(k))
    result = sweep(H100, LLAMA, ngram, acc, [1], chains([0, k]), [1024])
    row = next(r for r in result.rows if r.k == k)
    assert row.speedup == pytest.approx(acc.expected_tokens(k) * plain / mixed.total_s, rel=1e-9)


def test_a_ragged_batch_verifies_fewer_rows_than_a_padded_one():
    """At batch 64 nearly every step has some proposal: an engine that packs each sequence's own rows (vLLM)
    verifies 1 + k p tokens a sequence on average, one that pads verifies k + 1."""
    from dataclasses import replace

    ngram = load_draft("ngram", LLAMA)
    packed = step_time(H100, LLAMA, ngram, 64, 1024, Candidate(4), 0.3)
    engine = replace(H100.overheads.engine, ragged_verify=False)
    padded = step_time(replace(H100, overheads=replace(H100.overheads, engine=engine)), LLAMA, ngram, 64, 1024,
                       Candidate(4), 0.3)
    assert packed.verify_s < padded.verify_s
    from simulator.sweep import verify_pass_times

    between = [float(verify_pass_times(H100, LLAMA, np.array([64]), n, 1024)[0]) for n in (2, 3)]  # as verified
    assert between[0] < packed.verify_s - H100.overheads.engine.verify_extra_s(64) < between[1]  # 1 + 4 x 0.3


def test_proposing_against_monte_carlo(rng):
    acc = Proposing(IIDAcceptance(0.7), 0.25)
    stream = acc.stream(rng)
    draws = np.bincount([stream(3) for _ in range(40_000)], minlength=4) / 40_000
    assert draws == pytest.approx(acc.chain_pmf(3), abs=0.01)
    assert acc.at_context(5000).proposal_rate(3) == 0.25


def test_a_lookups_trace_reads_its_own_proposal_rate():
    from simulator.replay import TraceAcceptance

    ys = (np.array([1, 1, 3, 2, 1, 1, 1, 4, 3, 2, 1]),)
    lookup = TraceAcceptance(ys, lookup=True)
    assert lookup.proposal_rate(3) == pytest.approx(1 - lookup.chain_pmf(3)[0])
    assert 0 < lookup.proposal_rate(3) < 1 and TraceAcceptance(ys).proposal_rate(3) == 1.0


def test_memory_holds_a_heads_weights_and_cache_not_a_models():
    from simulator.cost import memory_needed_bytes

    head, model = load_draft("eagle3", LLAMA), load_draft("llama-3.2-1b", LLAMA)
    need = [memory_needed_bytes(LLAMA, d, 64, 4096) for d in (head, model, load_draft("ngram", LLAMA))]
    assert need[2] < need[0] < need[1]
    assert need[0] - need[2] == pytest.approx(head.resident_weight_bytes + 64 * head.kv_bytes_at(4096))


def test_every_command_takes_every_kind():
    base = ["--hardware", "h100-sxm", "--target", "llama-3.1-8b"]
    for draft, acc in (("eagle3", "iid:0.75"), ("ngram", "iid:0.8@proposed:0.3"), ("medusa:4", "iid:0.6"),
                       ("mtp:1,assumed", "iid:0.8"), ("llama-3.2-1b", "iid:0.7")):
        r = run("predict", *base, "--draft", draft, "--acceptance", acc, "--batch", "1,64", "--k", "0..3", "--json")
        assert r.exit_code == 0, (draft, r.output)
        assert json.loads(r.stdout)["draft"]
        r = run("policy", *base, "--draft", draft, "--acceptance", acc, "--batch", "1..32", "--k", "0..3")
        assert r.exit_code == 0, (draft, r.output)
    r = run("simulate", *base, "--draft", "ngram", "--acceptance", "iid:0.8@proposed:0.3", "--rate", "5",
            "--requests", "50", "--policy", "off,fixed:3", "--executor", "serial")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, fragments", [
    (["--target", "qwen3-8b", "--draft", "llama-3.1-8b-eagle3"], ["made for llama-3.1-8b", "qwen3-8b"]),
    (["--target", "qwen3-30b-a3b", "--draft", "llama-3.1-8b-eagle3"], ["width 4096", "2048"]),
    (["--draft", "medusa:0"], ["at least one head"]),
    (["--draft", "ngram", "--acceptance", "iid:0.8"], ["@proposed", "trace:FILE:ngram"]),
    (["--draft", "eagle3", "--acceptance", "iid:0.8@proposed:0.3"], ["proposal rate", "eagle3"]),
    (["--draft", "mtp"], ["carries no MTP module", "mtp:N,assumed"]),
    (["--draft", "mtp:2"], ["carries no MTP module", "mtp:2,assumed"]),
    (["--draft", "eagle3:layers=2,layers=3"], ["given twice"]),
    (["--draft", "ngram:us_per_seq=nan", "--acceptance", "iid:0.8@proposed:0.3"], ["finite"]),
    (["--draft", "eagle3:layers=-1"], [">= 1"]),
    (["--target", "qwen2.5-7b", "--draft", "llama-3.2-1b"], ["vocabulary", "--heterogeneous-vocab"]),
    (["--draft", "eagle3:layers=0"], ["layers"]),
    (["--draft", "ngram:us_per_seq=-1"], [">= 0"]),
    (["--draft", "medsa:4"], ["unknown draft"]),
])
def test_bad_drafts_are_one_line(args, fragments):
    acc = [] if "--acceptance" in args else ["--acceptance", "iid:0.7"]
    r = run("predict", "--hardware", "h100-sxm", *(["--target", "llama-3.1-8b"] if "--target" not in args else []),
            *args, *acc, "--batch", "1,8", "--k", "0..3")
    one_line_error(r, *fragments)


def test_a_head_config_json_is_read_and_a_bad_one_refused(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "num_hidden_layers": 1,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "draft_vocab_size": 32000}
    path = tmp_path / "head" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    head = load_draft(str(path), LLAMA)
    assert head.kind == "eagle3" and head.n_params == load_draft("eagle3", LLAMA).n_params
    path.write_text(json.dumps({k: v for k, v in cfg.items() if k != "intermediate_size"}))
    r = run("predict", "--hardware", "h100-sxm", "--draft", f"eagle3:{path}", "--acceptance", "iid:0.7", "--batch",
            "1", "--k", "0..2")
    one_line_error(r, "intermediate_size")


def test_another_vocabulary_is_priced_when_asked_for():
    r = run("predict", "--hardware", "h100-sxm", "--target", "qwen2.5-7b", "--draft", "llama-3.2-1b",
            "--heterogeneous-vocab", "--acceptance", "iid:0.6", "--batch", "1", "--k", "0..3", "--json")
    assert r.exit_code == 0, r.output
    d = load_draft("llama-3.2-1b", load_model("qwen2.5-7b"), heterogeneous_vocab=True)
    plain = Draft.of_model(load_model("llama-3.2-1b"))
    qwen = load_model("qwen2.5-7b")
    extra = step_time(H100, qwen, d, 4, 512, Candidate(3)).draft_s - step_time(H100, qwen, plain, 4, 512,
                                                                               Candidate(3)).draft_s
    assert extra == pytest.approx(d.vocab_mapping_s * 4 * 3)
    assert "mapped" in d.source


def test_a_head_shaped_after_any_target():
    head = eagle3_head(load_model("qwen3-235b-a22b"))
    assert head.module.d_model == 4096 and head.module.vocab_size == 32000 and not head.module.is_moe


def test_policy_exports_vllms_speculative_config_for_each_kind():
    base = ["policy", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--batch", "1..32", "--k", "0..4",
            "--format", "vllm-config"]
    for draft, acc, method, model in (("eagle3", "iid:0.75", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
                                      ("llama-3.2-1b", "iid:0.7", "draft_model", "meta-llama/Llama-3.2-1B"),
                                      ("ngram", "iid:0.8@proposed:0.3", "ngram", None),
                                      ("mtp:1,assumed", "iid:0.8", "mtp", None)):
        r = run(*base, "--draft", draft, "--acceptance", acc)
        assert r.exit_code == 0, r.output
        config = json.loads(r.output[r.output.index("{"):])
        assert config["method"] == method and config.get("model") == model
        table = config["num_speculative_tokens_per_batch_size"]
        assert table[0][0] == 1 and table[-1][1] == 32 and config["num_speculative_tokens"] == max(
            k for _, _, k in table)


QWEN3_30B_A3B_CONFIG = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
                        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                        "intermediate_size": 6144, "vocab_size": 151936, "tie_word_embeddings": False,
                        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}


def _vllm_config(*args):
    r = run("policy", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--context", "1024", "--batch", "1..8",
            "--format", "vllm-config", "--draft", "eagle3", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), r.stderr


def test_a_published_head_is_taken_only_for_its_own_model_by_its_fields(tmp_path):
    """The same Qwen3-30B-A3B config.json gets the published head in a folder of any name; a 4096-wide config in a
    folder named after the preset, and a target no head was published for, get a placeholder and a line saying so,
    never an invented repository."""
    published = "zhuyksir/EAGLE3-Qwen3-30B-A3B-DenseHead"
    for folder, cfg in (("qwen3-30b-a3b", QWEN3_30B_A3B_CONFIG), ("mymodel", QWEN3_30B_A3B_CONFIG)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text(json.dumps(cfg))
        config, said = _vllm_config("--target", str(tmp_path / folder))
        assert config["model"] == published
    wide = tmp_path / "wide" / "qwen3-30b-a3b"
    wide.mkdir(parents=True)
    (wide / "config.json").write_text(json.dumps({**QWEN3_30B_A3B_CONFIG, "hidden_size": 4096, "num_hidden_layers": 8}))
    for target in (["--target", str(wide)], ["--target", "llama-3.1-70b", "--tp", "4"]):
        config, said = _vllm_config(*target)
        assert config["model"] == "<your EAGLE-3 head for this target>", config
        assert "no published eagle3 draft is known" in said and "placeholder" in said
    assert load_draft("eagle3", load_model(str(wide))).repo == ""


def test_an_acceptance_trace_of_another_model_is_named(tmp_path):
    trace = "scenarios/samples/acceptance/llama3.1-8b-instruct_cnn-40.jsonl"
    r = run("predict", "--hardware", "h100-sxm", "--target", "llama-3.1-70b", "--tp", "4", "--draft", "eagle3",
            "--acceptance", f"trace:{trace}", "--batch", "1,8", "--k", "0..2")
    assert r.exit_code == 0 and "was measured on llama-3.1-8b, not on llama-3.1-70b" in r.stderr, r.output
    r = run("predict", "--hardware", "h100-sxm", "--draft", "eagle3", "--acceptance", f"trace:{trace}", "--batch",
            "1,8", "--k", "0..2")
    assert r.exit_code == 0 and "measured on" not in r.stderr, r.output
