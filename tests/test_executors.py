"""Executors give the same results as a serial run, whatever runs the simulations; `specsim sweep` from a spec."""

from __future__ import annotations

import json

import pytest
from conftest import one_line_error, run

from scenarios.fleet import load_sweep_spec, run_sweep, table_text
from simulator import SpecsimError
from simulator.acceptance_parse import parse_acceptance
from simulator.capacity import Scenario, rate_sweep
from simulator.executors import LocalProcesses, Serial, chunks, parse_executor
from simulator.policies import parse_policies
from simulator.step_costs import StepCosts
from simulator.workload import parse_lengths, synthetic

SPEC = """
hardware = ["h100-sxm", "a100-80gb-sxm"]
pairs = [["llama-3.1-8b", "llama-3.2-1b"]]
tp = [1, 2]
policies = ["off", "adaptive"]
rates = [5, 40]
acceptance = "iid:0.7"
[serving]
requests = 60
prompt_tokens = "128"
output_tokens = "16..48"
slo_tpot_ms = 30
"""


class _Bar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n):
        self.n = getattr(self, "n", 0) + n


def test_chunks_partition_in_order():
    for n in range(0, 9):
        for parts in range(1, 6):
            cs = chunks(n, parts)
            assert [i for c in cs for i in c] == list(range(n)) and all(len(c) for c in cs)
            assert len(cs) == min(max(parts, 1), n) or n == 0


def test_local_processes_give_the_serial_results(h100):
    import numpy as np

    cost, target, draft = h100
    acc = parse_acceptance("iid:0.7")
    w = synthetic("poisson", 80, parse_lengths("128"), parse_lengths("16..48"), np.random.default_rng(0))
    scenario = Scenario(w, StepCosts(cost, target, draft), acc, seed=3)
    policies = parse_policies("off,fixed:3,adaptive", acc)
    ticks = []
    serial = rate_sweep(scenario, policies, [2.0, 10.0, 40.0], tick=lambda: ticks.append(1))
    local = rate_sweep(scenario, policies, [2.0, 10.0, 40.0], executor=LocalProcesses(2))
    assert len(ticks) == 9
    assert [m for _, m in serial] == [m for _, m in local]
    assert [m.policy for _, m in serial][:3] == ["off", "fixed:3", "adaptive"]


@pytest.mark.slow  # 8-10 s of starting Ray; the local processes' test above checks the same table without it
def test_ray_gives_the_serial_table():
    pytest.importorskip("ray")
    import ray

    spec = load_sweep_spec_text(SPEC)
    try:
        serial = table_text(run_sweep(spec, Serial(), lambda *a: _Bar())[1], "csv")
        on_ray = table_text(run_sweep(spec, parse_executor("ray"), lambda *a: _Bar())[1], "csv")
    finally:
        ray.shutdown()
    assert serial == on_ray


def load_sweep_spec_text(text, tmp_path=None):
    import tempfile
    from pathlib import Path

    folder = Path(tmp_path or tempfile.mkdtemp())
    path = folder / "spec.toml"
    path.write_text(text)
    return load_sweep_spec(path)


@pytest.mark.parametrize("text, fragment", [
    ("colour = 1\n" + SPEC, "unknown key(s) colour"),
    (SPEC.replace('pairs = [["llama-3.1-8b", "llama-3.2-1b"]]', 'pairs = [["llama-3.1-8b"]]'), "[target, draft]"),
    (SPEC.replace('acceptance = "iid:0.7"', ""), "'acceptance' is missing"),
    (SPEC.replace("rates = [5, 40]", "rates = [5, -1]"), "'rates' must be a non-empty list of positive numbers"),
    (SPEC.replace("requests = 60", "requests = 60\nwarp = 9"), "[serving] has unknown key(s)"),
    ("hardware = [", "not TOML"),
    # these were tracebacks (a str compared with an int; float("fast")) or silently ran (TP 0)
    (SPEC.replace("requests = 60", 'requests = "many"'), "[serving] requests must be a whole number"),
    (SPEC.replace("slo_tpot_ms = 30", 'slo_tpot_ms = "fast"'), "[serving] slo_tpot_ms must be a number"),
    (SPEC.replace('prompt_tokens = "128"', "prompt_tokens = [128]"), "[serving] prompt_tokens must be a string"),
    (SPEC.replace("tp = [1, 2]", "tp = [0, 2]"), "'tp' counts GPUs per engine, each at least 1"),
])
def test_bad_specs_are_refused_naming_the_key(tmp_path, text, fragment):
    with pytest.raises(SpecsimError) as e:
        load_sweep_spec_text(text, tmp_path)
    assert fragment in str(e.value)


def test_sweep_command_writes_the_table_and_the_plots(tmp_path):
    (tmp_path / "s.toml").write_text(SPEC)
    out, plots = tmp_path / "t.json", tmp_path / "plots"
    r = run("sweep", str(tmp_path / "s.toml"), "--executor", "local:2", "--out", str(out), "--plot", str(plots))
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    assert len(rows) == 16 and {r["tp"] for r in rows} == {1, 2} and {r["policy"] for r in rows} == {"off", "adaptive"}
    assert (plots / "capacity.png").exists() and len(list(plots.glob("tpot-*.png"))) == 4
    r = run("sweep", str(tmp_path / "s.toml"), "--executor", "serial")
    assert r.exit_code == 0 and "hardware,target,draft,tp,policy," in r.output
    one_line_error(run("sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "t.txt")), ".csv")
    one_line_error(run("sweep", str(tmp_path / "s.toml"), "--executor", "mpi"), "not serial, local[:N] or ray")
    (tmp_path / "bad.toml").write_text(SPEC.replace("tp = [1, 2]", "tp = [3]"))
    one_line_error(run("sweep", str(tmp_path / "bad.toml")), "TP 3", "cannot be split 3 ways")
