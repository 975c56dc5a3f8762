"""What users type and how the CLI reads and answers it: click parameter types for ranges, rates and latencies; the
option groups several commands share; one-line errors; progress for a terminal or a log; notes on stderr; figures and
text written all or nothing after every output path was checked. `specsim.py` declares the commands with these."""

from __future__ import annotations

import contextlib
import functools
import io
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from simulator import SpecsimError, limits
from simulator.ranges import parse_int_range, parse_latency_s, parse_positive_floats

DTYPES = ["bf16", "fp16", "fp32", "fp8"]
FIGURES = (".png", ".svg", ".pdf")


class _Parsed(click.ParamType):
    """A parameter parsed by a library function that raises SpecsimError (its message becomes click's)."""

    def __init__(self, name: str, parse: Callable[[str, str], Any]) -> None:
        self.name, self.parse = name, parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.parse(value, param.opts[0] if param is not None and param.opts else "value")
        except SpecsimError as e:
            self.fail(str(e), param, ctx)


def IntRange(minimum: int = 0, maximum: int | None = None, why: str = "") -> _Parsed:  # noqa: N802
    """``1..256``, ``1..64:x2``, ``0..16:2`` or ``1,2,4``: a sorted list of integers in [minimum, maximum] (`why`
    the maximum; `simulator.limits`)."""
    return _Parsed("RANGE", lambda v, what: parse_int_range(v, minimum, what, maximum, why))


KS = IntRange(0, limits.MAX_DRAFT_TOKENS, limits.WHY_DRAFT)  # draft lengths
SEED = click.IntRange(0, 2**63 - 1)  # what numpy's and torch's generators take
BATCHES = IntRange(1, limits.MAX_BATCH, limits.WHY_BATCH)
CONTEXTS = IntRange(0, limits.MAX_CONTEXT, limits.WHY_CONTEXT)


class Finite(click.ParamType):
    """A finite number in [lo, hi] (open at lo with `min_open`): NaN and infinities refused, unlike click's
    FloatRange, which lets NaN through."""

    name = "NUMBER"

    def __init__(self, lo: float, hi: float, min_open: bool = False, why: str = "") -> None:
        self.lo, self.hi, self.min_open, self.why = lo, hi, min_open, why

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if v != v or v in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if v < self.lo or (self.min_open and v == self.lo):
            self.fail(f"{value!r} must be {'>' if self.min_open else '>='} {self.lo:g}", param, ctx)
        if v > self.hi:
            self.fail(f"{value!r} is above the largest, {self.hi:g}{': ' + self.why if self.why else ''}", param, ctx)
        return v


RATES = _Parsed("RATES", lambda v, what: parse_positive_floats(v, "request rate"))


def Latency(highest_s: float) -> _Parsed:  # noqa: N802
    """A latency limit in milliseconds (``50``, ``50ms``) or seconds (``0.5s``), returned in seconds."""
    return _Parsed("MS", lambda v, what: parse_latency_s(v, what, 1e-5, highest_s))


