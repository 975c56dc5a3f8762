"""The real served stream: continuous batching keeps every request's output, the limits hold, the time cap marks a
row, forced acceptance follows its model, the report's crossover, and `validate --serving` end to end (no timing
asserted)."""

import json

import numpy as np
import pytest
import torch

from calibrate.served_validation import served_config
from calibrate.served_validation_report import ServedRow, ServingValidation, average, format_serving_validation
from engine.builtin import encode, prompts
from engine.served_loop import serve
from engine.speculative import Decoding, RealEngine
from simulator.metrics import ServingMetrics, summarize
from simulator.policies import parse_policies
from simulator.scheduler import admissible
from simulator.serving import EngineConfig
from simulator.step_costs import StepCosts
from simulator.workload import Workload


def stream(n: int, gap_s: float, out_lo: int, out_hi: int, seed: int = 0) -> tuple[Workload, list[list[int]]]:
    rng = np.random.default_rng(seed)
    held = [encode(p) for p in prompts("heldout")]
    ps = [held[i % len(held)][:int(rng.integers(20, 48))] for i in range(n)]
    outs = rng.integers(out_lo, out_hi + 1, n)
    w = Workload(np.arange(n) * gap_s, np.array([len(p) for p in ps]), outs, "test stream")
    return w, ps


def costs_of(profile):
    return StepCosts(profile.cost_model(), profile.target, profile.draft)


@pytest.mark.parametrize("policy", ["off", "fixed:3", "tree:2,1", "adaptive:4"])
def test_continuous_batching_decodes_each_request_as_if_alone(builtin_pair, builtin_profile, policy):
    """Greedy decoding: whatever joins and leaves the batch around it (rows moved, prefills into later rows, plain
    and speculative steps mixed), each request's output is what decoding its prompt alone gives."""
    target, draft = builtin_pair
    engine = RealEngine(target, draft)
    w, ps = stream(9, 0.002, 3, 24)
    pol = parse_policies(policy, builtin_profile.acceptance.model())[0]
    config, kv = served_config(EngineConfig(), max_batch=3, max_seq_len=target.cfg.max_seq_len)
    served = serve(engine, w, ps, pol, costs_of(builtin_profile), config, kv, 0.0, 0, 600)
    assert served.held and max(s.batch for s in served.steps) <= 3
    alone = RealEngine(target, draft)
    for i, p in enumerate(ps):
        want = alone.generate([p], int(w.output_tokens[i]), Decoding(k=0, temperature=0)).tokens[0]
        assert served.tokens[i] == want, f"request {i}"
    run = served.run
    assert np.all(run.first_token_s >= w.arrival_s) and np.all(run.finish_s >= run.first_token_s)
    m = summarize(run)
    assert m.requests == 9 and m.throughput_tokens_per_s > 0 and m.tpot_s[0] > 0
    if pol.uses_draft and policy != "adaptive:4":
        assert m.tokens_per_step > 1.0


def test_the_cache_limit_and_the_batch_limit_hold(builtin_pair, builtin_profile):
    """A KV cache that holds two requests' lives never runs more than two at once, and they all finish."""
    target, draft = builtin_pair
    w, ps = stream(6, 0.0, 8, 8)
    pol = parse_policies("fixed:2", builtin_profile.acceptance.model())[0]
    config, _ = served_config(EngineConfig(), max_batch=4, max_seq_len=target.cfg.max_seq_len)
    need = int((w.prompt_tokens + w.output_tokens).max()) + pol.lookahead_tokens
    served = serve(RealEngine(target, draft), w, ps, pol, costs_of(builtin_profile), config, 2 * need, 1.0, 0, 600)
    assert served.held and max(s.batch for s in served.steps) == 2
    assert all(len(t) == 8 for t in served.tokens)


