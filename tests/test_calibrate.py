"""The calibrator on tiny shapes: the decoder's cache and masks, the fit, the profile and its failure modes.
No timing is asserted: this machine is shared and noisy."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import TINY_D, TINY_GRID, TINY_T

from calibrate.fit import PassPoint, errors, fit_cost_model, nnls
from calibrate.model import build_decoder, causal_mask, hf_llama_state, load_state
from calibrate.profile import load_profile, save_profile
from calibrate.run import calibrate
from simulator import SpecsimError
from simulator.cost import CostModel, RateTable
from simulator.specs import HardwareSpec, ModelSpec, Overheads
from specsim import cli


def test_kv_cache_decoding_equals_one_full_pass_and_rolls_back():
    torch.manual_seed(0)
    m = build_decoder(TINY_T, max_seq_len=32)
    m.setup_cache(2)
    tokens = torch.randint(0, 64, (2, 10))
    with torch.inference_mode():
        full = m(tokens, torch.arange(10).expand(2, 10))
        m.setup_cache(2)
        m(tokens[:, :6], torch.arange(6).expand(2, 6))
        # Write garbage past position 6, then "roll back" by re-decoding from 6: nothing past it may leak.
        m(torch.randint(0, 64, (2, 3)), torch.arange(6, 9).expand(2, 3))
        step = [m(tokens[:, i:i + 1], torch.full((2, 1), i)) for i in range(6, 10)]
    assert torch.allclose(torch.cat(step, dim=1), full[:, 6:], atol=1e-5)


def test_per_sequence_positions():
    """Sequences at different positions in one batched pass match their own single-sequence passes."""
    m = build_decoder(TINY_T, max_seq_len=32)
    tokens = torch.randint(0, 64, (2, 12))
    with torch.inference_mode():
        m.setup_cache(2)
        m(tokens[:, :8], torch.arange(8).expand(2, 8))
        slots = torch.tensor([[5], [7]])  # sequence 0 rolled back to 5, sequence 1 at 7
        batched = m(tokens[:, 8:9], slots)
        singles = []
        for b, pos in ((0, 5), (1, 7)):
            m.setup_cache(1)
            m(tokens[b:b + 1, :pos], torch.arange(pos)[None])
            singles.append(m(tokens[b:b + 1, 8:9], torch.tensor([[pos]])))
    assert torch.allclose(batched, torch.cat(singles), atol=1e-5)


def test_tree_mask_equals_the_chain_of_each_path():
    """Tree verification: each node attends to the prefix and its ancestors, at rotary position prefix + depth."""
    m = build_decoder(TINY_T, max_seq_len=32)
    prefix = torch.randint(0, 64, (1, 5))
    # Root (slot 5) with children a (slot 6) and b (slot 7); a has a child c (slot 8).
    nodes = torch.randint(0, 64, (1, 4))
    parents = [-1, 0, 0, 1]
    depth = [0, 1, 1, 2]
    used = 9
    mask = torch.zeros(1, 4, used, dtype=torch.bool)
    mask[0, :, :5] = True
    for i in range(4):
        j = i
        while j >= 0:
            mask[0, i, 5 + j] = True
            j = parents[j]
    with torch.inference_mode():
        m.setup_cache(1)
        m(prefix, torch.arange(5)[None])
        tree = m(nodes, torch.arange(5, 9)[None], positions=torch.tensor([[5 + d for d in depth]]), mask=mask)
        for path in ([0, 1, 3], [0, 2]):
            m.setup_cache(1)
            m(prefix, torch.arange(5)[None])
            chain = m(nodes[:, path], torch.arange(5, 5 + len(path))[None])
            assert torch.allclose(chain[0], tree[0, path], atol=1e-5)


def test_causal_mask_shape():
    mask = causal_mask(torch.tensor([[3, 4]]), 5)
    assert mask.shape == (1, 2, 5) and mask[0, 0].tolist() == [True] * 4 + [False]


def test_hf_checkpoint_round_trip(tmp_path):
    """A Hugging Face Llama-family checkpoint on disk loads into the decoder and gives the same logits."""
    from safetensors.torch import save_file

    from calibrate.model import load_hf_checkpoint

    src = build_decoder(TINY_T, max_seq_len=32, seed=3)
    sd = src.state_dict()
    q, kv = TINY_T.n_heads * TINY_T.head_dim, TINY_T.n_kv_heads * TINY_T.head_dim
    hf = {"model.embed_tokens.weight": sd["tok_embeddings.weight"], "model.norm.weight": sd["norm.weight"],
          "lm_head.weight": sd["output.weight"]}
    for i in range(TINY_T.n_layers):
        p = f"model.layers.{i}."
        wq, wk, wv = sd[f"layers.{i}.attention.wqkv.weight"].split([q, kv, kv])
        gate, up = sd[f"layers.{i}.feed_forward.w13.weight"].chunk(2)
        hf.update({p + "self_attn.q_proj.weight": wq, p + "self_attn.k_proj.weight": wk,
                   p + "self_attn.v_proj.weight": wv,
                   p + "self_attn.o_proj.weight": sd[f"layers.{i}.attention.wo.weight"],
                   p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                   p + "mlp.down_proj.weight": sd[f"layers.{i}.feed_forward.w2.weight"],
                   p + "input_layernorm.weight": sd[f"layers.{i}.attention_norm.weight"],
                   p + "post_attention_layernorm.weight": sd[f"layers.{i}.ffn_norm.weight"]})
    save_file({k: v.contiguous() for k, v in hf.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 64, "torch_dtype": "float32"}))
    loaded = load_hf_checkpoint(tmp_path, dtype="fp32", max_seq_len=32)
    tokens = torch.randint(0, 64, (1, 6))
    with torch.inference_mode():
        src.setup_cache(1)
        loaded.setup_cache(1)
        assert torch.allclose(src(tokens, torch.arange(6)[None]), loaded(tokens, torch.arange(6)[None]), atol=1e-5)
    assert hf_llama_state(hf, loaded.cfg).keys() == {k for k in sd if not k.startswith("rope")}


def test_checkpoint_of_the_wrong_shape_is_refused():
    m = build_decoder(TINY_T, max_seq_len=16)
    other = build_decoder(TINY_D, max_seq_len=16).state_dict()
    with pytest.raises(SpecsimError, match="shape"):
        load_state(m, {**m.state_dict(), "tok_embeddings.weight": other["tok_embeddings.weight"]}, "ckpt")


def test_nnls_against_a_known_answer():
    rng = np.random.default_rng(0)
    A = rng.random((40, 5))
    x_true = np.array([0.0, 1.5, 0.0, 2.0, 0.3])
    x = nnls(A, A @ x_true)
    assert np.allclose(x, x_true, atol=1e-8)
    assert (nnls(A, -A @ x_true) >= 0).all()


def test_fit_recovers_a_known_cost_model():
    """Pass times generated by a known calibrated-form cost model are predicted on held-out points to < 1 %."""
    hw = HardwareSpec("synthetic", 20e9, (("fp32", 200e9),), 16e9)
    truth = CostModel(hw, RateTable((1, 2, 8, 32), (5e9, 12e9, 10e9, 6e9), (300e9, 300e9, 300e9, 300e9)),
                      RateTable.constant(15e9, 300e9),
                      Overheads(pass_s=2e-4, layer_s=5e-5, row_s=1e-6))
    big = ModelSpec("big", n_layers=8, d_model=512, n_heads=8, n_kv_heads=8, d_ff=1536, vocab_size=256,
                    dtype="fp32")
    specs = {m.name: m for m in (big, TINY_D, ModelSpec("probe", 4, 32, 2, 2, 64, 256, dtype="fp32"))}
    points = [PassPoint(m.name, b, n, c, truth.pass_time_s(m, b, n, c))
              for m in specs.values() for b in (1, 2, 4, 8) for n in (1, 2, 4) for c in (16, 64)]
    train, test = points[::2], points[1::2]
    fit = fit_cost_model(train, specs, hw, 300e9, 20e9, "fp32", smoothness=0.0)
    assert errors(fit.cost, test, specs)["max_abs_err"] < 0.01


def test_calibration_end_to_end_on_tiny_shapes(tiny_profile, tmp_path, monkeypatch):
    profile = tiny_profile.profile
    assert profile.device.kind == "cpu" and profile.engine_mode == "eager" and profile.command == "test"
    assert {"bandwidth", "matmul", "skinny", "call_overhead"} <= set(profile.micro.raw)
    n_grid = 2 * 3 * 2 + 2 * 2 * 2 + 2 * 2  # target, draft, probes
    assert len(profile.passes) == n_grid
    assert all(len(p.samples_s) >= 5 for p in profile.passes)
    fit = profile.fit
    assert fit.heldout.n > 0 and fit.train_points > fit.heldout.n
    assert np.isfinite(fit.heldout.median_abs_err)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = save_profile(profile, None)
    assert path.parent == tmp_path / "cache" / "specsim"
    again = load_profile(path)
    assert again.to_dict() == profile.to_dict()  # written and read back without loss
    cost = again.cost_model()
    p = profile.timed[0]
    assert cost.pass_time_s(TINY_T, p.batch, p.new_tokens, p.context) == p.median_s
    assert not cost.pass_cost(TINY_T, 3, 5, 100).measured


def test_predict_reads_the_latest_profile(tiny_profile, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    save_profile(tiny_profile.profile, None)
    r = CliRunner().invoke(cli, ["predict", "--acceptance", "iid:0.7", "--batch", "1..4", "--k", "0..3", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["mode"] == "profile" and data["target"] == "tiny-target"
    assert "latest for this machine" in r.stderr


def test_bad_profiles_are_refused(tiny_profile, tmp_path):
    good = tiny_profile.profile.to_dict()
    cases = {
        "corrupt": '{"schema": "specsim-prof',
        "newer": json.dumps({**good, "schema_version": 99}),
        "malformed": json.dumps({**good, "fit": {**good["fit"], "overheads": {"pass_s": "fast"}}}),
        "finite": json.dumps(good).replace('"median_s": ' + json.dumps(good["passes"][0]["median_s"]),
                                           '"median_s": Infinity', 1),
        "not a specsim profile": json.dumps({"schema": "something else"}),
    }
    for message, text in cases.items():
        path = tmp_path / f"{message.replace(' ', '-')}.json"
        path.write_text(text)
        r = CliRunner().invoke(cli, ["predict", "--alpha", "0.7", "--profile", str(path)])
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and message in r.output, r.output
    r = CliRunner().invoke(cli, ["predict", "--alpha", "0.7", "--profile", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "cannot read profile" in r.output


def test_a_profile_from_another_machine_predicts_here_with_a_note(tiny_profile, tmp_path):
    """Profiles are portable: another device's profile predicts on this machine and says where it was measured."""
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({**tiny_profile.profile.to_dict(), "device": {"kind": "cuda", "name": "Some GPU",
                                                                               "memory_bytes": 8e10}}))
    r = CliRunner().invoke(cli, ["predict", "--alpha", "0.7", "--profile", str(foreign), "--batch", "1,2",
                                 "--k", "0,2"])
    assert r.exit_code == 0, r.output
    assert "measured on another machine (Some GPU, cuda)" in r.stderr and "k=2" in r.stdout


