"""Run every command the README and docs/ show, as a newcomer would, and check what they print.

    python benchmarks/doc_commands.py            # the commands whose output does not depend on the machine
    python benchmarks/doc_commands.py --all      # every command, in a fresh clone with an empty HOME, in page order
    python benchmarks/doc_commands.py --all --page docs/bench.md   # one page's (--page repeats)

A page shows a command as a ``$ specsim ...`` line in a code block, with what it prints below it (a line ``...``
elides: the shown lines must then appear in that order), as a line of a ``bash`` block, or as a ``specsim ...`` line
of any other code block (no output shown). The output of `specsim` commands that read no calibration of this machine
(presets, the closed form, traces and profiles shipped in scenarios/samples) does not depend on the machine: it is
compared with the page, and one that shows no output must still exit 0. Every other command (calibrate, validate,
exactness, anything that reads this machine's profile, the benchmarks) is only run with `--all`, in page order after
the ones before it on its page, and must exit 0. Every page's every `specsim` command, inline ones in the prose
included, is also checked for drift without running it: its subcommand must exist and each of its options must be
one that subcommand takes. `pip install` steps and the test suite itself are skipped (the environment running this
is the installed one). What a command writes (`--out`, `--plot`) goes to a temporary folder. `--all` clones the
repository into a temporary folder first, so nothing beside it is seen.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
MACHINE_SUBCOMMANDS = {"calibrate", "validate", "exactness"}
PRESET_FLAGS = ("--hardware", "--alpha", "--c ", "--profile scenarios/samples/")
INLINE = re.compile(r"`(specsim [^`]+)`")


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int  # 1-based, where the command starts
    command: str  # one shell line (continuations joined)
    expected: tuple[str, ...] | None  # what the page shows it printing (None: nothing shown)

    @property
    def deterministic(self) -> bool:
        """Whether its output is the same on every machine: a specsim command that reads no calibration."""
        words = self.command.split()
        if not words or words[0] != "specsim" or len(words) < 2:
            return False
        if words[1] in MACHINE_SUBCOMMANDS:
            return False
        if words[1] == "acceptance":
            return any(w.startswith("trace:") for w in words)
        if words[1] == "plot" and len(words) > 2 and words[2] == "acceptance":
            return "--trace" in words
        return any(f in self.command + " " for f in PRESET_FLAGS)


def _join(lines: list[str], i: int) -> tuple[str, int]:
    """The shell line starting at lines[i] with its backslash continuations joined; the index after it."""
    parts = [lines[i].rstrip()]
    while parts[-1].endswith("\\") and i + 1 < len(lines):
        parts[-1] = parts[-1][:-1].rstrip()
        i += 1
        parts.append(lines[i].strip())
    return " ".join(parts), i + 1


def _steps(command: str) -> list[str]:
    """A shown line split at `&&`, without installs, the test suite and trailing comments."""
    out = []
    for step in re.split(r"\s+&&\s+", command.split("  #")[0].strip()):
        step = step.strip()
        if not step or step.startswith(("pip install", "python -m pytest")):
            continue
        out.append(step)
    return out


def parse(page: str, text: str | None = None) -> list[DocCommand]:
    """Every command `page` shows, in order."""
    lines = (text if text is not None else (ROOT / page).read_text()).split("\n")
    found: list[DocCommand] = []
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            i += 1
            continue
        bash = fence[3:].strip() in ("bash", "sh", "console")
        j = i + 1
        body_end = next((k for k in range(j, len(lines)) if lines[k].strip().startswith("```")), len(lines))
        while j < body_end:
            line = lines[j]
            if line.startswith("$ "):
                start = j + 1
                cmd, j = _join(lines, j)
                out_end = next((k for k in range(j, body_end) if lines[k].startswith("$ ")), body_end)
                shown = tuple(s.rstrip() for s in lines[j:out_end])
                for step in _steps(cmd[2:]):
                    found.append(DocCommand(page, start, step, shown or None))
                j = out_end
            elif (bash and line.strip() and not line.lstrip().startswith("#")) or line.startswith("specsim "):
                start = j + 1
                cmd, j = _join(lines, j)
                for step in _steps(cmd):
                    found.append(DocCommand(page, start, step, None))
            else:
                j += 1
        i = body_end + 1
    return found


def inline(page: str, text: str | None = None) -> list[tuple[int, str]]:
    """Every `specsim ...` the page's prose writes in backticks, with its line: synopses as much as commands."""
    lines = (text if text is not None else (ROOT / page).read_text()).split("\n")
    return [(n, m.group(1)) for n, line in enumerate(lines, 1) for m in INLINE.finditer(line)]


