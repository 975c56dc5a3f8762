"""`specsim simulate`, `plan`, `policy` and `plot` through the CLI: outputs, files and one-line errors; and the
readers of real engines' acceptance counters."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import one_line_error, run

from scenarios.engine_metrics import engine_acceptance, parse_prometheus
from simulator import SpecsimError

H100 = ["--hardware", "h100-sxm", "--acceptance", "iid:0.7"]

VLLM_SCRAPE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="llama"} 600.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="llama"} 400.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="llama"} 4000.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="llama"} 2100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="0"} 800.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="1"} 600.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="2"} 420.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="3"} 280.0
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
"""




# --- simulate -----------------------------------------------------------------------------------------------------


def test_simulate_table_json_and_seed(tmp_path):
    args = ["simulate", *H100, "--rate", "10,40", "--policy", "off,fixed:3,adaptive", "--requests", "200",
            "--slo-tpot-ms", "20", "--executor", "serial"]  # six small runs: a pool of processes costs more (the
    r = run(*args, "--json")  # local processes give the serial results: test_executors)
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert [x["policy"] for x in body["runs"]] == ["off", "fixed:3", "adaptive"] * 2
    off, fixed = body["runs"][0], body["runs"][1]
    assert fixed["tpot_s"]["p50"] < off["tpot_s"]["p50"]  # light load: speculation lowers TPOT
    assert fixed["tokens_per_step"] == pytest.approx(2.53, abs=0.1)  # iid 0.7, k = 3: 2.533
    hist = np.asarray(fixed["accepted_length_histogram"]["k=3"])  # per sequence-step, A = 0..3
    np.testing.assert_allclose(hist / hist.sum(), [0.3, 0.21, 0.147, 0.343], atol=0.02)
    again = json.loads(run(*args, "--json").stdout)
    assert again["runs"] == body["runs"]
    table = run(*args, "--plot", str(tmp_path / "tpot.svg"))
    assert table.exit_code == 0 and "TPOT p50" in table.output and (tmp_path / "tpot.svg").stat().st_size > 1000
    csv = run(*args, "--csv")
    assert csv.stdout.splitlines()[0].startswith("policy,rate_per_s") and len(csv.stdout.splitlines()) == 7


