"""`specsim calibrate --from aiconfigurator:SYSTEM[/BACKEND[/VERSION]]`: a profile whose passes are priced from
AIConfigurator's measured kernels (`calibrate.aiconfigurator` reads them, `simulator.kernel_tables` prices a pass).

The profile holds the GPU work of the target's and the draft's passes over a grid of batch x new tokens x context,
each a verify (or tree) pass priced as the engine runs it: one KV-cache read per sequence, the draft tokens as extra
query rows of every GEMM (not as AIConfigurator prices one: k + 1 sequences each re-reading the cache); and their
prompts' passes (`kernel_tables.prefill_pass`: the measured context attention, the GEMMs at every prompt token) over
prompts x prompt tokens, at context 0, as a calibration's prefill-shaped passes are: a prefill step's time
(`StepCosts.prefill_s`, TTFT in `simulate`) reads them. Predictions
read it as any calibration's measured passes (they win where they exist and anchor the shapes between); the engine's
own cost around its passes comes from the engine preset of the database's backend (scenarios/engines.toml), said in
the profile. A tensor-parallel profile prices one GPU of the group: its target is the shard (`@tpN` in its name), its
passes include the measured all-reduces.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from calibrate.aiconfigurator import ENGINE_OF, describe, measured_kernels, parse_source
from scenarios import engine_names, load_engine, load_hardware, load_model
from scenarios.kernel_systems import PRESET_OF
from scenarios.profile import DeviceInfo, Fit, HeldoutErrors, Microbenchmarks, PassRecord, Profile, assess_trust
from simulator import SpecsimError, __version__
from simulator.cost import CostModel
from simulator.kernel_tables import decode_pass, prefill_pass
from simulator.specs import DEFAULT_EXPERT_SHARING, ModelSpec, Overheads

BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
NEW_TOKENS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64)  # plain steps, chains up to k = 7, trees up to 64 nodes
CONTEXTS = (128, 1024, 4096, 16384)
HELD_OUT_BATCHES = (3, 12, 48, 192)  # predicted from the others: how well the grid carries between its points
# prompts' passes (context 0): prompts a prefill step takes x tokens each; more tokens than NEW_TOKENS' largest, so
# that the cost model reads them as a grid of their own (`CostModel._grids`)
PREFILL_BATCHES = (1, 2, 4, 8, 16, 32, 64)
PREFILL_TOKENS = (128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)  # the context tables' lengths


def _as_one_gpu(model: ModelSpec, tp: int) -> ModelSpec:
    """The shard one GPU runs, named for its group; priced as one device (its all-reduces are in its passes)."""
    if tp == 1:
        return model
    return replace(model.shard(tp), tp=1, name=f"{model.name}@tp{tp}")


def aiconfigurator_profile(source: str, target_name: str, draft_name: str, dtype: str, tp: int, command: str,
                           options: Mapping[str, Any], distribution: str | None = None,
                           contexts: Sequence[int] = CONTEXTS, model_override: ModelSpec | None = None) -> Profile:
    """The profile (see the module docstring) of `target_name` drafted by `draft_name` on `tp` GPUs of `source`
    (`model_override`: the target's spec as given, e.g. another cache dtype)."""
    src = parse_source(source)
    preset = PRESET_OF.get(src.system)
    if preset is None:
        raise SpecsimError(f"{src.label}: no hardware preset for system {src.system!r} (known: "
                           f"{', '.join(sorted(PRESET_OF))})")
    engine = ENGINE_OF.get(src.backend, "vllm")
    engine = engine if engine in engine_names() else "vllm"
    hw = load_hardware(preset, engine)
    target, draft = model_override or load_model(target_name, dtype), load_model(draft_name, dtype)
    sharded = [m.shard(tp) if tp > 1 else m for m in (target, draft)]
    stored = [_as_one_gpu(m, tp) for m in (target, draft)]
    passes: list[PassRecord] = []
    notes: list[str] = []
    for spec, name in ((sharded[0], stored[0].name), (sharded[1], stored[1].name)):
        shapes, kernels, told = measured_kernels(src, spec, hw, distribution)
        notes += [f"{name}: {t}" for t in told]
        for b in BATCHES:
            for n in NEW_TOKENS:  # the draft's too: its catch-up passes (`StepCosts.draft_sync_s`) take several
                for c in contexts:
                    t = decode_pass(shapes, kernels, b, n, c).total_s
                    passes.append(PassRecord(name, b, n, c, t, 0.0, (t,)))
        for b in PREFILL_BATCHES:
            for n in PREFILL_TOKENS:
                t = prefill_pass(shapes, kernels, b, n).total_s
                passes.append(PassRecord(name, b, n, 0, t, 0.0, (t,)))
    engine_overheads, _, engine_source = load_engine(engine)
    overheads = Overheads(engine=engine_overheads)
    preset_cost = CostModel.from_hardware(hw, dtype)
    micro = {"source": f"not measured: {src.database} (its kernels priced the passes); datasheet ceilings of "
                       f"{hw.name} ({hw.source})",
             "bandwidth": {"read_bytes_per_s": hw.mem_bw_bytes_per_s, "copy_bytes_per_s": hw.mem_bw_bytes_per_s},
             "matmul": {dtype: {"flops_per_s": hw.peak_flops(dtype)}}}
    fit = Fit(preset_cost.linear_rates, preset_cost.attention_rates, overheads, HeldoutErrors(0, np.nan, np.nan,
              np.nan), HeldoutErrors(0, np.nan, np.nan, np.nan), len(passes), True, (),
              {"method": f"pass times priced from measured kernels: {src.database}; see "
                         "calibrate/aiconfigurator_profile.py",
               "aiconfigurator": {**describe(src), "tp": tp, "preset": preset,
                                  "routing": next((n.split("routing ")[-1] for n in notes if "routing " in n), None)},
               "assumed": [*notes, f"the engine's own work around its passes: the {engine} engine preset "
                                   f"(scenarios/engines.toml: {engine_source})",
                           "between the grid's shapes: the preset's roofline times the priced / roofline ratio",
                           "prompts' passes: priced at context 0 (whole prompts); a chunk of a prompt on cached "
                           "tokens carries the nearest one by the preset roofline's change with context",
                           *([f"MoE verify passes: a sequence's rows share experts {DEFAULT_EXPERT_SHARING:g} "
                              "(the measured kernel read at the independent tokens they amount to, the other rows' "
                              "FLOPs added)"] if target.is_moe else [])],
               "expert_sharing": DEFAULT_EXPERT_SHARING},
              linear_additive=hw.ridge_p == 1.0)
    device = DeviceInfo("cuda", f"{hw.name} ({src.label}{f', TP {tp}' if tp > 1 else ''})", hw.mem_capacity_bytes,
                        {"imported_from": src.label, "database": src.database, "tp": tp})
    profile = Profile(
        command=command, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), device=device,
        dtype=dtype, target=stored[0], draft=stored[1], micro=Microbenchmarks.from_dict(micro),
        passes=tuple(passes), fit=fit, options=dict(options), engine_mode="graph", origin=src.label, quick=False,
        trust=assess_trust(fit.heldout, passes), specsim_version=__version__)
    held = held_out(profile)
    fit = replace(fit, heldout=held)
    return replace(profile, fit=fit, trust=assess_trust(held, passes))


def held_out(profile: Profile) -> HeldoutErrors:
    """The target's passes at `HELD_OUT_BATCHES` predicted by the profile without them: how well the grid's
    interpolation carries between its points."""
    target = profile.target.name
    keep = tuple(p for p in profile.passes if not (p.model == target and p.batch in HELD_OUT_BATCHES))
    cost = replace(profile, passes=keep).cost_model()
    rows = []
    for p in profile.passes:
        if p.model == target and p.batch in HELD_OUT_BATCHES and p.median_s:
            pred = cost.pass_time_s(profile.target, p.batch, p.new_tokens, p.context)
            rows.append({"model": p.model, "batch": p.batch, "new_tokens": p.new_tokens, "context": p.context,
                         "measured_s": p.median_s, "predicted_s": pred, "rel_error": pred / p.median_s - 1})
    a = np.abs([r["rel_error"] for r in rows])
    return HeldoutErrors(len(rows), float(np.median(a)), float(np.percentile(a, 90)), float(a.max()), tuple(rows))
