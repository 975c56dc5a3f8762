"""The calibration profile as typed data: what was measured, where, how, and what was fitted to it.

A profile is JSON with a schema version, written atomically and read back into frozen dataclasses (`Profile`,
`MeasuredAcceptance`, ...). Anything that cannot be trusted to mean what it says (not JSON, another schema, a newer
version, a missing or malformed field, a non-finite number) is refused with a one-line error, never misread. No torch
here: `specsim predict` reads profiles without it.

A profile is portable: read with ``--profile FILE`` it predicts on any machine (the caller notes that it was measured
elsewhere); only the default lookup ("the latest profile of this device") and commands that run real passes match it
against the device they run on.

One concept past 500 lines: the profile's schema, one dataclass per section with its reader and writer beside it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from scenarios.files import atomic_write_text, cache_dir, parse_json, read_text
from simulator import SpecsimError
from simulator.acceptance import (
    Acceptance,
    BetaAcceptance,
    IIDAcceptance,
    MarkovAcceptance,
    PositionalAcceptance,
    Proposing,
    RanksAcceptance,
    WithRanks,
)
from simulator.cost import CostModel, RateTable
from simulator.drafts import HostCost
from simulator.kernel_kinds import KernelTerms, MoeKernel
from simulator.replay import ProbabilityTraceAcceptance, TraceAcceptance
from simulator.specs import DEFAULT_EXPERT_SHARING, HardwareSpec, ModelSpec, Overheads, SpeculationTax

SCHEMA = "specsim-profile"
SCHEMA_VERSION = 4  # 2: options, engine mode, origin, trust, the acceptance variant chosen by held-out error
# 3: a serving benchmark's fit (fit.drift, fit.prefill_scale, fit.linear_ridge_p, acceptance_fitted); 4: its speculative
# step's factor (fit.spec_drift). A profile is written at the lowest version that holds what it has: older specsims read
# it, and refuse one whose fields they would drop rather than misprice.
BENCH_FIELDS_VERSION = 3
SPEC_DRIFT_VERSION = 4
ENGINE_MODES = ("eager", "graph")
MEASURED_VARIANTS = ("positional", "iid", "beta", "markov", "trace", "ranks")

# A profile is trusted when its fit predicts the held-out passes and its measured medians are known closely enough
# (`assess_trust`).
# `validate --quick` aims at 5 % median, 12 % p90: a profile whose own held-out passes miss by more than 7 % / 20 %
# does not get there (the fresh clones behind these bounds are in docs/calibration.md).
MAX_HELDOUT_MEDIAN = 0.07
MAX_HELDOUT_P90 = 0.20
# No held-out pass mispriced by more than a quarter: with 15-25 held-out passes the p90 is the second or third worst,
# and a profile whose worst pass is off by 26-40 % said "trusted" beside it. The worst case may be one noisy
# measurement rather than the fit; the label names it either way, and a reader decides.
MAX_HELDOUT_WORST = 0.25
MAX_MEDIAN_UNCERTAINTY = 0.05  # the median point's relative standard error of its median


class _Bad(Exception):
    """A malformed field, reported by `Profile.from_dict` as one line naming the profile."""


def _num(d: Mapping[str, Any], key: str, *, positive: bool = False, optional: bool = False,
         signed: bool = False) -> float | None:
    if key not in d or d[key] is None:
        if optional:
            return None
        raise _Bad(f"no {key!r}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _Bad(f"{key} = {v!r} is not a finite number")
    if (v < 0 and not signed) or (positive and v == 0):
        raise _Bad(f"{key} = {v!r} must be {'> 0' if positive else '>= 0'}")
    return float(v)


def speculation_tax_record(d: Any) -> dict[str, Any]:
    """`calibrate.speculation_tax.measure_tax`'s record, with the numbers the cost model prices checked (batches
    whole, costs finite; the priced ones absent in profiles from before they were measured)."""
    tax = dict(d or {})
    for batch, v in (tax.get("by_batch") or {}).items():
        if not str(batch).isdigit() or not isinstance(v, Mapping):
            raise _Bad(f"speculation_tax batch {batch!r} is not a batch size with its measurements")
        for key in ("off_fraction", "switch_fraction", "off_priced", "switch_priced"):
            if not key.endswith("_priced") or key in v:
                _num(v, key, signed=True)
    return tax


def _need(d: Mapping[str, Any], key: str) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise _Bad(f"no {key!r}")
    return d[key]


@dataclass(frozen=True)
class DeviceInfo:
    """Which device: the fields that say whether a profile belongs to a machine, and the rest as measured."""

    kind: str  # "cpu" or "cuda"
    name: str
    memory_bytes: float | None = None  # device memory (a GPU); None: the host's
    details: Mapping[str, Any] = field(default_factory=dict)  # cores, torch and CUDA versions, SMs, ...

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceInfo:
        kind, name = _need(d, "kind"), _need(d, "name")
        if kind not in ("cpu", "cuda"):
            raise _Bad(f"device kind {kind!r} is not cpu or cuda")
        rest = {k: v for k, v in d.items() if k not in ("kind", "name", "memory_bytes")}
        return cls(str(kind), str(name), _num(d, "memory_bytes", positive=True, optional=True), rest)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.memory_bytes is not None:
            out["memory_bytes"] = int(self.memory_bytes)
        return {**out, **self.details}

    def same_as(self, other: Mapping[str, Any] | DeviceInfo) -> bool:
        o = other if isinstance(other, DeviceInfo) else DeviceInfo(str(other.get("kind")), str(other.get("name")))
        return self.kind == o.kind and self.name == o.name

    @property
    def key(self) -> str:
        """A file-name-safe key: profiles of this device are found by it."""
        raw = f"{self.kind}-{self.name}"
        return "".join(ch if ch.isalnum() else "-" for ch in raw.lower()).strip("-")[:80]


@dataclass(frozen=True)
class PassRecord:
    """One timed grid point (or one that ran out of memory): a pass of `model` over batch x new tokens on context."""

    model: str
    batch: int
    new_tokens: int
    context: int
    median_s: float | None = None
    iqr_s: float | None = None
    samples_s: tuple[float, ...] = ()
    oom: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PassRecord:
        shape = [_need(d, k) for k in ("batch", "new_tokens", "context")]
        if not all(isinstance(v, int) and v >= 0 for v in shape) or shape[0] < 1 or shape[1] < 1:
            raise _Bad(f"pass {d.get('model')} has a bad shape {shape}")
        oom = bool(d.get("oom", False))
        median = None if oom else _num(d, "median_s", positive=True)
        samples = tuple(float(s) for s in d.get("samples_s", ()))
        if not all(math.isfinite(s) and s > 0 for s in samples):
            raise _Bad(f"pass {d.get('model')} {shape} has a sample that is not a positive finite time")
        return cls(str(_need(d, "model")), *shape, median_s=median, iqr_s=_num(d, "iqr_s", optional=True),
                   samples_s=samples, oom=oom)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "batch": self.batch, "new_tokens": self.new_tokens,
                               "context": self.context}
        if self.oom:
            return {**out, "oom": True}
        return {**out, "median_s": self.median_s, "iqr_s": self.iqr_s, "n": len(self.samples_s),
                "samples_s": [round(s, 9) for s in self.samples_s]}

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.model, self.batch, self.new_tokens, self.context)

    @property
    def spread(self) -> float:
        """Interquartile range over median: how repeatable this point's single passes were."""
        return (self.iqr_s or 0.0) / self.median_s if self.median_s else 0.0

    @property
    def uncertainty(self) -> float:
        """The relative standard error of this point's median: 1.2533 sigma / sqrt(n) for the median of n samples,
        sigma estimated robustly as IQR / 1.349 (so 0.93 IQR / sqrt(n)). What a prediction inherits from the
        measurement is the median's error, not one pass's: 25 passes that spread 16 % pin their median to ~3 %.
        A record without its samples counts as one."""
        return 1.2533 / 1.349 * self.spread / math.sqrt(max(len(self.samples_s), 1))


