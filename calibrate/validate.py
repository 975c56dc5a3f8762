"""`specsim validate`: predict every configuration from the calibration profile, run it for real on held-out prompts,
and report the error of each predictor, where the misses are, and how repeatable the measurement itself is.

Predictors (all with acceptance measured on the *calibration* prompts; the runs use *held-out* prompts):

- ``calibrated`` - the calibrated cost model with the measured acceptance the profile chose (lowest held-out error);
- ``calibrated+iid`` / ``+positional`` / ``+markov`` / ``+trace`` / ``+beta`` - the same cost model with each other
  acceptance model;
- ``leviathan`` - (1 - a^(k+1)) / ((1 - a)(k c + 1)) with the measured alpha and the measured cost ratio c of a
  draft pass to a target pass at that batch (trees: depth c + 1);
- ``roofline`` - a pure roofline at the micro-benchmarked peak bandwidth and FLOP/s, no overheads, i.i.d. alpha;
- ``calibrated@replayed`` (validation at a profile's shapes, acceptance replayed) - the calibrated cost model with
  the tokens per pass the replay really drew in each configuration: a dozen replayed streams are a noisy sample of
  the acceptance model, and the replay is an input, not a prediction; what is left is the cost model's error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from calibrate.paired_runs import MeasuredConfig
from scenarios import is_builtin_pair
from scenarios.profile import Profile
from simulator import SpecsimError
from simulator.acceptance import Acceptance, IIDAcceptance, WithRanks
from simulator.cost import CostModel
from simulator.drafts import Draft
from simulator.specs import ModelSpec
from simulator.sweep import Candidate, StepPhases, step_time, tokens_per_pass
from simulator.trees import Tree
from simulator.validation import Miss, PredictedPoint, PredictorSummary, ValidationReport, ValidationRow  # noqa: F401

PRIMARY = "calibrated"
REPLAYED = "calibrated@replayed"  # a shape validation's primary priced with the tokens per pass the replay drew
MIN_SEQUENCES = 8  # a real run decodes at least this many prompts (batch 1: eight in turn), for acceptance's sake:
#                    one prompt's tokens per pass varies by 17 % (`MeasuredConfig.speedup_estimate`)


@dataclass(frozen=True)
class Prediction:
    tokens_per_pass: float
    phases: StepPhases
    baseline_s: float  # a plain decoding step at the same batch

    @property
    def step_s(self) -> float:
        return self.phases.total_s

    @property
    def speedup(self) -> float:
        return self.tokens_per_pass * self.baseline_s / self.step_s


Predictor = Callable[[int, Candidate, int], Prediction]


def validated_draft(profile: Profile, drafter: str) -> Draft:
    """The draft a validation prices: the profile's draft model, or the built-in target's prediction heads."""
    if drafter == "heads":
        from scenarios.draft_specs import BUILTIN_HEADS, load_draft

        return load_draft(BUILTIN_HEADS, profile.target)
    if drafter == "ngram":
        from simulator.drafts import model_free

        assert profile.acceptance is not None
        host = profile.acceptance.ngram_host()
        if host is None:
            raise SpecsimError(f"profile {profile.path} did not time the n-gram lookup: calibrate again")
        return model_free("ngram", host)
    return Draft.of_model(profile.draft)


def predictors(profile: Profile, drift: Mapping[str, tuple[tuple[int, float], ...]] | None = None,
               forced: Acceptance | None = None, drafter: str = "model") -> dict[str, Predictor]:
    """name -> f(batch, candidate, context) for every predictor this profile supports. With `drift` (a spot check
    of the device now, `spot_check`), the calibrated predictors price passes at today's speed and ``as-profiled``
    is the primary one without it. With `forced` (the acceptance a shape validation replays), every predictor
    uses it instead of the profile's measurement, and ``calibrated+iid`` an i.i.d. model of the same mean. With
    `drafter` "heads", the draft is the built-in target's prediction heads and the acceptance theirs."""
    acc = profile.acceptance
    if acc is None and forced is None:
        raise SpecsimError("validation needs a profile with measured acceptance")
    target, draft = profile.target, validated_draft(profile, drafter)
    as_profiled = profile.cost_model()
    calibrated = replace(as_profiled, drift=dict(drift or {}))
    if forced is not None:
        models: dict[str, Acceptance] = {"iid": IIDAcceptance(forced.alpha)}
        primary: Acceptance = forced
    elif drafter == "heads":
        assert acc is not None
        primary = acc.heads_model()
        assert primary.ranks is not None
        models = {"positional": primary, "iid": WithRanks(IIDAcceptance(primary.alpha), primary.ranks)}
    elif drafter == "ngram":
        assert acc is not None
        primary = acc.ngram_model()
        models = {"positional": primary}
    else:
        assert acc is not None
        models = {v: acc.model(v) for v in acc.variants if v != "ranks"}
        primary = acc.model()
    iid = models.get("iid") or IIDAcceptance(primary.alpha)

    def with_cost(cost: CostModel, acceptance: Acceptance) -> Predictor:
        def f(batch: int, cand: Candidate, context: int) -> Prediction:
            rate = acceptance.proposal_rate(cand.shape.depth)
            return Prediction(tokens_per_pass(cand, acceptance),
                              step_time(cost, target, draft, batch, context, cand, rate),
                              cost.plain_step_s(target, batch, context))
        return f

    def leviathan(batch: int, cand: Candidate, context: int) -> Prediction:
        base = calibrated.pass_time_s(target, batch, 1, context)
        if draft.module is not None:  # a draft model: k passes of cost c
            c = calibrated.pass_time_s(draft.module, batch, 1, context) / base
            drafting = base * cand.shape.depth * c
        elif not draft.on_device:  # a lookup: its host time
            drafting = float(draft.host.at(batch, context))
        else:  # heads: one pass, whatever the depth
            heads_s = calibrated.measured_batch_times(draft.name, np.array([batch]))
            drafting = float(heads_s[0]) if heads_s is not None else 0.0
        return Prediction(tokens_per_pass(cand, iid), StepPhases(drafting, base), base)

    out = {PRIMARY: with_cost(calibrated, primary)}
    if drift:
        out["as-profiled"] = with_cost(as_profiled, primary)
    for v in models:
        out[f"calibrated+{v}"] = with_cost(calibrated, models[v])
    out["leviathan"] = leviathan
    ranks = primary.ranks if forced is None else None
    out["roofline"] = with_cost(profile.datasheet_cost(),
                                WithRanks(IIDAcceptance(iid.alpha), ranks) if ranks else IIDAcceptance(iid.alpha))
    return out