class OneLineErrors(click.Group):
    """Every usage error and every SpecsimError becomes one line on stderr and exit code 2 (no usage dump, no
    traceback); Ctrl-C exits 130."""

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        extra.pop("standalone_mode", None)
        try:
            rv = super().main(args=args, prog_name=prog_name or "specsim", standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("specsim: interrupted", err=True)
            sys.exit(130)
        except (click.ClickException, SpecsimError) as e:
            message = e.format_message() if isinstance(e, click.ClickException) else str(e)
            click.echo(f"specsim: error: {' '.join(message.split())}", err=True)
            sys.exit(2)
        sys.exit(rv if isinstance(rv, int) else 0)




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
    if sys.stderr.isatty():
        with click.progressbar(length=total, label=f"{label:34s}", file=sys.stderr, show_eta=True,
                               show_pos=True) as bar:
            yield bar
    else:
        yield LogBar(label, total)


def say(*lines: str) -> None:
    """Notes for the user, on stderr (stdout stays the command's result)."""
    for line in lines:
        click.echo(line, err=True)


def say_notes(setup: Any) -> Any:
    for note in setup.notes:
        click.echo(note, err=True)
    return setup


def check_figures(paths: tuple[Path, ...] | list[Path]) -> list[Path]:
    from scenarios.files import check_outputs

    return check_outputs(paths, "figure", FIGURES)


def write_figures(figs: dict[Path, Any]) -> None:
    """Render every figure first, then write them all or none."""
    from scenarios.files import write_all

    data = {}
    for path, fig in figs.items():
        buf = io.BytesIO()
        fig.savefig(buf, format=path.suffix.lstrip(".").lower(), dpi=130)
        data[path] = buf.getvalue()
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

    if as_json:
        click.echo(json.dumps(result_to_dict(result, meta), indent=1))
    else:
        click.echo(result_to_csv(result) if as_csv else text, nl=False)


def run_predict(alpha: float | None, setup: SetupOptions, ks: list[int], cost_ratio: float | None,
                trees: tuple[str, ...], tree_budget: int | None, batches: list[int], contexts: list[int],
                as_json: bool, as_csv: bool, plot_path: Path | None) -> None:
    """`specsim predict`: formula mode (--c) or a sweep of a preset or profile, printed as text, JSON or CSV."""
    from dataclasses import replace

    from simulator import __version__
    from simulator.report import format_formula_table, format_hardware_table
    from simulator.sweep import candidates_from, formula_sweep, sweep

    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    if alpha is not None and setup.acceptance_spec:
        raise click.UsageError("give --alpha or --acceptance, not both")
    acceptance_spec = f"iid:{alpha}" if alpha is not None else setup.acceptance_spec
    plot = check_figures([plot_path])[0] if plot_path else None
    if cost_ratio is not None:
        if setup.hardware or setup.profile_path:
            raise click.UsageError("--c is formula mode; drop it to use --hardware or --profile")
        if not acceptance_spec:
            raise click.UsageError("say how often drafts are accepted: --alpha 0.7 or --acceptance SPEC")
        if plot:
            raise click.UsageError("--plot draws a sweep over batch sizes: use it with --hardware or a profile")
        from scenarios.acceptance_specs import acceptance_from_spec

        acceptance = acceptance_from_spec(acceptance_spec)
        result = formula_sweep(acceptance, candidates_from(ks, trees, tree_budget, acceptance), cost_ratio)
        meta = {"specsim_version": __version__, "acceptance": acceptance.spec, "mode": "formula", "c": cost_ratio}
        text = format_formula_table(result, cost_ratio)
    else:
        s = replace(setup, acceptance_spec=acceptance_spec).resolve()
        result = sweep(s.cost, s.target, s.draft, s.acceptance, batches,
                       candidates_from(ks, trees, tree_budget, s.acceptance), contexts)
        meta, text = s.meta(), s.heading + "\n" + format_hardware_table(result, "--json/--csv carry every row")
        if plot:
            from plots.speedup import speedup_vs_batch

            write_figures({plot: speedup_vs_batch(result, title=s.heading)})
    echo_result(result, meta, text, as_json, as_csv)


def run_validate(profile_path: Path | None, batches: list[int] | None, ks: list[int] | None,
                 trees: tuple[str, ...], repeats: int | None, new_tokens: int | None, quick: bool, as_json: bool,
                 plot_dir: Path | None, seed: int, target: str | None, draft: str | None,
                 acceptance_spec: str | None, served: ServedOptions) -> None:
    """`specsim validate`: the built-in pair on held-out prompts, or (`--acceptance`) the profile's own shapes with
    random weights and the acceptance replayed, or (`--serving`) a served stream against its simulation; the
    report as text or JSON, and the plots."""
    import json

    from calibrate.validate import check_validatable, run_shape_validation, run_validation
    from scenarios.setup import resolve_profile
    from simulator.trees import parse_branching

    if served.on:
        static = [name for name, v in (("--batch", batches), ("--k", ks), ("--repeats", repeats),
                                       ("--tokens", new_tokens)) if v]
        if static:
            raise click.UsageError(f"{', '.join(static)} size a static validation; a served stream takes --rate, "
                                   "--policy, --requests, --prompt-tokens, --output-tokens, --max-batch")
        return run_served_validation(profile_path, quick, as_json, plot_dir, seed, acceptance_spec, target, draft,
                                     served)
    if served.given:
        raise click.UsageError(f"{', '.join(served.given)} describe a served stream: add --serving")
    plots = check_figures([plot_dir / f"validation-{n}.png" for n in ("scatter", "batch")]) if plot_dir else []
    shapes = [parse_branching(t) for t in trees if t.strip()]
    if (target or draft) and not acceptance_spec:
        raise click.UsageError("--target/--draft name the shapes of a validation with --acceptance SPEC")
    profile, notes = resolve_profile(profile_path)
    if acceptance_spec:
        check_shapes(profile, target, draft)
        if shapes:
            raise click.UsageError("a validation with --acceptance replays chains: add --tree '' (trees need the "
                                   "built-in pair's real acceptance)")
        from scenarios.setup import resolve_acceptance

        say(*notes)
        report, curves = run_shape_validation(profile, resolve_acceptance(acceptance_spec, profile), batches, ks,
                                              repeats, new_tokens, served.fixed_prompt_tokens, seed, progress, quick)
    else:
        check_validatable(profile)
        say(*notes)
        report, curves = run_validation(profile, batches, ks, shapes, repeats, new_tokens, seed, progress, quick)
    if plots:
        from plots.validation import predicted_vs_measured, speedup_vs_batch

        write_figures({plots[0]: predicted_vs_measured(report), plots[1]: speedup_vs_batch(report, curves)})
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1, default=float))
    else:
        from calibrate.validate_report import format_report

        click.echo(format_report(report))