def test_admission_is_first_come_first_served_within_cache_and_budget():
    assert admissible([10, 10, 10], [5, 5, 5], kv_free=25, budget=100) == 2
    assert admissible([10, 10], [50, 60], kv_free=100, budget=100) == 1  # the second prompt exceeds the budget
    assert admissible([10], [500], kv_free=100, budget=100) == 1  # the first always takes the budget
    assert admissible([30, 5], [1, 1], kv_free=20, budget=100) == 0  # the head blocks: first come, first served


def test_a_run_past_its_time_cap_is_marked_and_not_scored(builtin_pair, builtin_profile):
    target, draft = builtin_pair
    w, ps = stream(6, 0.0, 40, 40)
    pol = parse_policies("off", builtin_profile.acceptance.model())[0]
    config, kv = served_config(EngineConfig(), max_batch=2, max_seq_len=target.cfg.max_seq_len)
    served = serve(RealEngine(target, draft), w, ps, pol, costs_of(builtin_profile), config, kv, 1.0, 0, 0.05)
    assert not served.held and any(t is None for t in served.tokens)
    from calibrate.served_validation import _partial

    m = _partial(served, 5.0)
    assert not m.sustained
    row = ServedRow(5.0, "off", False, m, m, {"step time": 0.0})
    report = ServingValidation([row], [5.0], ["off"], {"requests": 6})
    assert report.summary()["rows_not_held"] == 1 and report.summary()["throughput"]["n"] == 0
    assert "NOT HELD" in format_serving_validation(report)


def test_the_time_cap_counts_from_the_last_arrival(builtin_pair, builtin_profile):
    """A light load whose arrivals outlast the cap (three requests a second apart, a 1.5 s cap) is served to the end:
    the cap bounds a queue that outgrows the engine, not the length of a trace. (The last request's four tokens take
    well under the cap, tens of milliseconds here.)"""
    target, draft = builtin_pair
    w, ps = stream(3, 1.0, 4, 4)
    pol = parse_policies("off", builtin_profile.acceptance.model())[0]
    config, kv = served_config(EngineConfig(), max_batch=2, max_seq_len=target.cfg.max_seq_len)
    served = serve(RealEngine(target, draft), w, ps, pol, costs_of(builtin_profile), config, kv, 1.0, 0, 1.5)
    assert served.held and all(t is not None for t in served.tokens)


def test_forced_acceptance_in_a_served_stream_follows_the_model(tiny_profile):
    """Random weights accept nothing of each other; forced, the served stream's tokens per step follow the model."""
    from engine.model import build_decoder
    from simulator.acceptance_parse import parse_acceptance

    p = tiny_profile.profile
    engine = RealEngine(build_decoder(p.target, 128, seed=0), build_decoder(p.draft, 128, seed=1))
    acc = parse_acceptance("iid:0.7")
    engine.force(acc, seed=0)
    rng = np.random.default_rng(0)
    n = 12
    ps = [rng.integers(0, p.target.vocab_size, 10).tolist() for _ in range(n)]
    w = Workload(np.zeros(n), np.full(n, 10), np.full(n, 60), "forced")
    pol = parse_policies("fixed:3", acc)[0]
    config, kv = served_config(EngineConfig(), max_batch=4, max_seq_len=128)
    served = serve(engine, w, ps, pol, StepCosts(p.cost_model(), p.target, p.draft), config, kv, 1.0, 0, 600)
    (hist,) = served.run.accepted_hist.values()
    mean_a = float(np.dot(np.arange(len(hist)), hist) / hist.sum())
    assert abs(mean_a - (acc.expected_tokens(3) - 1)) < 0.25


def metrics(policy: str, rate: float, tpot: float) -> ServingMetrics:
    t = (tpot, tpot * 1.2, tpot * 1.5)
    return ServingMetrics(policy, rate, 1, 10, 1.0, 100.0, 10.0, t, t, t, 1.0, 10.0, True, 0, 2.0, 0.0, 1.0, None, 5)


