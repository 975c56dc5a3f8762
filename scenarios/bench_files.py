"""Serving-benchmark result files, read into runs the simulator can replay and be judged by.

A run is one stream a benchmark client sent to a server: its settings (request rate or concurrency, burstiness,
prompt and output lengths, number of requests, speculation and its draft length, model) and what the client measured
(output throughput, TTFT, TPOT and inter-token latency percentiles, and per request where the file keeps them).

Readers (the fields used are checked; the rest, and fields a newer version adds, are ignored):

- ``vllm``: ``vllm bench serve --save-result`` JSON (one object; ``--append-result`` writes one per line). Settings:
  ``request_rate`` ("inf": all at once), ``burstiness``, ``max_concurrency``, ``num_prompts``, ``model_id``; results:
  ``completed``, ``duration``, ``output_throughput``, ``total_input_tokens``, ``total_output_tokens``,
  ``median_/p99_ttft_ms``, ``..._tpot_ms``, ``..._itl_ms``; with ``--save-detailed`` per request ``input_lens``,
  ``output_lens``, ``ttfts`` and ``itls`` (seconds) and ``errors`` (an empty string: success).
- ``sglang``: ``python -m sglang.bench_serving`` JSONL, one run per line (``--output-file``; the runs at several
  rates append to one file). Settings: ``request_rate``, ``max_concurrency``, ``random_input_len`` /
  ``random_output_len`` for the random dataset; results as vLLM's plus ``accept_length`` (speculative runs); with
  ``--output-details`` the same per-request lists. The file names no model and no request count.
- ``guidellm``: the report ``guidellm benchmark ... --output-path X.json`` writes: one run per entry of
  ``benchmarks`` (a sweep's rates), its strategy (synchronous, concurrent, throughput, constant, poisson) and
  rate, the request counts and lengths, and ``metrics`` with ``successful`` distributions (``median``, ``mean``,
  ``percentiles.p99``) of ``time_to_first_token_ms``, ``time_per_output_token_ms``, ``inter_token_latency_ms`` and
  ``output_tokens_per_second``; per request ``requests.successful`` where kept.
- ``aiperf``: ``profile_export_aiperf.json`` (the summary: ``time_to_first_token``, ``inter_token_latency``,
  ``output_token_throughput``... each ``{unit, avg, p50, p99}``, and ``input_config``) or
  ``profile_export.jsonl`` (one record per request, ``metrics`` with values and units).

A TOML manifest names the files and supplies what a file lacks (see `read_manifest`); a run whose settings cannot be
recovered is a one-line error naming the manifest field to give.

One concept past 500 lines: the result files of four benchmark clients read into one kind of run, and the manifest
that completes them; each reader is a few small functions, kept beside the others so that they recover the same
settings the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from scenarios import tomllib
from scenarios.files import read_text
from simulator import SpecsimError

TOOLS = ("vllm", "sglang", "guidellm", "aiperf")
ENGINES = ("vllm", "sglang", "llama-server")  # whose schedule the simulation follows (`calibrate.bench_validate`)
RUN_FIELDS = ("rate", "max_concurrency", "burstiness", "input_len", "output_len", "requests", "speculative", "k",
              "model", "tool_version")  # what a manifest's [[run]] may supply


@dataclass(frozen=True)
class Latency:
    """One latency's summary over a run's requests, in seconds (NaN where the file does not give it)."""

    mean_s: float = math.nan
    p50_s: float = math.nan
    p99_s: float = math.nan


@dataclass(frozen=True, eq=False)
class BenchRun:
    """One benchmark run: where it came from, its settings and what was measured."""

    label: str  # "file.json" or "file.json#2" (the third run in a file of several)
    tool: str
    path: str
    rate_per_s: float | None  # offered request rate; None: no pacing (all at once, or closed-loop concurrency)
    max_concurrency: int | None  # requests in flight at most (the client's limit); None: unlimited
    burstiness: float  # gamma shape of the gaps: 1 Poisson, inf evenly spaced
    input_tokens: float  # mean prompt length
    output_tokens: float  # mean output length
    requests: int  # requests sent
    completed: int  # requests that succeeded
    speculative: bool
    k: int  # draft length (0 when not speculative)
    model: str
    duration_s: float
    throughput_tokens_per_s: float  # output tokens per second of the run
    ttft: Latency
    tpot: Latency
    itl: Latency
    input_lens: np.ndarray | None = None  # per successful request, where the file keeps them
    output_lens: np.ndarray | None = None
    ttfts_s: np.ndarray | None = None
    itls_s: tuple[np.ndarray, ...] | None = None  # each request's gaps between streamed tokens
    tpots_s: np.ndarray | None = None  # each request's (last token - first token) / (output - 1), where kept
    start_s: np.ndarray | None = None  # each request's send time from the run's start, where kept
    accept_length: float | None = None  # tokens per verification, bonus included (SGLang's accept_length)
    counters: Mapping[str, float] = field(default_factory=dict)  # drafted, accepted, drafts, accepted@i (Prometheus)
    file_counters: Mapping[str, float] = field(default_factory=dict)  # the same, as the result file keeps them
    fit: bool = False  # the manifest marks it for fitting (else it is judged)
    # each successful request's own acceptance, replayed request by request (a TraceAcceptance with by_request; the
    # manifest's acceptance_trace, e.g. from `calibrate.bench_traces`); None: drawn from the fitted model
    trace: Any = None
    tool_version: str = ""  # the tool's version where its file says it (GuideLLM, AIPerf) or the manifest gives it

    @property
    def per_request(self) -> bool:
        return self.input_lens is not None and self.output_lens is not None

    @property
    def request_tpots_s(self) -> np.ndarray | None:
        """Each successful request's TPOT in send order: the file's own, else its streamed gaps' mean; None where the
        file keeps neither."""
        if self.tpots_s is not None:
            return self.tpots_s
        if self.itls_s is not None and all(len(g) for g in self.itls_s):
            return np.array([float(np.mean(g)) for g in self.itls_s])
        return None

    @property
    def per_position(self) -> tuple[float, ...]:
        """Acceptance at each draft position (accepted there / drafts), where the counters give it; () otherwise."""
        c, n = self.counters, 0
        while f"accepted@{n}" in c:
            n += 1
        return tuple(c[f"accepted@{i}"] / c["drafts"] for i in range(n)) if n and c.get("drafts") else ()

    @property
    def policy(self) -> str:
        return f"fixed:{self.k}" if self.speculative else "off"

    @property
    def sent_span_s(self) -> float | None:
        """Seconds from the first send to the last, where the file keeps each request's send time."""
        if self.start_s is None or len(self.start_s) < 2:
            return None
        return float(np.max(self.start_s) - np.min(self.start_s))

    @property
    def sent_rate_per_s(self) -> float | None:
        """The rate the client really sent at (requests after the first over the span of their sends), where the
        file keeps the send times; a client that fell behind its schedule and caught up sends a burst."""
        span = self.sent_span_s
        if span is None:
            return None
        return (len(self.start_s) - 1) / span if span > 0 else math.inf

    @property
    def load(self) -> str:
        """The offered load as a label: "2/s", "c=8" or "all at once"."""
        if self.rate_per_s is not None:
            text = f"{self.rate_per_s:g}/s"
            return text + (f" c<={self.max_concurrency}" if self.max_concurrency else "")
        return f"c={self.max_concurrency}" if self.max_concurrency else "all at once"


