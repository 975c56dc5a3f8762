"""The engine's mixture of experts (engine/moe.py): grouped by expert it computes what a token-by-token reference
does, reads no expert its tokens do not route to, routes with the sharing the cost model prices, and calibrates."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_D, TINY_GRID, one_line_error, run, small_device_benchmarks

from engine.model import build_decoder, causal_window
from engine.moe import MoEFeedForward, Routing
from simulator.specs import ModelSpec

TINY_MOE = ModelSpec("tiny-moe", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=64, vocab_size=64,
                     dtype="fp32", n_experts=8, experts_per_token=2, d_ff_expert=32, d_ff_shared=16)


def _layer(seed: int = 0) -> MoEFeedForward:
    torch.manual_seed(seed)
    layer = MoEFeedForward(32, 8, 2, 16, d_ff_shared=8)
    for p in layer.parameters():
        torch.nn.init.normal_(p, 0.0, 0.2)
    return layer


def test_grouped_by_expert_equals_token_by_token():
    layer = _layer()
    x = torch.randn(3, 5, 32)
    layer.routing = Routing(0.5, seed=7)
    out = layer(x)
    experts = Routing(0.5, seed=7).choose(3, 5, 8, 2, x.device)  # the same draws
    flat, ref = x.reshape(15, 32), torch.zeros(15, 32)
    logits = layer.router(flat)
    for t in range(15):
        chosen = experts.reshape(15, 2)[t]
        gates = torch.softmax(logits[t, chosen], dim=-1)
        for g, e in zip(gates, chosen.tolist()):
            gate, up = F.linear(flat[t], layer.w13[e]).chunk(2)
            ref[t] += g * F.linear(F.silu(gate) * up, layer.w2[e])
        gate, up = layer.shared_w13(flat[t]).chunk(2)
        ref[t] += layer.shared_w2(F.silu(gate) * up)
    assert torch.allclose(out.reshape(15, 32), ref, atol=1e-5)


def test_an_untouched_expert_is_never_read():
    layer = _layer()
    x = torch.randn(1, 1, 32)
    layer.routing = Routing(0.0, seed=3)
    chosen = set(Routing(0.0, seed=3).choose(1, 1, 8, 2, x.device).reshape(-1).tolist())
    with torch.no_grad():
        for e in set(range(8)) - chosen:
            layer.w13[e].fill_(float("nan"))
            layer.w2[e].fill_(float("nan"))
    assert torch.isfinite(layer(x)).all()


@pytest.mark.parametrize("sharing", [0.0, 0.5, 0.9])
def test_routing_touches_what_the_cost_model_prices(sharing):
    """Distinct experts of a sequence's n tokens and of a batch, against `ModelSpec.experts_touched` (the cost
    model's mean; the engine draws a number of fresh tokens, so a few per cent below it by concavity)."""
    spec = ModelSpec("m", 2, 64, 4, 4, 64, 64, n_experts=32, experts_per_token=4, d_ff_expert=16)
    routing = Routing(sharing, seed=1)
    for batch, n in ((1, 9), (4, 4), (8, 1)):
        counts = [len(set(routing.choose(batch, n, 32, 4, torch.device("cpu")).reshape(-1).tolist()))
                  for _ in range(600)]
        assert np.mean(counts) == pytest.approx(float(spec.experts_touched(n, batch, sharing)), rel=0.06)


def test_a_tiny_moe_decodes_and_calibrates(tmp_path):
    """The engine decodes an MoE like any decoder; a calibration at MoE shapes fits the experts it touched and the
    profile keeps the sharing it routed with."""
    from calibrate.calibration import calibrate
    from scenarios.profile import load_profile, save_profile

    model = build_decoder(TINY_MOE, 64, expert_sharing=0.5)
    model.setup_cache(2)
    logits = model(torch.randint(0, 64, (2, 4)), causal_window(torch.zeros(2, dtype=torch.long), 4, 16))
    assert logits.shape == (2, 4, 64) and torch.isfinite(logits).all()
    with pytest.MonkeyPatch.context() as mp:
        small_device_benchmarks(mp)
        mp.setattr("calibrate.calibration.measure_engine_at_shapes", lambda *a, **k: __import__(
            "simulator.specs", fromlist=["EngineOverheads"]).EngineOverheads())
        result = calibrate(TINY_MOE, TINY_D, torch.device("cpu"), TINY_GRID, quick=True, command="test",
                           expert_sharing=0.25)
    path = save_profile(result.profile, tmp_path / "moe.json")
    profile = load_profile(path)
    assert profile.expert_sharing == 0.25 and profile.cost_model().expert_sharing == 0.25
    assert profile.target.is_moe and profile.fit.heldout.n > 0
    assert json.loads(path.read_text())["models"]["target"]["n_experts"] == 8


def test_bad_expert_sharing_for_calibrate_is_one_line():
    one_line_error(run("calibrate", "--quick", "--expert-sharing", "0.5"), "specsim-target is dense")
    one_line_error(run("calibrate", "--quick", "--target", "specsim-moe", "--expert-sharing", "1.5"), "[0, 1]")


def test_the_engine_refuses_shapes_it_does_not_run():
    from scenarios import load_model
    from simulator import SpecsimError

    with pytest.raises(SpecsimError, match="MLA, sliding windows"):
        build_decoder(load_model("gpt-oss-20b").shard(8), 64, device="meta")
