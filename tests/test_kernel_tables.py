"""Pass times from measured-kernel tables (simulator.kernel_tables): the interpolation between measured sizes, and a
verify pass priced as an engine runs it (one KV read per sequence) against AIConfigurator's (k + 1 sequences)."""

from dataclasses import replace

import numpy as np
import pytest

from simulator.kernel_tables import (
    Curve,
    Elementwise,
    Gemm,
    Grid2,
    LayerShapes,
    MeasuredKernels,
    aiconfigurator_verify,
    decode_pass,
    prefill_pass,
)


def test_curve_is_a_roofline_in_log_log():
    # flat at 10 us up to 64 rows, then time proportional to rows
    c = Curve((1, 64, 1024), (10e-6, 10e-6, 160e-6))
    assert c.at(8) == pytest.approx(10e-6)
    assert c.at(256) == pytest.approx(40e-6)  # on the line of slope 1 between 64 and 1024
    assert c.at(4096) == pytest.approx(640e-6)  # the last slope carries on
    assert c.at(0.5) == pytest.approx(10e-6)  # held below the first size
    with pytest.raises(ValueError):
        Curve((4, 2), (1e-6, 2e-6))


def _gemm() -> Gemm:
    """A synthetic GEMM table: 2 us launch + weights at 1 TB/s (bf16) + FLOPs at 500 TFLOP/s, on a full grid."""
    ms, ns, ks = (1, 16, 256, 4096, 16384), (1024, 4096, 16384), (1024, 4096)
    T = np.array([[[2e-6 + max(2 * n * k / 1e12, 2 * m * n * k / 5e14) for k in ks] for n in ns] for m in ms])
    return Gemm(ms, ns, ks, T)


def test_gemm_interpolates_between_widths_and_scales_beyond_them():
    g = _gemm()
    exact = g.at(16, 4096, 4096)
    assert exact == pytest.approx(2e-6 + 2 * 4096 * 4096 / 1e12)
    # a width between grid points: between its neighbours, near the weight-read time it implies
    mid = g.at(16, 8192, 4096)
    assert g.at(16, 4096, 4096) < mid < g.at(16, 16384, 4096)
    assert mid == pytest.approx(2e-6 + 2 * 8192 * 4096 / 1e12, rel=0.05)
    # beyond the widest measured: scaled by n k
    assert g.at(16, 32768, 4096) == pytest.approx(2 * g.at(16, 16384, 4096), rel=1e-6)
    # a missing column falls back to the nearest measured one, scaled
    T = g.times_s.copy()
    T[:, 1, :] = np.nan
    holey = Gemm(g.m, g.n, g.k, T)
    assert holey.at(16, 4096, 4096) == pytest.approx(exact, rel=0.3)


def _llama_like() -> tuple[LayerShapes, MeasuredKernels]:
    shapes = LayerShapes(n_layers=32, d_model=4096, vocab_per_gpu=128256, tp=1, qkv_out=6144, o_in=4096,
                         ffn_per_gpu=14336, heads_per_gpu=32, kv_heads_per_gpu=8, head_dim=128,
                         kv_bytes_per_token_layer=4096.0, attention_flops_per_row_token=4 * 32 * 128,
                         dense_layers=32)
    # decode attention: the KV cache of every sequence read at 3 TB/s, plus 5 us
    batches, contexts = (1, 16, 256, 2048), (128, 1024, 8192)
    A = np.array([[5e-6 + b * c * 4096 / 3e12 for c in contexts] for b in batches])
    kernels = MeasuredKernels(gemm=_gemm(), logits_gemm=_gemm(), attention=Grid2(batches, contexts, A),
                              elementwise=Elementwise(3.35e12), tensor_flops_per_s=6e14)
    return shapes, kernels


class _RecordingAllReduce:
    """An all-reduce curve that notes every key it is read at: 10 us a collective, whatever the message."""

    def __init__(self) -> None:
        self.keys: list[float] = []

    def at(self, size: float) -> float:
        self.keys.append(float(size))
        return 10e-6