@dataclass(frozen=True)
class SpotCheck:
    """Single passes of each model timed now, before and after the real runs, against the profile's prediction of
    the same passes. A shared machine drifts (neighbours' memory traffic, clock changes): a CPU calibrated at
    10 ms per target pass may run it at 12 ms an hour later, and mostly the memory-bound passes move. The ratios,
    by model and batch, re-anchor the calibrated predictors (`CostModel.drift`); the uncorrected profile stays in
    the report as ``as-profiled``."""

    context: int
    points: tuple[tuple[str, int, float, float, float], ...]  # (model, batch, predicted s, before s, after s)

    @property
    def drift(self) -> dict[str, tuple[tuple[int, float], ...]]:
        """model -> ((batch, measured / predicted), ...), the measurement the geometric mean of before and after."""
        out: dict[str, list[tuple[int, float]]] = {}
        for model, batch, predicted, before, after in self.points:
            out.setdefault(model, []).append((batch, float(np.sqrt(before * after)) / predicted))
        return {m: tuple(v) for m, v in out.items()}

    @property
    def largest(self) -> float:
        """The largest |drift - 1| over the points."""
        return max((abs(f - 1.0) for v in self.drift.values() for _, f in v), default=0.0)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SpotCheck:
        """The inverse of `to_dict` (a validation's JSON ``spot_check``)."""
        return cls(int(d["context"]), tuple((p["model"], int(p["batch"]), float(p["predicted_s"]),
                                              float(p["before_s"]), float(p["after_s"])) for p in d["points"]))

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.context, "largest_drift": self.largest,
                "points": [{"model": m, "batch": b, "predicted_s": p, "before_s": t0, "after_s": t1,
                            "drift": float(np.sqrt(t0 * t1)) / p} for m, b, p, t0, t1 in self.points]}


