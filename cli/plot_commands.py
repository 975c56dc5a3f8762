"""`specsim plot ...`: the capacity-planning figures, each a thin wrapper that resolves a setup, runs the model and
returns a matplotlib figure for `cli.options.figure_out` to write (the `plot` group `specsim.py` registers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

import cli.commands as cmd
import cli.options as opt
from scenarios.serving_scenario import ServingOptions


@click.group(name="plot")
def plot_group() -> None:
    """The capacity-planning figures (PNG, SVG or PDF).

    \b
    specsim plot speedup    --hardware h100-sxm --acceptance iid:0.6 --out speedup.png
    specsim plot best-k     --hardware h100-sxm --acceptance iid:0.6 --out best-k.png
    specsim plot drafts     --hardware h100-sxm --compare eagle3=iid:0.75 --compare ngram=iid:0.8@proposed:0.3 ...
    specsim plot tpot       --hardware h100-sxm --acceptance iid:0.7 --rate 5..60:5 --out tpot.png
    specsim plot roofline   --out roofline.png              # this machine's calibrated passes
    specsim plot acceptance --trace llama3.1-8b-instruct_sharegpt.jsonl --k 4 --out acceptance.png  # or --context
    """


@plot_group.command(name="speedup")
@opt.setup_options
@click.option("--batch", "batches", type=opt.BATCHES, default="1..256", show_default=True, help="Batch sizes.")
@click.option("--k", "ks", type=opt.KS, default="0..8", show_default=True, help="Draft lengths.")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...", help="Tree shapes too (repeatable).")
@click.option("--context", "contexts", type=opt.CONTEXTS, default="128,1024", show_default=True,
              help="Contexts, one panel each.")
@opt.figure_out
def plot_speedup(setup: opt.SetupOptions, batches: list[int], ks: list[int], trees: tuple[str, ...],
                 contexts: list[int]) -> Any:
    """Speed-up vs batch, one line per k; where speculation should be off shaded, the crossover marked."""
    from plots.speedup import speedup_vs_batch
    from simulator.sweep import candidates_from, sweep

    s = setup.resolve()
    result = sweep(s.cost, s.target, s.draft, s.acceptance, batches,
                   candidates_from(cmd.draft_lengths(ks, s.draft), trees, None, s.acceptance), contexts)
    return speedup_vs_batch(result, title=s.caption)


@plot_group.command(name="drafts")
@opt.setup_options
@click.option("--compare", "pairs", multiple=True, required=True, metavar="DRAFT=ACCEPTANCE",
              help="A draft and its acceptance (repeatable), e.g. eagle3=iid:0.75 or ngram=iid:0.8@proposed:0.3.")
@click.option("--batch", "batches", type=opt.BATCHES, default="1..256", show_default=True, help="Batch sizes.")
@click.option("--k", "ks", type=opt.KS, default="0..8", show_default=True, help="Draft lengths each may use.")
@click.option("--context", type=click.IntRange(0, 2**29), default=1024, show_default=True,
              help="Cached tokens per sequence.")
@opt.figure_out
def plot_drafts(setup: opt.SetupOptions, pairs: tuple[str, ...], batches: list[int], ks: list[int],
                context: int) -> Any:
    """Several drafts for one target on one device: each one's best speed-up against batch.

    \b
    specsim plot drafts --hardware h100-sxm --target llama-3.1-8b --compare llama-3.2-1b=iid:0.7 \\
        --compare eagle3=iid:0.75 --compare ngram=iid:0.8@proposed:0.3 --out drafts.png
    """
    return cmd.plot_drafts(setup, pairs, batches, ks, context)


@plot_group.command(name="best-k")
@opt.setup_options
@click.option("--batch", "batches", type=opt.BATCHES, default="1..256:x2", show_default=True,
              help="Batch sizes (columns).")
@click.option("--k", "ks", type=opt.KS, default="0..8", show_default=True, help="Draft lengths allowed.")
@click.option("--context", "contexts", type=opt.CONTEXTS, default="128,512,1024,2048,4096,8192,16384",
              show_default=True, help="Contexts (rows).")
@opt.figure_out
def plot_best_k(setup: opt.SetupOptions, batches: list[int], ks: list[int], contexts: list[int]) -> Any:
    """The best draft length over batch size x context length."""
    from plots.capacity import best_k_map
    from simulator.sweep import chains, sweep

    s = setup.resolve()
    lengths = sorted(set(cmd.draft_lengths(ks, s.draft)) | {0})
    result = sweep(s.cost, s.target, s.draft, s.acceptance, batches, chains(lengths), contexts)
    return best_k_map(result, s.caption)


@plot_group.command(name="tpot")
@opt.setup_options
@click.option("--rate", "rates", type=opt.RATES, default=None,
              help="Request rates (req/s, all engines together) [default: 1..64:x2].")
@click.option("--engines", type=click.IntRange(1, 4096), default=1, show_default=True, help="Engines in the fleet.")
@opt.serving_options
@opt.figure_out
def plot_tpot(setup: opt.SetupOptions, serving: ServingOptions, rates: list[float] | None, engines: int) -> Any:
    """TPOT p50/p99 (and TTFT) vs request rate, one colour per policy (runs `simulate`)."""
    from plots.serving import tpot_vs_rate

    s = setup.resolve()
    scenario, results = opt.simulate_from(s, rates, engines, serving)
    caption = f"{s.caption}\n{scenario.workload.label}, {len(scenario.workload)} requests, {engines} engine(s)"
    return tpot_vs_rate([m for _, m in results], scenario.slo, caption=caption)


@plot_group.command(name="roofline")
@opt.setup_options
@click.option("--context", type=click.IntRange(0, 2**29), default=1024, show_default=True,
              help="Context of the modelled passes (presets).")
@opt.figure_out
def plot_roofline(setup: opt.SetupOptions, context: int) -> Any:
    """Roofline of the device (its ceilings) with the calibrated passes (a profile) or modelled ones (a preset)."""
    from plots.roofline import roofline_chart
    from scenarios.setup import roofline_view

    v = roofline_view(setup.resolve(need_acceptance=False), setup.dtype or "bf16", context)
    return roofline_chart(v.points, v.mem_bw_bytes_per_s, v.peak_flops_per_s, v.caption, v.ceiling_label)


@plot_group.command(name="acceptance")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibration profile whose measured acceptance to show [default: the latest of this machine].")
@click.option("--trace", "trace_spec", default=None, metavar="FILE[:eagle|ngram]",
              help="A greedy acceptance trace (JSONL, e.g. the production traces) instead of the profile.")
@click.option("--k", type=click.IntRange(1, 16), default=4, show_default=True, help="Drafts per step.")
@click.option("--context", "by_context", is_flag=True, help="The profile's acceptance against context instead.")
@opt.figure_out
def plot_acceptance(profile_path: Path | None, trace_spec: str | None, k: int, by_context: bool) -> Any:
    """Accepted-length histogram: measured steps against the acceptance models (or acceptance against context)."""
    from plots.acceptance import acceptance_against_context, accepted_length_histogram
    from scenarios.setup import acceptance_view, context_view

    if by_context:
        if trace_spec:
            raise click.UsageError("--context draws a profile's measurement; a trace's: specsim acceptance fit trace:F")
        c = context_view(profile_path)
        return acceptance_against_context(c.contexts, c.alpha, c.ci95, c.fitted, c.dense, c.leave_one_out,
                                          c.trained_tokens, c.caption)
    v = acceptance_view(trace_spec, profile_path, k)
    return accepted_length_histogram(v.measured_pmf, v.models, v.k, v.label, v.caption)