@dataclass(frozen=True)
class Microbenchmarks:
    """The device's measured ceilings; `raw` keeps every sample as measured."""

    read_bytes_per_s: float
    copy_bytes_per_s: float
    matmul_flops_per_s: Mapping[str, float]  # dtype -> FLOP/s of a large GEMM
    call_overhead_s: float
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Microbenchmarks:
        bw = _need(d, "bandwidth")
        matmul = {str(dt): _num(_need(d["matmul"], dt), "flops_per_s", positive=True) for dt in _need(d, "matmul")}
        if not matmul:
            raise _Bad("no matmul measurement")
        call = d.get("call_overhead") or {}
        return cls(_num(bw, "read_bytes_per_s", positive=True), _num(bw, "copy_bytes_per_s", positive=True),
                   matmul, _num(call, "per_call_s", optional=True) or 0.0, dict(d))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)

    def flops(self, dtype: str) -> float:
        return self.matmul_flops_per_s.get(dtype, self.matmul_flops_per_s.get("fp32", max(
            self.matmul_flops_per_s.values())))

    def hardware(self, name: str, memory_bytes: float | None, source: str = "micro-benchmarks") -> HardwareSpec:
        """The device as its micro-benchmarks saw it: read bandwidth and GEMM FLOP/s per dtype taken as the peaks
        (efficiency 1); memory from the device or, for a CPU, the host."""
        from scenarios.host import host_memory_bytes

        return HardwareSpec(name=name, mem_bw_bytes_per_s=self.read_bytes_per_s,
                            peak_flops_per_s=tuple(self.matmul_flops_per_s.items()),
                            mem_capacity_bytes=float(memory_bytes or host_memory_bytes()), bw_efficiency=1.0,
                            flops_efficiency=1.0, source=source)


@dataclass(frozen=True)
class HeldoutErrors:
    """The fit's relative errors (predicted / measured - 1) on points it was not fitted to."""

    n: int
    median_abs_err: float
    p90_abs_err: float
    max_abs_err: float
    points: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HeldoutErrors:
        n = int(_need(d, "n"))
        if n == 0:
            return cls(0, math.nan, math.nan, math.nan)
        return cls(n, _num(d, "median_abs_err"), _num(d, "p90_abs_err"), _num(d, "max_abs_err"),
                   tuple(d.get("points", ())))

    def to_dict(self) -> dict[str, Any]:
        if self.n == 0:
            return {"n": 0, "points": []}
        return {"n": self.n, "median_abs_err": self.median_abs_err, "p90_abs_err": self.p90_abs_err,
                "max_abs_err": self.max_abs_err, "points": list(self.points)}


def rates_from_dict(d: Mapping[str, Any]) -> RateTable:
    try:
        return RateTable(tuple(int(r) for r in _need(d, "rows")),
                         tuple(float(v) for v in _need(d, "mem_bw_bytes_per_s")),
                         tuple(float(v) for v in _need(d, "flops_per_s")))
    except (ValueError, TypeError) as e:
        raise _Bad(f"rate table: {e}") from None


def rates_to_dict(rates: RateTable) -> dict[str, Any]:
    return {"rows": list(rates.rows), "mem_bw_bytes_per_s": list(rates.mem_bw_bytes_per_s),
            "flops_per_s": list(rates.flops_per_s)}