def time_spot(profile: Profile, device: Any, runner: Any, batches: Sequence[int], context: int,
              seed: int, takes: int = 3, decoders: dict[tuple, Any] | None = None) -> dict[tuple[str, int], float]:
    """(model name, batch) -> time of one decoding pass now (one new token at `context`), timed as the calibration
    times its passes (`calibrate.calibration.time_together`, both models in the same rounds, quick effort) at the
    smallest
    and largest batch: the median of `takes` such timings, so that one burst of a neighbour's work does not re-anchor
    a whole run's prediction. Each model's cache is as long as the calibration's was (`calibrated_cache_len`): the
    length sets the stride of the cache's reads, and a cache cut to the spot check's one context ran its passes
    2-4 % faster on this CPU (batch 8, the built-in target), a bias every re-anchored prediction would inherit.
    `decoders` keeps the random-weight models (their caches and, on a GPU, the runner's graphs of them) for the
    caller's next check; without it they are built for this check's takes alone."""
    from calibrate.calibration import Timed, time_together
    from calibrate.timing import Effort, Timer

    class _Quiet:
        def update(self, n: int) -> None:
            pass

    shown = sorted({min(batches), max(batches)})
    models = [Timed(spec, (1,), max(calibrated_cache_len(profile, spec), context + 2))
              for spec in (profile.target, profile.draft)]
    samples: dict[tuple[str, int], list[float]] = {}
    keep = decoders is not None  # the caller's models, caches and graphs stay for its next check
    decoders = {} if decoders is None else decoders  # built once for the takes (each take draws its own inputs)
    for i in range(takes):
        for r in time_together(models, device, Timer(device), runner, shown, [context], _Quiet(),
                               Effort.of(quick=True, busy=False), seed + i, decoders, keep=keep):
            if r.get("median_s"):
                samples.setdefault((r["model"], r["batch"]), []).append(float(r["median_s"]))
    return {key: float(np.median(v)) for key, v in samples.items()}


def calibrated_cache_len(profile: Profile, spec: ModelSpec) -> int:
    """Slots per sequence of the cache the calibration timed `spec`'s decoding passes in (`time_together`: the grid's
    longest context plus its most new tokens plus one); 0 when the profile timed none."""
    decoding = [p for p in profile.timed if p.model == spec.name and p.context > 0]
    return max(p.context for p in decoding) + max(p.new_tokens for p in decoding) + 1 if decoding else 0


def spot_check(profile: Profile, before: Mapping[tuple[str, int], float], after: Mapping[tuple[str, int], float],
               context: int) -> SpotCheck:
    """Before and after timings against the profile's prediction of the same passes."""
    cost = profile.cost_model()
    specs = {profile.target.name: profile.target, profile.draft.name: profile.draft}
    points = tuple((name, b, cost.pass_time_s(specs[name], b, 1, context), before[(name, b)], after[(name, b)])
                   for (name, b) in sorted(before) if (name, b) in after)
    return SpotCheck(context, points)


def _crossover(batches: Sequence[int], best: Mapping[int, float]) -> int | None:
    """The smallest batch at which the best speed-up is no longer above 1 (best k becomes 0); None if never."""
    return next((b for b in batches if b in best and best[b] <= 1.0), None)


def miss_breakdown(pred: Prediction, meas: MeasuredConfig) -> dict[str, float]:
    """Split log(predicted / measured speed-up) into tokens per pass, baseline pass, and the step's terms."""
    m_step = meas.step_s.median
    p = pred.phases
    return {
        "tokens_per_pass": float(np.log(pred.tokens_per_pass / meas.tokens_per_pass_estimate)),
        "baseline_pass": float(np.log(pred.baseline_s / meas.plain_step_s.median)),
        "draft": -(p.draft_s - meas.draft_s.median) / m_step,
        "verify": -(p.verify_s - meas.verify_s.median) / m_step,
        "accept": -(p.accept_s - meas.accept_s.median) / m_step,
    }


