"""The commands the README and docs/ show print what the pages say (`benchmarks/doc_commands.py` runs them all, the
machine-dependent ones too; here the fast ones whose output is the same on every machine, in-process)."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest
from conftest import run

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("doc_commands", ROOT / "benchmarks" / "doc_commands.py")
doc = importlib.util.module_from_spec(_spec)
sys.modules["doc_commands"] = doc  # dataclasses look their module up there
_spec.loader.exec_module(doc)

# Seconds each on this machine; `benchmarks/doc_commands.py` checks them (the fit of a trace, a plan's searches and
# a 4,000-request sweep of eleven rates).
SLOW = ("specsim acceptance fit", "specsim plan", "specsim fleet", "specsim plot tpot", "--requests 4000",
        "specsim report")
EXACT = [c for page in doc.PAGES for c in doc.parse(page)
         if c.deterministic and not any(s in c.command for s in SLOW)]


def test_the_pages_show_commands_that_are_checked():
    readme = [c for c in EXACT if c.page == "README.md"]
    assert sum(bool(c.expected) for c in readme) >= 4


@pytest.mark.parametrize("c", EXACT, ids=lambda c: f"{c.page}:{c.line}")
def test_a_shown_command_prints_what_its_page_shows(c, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = [a.replace("out/", f"{tmp_path}/") for a in shlex.split(c.command)[1:]]
    r = run(*args)
    assert r.exit_code == 0, r.output
    if c.expected is not None:
        assert doc.matches(c.expected, r.stdout) is None, r.stdout


PAGE = """intro
```
$ specsim predict --alpha 0.8 \\
      --k 4
line one
...
line three
$ specsim calibrate --quick   # a comment
profile written
```
```bash
pip install -e . && specsim calibrate --quick && specsim predict --batch 1..4
# a comment line
```
"""


def test_the_parser_reads_commands_outputs_continuations_and_chains():
    found = doc.parse("page.md", PAGE)
    assert [c.command for c in found] == ["specsim predict --alpha 0.8 --k 4", "specsim calibrate --quick",
                                          "specsim calibrate --quick", "specsim predict --batch 1..4"]
    assert found[0].expected == ("line one", "...", "line three") and found[0].line == 3
    assert found[1].expected == ("profile written",) and found[2].expected is None
    assert [c.deterministic for c in found] == [True, False, False, False]


def test_a_changed_line_is_caught_and_an_elision_is_not_a_difference():
    shown = ("a", "...", "c")
    assert doc.matches(shown, "a\nb\nc\n") is None
    assert doc.matches(shown, "a\nb\nC\n") == "c"
    assert doc.matches(("a", "b"), "a\nb\nextra\n") == "2 lines shown, 3 printed"
    assert doc.matches(("a", "b"), "a\nB\n") == "b"


def test_every_command_and_synopsis_in_every_page_names_options_that_exist():
    found = [(page, n, cmd) for page in doc.PAGES for n, cmd in
             [(c.line, c.command) for c in doc.parse(page) if c.command.startswith("specsim ")] + doc.inline(page)]
    assert len({page for page, _, _ in found}) >= 8
    assert [(page, n, doc.flag_drift(cmd)) for page, n, cmd in found if doc.flag_drift(cmd)] == []


def test_drift_in_a_subcommand_or_an_option_is_caught():
    assert doc.flag_drift("specsim predict --alpha 0.8 --k 4 --c 0.05") is None
    assert doc.flag_drift("specsim plot speedup\\|best-k --out F.png") is None
    assert doc.flag_drift("specsim predict --alpah 0.8") == "specsim predict takes no option --alpah"
    assert doc.flag_drift("specsim plot speeedup --out f.png") == "specsim plot has no command 'speeedup'"
    assert doc.flag_drift("specsim acceptance fit SOURCE [--out F.json]") is None
    text = "```text\nspecsim predict --hardware h100-sxm \\\n    --alpha 0.7\n```\nsee `specsim policy --tolerance 2`\n"
    (c,) = doc.parse("page.md", text)
    assert c.command == "specsim predict --hardware h100-sxm --alpha 0.7" and c.expected is None and c.deterministic
    assert doc.inline("page.md", text) == [(5, "specsim policy --tolerance 2")]


def test_ci_runs_exactly_the_readmes_test_command():
    """What CI runs is what a newcomer runs: the README's second command, verbatim, as `.ci/run`'s last line, and its
    extras hold every package a test imports (no extra that CI installs and the README does not)."""
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```bash\n")[1:3]]
    test_command = blocks[1]
    assert "python -m pytest" in test_command
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert ci[-1].strip() == test_command
    assert not any("pip install" in line for line in ci[:-1] if "--upgrade pip" not in line)
