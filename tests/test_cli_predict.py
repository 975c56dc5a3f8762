"""The predict command through click: output, JSON schema, and one-line errors with exit code 2."""

import json

import pytest
from conftest import one_line_error, run


def test_essay_example_printed():
    r = run("predict", "--alpha", "0.8", "--k", "4", "--c", "0.05")
    assert r.exit_code == 0, r.output
    line = next(line for line in r.output.splitlines() if line.split()[0] == "4")
    assert line.split() == ["4", "3.36", "0.36", "2.80"]


def test_formula_json_schema_and_optimal_k():
    r = run("predict", "--alpha", "0.8", "--k", "1..8", "--c", "0.05", "--json")
    data = json.loads(r.stdout)
    assert {"rows", "best", "disable_above_batch"} <= set(data)
    row = data["rows"][0]
    assert {"batch", "k", "tree", "context", "tokens_per_pass", "step_time_s", "baseline_time_s", "speedup", "bound",
            "fits"} <= set(row)
    best = max(data["rows"], key=lambda r: r["speedup"])
    assert data["best"][0]["k"] == best["k"] and data["best"][0]["batch"] == 1


def test_hardware_mode_json_csv_and_plot(tmp_path):
    args = ["predict", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
            "--acceptance", "iid:0.5", "--batch", "1..256", "--k", "0..4", "--context", "128"]
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert len(data["rows"]) == 256 * 5
    assert isinstance(data["disable_above_batch"], int) and 1 < data["disable_above_batch"] < 256
    r = run(*args, "--csv")
    assert r.output.splitlines()[0].startswith("batch,k,tree,context,tokens_per_pass")
    png = tmp_path / "s.png"
    r = run(*args, "--plot", str(png))
    assert r.exit_code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    assert "condensed" in r.output and "disable speculation above batch" in r.output


def test_plot_where_nothing_fits(tmp_path):
    """A context where not even plain decoding at batch 1 fits gets a panel that says so and how to fix it (the plot
    was a matplotlib traceback, with every context unfit and with one)."""
    args = ["predict", "--hardware", "l4", "--target", "llama-3.1-8b", "--draft", "eagle3", "--acceptance", "iid:0.7",
            "--batch", "1..16", "--k", "1..3"]
    for contexts in ("65536", "1024,65536"):
        png = tmp_path / f"{contexts}.png"
        r = run(*args, "--context", contexts, "--plot", str(png))
        assert r.exit_code == 0, r.output
        assert png.read_bytes()[:4] == b"\x89PNG" and "nothing fits" in r.output and "--tp N" in r.output


def test_default_draft_lengths_within_medusa_heads():
    """predict's default --k 0..8 on a 4-head Medusa prices k 0..4 and says why (it was an error with the defaults);
    a --k the user gave beyond the heads is refused in one line that names the limit."""
    args = ["predict", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "medusa:4", "--acceptance",
            "iid:0.7", "--batch", "1,8"]
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    assert "fills at most 4 positions" in r.stderr
    assert sorted({row["k"] for row in json.loads(r.stdout)["rows"]}) == [0, 1, 2, 3, 4]
    one_line_error(run(*args, "--k", "0..6"), "4 heads", "--k 4 or less")


def test_trees_in_both_modes():
    r = run("predict", "--acceptance", "ranks:0.6,0.2,0.1", "--k", "1..4", "--c", "0.05", "--tree", "4,2,2,1",
            "--tree", "2,2", "--tree-budget", "16")
    assert r.exit_code == 0, r.output
    assert "tree 4,2,2,1" in r.output and "budget16" in r.output
    r = run("predict", "--hardware", "a100-80gb-sxm", "--acceptance", "ranks:0.6,0.2,0.1", "--batch", "1..8",
            "--tree", "2,2,1", "--json")
    assert r.exit_code == 0, r.output
    assert any(row["tree"] == "2,2,1" for row in json.loads(r.stdout)["rows"])


@pytest.mark.parametrize("args, message", [
    (["--alpha", "1.2", "--c", "0.1"], "--alpha"),
    (["--alpha", "0.8", "--k", "8..1", "--c", "0.1"], "backwards"),
    (["--alpha", "0.8", "--k", "a..b", "--c", "0.1"], "not an integer"),
    (["--alpha", "0.8", "--hardware", "h100-sxm", "--batch", "0"], ">= 1"),
    (["--alpha", "0.8", "--k", "-1", "--c", "0.1"], ">= 0"),
    (["--alpha", "0.8", "--hardware", "h100"], "did you mean h100-sxm"),
    (["--alpha", "0.8", "--hardware", "h100-sxm", "--target", "lama-3.1-8b"], "did you mean llama-3.1-8b"),
    (["--alpha", "0.8", "--c", "0.1", "--tree", "4,x"], "branching"),
    (["--alpha", "0.8", "--c", "0.1", "--tree", "4,2"], "ranks:"),
    (["--acceptance", "iid:0.8@context:512=1,4096=0.8", "--hardware", "l40s", "--tree", "2,2,1"],
     "iid:0.8@context:512=1,4096=0.8 has none"),  # the user's spec, not the model at one context (iid:0.775714)
    (["--acceptance", "beta:1", "--c", "0.1"], "expected 2 values"),
    (["--c", "0.1"], "--alpha"),
    (["--alpha", "0.8"], "no calibration profile"),
    (["--alpha", "0.8", "--hardware", "l4", "--profile", "x.json"], "not both"),
    (["--alpha", "0.8", "--hardware", "a100-80gb-sxm", "--dtype", "fp8"], "no fp8 compute"),  # was a traceback
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    r = run("predict", *args)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.output


def test_config_json_missing_fields(tmp_path):
    f = tmp_path / "config.json"
    f.write_text('{"hidden_size": 64}')
    r = run("predict", "--alpha", "0.7", "--hardware", "l4", "--target", str(f))
    assert r.exit_code == 2 and "lacks" in r.output and len(r.output.strip().splitlines()) == 1



