"""Disaggregated serving: a prefill pool and a decode pool, the prompt's KV cache carried between them.

Scenario: requests arrive at a pool of ``prefill_engines`` engines, each taking the waiting prompts first come,
first served, up to ``max_prefill_tokens`` a pass (one prompt at least), one pass at a time, its duration
`StepCosts.prefill_s` of the prefill engine's layout. When its pass ends a request's KV cache goes to the decode pool
over ``link``: ``prompt tokens x kv bytes per token`` at the link's bandwidth plus its latency (NIXL / Mooncake over
RDMA in SGLang's and Dynamo's PD). It then joins a decode engine (least loaded), which admits it as a running
sequence with no pass of its own (its first token came from the prefill), and decodes it as `simulator.serving`
decodes, the speculation policy choosing k for each batch. Speculation runs on the decode pool only.

TTFT is the arrival to the KV's arrival at the decode engine that admits it (prefill queue, prefill pass, transfer,
decode admission); TPOT is the decode pool's. The two pools are simulated one after the other, the decode pool on
the times the KV caches arrive, which is exact: nothing in the decode pool feeds back into the prefill pool.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

import numpy as np

from . import SpecsimError
from .acceptance import Acceptance
from .metrics import SLO, ServingMetrics, summarize
from .policies import Policy
from .serving import EngineConfig, ServingRun, simulate
from .step_costs import StepCosts
from .workload import Workload


@dataclass(frozen=True)
class KvLink:
    """The path a prompt's KV cache takes from a prefill engine to a decode engine."""

    bytes_per_s: float  # achieved, per transfer
    latency_s: float  # per transfer (the handshake, the first RDMA write)
    source: str = ""

    def transfer_s(self, nbytes: np.ndarray) -> np.ndarray:
        return self.latency_s + np.asarray(nbytes, dtype=float) / self.bytes_per_s


class DecodeOnlyCosts(StepCosts):
    """A decode engine's steps: a request arrives with its KV cache computed, so admitting it runs no pass."""

    def prefill_s(self, n_requests: int, prompt_tokens_mean: float, with_draft: bool) -> float:
        return 0.0

    def riding_prefill_s(self, decode_rows: int, prompt_tokens: int) -> float:
        return 0.0


def decode_only(costs: StepCosts) -> DecodeOnlyCosts:
    view = DecodeOnlyCosts.__new__(DecodeOnlyCosts)
    view.__dict__.update(costs.__dict__)
    view._prefill = {}
    return view