def compare(profile: Profile, measured: Sequence[MeasuredConfig], trees: Sequence[Tree], context: int,
            batches: Sequence[int], settings: Mapping[str, Any] | None = None,
            spot: SpotCheck | None = None, forced: Acceptance | None = None,
            drafter: str = "model") -> ValidationReport:
    """Predicted against measured for every configuration and predictor, with summaries."""
    preds = predictors(profile, spot.drift if spot else None, forced, drafter)
    by_label = {t.label: t for t in trees}
    timed = [(p.batch, p.new_tokens) for p in profile.timed if p.model == profile.target.name]
    max_batch, max_rows = max(b for b, _ in timed), max(b * n for b, n in timed)
    rows = []
    for m in measured:
        cand = Candidate(m.k) if m.tree is None else Candidate(None, by_label[m.tree])
        predicted, terms = {}, {}
        for name, f in preds.items():
            p = f(m.batch, cand, context)
            predicted[name] = PredictedPoint(
                p.tokens_per_pass, p.step_s, p.speedup, m.batch * p.tokens_per_pass / p.step_s,
                p.speedup / m.speedup_estimate - 1.0, p.tokens_per_pass / m.tokens_per_pass_estimate - 1.0,
                p.step_s / m.step_s.median - 1.0)
            if name == PRIMARY:
                terms = miss_breakdown(p, m)
            if forced is not None and name in (PRIMARY, "as-profiled"):
                # The replay's own draws given: what is left is the cost model's error (with and without the spot
                # check's re-anchoring). Each pair's speed-up is its tokens per pass times its plain step over its
                # speculative step: at the acceptance each pair drew, the error is that of the cost ratio.
                q = replace(p, tokens_per_pass=m.tokens_per_pass_estimate)
                err = (p.baseline_s / p.step_s / m.cost_ratio.median - 1.0 if m.cost_ratio is not None
                       else q.speedup / m.speedup_estimate - 1.0)
                predicted[f"{name}@replayed"] = PredictedPoint(
                    q.tokens_per_pass, q.step_s, q.speedup, m.batch * q.tokens_per_pass / q.step_s, err, 0.0,
                    q.step_s / m.step_s.median - 1.0)
        # Beyond the calibrated grid the prediction extrapolates the fit instead of interpolating measurements.
        extrapolated = m.batch > max_batch or m.batch * cand.shape.verify_tokens > max_rows
        rows.append(ValidationRow(m.batch, m.k, m.tree, m, predicted, terms, extrapolated))
    summary = {}
    for name in rows[0].predicted if rows else preds:
        e = np.abs([r.predicted[name].err_speedup for r in rows])
        t = np.abs([r.predicted[name].err_tokens_per_pass for r in rows])
        summary[name] = PredictorSummary(float(np.median(e)), float(np.percentile(e, 90)), float(np.median(t)),
                                         float(np.mean(t)))
    best_meas: dict[int, float] = {}
    best_pred: dict[int, float] = {}
    for r in rows:
        best_meas[r.batch] = max(best_meas.get(r.batch, 0.0), r.measured.speedup_estimate)
        best_pred[r.batch] = max(best_pred.get(r.batch, 0.0), r.predicted[PRIMARY].speedup)
    cm, cp = _crossover(batches, best_meas), _crossover(batches, best_pred)

    def index(v: int | None) -> int:
        return batches.index(v) if v in batches else len(batches)

    noise = [r.repeatability for r in rows]
    worst = []
    for r in sorted(rows, key=lambda r: -abs(r.predicted[PRIMARY].err_speedup))[:5]:
        main = max(r.miss_terms, key=lambda k: abs(r.miss_terms[k]))
        worst.append(Miss(r.batch, r.k, r.tree, r.predicted[PRIMARY].err_speedup, main, r.miss_terms,
                          r.repeatability))
    return ValidationReport(context, tuple(rows), summary, cm, cp, abs(index(cm) - index(cp)),
                            float(np.median(noise)), float(max(noise)), tuple(worst), dict(settings or {}),
                            spot.to_dict() if spot else {})


def predicted_curves(profile: Profile, candidates: Sequence[Candidate], batches: Sequence[int],
                     context: int, spot: SpotCheck | None = None, forced: Acceptance | None = None,
                     drafter: str = "model") -> dict[str, list[tuple[int, float]]]:
    """The primary prediction's speed-up over every batch, per candidate (the lines of the validation plot)."""
    f = predictors(profile, spot.drift if spot else None, forced, drafter)[PRIMARY]
    return {(f"tree {c.tree.label}" if c.tree is not None else f"k = {c.k}"):
            [(b, f(b, c, context).speedup) for b in batches] for c in candidates}


def check_validatable(profile: Profile) -> None:
    """A profile validation can use: the built-in pair's, with measured acceptance."""
    if profile.acceptance is None or not is_builtin_pair(profile.target, profile.draft):
        raise SpecsimError(f"profile {profile.path} is not a calibration of the built-in pair with measured "
                           "acceptance; run `specsim calibrate` (default target and draft) first")


