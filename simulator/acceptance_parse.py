"""An acceptance model from its spec string: ``iid:A``, ``positional:A1,A2,...``, ``beta:a,b``,
``markov:AE,AH,PEH,PHE``, ``hmm:ALPHAS/ROW1/...``, ``ranks:R1,R2,...``, each optionally ``@context:C=F,...`` (the
grammar is in `simulator.acceptance`'s docstring). Specs that read files (``trace:FILE``, ``fit:SOURCE``) are
resolved above the pure model, in `scenarios.acceptance_specs`."""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import SpecsimError
from .acceptance import (
    Acceptance,
    BetaAcceptance,
    HiddenStateAcceptance,
    IIDAcceptance,
    MarkovAcceptance,
    PositionalAcceptance,
    Proposing,
    RanksAcceptance,
)
from .context import with_context


def _floats(kind: str, body: str, example: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in body.split(",") if x.strip() != "")
    except ValueError:
        raise SpecsimError(f"{kind} acceptance takes comma-separated numbers, e.g. {example}; got {body!r}") from None
    if not values:
        raise SpecsimError(f"{kind} acceptance needs values, e.g. {example}")
    return values


def split_proposed(spec: str) -> tuple[str, float | None]:
    """(the spec without its ``@proposed:P`` suffix, P or None), wherever among the suffixes it stands."""
    m = re.search(r"@proposed:([^@]*)", spec)
    if m is None:
        return spec, None
    try:
        rate = float(m.group(1))
    except ValueError:
        raise SpecsimError(f"@proposed:{m.group(1)!r} is not a share of steps: a model-free draft's proposal rate is "
                           "a number in [0, 1], e.g. iid:0.8@proposed:0.3") from None
    return spec[:m.start()] + spec[m.end():], rate


def with_suffixes(model: Acceptance, suffixes: Sequence[str]) -> Acceptance:
    """`model` with its ``@context:...`` and ``@proposed:P`` suffixes (given without the ``@``), in any order; the
    proposal rate wraps the rest."""
    rate = None
    for suffix in suffixes:
        kind, _, body = suffix.partition(":")
        if kind.strip().lower() == "proposed":
            try:
                rate = float(body)
            except ValueError:
                raise SpecsimError(f"@{suffix!r} is not @proposed:P, the share of steps a model-free draft "
                                   "proposes anything on, e.g. iid:0.8@proposed:0.3") from None
        else:
            model = with_context(model, suffix)
    return Proposing(model, rate) if rate is not None else model


def parse_acceptance(spec: str) -> Acceptance:
    """Build an acceptance model from its spec string (see the module docstring)."""
    spec, rate = split_proposed(spec)
    if rate is not None:
        return Proposing(parse_acceptance(spec), rate)
    base, *suffixes = spec.split("@")
    if suffixes:
        return with_suffixes(parse_acceptance(base), suffixes)
    kind, sep, body = spec.partition(":")
    kind = kind.strip().lower()
    if not sep and kind not in ("iid", "positional", "beta", "markov", "hmm", "trace", "ranks"):
        raise SpecsimError(f"acceptance {spec!r} is not KIND:VALUES; use iid:0.7, positional:0.8,0.7, beta:7,3, "
                           "markov:0.9,0.3,0.1,0.3, trace:FILE[:eagle|ngram] or ranks:0.6,0.15,0.05")
    if kind == "iid":
        (a,) = _expect(_floats("iid", body, "iid:0.7"), 1, "iid:0.7")
        return IIDAcceptance(a)
    if kind == "positional":
        return PositionalAcceptance(_floats("positional", body, "positional:0.8,0.7"))
    if kind == "beta":
        a, b = _expect(_floats("beta", body, "beta:7,3"), 2, "beta:7,3")
        return BetaAcceptance(a, b)
    if kind == "markov":
        return MarkovAcceptance(*_expect(_floats("markov", body, "markov:0.9,0.3,0.1,0.3"), 4,
                                         "markov:ALPHA_EASY,ALPHA_HARD,P_EASY_TO_HARD,P_HARD_TO_EASY"))
    if kind == "ranks":
        return RanksAcceptance(_floats("ranks", body, "ranks:0.6,0.15,0.05"))
    if kind == "hmm":
        groups = [_floats("hmm", g, "hmm:0.9,0.3/0.9,0.1/0.3,0.7") for g in body.split("/")]
        if len(groups) < 2:
            raise SpecsimError("hmm acceptance is ALPHAS/ROW1/ROW2/..., e.g. hmm:0.9,0.3/0.9,0.1/0.3,0.7")
        # A printed spec rounds each probability to four digits, so its rows sum to 1 within about 1e-4: those
        # are renormalised; a row further off is a mistake and refused (HiddenStateAcceptance).
        rows = tuple(tuple(p / sum(r) for p in r) if abs(sum(r) - 1.0) <= 1e-3 else tuple(r) for r in groups[1:])
        return HiddenStateAcceptance(groups[0], rows)
    if kind == "trace":
        raise SpecsimError("trace:FILE reads a file; resolve it with scenarios.acceptance_from_spec")
    raise SpecsimError(f"unknown acceptance model {kind!r}; use iid, positional, beta, markov, hmm, trace or ranks")


def _expect(values: Sequence[float], n: int, example: str) -> Sequence[float]:
    if len(values) != n:
        raise SpecsimError(f"expected {n} value{'s' if n > 1 else ''} ({example}), got {len(values)}")
    return values

