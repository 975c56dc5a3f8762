"""Engines' step-time files, read into `StepTime`s for `calibrate.step_import` to fit (no fitting here).

Sources (small samples of each, made by specsim and documented as such, are in `scenarios/samples/`):

- ``csv:FILE`` (or any ``*.csv``): one step per row, ``batch,new_tokens,context,step_ms[,phase]``; ``phase`` is
  ``decode`` (default: a plain step), ``verify`` (new_tokens = k + 1), ``draft`` (a draft pass) or ``prefill``.
  Any engine's logs can be turned into it.
- ``vllm:MANIFEST.toml``: the JSON files ``vllm bench latency --output-json`` writes (``avg_latency``,
  ``latencies``, ``percentiles``), one per batch x input x output length; the file holds no settings, so a manifest
  gives them (``[[run]] file, batch, input_len, output_len``, and for a run made with speculation its
  ``speculative_config`` and ``mean_acceptance_length``; any other key is an error). A run's latency is a prefill
  plus output_len - 1 decode steps, so runs that differ only in output length give the decode step by difference,
  at the context midway through the extra tokens, and the prefill by extrapolation to one output token; a
  speculative run's steps give its draft's passes (`calibrate.step_import.draft_passes_of`).
- ``sglang:FILE.jsonl``: the result lines of SGLang's ``bench_one_batch`` (``batch_size``, ``input_len``,
  ``output_len``, ``prefill_latency``, ``median_decode_latency``): a decode step at the mid-output context, and the
  prefill.

Every reader refuses a bad file in one line naming the row or run and what to give instead.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scenarios import tomllib
from scenarios.files import parse_json, read_records, read_text
from simulator import SpecsimError

PHASES = ("decode", "verify", "draft", "prefill")
CSV_FIELDS = ("batch", "new_tokens", "context", "step_ms")


@dataclass(frozen=True)
class StepTime:
    """One measured step (or pass) of an engine: where it came from, for the report and for errors."""

    phase: str
    batch: int
    new_tokens: int
    context: int
    time_s: float
    where: str


def _int(value: Any, where: str, field: str, low: int) -> int:
    try:
        v = float(value)
        if not math.isfinite(v) or v != int(v) or int(v) < low:
            raise ValueError
        return int(v)
    except (TypeError, ValueError):
        raise SpecsimError(f"{where}: field {field!r} must be a whole number >= {low}, got {value!r}") from None


def _time(value: Any, where: str, field: str, scale: float = 1.0) -> float:
    try:
        v = float(value)
        if not math.isfinite(v) or v <= 0:
            raise ValueError
        return v * scale
    except (TypeError, ValueError):
        raise SpecsimError(f"{where}: field {field!r} must be a positive, finite time, got {value!r}") from None


def read_csv(path: str | Path) -> list[StepTime]:
    """``batch,new_tokens,context,step_ms[,phase]`` rows (a header line first; blank lines and lines starting
    with # are skipped)."""
    text = read_text(path, "step-time CSV")
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip()
             .startswith("#")]
    if not lines:
        raise SpecsimError(f"{path}: no rows; expected a header {','.join(CSV_FIELDS)}[,phase] and one step per row")
    reader = csv.reader(io.StringIO("\n".join(line for _, line in lines)))
    header = [h.strip().lower() for h in next(reader)]
    missing = [f for f in CSV_FIELDS if f not in header]
    if missing:
        raise SpecsimError(f"{path} line {lines[0][0]}: the header lacks {', '.join(missing)}; expected "
                           f"{','.join(CSV_FIELDS)}[,phase]")
    out = []
    for (number, _), row in zip(lines[1:], reader):
        where = f"{path} line {number}"
        if len(row) != len(header):
            raise SpecsimError(f"{where}: {len(row)} fields where the header has {len(header)}; give every row the "
                               "header's fields")
        rec = {h: v.strip() for h, v in zip(header, row)}
        phase = (rec.get("phase") or "decode").lower()
        if phase not in PHASES:
            raise SpecsimError(f"{where}: field 'phase' is {phase!r}; use one of {', '.join(PHASES)}")
        out.append(StepTime(phase, _int(rec["batch"], where, "batch", 1), _int(rec["new_tokens"], where,
                            "new_tokens", 1), _int(rec["context"], where, "context", 0),
                            _time(rec["step_ms"], where, "step_ms", 1e-3), where))
    if not out:
        raise SpecsimError(f"{path}: a header but no rows; add one step per row ({','.join(CSV_FIELDS)})")
    return out