@dataclass(frozen=True)
class Fit:
    """The fitted cost model's parameters and its held-out error; `extra` keeps the rest as written."""

    linear_rates: RateTable
    attention_rates: RateTable
    overheads: Overheads
    heldout: HeldoutErrors
    datasheet_heldout: HeldoutErrors
    train_points: int
    attention_overlap: bool = True
    verify_ratio_batch1: tuple[Mapping[str, float], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    linear_additive: bool = False  # the linear layers' weight reads and FLOPs add (an imported GPU engine's steps)
    # A serving benchmark's fit (calibrate.bench_profile): model name -> ((batch, factor), ...) on that model's passes,
    # log-linear in batch between the knots and constant beyond (`CostModel.drift`); the prompts' pass factor
    # (`CostModel.prefill_scale`); how the linear layers' memory and compute times combine where it is neither
    # additive (1) nor overlapping (inf) as `linear_additive` says (`CostModel.linear_ridge_p`, a preset's ridge_p)
    drift: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    prefill_scale: float = 1.0
    linear_ridge_p: float | None = None
    reach: tuple[int, int, int] | None = None  # (batch, rows, context) the benchmark's runs held (`CostModel.reach`)
    # A serving benchmark's base preset priced these beside its roofline, and its MoE passes under this routing: the
    # profile prices them as its fit did (`CostModel.kernels`, `.routing_skew`, `.routing_power_law`)
    kernels: KernelTerms = field(default_factory=KernelTerms)
    routing_skew: float = 0.0
    routing_power_law: float = 0.0
    # a speculative step's passes (verification and draft) over what `drift` prices, from the benchmark's speculative
    # runs (`CostModel.spec_drift`): ((batch, factor), ...)
    spec_drift: tuple[tuple[float, float], ...] = ()

    @property
    def bench(self) -> bool:
        """Fitted to a serving benchmark's runs (a drift or a prefill factor over its base's passes)."""
        return (bool(self.drift) or bool(self.spec_drift) or self.prefill_scale != 1.0
                or self.linear_ridge_p is not None)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Fit:
        ov = dict(_need(d, "overheads"))
        for k, v in ov.items():
            if k == "graphs":  # an engine preset's capture ceiling (CudaGraphs), or none
                if v is not None and not isinstance(v, dict):
                    raise _Bad(f"fit.overheads.graphs must be a table or null, got {v!r}")
            elif k == "verify_tokens_add":  # an engine preset's verified tokens priced as adding (Overheads)
                if not isinstance(v, bool):
                    raise _Bad(f"fit.overheads.verify_tokens_add must be true or false, got {v!r}")
            elif k != "engine":
                _num(ov, k)
            else:
                for name, part in v.items():  # an older profile's verify extra may be negative (engine_overheads)
                    if name in ("ragged_verify", "drafts_per_sequence"):  # how the engine runs, not a cost
                        if not isinstance(part, bool):
                            raise _Bad(f"fit.overheads.engine.{name} must be true or false, got {part!r}")
                        continue
                    if name == "kinds":  # an engine preset's costs by draft kind (EngineOverheads.from_dict reads them)
                        continue
                    if name == "draft_catchup_tokens":
                        if not isinstance(part, int) or part < 1:
                            raise _Bad(f"fit.overheads.engine.draft_catchup_tokens must be a whole number >= 1, "
                                       f"got {part!r}")
                        continue
                    _num(part, "fixed_s", signed=name == "verify")
                    _num(part, "per_sequence_s", signed=name == "verify")
        if "draft_catchup_tokens" in d:  # profiles before it moved into the engine's overheads kept it here
            ov["engine"] = {**ov.get("engine", {}), "draft_catchup_tokens": d["draft_catchup_tokens"]}
        known = {"linear_rates", "attention_rates", "overheads", "heldout", "datasheet_heldout", "train_points",
                 "draft_catchup_tokens", "attention_overlap", "verify_ratio_batch1", "linear_additive", "drift",
                 "prefill_scale", "linear_ridge_p", "reach", "kernels", "routing", "spec_drift"}
        return cls(
            rates_from_dict(_need(d, "linear_rates")), rates_from_dict(_need(d, "attention_rates")),
            Overheads.from_dict(ov), HeldoutErrors.from_dict(_need(d, "heldout")),
            HeldoutErrors.from_dict(d.get("datasheet_heldout") or {"n": 0}), int(d.get("train_points", 0)),
            bool(d.get("attention_overlap", True)),
            tuple(d.get("verify_ratio_batch1", ())), {k: v for k, v in d.items() if k not in known},
            bool(d.get("linear_additive", False)), drift_from_dict(d.get("drift") or {}),
            _num(d, "prefill_scale", positive=True, optional=True) or 1.0,
            _num(d, "linear_ridge_p", positive=True, optional=True), reach_from_dict(d.get("reach")),
            kernels_from_dict(d.get("kernels")), *routing_from_dict(d.get("routing")),
            spec_drift=drift_from_dict({"spec_drift": d["spec_drift"]})["spec_drift"]
            if d.get("spec_drift") else ())

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**self.extra, "linear_rates": rates_to_dict(self.linear_rates),
                "attention_rates": rates_to_dict(self.attention_rates), "overheads": asdict(self.overheads),
                "attention_overlap": self.attention_overlap, "linear_additive": self.linear_additive,
                "train_points": self.train_points, "heldout": self.heldout.to_dict(),
                "datasheet_heldout": self.datasheet_heldout.to_dict(),
                "verify_ratio_batch1": list(self.verify_ratio_batch1),
                **({"drift": {m: [list(k) for k in knots] for m, knots in self.drift.items()},
                    "prefill_scale": self.prefill_scale, "linear_ridge_p": self.linear_ridge_p,
                    "reach": dict(zip(("batch", "rows", "context"), self.reach)) if self.reach else None,
                    "routing": {"skew": self.routing_skew, "power_law": self.routing_power_law},
                    **({"spec_drift": [list(k) for k in self.spec_drift]} if self.spec_drift else {})}
                   if self.bench else {}),
                **({"kernels": kernels_to_dict(self.kernels)} if kernels_to_dict(self.kernels) else {})}


def kernels_to_dict(k: KernelTerms) -> dict[str, Any]:
    """fit.kernels: a preset's measured kernel kinds (`KernelTerms`) as written; {} where it has none."""
    if not (k.moe or k.fp8_block_floor or k.mla_layer_s):
        return {}
    return {"moe": [dict(vars(m)) for m in k.moe], "fp8_block_floor": [[r, s] for r, s in k.fp8_block_floor],
            "mla_layer_s": k.mla_layer_s, "source": k.source}


def kernels_from_dict(d: Any) -> KernelTerms:
    """fit.kernels (`kernels_to_dict`), every time and efficiency finite and >= 0, the floor's rows increasing."""
    if not d:
        return KernelTerms()
    if not isinstance(d, Mapping):
        raise _Bad("fit.kernels is not a table of kernel kinds")
    moe = []
    for m in d.get("moe") or ():
        if not isinstance(m, Mapping) or not isinstance(m.get("dtype"), str):
            raise _Bad("fit.kernels.moe needs a dtype and its times for each fused-MoE kernel")
        moe.append(MoeKernel(m["dtype"], _num(m, "fixed_s"), _num(m, "bw_efficiency", positive=True),
                             _num(m, "flops_efficiency", positive=True), _num(m, "expert_s", optional=True) or 0.0,
                             _num(m, "one_token_s", optional=True)))
    try:
        floor = tuple((int(r), float(t)) for r, t in d.get("fp8_block_floor") or ())
    except (TypeError, ValueError):
        raise _Bad("fit.kernels.fp8_block_floor is not a list of [rows, seconds] pairs") from None
    if not all(r >= 1 and math.isfinite(t) and t >= 0 for r, t in floor) or \
            [r for r, _ in floor] != sorted({r for r, _ in floor}):
        raise _Bad("fit.kernels.fp8_block_floor needs [rows >= 1, seconds >= 0] pairs, rows increasing")
    return KernelTerms(tuple(moe), floor, _num(d, "mla_layer_s", optional=True) or 0.0, str(d.get("source", "")))


