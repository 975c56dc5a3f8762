from pathlib import Path

import pytest

from calibrate.run import Grid
from simulator.specs import ModelSpec

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TRACES = SHARED / "data" / "acceptance-traces"


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



@pytest.fixture(scope="session")
def tiny_profile():
    """One calibration of tiny shapes on the CPU for the whole session (micro-benchmarks on 4 KiB "MiB" buffers)."""
    import torch

    from calibrate.run import calibrate

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("calibrate.microbench.MIB", 2**12)
        return calibrate(TINY_T, TINY_D, torch.device("cpu"), TINY_GRID, quick=True, command="test")
