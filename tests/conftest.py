from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TRACES = SHARED / "data" / "acceptance-traces"


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20261129)


def trace_path(name: str = "cnn") -> Path:
    path = TRACES / f"llama3.1-8b-instruct_{name}.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is beside the checkout in CI)")
    return path