def test_the_crossover_is_the_lowest_rate_speculation_no_longer_lowers_tpot():
    rates = [1.0, 2.0, 4.0, 8.0]
    measured = {1.0: (10, 5), 2.0: (11, 7), 4.0: (12, 12.5), 8.0: (20, 25)}  # rate: (off, fixed) TPOT
    predicted = {1.0: (10, 5), 2.0: (11, 7), 4.0: (12, 11.5), 8.0: (20, 21)}
    rows = []
    for r in rates:
        for i, pol in enumerate(("off", "fixed:4")):
            rows.append(ServedRow(r, pol, True, metrics(pol, r, measured[r][i]), metrics(pol, r, predicted[r][i]),
                                  {}))
    report = ServingValidation(rows, rates, ["off", "fixed:4"], {})
    c = report.crossovers()["fixed:4"]
    assert c["strict"] == {"measured": 4.0, "predicted": 8.0, "grid_steps_apart": 1}
    assert (c["measured"], c["predicted"]) == (4.0, 4.0)  # 11 vs 12 and 21 vs 20: within the 5 % margin
    assert "within one grid step" in format_serving_validation(report)
    # Curves that touch at 4 req/s but part again above it: speculation has not stopped paying there.
    touch = {1.0: (10, 5), 2.0: (11, 7), 4.0: (12, 12.5), 8.0: (20, 16)}
    rows = [ServedRow(r, pol, True, metrics(pol, r, touch[r][i]), metrics(pol, r, touch[r][i]), {})
            for r in rates for i, pol in enumerate(("off", "fixed:4"))]
    c = ServingValidation(rows, rates, ["off", "fixed:4"], {}).crossovers()["fixed:4"]
    assert (c["measured"], c["strict"]["measured"]) == (None, None)
    row = ServedRow(1.0, "fixed:4", True, metrics("fixed:4", 1.0, 10.0), metrics("fixed:4", 1.0, 12.0),
                    {"step time": 0.32, "acceptance": 0.1})
    assert row.net_tpot_p50 == pytest.approx(1.2 * 1.1 / 1.32 - 1) and row.cause == "step time"
    avg = average([metrics("off", 1.0, 10.0), metrics("off", 1.0, 20.0)])
    assert avg.tpot_s[0] == pytest.approx(15.0) and avg.decode_steps == 5 and avg.acceptance_rate is None


def test_the_served_plot_shows_every_prediction_even_at_a_single_rate():
    """A run at one rate (a trace on its own clock) draws each policy's prediction as a visible mark with its band,
    and every value fits under the top of its panel."""
    from plots.serving import served_vs_predicted

    rows = [ServedRow(0.74, pol, True, metrics(pol, 0.74, t), metrics(pol, 0.74, t * 1.1), {},
                      sampling={"throughput": 0.0, "tpot_p50": 0.05, "tpot_p90": 0.05})
            for pol, t in (("off", 0.028), ("fixed:4", 0.011))]
    fig = served_vs_predicted(ServingValidation(rows, [0.74], ["off", "fixed:4"], {}))
    tpot = fig.axes[0]
    predicted = [ln for ln in tpot.lines if ln.get_label().endswith("predicted")]
    assert [ln.get_marker() for ln in predicted] == ["_", "_"]
    assert sorted(float(ln.get_ydata()[0]) for ln in predicted) == pytest.approx([1e3 * 0.011 * 1.1, 1e3 * 0.028 * 1.1])
    assert tpot.collections and tpot.get_ylim()[1] >= 1e3 * 0.028 * 1.1 * 1.1
    for ax in fig.axes[:3]:
        assert all(float(y) < ax.get_ylim()[1] for ln in ax.lines for y in ln.get_ydata())