def flag_drift(command: str) -> str | None:
    """None when `command` names a specsim subcommand and only options it takes; else what is wrong. Placeholders
    (``A``, ``FILE``, ``…``) and alternatives written ``a|b`` are read as a synopsis writes them."""
    import click

    sys.path.insert(0, str(ROOT))
    from specsim import cli

    words = command.replace("\\|", "|").split()[1:]
    group: click.Command = cli
    path = ["specsim"]
    while isinstance(group, click.Group) and words and not words[0].startswith(("-", "[")):
        name = words[0].split("|")[0]
        sub = group.commands.get(name)
        if sub is None:
            return f"{' '.join(path)} has no command {name!r}"
        group, path, words = sub, [*path, name], words[1:]
    known = {o for p in group.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    for w in words:
        for part in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", w):
            if part not in known:
                return f"{' '.join(path)} takes no option {part}"
    return None


def matches(expected: tuple[str, ...], printed: str) -> str | None:
    """None when `printed` shows what the page does; else the first line that differs. A ``...`` line elides."""
    got = [s.rstrip() for s in printed.rstrip("\n").split("\n")]
    want = list(expected)
    while want and not want[-1].strip():
        want.pop()
    if any(s.strip() == "..." for s in want):
        k = 0
        for w in (s for s in want if s.strip() != "..."):
            while k < len(got) and got[k] != w:
                k += 1
            if k == len(got):
                return w
            k += 1
        return None
    for w, g in zip(want, got):
        if w != g:
            return w
    if len(want) != len(got):
        return f"{len(want)} lines shown, {len(got)} printed"
    return None


def run_one(c: DocCommand, cwd: Path, env: dict[str, str], timeout_s: float, figures: Path | None = None
            ) -> tuple[bool, str, float]:
    t0 = time.perf_counter()
    command = c.command if figures is None else re.sub(r"(--out\s+|--plot\s+)(?:out/)?([^\s/]\S*)",
                                                        lambda m: f"{m[1]}{figures}/{m[2]}", c.command)
    try:
        p = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"ran past {timeout_s:.0f} s", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]
        return False, f"exit {p.returncode}: {tail[0]}", wall
    if c.deterministic and c.expected is not None:
        differs = matches(c.expected, p.stdout)
        if differs is not None:
            return False, f"prints otherwise than the page, first at: {differs!r}", wall
    return True, "", wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every command, in a fresh clone with an empty HOME")
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="the longest one command may run")
    ap.add_argument("--list", action="store_true", help="only list the commands found")
    ap.add_argument("--page", action="append", metavar="PAGE", choices=PAGES,
                    help="only this page's commands (repeatable), e.g. docs/bench.md [default: every page]")
    a = ap.parse_args()
    pages = a.page or PAGES
    commands = [c for page in pages for c in parse(page)]
    if a.list:
        for c in commands:
            print(f"{c.page}:{c.line}  {'exact' if c.deterministic else 'runs '}  {c.command}")
        return 0
    drift = [(page, n, cmd, flag_drift(cmd)) for page in pages for n, cmd in
             [(c.line, c.command) for c in commands if c.page == page and c.command.startswith("specsim ")]
             + inline(page)]
    drifted = [(page, n, cmd, why) for page, n, cmd, why in drift if why]
    for page, n, cmd, why in drifted:
        print(f"FAIL {page}:{n}  {cmd[:70]}  -- {why}", flush=True)
    print(f"{len(drift) - len(drifted)} of {len(drift)} specsim commands and synopses in {len(pages)} pages name "
          "commands and options that exist")
    chosen = commands if a.all else [c for c in commands if c.deterministic]
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="specsim-docs-") as tmp:
        cwd = ROOT
        figures = Path(tmp) / "out"
        figures.mkdir()
        if a.all:
            cwd = Path(tmp) / "clone"
            subprocess.run(["git", "clone", "-q", str(ROOT), str(cwd)], check=True)
            env["HOME"] = str(Path(tmp) / "home")
            env.pop("XDG_CACHE_HOME", None)
        failed = 0
        for c in chosen:
            ok, why, wall = run_one(c, cwd, env, a.timeout_s, None if a.all else figures)
            failed += not ok
            mark = "ok  " if ok else "FAIL"
            print(f"{mark} {wall:7.1f} s  {c.page}:{c.line}  {shlex.split(c.command)[0]} ... "
                  f"{c.command[len(shlex.split(c.command)[0]) + 1:][:70]}{'  -- ' + why if why else ''}", flush=True)
    print(f"{len(chosen) - failed} passed, {failed} failed")
    return 1 if failed or drifted else 0


if __name__ == "__main__":
    sys.exit(main())
