"""`specsim calibrate --from SOURCE`: the cost model fitted to step times a real engine measured, instead of passes
timed here.

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
  speculative run's steps give its draft's passes (`draft_passes_of`).
- ``sglang:FILE.jsonl``: the result lines of SGLang's ``bench_one_batch`` (``batch_size``, ``input_len``,
  ``output_len``, ``prefill_latency``, ``median_decode_latency``): a decode step at the mid-output context, and the
  prefill.

The engine's own time around its passes (scheduling, input building, sampling) is inside every step: the fixed cost
the fit finds is charged once per step, not to every pass, so a draft pass costs what its own layers cost
(`split_step_costs`); the profile says what was assumed for what the steps never showed (draft passes, the
accept/reject rule) and which fitted rates were held at the datasheet's ceilings. The fit is
`simulator.rate_fit.fit_cost_model` on every point; its error is each point predicted by the fit to the others
(cross-validation: an engine's sample is small). No fitted rate passes the datasheet's bandwidth or FLOP/s.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from scenarios import is_builtin_pair, load_engine, load_hardware, load_model, tomllib
from scenarios.files import check_output, parse_json, read_records, read_text
from scenarios.profile import (
    DeviceInfo,
    Fit,
    HeldoutErrors,
    Microbenchmarks,
    PassRecord,
    Profile,
    assess_trust,
    save_profile,
)
from simulator import SpecsimError, __version__
from simulator.cost import CostModel
from simulator.rate_fit import FitResult, PassPoint, errors, fit_cost_model
from simulator.specs import EngineOverheads, HardwareSpec, ModelSpec, Overheads, PerStep

PHASES = ("decode", "verify", "draft", "prefill")
ENGINE_PRESET = {"vllm": "vllm"}  # the engine preset (scenarios/engines.toml) describing a source's engine
CSV_FIELDS = ("batch", "new_tokens", "context", "step_ms")
LOO_UP_TO = 24  # leave-one-out cross-validation up to this many step times, k-fold beyond
FOLDS = 5


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


def to_points(steps: Sequence[StepTime], target: ModelSpec, draft: ModelSpec) -> list[PassPoint]:
    """Every step as a pass of the model it ran (draft passes: the draft; everything else: the target); speculative
    steps are not one pass (`draft_passes_of`)."""
    return [PassPoint(draft.name if s.phase == "draft" else target.name, s.batch, s.new_tokens, s.context, s.time_s)
            for s in steps if s.phase != "speculative"]


def draft_passes_of(spec_steps: Sequence[StepTime], plain_fit: CostModel, target: ModelSpec, draft: ModelSpec,
                    accept_s: float) -> list[PassPoint]:
    """The draft passes speculative steps give: a step of draft length k is k draft passes, one verify pass of k + 1
    tokens and the accept/reject rule, so one draft pass is the step less the verify pass the plain steps' fit
    predicts (the engine's per-step cost inside it) and the rule's cost, over k. Refused where that leaves nothing:
    the mean acceptance length or the runs' labels are wrong."""
    out = []
    for s in spec_steps:
        k = s.new_tokens - 1
        verify = plain_fit.pass_time_s(target, s.batch, s.new_tokens, s.context)
        one = (s.time_s - verify - accept_s) / k
        if one <= 0:
            raise SpecsimError(f"{s.where}: a speculative step of {s.time_s * 1e3:.3g} ms is no longer than its verify "
                               f"pass alone ({verify * 1e3:.3g} ms, from the plain runs): check its "
                               "mean_acceptance_length and that the plain and speculative runs share one engine")
        out.append(PassPoint(draft.name, s.batch, 1, s.context, one))
    return out


# Step times no engine takes: a step over an hour (a unit slip: step_ms is milliseconds), or more than a second of
# engine overhead beyond this many times the datasheet roofline of its pass (a log of something else); on a GPU
# preset, a step faster than half what its datasheet allows (seconds written as milliseconds).
MAX_STEP_S = 3600.0
MAX_OVER_ROOFLINE = 1000.0
MAX_OVERHEAD_S = 1.0
MIN_OF_ROOFLINE = 0.5


def check_plausible(steps: Sequence[StepTime], hw: HardwareSpec, target: ModelSpec, draft: ModelSpec,
                    dtype: str, lower: bool = True) -> None:
    """Refuse, naming the step, a time no engine takes on this device (`MAX_STEP_S`, `MAX_OVER_ROOFLINE`, and with
    `lower` - a datasheet, not a CPU's quick micro-benchmarks - `MIN_OF_ROOFLINE`)."""
    roof = CostModel.from_hardware(hw, dtype, datasheet=True)
    for s in steps:
        model = draft if s.phase == "draft" else target
        floor = roof.pass_time_s(model, s.batch, s.new_tokens, s.context) if s.phase != "speculative" else 0.0
        if s.time_s > MAX_STEP_S or (floor > 0 and s.time_s > MAX_OVER_ROOFLINE * floor + MAX_OVERHEAD_S):
            raise SpecsimError(f"{s.where}: a {s.phase} step of {s.time_s:,.4g} s (batch {s.batch}, {s.new_tokens} "
                               f"tokens) is {s.time_s / floor:,.0f}x what {hw.name}'s datasheet allows for it; no "
                               "engine takes that: check the units (step_ms is milliseconds) or leave the row out"
                               if floor > 0 else f"{s.where}: a step of {s.time_s:,.4g} s: check the units")
        if lower and s.time_s < MIN_OF_ROOFLINE * floor:
            raise SpecsimError(f"{s.where}: a {s.phase} step of {s.time_s * 1e3:,.4g} ms (batch {s.batch}, "
                               f"{s.new_tokens} tokens) is faster than {hw.name}'s datasheet allows "
                               f"({floor * 1e3:,.4g} ms at its peak bandwidth and FLOP/s): check the units (step_ms is "
                               "milliseconds), the model (--target, --draft) and the GPU (--hardware)")


def _ceilings(hw: HardwareSpec, dtype: str) -> dict[str, Any]:
    """The preset's datasheet ceilings in the shape of micro-benchmarks (nothing was measured here)."""
    bw = hw.mem_bw_bytes_per_s
    return {"source": f"datasheet of {hw.name} ({hw.source}); not measured: the profile was imported",
            "bandwidth": {"read_bytes_per_s": bw, "copy_bytes_per_s": bw},
            "matmul": {dtype: {"flops_per_s": hw.peak_flops(dtype)}}}


def this_cpu(source: str) -> tuple[HardwareSpec, dict[str, Any], dict[str, Any]]:
    """This machine's CPU as its quick micro-benchmarks see it (a CPU has no datasheet here): an engine's step
    times measured on it are fitted under its measured bandwidth and FLOP/s."""
    import torch

    from calibrate.microbench import run_microbenchmarks
    from calibrate.timing import Timer
    from engine.device import device_identity

    identity = device_identity(torch.device("cpu"))
    micro = run_microbenchmarks(Timer(torch.device("cpu")), True, lambda: None)
    micro["source"] = "micro-benchmarks of this CPU (quick), run by the import"
    hw = Microbenchmarks.from_dict(micro).hardware(identity["name"], None)
    return hw, micro, {**identity, "imported_from": source}


def import_profile(source: str, hardware: str, target_name: str, draft_name: str, dtype: str, seed: int,
                   command: str, options: Mapping[str, Any]) -> Profile:
    """The profile fitted to an engine's step times (see the module docstring)."""
    kind, steps = read_source(source)
    if hardware.lower() == "cpu":
        hw, micro, device = this_cpu(source)
    else:
        hw = load_hardware(hardware)
        micro = _ceilings(hw, dtype)
        device = {"kind": "cuda", "name": hw.name, "memory_bytes": hw.mem_capacity_bytes, "imported_from": source}
    target, draft = load_model(target_name, dtype), load_model(draft_name, dtype)
    if target.name == draft.name:
        raise SpecsimError(f"--target and --draft are one model ({target.name}): give the draft the engine ran")
    specs = {target.name: target, draft.name: draft}
    check_plausible(steps, hw, target, draft, dtype, lower=hardware.lower() != "cpu")
    points = to_points(steps, target, draft)
    spec_steps = [s for s in steps if s.phase == "speculative"]
    if len(points) < 6:
        raise SpecsimError(f"{source}: {len(points)} step times; the fit needs at least 6 (several batch sizes)")

    # A target-only sample cannot tell a slower read of the weights from a fixed cost of every step: the weights are
    # read at best at the bandwidth real engines achieve on this GPU (the preset's, fitted to such engines).
    achieved = hw.mem_bw_bytes_per_s * hw.bw_efficiency
    drafts_measured = any(s.phase == "draft" for s in steps)

    # A CPU has no datasheet here, and a quick read benchmark on a shared machine can fall below what the engine
    # reaches: its measured rates seed the fit but bound nothing (the sample's steps alone decide).
    cpu = hardware.lower() == "cpu"

    def fitted(train: Sequence[PassPoint]) -> FitResult:
        return fit_cost_model(train, specs, hw, hw.peak_flops(dtype), hw.mem_bw_bytes_per_s, dtype,
                              floor_s_per_byte=0.0 if cpu else 1.0 / achieved, per_row_term=drafts_measured,
                              compute_term=True, ceiling_bw_bytes_per_s=None if cpu else hw.mem_bw_bytes_per_s,
                              ceiling_flops_per_s=None if cpu else hw.peak_flops(dtype))

    if spec_steps:  # their draft passes, from the plain steps' fit; then everything fitted together
        accept = load_engine(ENGINE_PRESET.get(kind, "vllm"))[0].chain_accept.fixed_s
        points += draft_passes_of(spec_steps, fitted(points).cost, target, draft, accept)
        drafts_measured = True
    result = fitted(points)
    cost = result.cost
    heldout = cross_validated(points, lambda train: fitted(train).cost, specs, seed)
    datasheet = CostModel.from_hardware(hw, dtype, datasheet=True)
    overheads, assumed, step_s = split_step_costs(cost.overheads, kind, drafts_measured, draft)
    if spec_steps:
        assumed.append(f"{draft.name}'s passes from {len(spec_steps)} speculative steps: each step (the per-token time "
                       "times its run's mean_acceptance_length) less the verify pass the plain runs' fit predicts and "
                       "the accept/reject rule, over its k; the runs' draft is taken to be --draft")
    assumed.insert(0, "no bound on the fitted rates: this CPU's measured read bandwidth "
                      f"({achieved / 1e9:,.0f} GB/s) seeds the fit only" if cpu else
                   f"weights read at {achieved / 1e9:,.0f} GB/s at best, what engines achieve on this GPU "
                   f"({100 * hw.bw_efficiency:.0f} % of its datasheet; scenarios/hardware.toml)")
    # What the passes took: the steps' times less the engine's own cost of a step (charged once per step).
    net = [p.time_s - (0.0 if p.model == draft.name else step_s) for p in points]
    if min(net) <= 0:
        raise SpecsimError(f"{source}: the fitted per-step cost ({step_s * 1e3:.2f} ms) exceeds a measured step; the "
                           "step times do not fit one engine (mixed settings or units?)")
    passes = tuple(PassRecord(p.model, p.batch, p.new_tokens, p.context, t, 0.0) for p, t in zip(points, net))
    held = HeldoutErrors.from_dict(heldout)
    method = f"{'leave-one-out' if len(points) <= LOO_UP_TO else f'{FOLDS}-fold'} cross-validation"
    fit = Fit(cost.linear_rates, cost.attention_rates, overheads, held,
              HeldoutErrors.from_dict(errors(datasheet, points, specs)), len(points), cost.attention_overlap, (),
              {"method": "non-negative least squares on relative error, to an engine's step times; see "
                         "calibrate/step_import.py",
               "heldout_method": f"{method} (each point predicted by the fit to the others)",
               "assumed": list(assumed), "bounds": list(result.bounds)},
              linear_additive=True)
    return Profile(
        command=command, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        device=DeviceInfo.from_dict(device),
        dtype=dtype, target=target, draft=draft, micro=Microbenchmarks.from_dict(micro),
        passes=passes, fit=fit, options=dict(options), engine_mode="graph",
        origin=source if ":" in source else f"{kind}:{source}", quick=False, trust=assess_trust(held, passes),
        specsim_version=__version__)


def split_step_costs(fitted: Overheads, kind: str, drafts_measured: bool, draft: ModelSpec
                     ) -> tuple[Overheads, list[str], float]:
    """Where the fitted fixed cost is paid, and what the import assumed: (overheads, assumptions, the cost of a
    step taken out of every measured target step).

    A step of an engine is its passes plus the engine's own work (scheduling, input building, sampling), paid once
    per step. Target-only step times cannot tell that work from a fixed cost of the pass, so it is charged once per
    step (`EngineOverheads.plain` and `.verify`), never to each draft pass: a draft pass costs its own layers at the
    fitted rates. Where draft passes were measured too, their fixed cost is seen and stays per pass. The
    accept/reject rule's cost is never in a plain step: the engine preset of the source's engine gives it, if
    there is one."""
    assumed: list[str] = []
    engine = EngineOverheads()
    if drafts_measured:
        overheads = replace(fitted, engine=engine)
        step_s = 0.0
    else:
        step_s = fitted.pass_s
        engine = EngineOverheads(plain=PerStep(step_s), verify=PerStep(step_s))
        overheads = replace(fitted, pass_s=0.0, engine=engine)
        assumed.append(f"the fixed {step_s * 1e6:,.0f} us every measured step paid is the engine's own per-step "
                       "work, charged once per step; no draft pass was measured, so a draft pass costs its layers at "
                       f"the target's fitted rates and per-layer cost ({draft.name}: {draft.n_layers} layers), no "
                       "fixed cost of its own")
    preset = ENGINE_PRESET.get(kind)
    if preset is not None:
        engine_preset, _, _ = load_engine(preset)
        accept = engine_preset.chain_accept
        overheads = replace(overheads, engine=replace(overheads.engine, chain_accept=accept,
                                                      tree_accept=engine_preset.tree_accept))
        assumed.append(f"the accept/reject rule: {accept.fixed_s * 1e6:,.0f} us per speculative step, the {preset} "
                       "engine preset's (scenarios/engines.toml; not in the measured steps)")
    else:
        assumed.append("the accept/reject rule: nothing (not in the measured steps, no engine preset for "
                       f"{kind!r} sources)")
    return overheads, assumed, step_s


def cross_validated(points: Sequence[PassPoint], fit_on: Any, specs: Mapping[str, ModelSpec], seed: int
                    ) -> dict[str, Any]:
    """Each point predicted by the fit to the others: leave one out for up to LOO_UP_TO points, else FOLDS random
    folds. An engine's sample is small, and a fixed hold-out would leave whole batch sizes unseen or too few points
    to judge; `errors`' summary of all the predictions."""
    n = len(points)
    order = np.random.default_rng(seed).permutation(n)
    folds = [order[i::n if n <= LOO_UP_TO else FOLDS] for i in range(n if n <= LOO_UP_TO else FOLDS)]
    rows: list[dict[str, Any]] = []
    for held in folds:
        test = [points[i] for i in held]
        rows += errors(fit_on([points[i] for i in range(n) if i not in set(held.tolist())]), test, specs)["points"]
    a = np.abs([r["rel_error"] for r in rows])
    return {"n": len(rows), "median_abs_err": float(np.median(a)), "p90_abs_err": float(np.percentile(a, 90)),
            "max_abs_err": float(a.max()), "points": rows}


def calibrate_from(source: str, hardware: str | None, target: str, draft: str, dtype: str, seed: int,
                   out: Path | None, command: str, options: Mapping[str, Any]) -> tuple[Profile, Path]:
    """`specsim calibrate --from`: the output checked first, the profile fitted and written."""
    if source.lower().startswith("aiconfigurator:"):  # measured kernels, not step times: calibrate/aiconfigurator*
        from calibrate.aiconfigurator_profile import aiconfigurator_profile

        if is_builtin_pair(target) or draft == "specsim-draft":
            raise SpecsimError("--from aiconfigurator: needs --target and --draft: the models to price, e.g. --target "
                               "llama-3.1-8b --draft llama-3.2-1b")
        if out is not None:
            check_output(out, "profile", (".json",))
        profile = aiconfigurator_profile(source, target, draft, dtype, int(options.get("tp") or 1), command, options)
        return profile, save_profile(profile, out)
    if not hardware:
        raise SpecsimError("--from needs --hardware PRESET: the GPU the engine ran on (its datasheet ceilings), or "
                           "--hardware cpu: this machine's CPU, measured")
    if is_builtin_pair(target):
        raise SpecsimError("--from needs --target (and --draft): the models the engine served, e.g. --target "
                           "llama-3.1-8b --draft llama-3.2-1b, or model folders (as specsim export --out pair/ "
                           "writes them: --target pair/target --draft pair/draft)")
    if out is not None:
        check_output(out, "profile", (".json",))
    profile = import_profile(source, hardware, target, draft, dtype, seed, command, options)
    return profile, save_profile(profile, out)
