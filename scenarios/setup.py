"""What a prediction is about: the cost model (a preset's roofline or a calibration profile), the target and draft
shapes, and the acceptance model, resolved from the CLI's options into one frozen `Setup`. No torch here.

Profiles: ``--profile FILE`` works on any machine (a note says when it was measured elsewhere); without it, the latest
profile measured on this machine's CPU or GPUs is used (trusted ones first), and a machine with none gets a one-line
error saying how to get one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from scenarios import check_dtype_runs, load_hardware, load_model
from scenarios.acceptance_specs import acceptance_from_spec, split_trace_spec
from scenarios.draft_specs import load_draft
from scenarios.engine_metrics import ENGINE_KINDS
from scenarios.files import atomic_write_text, cache_dir, read_json
from scenarios.host import local_identities
from scenarios.pairing import check_draft, guesses_said
from scenarios.profile import Profile, latest_profile, load_profile
from scenarios.traces import load_acceptance_trace, load_prompt_lengths
from simulator import SpecsimError
from simulator.acceptance import Acceptance, IIDAcceptance, Proposing, iid_from_mean_length
from simulator.acceptance_fit import MODELS, AcceptanceData, FitReport, cross_validate, fit_in_sample, fit_record
from simulator.acceptance_parse import split_proposed
from simulator.context import with_context
from simulator.cost import CostModel
from simulator.drafts import Draft
from simulator.executors import parse_executor
from simulator.roofline import RooflinePoint, measured_points, modelled_points
from simulator.specs import ModelSpec

DEFAULT_TARGET, DEFAULT_DRAFT = "llama-3.1-8b", "llama-3.2-1b"
MIN_RESOLUTION = 0.01  # a preset's predictions are told apart from 1 % up


def params_label(spec: ModelSpec | Draft) -> str:
    """Parameters in words; an MoE its active ones too; a shard says its share: '1.00 B per GPU of 8'; a draft its
    kind, and nothing for a model-free one."""
    def words(v: float) -> str:
        return f"{v / 1e9:.2f} B" if v >= 1e9 else f"{v / 1e6:.1f} M"

    if isinstance(spec, Draft):
        if not spec.on_device:
            return f"{spec.kind} lookup on the host"
        kind = "" if spec.kind == "model" else f"{spec.kind}, "
        tp = spec.module.tp if spec.module is not None else 1
        label = f"{words(spec.n_params)} params"
        return f"{kind}{label}" if tp == 1 else f"{kind}{label} per GPU of {tp}"
    active = f", {words(spec.matmul_params)} active" if spec.is_moe else ""
    return f"{words(spec.n_params)} params{active}" if spec.tp == 1 else \
        f"{words(spec.n_params)} params{active} per GPU of {spec.tp}"


@dataclass(frozen=True)
class Setup:
    """A cost model with the two models it prices and how often the draft is accepted."""

    cost: CostModel
    target: ModelSpec
    draft: Draft
    acceptance: Acceptance | None
    where: str  # the device and the cost model's origin, in words
    profile: Profile | None = None
    notes: tuple[str, ...] = ()  # said once on stderr: which profile, measured elsewhere, untrusted
    engine: str | None = None  # with a profile: the serving engine whose costs replace the calibrated engine's
    engine_preset: str = ""  # the engine preset's name, version and the published sources it was fitted to
    datasheet_order: tuple[str, ...] = ()  # this GPU priced slower than one its datasheet beats (a measured kernel)

    @property
    def caption(self) -> str:
        acc = f"; acceptance {self.acceptance.spec}" if self.acceptance is not None else ""
        return f"{self.target.name} drafted by {self.draft.name} on {self.where}{acc}"

    def meta(self) -> dict[str, object]:
        """What a machine-readable result says about where its numbers come from."""
        from simulator import __version__

        return {"specsim_version": __version__, "acceptance": self.acceptance.spec if self.acceptance else None,
                "mode": "profile" if self.profile else "hardware", "hardware": self.cost.hardware.name,
                "target": self.target.name, "draft": self.draft.name, "dtype": self.target.dtype,
                "cost_model": self.cost.label, "moe_routing": routing_said(self.cost) if self.target.is_moe else None,
                "engine": (f"{self.engine} preset on the profiled device" if self.engine else
                           self.profile.engine_mode if self.profile else f"graph ({self.where.split(', ')[-1]})"),
                "trusted": self.profile.trust.trusted if self.profile else None, "engine_preset": self.engine_preset
                or None, "rates": self.cost.hardware.rates_source.split(";")[0] if not self.profile else "measured",
                **({"datasheet_order": list(self.datasheet_order)} if self.datasheet_order else {})}

    @property
    def resolution(self) -> float:
        """The relative difference below which two of this setup's predictions are not told apart: a profile's
        held-out pass-time error (its median), at least `MIN_RESOLUTION`; `MIN_RESOLUTION` for a preset."""
        heldout = self.profile.fit.heldout if self.profile else None
        return max(MIN_RESOLUTION, heldout.median_abs_err if heldout and heldout.n else 0.0)

    @property
    def heading(self) -> str:
        acc = f"; acceptance {self.acceptance.spec}" if self.acceptance is not None else ""
        return (f"{self.target.name} ({params_label(self.target)}) drafted by {self.draft.name} "
                f"({params_label(self.draft)}) on {self.where}{acc}")


def resolve_profile(path: Path | None) -> tuple[Profile, list[str]]:
    """--profile FILE (any machine's), else the latest profile measured on this machine; with the notes to show."""
    here = local_identities()
    if path is None:
        found = latest_profile(here)
        if found is None:
            raise SpecsimError("no calibration profile for this machine yet: run `specsim calibrate --quick`, or give "
                               "--hardware NAME (a preset)")
        profile = load_profile(found)
        notes = [f"using profile {found} (latest for this machine)"]
    else:
        profile = load_profile(path)
        notes = []
        if not any(profile.device.same_as(i) for i in here):
            notes.append(profile.elsewhere_note(path))
    if not profile.trust.trusted:
        notes.append(f"profile {profile.path} is UNTRUSTED ({'; '.join(profile.trust.reasons)}): treat its "
                     "predictions with care, or calibrate again")
    return profile, notes


def fit_source(source: str, profile_path: Path | None = None) -> AcceptanceData | dict[int, np.ndarray]:
    """What `acceptance fit` fits: per-request data from a greedy trace (``trace:FILE[:eagle|ngram]`` or the file
    itself) or from a profile's measurement (``measured[:PROFILE]``); or, from an engine's counters, only the step
    distribution they imply (a dict k -> P(A = a))."""
    kind, _, body = source.strip().partition(":")
    kind = kind.lower()
    if kind in ENGINE_KINDS:
        counters = acceptance_from_spec(source)
        k = getattr(counters, "k", None) or 8
        return {kk: counters.chain_pmf(kk) for kk in range(1, k + 1)}
    if kind == "measured":
        profile, _ = resolve_profile(Path(body) if body else profile_path)
        if profile.acceptance is None:
            raise SpecsimError(f"profile {profile.path} has no measured acceptance to fit")
        a = profile.acceptance
        if a.temperature == 0:
            return AcceptanceData.from_yields(a.greedy_yields, f"measured ({profile.path})")
        return AcceptanceData(a.trace_alpha, source=f"measured ({profile.path})")
    if kind == "trace" or Path(split_trace_spec(source)[0]).is_file():
        path, column = split_trace_spec(body if kind == "trace" else source)
        trace = load_acceptance_trace(path, column)
        return AcceptanceData.from_yields(trace.yields, f"{path}:{column}", load_prompt_lengths(path))
    raise SpecsimError(f"{source!r} is not a source to fit: give trace:FILE[:eagle|ngram] (a greedy trace), "
                       "measured[:PROFILE] (a calibration's measurement) or an engine's counters (vllm-metrics:FILE, "
                       "sglang:FILE@K, trtllm:FILE[@K])")


def fit_acceptance(source: str, ks: Sequence[int], folds: int, models: Sequence[str], seed: int,
                   profile_path: Path | None = None, progress: Callable[[str, int], Any] | None = None,
                   executor: str = "serial") -> FitReport:
    """Every model fitted to the source and judged on held-out requests (in-sample for an engine's counters), the
    folds' fits advancing together (`simulator.acceptance_fit.fit_models_many`), in this process unless `executor`
    names workers: on the 48-request sample 1.1-1.2 s here against 1.4-3.7 s with two local processes, on a
    310-request trace 2.0-2.1 s against 3.6-4.4 s. The source is read (and refused) before any progress shows."""
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise SpecsimError(f"unknown model {unknown[0]!r} for --models; choose from {', '.join(MODELS)}")
    data = fit_source(source, profile_path)
    if isinstance(data, dict):
        return fit_in_sample({k: v for k, v in data.items() if k in set(ks)} or data, source, models, seed)
    runner = parse_executor(executor)
    if progress is None:
        return cross_validate(data, ks, folds, models, seed, executor=runner)
    with progress(f"fitting acceptance models to {source} (folds, then all of it)", min(folds, len(data)) + 1) as bar:
        return cross_validate(data, ks, folds, models, seed, tick=lambda: bar.update(1), executor=runner)


def fitted_acceptance(body: str, profile: Profile | None, progress: Callable[[str, int], Any] | None = None
                      ) -> Acceptance:
    """``fit:FILE.json`` (what `acceptance fit --out` wrote): its chosen model; ``fit:SOURCE``: fit it now (cached
    by the source file's identity, so the next command is instant) and take the chosen model."""
    path = Path(body)
    if path.suffix == ".json" and path.is_file():
        record = read_json(path, "acceptance fit")
        if not isinstance(record, dict) or "spec" not in record or "chosen" not in record:
            raise SpecsimError(f"{path} is not what `specsim acceptance fit --out` writes")
        return acceptance_from_spec(str(record["spec"]))
    key = body
    src = Path(split_trace_spec(body.partition(":")[2] if body.startswith("trace:") else body)[0])
    if src.is_file():
        st = src.stat()
        key = f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}|{body}"
    cache = cache_dir() / "fits" / (hashlib.sha256(key.encode()).hexdigest()[:20] + ".json")
    if cache.is_file():
        return acceptance_from_spec(str(read_json(cache, "cached fit")["spec"]))
    report = fit_acceptance(body, range(1, 9), 5, MODELS, 0, profile.path if profile else None, progress)
    spec = report.models[report.chosen].spec
    if not spec.startswith("trace:"):
        atomic_write_text(cache, json.dumps(fit_record(report), indent=1))
    return report.best_with_context


