"""specsim: does speculative decoding pay on this hardware, with which draft length or tree, up to which batch?

The CLI is a thin face over the library: it parses and validates, calls one function, and prints. Every error a user
can cause is one line on stderr and exit code 2; torch is imported only by the commands that run it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np

from simulator import SpecsimError, __version__
from simulator.ranges import parse_int_range

DTYPES = ["bf16", "fp16", "fp32", "fp8"]


class IntRangeParam(click.ParamType):
    """``1..256``, ``1..64:x2``, ``0..16:2`` or ``1,2,4``: a sorted list of integers >= minimum."""

    name = "RANGE"

    def __init__(self, minimum: int = 0) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            what = param.opts[0] if param is not None and param.opts else "value"
            return parse_int_range(str(value), self.minimum, what=what)
        except SpecsimError as e:
            self.fail(str(e), param, ctx)


class OneLineErrors(click.Group):
    """Every usage error and every SpecsimError becomes one line on stderr and exit code 2 (no usage dump, no
    traceback); Ctrl-C exits 130."""

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        extra.pop("standalone_mode", None)
        try:
            rv = super().main(args=args, prog_name=prog_name or "specsim", standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("specsim: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"specsim: error: {e.format_message()}", err=True)
            sys.exit(2)
        except SpecsimError as e:
            click.echo(f"specsim: error: {e}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("specsim: interrupted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specsim")
def cli() -> None:
    """Hardware-aware cost model and simulator for speculative decoding.

    \b
    specsim predict --alpha 0.8 --k 1..8 --c 0.05
    specsim predict --hardware h100-sxm --target llama-3.1-8b --draft llama-3.2-1b --acceptance iid:0.7
    specsim simulate --hardware h100-sxm --acceptance iid:0.7 --rate 5..60:5 --policy off,fixed:4,adaptive
    specsim plan --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 10 --load-rps 300
    """


def _save_figure(fig: Any, path: Path) -> None:
    from calibrate.files import atomic_write_bytes

    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in ("png", "svg", "pdf"):
        raise SpecsimError(f"cannot draw {path.name}: use a .png, .svg or .pdf file name")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=130)
    atomic_write_bytes(path, buf.getvalue())


def _candidates(ks: list[int], trees: tuple[str, ...], tree_budget: int | None, acceptance: Any) -> list[Any]:
    from simulator.sweep import Candidate
    from simulator.trees import best_tree, parse_branching

    cands = [Candidate(k) for k in ks]
    for t in trees:
        cands.append(Candidate(None, parse_branching(t)))
    if tree_budget is not None:
        if acceptance.ranks is None:
            raise SpecsimError(f"--tree-budget needs per-rank acceptance: give --acceptance ranks:R1,R2,... "
                               f"({acceptance.spec} has no per-rank information)")
        cands.append(Candidate(None, best_tree(acceptance.ranks, tree_budget)))
    return cands


@cli.command()
@click.option("--alpha", type=click.FloatRange(0.0, 1.0), help="i.i.d. acceptance rate (same as --acceptance iid:A).")
@click.option("--acceptance", "acceptance_spec", metavar="SPEC",
              help="Acceptance model: iid:A, positional:A1,A2,..., beta:a,b, markov:AE,AH,PEH,PHE, "
                   "trace:FILE[:eagle|ngram], ranks:R1,R2,... or measured[:positional|iid|beta|markov|trace|ranks] "
                   "(the calibration profile's).")
@click.option("--k", "ks", type=IntRangeParam(0), default="0..8", show_default=True,
              help="Draft lengths to sweep (0 = plain decoding), e.g. 1..8 or 0,2,4.")
@click.option("--c", "cost_ratio", type=click.FloatRange(0.0), default=None,
              help="Formula mode: cost of a draft pass relative to a target pass (Leviathan et al.'s c).")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...",
              help="Tree draft by branching per depth, e.g. 4,2,2,1 (repeat to compare shapes).")
@click.option("--tree-budget", type=click.IntRange(1, 4096), default=None,
              help="Add the best tree of N drafted nodes for the ranks vector (Sequoia's DP).")
@click.option("--hardware", metavar="NAME", help="Hardware preset, e.g. h100-sxm (hardware mode).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibration profile [default: the latest profile measured on this device].")
@click.option("--target", default=None, metavar="NAME|config.json",
              help="Target model preset or a Hugging Face config.json [default: the profile's, else llama-3.1-8b].")
@click.option("--draft", default=None, metavar="NAME|config.json",
              help="Draft model preset or a Hugging Face config.json [default: the profile's, else llama-3.2-1b].")
@click.option("--batch", "batches", type=IntRangeParam(1), default="1..256", show_default=True,
              help="Batch sizes (sequences decoded together), e.g. 1..256 or 1..256:x2.")
@click.option("--context", "contexts", type=IntRangeParam(0), default="1024", show_default=True,
              help="Cached tokens per sequence, e.g. 128,1024,8192.")
@click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True,
              help="Weight and KV-cache dtype.")
@click.option("--json", "as_json", is_flag=True, help="Print every row as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print every row as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw speed-up vs batch to this PNG/SVG/PDF (hardware mode).")
def predict(alpha: float | None, acceptance_spec: str | None, ks: list[int], cost_ratio: float | None,
            trees: tuple[str, ...], tree_budget: int | None, hardware: str | None, profile_path: Path | None,
            target: str | None, draft: str | None,
            batches: list[int], contexts: list[int], dtype: str, as_json: bool, as_csv: bool,
            plot_path: Path | None) -> None:
    """Predict the speed-up of speculative decoding.

    \b
    Formula mode (Leviathan et al. 2023), no hardware:
      specsim predict --alpha 0.8 --k 4 --c 0.05
    Hardware mode, a roofline of every draft and verify pass:
      specsim predict --hardware h100-sxm --target llama-3.1-8b --draft llama-3.2-1b \\
          --acceptance iid:0.6 --batch 1..256 --k 0..8 --context 128,1024,8192
    Calibrated mode (the latest profile of this device, or --profile FILE):
      specsim predict --acceptance iid:0.75 --batch 1..64
    """
    from simulator.acceptance import IIDAcceptance
    from simulator.report import format_formula_table, format_hardware_table, result_to_csv, result_to_dict

    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    if alpha is not None and acceptance_spec:
        raise click.UsageError("give --alpha or --acceptance, not both")
    if alpha is None and not acceptance_spec:
        raise click.UsageError("say how often drafts are accepted: --alpha 0.7 or --acceptance SPEC")
    if alpha is not None:
        acceptance = IIDAcceptance(alpha)
    else:
        acceptance, found = _acceptance(acceptance_spec or "", profile_path)
        if found is not None and cost_ratio is None and not hardware:
            profile_path = found
    candidates = _candidates(ks, trees, tree_budget, acceptance)
    meta: dict[str, Any] = {"specsim_version": __version__, "acceptance": acceptance.spec}

    if cost_ratio is not None:
        if hardware or profile_path:
            raise click.UsageError("--c is formula mode; drop it to use --hardware or --profile")
        from simulator.sweep import formula_sweep

        result = formula_sweep(acceptance, candidates, cost_ratio)
        meta.update(mode="formula", c=cost_ratio)
        text = format_formula_table(result, cost_ratio)
    else:
        from simulator.sweep import sweep

        cost, target_spec, draft_spec, where = _device_and_models(hardware, profile_path, target, draft, dtype)
        result = sweep(cost, target_spec, draft_spec, acceptance, batches, candidates, contexts)
        meta.update(mode="hardware" if hardware else "profile", hardware=cost.hardware.name,
                    target=target_spec.name, draft=draft_spec.name, dtype=target_spec.dtype, cost_model=cost.label)
        head = (f"{target_spec.name} ({_params(target_spec)} params) drafted by {draft_spec.name} "
                f"({_params(draft_spec)}) on {where}; acceptance {acceptance.spec}\n")
        text = head + format_hardware_table(result)
        if plot_path:
            from plots.speedup import speedup_vs_batch

            fig = speedup_vs_batch(result, title=head.strip())
            _save_figure(fig, plot_path)
            text += f"plot written to {plot_path}\n"

    if as_json:
        click.echo(json.dumps(result_to_dict(result, meta), indent=1))
    elif as_csv:
        click.echo(result_to_csv(result), nl=False)
    else:
        click.echo(text, nl=False)


@contextlib.contextmanager
def _click_progress(label: str, total: int) -> Iterator[Any]:
    """A progress bar on stderr for one calibration phase."""
    with click.progressbar(length=total, label=f"{label:32s}", file=sys.stderr, show_eta=True,
                           show_pos=True) as bar:
        yield bar


@cli.command()
@click.option("--device", "device_name", default="auto", show_default=True, metavar="auto|cpu|cuda[:N]",
              help="Device to measure.")
@click.option("--target", default="specsim-target", show_default=True, metavar="NAME|config.json",
              help="Target model shape (timed with random weights).")
@click.option("--draft", default="specsim-draft", show_default=True, metavar="NAME|config.json",
              help="Draft model shape (timed with random weights).")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True,
              help="Weight dtype of the timed passes.")
@click.option("--batch", "batches", type=IntRangeParam(1), default=None,
              help="Batch sizes of the pass grid [default: 1..32:x2, quick 1..8:x2].")
@click.option("--context", "contexts", type=IntRangeParam(0), default=None,
              help="Cached tokens per sequence in the grid [default: 64,512, quick 64,384].")
@click.option("--quick", is_flag=True, help="A smaller grid and shorter time caps (about a minute on a laptop CPU).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Profile file [default: $XDG_CACHE_HOME/specsim/profile-<device>-<time>.json].")
@click.option("--json", "as_json", is_flag=True, help="Print the whole profile as JSON instead of the summary.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights and the split.")
def calibrate(device_name: str, target: str, draft: str, dtype: str, batches: list[int] | None,
              contexts: list[int] | None, quick: bool, out_path: Path | None, as_json: bool, seed: int) -> None:
    """Measure this device and real draft/verify passes; fit the cost model; write a profile.

    \b
    specsim calibrate --quick
    specsim calibrate --device cuda --target llama-3.1-8b --draft llama-3.2-1b --batch 1..64:x2
    """
    from scenarios import load_model

    target_spec, draft_spec = load_model(target, dtype), load_model(draft, dtype)
    from calibrate.device import resolve_device
    from calibrate.profile import save_profile
    from calibrate.run import Grid
    from calibrate.run import calibrate as run_calibration
    from calibrate.summary import format_summary

    device = resolve_device(device_name)
    grid = Grid.default(quick, batches, contexts)
    command = "specsim " + " ".join(sys.argv[1:]) if sys.argv[0].endswith("specsim") else "specsim calibrate"
    result = run_calibration(target_spec, draft_spec, device, grid, quick, command, progress=_click_progress,
                             seed=seed)
    path = save_profile(result.profile, out_path)
    if as_json:
        click.echo(json.dumps(result.profile, indent=1))
    else:
        click.echo(format_summary(result.profile, path))


@cli.command()
@click.option("--draft", "draft_kind", type=click.Choice(["poor", "built-in", "ngram"]), default="poor",
              show_default=True, help="poor: a random model against a small-vocabulary target; built-in: the "
              "trained byte-level pair (first 2 tokens); ngram: prompt lookup.")
@click.option("--k", "ks", type=IntRangeParam(1), default="1,4", show_default=True, help="Chain draft lengths.")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...", default=("2,2",), show_default=True,
              help="Tree shapes (repeatable; not with --draft ngram).")
@click.option("--samples", type=click.IntRange(100), default=20000, show_default=True,
              help="Completions drawn per case.")
@click.option("--tokens", "m", type=click.IntRange(1, 4), default=None,
              help="Joint distribution of the first m tokens [default: 3, or 2 for built-in].")
@click.option("--temperature", type=click.FloatRange(0.05, 10.0), default=1.0, show_default=True,
              help="Sampling temperature.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random draw.")
def exactness(draft_kind: str, ks: list[int], trees: tuple[str, ...], samples: int, m: int | None,
              temperature: float, seed: int) -> None:
    """The falsification test: speculative sampling leaves the target's distribution unchanged.

    Plain and speculative samples are compared with the exact target probabilities (chi-square, and the total
    variation beside its noise level); deliberately broken rules must be caught. Exit 0 only if the exact rule
    passes (p > 0.01) everywhere and every broken rule is rejected (p < 1e-6).

    \b
    specsim exactness --samples 20000 --k 1,4 --tree 2,2
    specsim exactness --draft ngram --k 3 --tree ''
    """
    from calibrate.exactness import run_exactness, verdict
    from simulator.trees import parse_branching

    shapes = [parse_branching(t) for t in trees if t.strip()]
    if draft_kind == "ngram" and shapes:
        raise click.UsageError("prompt lookup proposes one continuation: drop --tree with --draft ngram "
                               "(pass --tree '')")
    failures = 0

    def report(result: Any, kind: str) -> None:
        nonlocal failures
        ok, line = verdict(result, kind)
        failures += not ok
        click.echo(line)

    run_exactness(draft_kind, ks, shapes, samples, seed, temperature, m, report)
    if failures:
        click.echo(f"specsim: {failures} case(s) failed", err=True)
        sys.exit(1)
    click.echo("exact: every speculative case matches the target distribution and every broken rule is caught")


def _resolve_profile(profile_path: Path | None) -> tuple[dict, Path]:
    """--profile FILE (checked against this device), else the latest profile measured on this device."""
    from calibrate.profile import check_device, current_cpu_identity, latest_profile, load_profile

    if profile_path is None:
        found = latest_profile(current_cpu_identity())
        if found is None:
            raise SpecsimError("no calibration profile for this device yet: run `specsim calibrate --quick`, or "
                               "give --hardware NAME (a preset) or --c RATIO (the closed form)")
        click.echo(f"using profile {found} (latest for this device)", err=True)
        return load_profile(found), found
    profile = load_profile(profile_path)
    if profile["device"].get("kind") == "cpu":
        check_device(profile, current_cpu_identity(), profile_path)
    else:
        from calibrate.device import device_identity, resolve_device

        check_device(profile, device_identity(resolve_device("cuda")), profile_path)
    return profile, profile_path


def _acceptance(spec: str, profile_path: Path | None) -> tuple[Any, Path | None]:
    """An acceptance model from its spec: the profile's measurement (and that profile's path), an engine's exported
    counters, or a model spec."""
    from scenarios.engine_metrics import ENGINE_KINDS, engine_acceptance
    from simulator.acceptance import parse_acceptance

    if spec.startswith("measured"):
        return _measured_acceptance(spec, profile_path)
    if spec.partition(":")[0].strip().lower() in ENGINE_KINDS:
        return engine_acceptance(spec.strip()), None
    return parse_acceptance(spec), None


def _device_and_models(hardware: str | None, profile_path: Path | None, target: str | None, draft: str | None,
                       dtype: str) -> tuple[Any, Any, Any, str]:
    """(cost model, target, draft, where): a hardware preset's roofline, or a calibration profile's."""
    from scenarios import load_model

    if hardware:
        if profile_path:
            raise click.UsageError("give --hardware (a preset) or --profile (a calibration), not both")
        from scenarios import load_hardware
        from simulator.cost import CostModel

        hw = load_hardware(hardware)
        return (CostModel.from_hardware(hw, dtype), load_model(target or "llama-3.1-8b", dtype),
                load_model(draft or "llama-3.2-1b", dtype), f"{hw.name}, {dtype}, uncalibrated preset roofline")
    return _calibrated(profile_path, target, draft, dtype)


def _measured_acceptance(spec: str, profile_path: Path | None) -> tuple[Any, Path]:
    from simulator.acceptance import from_measured

    profile, path = _resolve_profile(profile_path)
    if not profile.get("acceptance"):
        raise SpecsimError(f"profile {path} has no measured acceptance (it was calibrated with random weights); "
                           "calibrate the built-in pair or give --acceptance iid:A")
    _, _, variant = spec.partition(":")
    return from_measured(profile["acceptance"], variant or "positional"), path


@cli.command()
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibration profile of the built-in pair [default: the latest of this device].")
@click.option("--batch", "batches", type=IntRangeParam(1), default=None,
              help="Batch sizes [default: 1,2,4,8,16,32; quick 1,4,8].")
@click.option("--k", "ks", type=IntRangeParam(1), default=None, help="Draft lengths [default: 1,2,4,6; quick 1,4].")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...", default=("2,2,1",), show_default=True,
              help="Tree shapes to validate (repeatable; --tree '' for none).")
@click.option("--repeats", type=click.IntRange(1), default=None,
              help="Repeats per configuration [default: 5; quick 3].")
@click.option("--tokens", "new_tokens", type=click.IntRange(8, 400), default=None,
              help="Tokens generated per sequence and run [default: 64; quick 48].")
@click.option("--quick", is_flag=True, help="A smaller grid (a few minutes on a laptop CPU).")
@click.option("--json", "as_json", is_flag=True, help="Print every number as JSON.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Draw validation-scatter.png and validation-batch.png into this folder.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampling and the run order.")
def validate(profile_path: Path | None, batches: list[int] | None, ks: list[int] | None, trees: tuple[str, ...],
             repeats: int | None, new_tokens: int | None, quick: bool, as_json: bool, plot_dir: Path | None,
             seed: int) -> None:
    """Predict every configuration from the profile, run it for real on held-out prompts, and show the error.

    \b
    specsim validate --quick --plot out/
    specsim validate --batch 1,2,4,8,16,32 --k 1,2,4,6 --tree 2,2,1 --repeats 5 --json > validation.json
    """
    from calibrate.validate import PRIMARY
    from simulator.trees import parse_branching

    shapes = [parse_branching(t) for t in trees if t.strip()]
    batches = batches or ([1, 4, 8] if quick else [1, 2, 4, 8, 16, 32])
    ks = ks or ([1, 4] if quick else [1, 2, 4, 6])
    repeats = repeats or (3 if quick else 5)
    new_tokens = new_tokens or (48 if quick else 64)
    profile, path = _resolve_profile(profile_path)
    if not profile.get("acceptance") or profile["models"]["target"]["name"] != "specsim-target":
        raise SpecsimError(f"profile {path} is not a calibration of the built-in pair with measured acceptance; "
                           "run `specsim calibrate` (default target and draft) first")
    import torch

    from calibrate.builtin import encode, load_pair, prompts
    from calibrate.device import resolve_device
    from calibrate.realruns import Config, measure
    from calibrate.speculative import Engine
    from calibrate.validate import check_predictable, compare, predicted_curves
    from simulator.sweep import Candidate

    device = resolve_device("cuda" if profile["device"]["kind"] == "cuda" else "cpu")
    dtype = profile["models"]["target"]["dtype"]
    held = [encode(p) for p in prompts("heldout")]
    span = max([max(ks)] + [t.n_nodes for t in shapes])
    target, draft = load_pair(expanded=True, dtype=dtype, max_seq_len=max(len(p) for p in held) + new_tokens + span + 8,
                              device=device)
    engine = Engine(target, draft, device)
    configs = [Config(b, k) for b in batches for k in ks] + [Config(b, 0, t) for b in batches for t in shapes]
    context = int(np.mean([len(p) for p in held])) - 1 + new_tokens // 2
    cands = [Candidate(k) for k in ks] + [Candidate(None, t) for t in shapes]
    check_predictable(profile, cands, batches, context)
    total = repeats * (len(configs) + len(batches))
    with _click_progress("real runs (interleaved)", total) as bar:
        measured = measure(engine, held, configs, new_tokens, repeats, 1.0, seed, tick=lambda: bar.update(1))
    report = compare(profile, measured, shapes, context, batches)
    report.update(profile=str(path), new_tokens=new_tokens, repeats=repeats, batches=batches, ks=ks,
                  trees=[t.label for t in shapes], torch_threads=torch.get_num_threads())
    if plot_dir:
        from plots.validation import predicted_vs_measured, speedup_vs_batch

        curves = predicted_curves(profile, cands, list(range(1, max(batches) + 1)), context)
        _save_figure(predicted_vs_measured(report), plot_dir / "validation-scatter.png")
        _save_figure(speedup_vs_batch(report, curves), plot_dir / "validation-batch.png")
    if as_json:
        click.echo(json.dumps(report, indent=1, default=float))
    else:
        from calibrate.validate_report import format_report

        click.echo(format_report(report, PRIMARY))
        if plot_dir:
            click.echo(f"plots written to {plot_dir}/validation-scatter.png and validation-batch.png")


def _options(*decorators: Any) -> Any:
    """Apply click options in the order they are listed (so --help lists them that way)."""

    def apply(f: Any) -> Any:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


_setup_options = _options(
    click.option("--acceptance", "acceptance_spec", metavar="SPEC", default=None,
                 help="Acceptance model as in `predict` (iid:A, markov:..., trace:FILE, measured[:VARIANT]), or an "
                      "engine's own counters: vllm-metrics:FILE, sglang:FILE@K, trtllm:FILE[@K], accept-length:L@K "
                      "[default: measured with a profile, else required]."),
    click.option("--hardware", metavar="NAME", help="Hardware preset, e.g. h100-sxm [default: the profile]."),
    click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="Calibration profile [default: the latest profile measured on this device]."),
    click.option("--target", default=None, metavar="NAME|config.json",
                 help="Target model [default: the profile's, else llama-3.1-8b]."),
    click.option("--draft", default=None, metavar="NAME|config.json",
                 help="Draft model [default: the profile's, else llama-3.2-1b]."),
    click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True,
                 help="Weight and KV-cache dtype (hardware presets)."),
)


def _setup(acceptance_spec: str | None, hardware: str | None, profile_path: Path | None, target: str | None,
           draft: str | None, dtype: str) -> tuple[Any, Any, Any, Any, str]:
    """(cost model, target, draft, acceptance, caption) for the serving commands."""
    if not acceptance_spec:
        if hardware:
            raise click.UsageError("say how often drafts are accepted: --acceptance iid:0.7 (or markov:..., "
                                   "vllm-metrics:FILE, ...)")
        acceptance_spec = "measured"
    acceptance, found = _acceptance(acceptance_spec, profile_path)
    if found is not None and not hardware:
        profile_path = found
    cost, target_spec, draft_spec, where = _device_and_models(hardware, profile_path, target, draft, dtype)
    caption = f"{target_spec.name} drafted by {draft_spec.name} on {where}; acceptance {acceptance.spec}"
    return cost, target_spec, draft_spec, acceptance, caption


class RatesParam(click.ParamType):
    """Request rates: ``1..64:x2``, ``10..50:10`` or ``0.5,1,2`` (requests per second, > 0)."""

    name = "RATES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list[float]:
        from simulator.ranges import parse_positive_floats

        if isinstance(value, list):
            return value
        try:
            return parse_positive_floats(str(value), "request rate")
        except SpecsimError as e:
            self.fail(str(e), param, ctx)


class LatencyParam(click.ParamType):
    """A latency limit in milliseconds (``50``, ``50ms``) or seconds (``0.5s``), returned in seconds."""

    name = "MS"

    def __init__(self, what: str, highest_s: float) -> None:
        self.what, self.highest_s = what, highest_s

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from simulator.ranges import parse_ms

        if isinstance(value, float):
            return value
        try:
            return parse_ms(str(value), self.what, 1e-5, self.highest_s)
        except SpecsimError as e:
            self.fail(str(e), param, ctx)


_serving_options = _options(
    click.option("--policy", "policy_text", default="off,fixed:4,adaptive", show_default=True,
                 metavar="P1,P2,...",
                 help="Speculation policies: off, fixed:K, tree:B1,B2,..., threshold:K@BATCH, adaptive[:KMAX]."),
    click.option("--requests", "n_requests", type=click.IntRange(1, 10_000_000), default=2000, show_default=True,
                 help="Requests simulated per run."),
    click.option("--arrivals", default="poisson", show_default=True, metavar="poisson|gamma:CV|trace:FILE",
                 help="Arrival process: Poisson, gamma gaps with coefficient of variation CV (> 1 is bursty), or a "
                      "CSV/JSONL trace with arrival_s, prompt_tokens, output_tokens."),
    click.option("--prompt-tokens", default="512", show_default=True, metavar="N|A..B|exp:MEAN",
                 help="Prompt length per request."),
    click.option("--output-tokens", default="128", show_default=True, metavar="N|A..B|exp:MEAN",
                 help="Output length per request."),
    click.option("--lengths-from", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="Resample (prompt, output) pairs from a CSV/JSONL with prompt_tokens/output_tokens or "
                      "prompt_len/generated_len (e.g. the acceptance traces)."),
    click.option("--max-batch", type=click.IntRange(1, 65536), default=256, show_default=True,
                 help="Sequences an engine decodes together."),
    click.option("--max-prefill-tokens", type=click.IntRange(1), default=8192, show_default=True,
                 help="Prompt tokens one prefill step may take."),
    click.option("--draft-sync", type=click.Choice(["lazy", "eager"]), default="lazy", show_default=True,
                 help="lazy: the draft reads tokens only when it next drafts; eager: it is kept current every step "
                      "(vLLM's draft-model path)."),
    click.option("--router", type=click.Choice(["least-loaded", "round-robin"]), default="least-loaded",
                 show_default=True, help="How a fleet spreads requests over its engines."),
    click.option("--slo-tpot-ms", "slo_tpot_s", type=LatencyParam("--slo-tpot-ms", 60.0), default=None,
                 help="Time-per-output-token limit, e.g. 50 (ms)."),
    click.option("--slo-ttft-ms", "slo_ttft_s", type=LatencyParam("--slo-ttft-ms", 3600.0), default=None,
                 help="Time-to-first-token limit, e.g. 2000 (ms)."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload and every draw."),
)


def _scenario(setup: tuple, policy_text: str, n_requests: int, arrivals: str, prompt_tokens: str,
              output_tokens: str, lengths_from: Path | None, max_batch: int, max_prefill_tokens: int,
              draft_sync: str, slo_tpot_s: float | None, slo_ttft_s: float | None, seed: int) -> tuple[Any, list, bool]:
    """(scenario, policies, the workload is a trace with its own clock)."""
    from simulator.capacity import Scenario
    from simulator.metrics import SLO
    from simulator.policies import parse_policies
    from simulator.serving import EngineConfig, StepCosts, engine_kv_tokens
    from simulator.workload import parse_lengths, resampled, synthetic

    cost, target_spec, draft_spec, acceptance, _ = setup
    policies = parse_policies(policy_text, acceptance)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    if arrivals.startswith("trace:"):
        from scenarios.traces import load_request_trace

        workload, timed = load_request_trace(arrivals[6:]).head(n_requests), True
    elif lengths_from is not None:
        from scenarios.traces import load_lengths

        prompts, outputs = load_lengths(lengths_from)
        workload, timed = resampled(arrivals, n_requests, prompts, outputs, rng, lengths_from.name), False
    else:
        workload = synthetic(arrivals, n_requests, parse_lengths(prompt_tokens, "--prompt-tokens"),
                             parse_lengths(output_tokens, "--output-tokens"), rng)
        timed = False
    config = EngineConfig(max_batch=max_batch, max_prefill_tokens=max_prefill_tokens, draft_sync=draft_sync)
    scenario = Scenario(workload, StepCosts(cost, target_spec, draft_spec), acceptance, config, seed,
                        SLO(slo_tpot_s, slo_ttft_s))
    for policy in policies:  # refuse a workload that cannot fit before any progress bar starts
        engine_kv_tokens(workload, scenario.costs, policy, config)
    return scenario, policies, timed


def _simulate_runs(setup: tuple, rates: list[float] | None, engines: int, router: str, **serving: Any) -> tuple:
    from simulator.capacity import rate_sweep

    scenario, policies, timed = _scenario(setup, **serving)
    if timed and rates:
        raise click.UsageError("a trace keeps its own arrival times: drop --rate (or use --arrivals poisson with "
                               "--lengths-from FILE)")
    grid: list[float | None] = [None] if timed else list(rates or [1, 2, 4, 8, 16, 32, 64])
    with _click_progress("simulating", len(grid) * len(policies)) as bar:
        results = rate_sweep(scenario, policies, grid, engines, router, tick=lambda: bar.update(1))
    return scenario, results


@cli.command()
@_setup_options
@click.option("--rate", "rates", type=RatesParam(), default=None,
              help="Request rates, all engines together (req/s), e.g. 1..64:x2 [default: 1..64:x2].")
@click.option("--engines", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="Identical engines behind the router.")
@_serving_options
@click.option("--json", "as_json", is_flag=True, help="Print every metric as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print every metric as CSV.")
@click.option("--plot", "plot_paths", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw TPOT p50/p99 vs request rate to this PNG/SVG (repeatable).")
def simulate(acceptance_spec: str | None, hardware: str | None, profile_path: Path | None, target: str | None,
             draft: str | None, dtype: str, rates: list[float] | None, engines: int, as_json: bool, as_csv: bool,
             plot_paths: tuple[Path, ...], router: str, **serving: Any) -> None:
    """Serve a stream of requests with each speculation policy (a simpy discrete-event simulation).

    \b
    specsim simulate --hardware h100-sxm --acceptance iid:0.7 --rate 5..60:5 \\
        --policy off,fixed:4,threshold:4@64,adaptive
    specsim simulate --rate 1..16:x2 --slo-tpot-ms 50     # this machine's profile and measured acceptance
    specsim simulate --hardware h100-sxm --acceptance vllm-metrics:metrics.txt --arrivals gamma:3 --rate 20
    """
    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    setup = _setup(acceptance_spec, hardware, profile_path, target, draft, dtype)
    scenario, results = _simulate_runs(setup, rates, engines, router, **serving)
    metrics = [m for _, m in results]
    for path in plot_paths:
        from plots.serving import tpot_vs_rate

        _save_figure(tpot_vs_rate(metrics, scenario.slo, caption=setup[4]), path)
    if as_json:
        click.echo(json.dumps({"specsim_version": __version__, "setup": setup[4], "workload": scenario.workload.label,
                               "slo": scenario.slo.label,
                               "runs": [{**m.as_dict(), "accepted_length_histogram": {
                                   label: counts.tolist() for label, counts in run.accepted_hist.items()}}
                                   for run, m in results]}, indent=1, default=float))
    elif as_csv:
        from simulator.serving_report import metrics_to_csv

        click.echo(metrics_to_csv(metrics), nl=False)
    else:
        from simulator.serving_report import format_serving_table

        click.echo(f"{setup[4]}\n{scenario.workload.label}, {len(scenario.workload)} requests, {engines} engine(s)")
        click.echo(format_serving_table(metrics, scenario.slo.label), nl=False)
        for path in plot_paths:
            click.echo(f"plot written to {path}")


@cli.command()
@_setup_options
@click.option("--load-rps", type=click.FloatRange(0, min_open=True), default=None,
              help="Load to size a fleet for (requests/s, all engines together).")
@click.option("--attainment", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True,
              help="Share of requests that must meet the SLO.")
@_serving_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(acceptance_spec: str | None, hardware: str | None, profile_path: Path | None, target: str | None,
         draft: str | None, dtype: str, load_rps: float | None, attainment: float, router: str, as_json: bool,
         **serving: Any) -> None:
    """The highest request rate per engine that meets an SLO, for each policy, and the engines a load needs.

    \b
    specsim plan --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 20 --load-rps 200
    specsim plan --slo-tpot-ms 50 --slo-ttft-ms 2000 --policy off,threshold:4@16,adaptive
    """
    from simulator.capacity import engines_for_load, max_rate

    setup = _setup(acceptance_spec, hardware, profile_path, target, draft, dtype)
    if serving["slo_tpot_s"] is None and serving["slo_ttft_s"] is None:
        raise click.UsageError("give an SLO to plan for: --slo-tpot-ms 50 and/or --slo-ttft-ms 2000")
    if serving["arrivals"].startswith("trace:"):
        raise click.UsageError("plan scales the request rate; use --arrivals poisson|gamma:CV with --lengths-from "
                               "FILE instead of a timed trace")
    scenario, policies, _ = _scenario(setup, **serving)
    caps, fleets = [], []
    per_policy = 14 + (3 if load_rps else 0)  # a typical search: doublings, bisection, fleet checks
    with _click_progress("searching rates", per_policy * len(policies)) as bar:
        for policy in policies:
            caps.append(max_rate(scenario, policy, attainment, tick=lambda: bar.update(1)))
            if load_rps:
                fleets.append(engines_for_load(scenario, policy, load_rps, caps[-1], attainment, router,
                                               tick=lambda: bar.update(1)))
    if as_json:
        from dataclasses import asdict

        click.echo(json.dumps({"specsim_version": __version__, "setup": setup[4], "workload": scenario.workload.label,
                               "slo": scenario.slo.label, "attainment": attainment,
                               "max_rate": [asdict(c) for c in caps], "fleet": [asdict(f) for f in fleets]},
                              indent=1, default=float))
    else:
        from simulator.serving_report import format_plan

        click.echo(f"{setup[4]}\n{scenario.workload.label}, {len(scenario.workload)} requests per simulation")
        click.echo(format_plan(caps, fleets, scenario.slo.label, attainment), nl=False)


@cli.command()
@_setup_options
@click.option("--format", "fmt", type=click.Choice(["vllm", "json"]), default="vllm", show_default=True,
              help="vllm: num_speculative_tokens_per_batch_size ranges; json: the same with predicted speed-ups.")
@click.option("--batch", "batches", type=IntRangeParam(1), default="1..256", show_default=True,
              help="Batch sizes to cover (contiguous from 1).")
@click.option("--k", "ks", type=IntRangeParam(0), default="0..8", show_default=True, help="Draft lengths allowed.")
@click.option("--context", type=click.IntRange(0), default=1024, show_default=True,
              help="Cached tokens per sequence the table is made for.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file (atomically) instead of stdout.")
def policy(acceptance_spec: str | None, hardware: str | None, profile_path: Path | None, target: str | None,
           draft: str | None, dtype: str, fmt: str, batches: list[int], ks: list[int], context: int,
           out_path: Path | None) -> None:
    """Export the best draft length per batch size as a table a serving engine can read.

    \b
    specsim policy --hardware h100-sxm --acceptance iid:0.7 --format vllm
    specsim policy --hardware h100-sxm --acceptance vllm-metrics:metrics.txt --format json --out policy.json
    """
    from simulator.serving_report import batch_ranges, policy_table
    from simulator.sweep import chains, sweep

    if batches != list(range(1, max(batches) + 1)):
        raise click.UsageError("--batch must cover every batch from 1 (e.g. 1..256): engines look the table up by "
                               "batch size")
    cost, target_spec, draft_spec, acceptance, caption = _setup(acceptance_spec, hardware, profile_path, target,
                                                                draft, dtype)
    result = sweep(cost, target_spec, draft_spec, acceptance, batches, chains(sorted(set(ks) | {0})), [context])
    table = policy_table(result)
    if len(table) < len(batches):
        raise SpecsimError(f"the models do not fit in memory above batch {len(table)} at context {context}: cover "
                           f"--batch 1..{len(table)}")
    ranges = batch_ranges([(b, k) for b, k, _ in table])
    if fmt == "vllm":
        text = json.dumps(ranges) + "\n"
    else:
        speedup = {b: x for b, _, x in table}
        text = json.dumps({
            "specsim_version": __version__, "setup": caption, "context": context,
            "num_speculative_tokens_per_batch_size": ranges,
            "ranges": [{"batch_from": lo, "batch_to": hi, "k": k,
                        "predicted_speedup_min": min(speedup[b] for b in range(lo, hi + 1)),
                        "predicted_speedup_max": max(speedup[b] for b in range(lo, hi + 1))} for lo, hi, k in ranges],
        }, indent=1) + "\n"
    if out_path:
        from calibrate.files import atomic_write_text

        atomic_write_text(out_path, text)
        click.echo(f"policy written to {out_path}", err=True)
    else:
        click.echo(text, nl=False)


_out_option = click.option("--out", "out_paths", multiple=True, required=True,
                           type=click.Path(dir_okay=False, path_type=Path),
                           help="Figure file, .png or .svg (repeat for both).")


def _save_all(fig: Any, paths: tuple[Path, ...]) -> None:
    for path in paths:
        _save_figure(fig, path)
        click.echo(f"plot written to {path}")


@cli.group(name="plot")
def plot_group() -> None:
    """The capacity-planning figures (PNG or SVG).

    \b
    specsim plot speedup    --hardware h100-sxm --acceptance iid:0.6 --out speedup.png
    specsim plot best-k     --hardware h100-sxm --acceptance iid:0.6 --out best-k.png
    specsim plot tpot       --hardware h100-sxm --acceptance iid:0.7 --rate 5..60:5 --out tpot.png
    specsim plot roofline   --out roofline.png              # this machine's calibrated passes
    specsim plot acceptance --trace data/trace.jsonl --k 4 --out acceptance.png
    """


@plot_group.command(name="speedup")
@_setup_options
@click.option("--batch", "batches", type=IntRangeParam(1), default="1..256", show_default=True, help="Batch sizes.")
@click.option("--k", "ks", type=IntRangeParam(0), default="0..8", show_default=True, help="Draft lengths.")
@click.option("--tree", "trees", multiple=True, metavar="B1,B2,...", help="Tree shapes too (repeatable).")
@click.option("--context", "contexts", type=IntRangeParam(0), default="128,1024", show_default=True,
              help="Contexts, one panel each.")
@_out_option
def plot_speedup(acceptance_spec: str | None, hardware: str | None, profile_path: Path | None, target: str | None,
                 draft: str | None, dtype: str, batches: list[int], ks: list[int], trees: tuple[str, ...],
                 contexts: list[int], out_paths: tuple[Path, ...]) -> None:
    """(a) Speed-up vs batch, one line per k; where speculation should be off shaded, the crossover marked."""
    from plots.speedup import speedup_vs_batch
    from simulator.sweep import sweep

    cost, target_spec, draft_spec, acceptance, caption = _setup(acceptance_spec, hardware, profile_path, target,
                                                                draft, dtype)
    result = sweep(cost, target_spec, draft_spec, acceptance, batches, _candidates(ks, trees, None, acceptance),
                   contexts)
    _save_all(speedup_vs_batch(result, title=caption), out_paths)


@plot_group.command(name="best-k")
@_setup_options
@click.option("--batch", "batches", type=IntRangeParam(1), default="1..256:x2", show_default=True,
              help="Batch sizes (columns).")
@click.option("--k", "ks", type=IntRangeParam(0), default="0..8", show_default=True, help="Draft lengths allowed.")
@click.option("--context", "contexts", type=IntRangeParam(0), default="128,512,1024,2048,4096,8192,16384",
              show_default=True, help="Contexts (rows).")
@_out_option
def plot_best_k(acceptance_spec: str | None, hardware: str | None, profile_path: Path | None, target: str | None,
                draft: str | None, dtype: str, batches: list[int], ks: list[int], contexts: list[int],
                out_paths: tuple[Path, ...]) -> None:
    """(b) The best draft length over batch size x context length."""
    from plots.capacity import best_k_map
    from simulator.sweep import chains, sweep

    cost, target_spec, draft_spec, acceptance, caption = _setup(acceptance_spec, hardware, profile_path, target,
                                                                draft, dtype)
    result = sweep(cost, target_spec, draft_spec, acceptance, batches, chains(sorted(set(ks) | {0})), contexts)
    _save_all(best_k_map(result, caption), out_paths)


@plot_group.command(name="tpot")
@_setup_options
@click.option("--rate", "rates", type=RatesParam(), default=None,
              help="Request rates (req/s, all engines together) [default: 1..64:x2].")
@click.option("--engines", type=click.IntRange(1, 4096), default=1, show_default=True, help="Engines in the fleet.")
@_serving_options
@_out_option
def plot_tpot(acceptance_spec: str | None, hardware: str | None, profile_path: Path | None, target: str | None,
              draft: str | None, dtype: str, rates: list[float] | None, engines: int, router: str,
              out_paths: tuple[Path, ...], **serving: Any) -> None:
    """(c) TPOT p50/p99 (and TTFT) vs request rate, one colour per policy (runs `simulate`)."""
    from plots.serving import tpot_vs_rate

    setup = _setup(acceptance_spec, hardware, profile_path, target, draft, dtype)
    scenario, results = _simulate_runs(setup, rates, engines, router, **serving)
    caption = f"{setup[4]}\n{scenario.workload.label}, {len(scenario.workload)} requests, {engines} engine(s)"
    _save_all(tpot_vs_rate([m for _, m in results], scenario.slo, caption=caption), out_paths)


@plot_group.command(name="roofline")
@click.option("--hardware", metavar="NAME", help="Hardware preset: modelled passes [default: the profile's measured "
              "passes].")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibration profile [default: the latest of this device].")
@click.option("--target", default=None, metavar="NAME|config.json", help="Target model (hardware mode).")
@click.option("--draft", default=None, metavar="NAME|config.json", help="Draft model (hardware mode).")
@click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True, help="Dtype (hardware mode).")
@click.option("--context", type=click.IntRange(0), default=1024, show_default=True,
              help="Context of the modelled passes (hardware mode).")
@_out_option
def plot_roofline(hardware: str | None, profile_path: Path | None, target: str | None, draft: str | None, dtype: str,
                  context: int, out_paths: tuple[Path, ...]) -> None:
    """(d) Roofline of this device (micro-benchmarked ceilings) with the calibrated passes as points."""
    from plots.roofline import roofline_chart
    from simulator.roofline import measured_points, modelled_points

    cost, target_spec, draft_spec, where = _device_and_models(hardware, profile_path, target, draft, dtype)
    hw = cost.hardware
    if hardware:
        points = modelled_points(cost, [target_spec, draft_spec], [1, 2, 4, 8, 16, 32, 64, 128, 256], [1, 5], context)
        bw, peak = hw.mem_bw_bytes_per_s * hw.bw_efficiency, hw.peak_flops(dtype) * hw.flops_efficiency
        ceiling = f"({hw.bw_efficiency:.0%} of datasheet bandwidth, {hw.flops_efficiency:.0%} of {dtype} FLOP/s)"
    else:
        from calibrate.profile import spec_from_dict

        profile, _ = _resolve_profile(profile_path)
        specs = {m["name"]: spec_from_dict(m) for m in (profile["models"]["target"], profile["models"]["draft"])}
        points = measured_points(cost, specs, profile["passes"])
        dt = target_spec.dtype
        bw, peak = hw.mem_bw_bytes_per_s, hw.peak_flops(dt)
        ceiling = f"(micro-benchmarked read bandwidth, {dt} GEMM FLOP/s)"
    caption = f"{target_spec.name} and {draft_spec.name} on {where}"
    _save_all(roofline_chart(points, bw, peak, caption, ceiling), out_paths)


@plot_group.command(name="acceptance")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibration profile whose measured acceptance to show [default: the latest of this device].")
@click.option("--trace", "trace_spec", default=None, metavar="FILE[:COLUMN]",
              help="A greedy acceptance trace (JSONL, e.g. the production traces) instead of the profile.")
@click.option("--k", type=click.IntRange(1, 16), default=4, show_default=True, help="Drafts per step.")
@_out_option
def plot_acceptance(profile_path: Path | None, trace_spec: str | None, k: int, out_paths: tuple[Path, ...]) -> None:
    """(e) Accepted-length histogram: measured steps against the acceptance models."""
    from plots.acceptance import accepted_length_histogram
    from simulator.acceptance import IIDAcceptance, from_measured, iid_from_mean_length, parse_acceptance

    if trace_spec:
        if profile_path:
            raise click.UsageError("give --trace or --profile, not both")
        trace = parse_acceptance(f"trace:{trace_spec}")
        measured = trace.chain_pmf(k)
        label = "replayed trace"
        alpha = trace.alpha
        caption = f"greedy acceptance trace {trace_spec}"
    else:
        profile, path = _resolve_profile(profile_path)
        if not profile.get("acceptance"):
            raise SpecsimError(f"profile {path} has no measured acceptance; calibrate the built-in pair or use --trace")
        acc = profile["acceptance"]
        if k > len(acc["survival"]):
            raise SpecsimError(f"the profile measured acceptance up to k = {len(acc['survival'])}; use --k "
                               f"{len(acc['survival'])} or less")
        measured = from_measured(acc, "positional").chain_pmf(k)  # P(A = a) from the measured P(A >= i)
        label = f"measured (per-token acceptance, {acc['prompts']} prompts x {acc['tokens_per_prompt']} tokens)"
        caption = f"built-in pair, profile {path.name}"
        alpha = float(acc["alpha"])
    same_mean = iid_from_mean_length(float(np.dot(np.arange(1, k + 2), measured)), k)
    models = {
        f"iid, same alpha ({alpha:.3f})": IIDAcceptance(alpha).chain_pmf(k),
        f"iid, same E[A + 1] (alpha {same_mean.alpha:.3f})": same_mean.chain_pmf(k),
    }
    if not trace_spec:
        models["markov fit"] = from_measured(profile["acceptance"], "markov").chain_pmf(k)
        if profile["acceptance"].get("beta"):
            models["beta fit"] = from_measured(profile["acceptance"], "beta").chain_pmf(k)
    _save_all(accepted_length_histogram(measured, models, k, label, caption), out_paths)


def _params(spec: Any) -> str:
    n = spec.n_params
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def _calibrated(profile_path: Path | None, target: str | None, draft: str | None, dtype: str) -> tuple:
    """Cost model and models from a profile: --profile FILE, else the latest one measured on this device."""
    from calibrate.profile import cost_model_from_profile, spec_from_dict
    from scenarios import load_model

    profile, profile_path = _resolve_profile(profile_path)
    cost = cost_model_from_profile(profile)
    t = load_model(target, dtype) if target else spec_from_dict(profile["models"]["target"])
    d = load_model(draft, dtype) if draft else spec_from_dict(profile["models"]["draft"])
    fit = profile["fit"]["heldout"]
    where = (f"{profile['device']['name']} (calibrated {profile['created'][:10]}, held-out pass error median "
             f"{100 * fit['median_abs_err']:.1f} %)")
    return cost, t, d, where


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
