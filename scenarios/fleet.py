"""`specsim sweep SPEC.toml`: a grid of hardware x model pairs x tensor parallelism x policies x rates, every cell a
serving simulation, run by an executor (local processes, Ray) into one table and the capacity plots.

A spec (``scenarios/sweeps/example.toml`` is one)::

    hardware = ["h100-sxm", "a100-80gb-sxm"]
    pairs = [["llama-3.1-8b", "llama-3.2-1b"],   # [target, draft], or [target, draft, its acceptance]: a draft
             ["llama-3.1-8b", "eagle3", "iid:0.75"], #   kind is one more axis (eagle3, mtp, medusa:H, ngram, ...)
             ["llama-3.1-8b", "ngram", "iid:0.8@proposed:0.3"]]
    tp = [1, 2]
    policies = ["off", "fixed:3", "adaptive"]
    rates = [1, 2, 4, 8, 16, 32]                  # requests/s per engine
    acceptance = "iid:0.7"
    [serving]                                     # any of simulate's serving options (defaults as there)
    requests = 500
    slo_tpot_ms = 50

Each configuration (hardware, pair, tp) is one scenario: the same requests and seed for every policy and rate
(common random numbers), so the table's differences are the configurations', not sampling noise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios import tomllib
from scenarios.serving_scenario import ServingOptions
from simulator import SpecsimError
from simulator.capacity import Scenario, run_jobs, sweep_tasks
from simulator.executors import Executor
from simulator.limits import MAX_RANGE_VALUES
from simulator.metrics import ServingMetrics
from simulator.policies import Policy

KEYS = {"hardware", "pairs", "tp", "policies", "rates", "acceptance", "engine", "dtype", "draft_tp", "serving"}
SERVING_KEYS = {"requests": "n_requests", "arrivals": "arrivals", "prompt_tokens": "prompt_tokens",
                "output_tokens": "output_tokens", "max_batch": "max_batch", "max_prefill_tokens": "max_prefill_tokens",
                "draft_sync": "draft_sync", "kv_allocation": "kv_allocation", "slo_tpot_ms": "slo_tpot_s",
                "slo_ttft_ms": "slo_ttft_s", "seed": "seed"}
SERVING_TYPES = {"requests": int, "max_batch": int, "max_prefill_tokens": int, "seed": int, "slo_tpot_ms": float,
                 "slo_ttft_ms": float}  # the rest are strings (lengths may be written as a bare number)


@dataclass(frozen=True)
class SweepSpec:
    hardware: tuple[str, ...]
    pairs: tuple[tuple[str, ...], ...]  # (target, draft) or (target, draft, acceptance)
    tp: tuple[int, ...]
    policies: tuple[str, ...]
    rates: tuple[float, ...]
    acceptance: str
    serving: ServingOptions
    engine: str = "vllm"
    dtype: str = "bf16"
    draft_tp: int | None = None
    source: str = ""

    @property
    def simulations(self) -> int:
        return len(self.hardware) * len(self.pairs) * len(self.tp) * len(self.policies) * len(self.rates)


def _list(d: Mapping[str, Any], key: str, where: str, kind: type, default: Any = None) -> tuple:
    v = d.get(key, default)
    if v is None:
        raise SpecsimError(f"{where}: {key!r} is missing; see scenarios/sweeps/example.toml")
    v = v if isinstance(v, list) else [v]
    ok = (lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0) \
        if kind is float else (lambda x: isinstance(x, kind) and not isinstance(x, bool))
    if not v or not all(ok(x) for x in v):
        what = "positive numbers" if kind is float else kind.__name__
        raise SpecsimError(f"{where}: {key!r} must be a non-empty list of {what}, got {v!r}")
    return tuple(v)


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """The spec, every key checked (unknown keys refused, so a typo is not silently a default)."""
    from scenarios.files import read_text

    where = str(path)
    try:
        d = tomllib.loads(read_text(path, "sweep spec"))
    except tomllib.TOMLDecodeError as e:
        raise SpecsimError(f"{where}: not TOML ({e})") from None
    unknown = sorted(set(d) - KEYS)
    if unknown:
        raise SpecsimError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}")
    pairs = _list(d, "pairs", where, list)
    if not all(len(p) in (2, 3) and all(isinstance(x, str) for x in p) for p in pairs):
        raise SpecsimError(f"{where}: 'pairs' must be a list of [target, draft] or [target, draft, acceptance], got "
                           f"{list(pairs)!r}")
    serving_d = d.get("serving", {})
    if not isinstance(serving_d, dict) or set(serving_d) - set(SERVING_KEYS):
        bad = sorted(set(serving_d) - set(SERVING_KEYS)) if isinstance(serving_d, dict) else serving_d
        raise SpecsimError(f"{where}: [serving] has unknown key(s) {bad}; known: {', '.join(SERVING_KEYS)}")
    for key, v in serving_d.items():
        kind = SERVING_TYPES.get(key, str)
        allowed = {int: int, float: (int, float)}.get(kind, (str, int))
        if isinstance(v, bool) or not isinstance(v, allowed):
            what = {int: "a whole number", float: "a number"}.get(kind, "a string such as \"256..1024\"")
            raise SpecsimError(f"{where}: [serving] {key} must be {what}, got {v!r}")
    kw = {SERVING_KEYS[k]: (str(v) if SERVING_TYPES.get(k, str) is str else v) for k, v in serving_d.items()}
    for ms in ("slo_tpot_s", "slo_ttft_s"):
        if ms in kw:
            kw[ms] = float(kw[ms]) / 1e3
    policies = _list(d, "policies", where, str)
    try:
        serving = ServingOptions(**{**kw, "policy_text": ",".join(policies), "executor": "serial"})
    except TypeError as e:
        raise SpecsimError(f"{where}: [serving]: {e}") from None
    rates = tuple(float(r) for r in _list(d, "rates", where, float))
    tps = _list(d, "tp", where, int, [1])
    if min(tps) < 1:
        raise SpecsimError(f"{where}: 'tp' counts GPUs per engine, each at least 1, got {list(tps)!r}")
    from scenarios.hardware_file import is_hardware_file

    # a hardware file named by a relative path is read from beside the spec
    gpus = tuple(str(Path(path).parent / h) if is_hardware_file(h) and not Path(h).is_absolute() else h
                 for h in _list(d, "hardware", where, str))
    spec = SweepSpec(gpus, tuple(tuple(p) for p in pairs), tps, policies, rates,
                     str(d.get("acceptance") or ""), serving, str(d.get("engine", "vllm")),
                     str(d.get("dtype", "bf16")), d.get("draft_tp"), where)
    if not spec.acceptance and any(len(p) == 2 for p in spec.pairs):
        raise SpecsimError(f"{where}: 'acceptance' is missing (e.g. acceptance = \"iid:0.7\"), and a pair without "
                           "its own acceptance needs it")
    if spec.simulations > MAX_RANGE_VALUES:
        raise SpecsimError(f"{where}: {spec.simulations:,} simulations; a sweep is limited to {MAX_RANGE_VALUES:,}")
    return spec


@dataclass(frozen=True)
class Configuration:
    hardware: str
    target: str
    draft: str
    tp: int
    scenario: Scenario
    policies: tuple[Policy, ...]
    caption: str

    @property
    def label(self) -> str:
        return f"{self.hardware} {self.target}/{self.draft} TP{self.tp}"


def configurations(spec: SweepSpec) -> list[Configuration]:
    """Every (hardware, pair, tp) resolved and its scenario built, so that any bad combination (a model that does
    not fit, a split it cannot take) is refused, naming it, before the first simulation."""
    from scenarios.serving_scenario import build_scenario
    from scenarios.setup import resolve_setup

    out = []
    for hw in spec.hardware:
        for target, draft, *own in spec.pairs:
            acceptance = own[0] if own else spec.acceptance
            for tp in spec.tp:
                what = f"{spec.source}: {hw}, {target}/{draft}, TP {tp}"
                try:
                    s = resolve_setup(hw, None, target, draft, spec.dtype, acceptance, True, spec.engine, tp,
                                      spec.draft_tp)
                    scenario, policies = build_scenario(s.cost, s.target, s.draft, s.acceptance, spec.serving)
                except SpecsimError as e:
                    raise SpecsimError(f"{what}: {e}") from None
                out.append(Configuration(hw, target, draft, tp, scenario, tuple(policies), s.caption))
    return out


COLUMNS = ("hardware", "target", "draft", "tp", "policy", "rate_per_s", "throughput_tokens_per_s", "requests_per_s",
           "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
           "slo_attainment", "sustained", "mean_batch", "tokens_per_step", "preemptions")


def row(c: Configuration, m: ServingMetrics) -> dict[str, Any]:
    ms = [1e3 * v for v in (*m.ttft_s, *m.tpot_s)]
    return dict(zip(COLUMNS, (c.hardware, c.target, c.draft, c.tp, m.policy, m.rate_per_s, m.throughput_tokens_per_s,
                              m.requests_per_s, *ms, m.slo_attainment, m.sustained, m.mean_batch, m.tokens_per_step,
                              m.preemptions)))


def run_sweep(spec: SweepSpec, executor: Executor, progress: Callable[[str, int], Any]
              ) -> tuple[list[Configuration], list[dict[str, Any]], list[ServingMetrics]]:
    """Every simulation of the grid through `executor` (tasks of one policy over a chunk of rates, so that a worker
    reuses the caches it builds), the results in a fixed order: configuration, rate, policy."""
    configs = configurations(spec)
    tasks, owners = [], []
    for c in configs:
        for t in sweep_tasks(c.scenario, c.policies, spec.rates, executor.slots, metrics_only=True):
            tasks.append(t)
            owners.append(c)
    with progress(f"sweep ({executor.label})", spec.simulations) as bar:
        done = executor.map(run_jobs, tasks, lambda i: bar.update(len(tasks[i][2])))
    by = {(id(c), t[1].label, rate): m for c, t, ms in zip(owners, tasks, done) for rate, m in zip(t[2], ms)}
    order = [(c, by[(id(c), p.label, rate)]) for c in configs for rate in spec.rates for p in c.policies]
    return configs, [row(c, m) for c, m in order], [m for _, m in order]


def capacity(rows: Sequence[Mapping[str, Any]], attainment: float = 0.9) -> list[dict[str, Any]]:
    """Per configuration and policy: the highest rate of the grid that is sustained with at least `attainment` of
    requests within the SLO (0 if none), and the lowest that is not."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["rate_per_s"]):
        key = (r["hardware"], r["target"], r["draft"], r["tp"], r["policy"])
        e = out.setdefault(key, dict(zip(("hardware", "target", "draft", "tp", "policy"), key),
                                     max_rate_per_s=0.0, first_failing_rate_per_s=None))
        ok = r["sustained"] and r["slo_attainment"] >= attainment
        if ok and e["first_failing_rate_per_s"] is None:
            e["max_rate_per_s"] = r["rate_per_s"]
        elif not ok and e["first_failing_rate_per_s"] is None:
            e["first_failing_rate_per_s"] = r["rate_per_s"]
    return list(out.values())


def table_text(rows: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """The table as CSV or JSON."""
    if fmt == "json":
        return json.dumps(rows, indent=1, default=float) + "\n"
    lines = [",".join(COLUMNS)]
    for r in rows:
        lines.append(",".join(f"{r[c]:.6g}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS))
    return "\n".join(lines) + "\n"
