"""The CLI as a whole: help for every command, torch kept out of the model-only commands, every output path checked
before the work starts and written all or nothing, and the profile defaults every command shares."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from conftest import one_line_error, run, save_tiny

from scenarios.profile import save_profile
from specsim import cli

H100 = ["--hardware", "h100-sxm", "--acceptance", "iid:0.7"]




def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + (name,))


@pytest.mark.parametrize("path", [p for p, _ in _commands(cli)], ids=" ".join)
def test_help_of_every_command_and_subcommand(path):
    r = run(*path, "--help")
    assert r.exit_code == 0 and r.output.startswith(f"Usage: specsim {' '.join(path)}")
    command = dict(_commands(cli))[path]
    assert command.help, f"{' '.join(path)} has no docstring"
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in ("help",):
            assert param.help, f"{' '.join(path)} {param.opts[0]} has no help text"


def _modules_after(args: list[str], env: dict | None = None) -> set[str]:
    code = (f"import sys, specsim\nsys.argv = ['specsim'] + {args!r}\ntry:\n    specsim.main()\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('imported:', *(m for m in ('torch', 'matplotlib', 'pynvml') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1].split()
    assert last[0] == "imported:", r.stdout
    return set(last[1:])


@pytest.mark.parametrize("args", [
    ["predict", "--alpha", "0.8", "--k", "1..8", "--c", "0.05"],
    ["predict", *H100, "--batch", "1..64"],
    ["simulate", *H100, "--rate", "10", "--requests", "50", "--policy", "off,fixed:2"],
    ["policy", *H100, "--context", "128"],
], ids=["closed form", "preset", "simulate", "policy"])
def test_model_only_commands_never_import_torch_or_matplotlib(args):
    assert _modules_after(args) == set()


def test_predict_from_a_profile_never_imports_torch(tiny_profile, tmp_path):
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    path = tmp_path / "p.json"
    save_tiny(tiny_profile, path)
    assert "torch" not in _modules_after(["predict", "--profile", str(path), "--alpha", "0.7", "--batch", "1,2"], env)


# -- outputs: checked before the work, written all or nothing -------------------------------------------------------

@pytest.mark.parametrize("bad, fragment", [
    ("fig.jpeg", "ending in .png, .svg, .pdf"),
    ("a-file/fig.png", "is a file, not a folder"),
    ("a-folder", "is a directory"),
])
def test_bad_figure_paths_are_refused_before_any_work(tmp_path, bad, fragment, monkeypatch):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder").mkdir()
    ok = tmp_path / "ok.png"

    def no_work(*args, **kwargs):
        raise AssertionError("the sweep ran before the outputs were checked")

    monkeypatch.setattr("simulator.sweep.sweep", no_work)
    one_line_error(run("plot", "best-k", *H100, "--batch", "1,2", "--context", "128", "--out", str(ok),
                       "--out", str(tmp_path / bad)), fragment)
    assert not ok.exists() and not list(tmp_path.glob(".*.tmp"))


def test_the_same_figure_path_twice_is_refused(tmp_path):
    out = str(tmp_path / "f.png")
    one_line_error(run("plot", "speedup", *H100, "--batch", "1,2", "--out", out, "--out", out), "given twice")


def test_all_figures_or_none(tmp_path, monkeypatch):
    """A write that fails half way (the disk fills) leaves no new file and no temporary file behind."""
    import os

    real = os.replace
    calls = []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real(src, dst)

    monkeypatch.setattr("scenarios.files.os.replace", failing)
    a, b = tmp_path / "a.png", tmp_path / "b.svg"
    r = run("plot", "speedup", *H100, "--batch", "1,2", "--out", str(a), "--out", str(b))
    one_line_error(r, "No space left")
    assert not b.exists() and not list(tmp_path.glob(".*.tmp"))


def test_calibrate_checks_its_output_before_measuring(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("x")

    def no_work(*args, **kwargs):
        raise AssertionError("calibration ran before the output was checked")

    monkeypatch.setattr("calibrate.calibration.calibrate", no_work)
    one_line_error(run("calibrate", "--quick", "--out", str(tmp_path / "a-file" / "p.json")), "not a folder")


def test_calibrate_refuses_a_pair_the_device_cannot_hold(tmp_path, monkeypatch):
    """A 70B target on a host with 20 GiB available is refused before any weights are built (it built random
    weights for minutes, then the kernel would kill it); the built-in pair still calibrates there."""
    def no_work(*args, **kwargs):
        raise AssertionError("calibration started")

    monkeypatch.setattr("calibrate.calibration.calibrate", no_work)
    monkeypatch.setattr("engine.device.available_bytes", lambda device: 20 * 2**30)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    one_line_error(run("calibrate", "--quick", "--target", "llama-3.1-70b"), "llama-3.1-70b", "GiB",
                   "20.0 GiB is free", "--hardware")
    r = run("calibrate", "--quick", "--out", str(tmp_path / "p.json"))  # the built-in pair passes the check
    assert isinstance(r.exception, AssertionError) and "calibration started" in str(r.exception)


def test_policy_and_predict_plot_check_outputs_first(tmp_path):
    (tmp_path / "a-file").write_text("x")
    one_line_error(run("policy", *H100, "--out", str(tmp_path / "a-file" / "p.json")), "not a folder")
    one_line_error(run("predict", *H100, "--plot", str(tmp_path / "x.gif")), ".png")
    one_line_error(run("simulate", *H100, "--requests", "20", "--plot", str(tmp_path / "x.bmp")), ".png")


# -- profile defaults ------------------------------------------------------------------------------------------------

def test_no_profile_message_suggests_what_each_command_takes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for command in (["predict", "--alpha", "0.7"], ["simulate"], ["policy"], ["plot", "roofline", "--out", "r.png"]):
        one_line_error(run(*command), "no calibration profile", "specsim calibrate --quick", "--hardware")


def test_log_progress_lines(monkeypatch):
    from cli.output import LogBar

    lines = []
    bar = LogBar("phase", 4, echo=lines.append)
    for _ in range(4):
        bar.update(1)
    assert lines[0] == "phase: 0/4" and lines[-1].startswith("phase: 4/4 (100 %")


def test_json_of_predict_says_which_engine_it_describes():
    data = json.loads(run("predict", *H100, "--batch", "1,2", "--k", "0,1", "--json").stdout)
    assert data["engine"].startswith("graph") and data["trusted"] is None and data["mode"] == "hardware"


def test_policy_json_has_a_context_axis_and_vllm_refuses_several_contexts():
    """Acceptance that decays with context: the table at a long context speculates less than at a short one;
    vLLM's format has no context axis, so several contexts are refused with one line."""
    spec = "iid:0.8@context:1024=1,8192=0.6"
    r = run("policy", "--hardware", "h100-sxm", "--acceptance", spec, "--format", "json", "--context", "512,8192",
            "--batch", "1..40")
    assert r.exit_code == 0, r.output
    tables = json.loads(r.stdout)["by_context"]
    assert [t["context"] for t in tables] == [512, 8192]
    k_at = [t["num_speculative_tokens_per_batch_size"][0][2] for t in tables]
    assert k_at[0] > k_at[1]
    one_line_error(run("policy", "--hardware", "h100-sxm", "--acceptance", spec, "--context", "512,8192"),
                   "no context axis")


