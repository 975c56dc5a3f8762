"""Expert parallelism and DP attention: one GPU's share of a pass of an MoE target spread as the large deployments
spread it.

Scenario: an engine of N = ``tp`` GPUs (SGLang's ``--tp N --ep-size EP --enable-dp-attention --dp DP``,
TensorRT-LLM's ``tp_size``, ``moe_ep_size``, ``enable_attention_dp``) serves a batch of B sequences:

- **attention** is split ``tp / dp`` ways (attention TP, heads divided) inside each of the ``dp`` groups and
  replicated across them; each group runs its own B / dp sequences and holds only their KV cache. The dense layers'
  MLPs, the shared experts, the router, the embedding and the output head go with attention (replicated over the
  groups, split inside one), as SGLang places them with DP attention;
- **the routed experts**: each GPU holds n_experts / EP of them, each expert's width split ``tp / EP`` ways (MoE TP).
  The engine's B x n tokens route to their top-k experts: a GPU reads the experts of its share that they wake
  (``ModelSpec.experts_touched`` / EP, routing assumed balanced over the GPUs) and computes B n top-k / EP
  token-expert pairs;
- **communication** per MoE layer: with EP, the all-to-all dispatch and combine of each GPU's B n / N tokens
  (`simulator.expert_comm`: AIConfigurator's measured DeepEP tables, else the links' bandwidth and latency); with DP
  attention and no EP, an all-gather of the tokens before the experts and its reduce-scatter after. Attention TP's
  two all-reduces a layer as `simulator.cost.comm_time_s` prices TP.

Roofline (as `simulator.cost`): the GPU's attention-and-dense part is the cost model's own formula for a dense
model of those layers (`rank_view`) at the group's batch, overheads included once; the routed experts on the
fused-MoE kernel the preset measured (else the linear layers' roofline); the all-to-alls add (not overlapped:
SGLang's two-batch overlap, which hides part of them, is not modelled). A speculative step needs nothing more: the
verify's B x (k + 1) tokens go through the dispatch and wake the experts they route to, and an MoE draft (DeepSeek's
MTP module) is spread the same way.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from . import SpecsimError
from .expert_comm import ExpertLinks
from .kernel_kinds import MOE_COMPUTE, moe_kernel_dtype
from .specs import ModelSpec

# `cost` below is a simulator.cost.CostModel, which calls this module for a spread share (so not imported here)
CostModel = PassCost = Any
ACTIVATION_BYTES = 2  # bf16 tokens gathered under DP attention without EP
NVLINK_A2A_EFFICIENCY = 0.5  # DeepEP's intranode dispatch/combine: ~225 of NVLink's 450 GB/s a direction, as
#                              AIConfigurator's H100 EP 8 table has 2,048 tokens a GPU (benchmarks/deployments.py)
SCALE_OUT_BYTES_PER_S = 50e9 * 0.88  # one 400 Gb/s ConnectX-7 NIC per GPU (DGX H100/H200/B200), 44 GB/s reached by
#                                      DeepEP's internode kernels in AIConfigurator's H100 EP 16-64 tables
A2A_LATENCY_S = 15e-6  # one low-latency dispatch or combine of a token: 12-16 us in AIConfigurator's H100 EP 8 table


def default_links(nvlink_bytes_per_s: float, domain_gpus: int = 8) -> ExpertLinks:
    """The links' model for a GPU without measured all-to-all tables (module constants and their sources)."""
    return ExpertLinks(nvlink_bytes_per_s * NVLINK_A2A_EFFICIENCY, SCALE_OUT_BYTES_PER_S, A2A_LATENCY_S, domain_gpus,
                       source="NVLink at 0.5 of its bandwidth, 400 Gb/s InfiniBand at 0.88, 15 us a kernel "
                              "(simulator/moe_parallel.py, fitted to AIConfigurator 0.12's H100 DeepEP tables)")


def _divisors(n: int, most: int = 128) -> str:
    ds = [d for d in range(2, min(n, most) + 1) if n % d == 0]
    return ", ".join(map(str, ds[:8])) + (", ..." if len(ds) > 8 else "")