def test_out_of_memory_at_one_point_is_recorded_and_the_rest_goes_on(monkeypatch, tmp_path):
    from calibrate import model as model_mod

    real_forward = model_mod.Decoder.forward

    def flaky(self, tokens, slots, positions=None, mask=None):
        if tokens.shape[0] == 2 and tokens.shape[1] == 3:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")
        return real_forward(self, tokens, slots, positions, mask)

    monkeypatch.setattr(model_mod.Decoder, "forward", flaky)
    monkeypatch.setattr("calibrate.microbench.MIB", 2**12)
    result = calibrate(TINY_T, TINY_D, torch.device("cpu"), TINY_GRID, quick=True, command="test")
    oom = [p for p in result.profile.passes if p.oom]
    assert len(oom) == 2 and all(p.batch == 2 and p.new_tokens == 3 for p in oom)
    assert len(result.profile.timed) == len(result.profile.passes) - 2


def test_interrupt_leaves_no_profile(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr("calibrate.microbench.MIB", 2**12)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("calibrate.run.time_passes", interrupted)
    out = tmp_path / "p.json"
    r = CliRunner().invoke(cli, ["calibrate", "--quick", "--target", "llama-68m", "--out", str(out)])
    assert r.exit_code == 130
    assert not out.exists() and not list(tmp_path.rglob("*.json")) and not list(tmp_path.rglob("*.tmp"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_requested_without_cuda():
    r = CliRunner().invoke(cli, ["calibrate", "--device", "cuda", "--quick"])
    assert r.exit_code == 2 and "no CUDA device" in r.output and len(r.output.strip().splitlines()) == 1


def test_unknown_model_name_for_calibrate():
    r = CliRunner().invoke(cli, ["calibrate", "--target", "gpt-5"])
    assert r.exit_code == 2 and "unknown model" in r.output


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_calibration_on_tiny_shapes():
    t = ModelSpec(**{**TINY_T.__dict__, "dtype": "bf16"})
    d = ModelSpec(**{**TINY_D.__dict__, "dtype": "bf16"})
    result = calibrate(t, d, torch.device("cuda"), TINY_GRID, quick=True, command="test")
    assert result.profile.device.kind == "cuda" and result.profile.engine_mode == "graph"
    assert "nvml" in result.profile.device_state["start"]


def test_builtin_acceptance_and_engine_overheads_are_measured(monkeypatch):
    """The built-in pair's part of a calibration: acceptance on the calibration prompts and the engine's own work
    around the passes, from short real runs (values are not asserted: they are timings)."""
    from calibrate.run import measure_builtin, no_progress
    from scenarios import load_model

    t, d = load_model("specsim-target"), load_model("specsim-draft")
    monkeypatch.setattr("calibrate.builtin.prompts", lambda split: ["def f(x):\n    return x + 1\n" * 2] * 3)
    cost = CostModel.from_hardware(HardwareSpec("cpu", 20e9, (("bf16", 1e12),), 16e9), "bf16", datasheet=True)
    acc, engine = measure_builtin(torch.device("cpu"), "bf16", True, 2, no_progress, 0, cost, t, d)
    assert 0 < acc["alpha"] <= 1 and len(acc["survival"]) == 8 and acc["markov"]["alpha_easy"] >= 0
    assert set(acc["engine_extras_by_batch_s"]) == {"plain", "draft", "verify", "chain_accept", "tree_accept"}
    assert engine.tree_accept.fixed_s + engine.tree_accept.per_sequence_s > 0