def resolve_acceptance(spec: str, profile: Profile | None, progress: Callable[[str, int], Any] | None = None
                       ) -> Acceptance:
    """``measured[:VARIANT]`` from the profile's measurement; ``fit:SOURCE`` the best model fitted to a source;
    anything else as `scenarios.acceptance_from_spec`. A ``@context`` suffix without a table takes the profile's
    measured acceptance against context; ``@context:C=F,...`` any table; ``@proposed:P`` a model-free draft's
    share of steps with a proposal."""
    spec, rate = split_proposed(spec)
    if rate is not None:
        return Proposing(resolve_acceptance(spec, profile, progress), rate)
    base, at, table = spec.strip().rpartition("@context")
    if at and (not table or table.startswith(":")):
        if table:
            return with_context(resolve_acceptance(base, profile, progress), "context" + table)
        if profile is None or profile.acceptance is None:
            raise SpecsimError(f"{spec!r}: a bare @context takes the profile's measured acceptance against context; "
                               "give a calibration profile of the built-in pair, or a table: @context:1024=1,4096=0.8")
        return with_context(resolve_acceptance(base, profile), profile.acceptance.context_table())
    kind, _, variant = spec.strip().partition(":")
    if kind.lower() == "fit":
        if not variant:
            raise SpecsimError("fit needs a source: fit:trace:FILE, fit:FILE.json (from acceptance fit --out), ...")
        return fitted_acceptance(variant, profile, progress)
    if kind.lower() == "measured":
        if profile is None:
            raise SpecsimError("--acceptance measured needs a calibration profile (of the built-in pair)")
        if profile.acceptance is None:
            raise SpecsimError(f"profile {profile.path} has no measured acceptance (it was calibrated with random "
                               "weights); calibrate the built-in pair or give --acceptance iid:A")
        return profile.acceptance.model(variant or None)
    return acceptance_from_spec(spec)


