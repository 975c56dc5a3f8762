"""What users type and how the CLI reads it: click parameter types for ranges, rates and latencies (one-line
errors for malformed ones), the option groups several commands share (setup, serving, served validation), and
the step from options to the library's inputs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.output import check_figures, progress, say_notes, write_figures
from simulator import SpecsimError, limits
from simulator.ranges import parse_int_range, parse_latency_s, parse_positive_floats

if TYPE_CHECKING:
    from scenarios.serving_scenario import ServingOptions
    from scenarios.setup import Setup
    from simulator.capacity import Scenario
    from simulator.metrics import ServingMetrics
    from simulator.policies import Policy
    from simulator.serving import ServingRun

DTYPES = ["bf16", "fp16", "fp32", "fp8", "nvfp4", "mxfp4", "w4a16", "q4_k_m", "q5_k_m", "q8_0"]


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
            self.fail(f"{value!r} is not a finite number; give one from {self.lo:g} to {self.hi:g}", param, ctx)
        if v < self.lo or (self.min_open and v == self.lo):
            self.fail(f"{value!r} must be {'>' if self.min_open else '>='} {self.lo:g}", param, ctx)
        if v > self.hi:
            self.fail(f"{value!r} is above the largest, {self.hi:g}{': ' + self.why if self.why else ''}", param, ctx)
        return v


RATES = _Parsed("RATES", lambda v, what: parse_positive_floats(v, "request rate"))


def Latency(highest_s: float) -> _Parsed:  # noqa: N802
    """A latency limit in milliseconds (``50``, ``50ms``) or seconds (``0.5s``), returned in seconds."""
    return _Parsed("MS", lambda v, what: parse_latency_s(v, what, 1e-5, highest_s))


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
    dtype: str | None  # None: not given (bf16 on a preset, the profile's own on a profile)
    engine: str | None = None
    tp: int = 1
    draft_tp: int | None = None
    heterogeneous_vocab: bool = False
    expert_sharing: float | None = None
    routing_skew: float | None = None  # None: the profile's routing (uniform for a preset)
    power_law_routing: float | None = None
    engine_settings: tuple[str, ...] = ()  # KEY=VALUE overrides of the engine version's settings
    ep: int = 1  # expert-parallel degree (MoE targets; simulator.moe_parallel)
    dp: int = 1  # DP-attention groups

    @property
    def engine_name(self) -> str | None:
        """--engine with --engine-setting's overrides carried in the preset's name (ENGINE@VERSION+KEY=VALUE;...)."""
        if not self.engine_settings:
            return self.engine
        from scenarios.engine_presets import engine_setting

        for s in self.engine_settings:
            engine_setting(s)  # refused in one line where malformed
        if self.profile_path and not self.engine:
            raise SpecsimError("--engine-setting changes an engine preset's settings: give --engine NAME with a "
                               "profile")
        return f"{self.engine or 'vllm'}+{';'.join(self.engine_settings)}"

    def resolve(self, need_acceptance: bool = True) -> Setup:
        """The `scenarios.setup.Setup` these options name, refused where an option given does not apply to it (a
        routing option to a dense target, a dtype to a profile measured in another); its notes said on stderr."""
        from scenarios.setup import resolve_setup

        spread = self.ep > 1 or self.dp > 1
        if spread and (not self.hardware or self.draft_tp is not None):
            raise SpecsimError("--ep and --dp spread a preset's MoE target over GPUs: give --hardware, and no "
                               "--draft-tp (the draft goes on the target's layout)")
        s = resolve_setup(self.hardware, self.profile_path, self.target, self.draft, self.dtype or "bf16",
                          self.acceptance_spec, need_acceptance, self.engine_name, 1 if spread else self.tp,
                          self.draft_tp, progress, self.heterogeneous_vocab, self.expert_sharing, self.routing_skew,
                          self.power_law_routing)
        if spread:  # experts over GPUs, attention in data-parallel groups (simulator.moe_parallel)
            from scenarios.layouts import apply_layout

            s = apply_layout(s, self.hardware, self.tp, self.ep, self.dp)
        given = {"--expert-sharing": self.expert_sharing, "--routing-skew": self.routing_skew,
                 "--power-law-routing": self.power_law_routing}
        routing = [flag for flag, v in given.items() if v is not None]
        if routing and not s.target.is_moe:  # as `specsim calibrate` refuses --expert-sharing
            one = len(routing) == 1
            raise SpecsimError(f"{', '.join(routing)} {'routes' if one else 'route'} an MoE target's tokens; "
                               f"{s.target.name} is dense: drop {'it' if one else 'them'}, or give an MoE --target "
                               "(e.g. qwen3-30b-a3b)")
        measured = s.profile.target.dtype if s.profile is not None and not self.hardware else None
        if self.dtype and measured and self.dtype != measured:
            raise SpecsimError(f"--dtype {self.dtype} with profile {s.profile.path}: the profile measured its passes "
                               f"in {measured} and prices them so; drop --dtype, or give --hardware NAME --dtype "
                               f"{self.dtype} to price {self.dtype} on a preset")
        rates = s.cost.hardware.rates_source.split(";")[0]
        if self.hardware and rates.startswith("assumed"):  # the achieved fractions no one measured on this GPU
            s = replace(s, notes=(*s.notes, f"{s.cost.hardware.name}'s achieved fractions of its datasheet are "
                                  f"{rates} (docs/hardware.md; specsim calibrate on the GPU measures them)"))
        if self.hardware:  # a preset: does a measured kernel price this GPU against its datasheet's order?
            from scenarios.datasheet_order import datasheet_order_notes

            order = tuple(datasheet_order_notes(s.cost.hardware.name, self.engine or "vllm", s.target))
            s = replace(s, notes=(*s.notes, *order), datasheet_order=order)
            if (self.engine or "vllm") == "vllm":  # the preset and its GPU's kernel tables differ (routes_check.py)
                from scenarios.datasheet_order import route_notes

                routed = bool(self.power_law_routing or self.routing_skew)
                s = replace(s, notes=(*s.notes, *route_notes(s.cost.hardware.name, s.target, routed)))
        return say_notes(s)


def engine_named(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--engine as given: an empty name is refused (it once fell back to vLLM's costs without a word)."""
    if value is not None and not value.strip():
        from scenarios import engine_names

        raise click.BadParameter(f"{value!r} names no engine: give one of {', '.join(engine_names())}, or leave "
                                 "--engine out for the default")
    return value


