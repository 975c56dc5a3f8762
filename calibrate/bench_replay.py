"""A benchmark run replayed by the simulator: the same arrivals (rate and burstiness, or a client's concurrency),
the same lengths (each request's where the file keeps them) and the same number of requests, on the engine's
schedule, and the metrics a benchmark client reports computed the client's way.

Arrivals. A paced run (``rate``) draws its gaps as `vllm bench serve` does: gamma with shape ``burstiness`` (1:
Poisson, inf: evenly spaced), rescaled so the last request is sent at N / rate. The measured run's own draw is
unknown (unless the file kept each request's send time), so the simulation averages over `SEEDS` draws. A client
that keeps at most C requests in flight (``max_concurrency``; GuideLLM's concurrent and synchronous strategies,
AIPerf's ``--concurrency``) sends request j only when an earlier one has finished: the send times are found by
iterating the simulation (each pass sends request j at the (j - C + 1)-th finish of the pass before, or at its paced
time if later), which settles in a few passes because finishes move little once the batch holds C requests.

Acceptance: a speculative run is replayed with what it measured of its own acceptance (`own_acceptance`): its
requests' traces (`BenchRun.trace`, the manifest's ``acceptance_trace``: request i walks the i-th trace, so the
replay sees the run's own draws), else its counters' mean (the i.i.d. alpha with that mean at its k); only a run that
measured neither draws from the model fitted to the others. What is judged is then the serving costs, not how one
run's acceptance transfers to another (`calibrate.bench_import` fits that model for predictions).

Metrics as the clients compute them, over every request: TTFT = first token - send time; TPOT = (finish - first
token) / (output tokens - 1); output throughput = output tokens / (last finish - first send).

The engine's schedule: ``vllm`` and ``sglang`` are the simulator's default continuous batching (prefills as steps of
their own, KV allocated on demand as vLLM does); ``llama-server`` puts a new prompt into the running slots' decode
pass and splits a step into runs of busy slots (`EngineConfig.prefill_mixed`, ``slot_runs``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from scenarios.bench_files import BenchRun
from simulator.acceptance import Acceptance, iid_from_mean_length
from simulator.policies import parse_policy
from simulator.serving import EngineConfig, ServingRun, simulate
from simulator.step_costs import StepCosts
from simulator.workload import Workload

SEEDS = 8  # arrival and acceptance draws a run's simulation averages
FIT_SEEDS = 4  # the same inside a fit's searches (many simulations of one run)
CLOSED_LOOP_PASSES = 4  # passes of the send-time iteration for a client with a concurrency limit


def engine_config(engine: str, max_batch: int, runs: Sequence[BenchRun]) -> EngineConfig:
    """The simulated engine: its schedule and its batch limit (module docstring)."""
    if engine == "llama-server":
        longest = max(_longest(r) for r in runs)
        return EngineConfig(max_batch=max_batch, kv_capacity_tokens=max_batch * max(longest + 64, 512),
                            prefill_mixed=True, slot_runs=True)
    return EngineConfig(max_batch=max_batch, kv_allocation="on-demand")


def _longest(run: BenchRun) -> int:
    if run.per_request:
        return int((run.input_lens + run.output_lens).max())
    return int(round(run.input_tokens) + round(run.output_tokens))


def lengths(run: BenchRun) -> tuple[np.ndarray, np.ndarray]:
    """Each request's prompt and output tokens: the file's own, else the run's mean lengths for every request."""
    if run.per_request:
        return (np.maximum(run.input_lens.astype(np.int64), 1), np.maximum(run.output_lens.astype(np.int64), 1))
    n = run.requests
    return (np.full(n, max(1, int(round(run.input_tokens))), dtype=np.int64),
            np.full(n, max(1, int(round(run.output_tokens))), dtype=np.int64))


def paced_sends(run: BenchRun, n: int, rng: np.random.Generator) -> np.ndarray:
    """Send times of a paced run, or zeros (no pacing): vLLM's gamma gaps rescaled to end at n / rate."""
    if run.start_s is not None and len(run.start_s) == n:
        return np.sort(np.asarray(run.start_s, dtype=float))
    if run.rate_per_s is None:
        return np.zeros(n)
    rate, b = run.rate_per_s, run.burstiness
    gaps = np.full(n, 1.0 / rate) if math.isinf(b) else rng.gamma(b, 1.0 / (rate * b), n)
    t = np.cumsum(gaps)
    t *= (n / rate) / t[-1]
    return t - t[0]


def run_acceptance(run: BenchRun) -> tuple[Acceptance, str] | None:
    """A speculative run's acceptance from its counters or SGLang's accept_length; None without either."""
    c = run.counters
    if c.get("drafted"):
        drafts = c.get("drafts") or c["drafted"] / run.k
        model = iid_from_mean_length(min(1.0 + c["accepted"] / drafts, run.k + 1.0), run.k)
        return model, (f"{run.label}: counters, {c['accepted']:.0f} of {c['drafted']:.0f} drafted tokens accepted "
                       f"-> iid alpha {model.alpha:.3f} at k = {run.k}")
    if run.accept_length:
        model = iid_from_mean_length(min(run.accept_length, run.k + 1.0), run.k)
        return model, (f"{run.label}: accept_length {run.accept_length:.2f} -> iid alpha {model.alpha:.3f} at "
                       f"k = {run.k}")
    return None