def shard(model: ModelSpec, tp: int, hw: Any) -> ModelSpec:
    """One GPU's shard of `model` split `tp` ways on `hw`, or a one-line reason it cannot be."""
    if tp > 1 and hw.interconnect is None:
        raise SpecsimError(f"preset {hw.name} has no interconnect for --tp (hardware.toml); use --tp 1")
    return model.shard(tp)  # a split that does not divide: a one-line error naming the splits that do


def shard_draft(draft: Draft, tp: int, hw: Any) -> Draft:
    """One GPU's share of a draft's module (a head's or a model's; Medusa's heads and a host lookup stay whole)."""
    if draft.module is None or tp == 1:
        return draft
    return replace(draft, module=shard(draft.module, tp, hw))


def engine_preset_notes(engine: str, hardware: str, kind: str, notes: Sequence[str]) -> tuple[str, list[str]]:
    """The engine preset's words for a prediction's header (name, version, the sources it was fitted to) and the
    notes with a warning added where the prediction leaves the range the preset was fitted on."""
    from scenarios import load_engine_preset

    preset = load_engine_preset(engine)
    outside = preset.outside(hardware, kind)
    warning = [f"warning: outside what engine preset {engine} ({preset.version or 'no version given'}) was fitted on: "
               f"{'; '.join(outside)} (scenarios/engines.toml)"] if outside else []
    return preset.label, [*notes, *warning]


