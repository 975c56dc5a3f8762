"""Where users wait, each against its goal: the first calibration, a day of traffic simulated, a first fitted
acceptance, the test suite. Run it the day a change lands, so that a change that slows a user down is seen.

    python benchmarks/waits.py [--repeats 3] [--only calibrate,simulate,fit,suite,slow] [--profile-rate 2]
    python benchmarks/waits.py --against 7c76fc9 [--repeats 3] [--only calibrate,million,suite]

- ``calibrate``: `specsim calibrate --quick` in an empty cache, wall seconds (goal <= 20 s), with each run's
  held-out pass error beside it (the speed must not cost accuracy: goal <= 5 % median);
- ``simulate``: 100,000 requests through one engine (H100 preset, Llama-3.1-8B / 3.2-1B, iid 0.7, `adaptive`,
  prompts 512 and outputs 128 tokens) at 1, 2, 5, 10, 20, 40 and 80 req/s (goal <= 5 s each), and a profile of
  where the time of one run goes (the functions with the most time of their own);
- ``million``: `specsim simulate` of 1,000,000 requests (the same scenario) at 2, 10 and 40 req/s, wall seconds and
  peak memory (goal <= 60 s and <= 1 GB each);
- ``fit``: the first `predict --acceptance fit:trace:...` on the shipped 48-request ShareGPT sample, empty cache
  (goal <= 3 s), and the same again from the cache;
- ``suite``: `python -m pytest` (goal <= 90 s);
- ``slow``: `python -m pytest -m slow`, the checks kept out of the default suite (the bulk simulator against its
  reference in distribution over many seeds, the Ray executor): must pass; its time is reported, not judged.

Each figure is the median of `--repeats` runs with its range. The machine is shared and drifts by a third from hour
to hour, so `--against COMMIT` times the same commands in a worktree of that commit (beside this checkout, so that
its tests find ../shared too), alternating run by run with this checkout, and prints each median and the ratio: a
ratio holds where an absolute time does not. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "scenarios" / "samples" / "acceptance" / "llama3.1-8b-instruct_sharegpt-48.jsonl"
RATES = (1, 2, 5, 10, 20, 40, 80)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def verdict(name: str, xs: list[float], goal: float, extra: str = "") -> str:
    med = statistics.median(xs)
    mark = "ok  " if med <= goal else "SLOW"
    return f"{mark} {name:<52} {med:7.2f} s [{min(xs):.2f}, {max(xs):.2f}]  goal <= {goal:g} s{extra}"


def calibrate(repeats: int) -> list[str]:
    walls, errs = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            out = Path(cache) / "p.json"
            env = {**os.environ, "XDG_CACHE_HOME": cache}
            walls.append(timed([sys.executable, "specsim.py", "calibrate", "--quick", "--out", str(out)], env))
            fit = json.loads(out.read_text())["fit"]["heldout"]
            errs.append(100 * fit["median_abs_err"])
    return [verdict("calibrate --quick", walls, 20.0,
                    f"; held-out pass error median {', '.join(f'{e:.1f}' for e in errs)} %")]


def one_simulation(rate: float, seed: int, n: int = 100_000) -> float:
    import numpy as np

    from scenarios import load_hardware, load_model
    from simulator.acceptance_parse import parse_acceptance
    from simulator.cost import CostModel
    from simulator.policies import parse_policy
    from simulator.serving import EngineConfig, simulate
    from simulator.step_costs import StepCosts
    from simulator.workload import parse_lengths, synthetic

    acc = parse_acceptance("iid:0.7")
    workload = synthetic("poisson", n, parse_lengths("512"), parse_lengths("128"),
                         np.random.default_rng(seed)).at_rate(rate)
    costs = StepCosts(CostModel.from_hardware(load_hardware("h100-sxm")), load_model("llama-3.1-8b"),
                      load_model("llama-3.2-1b"))
    t0 = time.perf_counter()
    simulate(workload, costs, parse_policy("adaptive", acc), acc, np.random.default_rng(1000 + seed), EngineConfig())
    return time.perf_counter() - t0


def host_speed() -> str:
    """The host's speed at the simulator's kind of work, to set beside its figures: the simulator is a loop of small
    numpy calls and Python bookkeeping, and a shared host's speed at it moves from day to day (the code of 2026-12-01,
    whose 100,000 requests at 1 req/s took 8.2 s that day, ran 20,000 in 2.5-2.6 s on 2026-12-04: about 13 s per
    100,000)."""
    import numpy as np

    a, walls = np.arange(4, dtype=np.int64), []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200_000):  # what a step of a small batch does: tiny array ops
            a.sum()
            np.cumsum(a)
        walls.append(time.perf_counter() - t0)
    return (f"     host: 200,000 rounds of two tiny numpy calls {statistics.median(walls):.2f} s "
            f"[{min(walls):.2f}, {max(walls):.2f}] (compare days by this before comparing their figures)")


def simulate_all(repeats: int, profile_rate: float) -> list[str]:
    lines = [host_speed()]
    lines += [verdict(f"simulate 100,000 requests at {rate} req/s", [one_simulation(rate, s) for s in range(repeats)],
                      5.0) for rate in RATES]
    prof = cProfile.Profile()
    prof.runcall(one_simulation, profile_rate, 0)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(8)
    body = [s for s in buf.getvalue().splitlines() if s.strip() and not s.startswith(("   Ordered", "   List"))]
    lines.append(f"     where one run's time goes at {profile_rate:g} req/s (cProfile, own time):")
    lines += [f"       {s.strip()}" for s in body[-9:]]
    return lines


def fit(repeats: int) -> list[str]:
    cmd = [sys.executable, "specsim.py", "predict", "--hardware", "h100-sxm", "--acceptance", f"fit:trace:{SAMPLE}",
           "--batch", "1..64", "--k", "0..6"]
    first, cached = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "XDG_CACHE_HOME": cache}
            first.append(timed(cmd, env))
            cached.append(timed(cmd, env))
    return [verdict("first predict --acceptance fit:trace:(48 requests)", first, 3.0),
            verdict("the same, fitted model cached", cached, 3.0)]


def suite(repeats: int) -> list[str]:
    return [verdict("python -m pytest", [timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                                               dict(os.environ)) for _ in range(repeats)], 90.0)]


def slow() -> list[str]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow"], cwd=ROOT,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
    return [f"{'ok  ' if r.returncode == 0 else 'FAIL'} {'python -m pytest -m slow':<52} {wall:7.2f} s  ({last})"]


# -- against an older commit: the same commands, alternating -----------------------------------------------------------

MILLION = ["simulate", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--policy", "adaptive",
           "--requests", "1000000"]


def run_in(root: Path, cmd: list[str], env: dict[str, str]) -> tuple[float, float | None]:
    """Wall seconds of `cmd` run in `root`, and its peak memory in GB where GNU time can say."""
    gnu_time = Path("/usr/bin/time")
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        wrapped = [str(gnu_time), "-f", "%M", "-o", rss.name, *cmd] if gnu_time.exists() else cmd
        t0 = time.perf_counter()
        r = subprocess.run(wrapped, cwd=root, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed in {root}: {(r.stderr or r.stdout).strip()[-400:]}")
        text = Path(rss.name).read_text().strip().splitlines() if gnu_time.exists() else []
    return wall, (int(text[-1]) / 2**20 if text and text[-1].isdigit() else None)


def measurements(parts: list[str]) -> list[tuple[str, list[str], float]]:
    """(what, the command after `python`, its goal in seconds) for each part measured against a commit."""
    out: list[tuple[str, list[str], float]] = []
    if "calibrate" in parts:
        out.append(("calibrate --quick (empty cache)", ["specsim.py", "calibrate", "--quick", "--out", "{tmp}/p.json"],
                    20.0))
    if "million" in parts:
        out += [(f"simulate 1,000,000 requests at {r} req/s", ["specsim.py", *MILLION, "--rate", str(r)], 60.0)
                for r in (2, 10, 40)]
    if "suite" in parts:
        out.append(("python -m pytest", ["-m", "pytest", "-q", "-p", "no:cacheprovider"], 90.0))
    return out


def against(commit: str, repeats: int, parts: list[str]) -> list[str]:
    """Each measurement in this checkout and in a worktree of `commit`, alternating, `repeats` times."""
    found = subprocess.run(["git", "rev-parse", "--short", "--verify", f"{commit}^{{commit}}"], cwd=ROOT,
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"waits.py: error: --against {commit!r} is no commit of this repository; give a hash or a "
                         "tag git log shows")
    sha = found.stdout.strip()
    old = ROOT.parent / f".specsim-waits-{sha}"
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(old), sha], cwd=ROOT, capture_output=True,
                   check=True)
    lines = [f"this checkout against {sha}, {repeats} alternating runs each (median [min, max]; ratio < 1: faster now)"]
    try:
        for what, cmd, goal in measurements(parts):
            walls: dict[str, list[float]] = {"now": [], sha: []}
            peaks: dict[str, list[float]] = {"now": [], sha: []}
            errs: list[float] = []
            for _ in range(repeats):
                for label, root in (("now", ROOT), (sha, old)):
                    with tempfile.TemporaryDirectory() as cache:
                        env = {**os.environ, "XDG_CACHE_HOME": cache}
                        wall, peak = run_in(root, [sys.executable, *(c.format(tmp=cache) for c in cmd)], env)
                        if label == "now" and cmd[1] == "calibrate":
                            errs.append(100 * json.loads((Path(cache) / "p.json").read_text())["fit"]["heldout"]
                                        ["median_abs_err"])
                    walls[label].append(wall)
                    if peak is not None:
                        peaks[label].append(peak)
            now, then = statistics.median(walls["now"]), statistics.median(walls[sha])
            mem = (f"; peak {max(peaks['now']):.2f} GB (was {max(peaks[sha]):.2f})"
                   if peaks["now"] and peaks[sha] and cmd[1] != "pytest" else "")
            err = f"; held-out median {', '.join(f'{e:.1f}' for e in errs)} %" if errs else ""
            lines.append(f"{'ok  ' if now <= goal else 'SLOW'} {what:<44} now {now:6.1f} s [{min(walls['now']):.1f}, "
                         f"{max(walls['now']):.1f}]  {sha} {then:6.1f} s [{min(walls[sha]):.1f}, "
                         f"{max(walls[sha]):.1f}]  ratio {now / then:.2f}  goal <= {goal:g} s{mem}{err}")
            print(lines[-1], flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="calibrate,simulate,fit,suite,slow")
    ap.add_argument("--profile-rate", type=float, default=2.0, help="the rate whose simulation is profiled")
    ap.add_argument("--against", metavar="COMMIT", help="time calibrate, million and suite here and at COMMIT, "
                    "alternating, and print the ratios")
    a = ap.parse_args()
    if a.against:
        parts = a.only.split(",") if a.only != ap.get_default("only") else ["calibrate", "million", "suite"]
        unknown = set(parts) - {"calibrate", "million", "suite"}
        if unknown:
            ap.error(f"--only with --against: unknown {', '.join(sorted(unknown))} (calibrate, million, suite)")
        against(a.against, a.repeats, parts)
        return 0
    parts = a.only.split(",")
    unknown = set(parts) - {"calibrate", "simulate", "fit", "suite", "slow"}
    if unknown:
        ap.error(f"--only: unknown {', '.join(sorted(unknown))}")
    suite_repeats = 1 if a.repeats > 1 else a.repeats  # two minutes each: one run is the figure
    for part in parts:
        lines = {"calibrate": lambda: calibrate(a.repeats), "simulate": lambda: simulate_all(a.repeats,
                                                                                              a.profile_rate),
                 "fit": lambda: fit(a.repeats), "suite": lambda: suite(suite_repeats), "slow": slow}[part]()
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
