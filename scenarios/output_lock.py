"""One writer per output: a calibration takes minutes, and two writing the same --out at once would each replace the
other's profile without a word. A lock file beside the output (``.NAME.lock``, holding the writer's process id and
start time) is created exclusively before the work starts and removed when it ends; a second writer is refused
while the first runs, and a lock left by a process that no longer runs (killed) is taken over."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path

from simulator import SpecsimError


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def _take(lock: Path) -> bool:
    """Create the lock file exclusively with this process's id; False if it exists."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}, f)
    return True


@contextlib.contextmanager
def writing(path: Path, what: str = "--out") -> Iterator[None]:
    """Hold `path`'s lock while the body runs (the output itself is checked first: `scenarios.files.check_output`)."""
    from scenarios.files import check_output

    path = check_output(path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_path(path)
    if not _take(lock):
        try:
            held = json.loads(lock.read_text())
            pid, started = int(held["pid"]), str(held.get("started", "?"))
        except (OSError, ValueError, KeyError, TypeError):
            pid, started = 0, "?"
        if pid and _running(pid) and pid != os.getpid():
            raise SpecsimError(f"{what} {str(path)!r} is being written by another calibration (process {pid}, started "
                               f"{started}); wait for it, or give another {what}")
        with contextlib.suppress(FileNotFoundError):  # its writer is gone: a stale lock
            lock.unlink()
        if not _take(lock):
            raise SpecsimError(f"{what} {str(path)!r} is being written by another calibration (it took the lock "
                               f"{lock} just now); wait for it, or give another {what}")
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
