"""A serving benchmark's fit (`calibrate.bench_import.BenchFit`) written as a specsim profile, so that every command
that takes ``--profile`` (predict, simulate, policy, report) prices the deployment as its own benchmark measured it.

How the fit maps onto the profile's pass costs:

- **The base's formula, whole.** On a hardware preset: its rates (bandwidth and FLOP/s by matmul rows, attention's),
  its overheads (the engine preset's per-step costs among them), how memory and compute combine (``ridge_p``), its
  measured kernel kinds (``fit.kernels``: the fused-MoE kernel, block-scaled fp8 GEMM floors, MLA's module, as
  ``load_hardware`` gave them for the engine), the MoE routing the fit priced (``fit.routing``, and the experts'
  sharing) and its engine's tax on speculation, copied as numbers (the profile does not read the preset again; the
  datasheet's bandwidth and FLOP/s stand as the micro-benchmarks, marked not measured). On a profile: that profile,
  its measured passes still anchoring its shapes.
- **The step factor** is a function of batch only: ``fit.drift`` holds each model's (batch, factor) knots, log-linear
  in batch between them and constant beyond (`CostModel.drift`, as in the fit's replay), the draft's times the
  fitted draft factor. Every pass at a batch takes that batch's factor whatever its new tokens and context: the runs
  measured decode steps at their own mean context only, so a verify pass of k + 1 tokens, a longer context or a batch
  past the runs' takes a factor nobody measured there. The profile's ``fit.assumed`` says so.
- **The engine's per-step costs** stay the base's: the factor is on the passes (a step's time less the engine's
  priced work over its priced pass), so a per-step cost the base mispriced is inside the factor at the runs' batches.
- **The prefill factor**: ``fit.prefill_scale`` (`CostModel.prefill_scale`), on every prompt's pass.
- **Acceptance**: ``acceptance_fitted``, the i.i.d. alpha the speculative fit runs' counters, SGLang's accept_length
  or TPOT gave (`calibrate.bench_import.fit_acceptance`), used when no ``--acceptance`` is given.
- **Not carried**: the schedule the fit replayed (the engine, its batch limit: simulate's own options say them).

Trust follows the cross-validated error by run as a calibration's follows its held-out passes
(`scenarios.profile.assess_trust`): each plain fit run's throughput and TPOT p50 predicted by the fit to the others
are the held-out points, and the runs' median ITL's standard errors the measurement's precision. Without two plain
fit runs nothing is held out, and the profile is not trusted.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from calibrate.bench_import import BenchFit
from calibrate.step_import import _ceilings
from scenarios.bench_files import BenchRun, Manifest
from scenarios.profile import DeviceInfo, Fit, HeldoutErrors, Microbenchmarks, Profile, Trust, assess_trust
from simulator import __version__
from simulator.cost import CostModel
from simulator.specs import HardwareSpec

HELD_OUT_METRICS = ("throughput", "tpot_p50_s")  # what the served-stream goal judges (TTFT: see `heldout_errors`)
SCHEDULE_MODE = {"llama-server": "eager"}  # how the benchmarked engine ran its passes; others capture graphs


def heldout_errors(fit: BenchFit) -> HeldoutErrors:
    """The cross-validated rows as held-out points: each plain fit run's throughput and TPOT p50 predicted by the
    fit to the other runs. TTFT is left out: the prefill factor is fitted on the lightest run whether it is held out
    or not."""
    points = [{"run": r["label"], "metric": m, "measured": r[m][0], "predicted": r[m][1], "rel_error": r[m][2]}
              for r in fit.cross_validated for m in HELD_OUT_METRICS if math.isfinite(r[m][2])]
    if not points:
        return HeldoutErrors(0, math.nan, math.nan, math.nan)
    a = np.abs([p["rel_error"] for p in points])
    return HeldoutErrors(len(points), float(np.median(a)), float(np.percentile(a, 90)), float(a.max()),
                         tuple(points))


def runs_reach(fit: BenchFit, runs: Sequence[BenchRun]) -> tuple[int, int, int]:
    """(batch, rows a pass, context) the fit runs held: the largest time-weighted batch of their replays, the rows
    of a pass at it (a speculative run's verify pass: batch x (k + 1)), the longest mean request (prompt plus
    output). Means, not maxima: a prediction at a batch the runs reached only at their peaks is marked extrapolated."""
    by_label = {r.label: r for r in runs}
    held = [(row["mean_batch"], by_label[row["label"]]) for row in fit.in_sample if row["label"] in by_label]
    batch = max(b for b, _ in held)
    rows = max(b * (r.k + 1) for b, r in held)
    context = max(r.input_tokens + r.output_tokens for _, r in held)
    return max(1, math.ceil(batch)), max(1, math.ceil(rows)), math.ceil(context)


def tool_versions(runs: Sequence[BenchRun]) -> dict[str, str]:
    """Each tool the runs came from and its versions as the files (or the manifest) say them."""
    out: dict[str, set[str]] = {}
    for r in runs:
        out.setdefault(r.tool, set()).add(r.tool_version)
    return {tool: ", ".join(sorted(v for v in versions if v)) or "not in its files (give tool_version = \"...\" in "
                                                                  "the manifest's [[run]])"
            for tool, versions in sorted(out.items())}


def finite_or_none(v: Any) -> Any:
    """`v` with every non-finite number (a figure the tool's file did not give: NaN; a rate of sends at one instant:
    inf) as None, so the profile stays JSON (null: not measured)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {k: finite_or_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_or_none(x) for x in v]
    return v


