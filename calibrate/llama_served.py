"""A served stream through llama-server (continuous batching over `slots` sequences, with or without a draft), next
to the simpy simulation of the same stream from a profile fitted to llama.cpp's own passes
(`specsim validate --engine llama.cpp --serving`).

Requests arrive as a Poisson stream (seeded), each a held-out prompt asking for a fixed number of greedy tokens; a
client in this module sends each at its arrival time on its own thread and reads the streamed response, so the
first token's and the last token's times are the client's own clock. The simulator gets the same arrivals, lengths
and number of slots, the profile's cost model and measured greedy acceptance, and llama-server's schedule: one
``llama_decode`` per step over every generating slot's tokens (drafts included: the draft model drafts all slots at
once) with any pending prompt in the same batch (`EngineConfig.prefill_mixed`); its metrics are averaged over
acceptance seeds (`calibrate.served_validation.predict_run`). Before each rate plain spot checks (one request, then as
many as the slots together: `spot_drift`) say how much slower or faster the machine runs llama-server's passes than
the profile priced them minutes earlier; the simulation re-anchored by them (`CostModel.drift`) is reported beside
the one as profiled, which stays the prediction: on a shared host one round of spot checks moves from rate to rate
by more than the error it would correct, and re-anchoring made the TPOT error worse in every run tried
(docs/validation.md, llama.cpp).

Each row's miss is attributed from llama-server's own counters (``--metrics``: its ``llama_decode`` calls, busy slots
per call, drafted and accepted tokens) against the simulation's: the number of steps, the batch they ran at, the
acceptance, and the busy time per step (the time any request was in flight, over the steps).
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.llama_cpp import Server, gguf_of, threads
from simulator.metrics import ServingMetrics, summarize
from simulator.serving import EngineConfig, ServingRun
from simulator.step_costs import StepCosts
from simulator.workload import Workload


def stream_one(port: int, prompt: Sequence[int], n: int, start: float, out: dict[str, float]) -> None:
    """Send one greedy completion at `start` (perf_counter) and note when its first and last tokens came back."""
    time.sleep(max(0.0, start - time.perf_counter()))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": [list(prompt)], "n_predict": n, "temperature": 0.0, "top_k": 1, "cache_prompt": False,
            "ignore_eos": True, "samplers": ["top_k"], "stream": True}
    conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        now = time.perf_counter()
        d = json.loads(line[6:])
        if "first" not in out and (d.get("content") or d.get("tokens")):
            out["first"] = now
        if d.get("stop"):
            out["finish"] = now
            break
    conn.close()


def serve_stream(server: Server, workload: Workload, prompts: Sequence[Sequence[int]]) -> ServingRun:
    """The stream served for real: per request its first-token and finish times on the arrivals' clock."""
    t0 = time.perf_counter() + 0.5
    outs: list[dict[str, float]] = [{} for _ in range(len(workload))]
    threads = [threading.Thread(target=stream_one, args=(server.port, prompts[i], int(workload.output_tokens[i]),
                                                         t0 + float(workload.arrival_s[i]), outs[i]))
               for i in range(len(workload))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = np.array([o.get("first", np.nan) - t0 for o in outs])
    finish = np.array([o.get("finish", np.nan) - t0 for o in outs])
    empty = np.zeros(0)
    return ServingRun(workload, "measured", 1, "-", first, finish, np.zeros(len(workload), dtype=int), empty, empty,
                      empty, empty.astype(int), empty.astype(int), empty.astype(int), empty, {}, 0, 0)


@dataclass(frozen=True)
class StreamPlan:
    """What a served stream and its simulation share: the requests' prompts, the rates, the arrival gaps (one
    Poisson draw scaled to each rate), llama-server's schedule and the two policies, all from the profile and seed."""

    prompts: list[list[int]]
    rates: list[float]
    gaps: np.ndarray
    output_tokens: int
    config: EngineConfig
    policies: dict[str, Any]
    costs: StepCosts
    acceptance: Any

    def workload(self, rate: float) -> Workload:
        g = self.gaps
        return Workload(np.cumsum(g) / rate - g[0] / rate, np.array([len(p) for p in self.prompts]),
                        np.full(len(self.prompts), self.output_tokens), f"poisson {rate:g}/s",
                        tuple(tuple(p) for p in self.prompts))  # llama-server picks slots by the prompts too


def stream_plan(profile: Any, k: int, slots: int, n_requests: int, output_tokens: int, rates: Sequence[float] | None,
                seed: int) -> StreamPlan:
    """The stream `validate_llama_serving` serves: held-out prompts drawn with `seed`, and without `rates` four
    from light load to past saturation of plain decoding, as the profile predicts it."""
    from engine.builtin import encode, prompts
    from simulator.policies import PLAIN, parse_policy

    acceptance = profile.acceptance.model()
    costs = StepCosts(profile.cost_model(), profile.target, profile.draft)
    held = [encode(p) for p in prompts("heldout")]
    rng = np.random.default_rng(seed)
    pick = [held[int(i)] for i in rng.integers(0, len(held), n_requests)]
    ctx = 512
    config = EngineConfig(max_batch=slots, kv_capacity_tokens=slots * ctx, prefill_mixed=True, slot_runs=True)
    policies = {"off": parse_policy("off", acceptance), f"fixed:{k}": parse_policy(f"fixed:{k}", acceptance)}
    if not rates:
        mean_ctx = float(np.mean([len(p) for p in pick]) + output_tokens / 2)
        saturation = slots / costs.decode_s(slots, mean_ctx, PLAIN) / output_tokens
        rates = [float(f"{saturation * f:.3g}") for f in (0.2, 0.5, 0.9, 1.5)]
    return StreamPlan(pick, list(rates), rng.exponential(1.0, n_requests), output_tokens, config, policies, costs,
                      acceptance)


def validate_llama_serving(profile: Any, target_dir: str | Path, draft_dir: str | Path, k: int, slots: int,
                           n_requests: int, output_tokens: int, rates: Sequence[float] | None, seed: int,
                           progress: Any) -> dict[str, Any]:
    """Each rate, plain and a draft of k, served for real and simulated (see the module docstring)."""
    from calibrate.served_validation import predict_run

    target, draft = gguf_of(target_dir, "target"), gguf_of(draft_dir, "draft")
    plan = stream_plan(profile, k, slots, n_requests, output_tokens, rates, seed)
    pick, costs, config = plan.prompts, plan.costs, plan.config
    base = profile.cost_model()
    rows = []
    drifts: dict[float, tuple[tuple[int, float], ...]] = {}
    with progress("llama-server: a served stream per rate and policy", len(plan.rates) * 2) as bar:
        for rate in plan.rates:
            workload = plan.workload(rate)
            for name, policy in plan.policies.items():  # "off" first: its server takes the rate's spot check
                with Server(target, draft if name != "off" else None, k, ctx=config.kv_capacity_tokens,
                            slots=slots, threads=threads(profile)) as server:
                    server.complete(pick[0], 8)
                    if name == "off":
                        drifts[rate] = spot_drift(server, costs, pick[0], slots)
                    before = server.metrics()
                    run = serve_stream(server, workload, pick)
                    counters = counted(before, server.metrics(), run)
                measured = summarize(run, rate_per_s=rate)
                f = drifts[rate]
                anchored = StepCosts(replace(base, drift={m.name: f for m in (profile.target, profile.draft)}),
                                     profile.target, profile.draft)
                simulated = predict_run(workload, costs, policy, plan.acceptance, config, seed)
                anchored_run = predict_run(workload, anchored, policy, plan.acceptance, config, seed).mean
                r = row(rate, name, measured, simulated.mean, counters, simulated_counts(simulated.runs))
                r["drift"] = [list(knot) for knot in f]
                r["re_anchored"] = {"throughput": _rel(measured.throughput_tokens_per_s,
                                                       anchored_run.throughput_tokens_per_s),
                                    "tpot_p50_s": _rel(measured.tpot_s[0], anchored_run.tpot_s[0])}
                rows.append(r)
                bar.update(1)
    return summary(rows, {"engine": "llama.cpp llama-server", "threads": threads(profile), "slots": slots,
                          "requests": n_requests, "tokens": output_tokens, "k": k, "seed": seed})


def summary(rows: list[dict[str, Any]], head: dict[str, Any]) -> dict[str, Any]:
    """The report: its rows, the median row (the middle one by rate) and the median |error| over the rows."""
    med = sorted(rows, key=lambda r: r["rate_per_s"])[len(rows) // 2]
    out = {**head, "rows": rows, "median_row": {"rate_per_s": med["rate_per_s"], "policy": med["policy"]},
           "median_abs_err": {m: float(np.nanmedian([abs(r[m][2]) for r in rows]))
                              for m in ROW_METRICS}}
    if all("re_anchored" in r for r in rows):
        out["median_abs_err_re_anchored"] = {m: float(np.nanmedian([abs(r["re_anchored"][m]) for r in rows]))
                                             for m in ("throughput", "tpot_p50_s")}
    return out


def resimulate(profile: Any, report: dict[str, Any], seed: int | None = None) -> dict[str, Any]:
    """A served stream's report with its simulated side recomputed from `profile` by the current simulator, on the
    same arrivals (the report's rates, requests, tokens, k, slots and seed), against the same measurements: what a
    change to the model does to streams already served, without serving them again."""
    from calibrate.served_validation import predict_run

    seed = int(report.get("seed", 0) if seed is None else seed)
    plan = stream_plan(profile, int(report["k"]), int(report["slots"]), int(report["requests"]),
                       int(report["tokens"]), sorted({float(r["rate_per_s"]) for r in report["rows"]}), seed)
    rows = []
    for old in report["rows"]:
        workload = plan.workload(float(old["rate_per_s"]))
        sim = predict_run(workload, plan.costs, plan.policies[old["policy"]], plan.acceptance, plan.config, seed)
        measured = {key: old[key][0] for key in ROW_METRICS}
        rows.append(row_of(old["rate_per_s"], old["policy"], measured, metric_values(sim.mean),
                           {c: m[0] for c, m in old["causes"].items()}, simulated_counts(sim.runs)))
    head = {k: v for k, v in report.items() if k not in ("rows", "median_row", "median_abs_err",
                                                          "median_abs_err_re_anchored")}
    return summary(rows, head)


SPOT_TOKENS = 32


def spot_drift(server: Server, costs: Any, prompt: Sequence[int], slots: int) -> tuple[tuple[int, float], ...]:
    """How much slower (> 1) this machine runs llama-server's passes now than the profile prices them, at batch 1
    and at `slots` (plain requests sent together, decoding in the same steps): each batch's decode time per step
    less the step's priced work outside the pass, over the priced plain pass (median over the requests, three
    rounds at batch 1). Plain requests only, taken before each rate's runs; the knots re-anchor every pass of both
    models, log-linear in batch (`CostModel.drift`), as `validate --serving` re-anchors specsim's own engine by
    single passes timed at its smallest and largest batch."""
    from simulator.policies import PLAIN

    context = len(prompt) + SPOT_TOKENS / 2
    knots = []
    for b in sorted({1, slots}):
        passed = costs.cost.pass_time_s(costs.target, b, 1, int(context))
        outside = costs.decode_s(b, context, PLAIN) - passed
        ratios = [(step - outside) / passed for _ in range(3 if b == 1 else 1)
                  for step in server.steps_s([prompt] * b, SPOT_TOKENS)]
        knots.append((b, max(float(np.median(ratios)), 0.1)))
    return tuple(knots)



def busy_s(run: ServingRun) -> float:
    """Seconds during which at least one request was in flight (the union of its arrival-to-finish intervals)."""
    ok = ~np.isnan(run.finish_s)
    spans = sorted(zip(run.workload.arrival_s[ok].tolist(), run.finish_s[ok].tolist()))
    total, end = 0.0, -math.inf
    for a, f in spans:
        if f > end:
            total += f - max(a, end)
            end = f
    return total


def counted(before: dict[str, float], after: dict[str, float], run: ServingRun) -> dict[str, float]:
    """What llama-server's counters say of one served stream: steps (its ``llama_decode`` calls), busy slots per
    step, accepted per drafted token, busy seconds per step."""
    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    steps = delta("n_decode_total")
    slot_steps = (after.get("n_busy_slots_per_decode", 0.0) * after.get("n_decode_total", 0.0)
                  - before.get("n_busy_slots_per_decode", 0.0) * before.get("n_decode_total", 0.0))
    drafted = delta("spec_decode_num_draft_tokens_total")
    return {"steps": steps, "batch": slot_steps / steps if steps else math.nan,
            "acceptance": delta("spec_decode_num_accepted_tokens_total") / drafted if drafted else math.nan,
            "s_per_step": busy_s(run) / steps if steps else math.nan}


def simulated_counts(runs: Sequence[ServingRun]) -> dict[str, float]:
    """The same figures from the simulation (steps: decode steps and prefill steps of their own), seeds averaged."""
    out = []
    for r in runs:
        steps = len(r.step_time_s) + len(r.prefill_duration_s)
        spec = r.step_drafted > 0
        drafted = float((r.step_batch[spec] * r.step_drafted[spec]).sum())
        accepted = float((r.step_tokens[spec] - r.step_batch[spec]).sum())
        out.append({"steps": steps,
                    "batch": (float(r.step_batch.sum()) + len(r.prefill_duration_s)) / steps if steps else math.nan,
                    "acceptance": accepted / drafted if drafted else math.nan,
                    "s_per_step": busy_s(r) / steps if steps else math.nan})
    return {k: float(np.mean([o[k] for o in out])) for k in out[0]}


def _rel(a: float, b: float) -> float:
    return b / a - 1 if a and np.isfinite(a) and np.isfinite(b) else float("nan")


ROW_METRICS = ("throughput", "tpot_p50_s", "ttft_p50_s")


def metric_values(m: ServingMetrics) -> dict[str, float]:
    """What a row compares of a run: throughput, TPOT p50 and TTFT p50."""
    return {"throughput": m.throughput_tokens_per_s, "tpot_p50_s": m.tpot_s[0], "ttft_p50_s": m.ttft_s[0]}


def row(rate: float, policy: str, m: ServingMetrics, p: ServingMetrics, counts: dict[str, float],
        sim_counts: dict[str, float]) -> dict[str, Any]:
    return row_of(rate, policy, metric_values(m), metric_values(p), counts, sim_counts)


def row_of(rate: float, policy: str, measured: dict[str, float], predicted: dict[str, float],
           counts: dict[str, float], sim_counts: dict[str, float]) -> dict[str, Any]:
    """A report row: each metric and cause as [measured, simulated, simulated / measured - 1]."""
    return {"rate_per_s": rate, "policy": policy,
            **{k: [measured[k], predicted[k], _rel(measured[k], predicted[k])] for k in ROW_METRICS},
            "causes": {k: [counts[k], sim_counts[k], _rel(counts[k], sim_counts[k])] for k in counts}}


def format_llama_serving(report: dict[str, Any]) -> str:
    lines = [f"{report['engine']} on {report.get('threads', '?')} threads, {report['slots']} slots, "
             f"{report['requests']} requests x {report['tokens']} greedy tokens, Poisson arrivals; measured -> "
             "simulated (error)",
             f"{'rate/s':>7} {'policy':<9}{'throughput tok/s':>28}{'TPOT p50 ms':>26}{'TTFT p50 ms':>28}"]
    for r in report["rows"]:
        th, tp, tt = r["throughput"], r["tpot_p50_s"], r["ttft_p50_s"]
        lines.append(f"{r['rate_per_s']:>7.3g} {r['policy']:<9}{th[0]:>9.1f} -> {th[1]:>6.1f} ({100 * th[2]:+5.1f} %)"
                     f"{1e3 * tp[0]:>8.1f} -> {1e3 * tp[1]:>5.1f} ({100 * tp[2]:+5.1f} %)"
                     f"{1e3 * tt[0]:>8.0f} -> {1e3 * tt[1]:>5.0f} ({100 * tt[2]:+6.1f} %)")
    e, m, p = report.get("median_abs_err"), report.get("median_row"), report.get("median_abs_err_re_anchored")
    if e and m:
        lines.append(f"median |error| over the rows: throughput {100 * e['throughput']:.1f} %, TPOT p50 "
                     f"{100 * e['tpot_p50_s']:.1f} %, TTFT p50 {100 * e['ttft_p50_s']:.1f} % (the median row: "
                     f"{m['rate_per_s']:g}/s {m['policy']})")
    if p:
        fs = sorted(f for r in report["rows"] for _, f in r.get("drift", []))
        lines.append(f"re-anchored by plain spot checks before each rate (the passes ran {fs[0]:.2f}-{fs[-1]:.2f}x "
                     f"their profiled time at batch 1 and {report['slots']}): throughput "
                     f"{100 * p['throughput']:.1f} %, TPOT p50 {100 * p['tpot_p50_s']:.1f} %")
    lines += ["", "where each row's miss comes from (llama-server's counters -> the simulation's):",
              f"{'rate/s':>7} {'policy':<9}{'steps':>22}{'slots per step':>22}{'accepted/drafted':>22}"
              f"{'busy ms per step':>24}"]
    for r in report["rows"]:
        c = r.get("causes", {})
        cells = []
        for key, scale, fmt in (("steps", 1, ".0f"), ("batch", 1, ".2f"), ("acceptance", 1, ".2f"),
                                ("s_per_step", 1e3, ".2f")):
            a, b, e = c.get(key, [math.nan] * 3)
            cells.append(f"{scale * a:{fmt}} -> {scale * b:{fmt}} ({100 * e:+.0f} %)" if np.isfinite(a) else "-")
        lines.append(f"{r['rate_per_s']:>7.3g} {r['policy']:<9}{cells[0]:>22}{cells[1]:>22}{cells[2]:>22}"
                     f"{cells[3]:>24}")
    return "\n".join(lines)