def test_validate_serving_end_to_end_and_its_bad_inputs(tiny_profile, tmp_path, monkeypatch):
    """`validate --serving` at a tiny profile's shapes with acceptance replayed: a JSON report with a row per rate and
    policy, the crossovers and the plot; a trace of arrivals on its own clock; one-line errors for a trace with no
    usable rows, a static option, and caches that cannot fit in memory (nothing written)."""
    from conftest import one_line_error, run, save_tiny

    from calibrate.timing import Effort

    # what is checked is the report's plumbing, not how well the spot checks time: a few samples each
    monkeypatch.setattr(Effort, "of", classmethod(lambda cls, quick, busy: cls(0.005, 2, 3, 0.5)))

    path = tmp_path / "tiny.json"
    save_tiny(tiny_profile, path)
    common = ["validate", "--profile", str(path), "--serving", "--acceptance", "iid:0.7", "--requests", "8",
              "--prompt-tokens", "6..10", "--output-tokens", "4..8", "--max-batch", "4"]
    r = run(*common, "--rate", "50,400", "--policy", "off,fixed:2", "--json", "--plot", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{"):])
    assert len(report["rows"]) == 4 and set(report["crossovers"]) == {"fixed:2"}
    assert all(row["held"] for row in report["rows"])
    # 2 rates x 2 policies x 2 passes: a check before the first run and after every run, one re-anchoring per run.
    assert len(report["settings"]["spot_timings"]) == 9 and len(report["settings"]["spot_checks"]) == 8
    assert {"step time", "prefill", "acceptance", "queueing"} == set(report["rows"][1]["causes"])
    # the served loop's own work between the engine's steps: measured, positive, a part of the step
    assert all(0 < row["loop_s"] < row["step_s"] for row in report["rows"])
    assert (tmp_path / "out" / "validation-serving.png").read_bytes()[:4] == b"\x89PNG"
    trace = tmp_path / "arrivals.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{0.01 * i},8,5\n" for i in range(8)))
    r = run(*common[:-8], "--arrivals", f"trace:{trace}", "--policy", "off,fixed:2")
    assert r.exit_code == 0, r.output
    assert "the served loop's own work between the engine's steps" in r.output
    assert "stops paying" in r.output and r.output.count("fixed:2") >= 2
    empty = tmp_path / "empty.csv"
    empty.write_text("arrival_s,prompt_tokens,output_tokens\n")
    r = run(*common, "--arrivals", f"trace:{empty}", "--plot", str(tmp_path / "no"))
    assert r.exit_code != 0 and "Traceback" not in r.output and not (tmp_path / "no").exists()
    one_line_error(run(*common, "--k", "2"), "--k size a static validation")
    one_line_error(run("validate", "--rate", "4"), "add --serving")
    ranks = [a if a != "iid:0.7" else "ranks:0.6,0.2" for a in common]
    one_line_error(run(*ranks, "--policy", "off,tree:2,1"), "forced acceptance replays chains")
    one_line_error(run(*common[:-6], "--max-batch", "4096", "--prompt-tokens", "60000", "--output-tokens", "60000"),
                   "lower --max-batch")


def test_generate_still_matches_after_serving(builtin_pair):
    """A served stream leaves the engine usable for static runs (its caches are re-made as needed)."""
    target, draft = builtin_pair
    engine = RealEngine(target, draft)
    ps = [encode(p)[:30] for p in prompts("heldout")[:2]]
    before = engine.generate(ps, 10, Decoding(k=2, temperature=0)).tokens
    engine.open_batch(4, True)
    assert engine.generate(ps, 10, Decoding(k=2, temperature=0), torch.Generator().manual_seed(0)).tokens == before


@pytest.mark.parametrize("bulk", [True, False])
def test_padded_shapes_cost_what_the_longest_sequence_costs(builtin_profile, bulk):
    """With mixed prompt lengths, padded prefills and attention make every step cost at least what it costs
    unpadded (the first strictly more); with equal prompts the prefill and the first step (equal contexts) cost the
    same."""
    from simulator.serving import simulate

    costs = costs_of(builtin_profile)
    pol = parse_policies("fixed:2", builtin_profile.acceptance.model())[0]
    for prompts_, more in ((np.array([16, 200, 40, 120]), True), (np.full(4, 100), False)):
        w = Workload(np.zeros(4), prompts_, np.full(4, 30), "mixed")
        runs = [simulate(w, costs, pol, builtin_profile.acceptance.model(), np.random.default_rng(0),
                         EngineConfig(max_batch=4, bulk=bulk, prefill_padded=padded, attention_padded=padded))
                for padded in (False, True)]
        first_steps = [r.step_duration_s[:5] for r in runs]  # the same batch of four in both (same seed)
        assert np.all(first_steps[1] >= first_steps[0] - 1e-12)
        assert (first_steps[1][0] > first_steps[0][0] + 1e-9) == more
        assert (runs[1].prefill_duration_s.sum() > runs[0].prefill_duration_s.sum() + 1e-9) == more


