"""MoE routing as AIConfigurator measured its kernels (simulator.routing): the power-law expert loads, the experts a
pass wakes under them against uniform routing, and a prediction saying which routing it used."""

import numpy as np
import pytest
from conftest import run

from scenarios import load_model
from simulator.routing import _loads, power_law_touched


def test_power_law_loads_are_the_passes_tokens_unevenly_spread():
    rng = np.random.default_rng(0)
    for tokens in (1, 8, 64, 512):
        loads = _loads(128, 8, tokens, 1.2, rng)
        assert (loads.sum(axis=1) == tokens * 8).all() and loads.min() >= 0
    # the busiest expert of 512 tokens carries far more than the uniform 32
    assert np.median(loads.max(axis=1)) > 4 * 512 * 8 / 128


def test_power_law_wakes_fewer_experts_than_uniform_and_never_all():
    m = load_model("qwen3-30b-a3b")
    E, k = m.n_experts, m.experts_per_token
    tokens = np.array([2, 4, 16, 64, 256])
    law = power_law_touched(E, k, tokens, 1.2)
    uniform = m.experts_touched(1, tokens, sharing=0.0)
    assert (law < uniform).all() and (law <= np.minimum(E, tokens * k)).all()
    assert np.all(np.diff(power_law_touched(E, k, np.array([1, 2, 4, 8, 16]), 1.2)) > 0)
    assert power_law_touched(E, k, 4096, 1.2) < E
    # seeded: the same numbers every call; fractional token counts between whole ones
    assert power_law_touched(E, k, 16, 1.2) == power_law_touched(E, k, 16, 1.2)
    assert law[0] < power_law_touched(E, k, 2.5, 1.2) < power_law_touched(E, k, 3, 1.2)
    # the cost model reads it through the expert union, sharing applied before it
    assert m.experts_touched(4, 16, 0.5, power_law=1.2) == pytest.approx(power_law_touched(E, k, 16 * 2.5, 1.2))
    with pytest.raises(ValueError):
        power_law_touched(E, k, 4, 1.0)


def test_a_moe_prediction_says_which_routing_it_used():
    args = ["predict", "--hardware", "h100-sxm", "--target", "qwen3-30b-a3b", "--draft", "eagle3", "--acceptance",
            "iid:0.5", "--batch", "1,16", "--k", "0..2", "--context", "1024"]
    r = run(*args)
    assert r.exit_code == 0 and "MoE routing: uniform" in r.output, r.output
    law = run(*args, "--power-law-routing", "1.2")
    assert law.exit_code == 0 and "MoE routing: power law, exponent 1.2" in law.output, law.output
    assert law.output != r.output
    bad = run(*args, "--power-law-routing", "0.5")
    assert bad.exit_code == 2 and "exponent > 1" in bad.output
