"""Acceptance measured by real serving engines, read from what they export.

- ``vllm-metrics:FILE`` - a Prometheus text scrape of vLLM's ``/metrics``: the counters
  ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and, per draft position i,
  ``..._num_accepted_tokens_per_pos{position="i"}`` (each with Prometheus' ``_total`` suffix). Position i counts the
  drafts whose token i was accepted, so it over the number of drafts is P(A >= i + 1); their ratios are the
  conditional acceptance per position, a ``positional`` model. Without the per-position counters, the mean
  acceptance length gives an i.i.d. model. Series with other labels (engines, model names) are summed.
- ``sglang:FILE@K`` - SGLang responses (JSON, a JSON list, or JSON lines) whose ``meta_info`` holds
  ``completion_tokens`` and ``spec_verify_ct``: completion tokens per verification is the mean acceptance length.
- ``trtllm:FILE[@K]`` - TensorRT-LLM iteration statistics (JSON, a list, or JSON lines) with
  ``specDecodingStats.acceptanceLength``, weighted by ``numRequestsWithDraftTokens``; K defaults to
  ``numDraftTokens / numRequestsWithDraftTokens``.
- ``accept-length:L@K`` - a mean acceptance length L measured with K drafts, typed in.

A mean acceptance length counts the bonus token (tokens per verification, E[A + 1], in [1, K + 1]); it becomes the
i.i.d. model with the same E[A + 1] at that K.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from scenarios.files import read_records, read_text
from simulator import SpecsimError
from simulator.acceptance import Acceptance, PositionalAcceptance, iid_from_mean_length

ENGINE_KINDS = ("vllm-metrics", "sglang", "trtllm", "accept-length")
VLLM = "vllm:spec_decode_"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _split_k(body: str, kind: str, required: bool) -> tuple[str, int | None]:
    head, at, tail = body.rpartition("@")
    if not at:
        if required:
            raise SpecsimError(f"{kind}: say how many tokens were drafted per step, e.g. {kind}:{body or 'FILE'}@4")
        return body, None
    try:
        k = int(tail)
    except ValueError:
        raise SpecsimError(f"{kind}: {tail!r} after @ is not a draft length; give a whole number, e.g. "
                           f"{kind}:{head or 'FILE'}@4") from None
    return head, k


def parse_prometheus(text: str) -> dict[tuple[str, str | None], float]:
    """Sum of every sample per (metric name, position label); comments and malformed lines are skipped."""
    out: dict[tuple[str, str | None], float] = defaultdict(float)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(3) or "", m.group(4)
        try:
            v = float(value)
        except ValueError:
            continue
        position = dict(_LABEL.findall(labels)).get("position")
        out[(name, position)] += v
    return dict(out)


def _counter(samples: dict[tuple[str, str | None], float], name: str) -> float | None:
    for key in (f"{VLLM}{name}_total", f"{VLLM}{name}"):
        if (key, None) in samples:
            v = samples[(key, None)]
            if not np.isfinite(v) or v < 0:
                raise SpecsimError(f"vLLM metrics: {key} = {v} is not a count (finite, >= 0)")
            return v
    return None


def _count(v: Any, path: str) -> float:
    """A non-negative finite number from an engine's statistics, or a one-line error."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise SpecsimError(f"{path}: {v!r} is not a number") from None
    if not np.isfinite(x) or x < 0:
        raise SpecsimError(f"{path}: {v!r} is not a count (finite, >= 0)")
    return x


