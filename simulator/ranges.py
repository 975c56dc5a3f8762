"""Integer ranges as the CLI writes them: ``A..B``, ``A..B:S``, ``A..B:x2`` (doubling) and lists ``1,3,12``."""

from __future__ import annotations

import re

from . import SpecsimError

_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*(?::\s*(x?)(\d+))?\s*$")


def parse_int_range(text: str, minimum: int = 0, what: str = "value") -> list[int]:
    """Every integer the range text names, in order, each checked to be >= `minimum`."""
    text = text.strip()
    if not text:
        raise SpecsimError(f"empty {what} range; write e.g. 1..256, 1..64:x2 or 1,2,4")
    values: list[int] = []
    for part in text.split(","):
        m = _RANGE.match(part)
        if m:
            lo, hi, mult, step_s = int(m[1]), int(m[2]), m[3], m[4]
            if hi < lo:
                raise SpecsimError(f"{what} range {part.strip()!r} runs backwards; write {hi}..{lo}")
            step = int(step_s) if step_s else 1
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
                values.append(int(part))
            except ValueError:
                raise SpecsimError(f"{what} {part.strip()!r} is not an integer or a range like 1..256, 1..64:x2, "
                                   "1,2,4") from None
    bad = [v for v in values if v < minimum]
    if bad:
        raise SpecsimError(f"{what} must be >= {minimum}, got {bad[0]}")
    return sorted(set(values))
