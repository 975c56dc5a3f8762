"""What a serving run achieved: throughput, latency percentiles, goodput under an SLO, acceptance.

Definitions (those of vLLM's benchmark_serving and DistServe):

- TTFT: first token time - arrival (queueing + prefill);
- TPOT: (finish - first token) / (output tokens - 1), per request with more than one output token;
- end-to-end latency: finish - arrival;
- an SLO (TPOT and/or TTFT limits) is *attained* by a request that meets every limit given; goodput is the number
  of such requests per second of the run, and attainment their fraction;
- throughput: output tokens per second from the first arrival to the last finish;
- acceptance rate: accepted draft tokens / drafted tokens (vLLM's `spec_decode` draft acceptance rate), over
  sequence-steps that speculated;
- preemptions: requests whose KV cache was dropped to make room (on-demand allocation), each counted every time.

Latency percentiles skip the first ``warmup_fraction`` of requests (by arrival), which meet an empty server.
A rate is *sustained* when the requests still waiting at the last arrival are at most ``overload_fraction`` of all
requests: past capacity, the queue grows in proportion to the run, while below it stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import SpecsimError
from .serving import ServingRun

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLO:
    tpot_s: float | None = None
    ttft_s: float | None = None

    def __post_init__(self) -> None:
        for name, v in (("TPOT", self.tpot_s), ("TTFT", self.ttft_s)):
            if v is not None and not (v > 0 and np.isfinite(v)):
                raise SpecsimError(f"the {name} SLO must be a positive number of milliseconds, got {v}")

    @property
    def label(self) -> str:
        parts = [f"TPOT <= {1e3 * self.tpot_s:g} ms"] if self.tpot_s else []
        parts += [f"TTFT <= {1e3 * self.ttft_s:g} ms"] if self.ttft_s else []
        return " and ".join(parts) or "none"


@dataclass(frozen=True)
class ServingMetrics:
    policy: str
    rate_per_s: float  # offered request rate (all engines together)
    engines: int
    requests: int
    duration_s: float
    throughput_tokens_per_s: float
    requests_per_s: float
    ttft_s: tuple[float, float, float]  # p50, p90, p99
    tpot_s: tuple[float, float, float]
    e2e_s: tuple[float, float, float]
    slo_attainment: float
    goodput_requests_per_s: float
    sustained: bool
    waiting_at_last_arrival: int
    mean_batch: float  # time-weighted over decode steps
    mean_drafted: float  # drafted tokens per sequence-step (k, or tree nodes)
    tokens_per_step: float  # emitted tokens per sequence-step (E[A + 1] realised; 1 for plain decoding)
    acceptance_rate: float | None  # accepted / drafted over speculative sequence-steps
    decode_steps: int
    preemptions: int = 0  # requests preempted and recomputed (on-demand KV allocation)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            d[name] = dict(zip((f"p{p}" for p in PERCENTILES), d[name]))
        return d


def summarize(run: ServingRun, slo: SLO = SLO(), rate_per_s: float | None = None, warmup_fraction: float = 0.1,
              overload_fraction: float = 0.05) -> ServingMetrics:
    w = run.workload
    n = len(w)
    keep = np.arange(n) >= int(warmup_fraction * n) if n >= 20 else np.ones(n, dtype=bool)
    ttft = run.first_token_s - w.arrival_s
    e2e = run.finish_s - w.arrival_s
    multi = w.output_tokens > 1
    tpot = np.where(multi, (run.finish_s - run.first_token_s) / np.maximum(w.output_tokens - 1, 1), 0.0)
    meets = np.ones(n, dtype=bool)
    if slo.tpot_s is not None:
        meets &= tpot <= slo.tpot_s
    if slo.ttft_s is not None:
        meets &= ttft <= slo.ttft_s
    duration = float(run.finish_s.max() - w.arrival_s.min())

    steps = run.step_totals
    seq_steps, drafted = steps.sequence_steps, steps.drafted
    accepted = sum(int(np.dot(np.arange(len(h)), h)) for h in run.accepted_hist.values())
    return ServingMetrics(
        policy=run.policy,
        rate_per_s=float(rate_per_s if rate_per_s is not None else w.mean_rate_per_s),
        engines=run.engines,
        requests=n,
        duration_s=duration,
        throughput_tokens_per_s=float(w.output_tokens.sum() / duration) if duration > 0 else float("inf"),
        requests_per_s=n / duration if duration > 0 else float("inf"),
        ttft_s=_percentiles(ttft[keep]),
        tpot_s=_percentiles(tpot[multi & keep]),
        e2e_s=_percentiles(e2e[keep]),
        slo_attainment=float(meets[keep].mean()),
        goodput_requests_per_s=float(meets.sum() / duration) if duration > 0 else 0.0,
        sustained=run.waiting_at_last_arrival <= overload_fraction * n,
        waiting_at_last_arrival=run.waiting_at_last_arrival,
        mean_batch=steps.batch_duration_s / steps.duration_s if steps.duration_s > 0 else 0.0,
        mean_drafted=drafted / seq_steps if seq_steps else 0.0,
        tokens_per_step=steps.tokens / seq_steps if seq_steps else 0.0,
        acceptance_rate=accepted / drafted if drafted else None,
        decode_steps=steps.steps,
        preemptions=run.preemptions,
    )


def _percentiles(x: np.ndarray) -> tuple[float, float, float]:
    """p50, p90, p99 of `x` (NaN for no values)."""
    if not len(x):
        return (float("nan"),) * 3
    p50, p90, p99 = (float(v) for v in np.percentile(x, PERCENTILES))
    return p50, p90, p99


def decode_tokens_per_s(run: ServingRun, batch: int) -> float:
    """Tokens per second over the decode steps that ran exactly `batch` sequences (a static batch's full phase)."""
    steps = run.step_totals
    if batch >= len(steps.steps_by_batch) or not steps.steps_by_batch[batch]:
        raise SpecsimError(f"no decode step ran a batch of {batch}")
    return float(steps.tokens_by_batch[batch] / steps.duration_by_batch_s[batch])
