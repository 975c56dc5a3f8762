"""Device correctness without a GPU: with torch's default device set to "meta", any tensor made without an explicit
device is a meta tensor, and mixing it with the models' CPU tensors fails loudly. Every path that runs real passes
runs here with its models on the CPU: calibration, acceptance measurement, the engine (chain, tree, n-gram, eagerly
and through the graph runner), validation and exactness."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_D, TINY_GRID, TINY_T, small_device_benchmarks

from engine.builtin import encode, prompts
from engine.pass_runner import EagerRunner, EagerStandIn, GraphRunner
from engine.speculative import Decoding, RealEngine
from simulator.trees import parse_branching


@pytest.fixture
def meta_default():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def test_the_trap_springs_on_a_stray_tensor(meta_default):
    stray = torch.arange(3)  # no device: meta
    with pytest.raises((RuntimeError, NotImplementedError)):
        (torch.ones(3, device="cpu") + stray).tolist()


def test_calibration_on_the_cpu(meta_default, monkeypatch):
    from calibrate.calibration import calibrate

    small_device_benchmarks(monkeypatch)
    profile = calibrate(TINY_T, TINY_D, torch.device("cpu"), TINY_GRID, quick=True, command="test").profile
    assert len(profile.timed) == len(profile.passes)


def test_acceptance_measurement(meta_default, builtin_pair):
    from calibrate.measure_acceptance import measure_acceptance

    acc = measure_acceptance(*builtin_pair, [encode(p)[:40] for p in prompts("calibration")[:2]], new_tokens=12,
                             seed=0, sims=2)
    assert len(acc["survival"]) == 8


@pytest.mark.parametrize("runner", [EagerRunner(), GraphRunner(EagerStandIn())], ids=["eager", "graph stand-in"])
def test_engine_chain_tree_and_ngram(meta_default, builtin_pair, runner):
    engine = RealEngine(*builtin_pair, runner=runner)
    gen = torch.Generator(device="cpu").manual_seed(0)
    ps = [encode(p)[:30] for p in prompts("heldout")[:3]]
    for how in (Decoding(k=0), Decoding(k=3), Decoding(tree=parse_branching("2,2,1")), Decoding(k=2, drafter="ngram"),
                Decoding(k=3, temperature=0)):
        out = engine.generate(ps, 10, how, gen)
        assert all(len(t) == 10 for t in out.tokens)
        # The target's forward is marked inside each step's verify (or plain) phase.
        assert all(0 < s.verify_pass_s <= s.phases.verify_s for s in out.steps)


def test_validation(meta_default, builtin_profile, monkeypatch):
    from calibrate.timing import Effort
    from calibrate.validate import run_validation
    from cli.output import LogBar

    # what is checked is where tensors are made, not how well the spot checks time: a few samples each
    monkeypatch.setattr(Effort, "of", classmethod(lambda cls, quick, busy: cls(0.005, 2, 3, 0.5)))
    monkeypatch.setattr("calibrate.validate.MIN_SEQUENCES", 1)  # one prompt per run: the same paths, a quarter of it

    def quiet(label, total):
        import contextlib

        return contextlib.nullcontext(LogBar(label, total, echo=lambda line: None))

    report, _ = run_validation(builtin_profile, [1], [1], [parse_branching("2,1")], 1, 8, 0, quiet)
    assert len(report.rows) == 2


def test_exactness(meta_default):
    from calibrate.exactness import exactness_cases

    checks, controls = exactness_cases("poor", [2], [parse_branching("2,1")], 200, seed=0)
    assert len(checks) == 3 and len(controls) == 2


def test_prediction_heads(meta_default, builtin_pair, monkeypatch):
    """The heads' path of a calibration (loaded, widened, their acceptance and their timed pass) and of the engine
    (drafting with them): the heads are built on the device they are loaded for."""
    from engine.builtin import WEIGHTS, load_heads

    if not (WEIGHTS / "builtin-heads.safetensors").exists():
        pytest.skip("the built-in heads are missing (python -m engine.train_heads)")
    from calibrate.pair_measurements import measure_heads
    from calibrate.progress import no_progress
    from calibrate.timing import Effort
    from engine.heads import random_heads

    monkeypatch.setattr(Effort, "of", classmethod(lambda cls, quick, busy: cls(0.005, 2, 3, 0.5)))
    target, _ = builtin_pair
    calib = [encode(p)[:40] for p in prompts("calibration")[:2]]
    out = measure_heads(target, torch.device("cpu"), "fp32", calib, 12, 0, EagerRunner(), [1, 2], True, no_progress)
    assert len(out["survival"]) == out["n_heads"] and [r["batch"] for r in out["passes"]] == [1, 2]
    heads = load_heads(expanded=False, dtype="fp32", device="cpu")
    assert heads.device == torch.device("cpu")
    out = RealEngine(target, heads=heads).generate(calib, 8, Decoding(k=2, drafter="heads"),
                                                   torch.Generator(device="cpu").manual_seed(0))
    assert all(len(t) == 8 for t in out.tokens)
    assert random_heads(16, 32, 2).device == torch.device("cpu")
