"""Requests a server sees: when they arrive, how long their prompts are, how many tokens they ask for.

A workload is three aligned arrays, sorted by arrival time. Arrival processes are drawn at unit rate and scaled
(`Workload.at_rate`), so one draw serves every request rate with common random numbers: the same requests, the same
lengths, only the clock runs faster.

Length specs (``parse_lengths``): ``512`` (every request), ``128..1024`` (uniform integers), ``exp:256``
(geometric with that mean, at least 1), or pairs replayed from a trace (see ``scenarios.traces``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import SpecsimError
from .limits import MAX_CONTEXT, WHY_CONTEXT


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts: fixed, uniform between two bounds, or geometric with a mean."""

    kind: str  # "fixed", "uniform" or "exp"
    low: int
    high: int = 0  # uniform: inclusive upper bound; exp: the mean

    @property
    def mean(self) -> float:
        return {"fixed": float(self.low), "uniform": (self.low + self.high) / 2, "exp": float(self.high)}[self.kind]

    @property
    def max(self) -> float:
        return {"fixed": self.low, "uniform": self.high, "exp": np.inf}[self.kind]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.low, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high + 1, size=n)
        return rng.geometric(1.0 / self.high, size=n).astype(np.int64)

    @property
    def spec(self) -> str:
        return {"fixed": f"{self.low}", "uniform": f"{self.low}..{self.high}", "exp": f"exp:{self.high}"}[self.kind]


def parse_lengths(text: str, what: str = "length") -> Lengths:
    """``512``, ``128..1024`` or ``exp:256``; every count at least 1 and at most MAX_CONTEXT."""
    s = text.strip()

    def bounded(n: int) -> int:
        if n > MAX_CONTEXT:
            raise SpecsimError(f"{what} {n:,} tokens is above the largest, {MAX_CONTEXT:,}: {WHY_CONTEXT}")
        return n

    try:
        if s.startswith("exp:"):
            mean = bounded(int(s[4:]))
            if mean < 1:
                raise ValueError
            return Lengths("exp", 1, mean)
        if ".." in s:
            lo, hi = (bounded(int(x)) for x in s.split("..", 1))
            if not 1 <= lo <= hi:
                raise ValueError
            return Lengths("uniform", lo, hi)
        n = bounded(int(s))
        if n < 1:
            raise ValueError
        return Lengths("fixed", n)
    except SpecsimError:
        raise
    except ValueError:
        raise SpecsimError(f"{what} {text!r} is not a token count: use N, A..B (uniform, 1 <= A <= B) or exp:MEAN "
                           "(all at least 1)") from None


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests sorted by arrival: times in seconds, prompt and output token counts (output >= 1)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    label: str = ""
    # the prompts' token ids, where known (a validation's real prompts): llama-server chooses a slot by them
    # (`simulator.scheduler.SLOT_PROMPT_SIMILARITY`)
    prompt_ids: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.prompt_tokens) == len(self.output_tokens) == n) or n == 0:
            raise SpecsimError("a workload needs at least one request and equally long arrival, prompt and output "
                               "arrays")
        if np.any(np.diff(self.arrival_s) < 0) or self.arrival_s[0] < 0:
            raise SpecsimError("request arrival times must be non-negative and sorted")
        if self.prompt_tokens.min() < 1 or self.output_tokens.min() < 1:
            raise SpecsimError("every request needs at least one prompt token and one output token")
        if self.prompt_ids is not None and [len(p) for p in self.prompt_ids] != self.prompt_tokens.tolist():
            raise SpecsimError("a workload's prompt token ids must be as many as its prompt token counts say")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def mean_rate_per_s(self) -> float:
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        return (len(self) - 1) / span if span > 0 else float("inf")

    def at_rate(self, rate_per_s: float) -> Workload:
        """The same requests with the clock scaled so that the mean arrival rate is `rate_per_s` (for a workload
        drawn at unit rate)."""
        if not rate_per_s > 0 or not np.isfinite(rate_per_s):
            raise SpecsimError(f"request rate must be > 0 requests/s, got {rate_per_s:g}")
        return Workload(self.arrival_s / rate_per_s, self.prompt_tokens, self.output_tokens,
                        f"{self.label} at {rate_per_s:g} req/s", self.prompt_ids)

    def head(self, n: int) -> Workload:
        return Workload(self.arrival_s[:n], self.prompt_tokens[:n], self.output_tokens[:n], self.label,
                        None if self.prompt_ids is None else self.prompt_ids[:n])


def unit_rate_arrivals(process: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of `n` requests at a mean rate of 1 per second, the first at an exponential gap from 0.

    ``poisson``: exponential gaps. ``gamma:CV``: gamma gaps with coefficient of variation CV (CV > 1 is bursty,
    CV = 1 is Poisson, CV < 1 is smoother than Poisson).
    """
    if process == "poisson":
        gaps = rng.exponential(1.0, size=n)
    elif process.startswith("gamma:"):
        try:
            cv = float(process[6:])
        except ValueError:
            cv = -1.0
        if not cv > 0:
            raise SpecsimError(f"arrivals {process!r}: give the gaps' coefficient of variation, e.g. gamma:2 "
                               "(> 1 is burstier than Poisson)")
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / shape, size=n)  # mean 1, variance cv^2
    else:
        raise SpecsimError(f"unknown arrival process {process!r}; use poisson, gamma:CV or trace:FILE")
    return np.cumsum(gaps)


def synthetic(process: str, n: int, prompt: Lengths, output: Lengths, rng: np.random.Generator) -> Workload:
    """`n` requests at unit rate (scale with ``at_rate``)."""
    if n < 1:
        raise SpecsimError(f"simulate at least one request, got {n}")
    arrivals = unit_rate_arrivals(process, n, rng)
    return Workload(arrivals, prompt.sample(rng, n), output.sample(rng, n),
                    f"{process} arrivals, prompt {prompt.spec}, output {output.spec} tokens")


def static_batch(batch: int, prompt_tokens: int, output_tokens: int) -> Workload:
    """`batch` identical requests all arriving at time 0: the analytic model's static batch."""
    return Workload(np.zeros(batch), np.full(batch, prompt_tokens), np.full(batch, output_tokens),
                    f"static batch of {batch}, prompt {prompt_tokens}, output {output_tokens} tokens")


def resampled(process: str, n: int, prompts: np.ndarray, outputs: np.ndarray, rng: np.random.Generator,
              source: str = "trace") -> Workload:
    """`n` requests at unit rate whose (prompt, output) pairs are drawn with replacement from observed pairs."""
    if n < 1:
        raise SpecsimError(f"simulate at least one request, got {n}")
    arrivals = unit_rate_arrivals(process, n, rng)
    pick = rng.integers(len(prompts), size=n)
    return Workload(arrivals, np.asarray(prompts)[pick], np.asarray(outputs)[pick],
                    f"{process} arrivals, lengths from {source}")
