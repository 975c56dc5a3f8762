"""Kernel kinds a GPU preset measured apart from its roofline (AIConfigurator's tables, fitted by
benchmarks/refit_presets.py): the fused-MoE kernel of MoE layers, the floor of block-scaled fp8 GEMMs, MLA's
generation module. `KernelTerms` holds them (scenarios/hardware.toml); `kernel_kinds` prices them for
`simulator.cost.CostModel`, only where each kind runs, so a dense bf16 model's price does not move."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

ModelSpec = Any  # simulator.specs.ModelSpec (which imports this module: not imported back)


@dataclass(frozen=True)
class MoeKernel:
    """The fused-MoE kernel of one expert dtype as measured: a fixed time per MoE layer (launch, routing, the
    permutation around the grouped GEMMs), a time per woken expert, and the woken experts' bytes and the routed
    tokens' FLOPs at their own fractions of the datasheet (combined through the preset's ridge)."""

    dtype: str  # bf16, fp8 (per tensor), fp8_block (DeepSeek's 128 x 128 block scales), nvfp4, mxfp4
    fixed_s: float
    bw_efficiency: float
    flops_efficiency: float
    expert_s: float = 0.0  # per woken expert (its own tiles of the grouped GEMMs), beyond its bytes
    one_token_s: float | None = None  # the fixed time of a layer that sees one token (vLLM's one-row configuration)


@dataclass(frozen=True)
class KernelTerms:
    """What a GPU preset's measured kernels do beyond its roofline for particular kernel kinds, priced by the
    preset's cost model only where they apply (`simulator.cost`): the fused-MoE kernel of MoE layers, the floor of
    block-scaled fp8 GEMMs (a time no such GEMM runs under, by rows), MLA's generation module's fixed time a layer.
    Empty: the roofline alone (every kind priced as a dense GEMM)."""

    moe: tuple[MoeKernel, ...] = ()
    fp8_block_floor: tuple[tuple[int, float], ...] = ()  # (rows, seconds): log-linear in rows, flat beyond the ends
    mla_layer_s: float = 0.0
    source: str = ""

    def moe_kernel(self, dtype: str) -> MoeKernel | None:
        return next((k for k in self.moe if k.dtype == dtype), None)

    def fp8_block_floor_s(self, rows: np.ndarray | float) -> np.ndarray:
        """The fastest block-scaled fp8 GEMM measured at `rows` rows (0 where none was)."""
        r = np.asarray(rows, dtype=float)
        if not self.fp8_block_floor:
            return np.zeros(r.shape)
        xs, ts = zip(*self.fp8_block_floor)
        return np.interp(np.log2(np.maximum(r, 1.0)), np.log2(np.asarray(xs, dtype=float)), np.asarray(ts))


def block_scaled(model: ModelSpec) -> bool:
    """Whether `model`'s fp8 weights carry 128 x 128 block scales (DeepSeek's fp8 checkpoints, as vLLM serves them
    and as `calibrate.aiconfigurator` reads their GEMMs: fp8 with MLA); other fp8 weights are scaled per tensor."""
    return model.dtype == "fp8" and model.attention == "mla"


def moe_kernel_dtype(model: ModelSpec) -> str:
    """The fused-MoE kernel's dtype for `model`'s routed experts: bf16, fp8 (per tensor), fp8_block, nvfp4, mxfp4."""
    e = model.expert_dtype or model.dtype
    if e == "fp8" and block_scaled(model):
        return "fp8_block"
    return {"fp16": "bf16"}.get(e, e)


# The tensor-core rate each fused-MoE dtype's FLOPs run at (mxfp4 experts: weight-only, bf16 activations, as vLLM
# 0.24's w4a16 kernels AIConfigurator measured)
MOE_COMPUTE = {"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4", "mxfp4": "bf16"}


def kernel_kinds(kernels: KernelTerms, hardware: Any, model: ModelSpec, b: np.ndarray, n: np.ndarray,
                 linear_rates: Any, ridge_p: float, sharing: float, skew: float, power_law: float,
                 ridge_combine_many: Callable[[np.ndarray, np.ndarray, float], np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The kernel kinds a preset measured apart from its GEMM roofline (`KernelTerms`), for passes of b x n
    rows: (the MoE layers' time, their weight bytes and FLOPs, which the linear operator no longer holds, and
    the floors' time beyond the roofline); a GEMM's memory and compute times combine by `ridge_combine_many`
    (`simulator.cost`'s). Each applies only where its kind runs:

    - MoE layers (a fused-MoE kernel measured for the experts' dtype): the fused kernel's fixed time a layer
      (its own at one token: the engines run one row with another configuration) and a time per woken expert,
      plus the woken experts' bytes and the routed rows' FLOPs at its own rates; the shared experts' two GEMMs
      beside it on a second stream (vLLM under CUDA graphs), the layer the longer of the two;
    - block-scaled fp8 weights: the dense MLPs' and shared experts' GEMMs at least the fastest such GEMM measured
      at its rows; a GQA model's attention projections too, but block scales come only with MLA here
      (`block_scaled`), whose projections are not floored (the roofline prices them, plus the MLA module's fixed
      time where one is priced);
    - MLA: the generation module's fixed time a layer (its launches), on top of its projections' and KV
      read's roofline."""
    k = kernels
    rows = b * n
    zero = np.zeros(rows.shape)
    moe_s, moe_bytes, moe_flops, floors_s = zero, zero, zero, zero
    if not (k.moe or k.fp8_block_floor or k.mla_layer_s):
        return moe_s, moe_bytes, moe_flops, floors_s
    bw, fl = linear_rates.at_many(rows)
    p = ridge_p
    wb = model.bytes_per_param
    floor = k.fp8_block_floor_s(rows) if block_scaled(model) else zero
    mla = model.attention == "mla" and k.mla_layer_s > 0

    def gemm(n_out: int, k_in: int) -> np.ndarray:  # one GEMM's roofline, at least the floor
        t = ridge_combine_many(n_out * k_in * wb / bw, 2.0 * rows * n_out * k_in / fl, p)
        return np.maximum(t, floor)

    def excess(n_out: int, k_in: int) -> np.ndarray:  # the floor's time beyond the roofline
        return gemm(n_out, k_in) - ridge_combine_many(n_out * k_in * wb / bw, 2.0 * rows * n_out * k_in / fl, p)

    d = model.d_model
    if floor.any():
        dense = model.dense_layers if model.is_moe else model.n_layers
        if model.d_ff and dense:
            floors_s = floors_s + dense * (excess(2 * model.d_ff, d) + excess(d, model.d_ff))
        if not mla and model.attention == "gqa":
            hd = model.head_dim
            floors_s = floors_s + model.n_layers * (excess((model.n_heads + 2 * model.n_kv_heads) * hd, d)
                                                    + excess(d, model.n_heads * hd))
    if mla:
        floors_s = floors_s + model.n_layers * k.mla_layer_s
    mk = k.moe_kernel(moe_kernel_dtype(model)) if model.is_moe else None
    if mk is not None:
        L = model.n_moe_layers
        touched = model.experts_touched(n, b, sharing, skew, power_law)
        routed_bytes = touched * model.expert_params * model.expert_bytes_per_param
        routed_flops = 2.0 * rows * model.experts_per_token * model.expert_params
        peak = hardware.peak_flops(MOE_COMPUTE.get(mk.dtype, "bf16"))
        fixed = mk.fixed_s if mk.one_token_s is None else np.where(rows == 1, mk.one_token_s, mk.fixed_s)
        bw_moe = hardware.mem_bw_bytes_per_s * mk.bw_efficiency
        routed = fixed + mk.expert_s * touched + ridge_combine_many(routed_bytes / bw_moe,
                                                                    routed_flops / (peak * mk.flops_efficiency), p)
        ws = model.d_ff_shared
        shared = gemm(2 * ws, d) + gemm(d, ws) if ws else zero
        moe_s = L * np.maximum(routed, shared)
        moe_bytes = L * (routed_bytes + 3 * d * ws * wb)
        moe_flops = L * (routed_flops + 2.0 * rows * 3 * d * ws)
    return moe_s, moe_bytes, moe_flops, floors_s
