"""A real served stream: the real engine serving requests as they arrive, with continuous batching, next to the simpy
simulation of the same stream from the calibration profile (`specsim validate --serving`).

The stream is served by `engine.served_loop.serve`: the simulator's own scheduler (`simulator.scheduler`) on the wall
clock, with real passes and the real accept/reject rule (or accepted lengths replayed with `--acceptance`, any pair,
random weights allowed).

The simulation (`predict_run`) uses the same arrivals, lengths, engine configuration (padded prefill, eager draft
sync, the real cache's capacity) and policy, with the profile's cost model and acceptance; its latency percentiles
are averaged over acceptance seeds, so the prediction is not one draw's luck, and their spread over the seeds says
how far one served run's figures move by the luck of its own draws (`ServedRow.sampling`): at 32 requests a
speculating policy's TPOT p50 moves 4-10 % from one run to the next with nothing else changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from calibrate.served_validation_report import ServedRow, ServingValidation, average, nanmean, rel
from engine.served_loop import Served, serve
from scenarios import is_builtin_pair
from simulator import SpecsimError
from simulator.acceptance import Acceptance
from simulator.metrics import ServingMetrics, summarize
from simulator.policies import PLAIN, Policy
from simulator.serving import EngineConfig, ServingRun, simulate
from simulator.step_costs import StepCosts
from simulator.workload import Workload

if TYPE_CHECKING:
    from calibrate.validate import SpotCheck

PREDICTION_SEEDS = 16  # simulations per run (acceptance seeds), averaged
# Untimed runs of a stream before its timed one, on CUDA graphs: again while a run still captured a graph (a join of n
# prompts at a new bucket, a batch at a new draft length is a new shape, and a run slowed by its captures batches
# differently from the next), at most this many: a graph captured inside a timed run costs a sizeable part of a
# short run (docs/gpu.md).
WARM_RUNS = 3


@dataclass
class Simulated:
    """The simulator on one stream, over acceptance seeds: each seed's run and its metrics."""

    runs: list[ServingRun]
    metrics: list[ServingMetrics]

    @property
    def mean(self) -> ServingMetrics:
        """Metrics averaged field by field over the seeds (percentiles included)."""
        return average(self.metrics)

    def spread(self) -> dict[str, float]:
        """How much one run's throughput and TPOT p50 / p90 move from one acceptance draw to the next: their
        standard deviation over the seeds, relative to their mean (0 for plain decoding, which draws nothing)."""
        def rsd(xs: Sequence[float]) -> float:
            a = np.asarray(xs, dtype=float)
            a = a[~np.isnan(a)]
            return float(a.std(ddof=1) / a.mean()) if len(a) > 1 and a.mean() > 0 else math.nan

        ms = self.metrics
        return {"throughput": rsd([m.throughput_tokens_per_s for m in ms]),
                "tpot_p50": rsd([m.tpot_s[0] for m in ms]), "tpot_p90": rsd([m.tpot_s[1] for m in ms])}


def predict_run(workload: Workload, costs: StepCosts, policy: Policy, acceptance: Acceptance, config: EngineConfig,
                seed: int, seeds: int = PREDICTION_SEEDS) -> Simulated:
    """The simulator on the same stream, `seeds` acceptance draws."""
    runs = [simulate(workload, costs, policy, acceptance, np.random.default_rng([seed, i]), config)
            for i in range(seeds)]
    return Simulated(runs, [summarize(r, rate_per_s=None) for r in runs])