def vllm_metrics(path: str) -> Acceptance:
    samples = parse_prometheus(read_text(path, "vLLM metrics file"))
    drafts, draft_tokens, accepted = (_counter(samples, n) for n in
                                      ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
    missing = [f"{VLLM}{n}_total" for n, v in (("num_drafts", drafts), ("num_draft_tokens", draft_tokens),
                                               ("num_accepted_tokens", accepted)) if v is None]
    if missing:
        raise SpecsimError(f"vLLM metrics {path}: missing {', '.join(missing)} (scrape /metrics of a server running "
                           "speculative decoding)")
    assert drafts is not None and draft_tokens is not None and accepted is not None
    if drafts <= 0:
        raise SpecsimError(f"vLLM metrics {path}: {VLLM}num_drafts_total is 0: no speculative step was counted yet")
    k = int(round(draft_tokens / drafts))
    per_pos: dict[int, float] = {}
    for (name, position), v in samples.items():
        if position is not None and name in (f"{VLLM}num_accepted_tokens_per_pos_total",
                                             f"{VLLM}num_accepted_tokens_per_pos"):
            if not np.isfinite(v) or v < 0:
                raise SpecsimError(f"vLLM metrics {path}: {name}{{position=\"{position}\"}} = {v} is not a count")
            try:
                per_pos[int(position)] = per_pos.get(int(position), 0.0) + v
            except ValueError:
                raise SpecsimError(f"vLLM metrics {path}: position label {position!r} is not an integer") from None
    if not per_pos:
        model = iid_from_mean_length(1.0 + accepted / drafts, k)
        return _Measured(model, f"vllm-metrics:{path} (no per-position counters: iid alpha {model.alpha:.3f} at "
                                f"k = {k})", k)
    positions = sorted(per_pos)
    if positions != list(range(len(positions))):
        raise SpecsimError(f"vLLM metrics {path}: per-position counters must cover positions 0..{len(positions) - 1} "
                           f"without gaps; found {positions}")
    survival = np.array([per_pos[i] for i in positions]) / drafts  # P(A >= i + 1)
    if np.any(survival > 1 + 1e-9) or np.any(np.diff(survival) > 1e-9):
        raise SpecsimError(f"vLLM metrics {path}: per-position acceptance must not increase with position or exceed "
                           "the number of drafts")
    prev = np.concatenate([[1.0], survival[:-1]])
    conditional = np.divide(survival, prev, out=np.zeros_like(survival), where=prev > 0)
    model = PositionalAcceptance(tuple(float(min(a, 1.0)) for a in conditional))
    return _Measured(model, f"vllm-metrics:{path} (positional, mean acceptance length {1 + accepted / drafts:.2f}"
                            f" at k = {k})", k)


def sglang(path: str, k: int) -> Acceptance:
    completion = verify = 0.0
    for rec in read_records(path, "SGLang responses"):
        info = rec.get("meta_info", rec) if isinstance(rec, dict) else {}
        if "completion_tokens" in info and "spec_verify_ct" in info:
            c, v = _count(info["completion_tokens"], path), _count(info["spec_verify_ct"], path)
            completion += c
            verify += v
    if verify <= 0:
        raise SpecsimError(f"SGLang {path}: no response with meta_info.completion_tokens and meta_info.spec_verify_ct "
                           "(run the server with speculative decoding and keep the responses' meta_info)")
    length = completion / verify
    return _Measured(iid_from_mean_length(length, k), f"sglang:{path} (mean acceptance length {length:.2f} at "
                                                      f"k = {k})", k)


def trtllm(path: str, k: int | None) -> Acceptance:
    weighted = weight = drafted = 0.0
    for rec in read_records(path, "TensorRT-LLM stats"):
        stats = rec.get("specDecodingStats") if isinstance(rec, dict) else None
        if not stats or "acceptanceLength" not in stats:
            continue
        w = _count(stats.get("numRequestsWithDraftTokens", 1.0), path)
        if w <= 0:
            continue
        weighted += w * _count(stats["acceptanceLength"], path)
        weight += w
        drafted += _count(stats.get("numDraftTokens", 0.0), path)
    if weight <= 0:
        raise SpecsimError(f"TensorRT-LLM stats {path}: no iteration with specDecodingStats.acceptanceLength and "
                           "requests with draft tokens")
    if k is None:
        if drafted <= 0:
            raise SpecsimError(f"TensorRT-LLM stats {path}: numDraftTokens missing; give the draft length as "
                               f"trtllm:{path}@K")
        k = int(round(drafted / weight))
    length = weighted / weight
    return _Measured(iid_from_mean_length(length, k), f"trtllm:{path} (mean acceptance length {length:.2f} at "
                                                      f"k = {k})", k)


class _Measured(Acceptance):
    """A model fitted to an engine's counters, measured with k drafts per step; its spec names the source."""

    def __init__(self, model: Acceptance, spec: str, k: int) -> None:
        self.model, self._spec, self.k = model, spec, k

    @property
    def spec(self) -> str:  # type: ignore[override]
        return self._spec

    @property
    def alpha(self) -> float:
        return self.model.alpha

    @property
    def measured_up_to_k(self) -> int | None:
        return self.k

    def chain_pmf(self, k: int) -> np.ndarray:
        return self.model.chain_pmf(k)

    def expected_tokens(self, k: int) -> float:
        return self.model.expected_tokens(k)

    def scaled(self, factor: float) -> Acceptance:
        return self if factor == 1.0 else _Measured(self.model.scaled(factor), f"{self._spec} x{factor:.4g}", self.k)


def engine_acceptance(spec: str) -> Acceptance:
    """``vllm-metrics:FILE``, ``sglang:FILE@K``, ``trtllm:FILE[@K]`` or ``accept-length:L@K``."""
    kind, _, body = spec.partition(":")
    if kind == "vllm-metrics":
        if not body:
            raise SpecsimError("vllm-metrics needs a file: vllm-metrics:metrics.txt (a scrape of /metrics)")
        return vllm_metrics(body)
    if kind == "sglang":
        path, k = _split_k(body, kind, required=True)
        assert k is not None
        return sglang(path, k)
    if kind == "trtllm":
        path, k = _split_k(body, kind, required=False)
        return trtllm(path, k)
    if kind == "accept-length":
        text, k = _split_k(body, kind, required=True)
        assert k is not None
        try:
            length = float(text)
        except ValueError:
            raise SpecsimError(f"accept-length:{body}: {text!r} is not a number (tokens per verification)") from None
        model = iid_from_mean_length(length, k)
        return _Measured(model, f"accept-length:{length:g}@{k} (iid alpha {model.alpha:.3f})", k)
    raise SpecsimError(f"unknown engine acceptance {kind!r}; use {', '.join(ENGINE_KINDS)}")
