"""The CLI's glue of `specsim validate --against` and `specsim calibrate --from bench:` (the work is in
calibrate/bench_validate.py): outputs checked first, the manifest's notes said (on stderr, and in --json as
``notes``), the report printed, the figure drawn and written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


def run_validate_against(path: Path, plot_dir: Path | None, as_json: bool, seed: int | None = None) -> dict[str, Any]:
    from calibrate.bench_validate import format_report, validate_against
    from scenarios.files import check_outputs

    figure = check_outputs([plot_dir / "validation-serving.png"], "figure", (".png",))[0] if plot_dir else None
    notes = manifest_notes(path)
    report = validate_against(path, seed)
    report["notes"] = notes
    if figure is not None:
        from plots.render import render
        from plots.serving import engine_stream_vs_simulated
        from scenarios.files import write_all

        fig = engine_stream_vs_simulated(report)
        fitted = ", ".join(f"{r['load']} {r['policy']}" for r in report["rows"] if r["fit"])
        e = report["median_abs_err"]
        fig.suptitle(f"{report['engine']}: its benchmark runs (points) against their simulation (lines), fitted on "
                     f"{fitted}; labels: simulated less measured; median |error| over the judged runs: throughput "
                     f"{100 * e['throughput']:.1f} %, TPOT p50 {100 * e['tpot_p50_s']:.1f} %", fontsize=9, wrap=True)
        write_all({figure: render(fig, "png")})
        click.echo(f"plot written to {figure}", err=True)
    click.echo(json.dumps(report, indent=1, default=float) if as_json else format_report(report))
    return report


def run_calibrate_bench(path: str, hardware: str | None, out: Path | None, as_json: bool, command: str,
                        options: dict[str, Any]) -> None:
    from calibrate.bench_validate import calibrate_bench

    notes = manifest_notes(path, fitting_all=True)

    def echo(text: str) -> None:
        if as_json:  # the profile's JSON with the notes beside it
            text = json.dumps({**json.loads(text), "notes": notes}, indent=1, default=float)
        click.echo(text)

    calibrate_bench(path, hardware, out, as_json, echo, command, options)


def manifest_notes(path: str | Path, fitting_all: bool = False) -> list[str]:
    """What the manifest changes in its files or contradicts (`scenarios.bench_files.Manifest.notes`), and with
    `fitting_all` that no run is marked fit = true (calibrate then fits every run; validate refuses such a
    manifest, having nothing left to judge); said on stderr once the command shows anything or ends well."""
    from cli.output import note
    from scenarios.bench_files import read_manifest

    manifest = read_manifest(path)
    notes = list(manifest.notes)
    if fitting_all and not manifest.fit_runs:
        spec = sum(r.speculative for r in manifest.runs)
        plain = len(manifest.runs) - spec
        notes.append(f"{manifest.path}: no run is marked fit = true, so every run is fitted ({plain} plain, {spec} "
                     "speculative) and none is judged; mark the runs to fit on with fit = true, and validate "
                     "--against judges the rest")
    note(*notes)
    return notes