def own_acceptance(run: BenchRun) -> Acceptance | None:
    """What a speculative run measured of its own acceptance: its requests' traces (request by request), else its
    counters' or accept_length's mean; None where it measured neither."""
    if not run.speculative:
        return None
    if run.trace is not None:
        return run.trace
    found = run_acceptance(run)
    return found[0] if found is not None else None


@dataclass(frozen=True)
class Replayed:
    """A run's metrics as its client would report them, one simulation."""

    throughput_tokens_per_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    mean_batch: float  # time-weighted over decode steps
    tokens_per_step: float  # per sequence and step (E[A + 1] realised)

    @staticmethod
    def of(run: ServingRun, sends: np.ndarray) -> Replayed:
        w = run.workload
        out = w.output_tokens
        ttft = run.first_token_s - sends
        many = out > 1
        tpot = (run.finish_s[many] - run.first_token_s[many]) / (out[many] - 1)
        span = float(run.finish_s.max() - sends.min())
        dur = run.step_duration_s
        seq_steps = float(run.step_batch.sum())
        return Replayed(float(out.sum()) / span if span > 0 else math.nan,
                        float(np.percentile(ttft, 50)), float(np.percentile(ttft, 99)),
                        float(np.percentile(tpot, 50)) if many.any() else math.nan,
                        float(np.percentile(tpot, 99)) if many.any() else math.nan,
                        float((run.step_batch * dur).sum() / dur.sum()) if len(dur) else 0.0,
                        float(run.step_tokens.sum() / seq_steps) if seq_steps else 1.0)


FIELDS = tuple(Replayed.__dataclass_fields__)


def mean_of(reps: Sequence[Replayed]) -> Replayed:
    return Replayed(*(float(np.nanmean([getattr(r, f) for r in reps])) for f in FIELDS))


def replay_once(run: BenchRun, costs: StepCosts, acceptance: Acceptance | None, config: EngineConfig,
                rng: np.random.Generator) -> Replayed:
    """One simulation of `run` (one arrival draw, one acceptance draw)."""
    sim, _ = simulate_run(run, costs, acceptance, config, rng)
    return Replayed.of(sim, sim.workload.arrival_s)


def request_tpots(run: BenchRun, costs: StepCosts, acceptance: Acceptance | None, config: EngineConfig,
                  seed: int) -> np.ndarray:
    """Each request's TPOT in one simulation of `run`, in the run's own request order (send order): request by
    request against the run's where its send times are kept (then a plain run's replay draws nothing)."""
    sim, order = simulate_run(run, costs, acceptance, config, np.random.default_rng([seed, 0]))
    out = sim.workload.output_tokens
    tpot = np.full(len(order), np.nan)
    tpot[order] = np.where(out > 1, (sim.finish_s - sim.first_token_s) / np.maximum(out - 1, 1), np.nan)
    return tpot


def simulate_run(run: BenchRun, costs: StepCosts, acceptance: Acceptance | None, config: EngineConfig,
                 rng: np.random.Generator) -> tuple[ServingRun, np.ndarray]:
    """One simulation of `run` and the order of its workload (workload request i is the run's request order[i])."""
    prompt, output = lengths(run)
    n = len(prompt)
    paced = paced_sends(run, n, rng)
    policy = parse_policy(run.policy, acceptance) if run.speculative else parse_policy("off", acceptance)
    limit = run.max_concurrency
    if limit is not None and limit < n:
        config = replace(config, max_batch=min(config.max_batch, limit))
    sends = paced
    own = own_acceptance(run)
    state = rng.bit_generator.state
    passes = CLOSED_LOOP_PASSES if limit is not None and limit < n else 1
    for i in range(passes):
        rng.bit_generator.state = state  # every pass draws the same acceptance: only the send times move
        order = np.argsort(sends, kind="stable")
        accepted = own or acceptance
        if own is not None and run.trace is not None:  # each request's own acceptance, in the workload's order
            accepted = replace(run.trace, yields=tuple(run.trace.yields[j] for j in order))
        if accepted is not acceptance:
            policy = parse_policy(run.policy, accepted)
        sim = simulate(Workload(sends[order], prompt[order], output[order], run.label), costs, policy, accepted,
                       rng, config)
        if i + 1 < passes:
            done = np.sort(sim.finish_s)
            sends = paced.copy()
            sends[limit:] = np.maximum(paced[limit:], done[: n - limit])
    return sim, order


def replay(run: BenchRun, costs: StepCosts, acceptance: Acceptance | None, config: EngineConfig, seed: int,
           fitting: bool = False) -> Replayed:
    """`run` simulated `SEEDS` times (`FIT_SEEDS` inside a fit's search; arrivals and acceptance drawn anew each
    time), its metrics averaged."""
    seeds = FIT_SEEDS if fitting else SEEDS
    reps = [replay_once(run, costs, acceptance, config, np.random.default_rng([seed, i])) for i in range(seeds)]
    return mean_of(reps)