def causes(served: Served, costs: StepCosts, policy: Policy, predicted_runs: Sequence[ServingRun],
           measured: ServingMetrics, predicted: ServingMetrics) -> dict[str, float]:
    """Relative errors of the pieces a served run is made of, each priced by the simulator on what really ran:
    decode steps (the same batch, context and choice), prefills (the same requests and prompt lengths), acceptance
    (tokens per sequence-step, simulated against measured) and queueing (mean wait before a request's prefill)."""
    costs = costs.for_policy(policy)
    steps = [s for s in served.steps if not s.captured]
    pre = [p for p in served.prefills if not p.captured]
    out = {"step time": rel(sum(s.duration_s for s in steps), sum(s.predicted_s(costs, policy) for s in steps))
           if steps else math.nan,
           "prefill": rel(sum(p.duration_s for p in pre), sum(p.predicted_s(costs, policy) for p in pre))
           if pre else math.nan}
    out["acceptance"] = (rel(measured.tokens_per_step, predicted.tokens_per_step)
                         if measured.mean_drafted > 0 else math.nan)

    def mean_wait(run: ServingRun) -> float:
        w = run.workload
        ok = ~np.isnan(run.first_token_s)
        return float(np.mean(run.first_token_s[ok] - w.arrival_s[ok])) if ok.any() else math.nan

    out["queueing"] = rel(mean_wait(served.run), float(np.mean([mean_wait(r) for r in predicted_runs])))
    return out


def auto_rates(costs: StepCosts, config: EngineConfig, workload: Workload, quick: bool) -> list[float]:
    """Rates from light load to past saturation of plain decoding: fractions of the rate at which a full batch of
    plain steps (the profile's prediction, at the workload's mean context) just keeps up."""
    ctx = float(workload.prompt_tokens.mean() + workload.output_tokens.mean() / 2)
    b = config.max_batch
    tokens_per_s = b / costs.decode_s(b, ctx, PLAIN)
    saturation = tokens_per_s / float(workload.output_tokens.mean())
    fractions = (0.2, 0.5, 0.9, 1.5) if quick else (0.15, 0.3, 0.5, 0.7, 0.9, 1.2, 1.6)
    return [float(f"{saturation * f:.3g}") for f in fractions]


def served_config(config: EngineConfig, max_batch: int, max_seq_len: int,
                  prefill_bucket: int = 1) -> tuple[EngineConfig, int]:
    """The simulator's engine as the real one runs: padded prefills (to a multiple of `prefill_bucket` tokens: the
    engine's on CUDA graphs), attention padded to the batch's longest context, eager draft sync, reserved KV
    allocation, and the real cache's capacity (every row holds `max_seq_len` slots)."""
    return (replace(config, max_batch=max_batch, draft_sync="eager", prefill_padded=True, attention_padded=True,
                    prefill_bucket=prefill_bucket, kv_allocation="reserve"), max_batch * max_seq_len)


def check_fits(device: Any, models: Sequence[Any], rows: int, max_seq_len: int) -> None:
    """The models' weights and caches of `rows` sequences of `max_seq_len` slots fit the device's free memory (GPU)
    or the host's available memory (CPU), or a one-line error saying how to make them fit."""
    from engine.device import check_memory

    check_memory(device, sum(m.resident_weight_bytes + rows * max_seq_len * m.kv_bytes_per_token for m in models),
                 f"the served engine's weights and caches of {rows} sequences of {max_seq_len} tokens",
                 "lower --max-batch, or shorten prompts and outputs")


def stream_prompts(workload: Workload, builtin: bool, vocab: int, seed: int) -> list[list[int]]:
    """A prompt of each request's length: for the built-in pair the committed held-out prompts (the static
    validation's), request i ending as prompt i (in turn) ends, longer ones reaching back into the prompts before it;
    random tokens for random-weight shapes."""
    lengths = workload.prompt_tokens.tolist()
    if not builtin:
        rng = np.random.default_rng(seed)
        return [rng.integers(0, vocab, n).tolist() for n in lengths]
    from engine.builtin import encode, prompts

    held = [encode(p) for p in prompts("heldout")]
    out = []
    for i, n in enumerate(lengths):
        text: list[int] = []
        j = i
        while len(text) < n:
            text = held[j % len(held)] + text
            j -= 1
        out.append(text[-n:])
    return out