def test_the_all_reduce_table_is_read_at_rows_x_d_model_elements_not_bytes():
    """AIConfigurator keys its all-reduce table by message elements: a pass of `rows` rows reduces rows x d_model
    elements (bf16: twice that in bytes), twice a layer. A 4-GPU 32-layer model (d_model 4,096): a verify pass of
    3 sequences x 5 rows and a prefill chunk of 2 prompts x 100 tokens on 50 cached each read the curve at
    15 x 4,096 and 200 x 4,096, 64 times a pass."""
    shapes, kernels = _llama_like()
    shapes = replace(shapes, tp=4)
    for run, rows in ((lambda k: decode_pass(shapes, k, 3, 5, 1000), 15),
                      (lambda k: prefill_pass(shapes, k, 2, 100, 50), 200)):
        curve = _RecordingAllReduce()
        t = run(replace(kernels, all_reduce=curve))
        assert set(curve.keys) == {rows * 4096.0}
        assert t.comm_s == pytest.approx(2 * 32 * 10e-6)
    # one GPU: no collective, the curve is never read
    curve = _RecordingAllReduce()
    assert decode_pass(_llama_like()[0], replace(kernels, all_reduce=curve), 3, 5, 1000).comm_s == 0.0
    assert curve.keys == []


def test_verify_pass_reads_each_cache_once_and_aiconfigurator_rereads_it():
    shapes, kernels = _llama_like()
    plain = decode_pass(shapes, kernels, 256, 1, 1024)
    verify = decode_pass(shapes, kernels, 256, 4, 1024)
    aic = aiconfigurator_verify(shapes, kernels, 256, 4, 1024)
    # the engine: the KV read once, three more query rows' FLOPs on top
    assert plain.attention_s < verify.attention_s < 1.2 * plain.attention_s
    # AIConfigurator: 4 x 256 sequences, each re-reading its cache
    assert aic.attention_s == pytest.approx(4 * plain.attention_s, rel=0.05)
    # the GEMMs see the same 1,024 rows either way
    assert aic.gemm_s == pytest.approx(verify.gemm_s)
    assert verify.total_s == pytest.approx(sum((verify.gemm_s, verify.attention_s, verify.moe_s, verify.comm_s,
                                                verify.other_s)))
    # batch 1, k = 0: the same pass either way
    assert aiconfigurator_verify(shapes, kernels, 1, 1, 1024) == decode_pass(shapes, kernels, 1, 1, 1024)


def test_a_verify_pass_shares_experts_within_a_sequence():
    """The fused MoE kernel, measured on independent tokens, is read at the independent tokens a verify pass's rows
    amount to: cheaper than every row routed alone, dearer than one row, and AIConfigurator's pricing shares none."""
    shapes, kernels = _llama_like()
    moe = replace(shapes, moe_layers=32, dense_layers=0, ffn_per_gpu=0, n_experts=128, expert_ffn_per_gpu=768,
                  topk=8)
    # the fused kernel: 40 us + 9 us per expert woken (uniform routing of 128 experts, top-8), per layer
    tokens = (1, 2, 4, 8, 16, 64, 256, 1024)
    curve = Curve(tokens, tuple(40e-6 + 9e-6 * 128 * (1 - (1 - 8 / 128) ** t) for t in tokens))
    k = replace(kernels, moe=curve)
    alone = decode_pass(moe, k, 1, 4, 1024, expert_sharing=0.0).moe_s
    shared = decode_pass(moe, k, 1, 4, 1024, expert_sharing=0.5).moe_s
    one = decode_pass(moe, k, 1, 1, 1024).moe_s
    assert one < shared < alone
    assert aiconfigurator_verify(moe, k, 1, 4, 1024).moe_s == pytest.approx(alone, rel=1e-9)


def _with_context_attention(kernels: MeasuredKernels) -> MeasuredKernels:
    """Prefill attention as a flash kernel runs it: 8 us, then the causal FLOPs of the prompt (isl^2 / 2 pairs, 32
    heads of 128, 4 FLOPs a pair and dim) at 400 TFLOP/s, per prompt."""
    batches, isl = (1, 4, 16, 64), (16, 128, 1024, 8192, 16384)
    A = np.array([[8e-6 + b * (s * s / 2) * 4 * 32 * 128 / 4e14 for s in isl] for b in batches])
    return replace(kernels, context_attention=Grid2(batches, isl, A))