def runs_with_spot_checks(profile: Profile, device: Any, engine: Any, prompts: Sequence[Sequence[int]],
                          configs: Sequence[Any], batches: Sequence[int], new_tokens: int, repeats: int, context: int,
                          seed: int, progress: Callable[[str, int], Any], label: str
                          ) -> tuple[list[MeasuredConfig], SpotCheck]:
    """The real runs (`realruns.measure`: each paired with a plain run, repeated) between two spot checks of single
    passes."""
    from calibrate.paired_runs import measure, runs_per_repeat
    from engine.pass_runner import make_runner

    runner = make_runner(device, eager=profile.engine_mode == "eager")  # its own: time_together resets its graphs
    with progress("spot check, before", 1) as bar:
        before = time_spot(profile, device, runner, batches, context, seed)
        bar.update(1)
    with progress(label, repeats * runs_per_repeat(configs)) as bar:
        measured = measure(engine, prompts, configs, new_tokens, repeats, 1.0, seed, tick=lambda: bar.update(1),
                           min_sequences=MIN_SEQUENCES)
    with progress("spot check, after", 1) as bar:
        after = time_spot(profile, device, runner, batches, context, seed)
        bar.update(1)
    return measured, spot_check(profile, before, after, context)


def run_validation(profile: Profile, batches: Sequence[int] | None, ks: Sequence[int] | None, trees: Sequence[Tree],
                   repeats: int | None, new_tokens: int | None, seed: int, progress: Callable[[str, int], Any],
                   quick: bool = False, drafter: str = "model"
                   ) -> tuple[ValidationReport, dict[str, list[tuple[int, float]]]]:
    """Run the built-in pair for real on the held-out prompts over batch x (k or tree), interleaved and repeated, and
    compare every predictor with it. Returns the report and the predicted curves for the plot. Unset sizes take the
    defaults (quick: batch 1, 4, 8, k 1, 4, 3 repeats of 48 tokens; else batch 1..32:x2, k 1, 2, 4, 6, 5 repeats of
    64 tokens)."""
    batches = batches or ([1, 4, 8] if quick else [1, 2, 4, 8, 16, 32])
    ks = ks or ([1, 4] if quick else [1, 2, 4, 6])
    repeats = repeats or (3 if quick else 5)
    new_tokens = new_tokens or (48 if quick else 64)
    check_validatable(profile)
    if drafter == "heads" and (profile.acceptance is None or profile.acceptance.heads is None):
        raise SpecsimError(f"profile {profile.path} measured no prediction heads: calibrate again (the built-in heads "
                           "are trained with python -m engine.train_heads)")
    if drafter == "ngram" and (profile.acceptance is None or profile.acceptance.ngram is None):
        raise SpecsimError(f"profile {profile.path} measured no n-gram lookup: calibrate again")
    if drafter == "ngram" and trees:
        raise SpecsimError("prompt lookup proposes one continuation: validate it with --tree ''")
    import torch

    from calibrate.paired_runs import Config, pairing
    from engine.builtin import encode, load_pair, prompts
    from engine.device import device_identity, resolve_device
    from engine.pass_runner import make_runner
    from engine.speculative import RealEngine
    from scenarios.profile import check_device

    device = resolve_device("cuda" if profile.device.kind == "cuda" else "cpu")
    check_device(profile, device_identity(device))
    held = [encode(p) for p in prompts("heldout")]
    if drafter == "ngram":  # prompt lookup is for text that repeats itself (as its acceptance was measured on)
        from calibrate.ngram import repeating

        held = [repeating(p) for p in held]
    span = max([max(ks, default=0)] + [t.n_nodes for t in trees])
    target, draft = load_pair(expanded=True, dtype=profile.target.dtype,
                              max_seq_len=max(len(p) for p in held) + new_tokens + span + 8, device=device)
    heads = None
    if drafter == "heads":
        from engine.builtin import load_heads

        heads = load_heads(expanded=True, dtype=profile.target.dtype, device=device)
        if max([*ks, *(t.depth for t in trees)]) > heads.n_heads:
            raise SpecsimError(f"the built-in heads draft at most {heads.n_heads} positions: use --k and trees of "
                               f"depth {heads.n_heads} or less")
    engine = RealEngine(target, draft, make_runner(device, eager=profile.engine_mode == "eager"), heads=heads)
    configs = [Config(b, k, drafter=drafter) for b in batches for k in ks]
    configs += [Config(b, 0, t, drafter=drafter) for b in batches for t in trees]
    context = int(np.mean([len(p) for p in held])) - 1 + new_tokens // 2
    cands = [Candidate(k) for k in ks] + [Candidate(None, t) for t in trees]
    for f in predictors(profile, drafter=drafter).values():  # a configuration no predictor can price fails now
        for cand in cands:
            for b in batches:
                f(b, cand, context)
    measured, spot = runs_with_spot_checks(profile, device, engine, held, configs, batches, new_tokens, repeats,
                                           context, seed, progress, "real runs (each paired with a plain run)")
    settings = {"profile": str(profile.path), "new_tokens": new_tokens, "repeats": repeats, "batches": list(batches),
                "sequences_per_run": MIN_SEQUENCES,
                "ks": list(ks), "trees": [t.label for t in trees], "torch_threads": torch.get_num_threads(),
                "engine_mode": profile.engine_mode, "pairs": pairing(engine), "drafter": drafter}
    report = compare(profile, measured, trees, context, batches, settings, spot, drafter=drafter)
    return report, predicted_curves(profile, cands, list(range(1, max(batches) + 1)), context, spot,
                                    drafter=drafter)


