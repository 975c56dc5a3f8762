"""The built-in target's prediction heads (engine/heads.py): the loaded heads reproduce what training saved, widened
they propose on the widened target exactly what they were trained to, greedy decoding with them is greedy decoding,
a served batch carries their features, and the cost model prices them from the profile's measurement."""

import json

import numpy as np
import pytest
import torch

from engine.builtin import WEIGHTS, encode, load_heads, load_pair, prompts
from engine.heads import MedusaHeads, expand_heads, random_heads
from engine.model import causal_window
from engine.speculative import Decoding, RealEngine
from simulator.trees import parse_branching

pytestmark = pytest.mark.skipif(not (WEIGHTS / "builtin-heads.safetensors").exists(),
                                reason="the built-in heads are not trained (python -m engine.train_heads)")


@pytest.fixture(scope="module")
def small():
    target, _ = load_pair(expanded=False, dtype="fp32", max_seq_len=320)
    return target, load_heads(expanded=False, dtype="fp32")


def test_the_loaded_heads_reproduce_their_saved_outputs(small):
    target, heads = small
    check = json.loads((WEIGHTS / "heads-check.json").read_text())
    with torch.no_grad():
        logits = heads(target.train_hidden(torch.tensor([check["tokens"]])))[0, -1]
    assert torch.allclose(logits, torch.tensor(check["logits"]), atol=2e-4)


def test_widened_heads_propose_what_the_trained_ones_do(small):
    """The expanded target's hidden state is the trained one padded with zeros, and so are the expanded heads."""
    target, heads = small
    big_target, _ = load_pair(expanded=True, dtype="fp32", max_seq_len=320)
    big_heads = load_heads(expanded=True, dtype="fp32")
    tokens = torch.tensor([encode("def main(argv):\n    return argv[")])
    big_target.setup_cache(1)
    big_target.keep_hidden = True
    big_target(tokens, causal_window(torch.zeros(1, dtype=torch.long), tokens.shape[1], tokens.shape[1]))
    with torch.no_grad():
        mine = heads(target.train_hidden(tokens))
        widened = big_heads(big_target.hidden)
    assert big_heads.d_model == 768 and torch.allclose(mine, widened, atol=1e-4)
    # expansion of any heads keeps their function
    h = random_heads(16, 10, 3, seed=1)
    x = torch.randn(5, 16)
    assert torch.allclose(h(x), expand_heads(h, 40)(torch.cat([x, torch.zeros(5, 24)], 1)), atol=1e-6)


@pytest.mark.parametrize("batch", [1, 5])
def test_greedy_with_heads_is_greedy_decoding(builtin_pair, batch):
    target, _ = builtin_pair
    heads = load_heads(expanded=False, dtype="fp32")
    engine = RealEngine(target, None, heads=heads)
    ps = [encode(p)[:48] for p in prompts("heldout")[:batch]]
    plain = engine.generate(ps, 24, Decoding(k=0, temperature=0)).tokens
    for k in range(1, heads.n_heads + 1):
        assert engine.generate(ps, 24, Decoding(k=k, temperature=0, drafter="heads")).tokens == plain, k
    for tree in ("2,2", "3,1,1,1"):
        got = engine.generate(ps, 24, Decoding(tree=parse_branching(tree), temperature=0, drafter="heads"))
        assert got.tokens == plain, tree
        assert got.tokens_per_pass > 1.0  # the trained heads are accepted at all


def test_heads_refuse_more_positions_than_they_have(builtin_pair):
    from simulator import SpecsimError

    target, _ = builtin_pair
    engine = RealEngine(target, None, heads=MedusaHeads(target.cfg.d_model, 256, 2).eval())
    with pytest.raises(SpecsimError, match="at most 2 positions"):
        engine.generate([encode("import os\n")], 8, Decoding(k=3, drafter="heads"))


def test_a_served_batch_carries_the_heads_features(builtin_pair):
    """Sequences join and leave a running batch between steps: each keeps its own hidden state, so greedy decoding
    with heads in a batch that changes is what each sequence decodes alone."""
    target, _ = builtin_pair
    engine = RealEngine(target, None, heads=load_heads(expanded=False, dtype="fp32"))
    ps = [encode(p)[:40] for p in prompts("heldout")[:3]]
    alone = [engine.generate([p], 12, Decoding(k=0, temperature=0)).tokens[0] for p in ps]
    batch = engine.open_batch(4, use_draft=False)
    engine.join(batch, ps[:2], use_draft=False, temperature=0.0, gen=None)
    how = Decoding(k=3, temperature=0, drafter="heads")
    with torch.inference_mode():
        while min(len(o) for o in batch.out) < 6:
            engine.step(batch, how, None)
        engine.leave(batch, [0])
        engine.join(batch, ps[2:], use_draft=False, temperature=0.0, gen=None)
        while min(len(o) for o in batch.out) < 13:
            engine.step(batch, how, None)
    assert batch.out[0][:12] == alone[1] and batch.out[1][:12] == alone[2]


def test_the_heads_acceptance_chains_its_heads_position_by_position(small):
    """P(A >= i) is the mean over positions of the product of the heads' per-position acceptances: at most each
    head's own mean, and falling with i."""
    from calibrate.measure_acceptance import measure_head_acceptance

    target, heads = small
    calib = [encode(p)[:48] for p in prompts("calibration")[:4]]
    m = measure_head_acceptance(target, heads, calib, 32, 1.0, seed=0, sims=4)
    s = np.asarray(m["survival"])
    assert len(s) == heads.n_heads and (np.diff(s) <= 1e-12).all()
    assert s[0] == pytest.approx(m["alpha_by_head"][0]) and (s <= np.asarray(m["alpha_by_head"]) + 1e-12).all()
    assert 0.0 < sum(m["ranks"]) <= 1.0 + 1e-9