def test_a_prompts_pass_grows_linearly_then_quadratically():
    """Short prompts: the weights read once and the GEMMs' rows, about linear in tokens; long ones: the causal
    attention's n^2 takes over, so each doubling costs more than twice."""
    shapes, kernels = _llama_like()
    kernels = _with_context_attention(kernels)
    t = {n: prefill_pass(shapes, kernels, 1, n) for n in (512, 1024, 4096, 8192, 16384)}
    assert 1.5 < t[1024].total_s / t[512].total_s < 2.05
    assert t[16384].total_s / t[8192].total_s > 2.1
    assert t[16384].attention_s / t[8192].attention_s == pytest.approx(4, rel=0.05)
    share = [t[n].attention_s / t[n].total_s for n in (1024, 4096, 16384)]
    assert share == sorted(share)
    # the output head at one row a prompt: a prompt's GEMMs are the same pass's linear layers at n rows, the head at 1
    one_row = _gemm().at(1, shapes.vocab_per_gpu, shapes.d_model)
    assert t[4096].gemm_s == pytest.approx(decode_pass(shapes, kernels, 1, 4096, 0).gemm_s
                                           - _gemm().at(4096, shapes.vocab_per_gpu, shapes.d_model) + one_row)


def test_a_chunk_on_cached_tokens_computes_its_share_of_the_causal_pairs():
    """The context tables time prompts with nothing cached: a chunk of n tokens on c cached is the whole prompt's
    kernel at c + n times the share of its (query, key) pairs the chunk computes, 1 - (c / (c + n))^2. With a kernel
    exactly quadratic in the prompt, two chunks of 4,096 cost the whole prompt's attention, the second three times
    the first; the kernels beside it (RoPE, the KV write) are per token, paying their launches once a chunk."""
    shapes, kernels = _llama_like()
    batches, isl = (1, 4), (1024, 4096, 8192, 16384)
    quadratic = Grid2(batches, isl, np.array([[b * s * s * 1e-12 for s in isl] for b in batches]))
    kernels = replace(kernels, context_attention=quadratic)
    whole = prefill_pass(shapes, kernels, 1, 8192)
    first, second = prefill_pass(shapes, kernels, 1, 4096), prefill_pass(shapes, kernels, 1, 4096, 4096)
    assert second.attention_s - first.attention_s == pytest.approx(32 * 2 * quadratic.at(1, 4096), rel=1e-6)
    launches = 32 * 2 * kernels.elementwise.latency_s  # RoPE and the KV write, once more for the second chunk
    assert first.attention_s + second.attention_s == pytest.approx(whole.attention_s + launches, rel=1e-6)
    assert second.gemm_s == pytest.approx(first.gemm_s)  # the GEMMs see the chunk's rows only


def test_a_prefill_without_a_context_table_is_priced_by_the_roofline():
    """Where the database has no prefill attention for the shape: the KV cache written and read at the element-wise
    bandwidth and the causal FLOPs at the tensor-core rate, still growing as n^2."""
    shapes, kernels = _llama_like()
    assert kernels.context_attention is None
    a, b = prefill_pass(shapes, kernels, 1, 8192).attention_s, prefill_pass(shapes, kernels, 1, 16384).attention_s
    assert 3.5 < b / a < 4.1
    with pytest.raises(ValueError):
        prefill_pass(shapes, kernels, 0, 128)


def test_a_prompts_tokens_route_independently_and_run_beside_no_shared_experts():
    """A prefill's MoE reads the fused kernel at every prompt token (no within-sequence sharing, which is a verify
    pass's draft tokens' trait) and runs the shared experts after the routed ones."""
    shapes, kernels = _llama_like()
    moe = replace(shapes, moe_layers=32, dense_layers=0, ffn_per_gpu=0, n_experts=128, expert_ffn_per_gpu=768,
                  topk=8, shared_ffn_per_gpu=768)
    tokens = (1, 16, 256, 4096)
    k = replace(kernels, moe=Curve(tokens, tuple(40e-6 + 1e-8 * t for t in tokens)))
    pre = prefill_pass(moe, k, 1, 256).moe_s
    routed = decode_pass(replace(moe, shared_ffn_per_gpu=0), k, 256, 1, 0, expert_sharing=0.0).moe_s
    beside = decode_pass(moe, k, 256, 1, 0, expert_sharing=0.0).moe_s
    assert pre > beside >= routed
    assert pre == pytest.approx(decode_pass(replace(moe, shared_overlapped=False), k, 256, 1, 0).moe_s)


def test_without_the_database_a_one_line_error_says_how_to_install_it(monkeypatch):
    import sys

    from conftest import one_line_error, run

    from calibrate import aiconfigurator

    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)  # as if not installed
    aiconfigurator.installed.cache_clear()
    r = run("calibrate", "--from", "aiconfigurator:h100_sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b")
    one_line_error(r, "pip install 'specsim[aiconfigurator]'")
    aiconfigurator.installed.cache_clear()