def run_record(run: BenchRun) -> dict[str, Any]:
    """A run's settings and measurements as the fit read them."""
    return {"label": run.label, "file": run.path, "tool": run.tool, "tool_version": run.tool_version,
            "fit": run.fit, "rate_per_s": run.rate_per_s, "max_concurrency": run.max_concurrency,
            "burstiness": run.burstiness, "requests": run.requests, "completed": run.completed,
            "input_tokens": run.input_tokens, "output_tokens": run.output_tokens, "speculative": run.speculative,
            "k": run.k, "model": run.model, "per_request": run.per_request,
            "throughput_tokens_per_s": run.throughput_tokens_per_s, "ttft_p50_s": run.ttft.p50_s,
            "tpot_p50_s": run.tpot.p50_s, "itl_p50_s": run.itl.p50_s, "counters": dict(run.counters),
            "accept_length": run.accept_length}


def simulate_options(fit: BenchFit) -> str:
    """simulate's options for the schedule the fit replayed (`calibrate.bench_replay.engine_config`)."""
    on_demand = " --kv-allocation on-demand" if fit.config.kv_allocation == "on-demand" else ""
    return f"--max-batch {fit.config.max_batch}{on_demand}"


def assumed(fit: BenchFit, cost: CostModel) -> list[str]:
    """What the profile carries that the benchmark did not measure (module docstring)."""
    knots = ", ".join(f"{f:.3f} at batch {b:.1f}" for b, f in fit.knots)
    contexts = ", ".join(f"{p.context:.0f}" for p in fit.points)
    engine = cost.overheads.engine
    out = [f"the step factor ({knots}; log-linear in batch between, constant beyond) is on every pass at that batch: "
           f"the runs measured decode steps at mean contexts {contexts} only, so verify passes of k + 1 tokens, other "
           "contexts and batches past the runs' take it unmeasured",
           f"{fit.base.draft.name}'s passes take the target's factor; a speculative step's passes (verification "
           "and draft): " + (", ".join(f"{f:.3f} at batch {b:.1f}" for b, f in fit.spec_knots) + " over it"
                             if fit.spec_knots else "the same") + f" ({fit.spec_from})",
           f"every prompt's pass: {fit.prefill_scale:.3f} x the base's ({fit.prefill_from}); one run's TTFT p50, at "
           "its prompt lengths",
           f"the engine's per-step costs are the base's, not fitted (plain step {1e3 * engine.plain.fixed_s:.3f} ms, "
           f"verify {1e3 * engine.verify.fixed_s:.3f} ms fixed): the factor absorbs what they misprice at the runs' "
           "batches",
           f"the schedule the fit replayed ({fit.engine}, {fit.config.max_batch} running requests at most) is not "
           f"in the profile: give simulate {simulate_options(fit)}"
           + (" (llama-server's prompts riding in the slots' decode pass and its split steps are not simulate's "
              "schedule)" if fit.engine == "llama-server" else "")]
    if fit.acceptance is not None and fit.acceptance_from.startswith("no speculative"):
        out.append(f"acceptance {fit.acceptance.spec}: not fitted ({fit.acceptance_from})")
    elif fit.acceptance is not None:
        out.append(f"acceptance {fit.acceptance.spec}: the i.i.d. alpha with the runs' mean accepted length at "
                   "their k; other k and other positions follow the i.i.d. model, not a measurement")
    return out


def bench_trust(fit: BenchFit, heldout: HeldoutErrors, base: Profile | None) -> Trust:
    """`assess_trust` on the cross-validated runs and the steps' precision; untrusted without cross-validation,
    and with a base profile's own reasons (its passes are still the ones priced)."""
    trust = assess_trust(heldout, (), [p.step_rel_err for p in fit.measured_points or fit.points])
    reasons = list(trust.reasons)
    if not heldout.n:
        reasons.append("nothing held out: mark two or more plain runs fit = true (a light and a loaded rate) so each "
                       "is predicted by the fit to the others")
    if base is not None and not base.trust.trusted:
        reasons += [f"its base profile: {r}" for r in base.trust.reasons]
    return Trust(not reasons, tuple(reasons))