def _latency_s(path: Path, where: str) -> float:
    """The median latency of one `vllm bench latency --output-json` file (its p50, else its mean)."""
    d = parse_json(read_text(path, "vLLM latency JSON"), str(path))
    if not isinstance(d, dict) or not ({"percentiles", "avg_latency"} & set(d)):
        raise SpecsimError(f"{path} ({where}): not the JSON of vllm bench latency --output-json (no 'percentiles' "
                           "or 'avg_latency')")
    p = d.get("percentiles") or {}
    if isinstance(p, dict) and ("50" in p or 50 in p):
        return _time(p.get("50", p.get(50)), str(path), "percentiles.50")
    return _time(d.get("avg_latency"), str(path), "avg_latency")


RUN_KEYS = ("file", "batch", "input_len", "output_len", "speculative_config", "mean_acceptance_length")
# vllm bench latency --speculative-config's keys that say what ran (its JSON, as vLLM takes it)
SPEC_KEYS = ("method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min",
             "draft_tensor_parallel_size")
SPEC_METHODS_FITTED = ("draft_model",)  # whose draft passes a run's steps give (a head's or a lookup's: not yet)


@dataclass(frozen=True)
class SpeculativeRun:
    """What a speculative `vllm bench latency` run was made with: its method, draft, draft length and the mean
    acceptance length (tokens per step, bonus included) vLLM's spec-decode metrics logged for it."""

    method: str
    model: str
    k: int
    mean_acceptance_length: float


def _speculative(r: dict[str, Any], where: str) -> SpeculativeRun | None:
    """A run's ``speculative_config`` (vLLM's keys) and ``mean_acceptance_length``, checked; None for a plain run."""
    cfg = r.get("speculative_config")
    if cfg is None:
        if "mean_acceptance_length" in r:
            raise SpecsimError(f"{where}: mean_acceptance_length without speculative_config; give the run's "
                               "speculative_config = {method = ..., model = ..., num_speculative_tokens = K}")
        return None
    if not isinstance(cfg, dict):
        raise SpecsimError(f"{where}: speculative_config must be a table, e.g. {{method = \"draft_model\", "
                           "model = \"meta-llama/Llama-3.2-1B\", num_speculative_tokens = 3}")
    unknown = [k for k in cfg if k not in SPEC_KEYS]
    if unknown:
        raise SpecsimError(f"{where}: speculative_config key {unknown[0]!r} is not one specsim reads; allowed: "
                           f"{', '.join(SPEC_KEYS)}")
    method = str(cfg.get("method", "draft_model" if cfg.get("model") else ""))
    if not method:
        raise SpecsimError(f"{where}: speculative_config needs its method (draft_model, eagle3, ngram, mtp, ...)")
    k = _int(cfg.get("num_speculative_tokens"), where, "speculative_config.num_speculative_tokens", 1)
    if "mean_acceptance_length" not in r:
        raise SpecsimError(f"{where}: a speculative run needs mean_acceptance_length (tokens per step, bonus "
                           "included: vLLM's spec-decode metrics log it as 'Mean acceptance length') to split its "
                           "latency into steps")
    length = r["mean_acceptance_length"]
    if isinstance(length, bool) or not isinstance(length, (int, float)) or not math.isfinite(length) or \
            not 1.0 <= length <= k + 1:
        raise SpecsimError(f"{where}: mean_acceptance_length = {length!r} must be a number from 1 to "
                           f"num_speculative_tokens + 1 = {k + 1}")
    return SpeculativeRun(method, str(cfg.get("model", "")), k, float(length))


