"""Acceptance models fitted to data, and judged by the error they make on requests they were not fitted to.

Data (`AcceptanceData`): per request, per generated position, the probability that a token drafted there is accepted
(0/1 for a greedy trace, sum_x min(p, q) for a sampled measurement), and for greedy traces the exact yields, so a
held-out request's steps can be replayed exactly at every k.

What is fitted to what:

- ``iid``: alpha = the mean per-position acceptance (the Leviathan et al. model, "the same mean alpha");
- ``positional``: the conditional acceptance per draft position measured on replayed steps (steps start right after
  the last rejection or bonus token, as a real engine's do, not at an average position);
- ``beta``, ``markov`` (two hidden states) and ``hmm3`` (three): the parameters whose accepted-length distributions
  at k = 1..K come closest (least squares) to the replayed steps' - a fit to what the model must predict, by
  Nelder-Mead over unconstrained parameters, from several starting points.

Judging: K-fold cross-validation over requests. Each model is fitted on the other folds and predicts the held-out
requests' replay: the relative error of tokens per step E[A + 1] at each k, and the total-variation distance of the
accepted-length distribution. The chosen model is the simplest (fewest parameters) whose mean tokens-per-step error
is within 2 % (relative) of the lowest: a model with more states must earn its place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np

from . import SpecsimError
from .acceptance import (
    Acceptance,
    BetaAcceptance,
    IIDAcceptance,
    PositionalAcceptance,
)
from .context import with_context
from .executors import Executor, Serial
from .hidden_fit import fit_hidden, fit_hidden_many, hidden_starts
from .minimize import nelder_mead
from .replay import ProbabilityTraceAcceptance, TraceAcceptance

KS = tuple(range(1, 9))
MODELS = ("iid", "positional", "beta", "markov", "hmm3")
N_PARAMS = {"iid": 1, "positional": 8, "beta": 2, "markov": 4, "hmm3": 9, "trace": 10**9}
CHOICE_SLACK = 1.02


@dataclass(frozen=True, eq=False)
class AcceptanceData:
    """Per request: the acceptance probability at each generated position, and (greedy traces) the yields."""

    alphas: tuple[np.ndarray, ...]
    yields: tuple[np.ndarray, ...] | None = None
    source: str = ""
    prompt_tokens: tuple[int, ...] | None = None  # per request, where known: position t sits at context prompt + t

    def __post_init__(self) -> None:
        if not self.alphas or all(len(a) == 0 for a in self.alphas):
            raise SpecsimError(f"{self.source or 'acceptance data'} holds no positions to fit")

    @classmethod
    def from_yields(cls, yields: Sequence[np.ndarray], source: str = "",
                    prompt_tokens: Sequence[int] | None = None) -> AcceptanceData:
        """A greedy trace: the drafted token at t is accepted exactly when a step starting at t yields 2 or more."""
        ys = tuple(np.asarray(y, dtype=np.int64) for y in yields)
        prompts = tuple(int(p) for p in prompt_tokens) if prompt_tokens is not None else None
        return cls(tuple((y >= 2).astype(float) for y in ys), ys, source, prompts)

    def __len__(self) -> int:
        return len(self.alphas)

    def take(self, idx: Sequence[int]) -> AcceptanceData:
        return AcceptanceData(tuple(self.alphas[i] for i in idx),
                              None if self.yields is None else tuple(self.yields[i] for i in idx), self.source,
                              None if self.prompt_tokens is None else tuple(self.prompt_tokens[i] for i in idx))

    def by_context(self) -> tuple[np.ndarray, np.ndarray]:
        """(context, acceptance probability) of every drafted position: context = prompt + position."""
        if self.prompt_tokens is None:
            raise SpecsimError(f"{self.source}: no prompt lengths, so no contexts to fit acceptance against")
        contexts = np.concatenate([p + np.arange(len(a)) for p, a in zip(self.prompt_tokens, self.alphas)])
        return contexts.astype(float), np.concatenate(self.alphas)

    @cached_property
    def replay(self) -> Acceptance:
        """The exact distribution of real steps over these requests: greedy replay, or the probability replay."""
        if self.yields is not None:
            return TraceAcceptance(self.yields, source=self.source or "trace")
        return ProbabilityTraceAcceptance(self.alphas, source=self.source or "measured")

    @property
    def max_k(self) -> int:
        return self.replay.max_k if isinstance(self.replay, TraceAcceptance) else 64

    def pmfs(self, ks: Sequence[int]) -> dict[int, np.ndarray]:
        return {k: self.replay.chain_pmf(k) for k in ks}


# -- fitting -----------------------------------------------------------------------------------------------------

def pmf_loss(pmfs: Mapping[int, np.ndarray], targets: Mapping[int, np.ndarray]) -> float:
    """Squared distance between accepted-length distributions, summed over k, plus the squared relative error of
    tokens per step (the quantity predictions use)."""
    loss = 0.0
    for k, t in targets.items():
        p = pmfs[k]
        a = np.arange(1, k + 2)
        loss += float(((p - t) ** 2).sum()) + float((np.dot(a, p) / np.dot(a, t) - 1.0) ** 2)
    return loss


def fit_beta(targets: Mapping[int, np.ndarray], mean_alpha: float) -> BetaAcceptance:
    def loss(x: np.ndarray) -> float:
        m = BetaAcceptance(float(np.exp(x[0])), float(np.exp(x[1])))
        return pmf_loss({k: m.chain_pmf(k) for k in targets}, targets)

    nu = 4.0
    x, _ = nelder_mead(loss, np.log([mean_alpha * nu + 1e-3, (1 - mean_alpha) * nu + 1e-3]), step=0.7)
    return BetaAcceptance(float(np.exp(x[0])), float(np.exp(x[1])))


def fit_positional(targets: Mapping[int, np.ndarray]) -> PositionalAcceptance:
    """Conditional acceptance per draft position, from the replayed steps with the longest k."""
    k = max(targets)
    survival = np.cumsum(targets[k][::-1])[::-1]  # P(A >= a), a = 0..k
    cond = np.divide(survival[1:], survival[:-1], out=np.zeros(k), where=survival[:-1] > 0)
    return PositionalAcceptance(tuple(float(min(max(c, 0.0), 1.0)) for c in cond))


HIDDEN_STATES = {"markov": 2, "hmm3": 3}  # the hidden-chain models and their states


def fit_models(data: AcceptanceData, ks: Sequence[int] = KS, models: Sequence[str] = MODELS,
               seed: int = 0) -> dict[str, Acceptance]:
    """Every model in `models`, fitted to all of `data`."""
    return fit_models_many([data], ks, models, [seed])[0]


def fit_models_many(datas: Sequence[AcceptanceData], ks: Sequence[int], models: Sequence[str],
                    seeds: Sequence[int]) -> list[dict[str, Acceptance]]:
    """`fit_models` of each data set with its seed (the same fits, the same draws from each seed's generator); the
    hidden chains of every data set fitted together (`fit_hidden_many`)."""
    unknown = [m for m in models if m not in MODELS and m != "trace"]
    if unknown:
        raise SpecsimError(f"unknown acceptance model {unknown[0]!r}; fit one of {', '.join(MODELS)}")
    out: list[dict[str, Acceptance]] = [{} for _ in datas]
    hidden: dict[str, list[tuple[int, Mapping[int, np.ndarray], np.ndarray]]] = {}
    for i, (data, seed) in enumerate(zip(datas, seeds)):
        targets = data.pmfs(ks)
        mean_alpha = float(np.concatenate(data.alphas).mean())
        rng = np.random.default_rng(seed)
        for name in models:
            if name == "iid":
                out[i][name] = IIDAcceptance(min(max(mean_alpha, 0.0), 1.0))
            elif name == "positional":
                out[i][name] = fit_positional(targets)
            elif name == "beta":
                out[i][name] = fit_beta(targets, mean_alpha)
            elif name in HIDDEN_STATES:  # starts drawn in the models' order, as one fit at a time drew them
                hidden.setdefault(name, []).append((i, targets, hidden_starts(HIDDEN_STATES[name], rng)))
            else:
                out[i][name] = data.replay
    for name, jobs in hidden.items():
        for (i, _, _), model in zip(jobs, fit_hidden_many([(t, st) for _, t, st in jobs], HIDDEN_STATES[name])):
            out[i][name] = model
    return [{name: fitted[name] for name in models} for fitted in out]


# -- judging -----------------------------------------------------------------------------------------------------

def errors_against(model: Acceptance, truth: Mapping[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(|tokens per step error| relative, total-variation distance) of `model` per k of `truth`."""
    tok, tv = [], []
    for k, t in truth.items():
        p = model.chain_pmf(k)
        a = np.arange(1, k + 2)
        tok.append(abs(np.dot(a, p) / np.dot(a, t) - 1.0))
        tv.append(0.5 * float(np.abs(p - t).sum()))
    return np.asarray(tok), np.asarray(tv)


@dataclass(frozen=True)
class ModelError:
    """One model's held-out errors per k (mean over folds)."""

    name: str
    spec: str  # fitted on all the data
    tokens_err_by_k: tuple[float, ...]
    tv_by_k: tuple[float, ...]

    @property
    def tokens_err(self) -> float:
        return float(np.mean(self.tokens_err_by_k))

    @property
    def tv(self) -> float:
        return float(np.mean(self.tv_by_k))


@dataclass(frozen=True)
class FitReport:
    source: str
    ks: tuple[int, ...]
    folds: int
    requests: int
    errors: tuple[ModelError, ...]
    chosen: str
    models: Mapping[str, Acceptance] = field(default_factory=dict, compare=False)
    context: ContextFit | None = None  # acceptance against context, where the data know their contexts

    @property
    def best(self) -> Acceptance:
        return self.models[self.chosen]

    @property
    def best_with_context(self) -> Acceptance:
        """The chosen model with the fitted context factors, where there are some and the model can take them."""
        model = self.best
        if self.context is None or model.spec.startswith("trace:"):
            return model
        return with_context(model, self.context.suffix[1:])

    def error(self, name: str) -> ModelError:
        return next(e for e in self.errors if e.name == name)


def choose(errors: Sequence[ModelError]) -> str:
    """The simplest model whose mean tokens-per-step error is within CHOICE_SLACK of the lowest."""
    lowest = min(e.tokens_err for e in errors)
    fine = [e for e in errors if e.tokens_err <= lowest * CHOICE_SLACK + 1e-12]
    return min(fine, key=lambda e: (N_PARAMS.get(e.name, 99), e.tokens_err)).name


Job = tuple[AcceptanceData, "AcceptanceData | None", tuple[int, ...], tuple[str, ...], int]


def _fit_jobs(jobs: Sequence[Job]) -> list[dict[str, Acceptance] | dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Independent pieces of `cross_validate`, fitted together (`fit_models_many`): per job, the models fitted to a
    fold's training requests and judged on its held-out ones (their errors), or, with no held-out part, the models
    fitted to everything."""
    _, _, ks, models, _ = jobs[0]
    fits = fit_models_many([train for train, *_ in jobs], ks, models, [job[4] for job in jobs])
    out: list[dict[str, Acceptance] | dict[str, tuple[np.ndarray, np.ndarray]]] = []
    for (_, test, *_), fitted in zip(jobs, fits):
        if test is None:
            out.append(fitted)
        else:
            truth = test.pmfs(ks)
            out.append({name: errors_against(model, truth) for name, model in fitted.items()})
    return out


def cross_validate(data: AcceptanceData, ks: Sequence[int] = KS, folds: int = 5, models: Sequence[str] = MODELS,
                   seed: int = 0, tick: Callable[[], None] | None = None, executor: Executor | None = None
                   ) -> FitReport:
    """K-fold cross-validation over requests (see the module docstring); the models are then fitted to all the
    data. The folds and the final fit are independent: `executor` may run them side by side (the result is the
    same whatever runs them)."""
    ks = tuple(k for k in ks if k <= data.max_k)
    if not ks:
        raise SpecsimError(f"{data.source}: the data record no lookahead long enough for k = 1")
    n = len(data)
    folds = min(folds, n)
    if folds < 2:
        raise SpecsimError(f"{data.source}: cross-validation needs at least 2 requests, got {n}")
    # Stratified by length: requests sorted by their number of positions are dealt round-robin to the folds, so a
    # few very long requests (a trace's runaway generations) land in different folds instead of deciding one.
    rng = np.random.default_rng(seed)
    lengths = np.array([len(a) for a in data.alphas])
    order = np.lexsort((rng.random(n), lengths))
    parts = [order[i::folds] for i in range(folds)]
    jobs = [(data.take(np.concatenate([p for j, p in enumerate(parts) if j != i])), data.take(held), ks,
             tuple(models), seed + i) for i, held in enumerate(parts)]
    jobs.append((data, None, ks, tuple(models), seed))
    # The fits of every job advance together (`fit_hidden_many`), so more jobs per worker cost little: one group
    # per worker, dealt round-robin.
    runner = executor or Serial()
    groups = [jobs[i::runner.slots] for i in range(min(runner.slots, len(jobs)))]

    def done(g: int) -> None:
        for _ in groups[g]:
            tick()  # type: ignore[misc]

    by_group = runner.map(_fit_jobs, groups, done if tick else None)
    results = [by_group[i % len(groups)][i // len(groups)] for i in range(len(jobs))]
    tok = {m: [results[i][m][0] for i in range(folds)] for m in models}
    tvs = {m: [results[i][m][1] for i in range(folds)] for m in models}
    fitted = results[-1]
    errs = tuple(ModelError(m, fitted[m].spec, tuple(np.mean(tok[m], axis=0)), tuple(np.mean(tvs[m], axis=0)))
                 for m in models)
    context = fit_context(data, folds=folds, seed=seed) if data.prompt_tokens is not None else None
    return FitReport(data.source, ks, folds, n, errs, choose(errs), fitted, context)


@dataclass(frozen=True)
class ContextFit:
    """Per-token acceptance against context: a factor per context bin on the pooled model (``@context:``), with
    the held-out error of predicting each bin's acceptance with and without the factors."""

    contexts: tuple[float, ...]  # each bin's mean context
    factors: tuple[float, ...]  # its acceptance over the pooled acceptance
    acceptance: tuple[float, ...]  # its per-token acceptance
    positions: tuple[int, ...]
    heldout_err_with: float  # mean |error| of a bin's acceptance on held-out requests, relative
    heldout_err_without: float

    @property
    def suffix(self) -> str:
        return "@context:" + ",".join(f"{c:.0f}={f:.3f}" for c, f in zip(self.contexts, self.factors))


def _context_bins(contexts: np.ndarray, bins: int) -> np.ndarray:
    """Bin edges at quantiles of the contexts (equal numbers of positions), merged where they coincide."""
    return np.unique(np.quantile(contexts, np.linspace(0, 1, bins + 1)))


def _binned(contexts: np.ndarray, alphas: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    idx = np.clip(np.searchsorted(edges, contexts, side="right") - 1, 0, len(edges) - 2)
    count = np.bincount(idx, minlength=len(edges) - 1)
    mean_c = np.bincount(idx, contexts, minlength=len(edges) - 1) / np.maximum(count, 1)
    mean_a = np.bincount(idx, alphas, minlength=len(edges) - 1) / np.maximum(count, 1)
    return mean_c, mean_a, count


def fit_context(data: AcceptanceData, bins: int = 8, folds: int = 5, seed: int = 0) -> ContextFit:
    """Acceptance by context: the positions cut into `bins` bins of equal size by context, each bin's factor its
    acceptance over the pooled one. Judged on held-out requests (folds stratified as in `cross_validate`): each
    held-out bin's acceptance predicted by the training factors (with) or by the training pooled acceptance
    (without)."""
    contexts, alphas = data.by_context()
    edges = _context_bins(contexts, bins)
    if len(edges) < 3:
        raise SpecsimError(f"{data.source}: the contexts do not spread over two bins; nothing to fit")
    mean_c, mean_a, count = _binned(contexts, alphas, edges)
    pooled = float(alphas.mean())
    rng = np.random.default_rng(seed)
    n = len(data)
    order = np.lexsort((rng.random(n), [len(a) for a in data.alphas]))
    with_f, without = [], []
    for i in range(min(folds, n)):
        held = set(order[i::folds].tolist())
        train = data.take([j for j in range(n) if j not in held])
        test = data.take(sorted(held))
        c_tr, a_tr = train.by_context()
        c_te, a_te = test.by_context()
        _, tr_a, tr_n = _binned(c_tr, a_tr, edges)
        _, te_a, te_n = _binned(c_te, a_te, edges)
        ok = (te_n > 0) & (tr_n > 0)
        weight = te_n[ok] / te_n[ok].sum()
        with_f.append(float(weight @ (np.abs(tr_a[ok] - te_a[ok]) / np.maximum(te_a[ok], 1e-9))))
        without.append(float(weight @ (np.abs(a_tr.mean() - te_a[ok]) / np.maximum(te_a[ok], 1e-9))))
    keep = count > 0
    return ContextFit(tuple(float(c) for c in mean_c[keep]), tuple(float(a / pooled) for a in mean_a[keep]),
                      tuple(float(a) for a in mean_a[keep]), tuple(int(c) for c in count[keep]),
                      float(np.mean(with_f)), float(np.mean(without)))


def transfer(train: AcceptanceData, tests: Mapping[str, AcceptanceData], ks: Sequence[int],
             models: Sequence[str] = MODELS, seed: int = 0) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Fit every model on `train`, predict each test set's replay: model -> test name -> (tokens err, TV) per k."""
    fitted = fit_models(train, ks, models, seed)
    return {m: {name: errors_against(fitted[m], test.pmfs(ks)) for name, test in tests.items()} for m in models}


def fit_in_sample(targets: Mapping[int, np.ndarray], source: str, models: Sequence[str] = MODELS,
                  seed: int = 0) -> FitReport:
    """Models fitted to step distributions alone (an engine's counters: no per-request data to hold out), with
    their in-sample errors; ``folds`` is 0 to say so. i.i.d. has the same tokens per step at the longest k."""
    from .acceptance import iid_from_mean_length

    ks = tuple(sorted(targets))
    k = ks[-1]
    mean_len = float(np.dot(np.arange(1, k + 2), targets[k]))
    rng = np.random.default_rng(seed)
    fitted: dict[str, Acceptance] = {}
    for name in models:
        if name == "iid":
            fitted[name] = iid_from_mean_length(min(max(mean_len, 1.0), k + 1.0), k)
        elif name == "positional":
            fitted[name] = fit_positional(targets)
        elif name == "beta":
            fitted[name] = fit_beta(targets, (mean_len - 1) / k)
        elif name in HIDDEN_STATES:
            fitted[name] = fit_hidden(targets, HIDDEN_STATES[name], (mean_len - 1) / k, rng)
        else:
            raise SpecsimError(f"model {name!r} cannot be fitted to step counts alone")
    errs = []
    for name, model in fitted.items():
        tok, tv = errors_against(model, targets)
        errs.append(ModelError(name, model.spec, tuple(tok), tuple(tv)))
    return FitReport(source, ks, 0, 0, tuple(errs), choose(errs), fitted)


def fit_record(report: FitReport) -> dict:
    """The report as plain data (what `acceptance fit --out` writes and `--acceptance fit:FILE` reads)."""
    from . import __version__

    return {"specsim_version": __version__, "source": report.source, "ks": list(report.ks), "folds": report.folds,
            "requests": report.requests, "held_out": report.folds > 0, "chosen": report.chosen,
            "spec": report.best_with_context.spec,
            "context": None if report.context is None else asdict(report.context),
            "models": {e.name: {"spec": e.spec, "tokens_err": e.tokens_err, "tv": e.tv,
                                "tokens_err_by_k": list(e.tokens_err_by_k), "tv_by_k": list(e.tv_by_k)}
                       for e in report.errors}}


def format_fit_report(report: FitReport) -> str:
    how = (f"{report.folds}-fold cross-validation over {report.requests} requests: errors on held-out requests"
           if report.folds else "in-sample errors (step counts only: nothing to hold out)")
    lines = [f"acceptance fit of {report.source}: {how}",
             f"  {'model':11s} |tokens per step error| by k = {', '.join(map(str, report.ks))}"]
    for e in report.errors:
        by_k = " ".join(f"{100 * x:5.1f}" for x in e.tokens_err_by_k)
        mark = "  <- chosen" if e.name == report.chosen else ""
        lines.append(f"  {e.name:11s} {by_k}   mean {100 * e.tokens_err:5.1f} %, TV {100 * e.tv:4.1f} %{mark}")
    lines.append("  (errors in %; TV: total-variation distance of the accepted-length distribution, mean over k)")
    lines.append("fitted on all of it:")
    for e in report.errors:
        lines.append(f"  {e.name:11s} {e.spec}")
    lines.append(f"chosen: {report.chosen} (the simplest model within {100 * (CHOICE_SLACK - 1):.0f} % of the lowest "
                 f"mean error): {report.models[report.chosen].spec}")
    c = report.context
    if c is not None:
        lines.append("acceptance by context (per drafted token; bins of equal positions):")
        lines.append("  " + "  ".join(f"{x:,.0f}: {a:.3f} (x{f:.2f})" for x, a, f in
                                      zip(c.contexts, c.acceptance, c.factors)))
        lines.append(f"  held out, a bin's acceptance predicted with these factors is off by "
                     f"{100 * c.heldout_err_with:.1f} %, without them by {100 * c.heldout_err_without:.1f} %")
        if not report.best.spec.startswith("trace:"):
            lines.append(f"with context: {report.best_with_context.spec}")
    return "\n".join(lines)