def resolve_setup(hardware: str | None, profile_path: Path | None, target: str | None, draft: str | None,
                  dtype: str, acceptance_spec: str | None, need_acceptance: bool = True, engine: str | None = None,
                  tp: int = 1, draft_tp: int | None = None, progress: Callable[[str, int], Any] | None = None,
                  heterogeneous_vocab: bool = False, expert_sharing: float | None = None,
                  routing_skew: float | None = None, power_law_routing: float | None = None) -> Setup:
    """The cost model, the models and the acceptance (`_resolve_setup`), the draft checked against the target and
    the acceptance, and the experts' sharing and routing set on the cost model (an MoE target's routing said in a
    note). No routing given keeps the cost model's (a profile's stored one, else uniform); either replaces both."""
    s = _resolve_setup(hardware, profile_path, target, draft, dtype, acceptance_spec, need_acceptance, engine, tp,
                       draft_tp, progress, heterogeneous_vocab)
    check_draft(s.draft, s.target, s.acceptance)
    s = replace(s, notes=(*s.notes, *guesses_said(s.target, s.draft, draft, acceptance_spec)))
    if expert_sharing is not None and not 0.0 <= expert_sharing <= 1.0:
        raise SpecsimError(f"--expert-sharing is a fraction in [0, 1] (how much a sequence's tokens share experts), "
                           f"got {expert_sharing:g}; give one from 0 to 1")
    changes: dict[str, float] = {} if expert_sharing is None else {"expert_sharing": expert_sharing}
    if routing_skew is not None or power_law_routing is not None:
        skew, power = routing_skew or 0.0, power_law_routing or 0.0
        if not skew >= 0:  # NaN too
            raise SpecsimError(f"--routing-skew is a Zipf exponent >= 0 (0: uniform routing), got {skew:g}")
        if power and (not power > 1.0 or skew):  # NaN too
            raise SpecsimError(f"--power-law-routing {power:g}: give an exponent > 1 (AIConfigurator measured 1.01 "
                               "and 1.2)" if not power > 1.0 else "give --power-law-routing or --routing-skew, "
                               "not both: they are two models of the same routing")
        changes.update(routing_skew=skew, routing_power_law=power)
    s = replace(s, cost=replace(s.cost, **changes))
    if s.target.is_moe:
        measured = ((s.profile.fit.extra.get("aiconfigurator") or {}).get("routing") if s.profile else None)
        said = (f"the profile's passes as AIConfigurator measured them ({measured}); other shapes priced from them "
                f"with {routing_said(s.cost)}" if measured else routing_said(s.cost))
        s = replace(s, notes=(*s.notes, f"MoE routing: {said}"))
    return s