ACCEPTANCE_HELP = ("Acceptance model: iid:A, positional:A1,A2,..., beta:a,b, markov:AE,AH,PEH,PHE, "
                    "trace:FILE[:eagle|ngram], ranks:R1,R2,..., an engine's counters (vllm-metrics:FILE, "
                    "sglang:FILE@K, trtllm:FILE[@K], accept-length:L@K), or "
                    "measured[:positional|iid|beta|markov|trace|ranks]; @proposed:P for a model-free draft (the "
                    "share of steps it proposes on) [default: the profile's measured acceptance; a preset needs "
                    "it].")
setup_options = packed(
    "setup", SetupOptions,
    click.option("--acceptance", "acceptance_spec", metavar="SPEC", default=None, help=ACCEPTANCE_HELP),
    click.option("--hardware", metavar="NAME|FILE.toml",
                 help="Hardware preset, e.g. h100-sxm (specsim hardware list), or your own GPU as a file "
                      "(specsim hardware show NAME > my-gpu.toml; docs/hardware.md) [default: a calibration profile]."),
    click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="Calibration profile, from this or any machine [default: the latest measured on this machine]."),
    click.option("--target", default=None, metavar="NAME|config.json",
                 help="Target model [default: the profile's, else llama-3.1-8b]."),
    click.option("--draft", default=None, metavar="SPEC",
                 help="The draft: a model (NAME or config.json), an EAGLE-3 head (eagle3[:layers=L,vocab=V] or "
                      "eagle3:config.json), MTP modules (mtp[:N]), Medusa heads (medusa:H), or a model-free lookup "
                      "(ngram, suffix, retrieval[:us_per_seq=U,ns_per_token=N,overlap]) [default: the profile's, "
                      "else llama-3.2-1b]."),
    click.option("--dtype", type=click.Choice(DTYPES), default=None,
                 help="Weight and KV-cache dtype (presets and config.json models; nvfp4 and mxfp4 weights keep an "
                      "fp8 cache and run on fp4 tensor cores where the GPU has them) [default: bf16; a profile's "
                      "own, which another refuses]."),
    click.option("--engine", default=None, metavar="vllm|sglang|tensorrt-llm|gpt-fast", callback=engine_named,
                 help="Serving engine whose per-step costs are added (scenarios/engines.toml) [default: vllm with "
                      "--hardware; with a profile, the calibrated engine's own, and a name prices the profiled "
                      "device's measured rates with that engine's costs]."),
    click.option("--engine-setting", "engine_settings", multiple=True, metavar="KEY=VALUE",
                 help="Override a setting of the engine's version, as its launch flags would (repeatable): "
                      "max_num_seqs, max_running_requests, cuda_graph_max_bs, cuda_graph_max_tokens, eager_layer_us, "
                      "overlap_scheduler, drafter_in_graphs, graphed_costs_add, verify_tokens_add, attention_backend "
                      "(scenarios/engines.toml)."),
    click.option("--tp", type=click.IntRange(1, limits.MAX_TP), default=1, show_default=True,
                 help="Tensor-parallel GPUs per engine (presets): weights and KV cache split, all-reduces priced on "
                      "the preset's interconnect."),
    click.option("--ep", type=click.IntRange(1, limits.MAX_TP), default=1, show_default=True,
                 help="MoE targets: expert-parallel GPUs, each holding 1/EP of the experts; --tp counts the engine's "
                      "GPUs and must be a multiple (SGLang's --tp 8 --ep-size 8); all-to-alls from AIConfigurator's "
                      "DeepEP tables where measured."),
    click.option("--dp", type=click.IntRange(1, limits.MAX_TP), default=1, show_default=True,
                 help="MoE targets: DP attention groups, each with its own batch and KV cache (SGLang's "
                      "--enable-dp-attention --dp N); attention split --tp / --dp ways inside a group."),
    click.option("--draft-tp", type=click.IntRange(1, limits.MAX_TP), default=None,
                 help="GPUs the draft is split over [default: as --tp, as vLLM does; 1 keeps it on one GPU]."),
    click.option("--heterogeneous-vocab", is_flag=True,
                 help="Accept a draft model with another vocabulary than the target's, its tokens mapped on the "
                      "host (vLLM's heterogeneous-vocabulary mode; priced at an assumed 10 us per drafted token)."),
    click.option("--expert-sharing", type=float, default=None, metavar="S",
                 help="MoE targets: how much one sequence's tokens share experts, 0 (routed independently) to 1 (all "
                      "alike) [default: 0.5, from measured verify passes; docs/cost-model.md]."),
    click.option("--routing-skew", type=Finite(0.0, 100.0), default=None, metavar="Z",
                 help="MoE targets: Zipf exponent of the experts' popularity (0: uniform routing) [default: a "
                      "profile's stored routing, else 0]."),
    click.option("--power-law-routing", type=Finite(0.0, 100.0), default=None, metavar="A",
                 help="MoE targets: route as AIConfigurator measured its MoE kernels, every pass's expert loads drawn "
                      "from a power law of exponent A > 1 (1.2: Qwen3's, 1.01: DeepSeek's) [default: a profile's "
                      "stored routing, else off]."),
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


def _serving(**kw: Any) -> ServingOptions:
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

    def serving(self, quick: bool, seed: int) -> ServingOptions:
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

def scenario_from(setup: Setup, serving: ServingOptions) -> tuple[Scenario, list[Policy]]:
    """A setup and `serving_options` resolved into a serving scenario and its policies."""
    from scenarios.serving_scenario import build_scenario

    return build_scenario(setup.cost, setup.target, setup.draft, setup.acceptance, serving)


def simulate_from(setup: Setup, rates: list[float] | None, engines: int, serving: ServingOptions
                  ) -> tuple[Scenario, list[tuple[ServingRun, ServingMetrics]]]:
    """The scenario, and every policy simulated at every rate with a progress bar."""
    from scenarios.serving_scenario import simulate_rates

    scenario, policies = scenario_from(setup, serving)
    return scenario, simulate_rates(scenario, policies, rates, engines, serving.router, serving.timed_trace,
                                    progress, serving.executor)
