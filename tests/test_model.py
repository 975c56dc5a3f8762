"""The decoder's cached passes: windows, masks, roll-back, grouped-query attention, trees, and the graph runner driven
by an eager stand-in. Everything here is exact arithmetic on tiny shapes (no timing)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_T

import engine.model as model_module
from engine.model import Window, attend, build_decoder, causal_window, round_keys, window_mask
from engine.pass_runner import EagerRunner, EagerStandIn, GraphRunner
from simulator import SpecsimError


def full(m, tokens):
    """Logits of one pass over whole sequences from slot 0."""
    B, T = tokens.shape
    m.setup_cache(B)
    return m(tokens, causal_window(torch.zeros(B, dtype=torch.long), T, round_keys(T, m.cfg.max_seq_len)))


def step(m, tokens, start, keys=32):
    return m(tokens, causal_window(torch.as_tensor(start), tokens.shape[1], keys))


def test_kv_cache_decoding_equals_one_full_pass_and_rolls_back():
    m = build_decoder(TINY_T, max_seq_len=32)
    tokens = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ref = full(m, tokens)
        m.setup_cache(2)
        step(m, tokens[:, :6], [0, 0])
        # Write garbage past slot 6, then "roll back" by decoding from 6 again: nothing past it may leak in.
        step(m, torch.randint(0, 64, (2, 3)), [6, 6])
        got = torch.cat([step(m, tokens[:, i:i + 1], [i, i]) for i in range(6, 10)], dim=1)
    assert torch.allclose(got, ref[:, 6:], atol=1e-5)


def test_per_sequence_positions_and_key_buckets():
    """Sequences at different positions in one pass match their own single passes, whatever keys bucket is read."""
    m = build_decoder(TINY_T, max_seq_len=64)
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        m.setup_cache(2)
        step(m, tokens[:, :8], [0, 0])
        batched = {keys: step(m, tokens[:, 8:9], [5, 7], keys) for keys in (8, 16, 64)}  # 5 and 7 rolled back
        singles = []
        for b, pos in ((0, 5), (1, 7)):
            m.setup_cache(1)
            step(m, tokens[b:b + 1, :pos], [0])
            singles.append(step(m, tokens[b:b + 1, 8:9], [pos]))
    for out in batched.values():
        assert torch.allclose(out, torch.cat(singles), atol=1e-5)


def test_tree_window_equals_the_chain_of_each_path():
    """Tree verification: each node attends to the prefix and its ancestors, at rotary position prefix + depth."""
    m = build_decoder(TINY_T, max_seq_len=32)
    prefix = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(3))
    nodes = torch.randint(0, 64, (1, 4), generator=torch.Generator().manual_seed(4))
    parents, depth = [-1, 0, 0, 1], [0, 1, 1, 2]  # root (slot 5) with children a, b; a has a child c
    visible = torch.zeros(4, 4, dtype=torch.bool)
    for i in range(4):
        j = i
        while j >= 0:
            visible[i, j] = True
            j = parents[j]
    start = torch.tensor([5])
    window = Window(start, torch.arange(4), visible, 16, start[:, None] + torch.tensor([depth]))
    with torch.inference_mode():
        m.setup_cache(1)
        step(m, prefix, [0])
        tree = m(nodes, window)
        for path in ([0, 1, 3], [0, 2]):
            m.setup_cache(1)
            step(m, prefix, [0])
            chain = step(m, nodes[:, path], [5])
            assert torch.allclose(chain[0], tree[0, path], atol=1e-5)


def test_window_mask_by_hand():
    w = Window(torch.tensor([2]), torch.arange(2), torch.tensor([[True, False], [True, True]]), 5)
    allowed = window_mask(w, torch.float32)[0, 0] == 0
    assert allowed.tolist() == [[True, True, True, False, False], [True, True, True, True, False]]


def test_grouped_query_attention_equals_repeated_keys():
    """Grouping query heads over a key/value head gives what repeating the cache per query head gives."""
    torch.manual_seed(0)
    B, n, KV, G, hd, S = 2, 3, 2, 4, 8, 11
    q = torch.randn(B, n, KV * G, hd)
    k, v = torch.randn(B, KV, S, hd), torch.randn(B, KV, S, hd)
    allowed = torch.rand(B, n, S) > 0.3
    allowed[..., 0] = True
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(G, 1), v.repeat_interleave(G, 1),
                                         attn_mask=allowed[:, None]).transpose(1, 2).reshape(B, n, -1)
    qg = q.view(B, n, KV, G, hd).permute(0, 2, 3, 1, 4).reshape(B, KV, G * n, hd)
    bias = torch.where(allowed, 0.0, float("-inf"))[:, None, None].expand(B, 1, G, n, S).reshape(B, 1, G * n, S)
    out = F.scaled_dot_product_attention(qg, k, v, attn_mask=bias).view(B, KV, G, n, hd).permute(0, 3, 1, 2, 4)
    assert torch.allclose(out.reshape(B, n, -1), ref, atol=1e-5)


def test_one_bf16_query_row_on_a_cpu_attends_as_two_and_gives_the_plain_result(monkeypatch):
    """The single-row bf16 path (CPU kernel 1.6-3.7x slower for one row than two) returns what the plain call returns
    (rows do not interact); every other dtype and row count takes the plain call."""
    torch.manual_seed(0)
    B, KV, hd, S = 3, 2, 16, 40
    k, v = torch.randn(B, KV, S, hd), torch.randn(B, KV, S, hd)
    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention",
                        lambda q, *a, **kw: calls.append(q.shape[2]) or sdpa(q, *a, **kw))
    for dtype in (torch.bfloat16, torch.float32, torch.float16):
        for rows in (1, 2, 5):
            q = torch.randn(B, KV, rows, hd).to(dtype)
            bias = torch.where(torch.rand(B, 1, rows, S) > 0.3, 0.0, float("-inf")).to(dtype)
            bias[..., 0] = 0.0
            kd, vd = k.to(dtype), v.to(dtype)
            calls.clear()
            got = attend(q, kd, vd, bias)
            assert calls == [2 if (rows == 1 and dtype == torch.bfloat16) else rows]
            torch.testing.assert_close(got, sdpa(q, kd, vd, attn_mask=bias))  # bf16: same bits on torch 2.13


def test_decoder_gqa_matches_a_reference_with_repeated_heads():
    """The whole decoder with 2 key/value heads for 4 query heads against the uncached (repeating) training path."""
    assert TINY_T.n_heads // TINY_T.n_kv_heads == 2
    m = build_decoder(TINY_T, max_seq_len=32, seed=5)
    tokens = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        assert torch.allclose(full(m, tokens), m.train_logits(tokens), atol=1e-5)


def test_checks_before_a_pass():
    m = build_decoder(TINY_T, max_seq_len=16)
    m.setup_cache(2)
    with pytest.raises(SpecsimError, match="past the cache of 16"):
        m.check_window(2, 16, 16)
    with pytest.raises(SpecsimError, match="cache holds 2"):
        m.check_window(3, 4, 16)
    assert round_keys(17, 100) == 32 and round_keys(17, 20) == 20 and round_keys(70, 512, 64) == 128


def test_graph_runner_captures_each_shape_once_and_replays_with_new_inputs():
    """Driven by the eager stand-in: the same logits as eager passes for changing inputs, one capture per shape."""
    backend = EagerStandIn()
    graphs, eager = GraphRunner(backend), EagerRunner()
    a, b = build_decoder(TINY_T, max_seq_len=64, seed=7), build_decoder(TINY_T, max_seq_len=64, seed=7)
    gen = torch.Generator().manual_seed(8)
    prompt = torch.randint(0, 64, (2, 6), generator=gen)
    with torch.inference_mode():
        for m in (a, b):
            m.setup_cache(2)
            step(m, prompt, [0, 0])
        for i in range(5):
            tok = torch.randint(0, 64, (2, 1), generator=gen)
            w = causal_window(torch.tensor([6 + i, 4 + i]), 1, 16)
            assert torch.allclose(graphs(a, tok, w, ("causal", 1)), eager(b, tok, w, ("causal", 1)), atol=1e-6)
        verify = torch.randint(0, 64, (2, 3), generator=gen)
        w3 = causal_window(torch.tensor([11, 9]), 3, 16)
        assert torch.allclose(graphs(a, verify, w3, ("causal", 3)), eager(b, verify, w3, ("causal", 3)), atol=1e-6)
    assert backend.captures == 2 and backend.replays == 4  # (B=2, n=1) captured once, replayed four times
    a.setup_cache(2)  # a reallocated cache is a new shape: the old graphs hold the old cache's address
    with torch.inference_mode():
        graphs(a, tok, causal_window(torch.tensor([1, 1]), 1, 16), ("causal", 1))
    assert backend.captures == 3


def test_a_graph_never_replays_for_a_model_built_where_a_gone_one_lived():
    """A runner that outlives the models it ran (a served stream's spot checks) captures each new model afresh and
    replays its own weights: graphs are keyed by a number no two models share (`Decoder.uid`; id() is reused once
    a model is freed, and a graph of the freed model's weights and cache would replay for the new one - which its
    entry, holding the pass and so the model, also prevents)."""
    import gc

    graphs = GraphRunner(EagerStandIn())
    tok = torch.tensor([[3], [5]])
    window = causal_window(torch.tensor([0, 0]), 1, 16)
    uids = set()
    with torch.inference_mode():
        for seed in range(6):  # built, run once and freed, one after another: CPython reuses their addresses
            m = build_decoder(TINY_T, max_seq_len=64, seed=seed)
            m.setup_cache(2)
            out = graphs(m, tok, window, ("causal", 1)).clone()
            assert torch.allclose(out, EagerRunner()(m, tok, window, ("causal", 1)), atol=1e-6)
            uids.add(m.uid)
            del m
            gc.collect()
    assert graphs.captures == 6 and len(uids) == 6