def test_the_simulations_spread_is_acceptances_chance_and_shrinks_with_more_requests(builtin_profile):
    """Plain decoding draws nothing: its simulated runs agree (to rounding). A speculating policy's TPOT p50
    moves with the acceptance drawn, less over more requests (roughly 1 / sqrt(n): a median of per-request means)."""
    from calibrate.served_validation import predict_run

    acc = builtin_profile.acceptance.model()
    config, _ = served_config(EngineConfig(), max_batch=4, max_seq_len=256)
    off, fixed = parse_policies("off,fixed:4", acc)

    def spread(policy, n):
        rng = np.random.default_rng(1)
        w = Workload(np.cumsum(rng.exponential(0.2, n)), rng.integers(64, 129, n), rng.integers(16, 81, n), "s")
        return predict_run(w, costs_of(builtin_profile), policy, acc, config, seed=0, seeds=24).spread()

    assert spread(off, 32) == pytest.approx({"throughput": 0.0, "tpot_p50": 0.0, "tpot_p90": 0.0}, abs=1e-12)
    few, many = spread(fixed, 16)["tpot_p50"], spread(fixed, 256)["tpot_p50"]
    assert 0.02 < few and many < few / 2


def test_a_miss_within_two_sampling_deviations_of_the_target_is_told_apart():
    """A row's |error| over its target by more than twice its sampling deviation is a miss chance does not explain;
    the summary counts such rows and the report says how far chance moves a row."""
    def row(pol, tpot_pred, sd):
        return ServedRow(1.0, pol, True, metrics(pol, 1.0, 10.0), metrics(pol, 1.0, tpot_pred), {},
                         sampling={"throughput": 0.0, "tpot_p50": sd, "tpot_p90": sd})

    near, far, plain = row("fixed:4", 11.4, 0.03), row("adaptive", 11.4, 0.01), row("off", 10.2, 0.0)
    assert not near.beyond_chance("tpot_p50", 0.10) and far.beyond_chance("tpot_p50", 0.10)
    assert not plain.beyond_chance("tpot_p50", 0.10) and not plain.beyond_chance("throughput", 0.05)
    report = ServingValidation([plain, near, far], [1.0], ["off", "fixed:4", "adaptive"], {})
    s = report.summary()
    assert s["tpot_p50"]["beyond_chance"] == 1 and s["tpot_p50"]["target"] == 0.10
    text = format_serving_validation(report)
    assert "chance alone moves a speculating row by a median ±2.0 %, and 1 row(s) miss by more than twice" in text


def test_spot_checks_are_read_as_a_series():
    """A burst that fills one check is not a change of speed: each check becomes the median of itself and its
    neighbours, so a lone spike is dropped, a lasting step is followed from its second check on, and the series' ends
    take the mean of their two."""
    from calibrate.served_validation import steady

    def series(*xs):
        return [{("t", 1): x, ("d", 1): 2 * x} for x in xs]

    spiked = steady(series(1.0, 1.0, 1.5, 1.0, 1.0))
    assert [t[("t", 1)] for t in spiked] == [1.0, 1.0, 1.0, 1.0, 1.0]
    assert [t[("d", 1)] for t in spiked] == [2.0] * 5
    assert [t[("t", 1)] for t in steady(series(1.0, 1.0, 1.3, 1.3, 1.3))] == [1.0, 1.0, 1.3, 1.3, 1.3]
    assert [t[("t", 1)] for t in steady(series(1.0, 1.2))] == pytest.approx([1.1, 1.1])


