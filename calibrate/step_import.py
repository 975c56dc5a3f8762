"""`specsim calibrate --from SOURCE`: the cost model fitted to step times a real engine measured, instead of passes
timed here.

The sources and their readers are `calibrate.step_files` (csv, vllm, sglang, llama-bench); this module fits
what they read.

The engine's own time around its passes (scheduling, input building, sampling) is inside every step: the fixed cost
the fit finds is charged once per step, not to every pass, so a draft pass costs what its own layers cost
(`split_step_costs`); the profile says what was assumed for what the steps never showed (draft passes, the
accept/reject rule) and which fitted rates were held at the datasheet's ceilings. The fit is
`simulator.rate_fit.fit_cost_model` on every point; its error is each point predicted by the fit to the others
(cross-validation: an engine's sample is small). No fitted rate passes the datasheet's bandwidth or FLOP/s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.step_files import (  # noqa: F401 - the readers, re-exported for their callers
    READERS,
    StepTime,
    read_csv,
    read_llama_bench,
    read_sglang,
    read_source,
    read_vllm,
)
from scenarios import is_builtin_pair, load_engine, load_hardware, load_model
from scenarios.files import check_output
from scenarios.profile import (
    DeviceInfo,
    Fit,
    HeldoutErrors,
    Microbenchmarks,
    PassRecord,
    Profile,
    assess_trust,
    save_profile,
)
from simulator import SpecsimError, __version__
from simulator.cost import CostModel
from simulator.rate_fit import FitResult, PassPoint, errors, fit_cost_model
from simulator.specs import EngineOverheads, HardwareSpec, ModelSpec, Overheads, PerStep

ENGINE_PRESET = {"vllm": "vllm"}  # the engine preset (scenarios/engines.toml) describing a source's engine
LOO_UP_TO = 24  # leave-one-out cross-validation up to this many step times, k-fold beyond
FOLDS = 5

def to_points(steps: Sequence[StepTime], target: ModelSpec, draft: ModelSpec) -> list[PassPoint]:
    """Every step as a pass of the model it ran (draft passes: the draft; everything else: the target); speculative
    steps are not one pass (`draft_passes_of`)."""
    return [PassPoint(draft.name if s.phase == "draft" else target.name, s.batch, s.new_tokens, s.context, s.time_s)
            for s in steps if s.phase != "speculative"]


def draft_passes_of(spec_steps: Sequence[StepTime], plain_fit: CostModel, target: ModelSpec, draft: ModelSpec,
                    accept_s: float) -> list[PassPoint]:
    """The draft passes speculative steps give: a step of draft length k is k draft passes, one verify pass of k + 1
    tokens and the accept/reject rule, so one draft pass is the step less the verify pass the plain steps' fit
    predicts (the engine's per-step cost inside it) and the rule's cost, over k. Refused where that leaves nothing:
    the mean acceptance length or the runs' labels are wrong."""
    out = []
    for s in spec_steps:
        k = s.new_tokens - 1
        verify = plain_fit.pass_time_s(target, s.batch, s.new_tokens, s.context)
        one = (s.time_s - verify - accept_s) / k
        if one <= 0:
            raise SpecsimError(f"{s.where}: a speculative step of {s.time_s * 1e3:.3g} ms is no longer than its verify "
                               f"pass alone ({verify * 1e3:.3g} ms, from the plain runs): check its "
                               "mean_acceptance_length and that the plain and speculative runs share one engine")
        out.append(PassPoint(draft.name, s.batch, 1, s.context, one))
    return out


# Step times no engine takes: a step over an hour (a unit slip: step_ms is milliseconds), or more than a second of
# engine overhead beyond this many times the datasheet roofline of its pass (a log of something else); on a GPU
# preset, a step faster than half what its datasheet allows (seconds written as milliseconds).
MAX_STEP_S = 3600.0
MAX_OVER_ROOFLINE = 1000.0
MAX_OVERHEAD_S = 1.0
MIN_OF_ROOFLINE = 0.5


def check_plausible(steps: Sequence[StepTime], hw: HardwareSpec, target: ModelSpec, draft: ModelSpec,
                    dtype: str, lower: bool = True) -> None:
    """Refuse, naming the step, a time no engine takes on this device (`MAX_STEP_S`, `MAX_OVER_ROOFLINE`, and with
    `lower` - a datasheet, not a CPU's quick micro-benchmarks - `MIN_OF_ROOFLINE`)."""
    roof = CostModel.from_hardware(hw, dtype, datasheet=True)
    for s in steps:
        model = draft if s.phase == "draft" else target
        floor = roof.pass_time_s(model, s.batch, s.new_tokens, s.context) if s.phase != "speculative" else 0.0
        if s.time_s > MAX_STEP_S or (floor > 0 and s.time_s > MAX_OVER_ROOFLINE * floor + MAX_OVERHEAD_S):
            raise SpecsimError(f"{s.where}: a {s.phase} step of {s.time_s:,.4g} s (batch {s.batch}, {s.new_tokens} "
                               f"tokens) is {s.time_s / floor:,.0f}x what {hw.name}'s datasheet allows for it; no "
                               "engine takes that: check the units (step_ms is milliseconds) or leave the row out"
                               if floor > 0 else f"{s.where}: a step of {s.time_s:,.4g} s: check the units")
        if lower and s.time_s < MIN_OF_ROOFLINE * floor:
            raise SpecsimError(f"{s.where}: a {s.phase} step of {s.time_s * 1e3:,.4g} ms (batch {s.batch}, "
                               f"{s.new_tokens} tokens) is faster than {hw.name}'s datasheet allows "
                               f"({floor * 1e3:,.4g} ms at its peak bandwidth and FLOP/s): check the units (step_ms is "
                               "milliseconds), the model (--target, --draft) and the GPU (--hardware)")


def _ceilings(hw: HardwareSpec, dtype: str) -> dict[str, Any]:
    """The preset's datasheet ceilings in the shape of micro-benchmarks (nothing was measured here)."""
    bw = hw.mem_bw_bytes_per_s
    return {"source": f"datasheet of {hw.name} ({hw.source}); not measured: the profile was imported",
            "bandwidth": {"read_bytes_per_s": bw, "copy_bytes_per_s": bw},
            "matmul": {dtype: {"flops_per_s": hw.peak_flops(dtype)}}}


def this_cpu(source: str) -> tuple[HardwareSpec, dict[str, Any], dict[str, Any]]:
    """This machine's CPU as its quick micro-benchmarks see it (a CPU has no datasheet here): an engine's step
    times measured on it are fitted under its measured bandwidth and FLOP/s."""
    import torch

    from calibrate.microbench import run_microbenchmarks
    from calibrate.timing import Timer
    from engine.device import device_identity

    identity = device_identity(torch.device("cpu"))
    micro = run_microbenchmarks(Timer(torch.device("cpu")), True, lambda: None)
    micro["source"] = "micro-benchmarks of this CPU (quick), run by the import"
    hw = Microbenchmarks.from_dict(micro).hardware(identity["name"], None)
    return hw, micro, {**identity, "imported_from": source}


def import_profile(source: str, hardware: str, target_name: str, draft_name: str, dtype: str, seed: int,
                   command: str, options: Mapping[str, Any]) -> Profile:
    """The profile fitted to an engine's step times (see the module docstring)."""
    kind, steps = read_source(source)
    if hardware.lower() == "cpu":
        hw, micro, device = this_cpu(source)
    else:
        hw = load_hardware(hardware)
        micro = _ceilings(hw, dtype)
        device = {"kind": "cuda", "name": hw.name, "memory_bytes": hw.mem_capacity_bytes, "imported_from": source}
    target, draft = load_model(target_name, dtype), load_model(draft_name, dtype)
    if target.name == draft.name:
        raise SpecsimError(f"--target and --draft are one model ({target.name}): give the draft the engine ran")
    specs = {target.name: target, draft.name: draft}
    check_plausible(steps, hw, target, draft, dtype, lower=hardware.lower() != "cpu")
    points = to_points(steps, target, draft)
    spec_steps = [s for s in steps if s.phase == "speculative"]
    if len(points) < 6:
        raise SpecsimError(f"{source}: {len(points)} step times; the fit needs at least 6 (several batch sizes)")

    # A target-only sample cannot tell a slower read of the weights from a fixed cost of every step: the weights are
    # read at best at the bandwidth real engines achieve on this GPU (the preset's, fitted to such engines).
    achieved = hw.mem_bw_bytes_per_s * hw.bw_efficiency
    drafts_measured = any(s.phase == "draft" for s in steps)

    # A CPU has no datasheet here, and a quick read benchmark on a shared machine can fall below what the engine
    # reaches: its measured rates seed the fit but bound nothing (the sample's steps alone decide).
    cpu = hardware.lower() == "cpu"

    def fitted(train: Sequence[PassPoint]) -> FitResult:
        return fit_cost_model(train, specs, hw, hw.peak_flops(dtype), hw.mem_bw_bytes_per_s, dtype,
                              floor_s_per_byte=0.0 if cpu else 1.0 / achieved, per_row_term=drafts_measured,
                              compute_term=True, ceiling_bw_bytes_per_s=None if cpu else hw.mem_bw_bytes_per_s,
                              ceiling_flops_per_s=None if cpu else hw.peak_flops(dtype))

    if spec_steps:  # their draft passes, from the plain steps' fit; then everything fitted together
        accept = load_engine(ENGINE_PRESET.get(kind, "vllm"))[0].chain_accept.fixed_s
        points += draft_passes_of(spec_steps, fitted(points).cost, target, draft, accept)
        drafts_measured = True
    result = fitted(points)
    cost = result.cost
    heldout = cross_validated(points, lambda train: fitted(train).cost, specs, seed)
    datasheet = CostModel.from_hardware(hw, dtype, datasheet=True)
    overheads, assumed, step_s = split_step_costs(cost.overheads, kind, drafts_measured, draft)
    if spec_steps:
        assumed.append(f"{draft.name}'s passes from {len(spec_steps)} speculative steps: each step (the per-token time "
                       "times its run's mean_acceptance_length) less the verify pass the plain runs' fit predicts and "
                       "the accept/reject rule, over its k; the runs' draft is taken to be --draft")
    assumed.insert(0, "no bound on the fitted rates: this CPU's measured read bandwidth "
                      f"({achieved / 1e9:,.0f} GB/s) seeds the fit only" if cpu else
                   f"weights read at {achieved / 1e9:,.0f} GB/s at best, what engines achieve on this GPU "
                   f"({100 * hw.bw_efficiency:.0f} % of its datasheet; scenarios/hardware.toml)")
    # What the passes took: the steps' times less the engine's own cost of a step (charged once per step).
    net = [p.time_s - (0.0 if p.model == draft.name else step_s) for p in points]
    if min(net) <= 0:
        raise SpecsimError(f"{source}: the fitted per-step cost ({step_s * 1e3:.2f} ms) exceeds a measured step; the "
                           "step times do not fit one engine (mixed settings or units?)")
    passes = tuple(PassRecord(p.model, p.batch, p.new_tokens, p.context, t, 0.0) for p, t in zip(points, net))
    held = HeldoutErrors.from_dict(heldout)
    method = f"{'leave-one-out' if len(points) <= LOO_UP_TO else f'{FOLDS}-fold'} cross-validation"
    fit = Fit(cost.linear_rates, cost.attention_rates, overheads, held,
              HeldoutErrors.from_dict(errors(datasheet, points, specs)), len(points), cost.attention_overlap, (),
              {"method": "non-negative least squares on relative error, to an engine's step times; see "
                         "calibrate/step_import.py",
               "heldout_method": f"{method} (each point predicted by the fit to the others)",
               "assumed": list(assumed), "bounds": list(result.bounds)},
              linear_additive=True)
    return Profile(
        command=command, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        device=DeviceInfo.from_dict(device),
        dtype=dtype, target=target, draft=draft, micro=Microbenchmarks.from_dict(micro),
        passes=passes, fit=fit, options=dict(options), engine_mode="graph",
        origin=source if ":" in source else f"{kind}:{source}", quick=False, trust=assess_trust(held, passes),
        specsim_version=__version__)


def split_step_costs(fitted: Overheads, kind: str, drafts_measured: bool, draft: ModelSpec
                     ) -> tuple[Overheads, list[str], float]:
    """Where the fitted fixed cost is paid, and what the import assumed: (overheads, assumptions, the cost of a
    step taken out of every measured target step).

    A step of an engine is its passes plus the engine's own work (scheduling, input building, sampling), paid once
    per step. Target-only step times cannot tell that work from a fixed cost of the pass, so it is charged once per
    step (`EngineOverheads.plain` and `.verify`), never to each draft pass: a draft pass costs its own layers at the
    fitted rates. Where draft passes were measured too, their fixed cost is seen and stays per pass. The
    accept/reject rule's cost is never in a plain step: the engine preset of the source's engine gives it, if
    there is one."""
    assumed: list[str] = []
    engine = EngineOverheads()
    if drafts_measured:
        overheads = replace(fitted, engine=engine)
        step_s = 0.0
    else:
        step_s = fitted.pass_s
        engine = EngineOverheads(plain=PerStep(step_s), verify=PerStep(step_s))
        overheads = replace(fitted, pass_s=0.0, engine=engine)
        assumed.append(f"the fixed {step_s * 1e6:,.0f} us every measured step paid is the engine's own per-step "
                       "work, charged once per step; no draft pass was measured, so a draft pass costs its layers at "
                       f"the target's fitted rates and per-layer cost ({draft.name}: {draft.n_layers} layers), no "
                       "fixed cost of its own")
    preset = ENGINE_PRESET.get(kind)
    if preset is not None:
        engine_preset, _, _ = load_engine(preset)
        accept = engine_preset.chain_accept
        overheads = replace(overheads, engine=replace(overheads.engine, chain_accept=accept,
                                                      tree_accept=engine_preset.tree_accept))
        assumed.append(f"the accept/reject rule: {accept.fixed_s * 1e6:,.0f} us per speculative step and "
                       f"{accept.per_sequence_s * 1e6:,.1f} us per request, the {preset} engine preset's "
                       "(scenarios/engines.toml; not in the measured steps)")
    else:
        assumed.append("the accept/reject rule: nothing (not in the measured steps, no engine preset for "
                       f"{kind!r} sources)")
    return overheads, assumed, step_s


def cross_validated(points: Sequence[PassPoint], fit_on: Any, specs: Mapping[str, ModelSpec], seed: int
                    ) -> dict[str, Any]:
    """Each point predicted by the fit to the others: leave one out for up to LOO_UP_TO points, else FOLDS random
    folds. An engine's sample is small, and a fixed hold-out would leave whole batch sizes unseen or too few points
    to judge; `errors`' summary of all the predictions."""
    n = len(points)
    order = np.random.default_rng(seed).permutation(n)
    folds = [order[i::n if n <= LOO_UP_TO else FOLDS] for i in range(n if n <= LOO_UP_TO else FOLDS)]
    rows: list[dict[str, Any]] = []
    for held in folds:
        test = [points[i] for i in held]
        rows += errors(fit_on([points[i] for i in range(n) if i not in set(held.tolist())]), test, specs)["points"]
    a = np.abs([r["rel_error"] for r in rows])
    return {"n": len(rows), "median_abs_err": float(np.median(a)), "p90_abs_err": float(np.percentile(a, 90)),
            "max_abs_err": float(a.max()), "points": rows}


def calibrate_from(source: str, hardware: str | None, target: str, draft: str, dtype: str, seed: int,
                   out: Path | None, command: str, options: Mapping[str, Any]) -> tuple[Profile, Path]:
    """`specsim calibrate --from`: the output checked first, the profile fitted and written."""
    if source.lower().startswith("aiconfigurator:"):  # measured kernels, not step times: calibrate/aiconfigurator*
        from calibrate.aiconfigurator_profile import aiconfigurator_profile

        if is_builtin_pair(target) or draft == "specsim-draft":
            raise SpecsimError("--from aiconfigurator: needs --target and --draft: the models to price, e.g. --target "
                               "llama-3.1-8b --draft llama-3.2-1b")
        if out is not None:
            check_output(out, "profile", (".json",))
        profile = aiconfigurator_profile(source, target, draft, dtype, int(options.get("tp") or 1), command, options)
        return profile, save_profile(profile, out)
    if not hardware:
        raise SpecsimError("--from needs --hardware PRESET: the GPU the engine ran on (its datasheet ceilings), or "
                           "--hardware cpu: this machine's CPU, measured")
    if is_builtin_pair(target):
        raise SpecsimError("--from needs --target (and --draft): the models the engine served, e.g. --target "
                           "llama-3.1-8b --draft llama-3.2-1b, or model folders (as specsim export --out pair/ "
                           "writes them: --target pair/target --draft pair/draft)")
    if out is not None:
        check_output(out, "profile", (".json",))
    profile = import_profile(source, hardware, target, draft, dtype, seed, command, options)
    return profile, save_profile(profile, out)