def routing_from_dict(d: Any) -> tuple[float, float]:
    """fit.routing: {skew, power_law} (`CostModel.routing_skew`, `.routing_power_law`); uniform where absent."""
    if not d:
        return 0.0, 0.0
    if not isinstance(d, Mapping):
        raise _Bad("fit.routing is not {skew, power_law}")
    skew, power = _num(d, "skew", optional=True) or 0.0, _num(d, "power_law", optional=True) or 0.0
    if power and power <= 1.0:
        raise _Bad(f"fit.routing.power_law = {power!r} must be 0 (none) or > 1")
    return skew, power


def reach_from_dict(d: Any) -> tuple[int, int, int] | None:
    """fit.reach: {batch, rows, context}, whole numbers >= 1 (context >= 0); None where absent."""
    if d is None:
        return None
    try:
        reach = tuple(int(d[k]) for k in ("batch", "rows", "context"))
    except (KeyError, TypeError, ValueError):
        raise _Bad("fit.reach needs whole numbers batch, rows and context") from None
    if min(reach[:2]) < 1 or reach[2] < 0:
        raise _Bad(f"fit.reach {reach} needs batch and rows >= 1, context >= 0")
    return reach  # type: ignore[return-value]


def drift_from_dict(d: Any) -> dict[str, tuple[tuple[float, float], ...]]:
    """fit.drift: model name -> [[batch >= 1, factor > 0], ...], batches increasing (and fit.spec_drift, read as
    {"spec_drift": its knots})."""
    if not isinstance(d, Mapping):
        raise _Bad("fit.drift is not a table of models' knots")
    out = {}
    for model, knots in d.items():
        name = "fit.spec_drift" if model == "spec_drift" else f"fit.drift of {model}"
        try:
            pairs = tuple((float(b), float(f)) for b, f in knots)
        except (TypeError, ValueError):
            raise _Bad(f"{name} is not a list of [batch, factor] pairs") from None
        if not pairs or not all(math.isfinite(b) and math.isfinite(f) and b >= 1 and f > 0 for b, f in pairs) or \
                [b for b, _ in pairs] != sorted(b for b, _ in pairs):
            raise _Bad(f"{name} needs [batch >= 1, factor > 0] pairs, batches increasing")
        out[str(model)] = pairs
    return out


