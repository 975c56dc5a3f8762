"""Where independent simulations run: in this process, in local worker processes, or on a Ray cluster.

Every simulation of a sweep is a pure function of its inputs (its own seeded generator, no shared state), so the
executors return the same results in the same order; only the wall time differs. ``--executor``:

- ``serial``: one after the other, here;
- ``local`` (the default) or ``local:N``: N worker processes (default: the CPUs this process may use);
- ``ray`` or ``ray:ADDRESS``: tasks on a Ray cluster (``pip install 'specsim[ray]'``); without an address a local
  Ray instance is started, with one (``ray://HOST:10001``, or ``auto`` for the cluster this machine belongs to) the
  work goes there. The cluster's workers need specsim installed (the same version).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Protocol

from . import SpecsimError

Tick = Callable[[], None]


class Executor(Protocol):
    label: str

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], tick: Tick | None = None) -> list[Any]: ...


@dataclass(frozen=True)
class Serial:
    label: str = "serial"

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], tick: Tick | None = None) -> list[Any]:
        out = []
        for item in items:
            out.append(fn(item))
            if tick:
                tick()
        return out


def usable_cpus() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


@dataclass(frozen=True)
class LocalProcesses:
    workers: int
    label: str = "local"

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], tick: Tick | None = None) -> list[Any]:
        if self.workers <= 1 or len(items) <= 1:
            return Serial().map(fn, items, tick)
        out: list[Any] = [None] * len(items)
        with ProcessPoolExecutor(max_workers=min(self.workers, len(items))) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            for f in as_completed(futures):
                out[futures[f]] = f.result()
                if tick:
                    tick()
        return out


@dataclass(frozen=True)
class Ray:
    address: str | None
    label: str = "ray"

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], tick: Tick | None = None) -> list[Any]:
        try:
            import ray
        except ImportError:
            raise SpecsimError("--executor ray needs Ray: pip install 'specsim[ray]' (or use --executor local)"
                               ) from None
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise SpecsimError(f"cannot reach a Ray cluster at {self.address!r}: {first}") from None
        remote = ray.remote(fn)
        refs = [remote.remote(item) for item in items]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[Any] = [None] * len(items)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                out[index[ref]] = ray.get(ref)
                if tick:
                    tick()
        return out


def parse_executor(text: str) -> Executor:
    """``serial``, ``local[:N]`` or ``ray[:ADDRESS]``."""
    kind, _, arg = text.strip().partition(":")
    kind = kind.lower()
    if kind == "serial" and not arg:
        return Serial()
    if kind == "local":
        if not arg:
            return LocalProcesses(usable_cpus())
        if arg.isdigit() and 1 <= int(arg) <= 1024:
            return LocalProcesses(int(arg), f"local:{arg}")
        raise SpecsimError(f"--executor {text!r}: local:N takes 1..1024 worker processes")
    if kind == "ray":
        return Ray(arg or None, f"ray:{arg}" if arg else "ray")
    raise SpecsimError(f"--executor {text!r} is not serial, local[:N] or ray[:ADDRESS]")