def run_served_validation(profile_path: Path | None, quick: bool, as_json: bool, plot_dir: Path | None, seed: int,
                          acceptance_spec: str | None, target: str | None, draft: str | None,
                          served: ServedOptions) -> None:
    """`specsim validate --serving`: everything checked first (profile, shapes, policies, workload, plot path), then
    the served stream and its simulation at every rate and policy, the report and TPOT against rate."""
    import json

    from calibrate.served_validation import run_serving_validation
    from calibrate.served_validation_report import format_serving_validation
    from scenarios.setup import resolve_profile

    plots = check_figures([plot_dir / "validation-serving.png"]) if plot_dir else []
    profile, notes = resolve_profile(profile_path)
    check_shapes(profile, target, draft)
    say(*notes)
    report = run_serving_validation(profile, served.serving(quick, seed), served.rates, acceptance_spec,
                                    served.time_cap(quick), seed, progress, quick, served.passes or 2)
    if plots:
        from plots.serving import served_vs_predicted

        write_figures({plots[0]: served_vs_predicted(report)})
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1, default=float))
    else:
        click.echo(format_serving_validation(report), nl=False)


def check_shapes(profile: Any, target: str | None, draft: str | None) -> None:
    """The profile was calibrated at the shapes asked for (by name), or a one-line error saying how to get one."""
    from scenarios import load_model

    for want, have in ((target, profile.target), (draft, profile.draft)):
        if want and load_model(want, have.dtype).name != have.name:
            raise SpecsimError(f"profile {profile.path} was calibrated at {profile.target.name} / "
                               f"{profile.draft.name}; calibrate these shapes first: specsim calibrate --target "
                               f"{target or profile.target.name} --draft {draft or profile.draft.name} "
                               "(then --profile that file)")


