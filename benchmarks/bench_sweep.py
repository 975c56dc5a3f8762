"""Wall time of `specsim sweep` by executor, and that every executor gives the same table.

    python benchmarks/bench_sweep.py [--spec scenarios/sweeps/example.toml] [--repeats 3] [--ray]

Runs the spec's sweep (288 simulations for the example) serially, in local processes (one per CPU) and, with --ray,
on a local Ray instance (started once, before the timing: what a cluster that is already up costs), and reports
the median wall time [min, max] of each and the serial / parallel ratio of the medians.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from scenarios.fleet import load_sweep_spec, run_sweep, table_text
from simulator.executors import parse_executor


class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n):
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="scenarios/sweeps/example.toml")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ray", action="store_true")
    args = ap.parse_args()
    spec = load_sweep_spec(args.spec)
    kinds = ["serial", "local"] + (["ray"] if args.ray else [])
    if args.ray:
        import ray

        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    times: dict[str, list[float]] = {k: [] for k in kinds}
    tables: dict[str, str] = {}
    for _ in range(args.repeats):
        for kind in kinds:
            ex = parse_executor(kind)
            t0 = time.perf_counter()
            _, rows, _ = run_sweep(spec, ex, lambda label, total: _NoBar())
            times[kind].append(time.perf_counter() - t0)
            tables.setdefault(kind, table_text(rows, "csv"))
            assert tables[kind] == table_text(rows, "csv"), f"{kind}: a repeat gave another table"
    print(f"{spec.simulations} simulations, {args.repeats} repeats; every executor's table identical: "
          f"{len(set(tables.values())) == 1}")
    serial = float(np.median(times["serial"]))
    for kind, ts in times.items():
        med = float(np.median(ts))
        print(f"  {kind:<7} median {med:6.1f} s [{min(ts):.1f}, {max(ts):.1f}]   serial / this {serial / med:.2f}")


if __name__ == "__main__":
    main()
