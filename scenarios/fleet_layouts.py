"""`specsim fleet`: the fewest GPUs that carry a load within an SLO, among aggregated engines and disaggregated
prefill + decode pools, each engine's GPUs laid out by TP, EP and DP attention, with and without speculation.

The search, per policy (each of --policy: off, and a speculating one such as adaptive, whose k follows the batch):

- **aggregated**: for each layout, the highest rate one engine sustains within the SLO (`simulator.capacity.max_rate`,
  TTFT and TPOT), and ceil(load / rate) engines;
- **disaggregated**: for each layout, the highest rate one prefill engine sustains within the TTFT SLO (its queue, its
  pass, the KV transfer; simulated) and one decode engine within the TPOT SLO in steady state
  (`simulator.disaggregated.decode_capacity`, k chosen per batch; speculating there only); the layouts needing the
  fewest GPUs for the load, ceil(load / rate) engines each, then the two pools simulated together at the load
  (`simulator.disaggregated`) and an engine added to the pool whose SLO fails until they meet it.

Layouts: an MoE target's engines of 8 GPUs (TP 8; DP attention 8 with EP 8), and 16, 32, 64 (DP attention with EP as
wide as the engine), those whose weights fit and no larger than --gpus; a dense target's TP 1, 2, 4, 8.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from scenarios.layouts import apply_layout, layout_words
from scenarios.serving_scenario import ServingOptions, build_scenario
from simulator import SpecsimError
from simulator.capacity import Scenario, max_rate, meets
from simulator.disaggregated import Disaggregated, DisaggregatedScenario, KvLink, decode_capacity, prefill_pool
from simulator.metrics import SLO, ServingMetrics
from simulator.serving import engine_kv_tokens
from simulator.step_costs import StepCosts

# A prompt's KV cache from a prefill GPU to a decode GPU: one 400 Gb/s NIC each (ConnectX-7 on DGX H100/H200/B200),
# the 0.88 of it DeepEP's RDMA reaches in AIConfigurator's H100 tables; 1 ms to set a transfer up (assumed: NIXL's
# and Mooncake's handshake and first write, not measured here)
KV_LINK = KvLink(50e9 * 0.88, 1e-3, "400 Gb/s RDMA at 0.88, 1 ms a transfer (scenarios/fleet_layouts.py)")
MAX_EXTRA = 3  # engines added to a pool after the joint simulation before giving up


@dataclass(frozen=True)
class Layout:
    tp: int
    ep: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp

    @property
    def label(self) -> str:
        return layout_words(self.tp, self.ep, self.dp)


@dataclass(frozen=True)
class Answer:
    kind: str  # "aggregated" or "disaggregated"
    policy: str
    gpus: int
    engines: tuple[tuple[str, int, Layout], ...]  # (role, engines, layout)
    rate_per_engine: tuple[float, ...]  # per role: the highest rate one engine sustains (req/s)
    metrics: ServingMetrics | None  # at the load (disaggregated: the joint simulation); None: per-engine only
    why: str = ""

    @property
    def text(self) -> str:
        return " + ".join(f"{n} x {role} ({lay.label})" for role, n, lay in self.engines)


def candidate_layouts(moe: bool, max_gpus: int) -> list[Layout]:
    if not moe:
        return [Layout(t) for t in (1, 2, 4, 8) if t <= max_gpus]
    out = [Layout(8), Layout(8, 8, 8)] + [Layout(g, g, g) for g in (16, 32, 64)]
    return [lay for lay in out if lay.gpus <= max_gpus]


@dataclass(frozen=True)
class PrefillScenario:
    """One prefill engine alone, judged on TTFT to the KV's arrival (`max_rate` searches it as an engine)."""

    costs: StepCosts
    workload: Any
    kv_bytes_per_token: float
    max_prefill_tokens: int
    slo: SLO

    def run(self, policy: Any, rate_per_s: float, engines: int = 1, router: str = "") -> tuple[None, Any]:
        w = self.workload.at_rate(rate_per_s)
        done, _ = prefill_pool(w, self.costs, engines, self.max_prefill_tokens)
        ttft = done + KV_LINK.transfer_s(w.prompt_tokens * self.kv_bytes_per_token) - w.arrival_s
        keep = np.arange(len(w)) >= len(w) // 10
        ok = ttft[keep] <= (self.slo.ttft_s if self.slo.ttft_s is not None else math.inf)
        waiting = int(np.sum(done > w.arrival_s[-1]))
        return None, _Judged(bool(waiting <= 0.05 * len(w)), float(ok.mean()))


@dataclass(frozen=True)
class _Judged:
    sustained: bool
    slo_attainment: float