def bench_profile(fit: BenchFit, manifest: Manifest, runs: Sequence[BenchRun], command: str,
                  options: Mapping[str, Any]) -> Profile:
    """The profile (module docstring): the base's passes with the fit's factors, acceptance and errors."""
    cost = fit.costs().cost
    base: Profile | None = fit.base.profile
    heldout = heldout_errors(fit)
    record = finite_or_none({**fit.to_dict(), "manifest": str(manifest.path), "runs": [run_record(r) for r in runs],
                             "tools": tool_versions(runs), "specsim_version": __version__})
    extra = {"method": "a serving benchmark's runs replayed by the simulator; see calibrate/bench_import.py and "
                       "calibrate/bench_profile.py",
             "heldout_method": "by run: each plain fit run's throughput and TPOT p50 predicted by the fit to the "
                               "others (TTFT not counted: the prefill factor is fitted on the lightest run)",
             "assumed": assumed(fit, cost), "bench": record}
    drift = {m: tuple((float(b), float(f)) for b, f in knots) for m, knots in cost.drift.items()}
    spec_drift = tuple((float(b), float(f)) for b, f in cost.spec_drift)
    fitted = ({"spec": fit.acceptance.spec, "from": fit.acceptance_from}
              if fit.acceptance is not None and not fit.acceptance_from.startswith("no speculative") else {})
    if not fitted and manifest.setup.acceptance and fit.acceptance is not None:
        fitted = {"spec": fit.acceptance.spec, "from": "the manifest's [setup] acceptance (no speculative fit run)"}
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    origin = f"bench:{manifest.path}"
    trust = bench_trust(fit, heldout, base)
    plain_runs = sum(not r.speculative for r in runs)
    if base is not None:  # a profile: its own passes and formula, the fit's factors over them
        return replace(base, command=command, created=created, options=dict(options), origin=origin,
                       fit=replace(base.fit, heldout=heldout, drift=drift, spec_drift=spec_drift,
                                   prefill_scale=fit.prefill_scale,
                                   train_points=plain_runs, reach=runs_reach(fit, runs),
                                   routing_skew=cost.routing_skew, routing_power_law=cost.routing_power_law,
                                   extra={**base.fit.extra, **extra, "base_profile": str(base.path),
                                          "base_heldout": base.fit.heldout.to_dict()}),
                       trust=trust, fitted_acceptance=fitted, specsim_version=__version__, path=None)
    hw = cost.hardware
    dtype = fit.base.target.dtype
    tax = hw.speculation_tax
    ridge = cost.linear_ridge_p
    if hw.usable_memory_fraction != HardwareSpec.__dataclass_fields__["usable_memory_fraction"].default:
        extra["assumed"].append(f"usable memory: the profile's default, not {hw.name}'s "
                                f"{hw.usable_memory_fraction:.2f}")
    extra["expert_sharing"] = cost.expert_sharing  # `Profile.expert_sharing`
    profile_fit = Fit(cost.linear_rates, cost.attention_rates, cost.overheads, heldout,
                      HeldoutErrors(0, math.nan, math.nan, math.nan), plain_runs, cost.attention_overlap, (), extra,
                      linear_additive=ridge == 1.0, drift=drift, prefill_scale=fit.prefill_scale,
                      linear_ridge_p=ridge if math.isfinite(ridge) else None, reach=runs_reach(fit, runs),
                      kernels=cost.kernels, routing_skew=cost.routing_skew, routing_power_law=cost.routing_power_law,
                      spec_drift=spec_drift)
    # every dtype's datasheet FLOP/s: the fused-MoE kernel's FLOPs run at its experts' rate (kernel_kinds.MOE_COMPUTE)
    micro = _ceilings(hw, dtype)
    micro["matmul"] = {**{dt: {"flops_per_s": f} for dt, f in hw.peak_flops_per_s}, **micro["matmul"]}
    return Profile(
        command=command, created=created,
        device=DeviceInfo.from_dict({"kind": "cuda", "name": hw.name, "memory_bytes": hw.mem_capacity_bytes,
                                     "imported_from": origin}),
        dtype=dtype, target=fit.base.target, draft=fit.base.draft.module or fit.base.target,
        micro=Microbenchmarks.from_dict(micro), passes=(), fit=profile_fit, options=dict(options),
        engine_mode=SCHEDULE_MODE.get(fit.engine, "graph"), origin=origin, trust=trust, specsim_version=__version__,
        speculation_tax={"by_batch": {str(b): {"off_fraction": f, "switch_fraction": tax.switch_fraction}
                                      for b, f in zip(tax.off_batches, tax.off_fractions)},
                         "source": f"{tax.source} (carried from {fit.base.where})"} if tax.any else {},
        fitted_acceptance=fitted)
