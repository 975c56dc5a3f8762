"""Disaggregated serving (simulator/disaggregated.py): a lone request's TTFT is its prefill plus its KV transfer, its
decode the aggregated engine's decode step for step, and the prefill pool serves first come first served."""

import numpy as np
import pytest

from scenarios import load_hardware, load_model
from simulator.acceptance_parse import parse_acceptance
from simulator.cost import CostModel
from simulator.disaggregated import Disaggregated, KvLink, prefill_pool
from simulator.policies import parse_policies
from simulator.serving import EngineConfig, simulate
from simulator.step_costs import StepCosts
from simulator.workload import Workload


def setup():
    cost = CostModel.from_hardware(load_hardware("h100-sxm"), "bf16")
    target, draft = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    return StepCosts(cost, target, draft), target


def lone(prompt=1000, output=50):
    return Workload(np.array([0.0]), np.array([prompt]), np.array([output]))


def test_a_lone_requests_ttft_is_its_prefill_plus_its_transfer_and_its_decode_is_the_aggregated_one():
    costs, target = setup()
    link = KvLink(25e9, 2e-3)
    fleet = Disaggregated(costs, costs, 1, 1, target.kv_bytes_per_token, link)
    acc = parse_acceptance("iid:0.7")
    off = parse_policies("off", acc)[0]
    run = fleet.simulate(lone(), off, acc, np.random.default_rng(0))
    expected = costs.prefill_s(1, 1000, False) + 2e-3 + 1000 * target.kv_bytes_per_token / 25e9
    assert run.first_token_s[0] == pytest.approx(expected)
    together = simulate(lone(), costs, off, acc, np.random.default_rng(0), EngineConfig())
    assert run.finish_s[0] - run.first_token_s[0] == pytest.approx(together.finish_s[0] - together.first_token_s[0])


def test_the_prefill_pool_batches_what_waits_and_queues_the_rest():
    costs, _ = setup()
    w = Workload(np.array([0.0, 0.0, 0.0]), np.array([4000, 4000, 4000]), np.array([1, 1, 1]))
    done, passes = prefill_pool(w, costs, 1, 8192)  # two prompts fit the budget, the third waits for them
    first = costs.prefill_s(2, 4000, False)
    assert done.tolist() == pytest.approx([first, first, first + costs.prefill_s(1, 4000, False)])
    done2, _ = prefill_pool(w, costs, 2, 4000)  # two engines, a prompt each, the third after the first pass
    one = costs.prefill_s(1, 4000, False)
    assert done2.tolist() == pytest.approx([one, one, 2 * one])


def test_a_decode_engines_steady_state_is_littles_law_within_the_tpot_slo():
    from simulator.disaggregated import decode_capacity

    costs, _ = setup()
    acc = parse_acceptance("iid:0.7")
    off = parse_policies("off", acc)[0]
    cap = decode_capacity(costs, off, acc, 0.02, 512, 128, 256, 10**7)
    plain = off.candidates[0]
    assert cap.tpot_s == pytest.approx(costs.decode_s(cap.batch, 512 + 64, plain)) and cap.tpot_s <= 0.02
    assert cap.rate_per_s == pytest.approx(cap.batch / (127 * cap.tpot_s))
    spec = parse_policies("adaptive", acc, 8)[0]
    assert decode_capacity(costs, spec, acc, 0.02, 512, 128, 256, 10**7).rate_per_s >= cap.rate_per_s


def test_a_pool_larger_than_the_gpus_given_is_a_one_line_error():
    from conftest import one_line_error, run

    one_line_error(run("fleet", "--hardware", "h200", "--target", "deepseek-v3", "--draft", "mtp", "--dtype", "fp8",
                       "--acceptance", "iid:0.8", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50", "--load-rps", "5",
                       "--gpus", "4"), "--gpus 4 is smaller than any engine")