def plan_fleet(setup: Any, hw_key: str, serving: ServingOptions, load_per_s: float, max_gpus: int,
               attainment: float, progress: Callable[[str, int], Any]) -> list[Answer]:
    """Every policy's best aggregated and best disaggregated fleet for the load (module docstring)."""
    if serving.slo_ttft_s is None or serving.slo_tpot_s is None:
        raise SpecsimError("fleet plans for a TTFT and a TPOT SLO: give --slo-ttft-ms and --slo-tpot-ms")
    full = setup.target
    layouts = candidate_layouts(full.is_moe, max_gpus)
    if not layouts:
        raise SpecsimError(f"--gpus {max_gpus} is smaller than any engine fleet lays out for {full.name} (an MoE "
                           "target's engines have 8, 16, 32 or 64 GPUs): give --gpus 8 or more")
    built: list[tuple[Layout, Scenario, list]] = []
    skipped = []
    for lay in layouts:
        try:
            s = apply_layout(setup, hw_key, lay.tp, lay.ep, lay.dp) if lay.gpus > 1 else setup
            o = replace(serving, max_batch=serving.max_batch * lay.dp)  # --max-batch is a DP group's
            sc, policies = build_scenario(s.cost, s.target, s.draft, s.acceptance, o)
            built.append((lay, sc, policies))
        except SpecsimError as e:
            skipped.append(f"{lay.label}: {e}")
    if not built:
        raise SpecsimError(f"no layout of at most {max_gpus} GPUs holds {full.name} and a request: "
                           + "; ".join(skipped))
    policies = built[0][2]
    ttft_only = SLO(None, serving.slo_ttft_s)
    out = []
    with progress("searching layouts", len(built) * (2 * len(policies) + 1)) as bar:
        prefill = []  # (gpus for the load, layout, rate, costs)
        for lay, sc, _ in built:
            ps = PrefillScenario(sc.costs, sc.workload, full.kv_bytes_per_token, serving.max_prefill_tokens,
                                 ttft_only)
            cap = max_rate(ps, policies[0], attainment).rate_per_s
            bar.update(1)
            if cap > 0:
                prefill.append((math.ceil(load_per_s / cap) * lay.gpus, lay, cap, sc.costs))
        for i, policy in enumerate(policies):
            agg, dec = [], []
            for lay, sc, pols in built:
                cap = max_rate(sc, pols[i], attainment)
                bar.update(1)
                if cap.rate_per_s > 0:
                    agg.append((math.ceil(load_per_s / cap.rate_per_s) * lay.gpus, lay, cap))
                w = sc.workload
                dcap = decode_capacity(sc.costs, pols[i], sc.acceptance, serving.slo_tpot_s,
                                       float(np.mean(w.prompt_tokens)), float(np.mean(w.output_tokens)),
                                       sc.config.max_batch, engine_kv_tokens(w, sc.costs, pols[i], sc.config))
                bar.update(1)
                if dcap.rate_per_s > 0:
                    dec.append((math.ceil(load_per_s / dcap.rate_per_s) * lay.gpus, lay, dcap, sc))
            if agg:
                g, lay, cap = min(agg, key=lambda a: (a[0], a[1].gpus))
                n = g // lay.gpus
                out.append(Answer("aggregated", policy.label, g, (("engine", n, lay),), (cap.rate_per_s,),
                                  cap.metrics))
            if prefill and dec:
                out.append(_joint(min(prefill, key=lambda a: a[0]), min(dec, key=lambda a: a[0]), pols[i],
                                  policy.label, full.kv_bytes_per_token, serving, load_per_s, attainment))
    return out


def _joint(prefill: tuple, decode: tuple, policy: Any, label: str, kv_bytes: float, serving: ServingOptions,
           load_per_s: float, attainment: float) -> Answer:
    """The two pools together at the load, an engine added where the SLO fails (TTFT: prefill; TPOT: decode)."""
    _, lp, rp, pcosts = prefill
    _, ld, dcap, sc = decode
    P, D = math.ceil(load_per_s / rp), math.ceil(load_per_s / dcap.rate_per_s)
    m = None
    for _ in range(MAX_EXTRA + 1):
        fleet = Disaggregated(pcosts, sc.costs, P, D, kv_bytes, KV_LINK, sc.config, serving.max_prefill_tokens)
        m = DisaggregatedScenario(fleet, sc.workload, sc.acceptance, sc.seed, sc.slo).run(policy, load_per_s)[1]
        if meets(m, attainment):
            break
        ttft_bad = m.ttft_s[1] > (serving.slo_ttft_s or math.inf)
        P, D = (P + 1, D) if ttft_bad else (P, D + 1)
    return Answer("disaggregated", label, P * lp.gpus + D * ld.gpus, (("prefill", P, lp), ("decode", D, ld)),
                  (rp, dcap.rate_per_s), m)


def verdict(answers: list[Answer]) -> list[str]:
    """Which fleet needs the fewest GPUs, and why, in a few lines."""
    if not answers:
        return ["no layout meets the SLO at any rate tried"]
    best = min(answers, key=lambda a: a.gpus)
    lines = [f"fewest GPUs: {best.gpus}, {best.kind}, {best.policy}: {best.text}"]
    for a in answers:
        if a is best:
            continue
        if a.kind == best.kind:
            lines.append(f"  against {a.policy} ({a.gpus} GPUs): {_rates_said(best, a)}")
        elif a.policy == best.policy:
            lines.append(f"  against {a.kind} ({a.gpus} GPUs): {_rates_said(best, a)}")
    return lines


def _rates_said(best: Answer, other: Answer) -> str:
    def per_gpu(a: Answer) -> str:
        return ", ".join(f"{role} {r / lay.gpus:.3g} req/s a GPU" for (role, _, lay), r in
                         zip(a.engines, a.rate_per_engine))

    batch = f"; mean decode batch {best.metrics.mean_batch:.0f}" if best.metrics else ""
    return f"{per_gpu(best)} against {per_gpu(other)}{batch}"
