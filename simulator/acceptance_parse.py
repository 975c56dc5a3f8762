"""An acceptance model from its spec string: ``iid:A``, ``positional:A1,A2,...``, ``beta:a,b``,
``markov:AE,AH,PEH,PHE``, ``hmm:ALPHAS/ROW1/...``, ``ranks:R1,R2,...``, each optionally ``@context:C=F,...`` (the
grammar is in `simulator.acceptance`'s docstring). Specs that read files (``trace:FILE``, ``fit:SOURCE``) are
resolved above the pure model, in `scenarios.acceptance_specs`."""

from __future__ import annotations

from collections.abc import Sequence

from . import SpecsimError
from .acceptance import (
    Acceptance,
    BetaAcceptance,
    HiddenStateAcceptance,
    IIDAcceptance,
    MarkovAcceptance,
    PositionalAcceptance,
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


def parse_acceptance(spec: str) -> Acceptance:
    """Build an acceptance model from its spec string (see the module docstring)."""
    base, at, table = spec.partition("@")
    if at:
        return with_context(parse_acceptance(base), table)
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

