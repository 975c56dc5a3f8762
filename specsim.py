"""specsim: does speculative decoding pay on this hardware, with which draft length or tree, up to which batch?

The CLI declares options and calls one library function per command: option types and groups are in `cli.options`;
one-line errors, progress and outputs checked before any work in `cli.output`; the longer command bodies in
`cli.commands`; the `plot` group in `cli.plot_commands`. torch is imported only by the commands that run real passes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

import cli.commands as cmd
import cli.options as opt
import cli.output as out
from cli.fleet_command import fleet
from cli.hardware_commands import hardware_group
from cli.plot_commands import plot_group
from cli.report_page import report_options
from scenarios.serving_scenario import ServingOptions
from simulator import __version__


@click.group(cls=out.OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specsim")
def cli() -> None:
    """Hardware-aware cost model and simulator for speculative decoding.

    \b
    specsim predict --alpha 0.8 --k 1..8 --c 0.05
    specsim predict --hardware h100-sxm --target llama-3.1-8b --draft llama-3.2-1b --acceptance iid:0.7
    specsim calibrate --quick && specsim predict --batch 1..64
    specsim simulate --hardware h100-sxm --acceptance iid:0.7 --rate 5..60:5 --policy off,fixed:4,adaptive
    specsim plan --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 10 --load-rps 300
    """


# -- predict ---------------------------------------------------------------------------------------------------------

@cli.command()
@click.option("--alpha", type=opt.Finite(0.0, 1.0), help="i.i.d. acceptance rate (same as --acceptance iid:A).")
@opt.setup_options
@click.option("--k", "ks", type=opt.KS, default="0..8", show_default=True,
              help="Draft lengths to sweep (0 = plain decoding), e.g. 1..8 or 0,2,4.")
@click.option("--c", "cost_ratio", type=opt.Finite(0.0, 1e3), default=None,
              help="Formula mode: cost of a draft pass relative to a target pass (Leviathan et al.'s c).")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...",
              help="Tree draft by branching per depth, e.g. 4,2,2,1 (repeat to compare shapes).")
@click.option("--tree-budget", type=click.IntRange(1, 4096), default=None,
              help="Add the best tree of N drafted nodes for the ranks vector (Sequoia's DP).")
@click.option("--batch", "batches", type=opt.BATCHES, default="1..256", show_default=True,
              help="Batch sizes (sequences decoded together), e.g. 1..256 or 1..256:x2.")
@click.option("--context", "contexts", type=opt.CONTEXTS, default="1024", show_default=True,
              help="Cached tokens per sequence, e.g. 128,1024,8192.")
@click.option("--json", "as_json", is_flag=True, help="Print every row as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print every row as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw speed-up vs batch to this .png, .svg or .pdf (hardware and profile modes).")
def predict(alpha: float | None, setup: opt.SetupOptions, ks: list[int], cost_ratio: float | None,
            trees: tuple[str, ...], tree_budget: int | None, batches: list[int], contexts: list[int], as_json: bool,
            as_csv: bool, plot_path: Path | None) -> None:
    """Predict the speed-up of speculative decoding.

    \b
    Formula mode (Leviathan et al. 2023), no hardware:
      specsim predict --alpha 0.8 --k 4 --c 0.05
    Preset mode, a roofline of every draft and verify pass:
      specsim predict --hardware h100-sxm --target llama-3.1-8b --draft llama-3.2-1b \\
          --acceptance iid:0.6 --batch 1..256 --k 0..8 --context 128,1024,8192
    Calibrated mode (the latest profile of this machine, or --profile FILE; its measured acceptance by default):
      specsim predict --batch 1..64
    """
    cmd.run_predict(alpha, setup, ks, cost_ratio, trees, tree_budget, batches, contexts, as_json, as_csv, plot_path)


# -- calibrate, exactness, validate ----------------------------------------------------------------------------------

@cli.command()
@click.option("--device", "device_name", default="auto", show_default=True, metavar="auto|cpu|cuda[:N]",
              help="Device to measure.")
@click.option("--target", default="specsim-target", show_default=True, metavar="NAME|config.json",
              help="Target model shape (timed with random weights; the built-in pair also measures acceptance).")
@click.option("--draft", default="specsim-draft", show_default=True, metavar="NAME|config.json",
              help="Draft model shape (timed with random weights).")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32", "fp8", "nvfp4"]), default="bf16", show_default=True,
              help="Weight dtype of the timed passes (fp8, nvfp4: --from aiconfigurator only).")
@click.option("--batch", "batches", type=opt.IntRange(1, 4096), default=None,
              help="Batch sizes of the pass grid [default: 1..32:x2, quick 1..8:x2].")
@click.option("--context", "contexts", type=opt.IntRange(0, 131_072), default=None,
              help="Cached tokens per sequence in the grid [default: 64,512, quick 64,384].")
@click.option("--quick", is_flag=True, help="A smaller grid and shorter time caps (about a minute on a laptop CPU).")
@click.option("--eager", is_flag=True, help="On CUDA, time eager passes instead of CUDA graphs (the CPU is eager).")
@click.option("--busy", is_flag=True, help="A machine others are using: 3x the time, more samples, interleaved.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Profile file [default: $XDG_CACHE_HOME/specsim/profile-<device>-<time>.json].")
@click.option("--json", "as_json", is_flag=True, help="Print the whole profile as JSON instead of the summary.")
@click.option("--seed", type=opt.SEED, default=0, show_default=True, help="Seed of the random weights and the split.")
@click.option("--from", "source",
              metavar="vllm:MANIFEST.toml|sglang:FILE.jsonl|llama-bench:FILE.json|csv:FILE.csv|aiconfigurator:SYSTEM",
              default=None,
              help="Fit an engine's measured step times instead of timing passes here (needs --hardware, --target), "
                   "or price passes from AIConfigurator's measured kernels (aiconfigurator:SYSTEM[/BACKEND[/VERSION]], "
                   "pip install 'specsim[aiconfigurator]').")
@click.option("--hardware", default=None, metavar="PRESET|cpu",
              help="With --from: the GPU the engine ran on, or cpu: this machine's CPU (measured).")
@click.option("--tp", type=click.IntRange(1, 64), default=1, show_default=True,
              help="With --from aiconfigurator:SYSTEM: tensor-parallel GPUs (the profile prices one GPU's shard).")
@click.option("--expert-sharing", type=float, default=None, metavar="S",
              help="An MoE target (e.g. specsim-moe): the probability that a sequence's tokens in one pass share the "
                   "experts of its first (0: routed independently) [default: 0.5].")
@click.option("--engine", type=click.Choice(["specsim", "transformers", "llama.cpp"]), default="specsim",
              show_default=True,
              help="Whose passes to time: specsim's own engine, Hugging Face transformers' or llama.cpp's llama-bench "
                   "(with --target DIR --draft DIR: model folders as specsim export writes them).")
def calibrate(device_name: str, target: str, draft: str, dtype: str, batches: list[int] | None,
              contexts: list[int] | None, quick: bool, eager: bool, busy: bool, out_path: Path | None, as_json: bool,
              seed: int, source: str | None, hardware: str | None, tp: int, expert_sharing: float | None,
              engine: str) -> None:
    """Measure this device and real draft/verify passes (or import an engine's); fit the cost model; write a profile.

    \b
    specsim calibrate --quick
    specsim calibrate --device cuda --target llama-3.1-8b --draft llama-3.2-1b --batch 1..256:x2 --context 128,1024
    specsim calibrate --from vllm:manifest.toml --hardware h100-sxm --target llama-3.1-8b --draft llama-3.2-1b
    specsim calibrate --from bench:scenarios/samples/bench/vllm-manifest.toml   # vllm bench serve results
    specsim calibrate --from aiconfigurator:h200_sxm/vllm --target llama-3.1-70b --draft llama-3.2-1b --tp 4
    specsim calibrate --quick --target specsim-moe --expert-sharing 0
    specsim calibrate --quick --engine transformers --target pair/target --draft pair/draft --out hf.json
    specsim calibrate --quick --engine llama.cpp --target pair/target --draft pair/draft --out llama.json
    """
    from calibrate.calibration import calibrate_device
    from calibrate.calibration_summary import format_summary
    from calibrate.step_import import calibrate_from

    command, options = out.invocation("specsim calibrate")
    if source and source.startswith("bench:"):  # a deployment's serving benchmarks (calibrate/bench_import.py)
        from cli.bench_commands import run_calibrate_bench

        run_calibrate_bench(source[len("bench:"):], hardware, out_path, as_json, command,
                            {k: options[k] for k in ("source", "hardware", "out_path") if k in options})
        return
    from contextlib import nullcontext

    from scenarios.output_lock import writing

    with writing(out_path) if out_path else nullcontext():  # one calibration per --out at a time
        if engine != "specsim":
            profile, path = cmd.run_calibrate_engine(engine, target, draft, quick, seed, out_path, command, options)
        elif source or hardware:
            profile, path = calibrate_from(source or "", hardware, target, draft, dtype, seed, out_path, command,
                                           options)
        else:
            profile, path = calibrate_device(target, draft, dtype, device_name, batches, contexts, quick, eager,
                                             busy, seed, out_path, command, options, out.progress, expert_sharing)
    click.echo(json.dumps(profile.to_dict(), indent=1) if as_json else format_summary(profile, path))


@cli.command()
@click.option("--draft", "draft_kind", type=click.Choice(["poor", "built-in", "ngram", "heads", "built-in-heads"]),
              default="poor",
              show_default=True, help="poor: a random model against a small-vocabulary target; built-in: the "
              "trained byte-level pair (first 2 tokens); ngram: prompt lookup; heads: random prediction heads on "
              "the small target; built-in-heads: the built-in target's trained heads.")
@click.option("--k", "ks", type=opt.IntRange(1, 16), default="1,4", show_default=True, help="Chain draft lengths.")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...",
              help="Tree shapes (repeatable; '' for none) [default: 2,2; none with --draft ngram, whose lookup "
              "proposes one continuation].")
@click.option("--samples", type=click.IntRange(100, 10_000_000), default=20000, show_default=True,
              help="Completions drawn per case.")
@click.option("--tokens", "m", type=click.IntRange(1, 4), default=None,
              help="Joint distribution of the first m tokens [default: 3, or 2 for built-in].")
@click.option("--temperature", type=opt.Finite(0.05, 10.0), default=1.0, show_default=True,
              help="Sampling temperature.")
@click.option("--seed", type=opt.SEED, default=0, show_default=True, help="Seed of every random draw.")
@click.option("--device", "device_name", default="cpu", show_default=True, metavar="auto|cpu|cuda[:N]",
              help="Where the models run.")
def exactness(draft_kind: str, ks: list[int], trees: tuple[str, ...], samples: int, m: int | None,
              temperature: float, seed: int, device_name: str) -> None:
    """The falsification test: speculative sampling leaves the target's distribution unchanged.

    Samples against the target's exact probabilities (chi-square; total variation beside its noise); broken rules
    must be caught. Exit 0 only if the exact rule passes (p > 0.01) and every broken rule is rejected (p < 1e-6).

    \b
    specsim exactness --samples 20000 --k 1,4 --tree 2,2
    specsim exactness --draft ngram --k 3
    specsim exactness --draft heads --k 1,3 --tree 2,2
    """
    from calibrate.exactness import run_exactness
    from simulator.trees import parse_branching

    if not trees:
        trees = () if draft_kind == "ngram" else ("2,2",)
    shapes = [parse_branching(t) for t in trees if t.strip()]
    failures = run_exactness(draft_kind, ks, shapes, samples, seed, temperature, m, click.echo, device_name,
                             out.progress)
    if failures:
        click.echo(f"specsim: {failures} case(s) failed", err=True)
        sys.exit(1)
    click.echo("exact: every speculative case matches the target distribution and every broken rule is caught")


@cli.command()
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibration profile of the built-in pair, measured on this device [default: the latest].")
@click.option("--batch", "batches", type=opt.IntRange(1, 1024), default=None,
              help="Batch sizes [default: 1,2,4,8,16,32; quick 1,4,8].")
@click.option("--k", "ks", type=opt.IntRange(1, 16), default=None, help="Draft lengths [default: 1,2,4,6; quick 1,4].")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...", default=("2,2,1",), show_default=True,
              help="Tree shapes to validate (repeatable; --tree '' for none).")
@click.option("--repeats", type=click.IntRange(1, 1000), default=None,
              help="Repeats per configuration [default: 5; quick 3].")
@click.option("--tokens", "new_tokens", type=click.IntRange(8, 400), default=None,
              help="Tokens generated per sequence and run [default: 64; quick 48].")
@click.option("--quick", is_flag=True, help="A smaller grid (several minutes on a 2-core CPU; with --serving, 64 "
              "requests at four rates: about 11 minutes).")
@click.option("--json", "as_json", is_flag=True, help="Print every number as JSON.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Draw validation-scatter.png and validation-batch.png into this folder.")
@click.option("--seed", type=opt.SEED, default=0, show_default=True, help="Seed of the sampling and the run order.")
@click.option("--acceptance", "acceptance_spec", metavar="SPEC", default=None,
              help="Validate at the profile's own shapes (random weights), replaying this acceptance: trace:FILE, "
                   "markov:..., iid:A, an engine's counters.")
@click.option("--target", default=None, metavar="NAME|config.json", help="With --acceptance: the shapes to expect.")
@click.option("--draft", default=None, metavar="NAME|config.json", help="With --acceptance: the draft's shape.")
@click.option("--drafter", type=click.Choice(["model", "heads", "ngram"]), default="model", show_default=True,
              help="What drafts for the built-in target: its draft model, its trained prediction heads, or prompt "
                   "lookup (on held-out prompts made to repeat themselves; --tree '').")
@click.option("--engine", type=click.Choice(["specsim", "transformers", "llama.cpp"]), default="specsim",
              show_default=True,
              help="Whose runs to validate against: specsim's own engine, transformers' assisted generation and "
                   "prompt lookup, or llama-server with a draft (--target DIR --draft DIR and a profile from "
                   "calibrate --engine of the same engine).")
@click.option("--against", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="MANIFEST.toml",
              help="Judge the simulator by a deployment's own serving benchmarks (vLLM, SGLang, GuideLLM, AIPerf "
                   "results named by a manifest): fitted on the runs marked fit = true, judged on the rest.")
@opt.served_options
def validate(profile_path: Path | None, batches: list[int] | None, ks: list[int] | None, trees: tuple[str, ...],
             repeats: int | None, new_tokens: int | None, quick: bool, as_json: bool, plot_dir: Path | None,
             seed: int, acceptance_spec: str | None, target: str | None, draft: str | None, drafter: str,
             engine: str, served: opt.ServedOptions, against: Path | None) -> None:
    """Predict every configuration from the profile, run it for real on held-out prompts, and show the error.

    \b
    specsim validate --quick --plot out/
    specsim validate --batch 1,2,4,8,16,32 --k 1,2,4,6 --tree 2,2,1 --repeats 5 --json > validation.json
    specsim validate --profile llama68m.json --acceptance trace:eagle.jsonl --tree ''   # at a preset's shapes
    specsim validate --serving --quick --plot out/          # a served stream against its simulation
    specsim validate --quick --drafter heads --tree 2,2     # the built-in target's prediction heads
    specsim validate --quick --drafter ngram --tree ''      # prompt lookup on prompts that repeat themselves
    specsim validate --quick --engine transformers --profile hf.json --target pair/target --draft pair/draft
    specsim validate --quick --engine llama.cpp --profile llama.json --target pair/target --draft pair/draft
    specsim validate --against scenarios/samples/bench/vllm-manifest.toml --plot out/   # vllm bench serve runs
    """
    if against is not None:
        from cli.bench_commands import run_validate_against

        run_validate_against(against, plot_dir, as_json)
        return
    if engine != "specsim":
        return cmd.run_validate_engine(engine, profile_path, target, draft, ks, repeats, new_tokens, quick, as_json,
                                       seed, served, plot_dir)
    cmd.run_validate(profile_path, batches, ks, trees, repeats, new_tokens, quick, as_json, plot_dir, seed, target,
                    draft, acceptance_spec, served, drafter)


# -- serving: simulate, plan, policy ---------------------------------------------------------------------------------

@cli.command()
@opt.setup_options
@click.option("--rate", "rates", type=opt.RATES, default=None,
              help="Request rates, all engines together (req/s), e.g. 1..64:x2 [default: 1..64:x2].")
@click.option("--engines", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="Identical engines behind the router.")
@opt.serving_options
@click.option("--json", "as_json", is_flag=True, help="Print every metric as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print every metric as CSV.")
@click.option("--plot", "plot_paths", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw TPOT and TTFT vs request rate to this .png/.svg/.pdf (repeatable).")
def simulate(setup: opt.SetupOptions, serving: ServingOptions, rates: list[float] | None, engines: int, as_json: bool,
             as_csv: bool, plot_paths: tuple[Path, ...]) -> None:
    """Serve a stream of requests with each speculation policy (a simpy discrete-event simulation).

    \b
    specsim simulate --hardware h100-sxm --acceptance iid:0.7 --rate 5..60:5 \\
        --policy off,fixed:4,threshold:4@64,adaptive
    specsim simulate --rate 1..16:x2 --slo-tpot-ms 50     # this machine's profile and measured acceptance
    specsim simulate --hardware h100-sxm --acceptance vllm-metrics:metrics.txt --arrivals gamma:3 --rate 20
    """
    from simulator.serving_report import format_serving_table, metrics_to_csv, simulate_record

    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    plots = out.check_figures(plot_paths)
    s = setup.resolve()
    scenario, results = opt.simulate_from(s, rates, engines, serving)
    metrics = [m for _, m in results]
    if plots:
        from plots.serving import tpot_vs_rate

        out.write_figures({p: tpot_vs_rate(metrics, scenario.slo, caption=s.caption) for p in plots})
    if as_json:
        record = simulate_record(s.caption, scenario.workload.label, scenario.slo.label, results)
        click.echo(json.dumps(record, indent=1, default=float))
    elif as_csv:
        click.echo(metrics_to_csv(metrics), nl=False)
    else:
        click.echo(f"{s.caption}\n{scenario.workload.label}, {len(scenario.workload)} requests, {engines} "
                   f"engine(s)\n" + format_serving_table(metrics, scenario.slo.label), nl=False)


@cli.command()
@opt.setup_options
@click.option("--load-rps", type=opt.Finite(0, 1e6, min_open=True), default=None,
              help="Load to size a fleet for (requests/s, all engines together).")
@click.option("--attainment", type=opt.Finite(0, 1, min_open=True), default=0.9, show_default=True,
              help="Share of requests that must meet the SLO.")
@opt.serving_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(setup: opt.SetupOptions, serving: ServingOptions, load_rps: float | None, attainment: float,
         as_json: bool) -> None:
    """The highest request rate per engine that meets an SLO, for each policy, and the engines a load needs.

    \b
    specsim plan --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 20 --load-rps 200
    specsim plan --slo-tpot-ms 50 --slo-ttft-ms 2000 --policy off,threshold:4@16,adaptive
    """
    from simulator.capacity import capacity_plan
    from simulator.executors import parse_executor
    from simulator.serving_report import format_plan, plan_record

    if serving.slo_tpot_s is None and serving.slo_ttft_s is None:
        raise click.UsageError("give an SLO to plan for: --slo-tpot-ms 50 and/or --slo-ttft-ms 2000")
    if serving.timed_trace:
        raise click.UsageError("plan scales the request rate; use --arrivals poisson|gamma:CV with --lengths-from "
                               "FILE instead of a timed trace")
    s = setup.resolve()
    scenario, policies = opt.scenario_from(s, serving)
    caps, fleets = capacity_plan(scenario, policies, attainment, load_rps, serving.router, out.progress,
                                 parse_executor(serving.executor))
    if as_json:
        click.echo(json.dumps(plan_record(s.caption, scenario.workload.label, scenario.slo.label, attainment,
                                          caps, fleets), indent=1, default=float))
    else:
        click.echo(f"{s.caption}\n{scenario.workload.label}, {len(scenario.workload)} requests per simulation\n"
                   + format_plan(caps, fleets, scenario.slo.label, attainment), nl=False)


@cli.command()
@opt.setup_options
@click.option("--format", "fmt", type=click.Choice(["vllm", "vllm-config", "llama-server", "json"]), default="vllm",
              show_default=True,
              help="vllm: num_speculative_tokens_per_batch_size ranges; vllm-config: a whole speculative_config "
                   "(the draft's method: draft_model, eagle3, mtp, medusa or ngram); llama-server: its flags "
                   "(--spec-type, --spec-draft-n-max, -np) at 1, 2 and 4 streams; json: the ranges with predicted "
                   "speed-ups.")
@click.option("--batch", "batches", type=opt.BATCHES, default="1..256", show_default=True,
              help="Batch sizes to cover (contiguous from 1).")
@click.option("--k", "ks", type=opt.KS, default="0..8", show_default=True, help="Draft lengths allowed.")
@click.option("--context", "contexts", type=opt.CONTEXTS, default="1024", show_default=True,
              help="Cached tokens per sequence the table is made for; several (json) give a table per context.")
@click.option("--tolerance", "tolerance_pct", type=opt.Finite(0, 50), default=None, metavar="PCT",
              help="Keep a k across batches while its speed-up is within PCT % of the best k's [default: the "
                   "profile's held-out pass error, at least 1; 1 for a preset; 0: the best k at every batch].")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file (atomically) instead of stdout.")
def policy(setup: opt.SetupOptions, fmt: str, batches: list[int], ks: list[int], contexts: list[int],
           tolerance_pct: float | None, out_path: Path | None) -> None:
    """Export the draft length per batch size as a table a serving engine can read (near-ties kept in one range).

    \b
    specsim policy --hardware h100-sxm --acceptance iid:0.7 --format vllm
    specsim policy --hardware h100-sxm --acceptance vllm-metrics:metrics.txt --format json --out policy.json
    specsim policy --hardware h100-sxm --draft eagle3 --acceptance iid:0.75 --format vllm-config
    """
    cmd.run_policy(setup, fmt, batches, ks, contexts, tolerance_pct, out_path)


@cli.command()
@opt.setup_options
@report_options
@opt.serving_options
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The page to write (.html), atomically.")
def report(setup: opt.SetupOptions, batches: list[int], ks: list[int], contexts: list[int], rates: list[float] | None,
           load_rps: float | None, attainment: float, tolerance_pct: float | None, pairs: tuple[str, ...],
           serving: ServingOptions, out_path: Path) -> None:
    """A capacity plan as one self-contained HTML page: the verdict, the engine config to paste, the figures.

    \b
    specsim report --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 30 --load-rps 100 --out plan.html
    specsim report --hardware h100-sxm --acceptance iid:0.7 --compare eagle3=iid:0.75 --out plan.html
    specsim report --slo-tpot-ms 50 --rate 1..16:x2 --out plan.html     # this machine's profile
    """
    from cli.report_page import run_report

    command, _ = out.invocation("specsim report")
    run_report(setup, serving, batches, ks, contexts, rates, load_rps, attainment, tolerance_pct, out_path, command,
               pairs)


# -- acceptance ------------------------------------------------------------------------------------------------------

@cli.group(name="acceptance")
def acceptance_group() -> None:
    """Acceptance models fitted to data: each judged on requests it was not fitted to, the best one chosen.

    \b
    specsim acceptance fit trace:llama3.1-8b-instruct_sharegpt.jsonl:eagle --out sharegpt-fit.json
    specsim predict --hardware h100-sxm --acceptance fit:sharegpt-fit.json
    """


@acceptance_group.command(name="fit")
@click.argument("source")
@click.option("--k", "ks", type=opt.IntRange(1, 64), default="1..8", show_default=True, help="Draft lengths judged.")
@click.option("--folds", type=click.IntRange(2, 50), default=5, show_default=True,
              help="Cross-validation folds over requests.")
@click.option("--models", default="iid,positional,beta,markov,hmm3", show_default=True, help="Models to fit.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Profile whose measurement `measured` means [default: the latest of this machine].")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the fits as JSON (atomically); --acceptance fit:FILE then uses the chosen one.")
@click.option("--json", "as_json", is_flag=True, help="Print the fits as JSON.")
@click.option("--seed", type=opt.SEED, default=0, show_default=True, help="Seed of the folds and the fits' starts.")
def acceptance_fit(source: str, ks: list[int], folds: int, models: str, profile_path: Path | None,
                   out_path: Path | None, as_json: bool, seed: int) -> None:
    """Fit every acceptance model to SOURCE; judge each on held-out requests; choose the best.

    SOURCE is trace:FILE[:eagle|ngram] (a greedy trace), measured[:PROFILE] (a calibration's measurement), or an
    engine's counters (vllm-metrics:FILE, sglang:FILE@K, trtllm:FILE[@K]: step counts only, judged in sample).

    \b
    specsim acceptance fit trace:scenarios/samples/acceptance/llama3.1-8b-instruct_cnn-40.jsonl:ngram
    """
    from scenarios.setup import fit_acceptance
    from simulator.acceptance_fit import fit_record, format_fit_report

    out.check_out(out_path)
    report = fit_acceptance(source, ks, folds, models.split(","), seed, profile_path, out.progress)
    record = json.dumps(fit_record(report), indent=1)
    if out_path:
        out.echo_or_write(out_path, record + "\n", "fits")
    click.echo(record if as_json else format_fit_report(report))


@cli.command()
@click.argument("spec_path", metavar="SPEC.toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--executor", default="local", show_default=True, metavar="serial|local[:N]|ray[:ADDRESS]",
              help="Where the simulations run: here, N local processes (default one per CPU), or a Ray cluster.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The table, .csv or .json [default: CSV on stdout].")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Draw capacity.png and one tpot-*.png per configuration into this folder.")
@click.option("--engine", default=None, metavar="vllm|sglang|tensorrt-llm|gpt-fast", callback=opt.engine_named,
              help="Serving engine preset for every configuration (scenarios/engines.toml) [default: the spec's "
                   "'engine', else vllm].")
def sweep(spec_path: Path, executor: str, out_path: Path | None, plot_dir: Path | None, engine: str | None) -> None:
    """Simulate a grid of hardware x model pairs x TP x policies x rates (a TOML spec) into one table and plots.

    \b
    specsim sweep scenarios/sweeps/example.toml --out sweep.csv --plot sweep/
    specsim sweep spec.toml --executor ray:auto      # on the Ray cluster this machine belongs to
    """
    cmd.run_sweep(spec_path, executor, out_path, plot_dir, engine)


@cli.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Folder to write target/ and draft/ into.")
@click.option("--format", "fmt", type=click.Choice(["hf", "gguf", "both"]), default="both", show_default=True,
              help="hf: Hugging Face LlamaForCausalLM folders (config.json, model.safetensors, tokenizer.json); "
                   "gguf: model.gguf for llama.cpp beside config.json; both.")
def export(out_dir: Path, fmt: str) -> None:
    """Write the built-in pair (the expanded target, the draft) in another engine's format.

    \b
    specsim export --out pair/        # pair/target, pair/draft: transformers' from_pretrained, llama.cpp's -m
    """
    if out_dir.is_file():
        raise click.BadParameter(f"{str(out_dir)!r} is a file; give a folder (made if missing)", param_hint="'--out'")
    cmd.run_export(out_dir, fmt)


cli.add_command(plot_group)
cli.add_command(fleet)
cli.add_command(hardware_group)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
