import os
from pathlib import Path

import numpy as np
import pytest

from calibrate.calibration import Grid
from simulator.specs import ModelSpec

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TRACES = SHARED / "data" / "acceptance-traces"


def pytest_configure(config):
    """Under pytest-xdist (`-n 2`, the default addopts) each worker runs torch on one thread: two workers of two
    threads each on a 2-core machine spin against each other, and the tests' tensors are too small to gain from two."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20261129)


# Tiny decoders: a calibration of these takes seconds on the CPU and exercises every code path.
TINY_T = ModelSpec("tiny-target", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128, vocab_size=64,
                   dtype="fp32")
TINY_D = ModelSpec("tiny-draft", n_layers=1, d_model=32, n_heads=2, n_kv_heads=1, d_ff=64, vocab_size=64,
                   dtype="fp32")
TINY_GRID = Grid(batches=(1, 2), target_new_tokens=(1, 2, 3), draft_new_tokens=(1, 2), contexts=(8, 16),
                 probe_layers=(1, 2))


def trace_path(name: str = "cnn") -> Path:
    path = TRACES / f"llama3.1-8b-instruct_{name}.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is beside the checkout in CI)")
    return path



def small_device_benchmarks(mp: pytest.MonkeyPatch) -> None:
    """A calibration in a test measures the device on small buffers with a few samples per point: what the tests
    check is what is measured and where it goes, not how well (`specsim calibrate` and benchmarks/ time for real)."""
    from calibrate.timing import Effort

    mp.setattr("calibrate.microbench.MIB", 2**12)
    mp.setattr("calibrate.microbench.CPU_MATMUL_SIZE", (128, 128))
    mp.setattr("calibrate.microbench.CPU_SKINNY_WIDTH", 256)
    mp.setattr("calibrate.microbench.skinny_rows", lambda quick: [1, 8, 32])
    mp.setattr(Effort, "of", classmethod(lambda cls, quick, busy: cls(0.02, 5, 5, 0.5)))  # the quick minimum


def once_per_run(name: str, tmp_path_factory: pytest.TempPathFactory, make):
    """`make()` computed once for the whole run: under pytest-xdist the first worker to need it builds it and
    pickles it beside the workers' temporary folders, the others read it (a file lock keeps them from building it
    twice); without xdist, plainly built."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make()
    import pickle

    from filelock import FileLock  # (torch depends on filelock)

    path = tmp_path_factory.getbasetemp().parent / f"{name}.pickle"
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return pickle.loads(path.read_bytes())
        value = make()
        path.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def tiny_profile(tmp_path_factory):
    """One calibration of tiny shapes on the CPU for the whole run (`small_device_benchmarks`)."""

    def make():
        import torch

        from calibrate.calibration import calibrate

        with pytest.MonkeyPatch.context() as mp:
            small_device_benchmarks(mp)
            return calibrate(TINY_T, TINY_D, torch.device("cpu"), TINY_GRID, quick=True, command="test")

    return once_per_run("tiny_profile", tmp_path_factory, make)


def save_tiny(tiny_profile, path: Path) -> Path:
    """The tiny calibration's profile saved to `path`, marked trusted: whether it is depends on the host's noise while
    the session calibrated it (a busy host spreads its repeats past 15 %), and its untrusted note would add a line to
    the one-line errors the command-line tests check."""
    import dataclasses

    from scenarios.profile import Trust, save_profile

    save_profile(dataclasses.replace(tiny_profile.profile, trust=Trust()), path)
    return path


@pytest.fixture(scope="session")
def builtin_pair():
    """The built-in pair, unexpanded, in fp32 on the CPU (the tests reset its caches as they need)."""
    from engine.builtin import load_pair

    return load_pair(expanded=False, dtype="fp32", max_seq_len=320)


@pytest.fixture(scope="session")
def builtin_profile(tmp_path_factory):
    """A profile of the built-in shapes from a tiny calibration, plus acceptance measured on a few prompts."""
    return once_per_run("builtin_profile", tmp_path_factory, _builtin_profile)