def test_plot_acceptance_against_context_and_measured_at_context(builtin_profile, tmp_path):
    """`plot acceptance --context` draws the profile's measurement; `predict --acceptance measured@context` uses it;
    a profile without the measurement gets one line saying how to get it."""
    import dataclasses

    from scenarios.profile import MeasuredAcceptance

    path = tmp_path / "p.json"
    save_profile(builtin_profile, path)
    r = run("plot", "acceptance", "--context", "--profile", str(path), "--out", str(tmp_path / "c.png"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "c.png").stat().st_size > 10_000
    r = run("predict", "--profile", str(path), "--acceptance", "measured@context", "--batch", "1", "--k", "0..3",
            "--context", "16,160")
    assert r.exit_code == 0 and "@context:0=" in r.output, r.output
    raw = {k: v for k, v in builtin_profile.acceptance.raw.items() if k != "by_context"}
    older = dataclasses.replace(builtin_profile, acceptance=MeasuredAcceptance.from_dict(raw))
    save_profile(older, path)
    one_line_error(run("plot", "acceptance", "--context", "--profile", str(path), "--out", str(tmp_path / "d.png")),
                   "did not measure acceptance against context")


def test_a_memory_limit_is_not_called_the_end_of_speculations_gain():
    """At 8k context the 8B target's cache fills an H100 from batch 64: speculation still pays at the largest batch
    that fits (32), so the table must not tell the user to switch it off above 32; where the draft's own weights and
    cache stop fitting first (iid 0.7, batch 40 on), the switch-off is said to be a memory limit."""
    pair = ["--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--k", "0..4", "--context", "8192"]
    r = run("predict", "--hardware", "h100-sxm", "--acceptance", "iid:0.6", "--batch", "1..256:x2", *pair)
    assert r.exit_code == 0, r.output
    assert "speculation still pays at the largest batch that fits (32)" in r.output
    assert "disable speculation" not in r.output
    r = run("predict", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--batch", "1..64", *pair)
    assert r.exit_code == 0, r.output
    line = next(s for s in r.output.splitlines() if "disable speculation above batch" in s)
    assert "draft's weights and KV cache no longer fit" in line


def test_an_output_on_a_pseudo_file_system_is_refused_before_the_work_in_the_users_terms():
    """/proc grants write permission to root but creates no file: the output is tried before any work, and the
    message names the user's path, never a temporary file of ours."""
    for args in (["plot", "speedup", *H100, "--out", "/proc/x.png"], ["policy", *H100, "--out", "/proc/x.json"],
                 ["calibrate", "--quick", "--out", "/proc/p.json"]):
        r = run(*args)
        one_line_error(r, "/proc")
        assert ".tmp" not in r.output


# -- say it, or refuse it -------------------------------------------------------------------------------------------

def test_a_profile_and_a_preset_model_are_not_mixed_silently(tiny_profile, tmp_path):
    """One model named beside a profile would be paired with the profile's other one (an 8B target drafted by the
    built-in 0.3 M draft at its measured acceptance): refused. Both named: priced from the profile's device rates,
    said so, and the profile's measured acceptance is not lent to them."""
    path = save_tiny(tiny_profile, tmp_path / "p.json")
    one_line_error(run("predict", "--profile", str(path), "--target", "llama-3.1-8b", "--acceptance", "iid:0.7"),
                   "give both --target and --draft")
    both = ["predict", "--profile", str(path), "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--batch", "1,2"]
    r = run(*both, "--acceptance", "iid:0.7")
    assert r.exit_code == 0, r.output
    assert "pricing llama-3.1-8b drafted by llama-3.2-1b from the fitted device rates" in r.stderr
    one_line_error(run(*both, "--acceptance", "measured"), "give --acceptance for llama-3.1-8b")


def test_the_closed_form_without_a_cost_ratio_says_what_it_prices(tiny_profile, tmp_path, monkeypatch):
    import dataclasses

    from scenarios.profile import Trust, save_profile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    save_profile(dataclasses.replace(tiny_profile.profile, trust=Trust()), None)
    r = run("predict", "--alpha", "0.8", "--k", "4", "--batch", "1,2")
    assert r.exit_code == 0, r.output
    assert "--alpha without --c: pricing the passes of" in r.stderr and "give --c RATIO" in r.stderr


def test_acceptance_past_what_its_source_measured_is_marked():
    """An engine's mean acceptance length at k = 2 says nothing measured about k = 3 or 4: those cells carry a star,
    the table says why, and the JSON rows say extrapolated."""
    args = ["predict", "--hardware", "h100-sxm", "--acceptance", "accept-length:2.5@2", "--k", "0..4", "--batch", "1,2"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if line.strip().startswith("1 "))
    cells = row.split()
    assert not cells[4].endswith("*") and cells[5].endswith("*") and cells[6].endswith("*")
    assert "more drafts per step than the acceptance's source measured" in r.stdout
    rows = json.loads(run(*args, "--json").stdout)["rows"]
    assert {(x["k"], x["extrapolated"]) for x in rows} == {(0, False), (1, False), (2, False), (3, True), (4, True)}


def test_a_policy_says_when_k_0_is_a_memory_limit():
    """At 8k context the draft's cache stops fitting beside the 8B target's from batch 40: the table's k = 0 there
    is said to be a memory limit (stderr, and `why` in the JSON), not speculation that stopped paying."""
    args = ["policy", *H100, "--context", "8192", "--batch", "1..52"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [[1, 39, 3], [40, 52, 0]]
    assert "batch 40..52 at context 8192: k = 0 because the draft's weights" in r.stderr
    ranges = json.loads(run(*args, "--format", "json").stdout)["ranges"]
    assert ranges[-1]["why"].startswith("the draft's weights") and "fit" not in ranges[0]["why"]  # k = 3 by speed


def test_a_missing_package_is_one_line_that_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails as if it were not installed
    monkeypatch.delitem(sys.modules, "calibrate.calibration", raising=False)
    one_line_error(run("calibrate", "--quick", "--out", str(tmp_path / "p.json")), "needs 'torch'",
                   "pip install 'torch>=2.3'")
    assert not (tmp_path / "p.json").exists()