def run_sweep(spec_path: Path, executor_text: str, out_path: Path | None, plot_dir: Path | None) -> None:
    """`specsim sweep`: the spec, the executor and every output checked first; then the grid simulated, the table
    written (CSV or JSON by its suffix; CSV on stdout without --out), the capacity per configuration and policy
    said, and the figures drawn: capacity.png and one tpot-N.png per configuration."""
    import re

    from scenarios.files import check_output
    from scenarios.fleet import capacity, load_sweep_spec, run_sweep, table_text
    from simulator.executors import parse_executor

    spec = load_sweep_spec(spec_path)
    executor = parse_executor(executor_text)
    fmt = "csv"
    if out_path is not None:
        check_output(out_path, "sweep table", (".csv", ".json"))
        fmt = out_path.suffix.lower().lstrip(".")
    grid = [(h, t, d, tp) for h in spec.hardware for t, d in spec.pairs for tp in spec.tp]
    names = []
    if plot_dir is not None:
        names = check_figures([plot_dir / "capacity.png"] + [
            plot_dir / f"tpot-{i + 1}-{re.sub(r'[^a-z0-9.]+', '-', f'{h}-{t}-tp{tp}'.lower())}.png"
            for i, (h, t, _, tp) in enumerate(grid)])
    configs, rows, metrics = run_sweep(spec, executor, progress)
    caps = capacity(rows)
    slo = configs[0].scenario.slo
    say(f"{spec.simulations} simulations ({executor.label}); highest rate of the grid meeting "
        f"{slo.label if slo.tpot_s or slo.ttft_s else 'no SLO (sustained only)'} for 90 % of requests:",
        *(f"  {c['hardware']:<14} {c['target']}/{c['draft']} TP{c['tp']}  {c['policy']:<12} "
          f"{c['max_rate_per_s']:g} req/s" for c in caps))
    figures = {}
    if names:
        from plots.capacity import capacity_bars
        from plots.serving import tpot_vs_rate

        figures[names[0]] = capacity_bars(caps, f"{spec.source}: {spec.serving.n_requests} requests per simulation, "
                                                f"acceptance {spec.acceptance}")
        for path, c in zip(names[1:], configs):
            figures[path] = tpot_vs_rate([m for m, r in zip(metrics, rows) if (r["hardware"], r["target"], r["tp"])
                                          == (c.hardware, c.target, c.tp)], c.scenario.slo, caption=c.caption)
    echo_or_write(out_path, table_text(rows, fmt), "sweep table")
    if figures:
        write_figures(figures)


def echo_or_write(path: Path | None, text: str, what: str) -> None:
    if path is None:
        click.echo(text, nl=False)
    else:
        from scenarios.files import atomic_write_text

        atomic_write_text(path, text)
        click.echo(f"{what} written to {path}", err=True)


def option_group(*decorators: Any) -> Any:
    """Apply click options in the order they are listed (so --help lists them that way)."""
    def apply(f: Any) -> Any:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


def packed(name: str, make: Callable[..., Any], *decorators: Any) -> Any:
    """Options that a command receives as one object: the options' values are passed to `make` and the command gets
    the result as its `name` argument."""
    keys = [d(lambda: None).__click_params__[0].name for d in decorators]  # each decorator adds one parameter

    def decorate(f: Any) -> Any:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            kw[name] = make(**{k: kw.pop(k) for k in keys})
            return f(*args, **kw)
        return option_group(*decorators)(wrapper)
    return decorate


@dataclass(frozen=True)
class SetupOptions:
    """What `setup_options` read: a preset or a profile, the models, the dtype, the acceptance."""

    acceptance_spec: str | None
    hardware: str | None
    profile_path: Path | None
    target: str | None
    draft: str | None
    dtype: str
    engine: str = "vllm"
    tp: int = 1
    draft_tp: int | None = None

    def resolve(self, need_acceptance: bool = True) -> Any:
        """The `scenarios.setup.Setup` these options name; its notes said on stderr."""
        from scenarios.setup import resolve_setup

        return say_notes(resolve_setup(self.hardware, self.profile_path, self.target, self.draft, self.dtype,
                                       self.acceptance_spec, need_acceptance, self.engine, self.tp, self.draft_tp))


ACCEPTANCE_HELP = ("Acceptance model: iid:A, positional:A1,A2,..., beta:a,b, markov:AE,AH,PEH,PHE, "
                    "trace:FILE[:eagle|ngram], ranks:R1,R2,..., an engine's counters (vllm-metrics:FILE, "
                    "sglang:FILE@K, trtllm:FILE[@K], accept-length:L@K), or "
                    "measured[:positional|iid|beta|markov|trace|ranks] "
                    "[default: the profile's measured acceptance; a preset needs it].")
setup_options = packed(
    "setup", SetupOptions,
    click.option("--acceptance", "acceptance_spec", metavar="SPEC", default=None, help=ACCEPTANCE_HELP),
    click.option("--hardware", metavar="NAME", help="Hardware preset, e.g. h100-sxm [default: a calibration profile]."),
    click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="Calibration profile, from this or any machine [default: the latest measured on this machine]."),
    click.option("--target", default=None, metavar="NAME|config.json",
                 help="Target model [default: the profile's, else llama-3.1-8b]."),
    click.option("--draft", default=None, metavar="NAME|config.json",
                 help="Draft model [default: the profile's, else llama-3.2-1b]."),
    click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True,
                 help="Weight and KV-cache dtype (presets and config.json models)."),
    click.option("--engine", default="vllm", show_default=True, metavar="vllm|gpt-fast|tensorrt-llm",
                 help="Serving engine whose per-step costs a preset adds (scenarios/engines.toml)."),
    click.option("--tp", type=click.IntRange(1, limits.MAX_TP), default=1, show_default=True,
                 help="Tensor-parallel GPUs per engine (presets): weights and KV cache split, all-reduces priced on "
                      "the preset's interconnect."),
    click.option("--draft-tp", type=click.IntRange(1, limits.MAX_TP), default=None,
                 help="GPUs the draft is split over [default: as --tp, as vLLM does; 1 keeps it on one GPU]."),
)