def _builtin_profile():
    import dataclasses

    import torch

    from calibrate.calibration import calibrate
    from calibrate.measure_acceptance import measure_acceptance, measure_by_context
    from engine.builtin import encode, long_texts, prompts
    from scenarios import load_model
    from scenarios.profile import MeasuredAcceptance
    from simulator.specs import EngineOverheads

    t, d = load_model("specsim-target", "fp32"), load_model("specsim-draft", "fp32")
    grid = Grid(batches=(1, 2), target_new_tokens=(1, 3, 4), draft_new_tokens=(1, 2), contexts=(16,),
                probe_layers=(1, 2))
    with pytest.MonkeyPatch.context() as mp:
        small_device_benchmarks(mp)
        mp.setattr("calibrate.calibration.builtin_pair", lambda t, d: False)
        # The engine's own work at these shapes is measured by tests of its own (test_calibrate,
        # test_speculative); here it would be half of the fixture's time for figures no test of this fixture reads.
        mp.setattr("calibrate.calibration.measure_engine_at_shapes", lambda *a, **k: EngineOverheads())
        profile = calibrate(t, d, torch.device("cpu"), grid, quick=True, command="test").profile
    from engine.builtin import load_pair

    target, draft = load_pair(expanded=False, dtype="fp32", max_seq_len=256)
    held = [encode(p)[:40] for p in prompts("calibration")[:3]]
    measured = measure_acceptance(target, draft, held, new_tokens=24, seed=0, sims=2)
    measured["by_context"] = measure_by_context(target, draft, long_texts(6, 192), list(range(0, 192, 32)), 32)
    from calibrate.ngram import measure_host, measure_ngram_acceptance
    from calibrate.timing import Effort, Timer

    measured["ngram"] = measure_ngram_acceptance(target, held, 24)
    measured["ngram"]["host"] = measure_host(long_texts(4, 256), Timer(torch.device("cpu")), Effort(0.02, 3, 5, 0.5),
                                             (1, 2, 4), (64, 128, 256), heldout=2)
    from engine.builtin import WEIGHTS

    if (WEIGHTS / "builtin-heads.safetensors").exists():
        from calibrate.measure_acceptance import measure_head_acceptance
        from engine.builtin import load_heads

        measured["heads"] = measure_head_acceptance(target, load_heads(expanded=False, dtype="fp32"), held, 24,
                                                    sims=2)
    return dataclasses.replace(profile, acceptance=MeasuredAcceptance.from_dict(measured))


@pytest.fixture(scope="session")
def h100():
    """The H100 preset with gpt-fast's per-step costs, Llama-3.1-8B drafted by Llama-3.2-1B."""
    from scenarios import load_hardware, load_model
    from simulator.cost import CostModel

    cost = CostModel.from_hardware(load_hardware("h100-sxm", "gpt-fast"))
    return cost, load_model("llama-3.1-8b"), load_model("llama-3.2-1b")


def run(*args: str):
    """The CLI in-process, as a user types it."""
    from click.testing import CliRunner

    from specsim import cli

    return CliRunner().invoke(cli, list(args), prog_name="specsim")


def one_line_error(result, *fragments: str) -> None:
    """Exit code 2, one line on the output starting ``specsim: error:`` and holding every fragment, no traceback."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error:"), result.output
    for f in fragments:
        assert f in lines[0], lines[0]
    assert "Traceback" not in result.output


def pooled_requests(sampler, slots: np.ndarray, k: int, requests: int, tokens: int) -> np.ndarray:
    """A of every step of `requests` whole requests per slot, each emitting `tokens` tokens (a request's length does
    not depend on its acceptance), one after another in each slot (`admit` starts the next): steps pooled as a
    server's counters pool them."""
    sampler.admit(slots)
    emitted = np.zeros(len(slots), dtype=np.int64)
    finished = np.zeros(len(slots), dtype=np.int64)
    draws = []
    while (live := finished < requests).any():
        a = sampler.draw(slots[live], k)
        draws.append(a)
        emitted[live] += a + 1
        done = emitted >= tokens
        if done.any():
            sampler.admit(slots[done])
            emitted[done] = 0
            finished[done] += 1
    return np.concatenate(draws)
