"""Request traces from disk: arrival times with prompt and output lengths, or just the lengths.

Formats: CSV with a header row, or JSON lines (one object per request). Columns:

- arrivals (``--arrivals trace:FILE``): ``arrival_s``, ``prompt_tokens``, ``output_tokens``;
- lengths only (``--lengths-from FILE``): ``prompt_tokens`` and ``output_tokens``, or the acceptance traces'
  ``prompt_len`` and ``generated_len``.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from simulator import SpecsimError
from simulator.workload import Workload

ALIASES = {"prompt_tokens": ("prompt_tokens", "prompt_len"), "output_tokens": ("output_tokens", "generated_len"),
           "arrival_s": ("arrival_s",)}


def _rows(path: str | Path) -> list[dict]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecsimError(f"cannot read trace {str(path)!r}: {e.strerror}") from None
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("{"):
        return json_lines(text, f"trace {path.name}")
    return list(csv.DictReader(io.StringIO(text)))


def json_lines(text: str, what: str) -> list:
    """One JSON value per non-blank line; a line that is not JSON is a one-line error naming it."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise SpecsimError(f"{what}: line {n} is not JSON") from None
    return rows


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
    return values


def load_request_trace(path: str | Path) -> Workload:
    """Requests with their own arrival times (sorted here)."""
    rows = _rows(path)
    if not rows:
        raise SpecsimError(f"trace {Path(path).name} has no requests")
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
        raise SpecsimError(f"trace {Path(path).name} has no requests")
    prompt, output = _column(rows, "prompt_tokens", path), _column(rows, "output_tokens", path)
    if prompt.min() < 1 or output.min() < 1:
        raise SpecsimError(f"trace {Path(path).name}: every request needs at least one prompt and one output token")
    return prompt, output
