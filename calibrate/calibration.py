"""`specsim calibrate`: micro-benchmarks, a grid of real draft and verify passes, the fit, and the profile."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from calibrate.engine_overheads import FORCED_ACCEPTANCE, measure_engine_overheads
from calibrate.microbench import n_microbenchmarks, run_microbenchmarks
from calibrate.pair_measurements import BuiltinPlan, measure_builtin
from calibrate.progress import Bar, Progress, no_progress
from calibrate.timing import Effort, Estimate, Timer, interleaved
from engine.device import device_identity, device_state
from engine.model import KEY_ALIGN, Window, build_decoder, causal_window, round_keys
from engine.pass_runner import PassRunner, make_runner
from engine.rejection import distribution, sample
from engine.speculative import RealEngine
from scenarios import datasheet_for, is_builtin_pair
from scenarios.host import host_summary
from scenarios.profile import (
    DeviceInfo,
    Fit,
    HeldoutErrors,
    MeasuredAcceptance,
    Microbenchmarks,
    PassRecord,
    Profile,
    assess_trust,
    speculation_tax_record,
)
from simulator import SpecsimError, __version__
from simulator.cost import CostModel
from simulator.rate_fit import PassPoint, errors, fit_cost_model, heldout_split, verify_ratio_check
from simulator.specs import DEFAULT_EXPERT_SHARING, EngineOverheads, ModelSpec


@dataclass(frozen=True)
class Grid:
    """Which passes to time: batch x new tokens x context for the target, and the draft's own (narrower) set."""

    batches: tuple[int, ...]
    target_new_tokens: tuple[int, ...]
    draft_new_tokens: tuple[int, ...]
    contexts: tuple[int, ...]
    probe_layers: tuple[int, ...] = (1, 8)
    heldout_fraction: float = 0.3
    # Prefill-shaped passes (batch x prompt tokens, nothing cached) of both models: a served stream's prefills run
    # at hundreds of rows, past the decoding grid's largest, where the linear layers run at another rate.
    prefill_batches: tuple[int, ...] = ()
    prefill_tokens: tuple[int, ...] = ()

    @classmethod
    def default(cls, quick: bool, batches: Sequence[int] | None = None, contexts: Sequence[int] | None = None,
                tree_sizes: Sequence[int] = ()) -> Grid:
        if quick:  # batch 2 and 4, 6, 7 new tokens left to the passes around them, which priced them within 0.4-4.6 %
            #        (median) in quick CPU and H200 profiles, each for a quarter of the grid time (docs/calibration.md)
            b, n, c = (1, 4, 8), (1, 2, 3, 5, 8), (64, 384)
        else:
            b, n, c = (1, 2, 4, 8, 16, 32), tuple(range(1, 9)) + (11, 16), (64, 512)
        n = tuple(sorted(set(n) | {t for t in tree_sizes}))
        prefill = ((1, 2), (64, 128)) if quick else ((1, 2, 4), (64, 128, 256))
        # The draft: one token per drafting pass, and the catch-ups of a lagging draft (re-reading missed tokens).
        return cls(tuple(batches or b), n, (1, 2, 4, 8), tuple(contexts or c), prefill_batches=prefill[0],
                   prefill_tokens=prefill[1])


@dataclass
class CalibrationResult:
    profile: Profile
    fit_cost: CostModel
    specs: dict[str, ModelSpec] = field(default_factory=dict)


def probe_spec(target: ModelSpec, layers: int) -> ModelSpec:
    """A decoder as deep as asked but only 32 wide: its passes cost the fixed overheads and almost nothing else."""
    return ModelSpec(name=f"probe-{layers}L", n_layers=layers, d_model=32, n_heads=2, n_kv_heads=2, d_ff=64,
                     vocab_size=target.vocab_size, dtype=target.dtype, source="overhead probe")


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, torch.OutOfMemoryError):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


@dataclass(frozen=True)
class Timed:
    """One model's share of a pass grid: its new-token counts, and the slots per sequence of its cache (default: the
    grid's longest context plus its most new tokens plus one)."""

    spec: ModelSpec
    new_tokens: tuple[int, ...]
    max_len: int | None = None
    expert_sharing: float = DEFAULT_EXPERT_SHARING  # an MoE's routing (engine.moe.Routing)