def prefill_pool(workload: Workload, costs: StepCosts, engines: int, max_prefill_tokens: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """When each request's prefill ends, and each pass's duration: `engines` servers, first come first served, a
    free engine taking every waiting prompt up to the token budget."""
    if engines < 1:
        raise SpecsimError(f"a prefill pool needs at least one engine, got {engines}")
    arrival, prompt = workload.arrival_s.tolist(), workload.prompt_tokens.tolist()
    done = np.empty(len(arrival))
    free = [0.0] * engines  # a heap of the times the engines come free
    durations = []
    i, n = 0, len(arrival)
    while i < n:
        start = max(heapq.heappop(free), arrival[i])
        j, tokens = i + 1, prompt[i]
        while j < n and arrival[j] <= start and tokens + prompt[j] <= max_prefill_tokens:
            tokens += prompt[j]
            j += 1
        d = costs.prefill_s(j - i, tokens / (j - i), False)
        done[i:j] = start + d
        durations.append(d)
        heapq.heappush(free, start + d)
        i = j
    return done, np.array(durations)


@dataclass(frozen=True)
class Disaggregated:
    """Two pools and the link between them (module docstring)."""

    prefill_costs: StepCosts
    decode_costs: StepCosts
    prefill_engines: int
    decode_engines: int
    kv_bytes_per_token: float  # the whole model's, every layer (what leaves the prefill engine for one token)
    link: KvLink
    decode_config: EngineConfig = EngineConfig()
    max_prefill_tokens: int = 16384  # a prefill pass's prompt tokens (SGLang's --chunked-prefill-size on PD)

    def simulate(self, workload: Workload, policy: Policy, acceptance: Acceptance,
                 rng: np.random.Generator) -> ServingRun:
        """Serve `workload`: the prefill pool, the transfers, then the decode pool running `policy`."""
        prefilled, durations = prefill_pool(workload, self.prefill_costs, self.prefill_engines,
                                            self.max_prefill_tokens)
        ready = prefilled + self.link.transfer_s(workload.prompt_tokens * self.kv_bytes_per_token)
        order = np.argsort(ready, kind="stable")
        decoding = Workload(ready[order], workload.prompt_tokens[order], workload.output_tokens[order],
                            workload.label)
        run = simulate(decoding, decode_only(self.decode_costs), policy, acceptance, rng, self.decode_config,
                       self.decode_engines)
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        waiting = int(np.sum(prefilled > workload.arrival_s[-1]))  # prompts still queued at the last arrival
        return replace(run, workload=workload, first_token_s=run.first_token_s[back], finish_s=run.finish_s[back],
                       engine_of=run.engine_of[back], prefill_duration_s=durations,
                       waiting_at_last_arrival=max(run.waiting_at_last_arrival, waiting))


@dataclass(frozen=True)
class DisaggregatedScenario:
    """`simulator.capacity.Scenario`'s face for a disaggregated fleet (`max_rate` searches it as it searches one
    engine): the same unit-rate workload and seed at every rate."""

    fleet: Disaggregated
    workload: Workload
    acceptance: Acceptance
    seed: int = 0
    slo: SLO = SLO()

    def run(self, policy: Policy, rate_per_s: float | None, engines: int = 1,
            router: str = "least-loaded") -> tuple[ServingRun, ServingMetrics]:
        workload = self.workload if rate_per_s is None else self.workload.at_rate(rate_per_s)
        run = self.fleet.simulate(workload, policy, self.acceptance, np.random.default_rng(self.seed))
        return run, summarize(run, self.slo, rate_per_s)


@dataclass(frozen=True)
class DecodeCapacity:
    rate_per_s: float  # requests/s one decode engine carries in steady state within the TPOT SLO
    batch: int  # the batch it runs there
    candidate: str  # what the policy drafts at that batch
    tpot_s: float


def decode_capacity(costs: StepCosts, policy: Policy, acceptance: Acceptance, slo_tpot_s: float,
                    prompt_tokens: float, output_tokens: float, max_batch: int, kv_tokens: int) -> DecodeCapacity:
    """A decode engine in steady state (Little's law): at batch B each step emits E[tokens] per sequence in
    `decode_s(B, context)`, so B sequences of `output_tokens` leave at B / ((output - 1) TPOT(B)) requests/s; the
    highest such rate over the batches the engine holds (max batch, KV cache) with TPOT(B) within the SLO, the
    policy's best candidate at each batch (k chosen per batch). Context: the prompt plus half the output."""
    context = prompt_tokens + output_tokens / 2
    need = prompt_tokens + output_tokens + policy.lookahead_tokens
    top = min(max_batch, int(kv_tokens // need))
    best = DecodeCapacity(0.0, 0, "", float("inf"))
    batches = sorted({*np.unique(np.geomspace(1, max(top, 1), 48).astype(int)).tolist(), top})
    for b in batches:
        if b < 1:
            continue
        for c in policy.candidates:
            tokens = 1.0 if c.is_plain else acceptance.expected_tokens(c.shape.depth)
            tpot = costs.decode_s(b, context, c) / tokens
            rate = b / (max(output_tokens - 1, 1) * tpot)
            if tpot <= slo_tpot_s and rate > best.rate_per_s:
                best = DecodeCapacity(rate, b, c.label, tpot)
    return best