def read_vllm(manifest: str | Path) -> list[StepTime]:
    """Decode steps and prefills from `vllm bench latency` JSON files named by a TOML manifest; repeats of one shape
    (batch, input, output length, speculative config) are taken at their median. A speculative run's steps (by
    difference of output lengths as a plain run's, times its mean acceptance length: a step yields that many
    tokens) are kept as phase ``speculative``, with the draft length in ``new_tokens`` - 1."""
    manifest = Path(manifest)
    try:
        spec = tomllib.loads(read_text(manifest, "vLLM manifest"))
    except tomllib.TOMLDecodeError as e:
        raise SpecsimError(f"{manifest}: not TOML ({e})") from None
    extra = [k for k in spec if k != "run"]
    if extra:
        raise SpecsimError(f"{manifest}: key {extra[0]!r} is not one specsim reads; a manifest holds [[run]] tables "
                           f"only, each with {', '.join(RUN_KEYS)}")
    runs = spec.get("run")
    if not isinstance(runs, list) or not runs:
        raise SpecsimError(f"{manifest}: no [[run]] tables; each names file, batch, input_len, output_len")
    groups: dict[tuple[int, int, SpeculativeRun | None], dict[int, list[tuple[float, str]]]] = {}
    for i, r in enumerate(runs, 1):
        where = f"{manifest} run {i}"
        if not isinstance(r, dict) or "file" not in r:
            raise SpecsimError(f"{where}: field 'file' is missing")
        unknown = [k for k in r if k not in RUN_KEYS]
        if unknown:
            raise SpecsimError(f"{where}: key {unknown[0]!r} is not one specsim reads; allowed: {', '.join(RUN_KEYS)}")
        b, n_in = _int(r.get("batch"), where, "batch", 1), _int(r.get("input_len"), where, "input_len", 1)
        n_out = _int(r.get("output_len"), where, "output_len", 1)
        run = _speculative(r, where)
        latency = _latency_s(manifest.parent / str(r["file"]), where)
        groups.setdefault((b, n_in, run), {}).setdefault(n_out, []).append((latency, where))
    out = []
    for (b, n_in, run), by_out in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], g[0][2] is not None)):
        g = [(o, float(np.median([t for t, _ in ts])), ts[-1][1]) for o, ts in sorted(by_out.items())]
        what = f"batch {b}, input {n_in}" + (f", {run.method} k = {run.k}" if run else "")
        if len(g) < 2:
            raise SpecsimError(f"{g[0][2]}: {what} has one output length; give two or more (e.g. 128 and 256) so "
                               "that decode steps can be told from the prefill")
        steps = []
        for (o1, t1, _), (o2, t2, w2) in zip(g, g[1:]):
            step = (t2 - t1) / (o2 - o1)
            if step <= 0:
                raise SpecsimError(f"{w2}: latency does not grow with output length ({t1:.4g} s at {o1}, {t2:.4g} s "
                                   f"at {o2}); the runs are too noisy or mislabelled")
            steps.append(step)
            if run is None:
                out.append(StepTime("decode", b, 1, n_in + (o1 + o2) // 2, step, w2))
            else:  # a step yields mean_acceptance_length tokens
                out.append(StepTime("speculative", b, run.k + 1, n_in + (o1 + o2) // 2,
                                    step * run.mean_acceptance_length, f"{w2} ({run.method}, {run.model or 'draft'})"))
        o1, t1, w1 = g[0]
        prefill = t1 - (o1 - 1) * steps[0]
        if prefill > 0 and run is None:
            out.append(StepTime("prefill", b, n_in, 0, prefill, w1))
    unfitted = sorted({r.method for _, _, r in groups if r is not None and r.method not in SPEC_METHODS_FITTED})
    if unfitted:
        raise SpecsimError(f"{manifest}: speculative runs of method {unfitted[0]} cannot be fitted yet (only "
                           f"{', '.join(SPEC_METHODS_FITTED)} runs give a draft model's passes); leave them out of "
                           "the manifest")
    return out


def read_sglang(path: str | Path) -> list[StepTime]:
    """Decode steps and prefills from SGLang `bench_one_batch` result lines."""
    out = []
    for i, r in enumerate(read_records(path, "SGLang bench_one_batch results"), 1):
        where = f"{path} line {i}"
        if not isinstance(r, dict):
            raise SpecsimError(f"{where}: not a JSON object")
        b = _int(r.get("batch_size"), where, "batch_size", 1)
        n_in = _int(r.get("input_len"), where, "input_len", 1)
        n_out = _int(r.get("output_len"), where, "output_len", 1)
        if "median_decode_latency" in r:
            out.append(StepTime("decode", b, 1, n_in + n_out // 2,
                                _time(r["median_decode_latency"], where, "median_decode_latency"), where))
        if "prefill_latency" in r:
            out.append(StepTime("prefill", b, n_in, 0, _time(r["prefill_latency"], where, "prefill_latency"), where))
    if not out:
        raise SpecsimError(f"{path}: no line has median_decode_latency or prefill_latency; give the result lines "
                           "SGLang's bench_one_batch writes (--result-filename)")
    return out


def read_llama_bench(path: str | Path) -> list[StepTime]:
    """The tests of ``llama-bench -o json`` (or ``-o jsonl``), one sequence each: a prompt test (``n_prompt`` > 0,
    ``n_gen`` 0) is one pass of n_prompt tokens on ``n_depth`` cached ones (a prefill at depth 0; at depth d with
    n_prompt = k + 1 exactly a verification pass); a generation test is n_gen one-token passes from depth d, each
    at the mean context. Its time: the median of ``samples_ns`` (else ``avg_ns``). Two models in one file: the
    smaller (``model_n_params``) is the draft."""
    text = read_text(path, "llama-bench JSON")
    try:
        records = parse_json(text, str(path))
    except SpecsimError:
        records = read_records(path, "llama-bench JSON lines")
    if not isinstance(records, list) or not records:
        raise SpecsimError(f"{path}: not the output of llama-bench -o json (a list of test results); give what "
                           "llama-bench -o json prints")
    params = {r.get("model_n_params") for r in records if isinstance(r, dict)}
    if len(params) > 2:
        raise SpecsimError(f"{path}: tests of {len(params)} models; give one target and at most one draft")
    draft_params = min(params, key=lambda v: v or 0) if len(params) == 2 else None
    out = []
    for i, r in enumerate(records, 1):
        where = f"{path} test {i}"
        if not isinstance(r, dict) or "n_prompt" not in r or "n_gen" not in r:
            raise SpecsimError(f"{where}: not a llama-bench test (no n_prompt, n_gen); give what llama-bench -o json "
                               "prints")
        n_prompt, n_gen = _int(r["n_prompt"], where, "n_prompt", 0), _int(r["n_gen"], where, "n_gen", 0)
        depth = _int(r.get("n_depth", 0), where, "n_depth", 0)
        samples = r.get("samples_ns")
        t = (_time(float(np.median(samples)), where, "samples_ns", 1e-9) if isinstance(samples, list) and samples
             else _time(r.get("avg_ns"), where, "avg_ns", 1e-9))
        draft = draft_params is not None and r.get("model_n_params") == draft_params
        if n_prompt and n_gen:
            raise SpecsimError(f"{where}: a mixed prompt + generation test (-pg) cannot be split into passes; run "
                               "llama-bench with -p and -n apart")
        if n_prompt:
            phase = "draft" if draft else ("prefill" if depth == 0 else "decode" if n_prompt == 1 else "verify")
            out.append(StepTime(phase, 1, n_prompt, depth, t, where))
        elif n_gen:
            out.append(StepTime("draft" if draft else "decode", 1, 1, depth + n_gen // 2, t / n_gen, where))
    if not out:
        raise SpecsimError(f"{path}: no test with n_prompt or n_gen > 0")
    return out


READERS = {"csv": read_csv, "vllm": read_vllm, "sglang": read_sglang, "llama-bench": read_llama_bench}


def read_source(source: str) -> tuple[str, list[StepTime]]:
    """``KIND:PATH`` (csv, vllm, sglang, llama-bench) or a path ending in .csv -> (kind, steps)."""
    kind, sep, path = source.partition(":")
    if sep and kind.lower() not in READERS and len(kind) > 1 and kind.replace("-", "").replace("_", "").isalnum() \
            and not Path(source).exists():
        raise SpecsimError(f"--from {source!r}: {kind!r} is not a source specsim reads; give vllm:MANIFEST.toml, "
                           "sglang:RESULTS.jsonl, llama-bench:RESULTS.json or csv:STEPS.csv (any engine's step times, "
                           "TensorRT-LLM's too, can be written as the CSV)")
    if not sep or kind.lower() not in READERS:
        if source.lower().endswith(".csv"):
            kind, path = "csv", source
        else:
            raise SpecsimError(f"--from {source!r}: say which engine measured it: vllm:MANIFEST.toml, "
                               "sglang:RESULTS.jsonl, llama-bench:RESULTS.json or csv:STEPS.csv")
    return kind.lower(), READERS[kind.lower()](path)