@dataclass(frozen=True)
class MeasuredAcceptance:
    """Acceptance of the built-in pair on the calibration prompts (calibrate/measure_acceptance.py measures it):
    per token alpha_t = sum_x min(p, q), the greedy matches, and the models fitted to them. `raw` keeps every field."""

    temperature: float
    prompts: int
    tokens_per_prompt: int
    alpha: float
    survival: tuple[float, ...]  # P(A >= i), i = 1..8
    conditional_alpha: tuple[float, ...]  # P(accept i | accepted < i)
    ranks: tuple[float, ...]  # P(the j-th ranked candidate is the accepted one)
    beta: tuple[float, float] | None
    markov: tuple[float, float, float, float]  # alpha_easy, alpha_hard, p_easy_to_hard, p_hard_to_easy
    trace_alpha: tuple[np.ndarray, ...]
    greedy_yields: tuple[np.ndarray, ...]
    chosen: str = "positional"  # the variant `measured` means: lowest held-out error (older profiles: positional)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MeasuredAcceptance:
        def probs(key: str) -> tuple[float, ...]:
            values = tuple(float(v) for v in _need(d, key))
            if not values or not all(0.0 <= v <= 1.0 + 1e-9 for v in values):
                raise _Bad(f"acceptance {key} must be probabilities")
            return tuple(min(v, 1.0) for v in values)

        beta = d.get("beta")
        mk = _need(d, "markov")
        trace = _need(d, "trace")
        chosen = str(d.get("chosen", "positional"))
        if chosen not in MEASURED_VARIANTS:
            raise _Bad(f"acceptance variant {chosen!r} is unknown")
        return cls(
            temperature=_num(d, "temperature"), prompts=int(_need(d, "prompts")),
            tokens_per_prompt=int(_need(d, "tokens_per_prompt")), alpha=_num(d, "alpha"),
            survival=probs("survival"), conditional_alpha=probs("conditional_alpha"),
            ranks=probs("ranks"),
            beta=None if not beta else (_num(beta, "a", positive=True), _num(beta, "b", positive=True)),
            markov=tuple(_num(mk, k) for k in ("alpha_easy", "alpha_hard", "p_easy_to_hard", "p_hard_to_easy")),
            trace_alpha=tuple(np.asarray(a, dtype=float) for a in _need(trace, "alpha")),
            greedy_yields=tuple(np.asarray(y, dtype=int) for y in _need(trace, "greedy_yields")),
            chosen=chosen, raw=dict(d))

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "chosen": self.chosen}

    @property
    def heads(self) -> Mapping[str, Any] | None:
        """The built-in target's prediction heads, measured beside the draft (`measure_head_acceptance`)."""
        h = self.raw.get("heads")
        return h if isinstance(h, Mapping) and h.get("conditional_alpha") else None

    @property
    def ngram(self) -> Mapping[str, Any] | None:
        """specsim's own n-gram lookup, measured beside the draft (`calibrate.ngram`)."""
        g = self.raw.get("ngram")
        return g if isinstance(g, Mapping) and g.get("conditional_alpha") is not None else None

    def ngram_model(self) -> Acceptance:
        """The lookup's acceptance: it proposes on the measured share of steps, and of a proposal the target
        accepts position by position as measured (on prompts that repeat themselves)."""
        g = self.ngram
        if g is None:
            raise SpecsimError("this profile measured no n-gram lookup (calibrate the built-in pair again)")
        cond = tuple(min(max(float(v), 0.0), 1.0) for v in g["conditional_alpha"])
        return Proposing(PositionalAcceptance(cond), min(max(float(g["proposal_rate"]), 0.0), 1.0))

    def ngram_host(self) -> HostCost | None:
        """The lookup's host time per step as fitted (`calibrate.ngram.measure_host`)."""
        h = (self.ngram or {}).get("host")
        if not isinstance(h, Mapping):
            return None
        try:
            return HostCost(float(h["fixed_s"]), float(h["per_sequence_s"]), float(h["per_context_token_s"]),
                            "measured: specsim's own n-gram lookup on the calibrated machine")
        except (KeyError, TypeError, ValueError, SpecsimError):
            raise _Bad("acceptance.ngram.host is not a host cost (fixed_s, per_sequence_s, per_context_token_s "
                       ">= 0)") from None

    def heads_model(self) -> Acceptance:
        """The heads' acceptance: P(accept i | the i - 1 before accepted) as measured, and their per-rank vector."""
        h = self.heads
        if h is None:
            raise SpecsimError("this profile measured no prediction heads (calibrate again: the built-in heads are "
                               "trained with python -m engine.train_heads)")
        cond = tuple(min(max(float(v), 0.0), 1.0) for v in h["conditional_alpha"])
        chain = PositionalAcceptance(cond)
        by_head = h.get("ranks_by_head")
        if by_head:
            # Head d's candidates rank as it measured, scaled so that some candidate at depth d is accepted, given
            # its path so far, as often as the chain's conditional acceptance says (positions hard for one head are
            # hard for the rest: the unconditional ranks would treat depths as independent).
            alphas = h["alpha_by_head"]
            ranks: tuple = tuple(tuple(min(float(r) * c / max(float(a), 1e-9), 1.0) for r in row)
                                 for row, c, a in zip(by_head, cond, alphas))
        else:  # older profiles (no ranks_by_head): one vector for every depth
            ranks = tuple(float(v) for v in h.get("ranks", ())) or (cond[0],)
        return WithRanks(chain, ranks, "measured-heads:positional")

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants this measurement supports (beta needs prompts that differ)."""
        return tuple(v for v in MEASURED_VARIANTS if v != "beta" or self.beta is not None)

    def model(self, variant: str | None = None) -> Acceptance:
        """An acceptance model from this measurement: ``positional`` uses the measured P(A >= i); ``iid`` the mean
        alpha; ``beta`` and ``markov`` the fitted models; ``trace`` replays the measured per-token acceptance;
        ``ranks`` the per-rank vector. None means the chosen variant. Every variant carries the per-rank vector,
        so trees work with any of them."""
        variant = variant or self.chosen
        if variant == "positional":
            chain: Acceptance = PositionalAcceptance(self.conditional_alpha)
        elif variant == "iid":
            chain = IIDAcceptance(self.alpha)
        elif variant == "beta":
            if self.beta is None:
                raise SpecsimError("the profile's acceptance has no beta fit (prompts too alike); use measured:markov")
            chain = BetaAcceptance(*self.beta)
        elif variant == "markov":
            chain = MarkovAcceptance(*self.markov)
        elif variant == "trace":
            if self.temperature == 0:
                chain = TraceAcceptance(self.greedy_yields, source="measured-greedy")
            else:
                chain = ProbabilityTraceAcceptance(self.trace_alpha)
        elif variant == "ranks":
            return RanksAcceptance(self.ranks)
        else:
            raise SpecsimError(f"unknown measured variant {variant!r}; use measured or measured:"
                               f"{'|'.join(MEASURED_VARIANTS)}")
        return WithRanks(chain, self.ranks, f"measured:{variant} (alpha {self.alpha:.3f})")

    @property
    def by_context(self) -> Mapping[str, Any] | None:
        """Acceptance against context on real text (`calibrate.measure_acceptance.measure_by_context`), if measured."""
        return self.raw.get("by_context")

    def context_table(self) -> str:
        """The ``@context:`` table of this measurement: the fitted decay every 32 tokens over the measured range,
        relative to its value at the context the chain measurement was made at (its prompts' length plus half the
        tokens generated)."""
        from simulator.context import ContextDecay

        bc = self.by_context
        if not bc:
            raise SpecsimError("this profile did not measure acceptance against context (a quick calibration skips "
                               "it): run specsim calibrate without --quick")
        decay = ContextDecay(**{k: float(bc["decay"][k]) for k in ("high", "low", "c50", "width")})
        reference = float(self.raw.get("prompt_tokens", 96)) + self.tokens_per_prompt / 2
        top = max(float(c) for c in bc["contexts"])
        return decay.table(reference, np.arange(0.0, top + 32.0, 32.0))


@dataclass(frozen=True)
class Trust:
    """Whether the profile's predictions can be relied on, and if not, why (one reason per failed check)."""

    trusted: bool = True
    reasons: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trust:
        return cls(bool(_need(d, "trusted")), tuple(str(r) for r in d.get("reasons", ())))

    def to_dict(self) -> dict[str, Any]:
        return {"trusted": self.trusted, "reasons": list(self.reasons)}


def heldout_unit(heldout: HeldoutErrors) -> str:
    """What a held-out point is: a pass (a calibration's), or a benchmark run's metric (a serving benchmark's fit,
    each plain fit run predicted by the fit to the others: its points name the run)."""
    return "run" if any("run" in q for q in heldout.points) else "pass"


def worst_heldout(heldout: HeldoutErrors) -> list[str]:
    """The reason a held-out worst case contradicts "trusted" (`MAX_HELDOUT_WORST`), naming the pass; else none."""
    if not heldout.n or heldout.max_abs_err <= MAX_HELDOUT_WORST:
        return []
    worst = max(heldout.points, key=lambda q: abs(float(q.get("rel_error", 0.0))), default=None)
    unit = heldout_unit(heldout)
    if not worst or "rel_error" not in worst:
        where = ""
    elif unit == "run":
        where = f" ({worst.get('run')}, {worst.get('metric')}: {100 * float(worst['rel_error']):+.0f} %)"
    else:
        where = (f" ({worst.get('model')} at batch {worst.get('batch')}, {worst.get('new_tokens')} new tokens, "
                 f"context {worst.get('context')}: {100 * float(worst['rel_error']):+.0f} %)")
    return [f"held-out {unit} error max {100 * heldout.max_abs_err:.1f} % > {100 * MAX_HELDOUT_WORST:.0f} %{where}"]


def stored_trust(d: Mapping[str, Any], heldout: HeldoutErrors) -> Trust:
    """A profile's trust as written, less "trusted" where its own held-out worst case contradicts it (a profile
    written before that check)."""
    trust = Trust.from_dict(d)
    late = [r for r in worst_heldout(heldout) if r not in trust.reasons]
    return Trust(False, trust.reasons + tuple(late)) if late else trust


