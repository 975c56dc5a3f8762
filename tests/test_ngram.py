"""specsim's own n-gram lookup measured: the host cost's fit, the profile's lookup priced by every command, and
steps without a proposal priced as plain steps."""

import json

import numpy as np
import pytest
from conftest import one_line_error, run, save_tiny

from calibrate.ngram import fit_host, repeating
from simulator.drafts import HostCost


def test_the_host_fit_recovers_a_known_cost():
    truth = HostCost(3e-6, 12e-6, 40e-9)
    points = [{"batch": b, "context": c, "median_s": float(truth.at(b, c))} for b in (1, 4, 16, 64)
              for c in (128, 512, 2048)]
    got = fit_host(points)
    for b, c in ((2, 300), (64, 2048), (1, 128)):
        assert got.at(b, c) == pytest.approx(truth.at(b, c), rel=1e-3)
    assert min(got.fixed_s, got.per_sequence_s, got.per_context_token_s) >= 0


def test_a_repeating_prompt_repeats_its_first_half():
    p = list(range(10))
    assert repeating(p) == p + [10] + p[:5]


def test_the_profiles_lookup_is_what_predict_prices(builtin_profile, tmp_path):
    """`--draft ngram` on a profile of the built-in pair: the host cost its calibration fitted and the acceptance
    it measured (a share of steps with a proposal), not the vLLM preset's."""
    from scenarios.profile import save_profile

    path = save_profile(builtin_profile, tmp_path / "p.json")
    r = run("predict", "--profile", str(path), "--draft", "ngram", "--batch", "1,8", "--k", "0..3", "--context",
            "128", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{"):])
    assert out["draft"] == "ngram" and "@proposed:" in out["acceptance"]
    g = builtin_profile.acceptance.ngram
    host = builtin_profile.acceptance.ngram_host()
    assert host.per_sequence_s == g["host"]["per_sequence_s"]
    row = next(x for x in out["rows"] if x["batch"] == 8 and x["k"] == 3)
    assert row["draft_time_s"] == pytest.approx(float(host.at(8, 128)))
    assert row["tokens_per_pass"] < 1 + 3 * g["proposal_rate"] + 1e-9


def test_a_model_free_draft_on_a_tiny_profile_needs_a_proposal_rate(tiny_profile, tmp_path):
    path = save_tiny(tiny_profile, tmp_path / "t.json")
    r = run("predict", "--profile", str(path), "--draft", "ngram", "--acceptance", "iid:0.8", "--batch", "1",
            "--k", "0..2")
    one_line_error(r, "@proposed")
    r = run("predict", "--profile", str(path), "--draft", "ngram", "--acceptance", "iid:0.8@proposed:0.4",
            "--batch", "1,2", "--k", "0..2", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("{"):])["rows"]
    assert all(np.isfinite(x["speedup"]) for x in rows)
