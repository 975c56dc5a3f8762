"""Acceptance specs that name something on disk or in a real engine, resolved into the model's acceptance classes.

``acceptance_from_spec`` is the one entry point for every spec that does not need a calibration profile:
``trace:FILE[:eagle|ngram]`` (a greedy trace, read here), the engines' counters (``vllm-metrics:FILE``,
``sglang:FILE@K``, ``trtllm:FILE[@K]``, ``accept-length:L@K``), and the pure models (``iid:``, ``positional:``,
``beta:``, ``markov:``, ``ranks:``), which `simulator.acceptance.parse_acceptance` builds. ``measured`` and
``fit:`` need a profile or a fit and are resolved by `scenarios.setup`.
"""

from __future__ import annotations

from pathlib import Path

from scenarios.engine_metrics import ENGINE_KINDS, engine_acceptance
from scenarios.traces import load_acceptance_trace
from simulator import SpecsimError
from simulator.acceptance import Acceptance, Proposing
from simulator.acceptance_parse import parse_acceptance, split_proposed
from simulator.context import with_context

TRACE_COLUMNS = ("eagle", "ngram")


def split_trace_spec(body: str) -> tuple[str, str]:
    """``FILE[:COLUMN]`` -> (file, column); a colon inside the file name is kept when the whole body names a file."""
    path, column = body, "eagle"
    head, sep, tail = body.rpartition(":")
    if sep and tail and "/" not in tail and not Path(body).exists():
        path, column = head, tail
    if not path:
        raise SpecsimError("trace acceptance needs a file: trace:PATH[:eagle|ngram]")
    return path, column


def acceptance_from_spec(spec: str) -> Acceptance:
    """An acceptance model from a spec string that needs no calibration profile (any of them with a
    ``@context:C=F,...`` suffix: scaled by context, where the model can be)."""
    spec, rate = split_proposed(spec)
    if rate is not None:
        return Proposing(acceptance_from_spec(spec), rate)
    if "@context:" in spec:
        base, _, table = spec.rpartition("@context:")
        return with_context(acceptance_from_spec(base), "context:" + table)
    kind = spec.partition(":")[0].strip().lower()
    if kind == "trace":
        return load_acceptance_trace(*split_trace_spec(spec.partition(":")[2]))
    if kind in ENGINE_KINDS:
        return engine_acceptance(spec.strip())
    if kind in ("measured", "fit"):
        raise SpecsimError(f"acceptance {spec!r} needs a calibration profile or a fit; it is resolved with the "
                           "profile (scenarios.setup)")
    return parse_acceptance(spec)