def assess_trust(heldout: HeldoutErrors, passes: Sequence[PassRecord],
                 uncertainties: Sequence[float] | None = None) -> Trust:
    """Trusted when the fit predicts held-out passes (median |error| <= 7 %, p90 <= 20 %, none off by more than
    25 %) and the measured medians are precise (the median point's median known to 5 %, `PassRecord.uncertainty`,
    or the given `uncertainties`: a serving benchmark's steps'); otherwise each failed check is a reason. The last
    check reads medians, not single passes' spread, which a shared host's noise widens while the medians and the
    held-out error stay close. A held-out point is a pass, or a benchmark run's metric (`heldout_unit`)."""
    reasons = []
    unit = heldout_unit(heldout)
    if heldout.n and not heldout.median_abs_err <= MAX_HELDOUT_MEDIAN:
        reasons.append(f"held-out {unit} error median {100 * heldout.median_abs_err:.1f} % > "
                       f"{100 * MAX_HELDOUT_MEDIAN:.0f} %")
    if heldout.n and not heldout.p90_abs_err <= MAX_HELDOUT_P90:
        reasons.append(f"held-out {unit} error p90 {100 * heldout.p90_abs_err:.1f} % > {100 * MAX_HELDOUT_P90:.0f} %")
    reasons += worst_heldout(heldout)
    if uncertainties:
        uncertainty = float(np.median(uncertainties))
        if uncertainty > MAX_MEDIAN_UNCERTAINTY:
            reasons.append(f"the benchmark's steps are known to {100 * uncertainty:.1f} % only (> "
                           f"{100 * MAX_MEDIAN_UNCERTAINTY:.0f} %: the standard error of the runs' median ITL)")
        return Trust(not reasons, tuple(reasons))
    timed = [p for p in passes if p.median_s]
    uncertainty = float(np.median([p.uncertainty for p in timed])) if timed else 0.0
    if uncertainty > MAX_MEDIAN_UNCERTAINTY:
        spread = float(np.median([p.spread for p in timed]))
        reasons.append(f"measurements repeat poorly (medians known to {100 * uncertainty:.1f} % > "
                       f"{100 * MAX_MEDIAN_UNCERTAINTY:.0f} %, single passes spreading {100 * spread:.0f} %; a busy "
                       "machine? try --busy)")
    return Trust(not reasons, tuple(reasons))


def fitted_acceptance_record(d: Any) -> dict[str, str]:
    """acceptance_fitted: {"spec": an acceptance spec (iid:0.69), "from": where it came from}; the spec is checked."""
    if not d:
        return {}
    if not isinstance(d, Mapping) or not isinstance(d.get("spec"), str):
        raise _Bad("acceptance_fitted has no spec")
    from scenarios.acceptance_specs import acceptance_from_spec

    try:
        acceptance_from_spec(d["spec"])
    except SpecsimError as e:
        raise _Bad(f"acceptance_fitted: {e}") from None
    return {"spec": d["spec"], "from": str(d.get("from", ""))}


def spec_from_dict(d: Mapping[str, Any]) -> ModelSpec:
    try:
        return ModelSpec(**d)
    except (TypeError, ValueError) as e:
        raise _Bad(f"model shape: {e}") from None


def spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    """The shape's fields; those a dense Llama-style decoder leaves at their defaults (experts, MLA, windows) are
    left out, so a dense profile reads as before."""
    from dataclasses import asdict, fields

    base = {"name", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "tied_embeddings", "dtype",
            "head_dim", "source", "tp"}
    defaults = {f.name: f.default for f in fields(ModelSpec)}
    return {k: v for k, v in asdict(spec).items() if k in base or v != defaults[k]}