serving_options = packed(
    "serving", lambda **kw: _serving(**kw),
    click.option("--policy", "policy_text", default="off,fixed:4,adaptive", show_default=True, metavar="P1,P2,...",
                 help="Speculation policies: off, fixed:K, tree:B1,B2,..., threshold:K@BATCH, adaptive[:KMAX]."),
    click.option("--requests", "n_requests", type=click.IntRange(1, limits.MAX_REQUESTS), default=2000,
                 show_default=True,
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
    click.option("--max-batch", type=click.IntRange(1, 65_536), default=256, show_default=True,
                 help="Sequences an engine decodes together."),
    click.option("--max-prefill-tokens", type=click.IntRange(1, 10_000_000), default=8192, show_default=True,
                 help="Prompt tokens one prefill step may take."),
    click.option("--draft-sync", type=click.Choice(["lazy", "eager"]), default="lazy", show_default=True,
                 help="lazy: the draft reads tokens only when it next drafts; eager: it is kept current every step "
                      "(vLLM's draft-model path)."),
    click.option("--kv-allocation", type=click.Choice(["reserve", "on-demand"]), default="reserve",
                 show_default=True,
                 help="reserve: a request's whole life at admission, never preempted; on-demand: as vLLM, the cache "
                      "grows with the tokens kept and the newest request is preempted when it runs out."),
    click.option("--router", type=click.Choice(["least-loaded", "round-robin"]), default="least-loaded",
                 show_default=True, help="How a fleet spreads requests over its engines."),
    click.option("--slo-tpot-ms", "slo_tpot_s", type=Latency(60.0), default=None,
                 help="Time-per-output-token limit, e.g. 50 (ms)."),
    click.option("--slo-ttft-ms", "slo_ttft_s", type=Latency(3600.0), default=None,
                 help="Time-to-first-token limit, e.g. 2000 (ms)."),
    click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the workload and every draw."),
    click.option("--executor", default="local", show_default=True, metavar="serial|local[:N]|ray[:ADDRESS]",
                 help="Where the independent simulations run: here, in N local processes (default: one per CPU), or "
                      "on a Ray cluster (pip install 'specsim[ray]'); the results are the same."),
    click.option("--step-by-step", is_flag=True,
                 help="Reference mode: every decode step its own simpy event (slow; the default advances an "
                      "unchanged batch in bulk, the same in distribution)."),
)


def _serving(**kw: Any) -> Any:
    from scenarios.serving_scenario import ServingOptions

    return ServingOptions(**kw)


@dataclass(frozen=True)
class ServedOptions:
    """What `validate --serving` takes (see validate --help); unset values take the quick or full defaults."""

    on: bool = False
    rates: list[float] | None = None
    policy_text: str | None = None
    arrivals: str | None = None
    n_requests: int | None = None
    prompt_tokens: str | None = None
    output_tokens: str | None = None
    max_batch: int | None = None
    time_cap_s: float | None = None
    passes: int | None = None

    @property
    def given(self) -> list[str]:
        """The serving-only options given (a static validation refuses them)."""
        names = {"rates": "--rate", "policy_text": "--policy", "arrivals": "--arrivals", "n_requests": "--requests",
                 "output_tokens": "--output-tokens", "max_batch": "--max-batch", "time_cap_s": "--time-cap-s",
                 "passes": "--passes"}
        return [flag for key, flag in names.items() if getattr(self, key) is not None]

    @property
    def fixed_prompt_tokens(self) -> int:
        """A shape validation's prompt length: one number (default 128)."""
        text = self.prompt_tokens or "128"
        try:
            n = int(text)
        except ValueError:
            n = 0
        if not 1 <= n <= 65_536:
            raise click.BadParameter(f"{text!r}: a validation with --acceptance takes one prompt length, 1..65536",
                                     param_hint="--prompt-tokens")
        return n

    def serving(self, quick: bool, seed: int) -> Any:
        from scenarios.serving_scenario import ServingOptions

        return ServingOptions(policy_text=self.policy_text or "off,fixed:4,adaptive",
                              n_requests=self.n_requests or (64 if quick else 96),
                              arrivals=self.arrivals or "poisson", prompt_tokens=self.prompt_tokens or "64..128",
                              output_tokens=self.output_tokens or ("16..80" if quick else "32..96"),
                              max_batch=self.max_batch or (8 if quick else 16), seed=seed, executor="serial")

    def time_cap(self, quick: bool) -> float:
        return self.time_cap_s or (60.0 if quick else 300.0)


served_options = packed(
    "served", ServedOptions,
    click.option("--serving", "on", is_flag=True,
                 help="Validate a served stream: the real engine with continuous batching against the simulation."),
    click.option("--rate", "rates", type=RATES, default=None,
                 help="With --serving: request rates, e.g. 1,2,4,8 [default: light load to past saturation, from the "
                      "profile]."),
    click.option("--policy", "policy_text", default=None, metavar="P1,P2,...",
                 help="With --serving: policies [default: off,fixed:4,adaptive]."),
    click.option("--arrivals", default=None, metavar="poisson|gamma:CV|trace:FILE",
                 help="With --serving: arrival process, or a trace (its gaps scaled to each --rate; its own clock "
                      "without --rate) [default: poisson]."),
    click.option("--requests", "n_requests", type=click.IntRange(1, 100_000), default=None,
                 help="With --serving: requests per run [default: 96; quick 64]."),
    click.option("--prompt-tokens", default=None, metavar="N|A..B|exp:MEAN",
                 help="Prompt length: with --acceptance one N [default: 128]; with --serving a length spec "
                      "[default: 64..128]."),
    click.option("--output-tokens", default=None, metavar="N|A..B|exp:MEAN",
                 help="With --serving: output length [default: 32..96; quick 16..80]."),
    click.option("--max-batch", type=click.IntRange(1, 4096), default=None,
                 help="With --serving: sequences the engine decodes together [default: 16; quick 8]."),
    click.option("--time-cap-s", type=Finite(1, 86_400), default=None,
                 help="With --serving: seconds a run may take after its last request arrives; a rate not served "
                      "within it is marked, not scored [default: 300; quick 60]."),
    click.option("--passes", type=click.IntRange(1, 2), default=None,
                 help="With --serving: 2 runs each rate's policies forward and back (A B C, C B A) and averages, so a "
                      "drifting machine weighs on all alike; 1 runs them once [default: 2]."),
)


out_option = click.option("--out", "out_paths", multiple=True, required=True,
                           type=click.Path(dir_okay=False, path_type=Path),
                           help="Figure file: .png, .svg or .pdf (repeat for several).")


def figure_out(f: Any) -> Any:
    """A figure command: adds the repeatable --out, checks every path before the command's work, and writes the
    Figure the command returns to all of them (or to none)."""
    @functools.wraps(f)
    def wrapper(*args: Any, out_paths: tuple[Path, ...], **kw: Any) -> None:
        paths = check_figures(out_paths)
        write_figures(dict.fromkeys(paths, f(*args, **kw)))
    return out_option(wrapper)


# -- from options to the library's inputs ----------------------------------------------------------------------------

def scenario_from(setup: Any, serving: Any) -> tuple[Any, list]:
    """A setup and `serving_options` resolved into a serving scenario and its policies."""
    from scenarios.serving_scenario import build_scenario

    return build_scenario(setup.cost, setup.target, setup.draft, setup.acceptance, serving)


def simulate_from(setup: Any, rates: list[float] | None, engines: int, serving: Any) -> tuple:
    """The scenario, and every policy simulated at every rate with a progress bar."""
    from scenarios.serving_scenario import simulate_rates

    scenario, policies = scenario_from(setup, serving)
    return scenario, simulate_rates(scenario, policies, rates, engines, serving.router, serving.timed_trace,
                                    progress, serving.executor)