def time_passes(spec: ModelSpec, device: torch.device, timer: Timer, runner: PassRunner, batches: Sequence[int],
                new_tokens: Sequence[int], contexts: Sequence[int], bar: Bar, effort: Effort,
                seed: int = 0, max_len: int | None = None) -> list[dict[str, Any]]:
    """One model's grid of decoding passes (`time_together` with one model)."""
    return time_together([Timed(spec, tuple(new_tokens), max_len)], device, timer, runner, batches, contexts, bar,
                         effort, seed)


def time_together(models: Sequence[Timed], device: torch.device, timer: Timer, runner: PassRunner,
                  batches: Sequence[int], contexts: Sequence[int], bar: Bar, effort: Effort,
                  seed: int = 0, decoders: dict[tuple, Any] | None = None, keep: bool = False) -> list[dict[str, Any]]:
    """Time one decoding pass per grid point of each model, with random weights drawn on the device, as the runner
    runs it (a CUDA graph replayed, on a GPU): B sequences x n new tokens on c cached ones, the probabilities at the
    last position and one sample. Each model is built once, and the points of all the models (and, eager, of all
    the batches) are measured in the same rounds (`measure.interleaved`, each round a block of each model's
    points): a speed-up turns on ratios of passes, and passes timed minutes apart on a host that drifts 10-30 % in
    that time carried the drift into every ratio (draft passes 5-28 % dearer than they ran while target passes were
    7-16 % cheaper, at TinyLlama's shapes; batch-by-batch offsets of 10-30 % in quick calibrations' held-out
    passes, their sign changing from run to run). An out-of-memory point is recorded and skipped. Records come
    model by model, batch by batch. `decoders` keeps the random-weight models between calls that time the same
    shapes again (a spot check's takes: building the built-in target costs as much as timing it); with `keep` their
    caches (the largest batch's rows) and the runner's graphs stay too (a served stream's spot checks, timed again
    and again, were 120 of its 151 graph captures)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    rng = np.random.default_rng(seed)
    records: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(models))}

    def record(i: int, b: int, n: int, c: int, /, tick: bool = True, **fields: Any) -> None:
        records[i].append({"model": models[i].spec.name, "batch": b, "new_tokens": n, "context": c, **fields})
        if tick:
            bar.update(1)

    built: dict[int, tuple[Any, int]] = {}
    for i, m in enumerate(models):
        max_len = m.max_len or max(contexts) + max(m.new_tokens) + 1
        key = (m.spec, max_len, str(device), m.expert_sharing)  # the first call's weights serve the later ones
        try:
            model = decoders.get(key) if decoders is not None else None
            if model is None:
                model = build_decoder(m.spec, max_len, device=device, seed=seed, expert_sharing=m.expert_sharing)
            if decoders is not None:
                decoders[key] = model
            built[i] = model, max_len
        except Exception as e:  # noqa: BLE001 - any failure to even build the model is an OOM candidate
            if not _is_oom(e):
                raise
            for b, n, c in itertools.product(batches, m.new_tokens, contexts):
                record(i, b, n, c, oom=True)
    key_bucket = 64 if runner.mode == "graph" else KEY_ALIGN
    # Eager or kept, one cache of the largest batch's rows serves every batch; else graphs (a pool each) take turns.
    blocks = [tuple(batches)] if (runner.mode != "graph" or keep) and len(batches) > 1 else [(b,) for b in batches]
    while blocks:
        block = blocks.pop(0)
        if not keep:
            runner.reset()
        steps: dict[tuple[int, int, int, int], Callable[[], torch.Tensor]] = {}
        cached = []
        for i, (model, _) in built.items():
            try:
                if not keep or model.cache_rows < max(block):
                    model.setup_cache(max(block))
                cached.append(i)
            except Exception as e:  # noqa: BLE001
                if not _is_oom(e):
                    raise
                if len(block) == 1:
                    for n, c in itertools.product(models[i].new_tokens, contexts):
                        record(i, block[0], n, c, oom=True)
        if len(cached) < len(built) and len(block) > 1:  # the batches one by one, each in a cache of its size
            blocks[:0] = [(b,) for b in block]
            cached = []
        n_points = sum(len(block) * len(contexts) * len(models[i].new_tokens) for i in cached)
        shown = 0

        def advance(fraction: float, n_steps: int = n_points) -> None:
            # the bar moves with the estimated share of the block's time, one short of done until it is
            nonlocal shown
            now = min(int(fraction * n_steps), n_steps - 1)
            if now > shown:
                bar.update(now - shown)
                shown = now

        # a point's first call (and, replaying graphs, one warm-up), then the rounds
        estimate = Estimate((2 if runner.mode == "graph" else 1) * n_points, effort.per_point_s * n_points, advance)
        for i in cached:
            model, max_len = built[i]
            for b, c, n in itertools.product(block, contexts, models[i].new_tokens):
                start = torch.full((b,), c, dtype=torch.long, device=device)
                tokens = torch.randint(0, models[i].spec.vocab_size, (b, n), device=device, generator=gen)
                window = causal_window(start, n, round_keys(c + n, max_len, key_bucket))

                def step(model: Any = model, tokens: torch.Tensor = tokens, window: Window = window,
                         n: int = n) -> torch.Tensor:
                    # What a decoding step runs: the pass, the probabilities at its last position, one sample.
                    logits = runner(model, tokens, window, ("causal", n))
                    return sample(distribution(logits[:, -1], 1.0), gen)

                try:
                    with torch.inference_mode():
                        step()  # the first call allocates (and captures): an OOM shows here, point by point
                    steps[(i, b, c, n)] = step
                    estimate.call()
                except Exception as e:  # noqa: BLE001
                    if not _is_oom(e):
                        raise
                    record(i, b, n, c, oom=True)
        if steps:
            with torch.inference_mode():  # each point has run once above
                # a graph's second replay is its first steady one; an eager pass is steady from its second call,
                # and the median of the rounds takes the rest (each round starts a group with an untimed call)
                timings = interleaved(steps, timer, effort, rng, group=lambda key: key[0],
                                      warmup=1 if runner.mode == "graph" else 0,
                                      progress=estimate.rounds, warmed=estimate.call)
            for (i, b, c, n), t in timings.items():
                record(i, b, n, c, tick=False, **t.to_dict())
        bar.update(max(len(steps) - shown, 0))  # the block's points measured (its out-of-memory ones counted)
        if not keep:
            runner.reset()
            for model, _ in built.values():
                model.free_cache()  # before the next block's caches are allocated
    if device.type == "cuda":
        torch.cuda.empty_cache()
    order = {b: j for j, b in enumerate(batches)}
    return [r for i in range(len(models)) for r in sorted(records[i], key=lambda r: order[r["batch"]])]


def calibrate(target: ModelSpec, draft: ModelSpec, device: torch.device, grid: Grid, quick: bool, command: str,
              progress: Progress = no_progress, seed: int = 0,
              options: Mapping[str, Any] | None = None, eager: bool = True, busy: bool = False,
              expert_sharing: float = DEFAULT_EXPERT_SHARING, plan: BuiltinPlan | None = None) -> CalibrationResult:
    """Measure this device, time the grid, fit the cost model on part of it and check it on the rest. An MoE
    target's tokens route as `engine.moe.Routing` draws them, sharing experts within a sequence's pass with
    probability `expert_sharing`, and the fit prices the experts they touch with the same sharing. The built-in
    pair's acceptance and engine are measured as `plan` says (default: `BuiltinPlan.of(quick)`)."""
    if target.is_moe and (eager is False and device.type == "cuda"):
        raise SpecsimError("an MoE target's passes read their routing back to the host (grouping by expert) and "
                           "cannot be captured as CUDA graphs: calibrate it with --eager")
    timer = Timer(device)
    effort = Effort.of(quick, busy)
    identity = device_identity(device)
    state_start = device_state(device)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

    with progress("micro-benchmarks", n_microbenchmarks(device)) as bar:
        micro = run_microbenchmarks(timer, quick, lambda: bar.update(1), time_scale=3.0 if busy else 1.0)

    probes = [probe_spec(target, n) for n in grid.probe_layers]
    specs = {target.name: target, draft.name: draft, **{p.name: p for p in probes}}
    passes: list[dict[str, Any]] = []
    runner = make_runner(device, eager)
    n_decoding = len(grid.batches) * (len(grid.target_new_tokens) + len(grid.draft_new_tokens)) * len(grid.contexts)
    with progress(f"target and draft passes, interleaved ({target.name}, {draft.name})", n_decoding) as bar:
        passes += time_together([Timed(target, grid.target_new_tokens, expert_sharing=expert_sharing),
                                 Timed(draft, grid.draft_new_tokens)], device,
                                timer, runner, grid.batches, grid.contexts, bar, effort, seed)
    n_prefill = 2 * len(grid.prefill_batches) * len(grid.prefill_tokens)
    if n_prefill:
        with progress("prefill passes", n_prefill) as bar:
            passes += time_together([Timed(target, grid.prefill_tokens, expert_sharing=expert_sharing),
                                     Timed(draft, grid.prefill_tokens)], device,
                                    timer, runner, grid.prefill_batches, (0,), bar, effort, seed)
    with progress("overhead probes", len(probes) * len(grid.contexts)) as bar:
        for p in probes:
            passes += time_passes(p, device, timer, runner, (1,), (1,), grid.contexts, bar, effort, seed)

    points = [PassPoint(r["model"], r["batch"], r["new_tokens"], r["context"], r["median_s"])
              for r in passes if not r.get("oom")]
    real = [p for p in points if p.model in (target.name, draft.name)]
    if len(real) < 6:
        raise SpecsimError("too few passes could be timed to fit the cost model (out of memory?); try a smaller "
                           "--batch range or --context")
    train, test = heldout_split(real, grid.heldout_fraction, np.random.default_rng(seed))
    train += [p for p in points if p not in real]

    dtype = target.dtype
    gemm_peak = micro["matmul"].get(dtype, micro["matmul"]["fp32"])["flops_per_s"]
    stream_bw = micro["bandwidth"]["read_bytes_per_s"]
    hw = Microbenchmarks.from_dict(micro).hardware(identity["name"], identity.get("memory_bytes"))
    with progress("fit", 1) as bar:
        sheet = datasheet_for(identity["name"])  # a GPU's datasheet bounds the fitted rates; a CPU has none here
        fit = fit_cost_model(train, specs, hw, gemm_peak, stream_bw, dtype,
                             ceiling_bw_bytes_per_s=sheet.mem_bw_bytes_per_s if sheet else None,
                             ceiling_flops_per_s=sheet.peak_flops(dtype) if sheet else None,
                             expert_sharing=expert_sharing)
        bar.update(1)
    datasheet = CostModel.from_hardware(hw, dtype, datasheet=True)
    ratio = verify_ratio_check(fit.cost, points, target)

    acceptance = None
    catchup = RealEngine.DRAFT_CATCHUP_TOKENS
    with_habit = replace(fit.cost.overheads, engine=replace(fit.cost.overheads.engine, draft_catchup_tokens=catchup))
    measured_cost = replace(fit.cost, measured={(p.model, p.batch, p.new_tokens, p.context): p.time_s
                                                for p in points}, overheads=with_habit, measured_models=(target, draft))
    engine_bounds: list[str] = []  # engine terms held at zero (`calibrate.engine_overheads.per_step`)
    if builtin_pair(target, draft):
        acceptance, engine = measure_builtin(device, runner, dtype, quick, max(grid.batches), progress, seed,
                                             measured_cost, target, draft, engine_bounds, grid.batches, plan)
    else:
        engine = measure_engine_at_shapes(device, runner, grid, quick, progress, seed,
                                          measured_cost.draft_catchup_tokens, target, draft, engine_bounds,
                                          expert_sharing)
    overheads = replace(fit.cost.overheads, engine=replace(engine, draft_catchup_tokens=catchup))
    tax = acceptance.pop("speculation_tax", {}) if acceptance else {}  # the engine's, not the pair's acceptance
    heads_passes = acceptance.get("heads", {}).pop("passes", []) if acceptance else []
    records = tuple(PassRecord.from_dict(r) for r in passes + heads_passes)
    heldout = HeldoutErrors.from_dict(errors(fit.cost, test, specs))
    profile = Profile(
        command=command, created=created, device=DeviceInfo.from_dict(identity), dtype=dtype, target=target,
        draft=draft, micro=Microbenchmarks.from_dict(micro), passes=records,
        fit=Fit(fit.cost.linear_rates, fit.cost.attention_rates, overheads, heldout,
                HeldoutErrors.from_dict(errors(datasheet, test, specs)), len(train), fit.cost.attention_overlap,
                tuple(ratio),
                {"method": "non-negative least squares on relative error; see simulator/rate_fit.py",
                 "seconds_per_linear_byte": {"rows": list(fit.knots), "values": list(fit.seconds_per_linear_byte)},
                 "bounds": list(fit.bounds) + engine_bounds,
                 **({"expert_sharing": expert_sharing} if target.is_moe else {})}),
        acceptance=MeasuredAcceptance.from_dict(acceptance) if acceptance else None, probes=tuple(probes),
        options=dict(options or {}), engine_mode=runner.mode, quick=quick, trust=assess_trust(heldout, records),
        specsim_version=__version__, device_state={"start": state_start, "end": device_state(device)},
        host=host_summary(), speculation_tax=speculation_tax_record(tax))
    return CalibrationResult(profile, fit.cost, specs)


