"""Integer ranges as the CLI writes them: ``A..B``, ``A..B:S``, ``A..B:x2`` (doubling) and lists ``1,3,12``."""

from __future__ import annotations

import math
import re

from . import SpecsimError
from .limits import MAX_LOAD_RPS, MAX_RANGE_VALUES, WHY_LOAD, WHY_RANGE

_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*(?::\s*(x?)(\d+))?\s*$")


def parse_int_range(text: str, minimum: int = 0, what: str = "value", maximum: int | None = None,
                    why: str = "") -> list[int]:
    """Every integer the range text names, in order, each checked to lie in [minimum, maximum] (`why` says why
    the maximum), and no more than MAX_RANGE_VALUES of them: both checked before the range is expanded."""
    text = text.strip()
    if not text:
        raise SpecsimError(f"empty {what} range; write e.g. 1..256, 1..64:x2 or 1,2,4")
    values: list[int] = []

    def bounded(v: int) -> int:
        if maximum is not None and v > maximum:
            raise SpecsimError(f"{what} {v:,} is above the largest, {maximum:,}{': ' + why if why else ''}")
        return v

    for part in text.split(","):
        m = _RANGE.match(part)
        if m:
            lo, hi, mult, step_s = int(m[1]), bounded(int(m[2])), m[3], m[4]
            if hi < lo:
                if hi < minimum:  # reversed it would still start below the least value: say the bound instead
                    raise SpecsimError(f"{what} range {part.strip()!r} runs backwards and {what} must be >= "
                                       f"{minimum}; write e.g. {minimum}..{max(lo, minimum)}")
                raise SpecsimError(f"{what} range {part.strip()!r} runs backwards; write {hi}..{lo}")
            step = int(step_s) if step_s else 1
            if not mult and step >= 1 and len(values) + (hi - lo) // step + 1 > MAX_RANGE_VALUES:
                raise SpecsimError(f"{what} {part.strip()!r} names more than {MAX_RANGE_VALUES:,} values: "
                                   f"{WHY_RANGE}")
            if mult:
                if step < 2:
                    raise SpecsimError(f"{what} range {part.strip()!r}: a multiplying step must be x2 or more")
                if lo < 1:
                    raise SpecsimError(f"{what} range {part.strip()!r}: a multiplying range must start at 1 or more")
                v = lo
                while v <= hi:
                    values.append(v)
                    v *= step
            else:
                if step < 1:
                    raise SpecsimError(f"{what} range {part.strip()!r}: the step must be at least 1")
                values.extend(range(lo, hi + 1, step))
        else:
            try:
                value = int(part)
            except ValueError:
                raise SpecsimError(f"{what} {part.strip()!r} is not an integer or a range like 1..256, 1..64:x2, "
                                   "1,2,4") from None
            values.append(bounded(value))  # (outside the try: SpecsimError is a ValueError)
    if len(values) > MAX_RANGE_VALUES:
        raise SpecsimError(f"{what} names more than {MAX_RANGE_VALUES:,} values: {WHY_RANGE}")
    bad = [v for v in values if v < minimum]
    if bad:
        raise SpecsimError(f"{what} must be >= {minimum}, got {bad[0]}")
    return sorted(set(values))


_FLOAT_RANGE = re.compile(r"^\s*([-+]?[\d.]+(?:e[-+]?\d+)?)\s*\.\.\s*([-+]?[\d.]+(?:e[-+]?\d+)?)\s*"
                          r"(?::\s*(x?)([\d.]+))?\s*$", re.IGNORECASE)


def parse_positive_floats(text: str, what: str = "value", maximum: float = MAX_LOAD_RPS,
                          why: str = WHY_LOAD) -> list[float]:
    """Positive finite numbers up to `maximum`: ``0.5,1,2``, ``1..64:x2`` (multiplying), ``10..50:10`` (stepping)
    or ``1..4`` (integers); no more than MAX_RANGE_VALUES of them (checked before a range is expanded)."""
    text = text.strip()
    if not text:
        raise SpecsimError(f"empty {what}; write e.g. 1..64:x2 or 0.5,1,2")
    values: list[float] = []
    for part in text.split(","):
        m = _FLOAT_RANGE.match(part)
        try:
            if m:
                lo, hi, mult = float(m[1]), float(m[2]), m[3]
                step = float(m[4]) if m[4] else 1.0
                if hi < lo:
                    raise SpecsimError(f"{what} range {part.strip()!r} runs backwards; write {m[2]}..{m[1]}")
                if (mult and step <= 1) or step <= 0 or lo <= 0:
                    raise SpecsimError(f"{what} range {part.strip()!r}: start above 0 and step by more than 0 "
                                       "(or multiply by more than 1)")
                if hi > maximum:
                    raise SpecsimError(f"{what} {hi:g} is above the largest, {maximum:g}: {why}")
                count = math.log(hi / lo) / math.log(step) if mult else (hi - lo) / step
                if len(values) + count + 1 > MAX_RANGE_VALUES:
                    raise SpecsimError(f"{what} {part.strip()!r} names more than {MAX_RANGE_VALUES:,} values: "
                                       f"{WHY_RANGE}")
                v = lo
                while v <= hi * (1 + 1e-12):
                    values.append(v)
                    v = v * step if mult else v + step
            else:
                values.append(float(part))
        except SpecsimError:
            raise
        except ValueError:
            raise SpecsimError(f"{what} {part.strip()!r} is not a number or a range like 1..64:x2 or "
                               "10..50:10") from None
    bad = [v for v in values if not v > 0 or v != v or v == float("inf")]
    if bad:
        raise SpecsimError(f"{what} must be > 0 and finite, got {bad[0]:g}")
    if max(values) > maximum:
        raise SpecsimError(f"{what} {max(values):g} is above the largest, {maximum:g}: {why}")
    return sorted(set(values))


_DURATION = re.compile(r"^\s*([-+]?[\d.]+(?:e[-+]?\d+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE)
_UNITS_S = {"": 1e-3, "ms": 1e-3, "s": 1.0}


def parse_latency_s(text: str, what: str, lowest_s: float, highest_s: float) -> float:
    """A latency given in milliseconds (``50``, ``50ms``) or seconds (``0.05s``), returned in seconds and checked to
    lie in [lowest_s, highest_s]."""
    m = _DURATION.match(str(text))
    unit = m[2].lower() if m else None
    if not m or unit not in _UNITS_S:
        raise SpecsimError(f"{what} {text!r} is not a latency: give milliseconds (50 or 50ms) or seconds (0.05s)")
    try:
        seconds = float(m[1]) * _UNITS_S[unit]
    except ValueError:
        raise SpecsimError(f"{what} {text!r} is not a number of milliseconds") from None
    if not lowest_s <= seconds <= highest_s:
        raise SpecsimError(f"{what} {text!r} is outside {1e3 * lowest_s:g} ms .. {1e3 * highest_s:g} ms; the option is "
                           "in milliseconds (50 means 50 ms)")
    return seconds