def test_a_burst_during_one_spot_check_does_not_reprice_the_runs_beside_it(tiny_profile, tmp_path, monkeypatch):
    """The device timed 3x slower in the check between the second and third run only: the JSON keeps that timing
    as measured, and every run is priced at the device's steady speed."""
    from conftest import run, save_tiny

    import calibrate.validate

    real = calibrate.validate.time_spot
    factors = iter([1.0, 1.0, 3.0, 1.0, 1.0])
    base: dict = {}

    def scripted(*args, **kwargs):
        if not base:
            base.update(real(*args, **kwargs))
        f = next(factors)
        return {key: f * t for key, t in base.items()}

    monkeypatch.setattr(calibrate.validate, "time_spot", scripted)
    path = tmp_path / "tiny.json"
    save_tiny(tiny_profile, path)
    r = run("validate", "--profile", str(path), "--serving", "--acceptance", "iid:0.7", "--requests", "6",
            "--prompt-tokens", "6..10", "--output-tokens", "4..8", "--max-batch", "4", "--rate", "50",
            "--policy", "off,fixed:2", "--json")
    assert r.exit_code == 0, r.output
    settings = json.loads(r.output[r.output.index("{"):])["settings"]
    # each (model, batch) against its own steady timing: the target's pass may well take 3x the draft's
    ratios = [{key: t[f"{key[0]}@{key[1]}"] / base[key] for key in base} for t in settings["spot_timings"]]
    assert [min(r.values()) >= 3.0 - 1e-9 for r in ratios] == [0, 0, 1, 0, 0]
    assert [max(r.values()) <= 1.0 + 1e-9 for r in ratios] == [1, 1, 0, 1, 1]
    for check in settings["spot_checks"]:
        for point in check["points"]:
            assert point["before_s"] == point["after_s"] == base[(point["model"], point["batch"])]
    assert settings["graph_captures"] == {"stream": 0, "spot_checks": 0}  # eager on a CPU: nothing captured


@pytest.mark.parametrize("policy", ["fixed:3", "adaptive:4", "off"])
def test_the_served_loop_takes_the_simulators_own_steps(builtin_pair, builtin_profile, policy):
    """One scheduler, two clocks: with every request there at t = 0 (no decision hangs on the clock) and every draft
    accepted (iid 1: no decision hangs on a draw), the real engine's served stream and the simulation of it take the
    same steps: the same batch, the same draft length or none, the same tokens kept, prefill for prefill."""
    from simulator.acceptance import IIDAcceptance
    from simulator.serving import simulate

    target, draft = builtin_pair
    w, ps = stream(10, 0.0, 4, 20, seed=4)
    acceptance = IIDAcceptance(1.0)
    pol = parse_policies(policy, acceptance)[0]
    config, kv = served_config(EngineConfig(bulk=False), max_batch=4, max_seq_len=target.cfg.max_seq_len)
    engine = RealEngine(target, draft)
    engine.force(acceptance)
    costs = costs_of(builtin_profile)
    served = serve(engine, w, ps, pol, costs, config, kv, 1.0, 0, 600)
    simulated = simulate(w, costs, pol, acceptance, np.random.default_rng(0), config)
    real = served.run
    assert served.held
    assert real.step_batch.tolist() == simulated.step_batch.tolist()
    assert real.step_drafted.tolist() == simulated.step_drafted.tolist()
    assert real.step_tokens.tolist() == simulated.step_tokens.tolist()
    assert len(real.prefill_duration_s) == len(simulated.prefill_duration_s)