@dataclass(frozen=True)
class Profile:
    """Everything one calibration measured and fitted. `path` is where it was read from (not written)."""

    command: str
    created: str
    device: DeviceInfo
    dtype: str
    target: ModelSpec
    draft: ModelSpec
    micro: Microbenchmarks
    passes: tuple[PassRecord, ...]
    fit: Fit
    acceptance: MeasuredAcceptance | None = None
    probes: tuple[ModelSpec, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)  # the calibrate options, as given
    engine_mode: str = "eager"  # how the timed passes ran: "eager" or "graph" (CUDA graphs)
    origin: str = "specsim"  # who timed the passes: specsim's own engine, or an engine's benchmark (calibrate --from)
    quick: bool = False
    trust: Trust = field(default_factory=Trust)
    specsim_version: str = ""
    device_state: Mapping[str, Any] = field(default_factory=dict)
    host: Mapping[str, Any] = field(default_factory=dict)
    # `calibrate.speculation_tax.measure_tax`, if measured (or an engine preset's, carried by a benchmark's fit)
    speculation_tax: Mapping[str, Any] = field(default_factory=dict)
    # A serving benchmark's fitted acceptance: {"spec": "iid:0.69", "from": where it came from} (counters, TPOT)
    fitted_acceptance: Mapping[str, str] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False)

    # -- reading and writing -------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Any, source: str = "profile") -> Profile:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise SpecsimError(f"{source} is not a specsim profile; give one that specsim calibrate wrote")
        version = d.get("schema_version")
        if not isinstance(version, int):
            raise SpecsimError(f"profile {source} has no schema version; run specsim calibrate again")
        if version > SCHEMA_VERSION:
            raise SpecsimError(f"profile {source} has schema {version}, newer than this specsim reads "
                               f"({SCHEMA_VERSION}); upgrade specsim or calibrate again")
        for key in ("device", "fit", "models", "passes", "microbenchmarks"):
            if key not in d:
                raise SpecsimError(f"profile {source} is incomplete (no {key!r}); run specsim calibrate again")
        try:
            passes = tuple(PassRecord.from_dict(p) for p in d["passes"])
            fit = Fit.from_dict(d["fit"])
            models = d["models"]
            mode = str(d.get("engine_mode", "eager"))
            if mode not in ENGINE_MODES:
                raise _Bad(f"engine mode {mode!r} is not one of {', '.join(ENGINE_MODES)}")
            profile = cls(
                command=str(d.get("command", "specsim calibrate")), created=str(_need(d, "created")),
                device=DeviceInfo.from_dict(d["device"]), dtype=str(d.get("dtype", "bf16")),
                target=spec_from_dict(_need(models, "target")), draft=spec_from_dict(_need(models, "draft")),
                micro=Microbenchmarks.from_dict(d["microbenchmarks"]), passes=passes, fit=fit,
                acceptance=MeasuredAcceptance.from_dict(d["acceptance"]) if d.get("acceptance") else None,
                probes=tuple(spec_from_dict(p) for p in models.get("probes", ())),
                options=dict(d.get("options", {})), engine_mode=mode, origin=str(d.get("origin", "specsim")),
                quick=bool(d.get("quick", False)),
                trust=stored_trust(d["trust"], fit.heldout) if "trust" in d else assess_trust(fit.heldout, passes),
                specsim_version=str(d.get("specsim_version", "")), device_state=dict(d.get("device_state", {})),
                host=dict(d.get("host", {})), speculation_tax=speculation_tax_record(d.get("speculation_tax")),
                fitted_acceptance=fitted_acceptance_record(d.get("acceptance_fitted")))
        except (_Bad, KeyError, TypeError, ValueError, AttributeError) as e:
            detail = f"no {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
            raise SpecsimError(f"profile {source} is malformed ({detail}); run specsim calibrate again") from None
        if not profile.fit.bench and not any(p.median_s for p in passes if p.model == profile.target.name):
            raise SpecsimError(f"profile {source} holds no timed pass of its target {profile.target.name!r}")
        return profile

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "specsim_version": self.specsim_version,
            "schema_version": (SPEC_DRIFT_VERSION if self.fit.spec_drift else
                               BENCH_FIELDS_VERSION if self.fit.bench or self.fitted_acceptance else 2),
            "command": self.command, "options": dict(self.options), "created": self.created,
            "engine_mode": self.engine_mode, "origin": self.origin, "device": self.device.to_dict(),
            "device_state": dict(self.device_state), "host": dict(self.host), "dtype": self.dtype,
            "quick": self.quick,
            "models": {"target": spec_to_dict(self.target), "draft": spec_to_dict(self.draft),
                       "probes": [spec_to_dict(p) for p in self.probes]},
            "microbenchmarks": self.micro.to_dict(), "passes": [p.to_dict() for p in self.passes],
            "fit": self.fit.to_dict(), "trust": self.trust.to_dict(),
            "acceptance": self.acceptance.to_dict() if self.acceptance else None,
            "speculation_tax": dict(self.speculation_tax),
            **({"acceptance_fitted": dict(self.fitted_acceptance)} if self.fitted_acceptance else {}),
        }

    # -- what it predicts ----------------------------------------------------------------------------------------
    @cached_property
    def hardware(self) -> HardwareSpec:
        """The device as measured, with the engine's measured tax on speculation where the calibration measured
        it: each cost where every repeat measured more than the same work differs by (`calibrate.speculation_tax`;
        a profile from before that was measured: where positive)."""
        hw = self.micro.hardware(self.device.name, self.device.memory_bytes, f"calibrated {self.created}")
        by = self.speculation_tax.get("by_batch") or {}
        if not by:
            return hw
        batches = sorted(by, key=int)
        tax = SpeculationTax(tuple(int(b) for b in batches),
                             tuple(max(float(by[b].get("off_priced", by[b]["off_fraction"])), 0.0) for b in batches),
                             max(float(np.median([by[b].get("switch_priced", by[b]["switch_fraction"])
                                                  for b in batches])), 0.0),
                             str(self.speculation_tax.get("source") or
                                 f"measured by specsim calibrate on its own engine ({self.created[:10]})"))
        return replace(hw, speculation_tax=tax)

    def device_preset(self, engine: str) -> HardwareSpec:
        """This device as its micro-benchmarks measured it, with a serving engine's costs around the passes instead
        of the calibrated engine's (`predict --profile FILE --engine vllm`): a profile of specsim's own engine prices
        that engine's passes (on the first H200 run its unfused layers cost 95 us each above the weight reads, and
        its 1B draft pass 2.6 ms), which is not what vLLM runs on the same device.

        Kept from the calibration: the read bandwidth, each dtype's large-GEMM FLOP/s as the peaks, the skinny
        GEMMs' bandwidth by rows as the linear layers' curve (what the weights stream at, engine-independent), the
        device's memory. From the engine preset (engines.toml): per-step, per-pass and per-layer costs, its tax on
        speculation. From the device's hardware preset where its name matches one (else its defaults): the share of
        the bandwidth attention reaches, how weight streaming and compute combine, its measured kernel kinds (the
        fused-MoE kernel's efficiencies then of the measured read bandwidth, not the datasheet's) and its
        interconnect."""
        from scenarios import datasheet_for, load_engine, load_hardware, load_speculation_tax

        if "not measured" in str(self.micro.raw.get("source", "")):
            raise SpecsimError(f"profile {self.path} holds {self.origin}'s step times and measured no device, so "
                               f"--engine {engine} has no device to price: drop --engine (the profile prices that "
                               f"engine as measured), or give --hardware NAME --engine {engine}")
        measured = self.micro.hardware(self.device.name, self.device.memory_bytes,
                                       f"micro-benchmarks of {self.path or 'a profile'} ({self.created[:10]})")
        like = datasheet_for(self.device.name)
        preset = load_hardware(like.name, engine) if like else None
        dtype = self.target.dtype if self.target.dtype in self.micro.raw.get("skinny", {}) else "bf16"
        skinny = sorted((int(r["rows"]), float(r["bytes_per_s"]))
                        for r in self.micro.raw.get("skinny", {}).get(dtype, ()) if r.get("bytes_per_s"))
        curve = tuple((rows, bps / self.micro.read_bytes_per_s, 1.0) for rows, bps in skinny)
        _, passes, engine_source = load_engine(engine)
        kinds = {"kernels": preset.kernels, "interconnect": preset.interconnect} if preset else {}
        return replace(measured, **kinds, overheads=preset.overheads if preset else passes,
                       speculation_tax=load_speculation_tax(engine),
                       attention_bw_efficiency=(preset or measured).attention_bw_efficiency,
                       ridge_p=preset.ridge_p if preset else float("inf"), rate_curve=curve,
                       rates_source=f"measured: skinny {dtype} GEMMs at {', '.join(str(r) for r, _ in skinny)} rows; "
                                    f"attention and the ridge: preset {preset.name if preset else '(defaults)'}; "
                                    f"engine {engine}: {engine_source}")

    def cost_model(self, with_measurements: bool = True) -> CostModel:
        """The calibrated cost model: fitted rates and overheads, plus every measured pass (which wins where it
        exists and anchors the shapes around it)."""
        from simulator.rate_fit import monotone_times

        measured = monotone_times({p.key: p.median_s for p in self.passes if p.median_s}) if with_measurements else {}
        ridge = self.fit.linear_ridge_p or (1.0 if self.fit.linear_additive else float("inf"))
        return CostModel(hardware=self.hardware, linear_rates=self.fit.linear_rates,
                         attention_rates=self.fit.attention_rates, overheads=self.fit.overheads, measured=measured,
                         label="calibrated",
                         measured_models=(self.target, self.draft), attention_overlap=self.fit.attention_overlap,
                         linear_ridge_p=ridge, expert_sharing=self.expert_sharing, drift=dict(self.fit.drift),
                         prefill_scale=self.fit.prefill_scale, reach=self.fit.reach, kernels=self.fit.kernels,
                         routing_skew=self.fit.routing_skew, routing_power_law=self.fit.routing_power_law,
                         spec_drift=tuple(self.fit.spec_drift))

    @property
    def expert_sharing(self) -> float:
        """How the calibrated MoE target's tokens shared experts (`engine.moe.Routing`; the default for a dense
        target, where it prices nothing)."""
        v = self.fit.extra.get("expert_sharing", DEFAULT_EXPERT_SHARING)
        return float(v) if isinstance(v, (int, float)) and 0.0 <= v <= 1.0 else DEFAULT_EXPERT_SHARING

    def datasheet_cost(self) -> CostModel:
        """The pure roofline baseline: micro-benchmarked peaks, no overheads, no measurements."""
        return CostModel.from_hardware(self.hardware, self.target.dtype, datasheet=True)

    @property
    def timed(self) -> tuple[PassRecord, ...]:
        return tuple(p for p in self.passes if p.median_s)

    @property
    def not_measured(self) -> tuple[str, ...]:
        """What a calibration of specsim's own engine measures in full but this one did not (a quick one)."""
        if self.origin != "specsim" or self.acceptance is None:
            return ()
        missing = []
        if not self.speculation_tax:
            missing.append("the engine's tax on speculation (a k = 0 step, switching k)")
        if not self.acceptance.by_context:
            missing.append("acceptance against context")
        return tuple(missing)

    def elsewhere_note(self, path: Path | str | None) -> str:
        """What a reader of this profile on another machine is told: where it was measured, or, a serving
        benchmark's fit on a preset (no device measured), which deployment it was fitted to."""
        bench = self.origin[len("bench:"):] if self.origin.startswith("bench:") else None
        if bench and "not measured" in str(self.micro.raw.get("source", "")):
            return (f"profile {path} was fitted to a serving benchmark ({bench}) of {self.target.name} on "
                    f"{self.device.name}, not measured on a device: its predictions describe that deployment")
        fitted = f", its step factors fitted to a serving benchmark ({bench})" if bench else ""
        return (f"profile {path} was measured on another machine ({self.device.name}, {self.device.kind}){fitted}: "
                "its predictions describe that device")

    def other_models_note(self, target: str, draft: str) -> str:
        """What pricing `target` drafted by `draft` (not both the profile's own) takes from this profile."""
        if not self.fit.drift:
            return (f"pricing {target} drafted by {draft} from the fitted device rates of profile {self.path} (its "
                    f"measured passes are of {self.target.name} and {self.draft.name})")
        bare = [m for m in dict.fromkeys((target, draft)) if m not in self.fit.drift]
        return (f"pricing {target} drafted by {draft} from profile {self.path}'s formula; "
                + (f"{' and '.join(bare)} take{'s' if len(bare) == 1 else ''} no step factor " if bare else "")
                + f"(the serving benchmark it was fitted to measured {' and '.join(self.fit.drift)})")

    def describe(self) -> str:
        """One phrase: the device, when, the engine it describes, the fit's held-out error, trust."""
        h = self.fit.heldout
        err = f"held-out {heldout_unit(h)} error median {100 * h.median_abs_err:.1f} %" if h.n else "no held-out error"
        engine = {"graph": "CUDA-graph engine", "eager": "eager engine"}[self.engine_mode]
        origin = "" if self.origin == "specsim" else f", step times from {self.origin}"
        untrusted = "" if self.trust.trusted else ", UNTRUSTED"
        return f"{self.device.name} (calibrated {self.created[:10]}, {engine}{origin}, {err}{untrusted})"