def builtin_pair(target: ModelSpec, draft: ModelSpec) -> bool:
    """Whether the calibrated shapes are the built-in pair's (so its trained weights can measure acceptance)."""
    from engine.builtin import WEIGHTS

    return is_builtin_pair(target, draft) and (WEIGHTS / "builtin.json").exists()


def measure_engine_at_shapes(device: torch.device, runner: PassRunner, grid: Grid, quick: bool, progress: Progress,
                             seed: int, catchup_tokens: int, target: ModelSpec, draft: ModelSpec,
                             bounds: list[str] | None = None,
                             expert_sharing: float = DEFAULT_EXPERT_SHARING) -> EngineOverheads:
    """The engine's own work at shapes other than the built-in pair's (`calibrate.engine_overheads`): random-weight
    models of these shapes decode random prompts as long as the smallest calibrated context, chains replaying
    `FORCED_ACCEPTANCE`, at batch 1 and the largest calibrated batch. Skipped (zero, as before) where a pair's
    vocabularies differ or the models do not fit."""
    from simulator.acceptance_parse import parse_acceptance

    if target.vocab_size != draft.vocab_size:
        return EngineOverheads()
    new_tokens, repeats = (16, 2) if quick else (24, 3)
    prompt_tokens = max(min(grid.contexts), 8)
    batches = sorted({1, max(grid.batches)})
    max_len = prompt_tokens + new_tokens + 16
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, target.vocab_size, prompt_tokens).tolist() for _ in range(max(batches))]
    try:
        engine = RealEngine(build_decoder(target, max_len, device, seed=seed, expert_sharing=expert_sharing),
                            build_decoder(draft, max_len, device, seed=seed + 1), runner)
        engine.force(parse_acceptance(FORCED_ACCEPTANCE), seed)
        gen = torch.Generator(device=device).manual_seed(seed)
        with progress("engine overheads (real steps, acceptance replayed)", 3 * len(batches) * repeats) as bar:
            _, overheads = measure_engine_overheads(engine, prompts, batches, new_tokens, repeats, gen,
                                                    catchup_tokens, tick=lambda: bar.update(1), bounds=bounds)
    except Exception as e:  # noqa: BLE001 - out of memory at the largest batch: leave the extras unmeasured
        if not _is_oom(e):
            raise
        return EngineOverheads()
    finally:
        runner.reset()
    return overheads


