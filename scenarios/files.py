"""Files at the edges: one reader for text, JSON and JSON lines; outputs checked before any work starts and written
atomically, all or nothing; the profile cache folder. No torch, no simulation: the CLI, `scenarios/` and
`calibrate/` read and write through here, and `simulator/` never touches a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from simulator import SpecsimError

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def read_text(path: str | Path, what: str) -> str:
    """The whole file as text; a one-line error naming `what` if it cannot be read."""
    path = Path(path)
    try:
        return path.read_text()
    except IsADirectoryError:
        raise SpecsimError(f"cannot read {what} {str(path)!r}: it is a folder; give the file in it") from None
    except UnicodeDecodeError:
        raise SpecsimError(f"cannot read {what} {str(path)!r}: not a text file; give the {what} itself (text: "
                           "JSON, TOML or CSV)") from None
    except FileNotFoundError:
        raise SpecsimError(f"cannot read {what} {str(path)!r}: no such file; check the path (relative to "
                           f"{Path.cwd()})") from None
    except OSError as e:
        raise SpecsimError(f"cannot read {what} {str(path)!r}: {e.strerror}; check the path and its "
                           "permissions") from None


def _finite_only(token: str) -> float:
    raise ValueError(f"non-finite number {token}")


def parse_json(text: str, what: str) -> Any:
    """One JSON document; NaN and Infinity (which Python's json would accept) are refused."""
    try:
        return json.loads(text, parse_constant=_finite_only)
    except json.JSONDecodeError as e:
        raise SpecsimError(f"{what} is not valid JSON (line {e.lineno}): {e.msg}; give the whole file (is it empty "
                           "or cut short?)") from None
    except ValueError as e:
        raise SpecsimError(f"{what}: {e} (only finite numbers are allowed); give a finite number there") from None


def read_json(path: str | Path, what: str) -> Any:
    return parse_json(read_text(path, what), f"{what} {Path(path).name}")


def json_lines(text: str, what: str) -> list[Any]:
    """One JSON value per non-blank line; a line that is not JSON is a one-line error naming it."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line, parse_constant=_finite_only))
            except (json.JSONDecodeError, ValueError):
                raise SpecsimError(f"{what}: line {n} is not JSON with finite numbers; give one JSON object per "
                                   "line") from None
    return rows


def read_records(path: str | Path, what: str) -> list[Any]:
    """A JSON document (a list of records, or one record) or JSON lines, as a list of records."""
    text = read_text(path, what)
    label = f"{what} {Path(path).name}"
    try:
        data = json.loads(text, parse_constant=_finite_only)
    except (json.JSONDecodeError, ValueError):
        return json_lines(text, label)
    return data if isinstance(data, list) else [data]


# -- writing -----------------------------------------------------------------------------------------------------

def check_output(path: str | Path, what: str, suffixes: Iterable[str] | None = None) -> Path:
    """Refuse, before any work starts, an output that could not be written: a folder in its place, a parent that is a
    file, a folder nobody may write to, or (for figures) an unknown suffix. Nothing is created here."""
    path = Path(path)
    if suffixes is not None:
        allowed = tuple(suffixes)
        if path.suffix.lower() not in allowed:
            raise SpecsimError(f"{what} {str(path)!r}: use a file name ending in {', '.join(allowed)}")
    if path.is_dir():
        raise SpecsimError(f"{what} {str(path)!r} is a folder; give a file name")
    ancestor = path.parent if str(path.parent) else Path(".")
    while not ancestor.exists():
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise SpecsimError(f"{what} {str(path)!r}: {str(ancestor)!r} is a file, not a folder; give a path in a "
                           "folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise SpecsimError(f"{what} {str(path)!r}: cannot write into {str(ancestor)!r} (permission denied); choose "
                           "another place")
    try:  # what permission bits do not tell (a read-only or pseudo file system such as /proc): try it
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as e:
        raise SpecsimError(f"{what} {str(path)!r}: cannot write into {str(ancestor)!r} ({e.strerror or e}); choose "
                           "another place") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise SpecsimError(f"{what} {str(path)!r} exists and is read-only")
    return path


def check_outputs(paths: Iterable[str | Path], what: str, suffixes: Iterable[str] | None = None) -> list[Path]:
    """`check_output` for each, and no path named twice."""
    out = [check_output(p, what, suffixes) for p in paths]
    seen: set[Path] = set()
    for p in out:
        key = p.resolve()
        if key in seen:
            raise SpecsimError(f"{what} {str(p)!r} is given twice")
        seen.add(key)
    return out


def write_all(files: Mapping[Path, bytes]) -> list[Path]:
    """Write every file through a temporary file beside it, then rename them all: if any write fails, none of the
    files is replaced and no temporary file is left. Readers see an old file or a whole new one, never half."""
    temps: list[tuple[str, Path]] = []
    path = Path("output")
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a profile or a plot is an ordinary file
        for tmp, path in temps:
            os.replace(tmp, path)
    except BaseException as e:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise SpecsimError(f"cannot write {str(path)!r}: {e.strerror or e}; choose another place") from None
        raise
    return [Path(p) for p in files]


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    return write_all({Path(path): data})[0]


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/specsim`` or ``~/.cache/specsim``: where profiles go by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specsim"