def run_serving_validation(profile: Any, serving: Any, rates: Sequence[float] | None, acceptance_spec: str | None,
                           time_cap_s: float, seed: int, progress: Callable[[str, int], Any], quick: bool = False,
                           repeats: int = 2) -> ServingValidation:
    """Serve the stream for real and simulate it, at every rate and policy (policies interleaved within a rate, so
    the machine's drift falls on all of them alike). `serving` is a `scenarios.serving_scenario.ServingOptions`. Without
    `acceptance_spec` the built-in pair decides acceptance itself; with it, acceptance is replayed at the profile's
    shapes (the built-in pair's real weights, or random weights for other shapes)."""
    import torch

    from calibrate.validate import check_validatable, spot_check, time_spot
    from engine.device import device_identity, resolve_device
    from engine.pass_runner import make_runner
    from engine.speculative import PREFILL_BUCKET, RealEngine
    from scenarios.profile import check_device
    from scenarios.serving_scenario import build_scenario
    from scenarios.setup import resolve_acceptance

    if repeats not in (1, 2):
        raise SpecsimError(f"a rate runs its policies once or forward and back (1 or 2 passes), not {repeats}")
    builtin = is_builtin_pair(profile.target, profile.draft)
    if acceptance_spec is None:
        check_validatable(profile)
        acceptance = profile.acceptance.model()
        temperature = profile.acceptance.temperature
    else:
        acceptance = resolve_acceptance(acceptance_spec, profile)
        temperature = 1.0
    device = resolve_device("cuda" if profile.device.kind == "cuda" else "cpu")
    check_device(profile, device_identity(device))
    scenario, policies = build_scenario(profile.cost_model(), profile.target, profile.draft, acceptance, serving)
    if acceptance_spec is not None and any(c.tree is not None for p in policies for c in p.candidates):
        raise SpecsimError("forced acceptance replays chains: drop the tree policies, or validate trees with the "
                           "built-in pair's own acceptance (no --acceptance)")
    workload = scenario.workload
    grid: list[float | None]
    if serving.timed_trace:
        # A trace keeps its clock without --rate; with rates its gaps are scaled (the burstiness kept).
        unit = Workload(workload.arrival_s * workload.mean_rate_per_s, workload.prompt_tokens,
                        workload.output_tokens, workload.label) if rates and len(workload) > 1 else workload
        workload = unit
        grid = sorted(set(rates)) if rates else [None]
    else:
        grid = sorted(set(rates)) if rates else []
    span = max(p.lookahead_tokens for p in policies)
    bucket = PREFILL_BUCKET if device.type == "cuda" and profile.engine_mode != "eager" else 1
    longest_prompt = int(workload.prompt_tokens.max())
    max_seq_len = max(int((workload.prompt_tokens + workload.output_tokens).max()) + span + 8,
                      -(-longest_prompt // bucket) * bucket)  # a padded prefill fits the cache
    config, kv_tokens = served_config(scenario.config, serving.max_batch, max_seq_len, bucket)
    if not grid:
        grid = list(auto_rates(scenario.costs, config, workload, quick))
    models = [profile.target] + ([profile.draft] if any(p.uses_draft for p in policies) else [])
    check_fits(device, models, serving.max_batch, max_seq_len)
    if builtin:
        from engine.builtin import load_pair

        target, draft = load_pair(expanded=True, dtype=profile.target.dtype, max_seq_len=max_seq_len, device=device)
    else:
        from engine.model import build_decoder

        target = build_decoder(profile.target, max_seq_len, device, seed=seed,
                               expert_sharing=profile.expert_sharing)
        draft = build_decoder(profile.draft, max_seq_len, device, seed=seed + 1)
    engine = RealEngine(target, draft, make_runner(device, eager=profile.engine_mode == "eager"))
    if acceptance_spec is not None:
        engine.force(acceptance, seed)
    prompts = stream_prompts(workload, builtin, profile.target.vocab_size, seed)
    cost = profile.cost_model()
    context = int(workload.prompt_tokens.mean() + workload.output_tokens.mean() / 2)
    spot_runner = make_runner(device, eager=profile.engine_mode == "eager")
    spot_batches = sorted({1, serving.max_batch})
    spot_models: dict[tuple, Any] = {}  # every spot check times the same models: their graphs are captured once

    def spot() -> dict[tuple[str, int], float]:
        """Single passes timed now (`time_spot`: the median of three timings)."""
        return time_spot(profile, device, spot_runner, spot_batches, context, seed, decoders=spot_models)

    def drifted(check: SpotCheck) -> StepCosts:
        """Every pass re-anchored by a spot check of single decoding passes (`CostModel.drift`)."""
        return StepCosts(replace(cost, drift=check.drift), profile.target, profile.draft)

    nominals: list[float] = []
    streams: list[Workload] = []
    timings = []  # every spot check's timings, in the order taken
    runs_at: list[int] = []  # every run's check before it (its index in `timings`), in the order run
    done: dict[tuple[int, str], list[tuple[Served, int]]] = {}  # (rate, policy) -> its runs and their places in order
    n = len(workload)
    # Each rate runs its policies forward, then backward (A B C, C B A): a drift that is linear over the rate's runs
    # falls on every policy alike. A spot check closes every run (and opens the next): on this kind of shared host the
    # device's speed moves ~10 % within half a minute, so each run's prediction is re-anchored by the checks right
    # around it (measured: drift moves all pass shapes alike, so single decoding passes are enough), and its row
    # averages its runs. The checks are read as a series (`steady`), so that a burst of a neighbour's work during one
    # check does not re-anchor the two runs beside it.
    passes = [policies, policies[::-1]][:repeats]
    graph = engine.runner.mode == "graph"
    runs = len(grid) * len(policies) * repeats
    with progress("served stream and its simulation", runs * (n + 1 + graph) + 1) as bar:
        timings.append(spot())
        bar.update(1)
        for r, rate in enumerate(grid):
            w = workload if rate is None else workload.at_rate(rate)
            streams.append(w)
            nominals.append(w.mean_rate_per_s if rate is None else rate)
            for policy in (p for order in passes for p in order):
                engine_costs = drifted(spot_check(profile, timings[-1], timings[-1], context))  # what it knows now
                if graph:  # capture every shape this stream meets before timing it, then check the device again
                    for _ in range(WARM_RUNS):
                        captures = engine.runner.captures
                        serve(engine, w, prompts, policy, engine_costs, config, kv_tokens, temperature, seed,
                              time_cap_s)
                        if engine.runner.captures == captures:
                            break
                    timings.append(spot())
                    bar.update(1)
                served = serve(engine, w, prompts, policy, engine_costs, config, kv_tokens, temperature, seed,
                               time_cap_s, tick=bar.update)
                if not served.held:
                    bar.update(int(np.isnan(served.run.finish_s).sum()))
                done.setdefault((r, policy.label), []).append((served, len(runs_at)))
                runs_at.append(len(timings) - 1)
                timings.append(spot())
                bar.update(1)
    steady_timings = steady(timings)
    checks = [spot_check(profile, steady_timings[i], steady_timings[i + 1], context) for i in runs_at]
    rows = [score([(served, checks[j]) for served, j in done[(r, policy.label)]], streams[r], nominal, policy,
                  acceptance, config, drifted, scenario.costs, seed)
            for r, nominal in enumerate(nominals) for policy in policies]
    settings = {"profile": str(profile.path), "pair": f"{profile.target.name} / {profile.draft.name}",
                "workload": workload.label, "requests": n, "max_batch": serving.max_batch,
                "acceptance": acceptance_spec or f"real (simulated with {acceptance.spec})",
                "temperature": temperature, "time_cap_s": time_cap_s, "engine_mode": profile.engine_mode,
                "prediction_seeds": PREDICTION_SEEDS, "torch_threads": torch.get_num_threads(), "rates": nominals,
                "passes_per_rate": repeats,
                "spot_checks": [c.to_dict() for c in checks],  # as the predictions used them (`steady`)
                "spot_timings": [{f"{m}@{b}": t for (m, b), t in sorted(timing.items())} for timing in timings],
                "largest_drift": max(spot_check(profile, t, t, context).largest for t in timings),  # as timed
                "graph_captures": {"stream": engine.runner.captures, "spot_checks": spot_runner.captures}}
    return ServingValidation(rows, nominals, [p.label for p in policies], settings)


def steady(timings: Sequence[Mapping[tuple[str, int], float]]) -> list[dict[tuple[str, int], float]]:
    """The spot checks' timings read as a series: each the median of itself and its neighbours. A check is a second
    or two of passes; a neighbour's burst that fills one check but not the runs on either side of it would otherwise
    re-anchor both runs too slow (docs/calibration.md, Figures behind the docstrings), while a change that lasts is
    seen by two checks in a row and followed. The series' ends take the mean of their two."""
    out = []
    for i, timing in enumerate(timings):
        window = timings[max(0, i - 1):i + 2]
        out.append({key: float(np.median([t[key] for t in window if key in t])) for key in timing})
    return out


def score(runs: Sequence[tuple[Served, Any]], workload: Workload, rate: float, policy: Policy,
          acceptance: Acceptance, config: EngineConfig, drifted: Callable[[Any], StepCosts], profiled: StepCosts,
          seed: int) -> ServedRow:
    """One row from a policy's runs at one rate (each with the spot check around it): measured, predicted (each run
    re-anchored by its own spot check), as profiled, and the pieces, each averaged over the runs; and how far
    acceptance's chance alone moves the comparison (`ServedRow.sampling`)."""
    measured, predicted, pieces, spreads = [], [], [], []
    for served, check in runs:
        costs = drifted(check)
        m = summarize(served.run, rate_per_s=rate) if served.held else _partial(served, rate)
        sim = predict_run(workload, costs, policy, acceptance, config, seed)
        mean = sim.mean
        measured.append(m)
        predicted.append(replace(mean, rate_per_s=rate))
        pieces.append(causes(served, costs, policy, sim.runs, m, mean))
        spreads.append(sim.spread())
    as_profiled = predict_run(workload, profiled, policy, acceptance, config, seed).mean
    held = all(served.held for served, _ in runs)
    mean_pieces = {k: nanmean([c[k] for c in pieces]) for k in pieces[0]}
    # The measured row averages len(runs) draws of the stream, the prediction PREDICTION_SEEDS per run.
    draws = 1 / len(runs) + 1 / (len(runs) * PREDICTION_SEEDS)
    sampling = {k: nanmean([sp[k] for sp in spreads]) * math.sqrt(draws) for k in spreads[0]}
    steps = [s for served, _ in runs for s in served.steps if not s.captured]
    loop_s = float(np.median([s.loop_s for s in steps])) if steps else math.nan
    step_s = float(np.median([s.duration_s for s in steps])) if steps else math.nan
    return ServedRow(rate, policy.label, held, average(measured), average(predicted), mean_pieces,
                     sum(served.captures for served, _ in runs), sum(served.wall_s for served, _ in runs),
                     replace(as_profiled, rate_per_s=rate), sampling, loop_s, step_s)


def _partial(served: Served, rate: float) -> ServingMetrics:
    """Metrics of a run stopped at its time cap, over the requests that finished (the row is marked, not scored)."""
    run = served.run
    done = ~np.isnan(run.finish_s)
    if not done.any():
        nan3 = (math.nan,) * 3
        return ServingMetrics(run.policy, rate, 1, 0, served.wall_s, 0.0, 0.0, nan3, nan3, nan3, 0.0, 0.0, False,
                              int(run.waiting_at_last_arrival), 0.0, 0.0, 0.0, None, 0)
    w = run.workload
    idx = np.flatnonzero(done)
    sub = Workload(w.arrival_s[idx], w.prompt_tokens[idx], w.output_tokens[idx], w.label)
    part = replace(run, workload=sub, first_token_s=run.first_token_s[idx], finish_s=run.finish_s[idx],
                   engine_of=run.engine_of[idx])
    return replace(summarize(part, rate_per_s=rate), sustained=False)