# -- small checked readers of fields -----------------------------------------------------------------------------------

def _where(path: str, index: int | None) -> str:
    return path if index is None else f"{path} run {index + 1}"


def _number(d: Mapping[str, Any], key: str, where: str, *, low: float = 0.0, required: bool = True,
            strict: bool = False) -> float | None:
    v = d.get(key)
    if v is None:
        if required:
            raise SpecsimError(f"{where}: field {key!r} is missing")
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise SpecsimError(f"{where}: field {key!r} must be a number, got {v!r}") from None
    if math.isnan(x):
        if required:
            raise SpecsimError(f"{where}: field {key!r} is NaN")
        return None
    if x < low or (strict and x <= low) or math.isinf(x):
        sign = ">" if strict else ">="
        raise SpecsimError(f"{where}: field {key!r} must be a finite number {sign} {low:g}, got {v!r}")
    return x


def _ms(d: Mapping[str, Any], key: str, where: str) -> float:
    """A latency in milliseconds -> seconds; NaN where absent; negative is a one-line error."""
    v = _number(d, key, where, required=False)
    return math.nan if v is None else v / 1e3


def _rate(v: Any, where: str, key: str = "request_rate") -> float | None:
    """A request rate: a positive number, or "inf" / None (all at once)."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("inf", "infinity", "")):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise SpecsimError(f"{where}: field {key!r} must be a rate (requests/s) or \"inf\", got {v!r}") from None
    if math.isinf(x):
        return None
    if not x > 0:
        raise SpecsimError(f"{where}: field {key!r} must be a positive rate, got {v!r}")
    return x


def _lengths(v: Any, where: str, key: str) -> np.ndarray:
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise SpecsimError(f"{where}: field {key!r} must be a list of token counts")
    a = np.asarray(v, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise SpecsimError(f"{where}: field {key!r} holds a negative or non-finite token count")
    return a


def _seconds(v: Any, where: str, key: str) -> np.ndarray:
    if not isinstance(v, list):
        raise SpecsimError(f"{where}: field {key!r} must be a list of times in seconds")
    try:
        a = np.asarray([math.nan if x is None else x for x in v], dtype=float)
    except (TypeError, ValueError):
        raise SpecsimError(f"{where}: field {key!r} must be a list of times in seconds") from None
    if np.any(a[np.isfinite(a)] < 0):
        raise SpecsimError(f"{where}: field {key!r} holds a negative latency ({np.nanmin(a):g} s)")
    return a


def _check_latencies(where: str, **lat: Latency) -> None:
    for name, x in lat.items():
        for part in ("mean_s", "p50_s", "p99_s"):
            v = getattr(x, part)
            if v < 0:
                raise SpecsimError(f"{where}: a negative {name} ({part[:-2]} {1e3 * v:g} ms)")


def _loads(text: str, what: str) -> Any:
    """JSON (NaN and Infinity allowed, as Python's json.dump writes them), else JSON lines; one-line errors."""
    if not text.strip():
        raise SpecsimError(f"{what}: the file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as first:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                at = first if len(rows) == 0 else None
                detail = f" (line {at.lineno}: {at.msg})" if at else f" (line {n})"
                raise SpecsimError(f"{what}: not JSON or JSON lines, or cut short{detail}") from None
        return rows


# -- vLLM and SGLang: one flat object per run --------------------------------------------------------------------------

def _flat_run(d: Mapping[str, Any], tool: str, path: str, index: int | None) -> BenchRun:
    """A run of `vllm bench serve --save-result` or SGLang's `bench_serving` (their result dicts share most keys)."""
    where = _where(path, index)
    completed = int(_number(d, "completed", where) or 0)
    if completed == 0:
        raise SpecsimError(f"{where}: no request succeeded (completed = 0); nothing to compare")
    duration = _number(d, "duration", where, strict=True) or 0.0
    out_total = _number(d, "total_output_tokens", where, required=False)
    throughput = _number(d, "output_throughput", where, required=out_total is None)
    if throughput is None:
        throughput = (out_total or 0.0) / duration
    in_total = _number(d, "total_input_tokens", where, required=False)
    ttft = Latency(_ms(d, "mean_ttft_ms", where), _ms(d, "median_ttft_ms", where), _ms(d, "p99_ttft_ms", where))
    tpot = Latency(_ms(d, "mean_tpot_ms", where), _ms(d, "median_tpot_ms", where), _ms(d, "p99_tpot_ms", where))
    itl = Latency(_ms(d, "mean_itl_ms", where), _ms(d, "median_itl_ms", where), _ms(d, "p99_itl_ms", where))
    _check_latencies(where, TTFT=ttft, TPOT=tpot, ITL=itl)
    if math.isnan(ttft.p50_s):
        raise SpecsimError(f"{where}: field 'median_ttft_ms' is missing")
    if math.isnan(tpot.p50_s) and math.isnan(itl.p50_s):
        raise SpecsimError(f"{where}: fields 'median_tpot_ms' and 'median_itl_ms' are both missing")
    details = _details(d, where, completed)
    in_lens, out_lens = details.get("input_lens"), details.get("output_lens")
    input_mean = (float(in_lens.mean()) if in_lens is not None else in_total / completed if in_total else
                  _number(d, "random_input_len", where, required=False) if tool == "sglang" else None)
    output_mean = (float(out_lens.mean()) if out_lens is not None else out_total / completed if out_total else
                   _number(d, "random_output_len", where, required=False) if tool == "sglang" else None)
    requests = _number(d, "num_prompts", where, required=False)
    concurrency = _number(d, "max_concurrency", where, required=False, strict=True, low=0)
    accept = _number(d, "accept_length", where, required=False)
    counted = _file_counters(d, where) if tool == "vllm" else {}
    return BenchRun(
        label=Path(path).name + ("" if index is None else f"#{index + 1}"), tool=tool, path=path,
        rate_per_s=_rate(d.get("request_rate"), where), max_concurrency=int(concurrency) if concurrency else None,
        burstiness=_number(d, "burstiness", where, required=False, strict=True) or 1.0,
        input_tokens=input_mean or math.nan, output_tokens=output_mean or math.nan,
        requests=int(requests) if requests else _sent(d, where, completed),
        completed=completed, speculative=bool(accept and accept > 1.0) or bool(counted), k=0,
        model=str(d.get("model_id") or d.get("model") or ""), duration_s=duration, throughput_tokens_per_s=throughput,
        ttft=ttft, tpot=tpot, itl=itl, input_lens=in_lens, output_lens=out_lens, ttfts_s=details.get("ttfts"),
        itls_s=details.get("itls"), start_s=details.get("start_times"),
        accept_length=accept if accept and accept >= 1.0 else None, file_counters=counted)


def _file_counters(d: Mapping[str, Any], where: str) -> dict[str, float]:
    """The run's own speculation counters, which `vllm bench serve` writes since vLLM PR #31739 (January 2026) from its
    /metrics scrapes before and after the run: ``spec_decode_num_drafts``, ``_draft_tokens``, ``_accepted_tokens``
    and ``_per_position_acceptance_rates`` (accepted at position i / drafts), as `_counters` names them (position i's
    count as ``accepted@i``); {} where the file has none. ``_acceptance_length`` (1 + accepted / drafts) and
    ``_acceptance_rate`` (100 accepted / draft tokens) are checked against them."""
    if "spec_decode_draft_tokens" not in d and "spec_decode_num_drafts" not in d:
        return {}
    c = {name: _number(d, f"spec_decode_{key}", where) or 0.0
         for key, name in (("num_drafts", "drafts"), ("draft_tokens", "drafted"), ("accepted_tokens", "accepted"))}
    if c["drafts"] <= 0 or c["drafted"] <= 0 or c["accepted"] > c["drafted"]:
        raise SpecsimError(f"{where}: spec_decode counters {c['drafts']:.0f} drafts, {c['drafted']:.0f} draft tokens, "
                           f"{c['accepted']:.0f} accepted are not a speculative run's")
    length = _number(d, "spec_decode_acceptance_length", where, required=False)
    rate = _number(d, "spec_decode_acceptance_rate", where, required=False)
    if (length is not None and abs(length - (1 + c["accepted"] / c["drafts"])) > 1e-3) or (
            rate is not None and abs(rate - 100 * c["accepted"] / c["drafted"]) > 1e-2):
        raise SpecsimError(f"{where}: spec_decode_acceptance_length {length} / _rate {rate} do not follow from its "
                           f"{c['accepted']:.0f} accepted of {c['drafted']:.0f} draft tokens in {c['drafts']:.0f} "
                           "drafts")
    rates = d.get("spec_decode_per_position_acceptance_rates")
    if isinstance(rates, dict):  # {"0": r0, ...}
        try:
            rates = [rates[str(i)] if str(i) in rates else rates[i] for i in range(len(rates))]
        except KeyError:
            rates = None
    if rates is not None and rates != []:
        if not isinstance(rates, list) or not all(isinstance(r, (int, float)) and 0 <= r <= 1 for r in rates) or \
                abs(sum(rates) * c["drafts"] - c["accepted"]) > 0.5 + 1e-6 * c["accepted"]:
            raise SpecsimError(f"{where}: spec_decode_per_position_acceptance_rates must be fractions in [0, 1], one "
                               "per draft position, that sum to accepted / drafts")
        c.update({f"accepted@{i}": r * c["drafts"] for i, r in enumerate(rates)})
    return c


def _sent(d: Mapping[str, Any], where: str, completed: int) -> int:
    """Requests sent where the file names no count: completed + failed if it counts failures, the per-request lists'
    length if it keeps them; else 0 (unknown: the manifest must say)."""
    failed = _number(d, "failed", where, required=False)
    if failed is not None:
        return int(completed + failed)
    if isinstance(d.get("ttfts"), list):
        return len(d["ttfts"])
    return 0


def _details(d: Mapping[str, Any], where: str, completed: int) -> dict[str, Any]:
    """The per-request lists (``--save-detailed`` / ``--output-details``), the failed requests dropped."""
    keys = ("input_lens", "output_lens", "ttfts", "itls")
    if not all(k in d for k in keys):
        return {}
    n = len(d["ttfts"]) if isinstance(d["ttfts"], list) else -1
    if any(not isinstance(d[k], list) or len(d[k]) != n for k in keys):
        raise SpecsimError(f"{where}: the per-request lists {', '.join(keys)} must be lists of equal length")
    errors = d.get("errors")
    ok = np.array([not e for e in errors] if isinstance(errors, list) and len(errors) == n else [True] * n)
    out_all = _lengths(d["output_lens"], where, "output_lens")
    ok &= out_all > 0
    if not ok.any():
        raise SpecsimError(f"{where}: no request succeeded (every per-request entry failed)")
    ttfts = _seconds(d["ttfts"], where, "ttfts")
    itls = []
    for i, row in enumerate(d["itls"]):
        if ok[i]:
            itls.append(_seconds(row if isinstance(row, list) else [], where, f"itls[{i}]"))
    out = {"input_lens": _lengths(d["input_lens"], where, "input_lens")[ok], "output_lens": out_all[ok],
           "ttfts": ttfts[ok], "itls": tuple(itls)}
    if isinstance(d.get("start_times"), list) and len(d["start_times"]) == n:
        start = np.asarray(d["start_times"], dtype=float)[ok]
        out["start_times"] = start - start.min()
    return out


def _summary_runs(path: str, tool: str, what: str, shape: str, name: str) -> list[BenchRun]:
    """The runs of a file of one summary object per run (vLLM's JSON, SGLang's JSONL), each checked to be `name`'s."""
    data = _loads(read_text(path, what), path)
    rows = data if isinstance(data, list) else [data]
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise SpecsimError(f"{path}: not {shape}")
    for r in rows:
        if "median_ttft_ms" not in r or "completed" not in r:
            raise SpecsimError(f"{path}: not {name} (no 'completed', 'median_ttft_ms')")
    return [_flat_run(r, tool, path, None if len(rows) == 1 else i) for i, r in enumerate(rows)]


def read_vllm_serve(path: str) -> list[BenchRun]:
    return _summary_runs(path, "vllm", "vLLM bench serve result",
                         "the JSON of vllm bench serve --save-result (an object per run)",
                         "a vllm bench serve --save-result file")


def read_sglang_serving(path: str) -> list[BenchRun]:
    return _summary_runs(path, "sglang", "SGLang bench_serving result",
                         "SGLang bench_serving JSONL (an object per line)", "an SGLang bench_serving result")


# -- GuideLLM: a report of benchmarks, one per strategy and rate ------------------------------------------------------

def _dist(metrics: Mapping[str, Any], key: str, where: str, scale: float = 1e-3) -> Latency:
    """A GuideLLM distribution of successful requests (``metrics[key].successful``) in ms -> seconds."""
    m = metrics.get(key)
    d = m.get("successful") if isinstance(m, dict) else None
    if not isinstance(d, dict):
        return Latency()
    pct = d.get("percentiles") if isinstance(d.get("percentiles"), dict) else {}
    out = Latency(*(math.nan if v is None else float(v) * scale
                    for v in (d.get("mean"), d.get("median", pct.get("p50")), pct.get("p99"))))
    _check_latencies(where, **{key: out})
    return out


def _guidellm_run(b: Mapping[str, Any], path: str, index: int, many: bool) -> BenchRun:
    where = _where(path, index)
    metrics, config = b.get("metrics"), b.get("config")
    if not isinstance(metrics, dict) or not isinstance(config, dict):
        raise SpecsimError(f"{where}: a GuideLLM benchmark without 'metrics' and 'config'")
    totals = metrics.get("request_totals") or {}
    completed = int(_number(totals, "successful", where))
    if completed == 0:
        raise SpecsimError(f"{where}: no request succeeded (request_totals.successful = 0); nothing to compare")
    strategy = config.get("strategy") or {}
    kind = str(strategy.get("type_", ""))
    rate = concurrency = None
    burst = 1.0
    if kind in ("constant", "poisson"):
        rate = _rate(strategy.get("rate"), where, "config.strategy.rate")
        burst = math.inf if kind == "constant" else 1.0
    elif kind == "synchronous":
        concurrency = 1
    elif kind == "concurrent":
        concurrency = int(_number(strategy, "streams", where, low=1) or 1)
    elif kind != "throughput":
        raise SpecsimError(f"{where}: GuideLLM strategy {kind!r} is not one specsim replays (synchronous, concurrent, "
                           "throughput, constant, poisson); give rate = R or max_concurrency = N in the manifest")
    duration = _number(b, "duration", where, strict=True) or 0.0
    ttft = _dist(metrics, "time_to_first_token_ms", where)
    tpot = _dist(metrics, "inter_token_latency_ms", where)  # GuideLLM's per-request (latency - TTFT) / (out - 1)
    if math.isnan(ttft.p50_s) or math.isnan(tpot.p50_s):
        raise SpecsimError(f"{where}: metrics.time_to_first_token_ms or .inter_token_latency_ms has no successful "
                           "distribution")
    reqs = (b.get("requests") or {}).get("successful")
    per = None
    if isinstance(reqs, list) and len(reqs) == completed and completed > 0:
        per = _guidellm_requests(reqs, where)
    tokens = (metrics.get("output_token_count") or {}).get("successful") or {}
    total_out = float(per["output_lens"].sum()) if per else _number(tokens, "total_sum", where)
    prompt = (metrics.get("prompt_token_count") or {}).get("successful") or {}
    made = (b.get("scheduler_metrics") or {}).get("requests_made") or {}
    return BenchRun(
        label=Path(path).name + (f"#{index + 1}" if many else ""), tool="guidellm", path=path,
        rate_per_s=rate, max_concurrency=concurrency, burstiness=burst,
        input_tokens=float(per["input_lens"].mean()) if per else (_number(prompt, "mean", where) or math.nan),
        output_tokens=float(per["output_lens"].mean()) if per else (_number(tokens, "mean", where) or math.nan),
        requests=int(made.get("total") or totals.get("total") or completed), completed=completed,
        speculative=False, k=0, model=str((config.get("backend") or {}).get("model") or ""), duration_s=duration,
        throughput_tokens_per_s=(total_out or 0.0) / duration, ttft=ttft, tpot=tpot, itl=tpot,
        input_lens=per["input_lens"] if per else None, output_lens=per["output_lens"] if per else None,
        ttfts_s=per["ttfts"] if per else None, tpots_s=per["tpots"] if per else None,
        start_s=per["start"] if per and rate is not None else None)


def _guidellm_requests(reqs: Sequence[Any], where: str) -> dict[str, np.ndarray] | None:
    """Per request: prompt and output tokens, TTFT, and send time (from the first), where every field is there."""
    try:
        rows = [(float(r["prompt_tokens"]), float(r["output_tokens"]), float(r["time_to_first_token_ms"]) / 1e3,
                 float(r["request_start_time"]),
                 float(r.get("inter_token_latency_ms") if r.get("inter_token_latency_ms") is not None else "nan") / 1e3)
                for r in reqs]
    except (KeyError, TypeError, ValueError):
        return None
    a = np.asarray(rows)
    if np.any(a[:, 2] < 0):
        raise SpecsimError(f"{where}: a request's time_to_first_token_ms is negative ({1e3 * a[:, 2].min():g} ms)")
    if np.any(a[:, 1] < 1):
        return None
    order = np.argsort(a[:, 3], kind="stable")
    a = a[order]
    tpots = a[:, 4] if np.isfinite(a[a[:, 1] > 1, 4]).all() and (a[a[:, 1] > 1, 4] >= 0).all() else None
    return {"input_lens": a[:, 0], "output_lens": a[:, 1], "ttfts": a[:, 2], "start": a[:, 3] - a[0, 3],
            "tpots": tpots}


def read_guidellm(path: str) -> list[BenchRun]:
    data = _loads(read_text(path, "GuideLLM report"), path)
    benches = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benches, list):
        raise SpecsimError(f"{path}: not a GuideLLM report (no 'benchmarks' list)")
    if not benches:
        raise SpecsimError(f"{path}: a GuideLLM report with no benchmark in it")
    version = str((data.get("metadata") or {}).get("guidellm_version") or "")
    return [replace(_guidellm_run(b, path, i, len(benches) > 1), tool_version=version) for i, b in enumerate(benches)]


# -- AIPerf: profile_export_aiperf.json (the summary) and profile_export.jsonl (a record per request) ---------------

_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def _aiperf_stat(d: Mapping[str, Any], key: str, where: str) -> Latency:
    m = d.get(key)
    if not isinstance(m, dict):
        return Latency()
    scale = _TIME_UNITS.get(str(m.get("unit", "ms")), None)
    if scale is None:
        raise SpecsimError(f"{where}: {key} in unit {m.get('unit')!r}, not a time")
    out = Latency(*(math.nan if m.get(q) is None else float(m[q]) * scale for q in ("avg", "p50", "p99")))
    _check_latencies(where, **{key: out})
    return out


def _aiperf_value(d: Mapping[str, Any], key: str) -> float | None:
    m = d.get(key)
    return float(m["avg"]) if isinstance(m, dict) and m.get("avg") is not None else None


def _aiperf_phase(d: Mapping[str, Any], where: str) -> tuple[float | None, int | None, float, int | None]:
    """(rate, concurrency, burstiness, requests) of the profiling phase in input_config (AIPerf >= 0.10)."""
    phases = ((d.get("input_config") or {}).get("phases")) or []
    prof = next((p for p in phases if isinstance(p, dict) and p.get("kind") == "profiling"), None)
    if prof is None:
        return None, None, 1.0, None
    kind = str(prof.get("type", ""))
    rate = _rate(prof.get("rate"), where, "input_config.phases.rate") if prof.get("rate") is not None else None
    conc = prof.get("concurrency")
    burst = math.inf if kind == "constant" else 1.0
    n = prof.get("requests")
    return rate, int(conc) if conc else None, burst, int(n) if n else None


def _aiperf_records(path: Path, where: str) -> dict[str, Any] | None:
    """Per-request lengths, TTFTs, chunk gaps and send times from profile_export.jsonl (successful records)."""
    try:
        rows = _loads(read_text(path, "AIPerf records"), str(path))
    except SpecsimError:
        return None
    rows = rows if isinstance(rows, list) else [rows]
    ins, outs, ttfts, itls, starts = [], [], [], [], []
    for r in rows:
        m = r.get("metrics") if isinstance(r, dict) else None
        meta = r.get("metadata") if isinstance(r, dict) else None
        if not isinstance(m, dict) or not isinstance(meta, dict) or r.get("error") or meta.get("was_cancelled"):
            continue
        try:
            isl = float(m["input_sequence_length"]["value"])
            osl = float(m["output_sequence_length"]["value"])
            ttft = float(m["time_to_first_token"]["value"]) * _TIME_UNITS[m["time_to_first_token"].get("unit", "ms")]
            chunks = m.get("inter_chunk_latency", {})
            gaps = np.asarray(chunks.get("value") or [], dtype=float) * _TIME_UNITS[chunks.get("unit", "ms")]
            start = float(meta["request_start_ns"]) * 1e-9
        except (KeyError, TypeError, ValueError):
            return None
        if ttft < 0 or np.any(gaps < 0):
            raise SpecsimError(f"{where}: {path.name} holds a negative latency")
        ins.append(isl)
        outs.append(osl)
        ttfts.append(ttft)
        itls.append(gaps)
        starts.append(start)
    if not ins:
        return None
    order = np.argsort(starts, kind="stable")
    st = np.asarray(starts)[order]
    return {"input_lens": np.asarray(ins)[order], "output_lens": np.asarray(outs)[order],
            "ttfts": np.asarray(ttfts)[order], "itls": tuple(itls[i] for i in order), "start": st - st[0]}


def _aiperf_label(path: str) -> str:
    """AIPerf names its files alike in every run's artifact folder (profile_export_aiperf.json): the folder too."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def read_aiperf(path: str) -> list[BenchRun]:
    """profile_export_aiperf.json (with profile_export.jsonl beside it: per request too), or the JSONL alone (the
    summary computed from its records; the manifest gives the rate or concurrency)."""
    data = _loads(read_text(path, "AIPerf export"), path)
    if isinstance(data, list):
        return [_aiperf_from_records(path)]
    if not isinstance(data, dict) or "time_to_first_token" not in data:
        raise SpecsimError(f"{path}: not AIPerf's profile_export_aiperf.json (no 'time_to_first_token')")
    where = path
    completed = _aiperf_value(data, "completed_request_count") or _aiperf_value(data, "request_count") or 0.0
    if completed <= 0:
        raise SpecsimError(f"{where}: no request succeeded (completed_request_count = 0); nothing to compare")
    duration = _aiperf_value(data, "benchmark_duration")
    if not duration or duration <= 0:
        raise SpecsimError(f"{where}: field 'benchmark_duration' is missing or not positive")
    ttft = _aiperf_stat(data, "time_to_first_token", where)
    tpot = _aiperf_stat(data, "inter_token_latency", where)  # AIPerf's per request (latency - TTFT) / (out - 1)
    itl = _aiperf_stat(data, "inter_chunk_latency", where)
    if math.isnan(ttft.p50_s) or math.isnan(tpot.p50_s):
        raise SpecsimError(f"{where}: time_to_first_token or inter_token_latency has no p50")
    rate, conc, burst, n = _aiperf_phase(data, where)
    per = _aiperf_records(Path(path).with_name("profile_export.jsonl"), where)
    if per is not None and len(per["input_lens"]) != int(completed):
        per = None
    out_total = _aiperf_value(data, "total_output_tokens") or _aiperf_value(data, "total_osl")
    throughput = _aiperf_value(data, "output_token_throughput") or (out_total or 0.0) / duration
    isl = (data.get("input_sequence_length") or {}).get("avg")
    osl = (data.get("output_sequence_length") or {}).get("avg")
    models = ((data.get("input_config") or {}).get("models") or {}).get("items") or [{}]
    return [BenchRun(
        label=_aiperf_label(path), tool="aiperf", path=path, rate_per_s=rate, max_concurrency=conc, burstiness=burst,
        input_tokens=float(per["input_lens"].mean()) if per else float(isl or math.nan),
        output_tokens=float(per["output_lens"].mean()) if per else float(osl or math.nan),
        requests=n or int(completed), completed=int(completed), speculative=False, k=0,
        model=str(models[0].get("name", "")), duration_s=duration, throughput_tokens_per_s=throughput,
        ttft=ttft, tpot=tpot, itl=itl if not math.isnan(itl.p50_s) else tpot,
        input_lens=per["input_lens"] if per else None, output_lens=per["output_lens"] if per else None,
        ttfts_s=per["ttfts"] if per else None, itls_s=per["itls"] if per else None,
        start_s=per["start"] if per and rate is not None else None, tool_version=str(data.get("aiperf_version") or ""))]


def _aiperf_from_records(path: str) -> BenchRun:
    per = _aiperf_records(Path(path), path)
    if per is None:
        raise SpecsimError(f"{path}: no successful AIPerf record (metrics with input_sequence_length, "
                           "output_sequence_length, time_to_first_token, and metadata.request_start_ns)")
    outs, ttfts = per["output_lens"], per["ttfts"]
    e2e = ttfts + np.array([g.sum() for g in per["itls"]])
    many = outs > 1
    tpots = (e2e[many] - ttfts[many]) / (outs[many] - 1)
    gaps = np.concatenate([g for g in per["itls"]]) if per["itls"] else np.zeros(0)
    duration = float((per["start"] + e2e).max())

    def lat(x: np.ndarray) -> Latency:
        return Latency(float(x.mean()), float(np.median(x)), float(np.percentile(x, 99))) if len(x) else Latency()

    return BenchRun(label=_aiperf_label(path), tool="aiperf", path=path, rate_per_s=None, max_concurrency=None,
                    burstiness=1.0, input_tokens=float(per["input_lens"].mean()), output_tokens=float(outs.mean()),
                    requests=len(outs), completed=len(outs), speculative=False, k=0, model="", duration_s=duration,
                    throughput_tokens_per_s=float(outs.sum()) / duration, ttft=lat(ttfts), tpot=lat(tpots),
                    itl=lat(gaps), input_lens=per["input_lens"], output_lens=outs, ttfts_s=ttfts, itls_s=per["itls"],
                    start_s=per["start"])


READERS = {"vllm": read_vllm_serve, "sglang": read_sglang_serving, "guidellm": read_guidellm, "aiperf": read_aiperf}


def detect_tool(path: str) -> str:
    """Which client wrote a file, from its fields (a manifest's ``tool`` skips this)."""
    text = read_text(path, "benchmark result")
    data = _loads(text, path)
    first = data[0] if isinstance(data, list) and data else data
    if isinstance(first, dict):
        if "benchmarks" in first:
            return "guidellm"
        if "time_to_first_token" in first or ("metrics" in first and "metadata" in first
                                               and "request_start_ns" in (first.get("metadata") or {})):
            return "aiperf"
        if "median_ttft_ms" in first:
            return "sglang" if ("dataset_name" in first and "model_id" not in first) else "vllm"
    raise SpecsimError(f"{path}: not a result of vllm bench serve, SGLang bench_serving, GuideLLM or AIPerf (no "
                       "field any of them writes); give tool = \"...\" in the manifest if it is one")


def read_file(path: str, tool: str | None = None) -> list[BenchRun]:
    """Every run in one result file."""
    tool = (tool or detect_tool(path)).lower()
    if tool not in READERS:
        raise SpecsimError(f"{path}: tool {tool!r} is not one of {', '.join(READERS)}")
    return READERS[tool](path)


# -- the manifest ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchSetup:
    """What the manifest's [setup] says of the deployment the runs measured."""

    hardware: str | None = None  # a preset (h100-sxm) or "cpu"
    profile: str | None = None  # a calibrated profile instead of a preset
    target: str | None = None
    draft: str | None = None
    dtype: str = "bf16"
    engine: str = "vllm"  # whose schedule the simulation follows
    max_batch: int = 256  # the engine's running requests at most (vLLM max_num_seqs, llama-server slots)
    acceptance: str | None = None  # where no speculative run's counters give it
    seed: int = 0


@dataclass(frozen=True)
class Manifest:
    path: Path
    setup: BenchSetup
    runs: tuple[BenchRun, ...]
    notes: tuple[str, ...] = ()  # what the manifest's fields change in the files or contradict, to be said

    @property
    def fit_runs(self) -> list[BenchRun]:
        return [r for r in self.runs if r.fit]

    @property
    def judged_runs(self) -> list[BenchRun]:
        return [r for r in self.runs if not r.fit]


def _setup(table: Any, where: str) -> BenchSetup:
    if table is None:
        return BenchSetup()
    if not isinstance(table, dict):
        raise SpecsimError(f"{where}: [setup] must be a table")
    known = set(BenchSetup.__dataclass_fields__)
    unknown = sorted(set(table) - known)
    if unknown:
        raise SpecsimError(f"{where}: [setup] has unknown field(s) {', '.join(unknown)}; known: "
                           f"{', '.join(sorted(known))}")
    s = BenchSetup(**table)
    if s.engine not in ENGINES:
        raise SpecsimError(f"{where}: [setup] engine = {s.engine!r}: use one of {', '.join(ENGINES)}")
    if not isinstance(s.max_batch, int) or s.max_batch < 1:
        raise SpecsimError(f"{where}: [setup] max_batch must be a whole number >= 1")
    return s


COUNTERS = {"spec_decode_num_drafts": "drafts", "spec_decode_num_draft_tokens": "drafted",
            "spec_decode_num_accepted_tokens": "accepted", "n_drafted": "drafted", "n_drafted_accepted": "accepted"}


def _counters(entry: Mapping[str, Any], base: Path, where: str) -> dict[str, float]:
    """Speculation counters from Prometheus scrapes of the server's /metrics: after the run, less before it (if
    given). vLLM's ``vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}`` or llama-server's
    ``llamacpp:spec_decode_num_draft_tokens`` / ``..._num_accepted_tokens`` (``_total`` suffixed or not); checked
    against the run's kind and its k (`_check_counters`)."""
    from scenarios.engine_metrics import parse_prometheus

    engines: set[str] = set()

    def scrape(key: str) -> dict[str, float] | None:
        if key not in entry:
            return None
        samples = parse_prometheus(read_text(base / str(entry[key]), f"metrics scrape ({key})"))
        out: dict[str, float] = {}
        for (name, position), v in samples.items():
            if position is not None:
                if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total" and position.isdigit():
                    out[f"accepted@{position}"] = out.get(f"accepted@{position}", 0.0) + v
                continue
            short = COUNTERS.get(name.partition(":")[2].removesuffix("_total")) if ":" in name else None
            if short is not None and name.partition(":")[0] in ("vllm", "llamacpp"):
                out[short] = out.get(short, 0.0) + v
                engines.add(name.partition(":")[0])
        if "drafted" not in out or "accepted" not in out:
            raise SpecsimError(f"{where}: {entry[key]} has no speculative-decoding counters (vLLM's "
                               "vllm:spec_decode_num_draft_tokens / _num_accepted_tokens, or llama-server's "
                               "llamacpp:spec_decode_num_draft_tokens / _num_accepted_tokens)")
        return out

    after, before = scrape("metrics"), scrape("metrics_before")
    if after is None:
        if before is not None:
            raise SpecsimError(f"{where}: metrics_before without metrics (the scrape after the run)")
        return {}
    delta = {k: v - (before or {}).get(k, 0.0) for k, v in after.items()}
    if any(v < 0 for v in delta.values()):
        raise SpecsimError(f"{where}: a counter fell between metrics_before and metrics (a restarted server?)")
    if delta["drafted"] <= 0:
        raise SpecsimError(f"{where}: no drafted token was counted between the scrapes")
    if delta["accepted"] > delta["drafted"]:
        raise SpecsimError(f"{where}: more tokens accepted than drafted in the counters")
    _check_counters(entry, where, delta, fixed_k=engines == {"vllm"})
    return delta


def _check_counters(entry: Mapping[str, Any], where: str, c: Mapping[str, float], fixed_k: bool,
                    source: str = "its metrics scrape") -> None:
    """Counters that contradict the run they are given to are refused: on a plain run, or a k that their draft
    tokens per draft deny (a draft holds at most k tokens; vLLM's hold exactly k, llama-server's up to k)."""
    per = c["drafted"] / c["drafts"] if c.get("drafts") else None
    said = (f"{c['drafted']:,.0f} draft tokens in {c['drafts']:,.0f} drafts (k = {per:.3g})" if per is not None else
            f"{c['drafted']:,.0f} draft tokens")
    if "acceptance_trace" in entry and (entry.get("speculative") is False or "k" not in entry):
        return  # `_with_trace` refuses a plain run's acceptance trace, in its own words
    if entry.get("speculative") is False:
        raise SpecsimError(f"{where}: speculative = false, but {source} counts speculative decoding "
                           f"({said}): drop metrics, or drop speculative = false and give k = N")
    k = entry.get("k")
    if k is None:
        hint = f" (its counters say k = {round(per)})" if per is not None else ""
        raise SpecsimError(f"{where}: {source} counts speculative decoding ({said}) but the run has no "
                           f"draft length: give k = N{hint}, or drop metrics if it ran without speculation")
    if per is None or isinstance(k, bool) or not isinstance(k, (int, float)):
        return
    if per > k + 1e-6 or (fixed_k and abs(per - k) > 0.5):
        raise SpecsimError(f"{where}: {source} says {said} but the manifest gives k = {k:g}: give k = "
                           f"{round(per) if fixed_k else math.ceil(per - 1e-6)}, or this run's own metrics scrape")


def _own_counters(run: BenchRun, entry: Mapping[str, Any], where: str, scraped: Mapping[str, float]
                  ) -> Mapping[str, float]:
    """The run's counters: its result file's own (vLLM's spec_decode fields), checked as a scrape's are, else the
    manifest's scrape; both given, they must agree (on every counter both have)."""
    own = run.file_counters
    if not own:
        return scraped
    w = f"{where} ({run.label})"
    if scraped:
        differ = [k for k in sorted(set(own) & set(scraped)) if abs(own[k] - scraped[k]) > 0.5 + 1e-6 * own[k]]
        if differ:
            said = ", ".join(f"{k} {own[k]:,.0f} against {scraped[k]:,.0f}" for k in differ[:3])
            raise SpecsimError(f"{w}: the result file's spec_decode counters and the metrics scrape "
                               f"{entry['metrics']} disagree ({said}): drop metrics (the file's own are the run's), "
                               "or give metrics_before")
        return {**scraped, **own}
    _check_counters(entry, w, own, fixed_k=True, source="its result file's spec_decode counters")
    return own


def _apply(run: BenchRun, entry: Mapping[str, Any], where: str, counters: Mapping[str, float],
           notes: list[str] | None = None) -> BenchRun:
    """The manifest's fields over the file's, then every setting the simulation needs checked; what the manifest
    changes in the file (a rate) added to `notes`."""
    changes: dict[str, Any] = {}
    if "rate" in entry:
        changes["rate_per_s"] = _rate(entry["rate"], where, "rate")
        if notes is not None and changes["rate_per_s"] != run.rate_per_s:
            file_rate = "all at once" if run.rate_per_s is None else f"{run.rate_per_s:g}/s"
            given = "all at once" if changes["rate_per_s"] is None else f"{changes['rate_per_s']:g}/s"
            notes.append(f"{where} ({run.label}): rate = {given} from the manifest, over the file's {file_rate}; "
                         "the run is simulated at the manifest's rate")
    if "max_concurrency" in entry:
        changes["max_concurrency"] = int(_number(entry, "max_concurrency", where, low=1) or 0) or None
    if "burstiness" in entry:
        changes["burstiness"] = _number(entry, "burstiness", where, strict=True) or 1.0
    for key, name in (("input_len", "input_tokens"), ("output_len", "output_tokens")):
        if key in entry:
            changes[name] = _number(entry, key, where, low=1)
    if "requests" in entry:
        changes["requests"] = int(_number(entry, "requests", where, low=1) or 0)
    if "model" in entry:
        changes["model"] = str(entry["model"])
    if "tool_version" in entry:
        changes["tool_version"] = str(entry["tool_version"])
    if "speculative" in entry:
        if not isinstance(entry["speculative"], bool):
            raise SpecsimError(f"{where}: speculative must be true or false")
        changes["speculative"] = entry["speculative"]
    if "k" in entry:
        changes["k"] = int(_number(entry, "k", where, low=1) or 0)
        changes.setdefault("speculative", True)
    if "fit" in entry:
        if not isinstance(entry["fit"], bool):
            raise SpecsimError(f"{where}: fit must be true or false")
        changes["fit"] = entry["fit"]
    if counters:
        changes["counters"] = dict(counters)
    run = replace(run, **changes)
    w = f"{where} ({run.label})"
    if run.rate_per_s is None and run.max_concurrency is None and run.tool in ("aiperf",):
        raise SpecsimError(f"{w}: neither a request rate nor a concurrency: give rate = R or max_concurrency = N")
    if not run.per_request:
        for key, v in (("input_len", run.input_tokens), ("output_len", run.output_tokens)):
            if not v or math.isnan(v):
                raise SpecsimError(f"{w}: the file does not say the requests' {key.split('_')[0]} length: give "
                                   f"{key} = N")
    if run.requests < 1:
        raise SpecsimError(f"{w}: the number of requests is unknown: give requests = N")
    if run.speculative and run.k < 1:
        raise SpecsimError(f"{w}: a speculative run needs its draft length: give k = N")
    spent = run.counters.get("drafts", 0.0) + run.counters.get("accepted", 0.0)  # tokens the verified drafts yielded
    generated = run.completed * run.output_tokens
    if spent > 1.25 * generated:
        raise SpecsimError(f"{w}: its counters' {spent:,.0f} tokens from verified drafts are more than the "
                           f"{generated:,.0f} the run generated: the scrape counts other runs too; give "
                           "metrics_before (a scrape just before the run) or this run's own scrape")
    if not run.speculative:
        run = replace(run, k=0)
    return run


def _with_trace(run: BenchRun, file: Path, where: str) -> BenchRun:
    """`run` with its requests' own acceptance (the manifest's acceptance_trace), checked against the run."""
    from scenarios.traces import load_acceptance_trace

    w = f"{where} ({run.label})"
    if not run.speculative:
        raise SpecsimError(f"{w}: acceptance_trace belongs to a speculative run; give k = N or drop it")
    trace = replace(load_acceptance_trace(file, "yields"), by_request=True)
    if len(trace.yields) != run.completed:
        raise SpecsimError(f"{w}: {file.name} holds {len(trace.yields)} requests' acceptance but the run completed "
                           f"{run.completed}: one line per successful request, in send order")
    if run.per_request:
        longer = [i for i, (y, n) in enumerate(zip(trace.yields, run.output_lens)) if len(y) > max(n - 1, 0)]
        if longer:
            raise SpecsimError(f"{w}: {file.name} line {longer[0] + 1} holds {len(trace.yields[longer[0]])} positions "
                               f"but that request generated {run.output_lens[longer[0]]:.0f} tokens (at most one "
                               "position per token after the first)")
    return replace(run, trace=trace)


def read_manifest(path: str | Path) -> Manifest:
    """The runs a TOML manifest names, each with the manifest's fields over its file's (module docstring)::

        [setup]                      # the deployment: a preset or a profile, the models, the engine's schedule
        hardware = "h100-sxm"        # or profile = "profile.json"
        target = "llama-3.1-8b"
        draft = "llama-3.2-1b"
        engine = "vllm"              # vllm | sglang | llama-server
        max_batch = 256

        [[run]]
        file = "vllm-rate2.json"     # relative to the manifest
        fit = true                   # fitted on; the others are judged
        # tool, index (a file's n-th run, 1-based), rate, max_concurrency, burstiness, input_len, output_len,
        # requests, model, speculative, k, tool_version (where the file does not say it: vLLM's, SGLang's),
        # metrics / metrics_before (Prometheus scrapes after / before the run), acceptance_trace (a speculative
        # run's own acceptance: JSON lines, one per successful request in send order, {"yields": [...]} the tokens
        # a step starting at each generated position after the first yields, as `calibrate.bench_traces` writes)
    """
    path = Path(path)
    try:
        spec = tomllib.loads(read_text(path, "benchmark manifest"))
    except tomllib.TOMLDecodeError as e:
        raise SpecsimError(f"{path}: not TOML ({e})") from None
    unknown = sorted(set(spec) - {"setup", "run"})
    if unknown:
        raise SpecsimError(f"{path}: unknown table(s) {', '.join(unknown)}; a manifest has [setup] and [[run]]")
    setup = _setup(spec.get("setup"), str(path))
    entries = spec.get("run")
    if not isinstance(entries, list) or not entries:
        raise SpecsimError(f"{path}: no [[run]] tables; each names a result file (file = \"...\")")
    runs: list[BenchRun] = []
    notes: list[str] = []
    scrapes: dict[Path, int] = {}  # each scrape after a run, and the run it belongs to
    allowed = set(RUN_FIELDS) | {"file", "tool", "index", "fit", "metrics", "metrics_before", "acceptance_trace"}
    for i, entry in enumerate(entries, 1):
        where = f"{path} run {i}"
        if not isinstance(entry, dict) or "file" not in entry:
            raise SpecsimError(f"{where}: field 'file' is missing")
        extra = sorted(set(entry) - allowed)
        if extra:
            raise SpecsimError(f"{where}: unknown field(s) {', '.join(extra)}; known: {', '.join(sorted(allowed))}")
        file = str(path.parent / str(entry["file"]))
        found = read_file(file, entry.get("tool"))
        if "index" in entry:
            n = int(_number(entry, "index", where, low=1) or 0)
            if n > len(found):
                raise SpecsimError(f"{where}: index = {n} but {entry['file']} holds {len(found)} run(s)")
            found = [found[n - 1]]
        counters = _counters(entry, path.parent, where)
        if counters and len(found) > 1:
            raise SpecsimError(f"{where}: metrics scrapes belong to one run; pick it with index = N")
        if counters:
            scrape = (path.parent / str(entry["metrics"])).resolve()
            if scrape in scrapes:
                raise SpecsimError(f"{where}: metrics = \"{entry['metrics']}\" is run {scrapes[scrape]}'s scrape too, "
                                   "so its counters would count twice: give each run the scrape taken after it")
            scrapes[scrape] = i
        applied = [_apply(r, entry, where, _own_counters(r, entry, where, counters), notes) for r in found]
        if "acceptance_trace" in entry:
            if len(applied) > 1:
                raise SpecsimError(f"{where}: an acceptance trace belongs to one run; pick it with index = N")
            applied = [_with_trace(applied[0], path.parent / str(entry["acceptance_trace"]), where)]
        runs += applied
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        twice = sorted({x for x in labels if labels.count(x) > 1})
        raise SpecsimError(f"{path}: a run is named twice ({', '.join(twice)})")
    return Manifest(path, setup, tuple(runs), tuple(notes + _model_notes(path, setup, runs)))


def _model_notes(path: Path, setup: BenchSetup, runs: Sequence[BenchRun]) -> list[str]:
    """A note for each model a result file names that is not [setup]'s target (their names compared without the
    organisation, case, punctuation and an -Instruct/-Chat suffix; a local path names no model to compare)."""
    def key(name: str) -> str:
        name = name.rstrip("/").rpartition("/")[2].lower()
        for suffix in ("-instruct", "-chat", "-it", "-base", "-hf"):
            name = name.removesuffix(suffix)
        return "".join(ch for ch in name if ch.isalnum())

    if not setup.target or setup.target.endswith(".json"):
        return []
    want = key(setup.target)
    named = sorted({r.model for r in runs if r.model and not r.model.startswith(("/", "."))})
    return [f"{path}: [setup] target = \"{setup.target}\" but a result file names model {m!r}: the runs are "
            f"simulated as {setup.target}; check [setup] target" for m in named
            if want not in key(m) and key(m) not in want]


def describe(runs: Sequence[BenchRun]) -> str:
    """One line per run: what was read."""
    lines = []
    for r in runs:
        lens = "per request" if r.per_request else f"{r.input_tokens:.0f} -> {r.output_tokens:.0f}"
        lines.append(f"{r.label:<28} {r.tool:<8} {r.load:<14} {r.policy:<8} {r.completed:>5}/{r.requests:<5} "
                     f"{lens:<12} {r.throughput_tokens_per_s:9.1f} tok/s  TTFT p50 {1e3 * r.ttft.p50_s:8.1f} ms  "
                     f"TPOT p50 {1e3 * r.tpot.p50_s:7.2f} ms{'  (fit)' if r.fit else ''}")
    return "\n".join(lines)