def test_simulate_trace_arrivals(tmp_path):
    trace = tmp_path / "requests.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,20\n0.05,200,30\n0.02,50,10\n")
    r = run("simulate", *H100, "--arrivals", f"trace:{trace}", "--policy", "fixed:2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["runs"][0]["requests"] == 3


@pytest.mark.parametrize(("args", "fragments"), [
    (["--rate", "0"], ["request rate must be > 0"]),
    (["--rate", "-3"], ["request rate"]),
    (["--rate", "8..1"], ["runs backwards"]),
    (["--slo-tpot-ms", "50us"], ["--slo-tpot-ms", "milliseconds"]),
    (["--slo-tpot-ms", "0"], ["--slo-tpot-ms"]),
    (["--slo-tpot-ms", "5000000"], ["outside"]),
    (["--policy", "sometimes"], ["policy 'sometimes'"]),
    (["--policy", "tree:2,2"], ["per-rank"]),
    (["--prompt-tokens", "0"], ["--prompt-tokens"]),
    (["--arrivals", "gamma:-1"], ["coefficient of variation"]),
    (["--arrivals", "hourly"], ["unknown arrival process"]),
    (["--lengths-from", "/nonexistent.jsonl"], ["cannot read trace"]),
    (["--prompt-tokens", "2000000"], ["tokens of KV cache"]),
    (["--target", "llama-3.1-70b"], ["no room for a KV cache", "--tp N"]),  # 141 GB of weights on one 80 GB GPU
])
def test_simulate_bad_inputs(args, fragments):
    one_line_error(run("simulate", *H100, "--requests", "50", *args), *fragments)


def test_simulate_trace_missing_columns(tmp_path):
    trace = tmp_path / "requests.csv"
    trace.write_text("arrival_s,prompt_tokens\n0.0,100\n")
    one_line_error(run("simulate", *H100, "--arrivals", f"trace:{trace}"), "missing column output_tokens")
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,lots\n")
    one_line_error(run("simulate", *H100, "--arrivals", f"trace:{trace}"), "output_tokens", "int")


def test_simulate_with_medusa_heads_keeps_adaptive_within_them():
    """A bare adaptive on a 4-head Medusa chooses k up to 4 (it ran into the heads' limit mid-simulation, with advice
    for predict's --k); asking for more is refused before any simulation."""
    medusa = ["--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "medusa:4", "--acceptance",
              "ranks:0.6,0.2,0.1", "--rate", "5", "--requests", "50"]
    r = run("simulate", *medusa, "--policy", "adaptive", "--json")
    assert r.exit_code == 0, r.output
    assert [x["policy"] for x in json.loads(r.stdout)["runs"]] == ["adaptive:4"]
    one_line_error(run("simulate", *medusa, "--policy", "fixed:6"), "fills at most 4", "fixed:4")


def test_simulate_needs_acceptance_with_hardware():
    one_line_error(run("simulate", "--hardware", "h100-sxm"), "--acceptance")


# --- plan ---------------------------------------------------------------------------------------------------------


def test_plan_finds_rates_and_fleet():
    r = run("plan", *H100, "--slo-tpot-ms", "12", "--policy", "off,fixed:3", "--requests", "300",
            "--load-rps", "60", "--json")
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    caps = {c["policy"]: c for c in body["max_rate"]}
    assert caps["fixed:3"]["rate_per_s"] > caps["off"]["rate_per_s"] > 0  # a tight TPOT: speculation buys capacity
    for c in caps.values():
        assert c["metrics"]["slo_attainment"] >= 0.9
    fleets = {f["policy"]: f for f in body["fleet"]}
    assert 0 < fleets["fixed:3"]["engines"] <= fleets["off"]["engines"]


def test_plan_needs_an_slo():
    one_line_error(run("plan", *H100), "--slo-tpot-ms")


# --- policy -------------------------------------------------------------------------------------------------------


def test_policy_vllm_ranges_are_contiguous(tmp_path):
    h100 = ["--hardware", "h100-sxm", "--acceptance", "iid:0.6", "--engine", "gpt-fast"]
    r = run("policy", *h100, "--format", "vllm", "--context", "128")
    assert r.exit_code == 0, r.output
    ranges = json.loads(r.stdout)
    assert ranges[0][0] == 1 and ranges[-1][1] == 256
    for (lo, hi, k), (lo2, _, k2) in zip(ranges, ranges[1:]):
        assert lo <= hi and lo2 == hi + 1 and k != k2
    assert ranges[-1][2] == 0  # H100, iid 0.6, context 128: speculation off at the largest batches
    out = tmp_path / "policy.json"
    r = run("policy", *h100, "--format", "json", "--context", "128", "--out", str(out))
    body = json.loads(out.read_text())
    assert body["num_speculative_tokens_per_batch_size"] == ranges
    assert all(x["predicted_speedup_min"] >= 1.0 - 1e-9 for x in body["ranges"])


def test_policy_tolerance_defaults_to_what_the_prediction_resolves(tiny_profile, tmp_path):
    """A preset's table keeps a k while within 1 % of the best, a profile's within its held-out pass error (at least
    1 %), --tolerance overrides either; each range says what it gives up against the best k."""
    from conftest import save_tiny

    free = [*H100, "--engine", "gpt-fast", "--format", "json", "--context", "128"]  # no switch cost to add to it
    r = run("policy", *free)
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert body["tolerance"] == 0.01 and all(0 <= x["loss_vs_best_max"] <= 0.01 for x in body["ranges"])
    exact = json.loads(run("policy", *free, "--tolerance", "0").stdout)
    assert exact["tolerance"] == 0 and len(exact["ranges"]) >= len(body["ranges"])
    path = save_tiny(tiny_profile, tmp_path / "p.json")
    r = run("policy", "--profile", str(path), "--acceptance", "iid:0.7", "--batch", "1..8", "--format", "json")
    assert r.exit_code == 0, r.output
    heldout = tiny_profile.profile.fit.heldout.median_abs_err
    assert json.loads(r.stdout)["tolerance"] == pytest.approx(max(0.01, heldout))
    for bad in ("-1", "60", "some"):
        one_line_error(run("policy", *H100, "--tolerance", bad), "--tolerance")


def test_policy_needs_batches_from_one():
    one_line_error(run("policy", *H100, "--batch", "2..64"), "--batch")


# --- engine metrics -----------------------------------------------------------------------------------------------


def test_vllm_metrics_become_a_positional_model(tmp_path):
    f = tmp_path / "metrics.txt"
    f.write_text(VLLM_SCRAPE)
    acc = engine_acceptance(f"vllm-metrics:{f}")
    # survival P(A >= i) = per-position counts / drafts (1,000 summed over both engines' series)
    np.testing.assert_allclose(acc.survival(4), [0.8, 0.6, 0.42, 0.28])
    assert acc.expected_tokens(4) == pytest.approx(1 + 2100 / 1000)
    r = run("policy", "--hardware", "h100-sxm", "--acceptance", f"vllm-metrics:{f}", "--format", "json")
    assert r.exit_code == 0 and "positional" in json.loads(r.stdout)["setup"]


def test_vllm_metrics_missing_counter(tmp_path):
    f = tmp_path / "metrics.txt"
    f.write_text("\n".join(ln for ln in VLLM_SCRAPE.splitlines() if "num_draft_tokens" not in ln))
    one_line_error(run("simulate", "--hardware", "h100-sxm", "--acceptance", f"vllm-metrics:{f}"),
                   "vllm:spec_decode_num_draft_tokens_total")
    f.write_text("garbage\n")
    with pytest.raises(SpecsimError, match="missing"):
        engine_acceptance(f"vllm-metrics:{f}")


def test_vllm_metrics_rising_per_position_counts_are_refused(tmp_path):
    f = tmp_path / "metrics.txt"
    # Ten million drafts, position 1 accepted 0.5 % more often than position 0: impossible, however many drafts.
    f.write_text("\n".join([
        "vllm:spec_decode_num_drafts_total 1e7", "vllm:spec_decode_num_draft_tokens_total 2e7",
        "vllm:spec_decode_num_accepted_tokens_total 1.604e7",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 8.0e6',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 8.04e6']))
    with pytest.raises(SpecsimError, match="must not increase"):
        engine_acceptance(f"vllm-metrics:{f}")


def test_prometheus_parser_sums_label_sets():
    samples = parse_prometheus(VLLM_SCRAPE)
    assert samples[("vllm:spec_decode_num_drafts_total", None)] == 1000.0
    assert samples[("vllm:spec_decode_num_accepted_tokens_per_pos_total", "2")] == 420.0


def test_sglang_and_trtllm_mean_lengths(tmp_path):
    sg = tmp_path / "sglang.jsonl"
    sg.write_text("\n".join(json.dumps({"text": "x", "meta_info": {"completion_tokens": c, "spec_verify_ct": v}})
                            for c, v in ((300, 100), (200, 100))))
    acc = engine_acceptance(f"sglang:{sg}@4")
    assert acc.expected_tokens(4) == pytest.approx(2.5)
    trt = tmp_path / "stats.json"
    trt.write_text(json.dumps([{"iter": i, "specDecodingStats": {"acceptanceLength": L, "numDraftTokens": 3 * n,
                                                                 "numRequestsWithDraftTokens": n}}
                               for i, (L, n) in enumerate(((2.0, 10), (3.0, 30)))]))
    acc = engine_acceptance(f"trtllm:{trt}")
    assert acc.expected_tokens(3) == pytest.approx(2.75)  # (2 x 10 + 3 x 30) / 40 at k = 90 / 40 -> 3 (rounded)
    assert engine_acceptance("accept-length:3.2@4").expected_tokens(4) == pytest.approx(3.2)


@pytest.mark.parametrize(("spec", "fragment"), [
    ("sglang:{f}", "@4"),
    ("accept-length:7@4", "[1, 5]"),
    ("accept-length:x@4", "not a number"),
    ("trtllm:{f}", "acceptanceLength"),
])
def test_engine_acceptance_errors(tmp_path, spec, fragment):
    f = tmp_path / "empty.json"
    f.write_text("[]")
    with pytest.raises(SpecsimError, match=None) as e:
        engine_acceptance(spec.format(f=f))
    assert fragment in str(e.value)


# --- plot ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["speedup", *H100, "--batch", "1..64:x2", "--context", "128"],
    ["best-k", *H100, "--batch", "1..64:x4", "--context", "128,4096"],
    ["tpot", *H100, "--rate", "10,30", "--requests", "200", "--policy", "off,fixed:2"],
    ["roofline", "--hardware", "h100-sxm"],
])
def test_plot_commands_write_png_and_svg(tmp_path, args):
    png, svg = tmp_path / "fig.png", tmp_path / "fig.svg"
    r = run("plot", *args, "--out", str(png), "--out", str(svg))
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"<svg" in svg.read_bytes()[:400]


def test_plot_acceptance_from_a_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps({"eagle": [3, 2, 1, 1, 5, 4, 3, 2, 1, 1, 2, 1]}) for _ in range(3)))
    out = tmp_path / "acc.png"
    r = run("plot", "acceptance", "--trace", str(trace), "--k", "3", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one_line_error(run("plot", "acceptance", "--trace", str(trace), "--k", "5", "--out", str(out)), "up to 4")


def test_plot_bad_suffix_leaves_nothing(tmp_path):
    out = tmp_path / "fig.jpeg"
    one_line_error(run("plot", "best-k", *H100, "--batch", "1,2", "--context", "128", "--out", str(out)), ".png")
    assert not out.exists()