def routing_said(cost: CostModel) -> str:
    """Which expert-union model prices an MoE pass's expert reads (`ModelSpec.experts_touched`), in words."""
    if cost.routing_power_law:
        how = (f"power law, exponent {cost.routing_power_law:g} (AIConfigurator's measured routing: loads drawn "
               "every pass, --power-law-routing)")
    elif cost.routing_skew:
        how = f"Zipf popularity, exponent {cost.routing_skew:g} (--routing-skew)"
    else:
        how = "uniform (--routing-skew 0; --power-law-routing 1.2 for AIConfigurator's measured routing)"
    return f"{how}; a sequence's tokens share experts {cost.expert_sharing:g} (--expert-sharing)"


def _resolve_setup(hardware: str | None, profile_path: Path | None, target: str | None, draft: str | None,
                   dtype: str, acceptance_spec: str | None, need_acceptance: bool, engine: str | None, tp: int,
                   draft_tp: int | None, progress: Callable[[str, int], Any] | None,
                   heterogeneous_vocab: bool) -> Setup:
    """The cost model (a preset's roofline, or a profile's calibration), the models, and the acceptance.

    Without --acceptance a profile's measured acceptance is used; a preset needs --acceptance. With `tp` > 1 the
    models are one GPU's shards (`ModelSpec.shard`), the target split `tp` ways and the draft `draft_tp` (default
    `tp`), and the memory a GPU's. `engine` names whose per-step costs a preset adds (vLLM's when None); with a
    profile, None keeps the calibrated engine's own passes, and a name prices the profiled device's measured rates
    with that engine's costs instead (`Profile.device_preset`)."""
    if hardware and profile_path:
        raise SpecsimError("give --hardware (a preset) or --profile (a calibration), not both")
    if (tp > 1 or (draft_tp or 1) > 1) and not hardware:
        raise SpecsimError("--tp prices a preset's GPUs and interconnect; give --hardware (a profile is one device)")
    if not acceptance_spec and hardware and need_acceptance:
        raise SpecsimError("say how often drafts are accepted: --acceptance iid:0.7 (or markov:..., trace:FILE, "
                           "vllm-metrics:FILE, ...)")
    if hardware:
        engine = engine or "vllm"
        hw = load_hardware(hardware, engine)
        check_dtype_runs(hardware, dtype)
        spec_lower = (acceptance_spec or "").strip().lower()
        needs_profile = spec_lower.startswith(("measured", "fit:measured"))
        profile, notes = resolve_profile(profile_path) if needs_profile else (None, [])
        acceptance = resolve_acceptance(acceptance_spec, profile, progress) if acceptance_spec else None
        t = load_model(target or DEFAULT_TARGET, dtype)
        d = load_draft(draft or DEFAULT_DRAFT, t, dtype, heterogeneous_vocab)
        where = f"{hw.name}, {t.dtype}, {engine} preset"
        preset, notes = engine_preset_notes(engine, hw.name, d.kind, notes)
        if tp > 1 or (draft_tp or 1) > 1:
            t, d = shard(t, tp, hw), shard_draft(d, draft_tp or tp, hw)
            where += f", TP {tp} over {hw.interconnect.name if hw.interconnect else '?'} (draft TP {draft_tp or tp})"
        return Setup(CostModel.from_hardware(hw, dtype), t, d, acceptance, where, None, tuple(notes),
                     engine_preset=preset)
    profile, notes = resolve_profile(profile_path)
    t = load_model(target, dtype) if target else profile.target
    d = load_draft(draft, t, dtype, heterogeneous_vocab) if draft else Draft.of_model(profile.draft)
    other = (t.name, d.name) != (profile.target.name, profile.draft.name)
    if d.kind != "model" and t.name == profile.target.name:  # a head or a lookup on the profile's own target
        notes = (*notes, f"pricing the {d.kind} draft {d.name} from the fitted device rates of profile {profile.path}")
    elif other and (target is None or draft is None):
        given, kept = (f"--target {t.name}", f"draft {d.name}") if target else (f"--draft {d.name}",
                                                                                 f"target {t.name}")
        raise SpecsimError(f"{given} with profile {profile.path} would pair it with the profile's {kept}: give both "
                           "--target and --draft (priced from the profile's device rates), or neither")
    elif other:
        notes = (*notes, profile.other_models_note(t.name, d.name))
    measured_here = profile.acceptance is not None and t.name == profile.target.name
    own_heads = d.kind == "medusa" and measured_here and profile.acceptance.heads is not None
    own_ngram = d.kind == "ngram" and measured_here and profile.acceptance.ngram is not None
    if own_ngram:  # the lookup as this engine runs it, timed on this machine
        host = profile.acceptance.ngram_host()
        d = replace(d, host=host, source=host.source) if host is not None else d

    def priced(acceptance: Acceptance | None) -> Setup:
        if not engine:
            return Setup(profile.cost_model(), t, d, acceptance, profile.describe(), profile, tuple(notes))
        # the device as profiled, the passes as `engine` runs them
        cost = CostModel.from_hardware(profile.device_preset(engine), t.dtype)
        where = (f"{profile.device.name} as calibrated {profile.created[:10]} (its micro-benchmarks), {t.dtype}, "
                 f"{engine} preset")
        told = (f"--engine {engine}: the device's measured rates with {engine}'s per-step costs; without --engine "
                "the profile prices specsim's own engine as calibrated") if profile.origin == "specsim" else None
        return Setup(cost, t, d, acceptance, where, profile, (*notes, *([told] if told else [])), engine)

    if (own_heads or own_ngram) and (acceptance_spec or "measured").strip().lower() == "measured":
        return priced(profile.acceptance.heads_model() if own_heads else profile.acceptance.ngram_model())
    spec = acceptance_spec or ("measured" if profile.acceptance is not None and not other else None)
    if not acceptance_spec and profile.fitted_acceptance and not other:  # a serving benchmark's (before measured)
        spec, why = profile.fitted_acceptance["spec"], profile.fitted_acceptance["from"]
        notes = (*notes, f"acceptance {spec} as profile {profile.path} fitted it ({why}); --acceptance overrides it")
    if other and spec and spec.strip().lower().startswith("measured"):
        raise SpecsimError(f"the profile's measured acceptance is {profile.target.name} drafted by "
                           f"{profile.draft.name}'s: give --acceptance for {t.name} drafted by {d.name} (iid:0.7, "
                           "trace:FILE, vllm-metrics:FILE, ...)")
    if spec is None and need_acceptance:
        why = "priced on another pair's profile" if other else "random weights"
        raise SpecsimError(f"profile {profile.path} has no measured acceptance for this pair ({why}): give "
                           "--acceptance iid:0.7 (or markov:..., trace:FILE, ...)")
    return priced(resolve_acceptance(spec, profile, progress) if spec else None)


