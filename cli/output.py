"""How the CLI answers: one-line errors and exit codes (never a traceback), progress for a terminal or a log,
notes on stderr, and figures and text written all or nothing after every output path was checked."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from simulator import SpecsimError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from scenarios.setup import Setup

FIGURES = (".png", ".svg", ".pdf")


class OneLineErrors(click.Group):
    """Every usage error and every SpecsimError becomes one line on stderr and exit code 2 (no usage dump, no
    traceback); Ctrl-C exits 130. A setup's notes (`say_notes`) wait until the command shows something or ends
    well: a refusal is its one line alone."""

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        extra.pop("standalone_mode", None)
        PENDING.clear()
        try:
            rv = super().main(args=args, prog_name=prog_name or "specsim", standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            flush_notes()
            sys.exit(e.exit_code)
        except (click.Abort, KeyboardInterrupt):
            PENDING.clear()
            click.echo("specsim: interrupted", err=True)
            sys.exit(130)
        except (click.ClickException, SpecsimError) as e:
            PENDING.clear()
            message = e.format_message() if isinstance(e, click.ClickException) else str(e)
            if message.startswith(("No such command", "Missing option", "Missing argument", "Got unexpected")):
                message += " (see specsim --help, and the command's own --help)"
            click.echo(f"specsim: error: {' '.join(message.split())}", err=True)
            sys.exit(2)
        except ModuleNotFoundError as e:  # a package this command needs (torch for a device, simpy for serving)
            if (e.name or "").split(".")[0] in OWN_PACKAGES:
                raise  # a broken checkout, not a missing install
            package = INSTALL_NAMES.get(e.name or "", e.name)
            click.echo(f"specsim: error: this command needs {e.name!r}, which is not installed here: "
                       f"pip install {package} (or pip install -e . from the repository)", err=True)
            sys.exit(2)
        flush_notes()
        sys.exit(rv if isinstance(rv, int) else 0)


OWN_PACKAGES = {"simulator", "calibrate", "scenarios", "plots", "cli", "specsim"}  # never a missing install
# The distributions that install a missing module, where the names differ.
INSTALL_NAMES = {"pynvml": "nvidia-ml-py", "torch": "'torch>=2.3'", "ray": "'ray[default]'"}


# -- progress, notes and outputs -------------------------------------------------------------------------------------

class LogBar:
    """Progress for a log: a line when a phase starts, then at each tenth of the way but at most every 5 s (and at
    least every 30 s while it runs), and when it ends, each with the elapsed time and an estimate of what is left."""

    def __init__(self, label: str, total: int, echo: Callable[[str], Any] | None = None) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self.echo = echo or (lambda line: click.echo(line, err=True))
        self.t0 = self.last_t = time.monotonic()
        self.last_tenth = 0
        self.echo(f"{label}: 0/{self.total}")

    def update(self, n: int) -> None:
        self.done += n
        tenth, now = 10 * self.done // self.total, time.monotonic()
        if self.done >= self.total or (tenth > self.last_tenth and now - self.last_t >= 5) or now - self.last_t > 30:
            self.last_tenth, self.last_t = tenth, now
            elapsed = now - self.t0
            left = "" if self.done >= self.total or not self.done else \
                f", ~{elapsed * (self.total - self.done) / self.done:.0f} s left"
            self.echo(f"{self.label}: {self.done}/{self.total} ({100 * self.done // self.total} %, {elapsed:.0f} s"
                      f"{left})")


@contextlib.contextmanager
def progress(label: str, total: int) -> Iterator[Any]:
    """A bar on an interactive stderr, progress lines in a log."""
    flush_notes()
    if sys.stderr.isatty():
        with click.progressbar(length=total, label=f"{label:34s}", file=sys.stderr, show_eta=True,
                               show_pos=True) as bar:
            yield bar
    else:
        yield LogBar(label, total)


PENDING: list[str] = []  # a setup's notes not yet shown (`say_notes`)


def flush_notes() -> None:
    """The setup's notes, shown now (before a result, a progress bar, another note, or at a good end)."""
    for note in PENDING:
        click.echo(note, err=True)
    PENDING.clear()


def say(*lines: str) -> None:
    """Notes for the user, on stderr (stdout stays the command's result)."""
    flush_notes()
    for line in lines:
        click.echo(line, err=True)


def note(*lines: str) -> None:
    """Notes shown once the command shows anything else or ends well (a refusal before then is its one line)."""
    PENDING.extend(lines)


def say_notes(setup: Setup) -> Setup:
    """The setup's notes, shown once the command shows anything else or ends well (`OneLineErrors`): a command
    refused after its setup resolved says its one line alone."""
    PENDING.extend(setup.notes)
    return setup


def check_figures(paths: tuple[Path, ...] | list[Path]) -> list[Path]:
    from scenarios.files import check_outputs

    return check_outputs(paths, "figure", FIGURES)


def write_figures(figs: dict[Path, Figure]) -> None:
    """Render every figure first, then write them all or none."""
    from plots.render import render
    from scenarios.files import write_all

    flush_notes()
    data = {path: render(fig, path.suffix.lstrip(".").lower()) for path, fig in figs.items()}
    for path in write_all(data):
        click.echo(f"plot written to {path}", err=True)


def check_out(path: Path | None) -> None:
    """An --out file, if given, checked before the command's work."""
    if path is not None:
        from scenarios.files import check_output

        check_output(path, "--out")


def invocation(default: str) -> tuple[str, dict[str, Any]]:
    """The command line as typed (for the profile's record) and the current command's options, paths as text."""
    import shlex

    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else default
    params = click.get_current_context().params.items()
    return command, {k: str(v) if isinstance(v, Path) else v for k, v in params}


def echo_result(result: Any, meta: dict[str, Any], text: str, as_json: bool, as_csv: bool) -> None:
    """A sweep's result as JSON, CSV or the text table."""
    import json

    from simulator.report import result_to_csv, result_to_dict

    flush_notes()
    if as_json:
        click.echo(json.dumps(result_to_dict(result, meta), indent=1))
    else:
        click.echo(result_to_csv(result) if as_csv else text, nl=False)


def echo_or_write(path: Path | None, text: str, what: str) -> None:
    flush_notes()
    if path is None:
        click.echo(text, nl=False)
    else:
        from scenarios.files import atomic_write_text

        atomic_write_text(path, text)
        click.echo(f"{what} written to {path}", err=True)
