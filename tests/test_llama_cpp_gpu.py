"""llama.cpp on a GPU as an engine preset (`--engine llama.cpp`, scenarios/engines.toml): its mechanisms (CUDA
graphs to 4 tokens a pass, a draft context a slot) and the published llama-server runs it is checked on."""

import numpy as np

from scenarios import load_engine_preset, load_hardware, load_model
from scenarios.draft_specs import load_draft
from scenarios.published import load_corpus
from simulator.cost import CostModel
from simulator.sweep import drafting_times
from simulator.trees import Tree


def _setup(engine: str):
    cost = CostModel.from_hardware(load_hardware("rtx-5090", engine), "q4_k_m")
    target = load_model("qwen3.8-27b", "q4_k_m")
    return cost, target, load_draft("mtp:1", target, target.dtype)


def test_preset_prices_its_mechanisms():
    preset = load_engine_preset("llama.cpp")
    graphs = preset.overheads.graphs
    assert graphs is not None and graphs.max_tokens == 4 and graphs.eager_layer_s > 0
    # one stream verifying 3 tokens replays a graph; 2 streams verifying 3 each launch every layer from the host
    assert not graphs.eager(1, 3) and graphs.eager(2, 3) and graphs.eager(5, 1)
    assert preset.overheads.engine.drafts_per_sequence
    assert any("drafts on its own" in m for m in preset.mechanisms(2, 3))
    assert load_engine_preset("llama.cpp@b10450").version == preset.version


def test_a_draft_context_a_slot_drafts_each_stream_in_turn():
    """llama-server drafts slot by slot: 4 streams draft 4 times as long as one; a batched drafter much less."""
    cost, target, draft = _setup("llama.cpp")
    b = np.array([1, 4])
    per_slot = drafting_times(cost, target, draft, b, Tree.chain(3), 512)
    assert np.isclose(per_slot[1], 4 * per_slot[0])
    cost_b, _, _ = _setup("vllm")
    batched = drafting_times(cost_b, target, draft, b, Tree.chain(3), 512)
    assert batched[1] < 2 * batched[0]


def test_published_llama_server_runs_are_held_out_and_priced():
    from benchmarks.published import price, through_the_model

    points = [p for p in load_corpus() if p.engine == "llama.cpp"]
    assert {p.gpu for p in points} >= {"rtx-3090", "rtx-5090", "rtx-5060-ti"}
    assert all(p.source.held_out for p in points)
    for p in points:
        q = price(p)
        assert q.engine == "llama.cpp@b10450"
        assert 0.5 < through_the_model(q) / q.measured < 2.0


def test_policy_gives_llama_servers_flags():
    from click.testing import CliRunner

    from specsim import cli

    r = CliRunner().invoke(cli, ["policy", "--engine", "llama.cpp", "--hardware", "rtx-5090", "--target", "qwen3.8-27b",
                                 "--draft", "mtp", "--dtype", "q4_k_m", "--acceptance", "accept-length:2.58@2",
                                 "--batch", "1..4", "--k", "0..4", "--format", "llama-server"])
    assert r.exit_code == 0, r.output
    assert "--spec-type draft-mtp --spec-draft-n-max" in r.output and "-np 4" in r.output