# -- what the figures show -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AcceptanceView:
    """An accepted-length histogram to draw: the measured P(A = a) and each model's."""

    measured_pmf: np.ndarray
    models: dict[str, np.ndarray]
    k: int
    label: str
    caption: str


def acceptance_view(trace_spec: str | None, profile_path: Path | None, k: int) -> AcceptanceView:
    """A greedy trace's replay, or the profile's measurement, against i.i.d. models with the same alpha and the same
    tokens per step (and, for a profile, its fitted markov and beta models)."""
    if trace_spec:
        if profile_path:
            raise SpecsimError("give --trace or --profile, not both")
        trace = load_acceptance_trace(*split_trace_spec(trace_spec))
        if k > trace.max_k:
            raise SpecsimError(f"the trace records lookaheads up to {trace.max_k}; use --k {trace.max_k} or less")
        measured, label, alpha = trace.chain_pmf(k), "replayed trace", trace.alpha
        caption, extra = f"greedy acceptance trace {trace_spec}", {}
    else:
        profile, _ = resolve_profile(profile_path)
        acc = profile.acceptance
        if acc is None:
            raise SpecsimError(f"profile {profile.path} has no measured acceptance; calibrate the built-in pair or "
                               "use --trace")
        if k > len(acc.survival):
            raise SpecsimError(f"the profile measured acceptance up to k = {len(acc.survival)}; use --k "
                               f"{len(acc.survival)} or less")
        measured = acc.model("positional").chain_pmf(k)  # P(A = a) from the measured P(A >= i)
        label = f"measured (per-token acceptance, {acc.prompts} prompts x {acc.tokens_per_prompt} tokens)"
        caption, alpha = f"built-in pair, profile {Path(str(profile.path)).name}", acc.alpha
        extra = {"markov fit": acc.model("markov").chain_pmf(k)}
        if acc.beta is not None:
            extra["beta fit"] = acc.model("beta").chain_pmf(k)
    same_mean = iid_from_mean_length(float(np.dot(np.arange(1, k + 2), measured)), k)
    models = {f"iid, same alpha ({alpha:.3f})": IIDAcceptance(alpha).chain_pmf(k),
              f"iid, same E[A + 1] (alpha {same_mean.alpha:.3f})": same_mean.chain_pmf(k), **extra}
    return AcceptanceView(measured, models, k, label, caption)


