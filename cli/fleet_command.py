"""`specsim fleet`: the fewest GPUs for a load among aggregated and disaggregated layouts (scenarios/fleet_layouts.py
does the search; this is its face)."""

from __future__ import annotations

import json

import click

import cli.options as opt
import cli.output as out
from scenarios.serving_scenario import ServingOptions


@click.command()
@opt.setup_options
@click.option("--load-rps", type=opt.Finite(0, 1e6, min_open=True), required=True,
              help="Load to carry (requests/s, the whole fleet).")
@click.option("--gpus", "max_gpus", type=click.IntRange(1, 4096), default=64, show_default=True,
              help="Largest engine or pool engine to consider, in GPUs.")
@click.option("--attainment", type=opt.Finite(0, 1, min_open=True), default=0.9, show_default=True,
              help="Share of requests that must meet the SLO.")
@opt.serving_options
@click.option("--json", "as_json", is_flag=True, help="Print the answers as JSON.")
def fleet(setup: opt.SetupOptions, serving: ServingOptions, load_rps: float, max_gpus: int, attainment: float,
          as_json: bool) -> None:
    """The fewest GPUs for a load and a TTFT + TPOT SLO: aggregated engines against disaggregated prefill and
    decode pools, each engine laid out by TP, EP and DP attention, for each policy (docs/moe.md).

    \b
    specsim fleet --hardware h200 --target deepseek-v3 --draft mtp --dtype fp8 --acceptance accept-length:2.5@3 \\
        --prompt-tokens 2000 --output-tokens 500 --slo-ttft-ms 2000 --slo-tpot-ms 50 --load-rps 20 \\
        --policy off,adaptive --requests 400 --gpus 32
    """
    from scenarios.fleet_layouts import plan_fleet, verdict

    if setup.tp > 1 or setup.ep > 1 or setup.dp > 1:
        raise click.UsageError("fleet chooses each engine's TP, EP and DP itself: drop --tp, --ep and --dp")
    if not setup.hardware:
        raise click.UsageError("fleet prices a preset's GPUs: give --hardware")
    s = setup.resolve()
    answers = plan_fleet(s, setup.hardware, serving, load_rps, max_gpus, attainment, out.progress)
    if as_json:
        click.echo(json.dumps([{"kind": a.kind, "policy": a.policy, "gpus": a.gpus, "layout": a.text,
                                "rate_per_engine_rps": list(a.rate_per_engine),
                                "ttft_p90_ms": a.metrics.ttft_s[1] * 1e3 if a.metrics else None,
                                "tpot_p90_ms": a.metrics.tpot_s[1] * 1e3 if a.metrics else None}
                               for a in answers], indent=1))
        return
    lines = [s.caption, f"{load_rps:g} req/s, SLO TTFT {serving.slo_ttft_s * 1e3:g} ms and TPOT "
             f"{serving.slo_tpot_s * 1e3:g} ms at {attainment:.0%}",
             f"{'kind':14s} {'policy':10s} {'GPUs':>5s}  layout"]
    for a in sorted(answers, key=lambda a: (a.gpus, a.kind)):
        lines.append(f"{a.kind:14s} {a.policy:10s} {a.gpus:5d}  {a.text}")
    click.echo("\n".join(lines + verdict(answers)))
