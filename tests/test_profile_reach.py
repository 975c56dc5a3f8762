"""What a profile can vouch for: predictions past the passes it measured are marked as acceptance extrapolation is
(the table, the JSON and CSV rows, policy's summary and JSON); "trusted" is never contradicted by the held-out worst
case; a best k that moves over differences below the profile's resolution reads as the near-tie it is."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

from conftest import run, save_tiny

from scenarios.profile import HeldoutErrors, Profile, Trust, assess_trust, load_profile, save_profile
from simulator.measured_range import MeasuredRange, measured_range
from simulator.report import near_ties
from simulator.sweep import SweepRow


def test_the_measured_range_is_the_calibrated_models_decoding_passes(tiny_profile):
    reach = measured_range(tiny_profile.profile.cost_model())
    assert reach == MeasuredRange(batch=2, rows=6, context=16)  # TINY_GRID: batches 1, 2; 1-3 new tokens; 8, 16
    assert reach.beyond(2, 3, 16) == ()
    assert reach.beyond(4, 1, 16) == ("batch",) and reach.beyond(2, 4, 16) == ("rows",)
    assert reach.beyond(256, 8, 1024) == ("batch", "rows", "context")
    assert measured_range(dataclasses.replace(tiny_profile.profile.cost_model(), measured={})) is None


def test_predict_past_the_profiles_passes_says_extrapolated(tiny_profile, tmp_path):
    path = str(save_tiny(tiny_profile, tmp_path / "p.json"))
    args = ["predict", "--profile", path, "--acceptance", "iid:0.7", "--k", "0..2", "--batch", "1,256",
            "--context", "16,1024"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert "^ past the passes the profile measured (batches up to 2, 6 rows a pass, contexts up to 16)" in r.stdout
    first = r.stdout.split("context 1024 tokens:")[0]
    batch1 = next(line for line in first.splitlines() if line.strip().startswith("1 "))
    assert "^" not in batch1  # batch 1, k <= 2 at context 16: measured
    rows = json.loads(run(*args, "--json").stdout)["rows"]
    far = next(x for x in rows if x["batch"] == 256 and x["context"] == 1024 and x["k"] == 2)
    assert far["extrapolated"] is True and far["extrapolated_in"] == ["batch", "rows", "context"]
    near = next(x for x in rows if x["batch"] == 1 and x["context"] == 16 and x["k"] == 2)
    assert near["extrapolated"] is False and near["extrapolated_in"] == []
    table = list(csv.DictReader(io.StringIO(run(*args, "--csv").stdout)))
    assert {r["extrapolated"] for r in table if r["batch"] == "256"} == {"True"}


def test_policy_past_the_profiles_passes_says_so(tiny_profile, tmp_path):
    path = str(save_tiny(tiny_profile, tmp_path / "p.json"))
    args = ["policy", "--profile", path, "--acceptance", "iid:0.7", "--k", "0..2", "--batch", "1..8",
            "--context", "16"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert "lies past what the profile measured (batches up to 2, 6 rows a pass" in r.stderr
    record = json.loads(run(*args, "--format", "json").stdout)
    assert record["measured_range"] == {"batch": 2, "rows": 6, "context": 16,
                                        "what": "the passes the profile measured"}
    last = record["ranges"][-1]
    assert last["batch_to"] == 8 and last["extrapolated"] and "batch" in last["extrapolated_in"]


def test_a_preset_is_not_marked_past_a_calibration():
    rows = json.loads(run("predict", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--k", "0..2",
                          "--batch", "1,256", "--json").stdout)["rows"]
    assert not any(x["extrapolated"] for x in rows)


def _heldout(worst: float) -> HeldoutErrors:
    points = ({"model": "t", "batch": 8, "new_tokens": 3, "context": 64, "rel_error": -worst},
              {"model": "t", "batch": 1, "new_tokens": 1, "context": 64, "rel_error": 0.01})
    return HeldoutErrors(14, 0.03, 0.12, worst, points)


def test_trusted_is_not_contradicted_by_the_held_out_worst_case():
    """Median 3 %, p90 12 %, but one held-out pass off by 31 %: not trusted, and the reason names that pass."""
    trust = assess_trust(_heldout(0.31), ())
    assert not trust.trusted
    assert trust.reasons == ("held-out pass error max 31.0 % > 25 % (t at batch 8, 3 new tokens, context 64: "
                             "-31 %)",)
    assert assess_trust(_heldout(0.2), ()).trusted


def test_a_profile_written_trusted_before_the_worst_case_check_reads_untrusted(tiny_profile, tmp_path):
    p: Profile = tiny_profile.profile
    fit = dataclasses.replace(p.fit, heldout=_heldout(0.4))
    path = save_profile(dataclasses.replace(p, fit=fit, trust=Trust()), tmp_path / "old.json")
    again = load_profile(path)
    assert not again.trust.trusted and "held-out pass error max 40.0 % > 25 %" in again.trust.reasons[-1]


def _row(k: int, speedup: float) -> SweepRow:
    return SweepRow(batch=4, k=k, tree=None, context=64, tokens_per_pass=1.0, step_time_s=1.0, baseline_time_s=1.0,
                    speedup=speedup, bound="memory", fits=True)


def test_a_best_k_within_the_resolution_of_others_reads_as_a_near_tie():
    rows = [_row(0, 1.0), _row(5, 1.80), _row(6, 1.81), _row(7, 1.82), _row(8, 1.83), _row(4, 1.70)]
    assert near_ties(rows, rows[4], 0.02) == " ~5-8"
    assert near_ties(rows, rows[4], 0.0) == ""
    assert near_ties(rows, rows[0], 0.02) == ""  # no speculation: nothing to tie
    assert near_ties([_row(8, 1.9), _row(5, 1.6)], _row(8, 1.9), 0.02) == ""  # the best stands alone