def save_profile(profile: Profile, out: str | Path | None) -> Path:
    """Write atomically to `out`, or to the cache folder as profile-<device>-<time>.json."""
    if out is None:
        out = default_profile_path(profile.device, profile.created)
    return atomic_write_text(out, json.dumps(profile.to_dict(), indent=1, allow_nan=False))


def default_profile_path(device: DeviceInfo, created: str) -> Path:
    stamp = created.replace(":", "").replace("-", "")[:15]
    return cache_dir() / f"profile-{device.key}-{stamp}.json"


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile; one-line errors for anything that cannot be trusted to mean what it says."""
    path = Path(path)
    text = read_text(path, "profile")
    try:
        data = parse_json(text, f"profile {path}")
    except SpecsimError:
        raise SpecsimError(f"profile {path} is corrupt (not JSON); run specsim calibrate again") from None
    return replace(Profile.from_dict(data, str(path)), path=path)


def check_device(profile: Profile, here: Mapping[str, Any]) -> None:
    """Refuse to run real passes against a profile measured on another device."""
    if not profile.device.same_as(here):
        raise SpecsimError(f"profile {profile.path} was measured on {profile.device.name!r}, not this "
                           f"{here.get('kind')} ({here.get('name')!r}); calibrate here, or run this on that device")


def latest_profile(identities: Sequence[Mapping[str, Any]]) -> Path | None:
    """The newest profile in the cache folder measured on one of these devices, trusted ones first: an untrusted
    profile is the latest only if no trusted one exists."""
    folder = cache_dir()
    if not folder.is_dir():
        return None
    best: tuple[bool, float, Path] | None = None
    for f in folder.glob("profile-*.json"):
        try:
            p = load_profile(f)
        except SpecsimError:
            continue
        if any(p.device.same_as(i) for i in identities):
            key = (p.trust.trusted, f.stat().st_mtime, f)
            if best is None or key > best:
                best = key
    return best[2] if best else None