@dataclass(frozen=True)
class ContextView:
    """A profile's acceptance against context to draw (`plots.acceptance.acceptance_against_context`): per window
    the measured alpha with its 95 % interval, the fitted decay there and on a dense grid (rows of context, alpha),
    each window's leave-one-out prediction, and the models' training length."""

    contexts: np.ndarray
    alpha: np.ndarray
    ci95: np.ndarray
    fitted: np.ndarray
    dense: np.ndarray
    leave_one_out: np.ndarray
    trained_tokens: int
    caption: str


def context_view(profile_path: Path | None) -> ContextView:
    """The profile's measured acceptance against context and its fitted decay."""
    from simulator.context import ContextDecay

    profile, _ = resolve_profile(profile_path)
    bc = profile.acceptance.by_context if profile.acceptance is not None else None
    if not bc:
        raise SpecsimError(f"profile {profile.path} did not measure acceptance against context; calibrate the "
                           "built-in pair again (specsim calibrate, without --quick)")
    decay = ContextDecay(**{k: float(bc["decay"][k]) for k in ("high", "low", "c50", "width")})
    c = np.asarray(bc["contexts"], dtype=float)
    grid = np.linspace(0.0, float(c.max()) + bc["span"] / 2, 200)
    caption = (f"built-in pair, profile {Path(str(profile.path)).name}: teacher-forced on {bc['texts']} stretches of "
               f"standard-library source never trained on, windows of {bc['span']} tokens")
    return ContextView(c, np.asarray(bc["alpha"]), np.asarray(bc["ci95"]), decay.alpha(c),
                       np.stack([grid, decay.alpha(grid)], axis=1), np.asarray(bc["leave_one_out"]["predicted"]),
                       256, caption)


@dataclass(frozen=True)
class RooflineView:
    points: list[RooflinePoint]
    mem_bw_bytes_per_s: float
    peak_flops_per_s: float
    caption: str
    ceiling_label: str


def roofline_view(setup: Setup, dtype: str, context: int,
                  batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256)) -> RooflineView:
    """A preset's modelled passes under its assumed ceilings, or a profile's measured passes under the
    micro-benchmarked ones."""
    hw = setup.cost.hardware
    caption = f"{setup.target.name} and {setup.draft.name} on {setup.where}"
    if setup.profile is None or setup.engine is not None or not setup.profile.timed:  # modelled: a preset, a
        # profiled device and an engine, or a serving benchmark's fit (no pass timed: its passes as it prices them)
        models = [m for m in (setup.target, setup.draft.module) if m is not None]
        points = modelled_points(setup.cost, models, batches, [1, 5], context)
        ceiling = (f"({hw.bw_efficiency:.0%} of datasheet bandwidth, {hw.flops_efficiency:.0%} of {dtype} FLOP/s)"
                   if setup.profile is None else "(datasheet bandwidth and FLOP/s)" if not setup.profile.timed
                   else f"(micro-benchmarked read bandwidth, {dtype} GEMM FLOP/s)")
        return RooflineView(points, hw.mem_bw_bytes_per_s * hw.bw_efficiency,
                            hw.peak_flops(dtype) * hw.flops_efficiency, caption, ceiling)
    p = setup.profile
    specs = {p.target.name: p.target, p.draft.name: p.draft}
    points = measured_points(setup.cost, specs, [(q.model, q.batch, q.new_tokens, q.context, q.median_s)
                                                 for q in p.timed])
    dt = p.target.dtype
    return RooflineView(points, hw.mem_bw_bytes_per_s, hw.peak_flops(dt), caption,
                        f"(micro-benchmarked read bandwidth, {dt} GEMM FLOP/s)")