def test_on_graphs_a_served_prefill_is_padded_to_a_bucket_and_replayed(builtin_pair, builtin_profile):
    """Through the graph runner (its CPU stand-in), a served prefill pads its prompts to a multiple of
    PREFILL_BUCKET and runs as a graph: the outputs are still each request's own, the prefills record the padded
    length the simulator prices, and a prefill shape met again is replayed, not captured."""
    from engine.pass_runner import EagerStandIn, GraphRunner
    from engine.speculative import PREFILL_BUCKET

    target, draft = builtin_pair
    backend = EagerStandIn()
    engine = RealEngine(target, draft, GraphRunner(backend))
    w, ps = stream(6, 0.0, 5, 10, seed=2)
    pol = parse_policies("fixed:2", builtin_profile.acceptance.model())[0]
    config, kv = served_config(EngineConfig(), max_batch=1, max_seq_len=target.cfg.max_seq_len,
                               prefill_bucket=PREFILL_BUCKET)
    first = serve(engine, w, ps, pol, costs_of(builtin_profile), config, kv, 0.0, 0, 600)
    again = serve(engine, w, ps, pol, costs_of(builtin_profile), config, kv, 0.0, 0, 600)
    alone = RealEngine(target, draft)
    for i, p in enumerate(ps):
        want = alone.generate([p], int(w.output_tokens[i]), Decoding(k=0, temperature=0)).tokens[0]
        assert first.tokens[i] == want, f"request {i}"
    assert all(p.tokens_per_request % PREFILL_BUCKET == 0 for p in first.prefills)
    assert any(p.captured for p in first.prefills) and not any(p.captured for p in again.prefills)
    assert backend.replays > 0
    # The simulator prices the same padded pass.
    from simulator.serving import simulate

    sim = simulate(w, costs_of(builtin_profile), pol, builtin_profile.acceptance.model(), np.random.default_rng(0),
                   config)
    padded = costs_of(builtin_profile).prefill_s(1, first.prefills[0].tokens_per_request, True)
    assert sim.prefill_duration_s[0] == pytest.approx(padded)


def test_another_engines_stream_plot_shows_measured_points_on_simulated_lines():
    """`engine_stream_vs_simulated`: three panels (throughput, TPOT p50, TTFT p50), a simulated line and measured
    points per policy at the report's values, each point labelled with its error, the median row ringed; `--plot`
    without a served llama.cpp stream is refused before anything runs."""
    from conftest import one_line_error, run

    from plots.serving import engine_stream_vs_simulated

    def cell(m, p):
        return [m, p, p / m - 1]

    rows = [{"rate_per_s": rate, "policy": pol, "throughput": cell(10 * rate, 10.5 * rate),
             "tpot_p50_s": cell(t, 0.9 * t), "ttft_p50_s": cell(0.2 * rate, 0.21 * rate), "causes": {}}
            for rate in (1.0, 2.0) for pol, t in (("off", 0.040), ("fixed:4", 0.020))]
    report = {"engine": "llama.cpp llama-server", "threads": 1, "slots": 4, "requests": 24, "tokens": 48,
              "rows": rows, "median_row": {"rate_per_s": 2.0, "policy": "off"},
              "median_abs_err": {"throughput": 0.05, "tpot_p50_s": 0.1, "ttft_p50_s": 0.05}}
    fig = engine_stream_vs_simulated(report)
    assert len(fig.axes) == 3
    tpot = fig.axes[1]
    lines = {ln.get_label(): ln for ln in tpot.lines}
    assert list(lines["off simulated"].get_ydata()) == pytest.approx([36.0, 36.0])
    assert list(lines["fixed:4 simulated"].get_ydata()) == pytest.approx([18.0, 18.0])
    labels = sorted(t.get_text() for t in tpot.texts)
    assert labels == ["-10%"] * 4
    assert fig.axes[2].get_yscale() == "log"
    ringed = [c for c in tpot.collections if c.get_sizes().size and c.get_sizes()[0] == 160]
    assert len(ringed) == 1 and list(ringed[0].get_offsets()[0]) == pytest.approx([2.0, 40.0])
    one_line_error(run("validate", "--engine", "transformers", "--profile", "p.json", "--target", "t", "--draft",
                       "d", "--plot", "out/"), "--plot draws a served stream")