def calibrate_device(target: str, draft: str, dtype: str, device_name: str, batches: Sequence[int] | None,
                     contexts: Sequence[int] | None, quick: bool, eager: bool, busy: bool, seed: int,
                     out: Path | None, command: str, options: Mapping[str, Any],
                     progress: Progress, expert_sharing: float | None = None) -> tuple[Profile, Path]:
    """`specsim calibrate`: the output checked first (a calibration is minutes of work), the models, the device,
    the grid; then the whole calibration, and the profile written. Returns the profile and where it went."""
    from engine.device import check_memory, resolve_device
    from scenarios import load_model
    from scenarios.files import cache_dir, check_output
    from scenarios.profile import save_profile

    check_output(out or cache_dir() / "profile.json", "--out" if out else "profile folder")
    target_spec, draft_spec = load_model(target, dtype), load_model(draft, dtype)
    if expert_sharing is not None and not 0.0 <= expert_sharing <= 1.0:
        raise SpecsimError(f"--expert-sharing is a fraction in [0, 1], got {expert_sharing:g}")
    if expert_sharing is not None and not target_spec.is_moe:
        raise SpecsimError(f"--expert-sharing routes an MoE target's tokens; {target_spec.name} is dense")
    device = resolve_device(device_name)
    grid = Grid.default(quick, batches, contexts)
    slots = max(grid.batches) * (max(grid.contexts) + max(grid.target_new_tokens) + 1)  # the grid's largest cache
    check_memory(device, sum(m.resident_weight_bytes + slots * m.kv_bytes_per_token for m in (target_spec, draft_spec)),
                 f"{target_spec.name} and {draft_spec.name} (weights, the grid's caches)", "calibrate a pair that "
                 f"fits (the built-in one, or config.json of smaller models), or price {target_spec.name} from a "
                 "preset (--hardware) or this device's rates (predict --profile PROFILE --target ... --draft ...)")
    sharing = DEFAULT_EXPERT_SHARING if expert_sharing is None else expert_sharing
    result = calibrate(target_spec, draft_spec, device, grid, quick, command,
                       progress=progress, seed=seed, options=options, eager=eager, busy=busy,
                       expert_sharing=sharing)
    return result.profile, save_profile(result.profile, out)