def run_shape_validation(profile: Profile, acceptance: Acceptance, batches: Sequence[int] | None,
                         ks: Sequence[int] | None, repeats: int | None, new_tokens: int | None, prompt_tokens: int,
                         seed: int, progress: Callable[[str, int], Any], quick: bool = False
                         ) -> tuple[ValidationReport, dict[str, list[tuple[int, float]]]]:
    """Validation at the profile's own shapes (a preset or config.json pair, calibrated here with random weights):
    random-weight models of those shapes decode random prompts of `prompt_tokens` tokens, and which drafts each step
    accepts is replayed from `acceptance` (`RealEngine.force`: one stream per sequence) while the passes, the
    accept/reject rule's work and the bookkeeping are real. Every predictor then uses that acceptance, so the error
    is the cost model's at these shapes. Chains only (a tree's replay needs per-rank outcomes)."""
    batches = batches or ([1, 4, 8] if quick else [1, 2, 4, 8, 16, 32])
    ks = ks or ([1, 4] if quick else [1, 2, 4, 6])
    repeats = repeats or (3 if quick else 5)
    new_tokens = new_tokens or (32 if quick else 48)
    import torch

    from calibrate.paired_runs import Config, pairing
    from engine.device import device_identity, resolve_device
    from engine.model import build_decoder
    from engine.pass_runner import make_runner
    from engine.speculative import RealEngine
    from scenarios.profile import check_device

    device = resolve_device("cuda" if profile.device.kind == "cuda" else "cpu")
    check_device(profile, device_identity(device))
    span = max(ks)
    max_len = prompt_tokens + new_tokens + span + 8
    vocab = profile.target.vocab_size
    if profile.draft.vocab_size != vocab:
        raise SpecsimError(f"the draft's vocabulary ({profile.draft.vocab_size}) is not the target's ({vocab})")
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, vocab, prompt_tokens).tolist() for _ in range(max(64, max(batches)))]
    target = build_decoder(profile.target, max_len, device, seed=seed, expert_sharing=profile.expert_sharing)
    draft = build_decoder(profile.draft, max_len, device, seed=seed + 1)
    engine = RealEngine(target, draft, make_runner(device, eager=profile.engine_mode == "eager"))
    engine.force(acceptance, seed)
    configs = [Config(b, k) for b in batches for k in ks]
    context = prompt_tokens + new_tokens // 2
    cands = [Candidate(k) for k in ks]
    measured, spot = runs_with_spot_checks(profile, device, engine, prompts, configs, batches, new_tokens, repeats,
                                           context, seed, progress, "real runs at these shapes, acceptance replayed")
    settings = {"profile": str(profile.path), "new_tokens": new_tokens, "repeats": repeats, "batches": list(batches),
                "ks": list(ks), "trees": [], "sequences_per_run": MIN_SEQUENCES, "prompt_tokens": prompt_tokens,
                "torch_threads": torch.get_num_threads(), "engine_mode": profile.engine_mode,
                "pairs": pairing(engine),
                "shapes": f"{profile.target.name} / {profile.draft.name}", "acceptance": acceptance.spec}
    report = compare(profile, measured, [], context, batches, settings, spot, acceptance)
    return report, predicted_curves(profile, cands, list(range(1, max(batches) + 1)), context, spot, acceptance)
