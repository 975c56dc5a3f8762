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

Done = Callable[[int], None]  # called with the index of each item as it finishes


class Executor(Protocol):
    label: str
    slots: int  # how many items run at once (to size chunks of work)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], done: Done | None = None) -> list[Any]: ...


@dataclass(frozen=True)
class Serial:
    label: str = "serial"
    slots: int = 1

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], done: Done | None = None) -> list[Any]:
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if done:
                done(i)
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

    @property
    def slots(self) -> int:
        return self.workers

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], done: Done | None = None) -> list[Any]:
        if self.workers <= 1 or len(items) <= 1:
            return Serial().map(fn, items, done)
        out: list[Any] = [None] * len(items)
        with ProcessPoolExecutor(max_workers=min(self.workers, len(items))) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            for f in as_completed(futures):
                out[futures[f]] = f.result()
                if done:
                    done(futures[f])
        return out


@dataclass(frozen=True)
class Ray:
    address: str | None
    label: str = "ray"

    @property
    def slots(self) -> int:
        """The cluster's CPUs once connected; before, this machine's."""
        try:
            import ray

            if ray.is_initialized():
                return max(int(ray.cluster_resources().get("CPU", 1)), 1)
        except ImportError:
            pass
        return usable_cpus()

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], done: Done | None = None) -> list[Any]:
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
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                out[index[ref]] = ray.get(ref)
                if done:
                    done(index[ref])
        return out


def chunks(n: int, parts: int) -> list[range]:
    """0..n-1 cut into `parts` contiguous, nearly equal ranges (fewer if n is smaller)."""
    parts = max(1, min(parts, n))
    edges = [round(i * n / parts) for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(edges, edges[1:]) if b > a]


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
