"""Traces from disk: requests (arrival times with prompt and output lengths, or just the lengths) and greedy
acceptance traces.

Request traces are CSV with a header row, or JSON lines (one object per request). Columns:

- arrivals (``--arrivals trace:FILE``): ``arrival_s``, ``prompt_tokens``, ``output_tokens``;
- lengths only (``--lengths-from FILE``): ``prompt_tokens`` and ``output_tokens``, or the acceptance traces'
  ``prompt_len`` and ``generated_len``.

Acceptance traces (``--acceptance trace:FILE[:eagle|ngram]``) are the JSON lines of ``data/acceptance-traces``: per
request, a list under the column naming the drafter, per generated position the tokens one greedy step starting
there yields.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from scenarios.files import json_lines, read_text
from simulator import SpecsimError
from simulator.replay import TraceAcceptance
from simulator.workload import Workload

ALIASES = {"prompt_tokens": ("prompt_tokens", "prompt_len"), "output_tokens": ("output_tokens", "generated_len"),
           "arrival_s": ("arrival_s",)}


def _rows(path: str | Path) -> list[dict]:
    path = Path(path)
    text = read_text(path, "trace")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("{"):
        return json_lines(text, f"trace {path.name}")
    return list(csv.DictReader(io.StringIO(text)))


def _column(rows: list[dict], name: str, path: str | Path, kind: type = int) -> np.ndarray:
    names = ALIASES[name]
    key = next((k for k in names if rows and k in rows[0]), None)
    if key is None:
        have = ", ".join(rows[0]) if rows else "nothing"
        raise SpecsimError(f"trace {Path(path).name}: missing column {' or '.join(names)} (it has {have})")
    try:
        values = np.array([kind(r[key]) for r in rows])
    except (KeyError, TypeError, ValueError):
        raise SpecsimError(f"trace {Path(path).name}: column {key} needs a {kind.__name__} on every row") from None
    bad = np.flatnonzero(~np.isfinite(values.astype(float)) | (values < 0))
    if bad.size:
        raise SpecsimError(f"trace {Path(path).name}: row {int(bad[0]) + 1}: {key} = {values[bad[0]]} (need a finite "
                           "number >= 0)")
    return values


def load_request_trace(path: str | Path) -> Workload:
    """Requests with their own arrival times (sorted here)."""
    rows = _rows(path)
    if not rows:
        raise SpecsimError(f"trace {Path(path).name} has no requests: give one request per row (arrival_s, "
                           "prompt_tokens, output_tokens)")
    arrival = _column(rows, "arrival_s", path, float)
    prompt = _column(rows, "prompt_tokens", path)
    output = _column(rows, "output_tokens", path)
    order = np.argsort(arrival, kind="stable")
    return Workload(arrival[order] - min(arrival.min(), 0.0), prompt[order], output[order],
                    f"trace {Path(path).name}")


def load_lengths(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) pairs to resample requests from."""
    rows = _rows(path)
    if not rows:
        raise SpecsimError(f"trace {Path(path).name} has no requests: give one request per row (prompt_tokens, "
                           "output_tokens)")
    prompt, output = _column(rows, "prompt_tokens", path), _column(rows, "output_tokens", path)
    if prompt.min() < 1 or output.min() < 1:
        raise SpecsimError(f"trace {Path(path).name}: every request needs at least one prompt and one output token")
    return prompt, output


def load_prompt_lengths(path: str | Path) -> tuple[int, ...] | None:
    """Each request's ``prompt_len`` in an acceptance trace, or None if any record lacks a usable one."""
    out = []
    for record in json_lines(read_text(Path(path), "acceptance trace"), f"trace {Path(path).name}"):
        p = record.get("prompt_len") if isinstance(record, dict) else None
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            return None
        out.append(int(p))
    return tuple(out)


def load_acceptance_trace(path: str | Path, column: str = "eagle") -> TraceAcceptance:
    """A greedy acceptance trace: one request per line, a list of per-position yields (each >= 1) under `column`."""
    path = Path(path)
    yields = []
    for n, record in enumerate(json_lines(read_text(path, "acceptance trace"), f"trace {path.name}"), 1):
        values = record.get(column) if isinstance(record, dict) else None
        if not isinstance(values, list):
            raise SpecsimError(f"trace {path.name}: record {n} has no {column!r} list; pick a column with "
                               f"trace:{path}:COLUMN")
        try:
            arr = np.asarray(values, dtype=float)
        except (TypeError, ValueError):
            raise SpecsimError(f"trace {path.name}: record {n}: {column!r} holds something other than "
                               "numbers") from None
        if arr.size and (not np.isfinite(arr).all() or (arr != np.round(arr)).any() or arr.min() < 1):
            raise SpecsimError(f"trace {path.name}: record {n}: every {column!r} value must be a whole number >= 1 "
                               "(tokens a step yields, the bonus token included)")
        yields.append(arr.astype(np.int64))
    if not yields or all(len(y) == 0 for y in yields):
        raise SpecsimError(f"trace {path.name} holds no usable positions under {column!r}: give JSON lines with a "
                           f"list per request under {column!r} (tokens one greedy step yields at each position)")
    return TraceAcceptance(tuple(yields), source=f"{path}:{column}", lookup=column == "ngram")


def trace_model(path: str | Path) -> str | None:
    """The model preset an acceptance trace was measured on: its rows' ``model`` field, else the preset its file
    name opens with (``llama3.1-8b-instruct_sharegpt-48.jsonl``: llama-3.1-8b); None when neither says."""
    from scenarios import model_names

    def bare(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    try:
        rows = _rows(path)
    except SpecsimError:
        return None
    named = str(rows[0].get("model", "")) if rows and isinstance(rows[0], dict) else ""
    if named:
        return named
    stem = bare(Path(path).name)
    found = [m for m in model_names() if stem.startswith(bare(m))]
    return max(found, key=len) if found else None