def split(model: ModelSpec, tp: int, ep: int = 1, dp: int = 1, role: str = "target") -> ModelSpec:
    """One GPU's share of `model` on an engine of `tp` GPUs with `ep`-way expert parallelism and `dp` attention
    groups (module docstring); `ep` = `dp` = 1 is plain tensor parallelism (`ModelSpec.shard`). A dense draft beside
    an MoE target takes the attention groups only; a one-line error names what does not divide."""
    if ep == 1 and dp == 1:
        return model.shard(tp)
    if not model.is_moe and role == "target":
        flag = "--ep" if ep > 1 else "--dp"
        raise SpecsimError(f"{flag} spreads a mixture of experts (experts over GPUs, attention in data-parallel "
                           f"groups beside them); {model.name} is dense: use --tp alone")
    if ep > 1 and not model.is_moe:
        ep = 1
    for flag, v in (("--ep", ep), ("--dp", dp)):
        if v < 1 or tp % v:
            raise SpecsimError(f"{flag} {v} with --tp {tp}: --tp counts the engine's GPUs, which the experts and "
                               f"the attention groups share, so it must be a multiple of {flag} (SGLang's --tp {v} "
                               f"--ep-size {v} --enable-dp-attention --dp {v}); give --tp {v * math.ceil(tp / v)}")
    if model.is_moe and model.n_experts % ep:
        raise SpecsimError(f"--ep {ep} does not divide {model.name}'s {model.n_experts} experts: use --ep "
                           f"{_divisors(model.n_experts)}")
    att, moe = tp // dp, tp // ep
    if model.n_heads % att or model.d_ff % att or model.d_ff_shared % att:
        raise SpecsimError(f"{model.name}'s {model.n_heads} heads and MLP widths cannot be split {att} ways (--tp "
                           f"{tp} / --dp {dp}): use --dp {tp} (each group one GPU)")
    if model.d_ff_expert % moe:
        raise SpecsimError(f"{model.name}'s experts (width {model.d_ff_expert}) cannot be split {moe} ways (--tp "
                           f"{tp} / --ep {ep}): use --ep {tp}")
    kv = model.n_kv_heads // att if model.n_kv_heads % att == 0 else 1
    return replace(model, n_heads=model.n_heads // att, n_kv_heads=max(kv, 1), d_ff=model.d_ff // att,
                   d_ff_shared=model.d_ff_shared // att, d_ff_expert=model.d_ff_expert // moe,
                   vocab_size=-(-model.vocab_size // att), tp=tp, ep=ep, dp=dp)


def is_spread(model: ModelSpec) -> bool:
    """A share `split` made with EP or DP attention (priced here, not by `CostModel`'s own formula)."""
    return model.ep > 1 or model.dp > 1


def rank_view(model: ModelSpec) -> ModelSpec:
    """A dense model of one GPU's attention-and-dense part: the attention as split, and an MLP per layer as wide as
    the dense layers', the shared experts' and the router's weights averaged over the layers (the router's d x E as
    a third of a SwiGLU's 3 d x width)."""
    att = model.tp // model.dp
    view = replace(model, name=f"{model.name} (a GPU's attention and dense layers)", tp=att, ep=1, dp=1)
    if not model.is_moe:
        return view
    width = (model.dense_layers * model.d_ff
             + model.n_moe_layers * (model.d_ff_shared + math.ceil(model.n_experts / 3))) / model.n_layers
    return replace(view, n_experts=0, experts_per_token=0, d_ff_expert=0, d_ff_shared=0, dense_layers=0,
                   expert_dtype="", d_ff=max(1, round(width)))


def links_of(cost: CostModel) -> ExpertLinks:
    hw = cost.hardware
    if hw.expert_links is not None:
        return hw.expert_links
    if hw.interconnect is None:
        raise SpecsimError(f"{hw.name} has no interconnect to spread experts over; give a preset with one")
    return default_links(hw.interconnect.bw_bytes_per_s)


def routed_times(cost: CostModel, model: ModelSpec, b: np.ndarray, n: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A GPU's routed experts over a pass of the engine's b x n tokens: (time, weight bytes, FLOPs), all MoE
    layers."""
    if not model.is_moe:
        z = np.zeros(np.shape(b * n))
        return z, z, z
    L = model.n_moe_layers
    touched = model.experts_touched(n, b, cost.expert_sharing, cost.routing_skew, cost.routing_power_law) / model.ep
    nbytes = touched * model.expert_params * model.expert_bytes_per_param  # a layer's, this GPU's
    pairs = b * n * model.experts_per_token / model.ep  # token-expert pairs this GPU computes
    flops = 2.0 * pairs * model.expert_params
    mk = cost.kernels.moe_kernel(moe_kernel_dtype(model))
    if mk is None:
        layer = cost.linear_times(nbytes, flops, pairs)
    else:
        hw = cost.hardware
        peak = hw.peak_flops(MOE_COMPUTE.get(mk.dtype, "bf16")) * mk.flops_efficiency
        layer = mk.fixed_s + mk.expert_s * touched + _ridge(
            nbytes / (hw.mem_bw_bytes_per_s * mk.bw_efficiency), flops / peak, cost.linear_ridge_p)
    return L * layer, L * nbytes, L * flops


def _ridge(t_mem_s: np.ndarray, t_compute_s: np.ndarray, p: float) -> np.ndarray:
    """simulator.cost.ridge_combine_many's (t_mem^p + t_compute^p)^(1/p), p = inf the max."""
    if p == float("inf"):
        return np.maximum(t_mem_s, t_compute_s)
    hi = np.maximum(np.maximum(t_mem_s, t_compute_s), 1e-300)
    return hi * ((t_mem_s / hi) ** p + (t_compute_s / hi) ** p) ** (1.0 / p)


def comm_times(cost: CostModel, model: ModelSpec, b: np.ndarray, n: np.ndarray) -> np.ndarray:
    """What a GPU waits on around the experts in one pass (module docstring): EP's all-to-alls, or DP attention's
    gather and scatter of the tokens without EP."""
    rows = np.asarray(b * n, dtype=float)
    if not model.is_moe:
        return 0.0 * rows
    L = model.n_moe_layers
    if model.ep > 1:
        mode = "ll" if np.all(np.asarray(n) <= 16) else "normal"  # DeepEP's auto mode: low latency to decode
        return L * links_of(cost).a2a_s(model.ep, rows / model.tp, model.experts_per_token, model.d_model, mode)
    link = cost.hardware.interconnect
    if link is None:
        raise SpecsimError(f"{cost.hardware.name} has no interconnect for DP attention's gathers")
    return L * 2 * link.all_gather_s(model.tp, rows * model.d_model * ACTIVATION_BYTES)


def group_batch(model: ModelSpec, b: np.ndarray) -> np.ndarray:
    """Sequences one attention group runs of the engine's batch: the largest share, ceil(B / dp)."""
    return np.ceil(np.asarray(b, dtype=float) / model.dp)


def formula_times(cost: CostModel, model: ModelSpec, batch: np.ndarray, new_tokens: np.ndarray | int,
                  context: int) -> tuple[np.ndarray, np.ndarray]:
    """`CostModel.formula_times` for a spread share: (time, bound) per (batch, new tokens), batch the engine's."""
    b, n = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(new_tokens, dtype=float))
    t, bound = cost.formula_times(rank_view(model), group_batch(model, b), n, context)
    experts_s, _, _ = routed_times(cost, model, b, n)
    return t + experts_s + comm_times(cost, model, b, n), bound


def pass_cost(cost: CostModel, model: ModelSpec, batch: int, new_tokens: int, context: int) -> PassCost:
    """`CostModel.pass_cost` for a spread share: the attention group's pass plus this GPU's experts and waits."""
    b, n = np.array([float(batch)]), np.array([float(new_tokens)])
    view = cost.pass_cost(rank_view(model), int(group_batch(model, b)[0]), new_tokens, context)
    experts_s, experts_bytes, experts_flops = (float(x[0]) for x in routed_times(cost, model, b, n))
    comm = float(comm_times(cost, model, b, n)[0])
    return replace(view, batch=batch, flops=view.flops + experts_flops,
                   weight_bytes=view.weight_bytes + experts_bytes,
                   roofline_time_s=view.roofline_time_s + experts_s, time_s=view.time_s + experts_s + comm,
                   comm_time_s=view.comm_time_s + comm)
