"""Published measurements of speculative decoding on the engines people deploy (vLLM, SGLang, TensorRT-LLM), one
TOML file per source in `scenarios/published/`, loaded into frozen dataclasses.

Each file holds one `[source]` table (id, url, date, title, kind, independent_of), an optional `[defaults]` table of
point keys that every point takes unless it gives its own, and one `[[point]]` per measured configuration: the
verbatim `quote` the figures come from, the hardware, engine, target, draft and workload as the source states them,
and the plain and speculative figures in one `metric`. A field the source does not give is the string "not stated"
and loads as None; a field filled in from the source's context rather than its quote (the GPU
named in the same author's earlier post, say) is listed in the point's `inferred`. The loader is strict: an unknown
key, a missing required key or a bad value is a one-line error naming the file and the point.

Speed-up: the source's own figure where it states one, else computed from `plain` and `spec` in the direction of the
metric (plain / spec for a time, spec / plain for a rate); None where neither is given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios import tomllib
from scenarios.files import read_text
from simulator import SpecsimError

FOLDER = Path(__file__).resolve().parent / "published"
NOT_STATED = "not stated"

SOURCE_KINDS = ("issue", "pr", "paper", "blog", "docs", "model-card", "benchmark", "repository")
ENGINES = ("vllm", "sglang", "tensorrt-llm", "llama.cpp")
DRAFT_KINDS = ("model", "eagle", "eagle3", "mtp", "medusa", "ngram", "suffix")
# metric -> True where a smaller figure is faster (a time), False for a rate; "speedup" carries no plain/spec pair.
TIME_METRICS = {"tpot_ms": True, "itl_ms": True, "e2e_s": True, "output_throughput_tok_s": False,
                "tokens_per_s_per_user": False, "speedup": None}
OPERATING_POINT = ("batch", "concurrency", "rate_rps")

_SOURCE_KEYS = {"id", "url", "date", "title", "kind", "independent_of", "held_out"}
_REQUIRED_POINT = {"quote", "gpu", "gpu_count", "tp", "engine", "engine_version", "target", "draft_kind", "metric"}
_OPTIONAL_POINT = {"ep", "precision", "kv_precision", "draft_model", "k", "tree", "topk", "depth", "dataset",
                   "input_len", "output_len", "temperature", "batch", "concurrency", "rate_rps", "plain", "spec",
                   "speedup", "acceptance_length", "acceptance_rates", "note", "inferred", "engine_settings"}
_SLUG = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")


@dataclass(frozen=True)
class PublishedSource:
    """Where a set of points was published; `independent_of` names the sources whose figures this one copies."""
    id: str
    url: str
    date: str  # YYYY-MM-DD (or YYYY-MM) of publication
    title: str
    kind: str  # one of SOURCE_KINDS
    independent_of: tuple[str, ...]
    file: str  # the TOML file's name
    held_out: bool = False  # added after the engine presets were fixed: predicted, never fitted (issue 64)


@dataclass(frozen=True)
class PublishedPoint:
    """One measured configuration as its source states it; None wherever the source says nothing."""
    source: PublishedSource
    index: int  # 1-based position of the [[point]] in its file
    quote: str
    gpu: str | None  # specsim hardware preset name where one exists
    gpu_count: int | None
    tp: int | None
    ep: int | None
    engine: str  # one of ENGINES
    engine_version: str | None
    target: str  # specsim model preset name where one exists, else the Hugging Face id
    precision: str | None  # weights: bf16, fp8, nvfp4, mxfp4, ...
    kv_precision: str | None
    draft_kind: str  # one of DRAFT_KINDS
    draft_model: str | None
    k: int | None  # draft tokens per step (a chain), or the tree's draft-token budget
    tree: str | None
    topk: int | None
    depth: int | None
    dataset: str | None
    input_len: int | None
    output_len: int | None
    temperature: float | None
    batch: int | None
    concurrency: int | None
    rate_rps: float | None
    metric: str  # one of TIME_METRICS
    plain: float | None
    spec: float | None
    speedup: float | None  # stated, else from plain and spec
    speedup_stated: bool
    acceptance_length: float | None  # mean tokens per step including the bonus token
    acceptance_rates: tuple[float, ...] | None  # per draft position
    note: str
    inferred: tuple[str, ...]  # fields taken from the source's context, not from `quote`
    engine_settings: str = ""  # the run's stated engine settings as --engine-setting's 'KEY=VALUE;...' (a launch flag)

    @property
    def label(self) -> str:
        return f"{self.source.id}#{self.index}"


def speedup_of(metric: str, plain: float, spec: float) -> float:
    """Speculative over plain, > 1 where speculation is faster, in the direction of `metric`."""
    return plain / spec if TIME_METRICS[metric] else spec / plain


class _Reader:
    """Reads one table's fields with one-line errors that name the file and the point."""

    def __init__(self, table: dict[str, Any], where: str):
        self.table, self.where = table, where

    def fail(self, key: str, why: str) -> SpecsimError:
        return SpecsimError(f"published corpus {self.where}: {key} {why}")

    def present(self, key: str) -> bool:
        return key in self.table

    def text(self, key: str, choices: tuple[str, ...] | None = None, optional: bool = False,
             stated: bool = False) -> str | None:
        """A non-empty string; None for "not stated" (or absent, where `optional`) unless `stated` requires it."""
        if key not in self.table:
            if optional:
                return None
            raise self.fail(key, "is missing")
        v = self.table[key]
        if not isinstance(v, str) or not v.strip():
            raise self.fail(key, f"must be a non-empty string, not {v!r}")
        if v == NOT_STATED:
            if stated:
                raise self.fail(key, "must be stated")
            return None
        if choices is not None and v not in choices:
            raise self.fail(key, f"is {v!r}; one of {', '.join(choices)} (or {NOT_STATED!r})")
        return v

    def number(self, key: str, integer: bool = False, minimum: float = 0.0, optional: bool = True) -> Any:
        """A finite number >= minimum (an int where `integer`); None for "not stated" or absent."""
        if key not in self.table:
            if optional:
                return None
            raise self.fail(key, "is missing")
        v = self.table[key]
        if v == NOT_STATED:
            return None
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or not math.isfinite(v) or v < minimum:
            kind = "an integer" if integer else "a finite number"
            raise self.fail(key, f"must be {kind} >= {minimum:g} or {NOT_STATED!r}, not {v!r}")
        return int(v) if integer else float(v)


def _source(table: Any, file: str) -> PublishedSource:
    if not isinstance(table, dict):
        raise SpecsimError(f"published corpus {file}: needs one [source] table")
    r = _Reader(table, f"{file} [source]")
    unknown = sorted(set(table) - _SOURCE_KEYS)
    if unknown:
        raise r.fail(unknown[0], f"is not a source key (known: {', '.join(sorted(_SOURCE_KEYS))})")
    sid = r.text("id", stated=True)
    if not _SLUG.match(sid):
        raise r.fail("id", f"{sid!r} must be lower-case letters, digits and - . _ +")
    url = r.text("url", stated=True)
    if not url.startswith(("https://", "http://")):
        raise r.fail("url", f"{url!r} is not a web address")
    date = r.text("date", stated=True)
    if not _DATE.match(date):
        raise r.fail("date", f"{date!r} is not YYYY-MM-DD")
    copies = table.get("independent_of", [])
    if not isinstance(copies, list) or not all(isinstance(c, str) and c for c in copies):
        raise r.fail("independent_of", "must be a list of source ids")
    held = table.get("held_out", False)
    if not isinstance(held, bool):
        raise r.fail("held_out", "must be true or false")
    return PublishedSource(sid, url, date, r.text("title", stated=True), r.text("kind", SOURCE_KINDS, stated=True),
                           tuple(copies), file, held)


def _point(table: Any, source: PublishedSource, index: int) -> PublishedPoint:
    where = f"{source.file} point {index}"
    if not isinstance(table, dict):
        raise SpecsimError(f"published corpus {where}: must be a table")
    r = _Reader(table, where)
    unknown = sorted(set(table) - _REQUIRED_POINT - _OPTIONAL_POINT)
    if unknown:
        raise r.fail(unknown[0], "is not a point key")
    for key in sorted(_REQUIRED_POINT):
        if key not in table:
            raise r.fail(key, "is missing")
    quote = r.text("quote", stated=True)
    gpu = r.text("gpu")
    if gpu is not None and not _SLUG.match(gpu):
        raise r.fail("gpu", f"{gpu!r} must be a lower-case preset-style name")
    metric = r.text("metric", tuple(TIME_METRICS), stated=True)
    plain, spec = r.number("plain", minimum=1e-12), r.number("spec", minimum=1e-12)
    stated = r.number("speedup", minimum=1e-12)
    if metric == "speedup":
        if plain is not None or spec is not None:
            raise r.fail("plain", "and spec have no meaning for metric 'speedup'; give speedup")
        if stated is None:
            raise r.fail("speedup", "must be given for metric 'speedup'")
    elif spec is None and stated is None:
        raise r.fail("spec", "must be given (or speedup)")
    speedup = stated if stated is not None else (speedup_of(metric, plain, spec) if plain is not None else None)
    ops = [k for k in OPERATING_POINT if k in table]
    if len(ops) != 1:
        raise r.fail("batch", f"exactly one of {', '.join(OPERATING_POINT)} must be given, not {ops or 'none'}")
    k, tree = r.number("k", integer=True, minimum=1), r.text("tree", optional=True)
    if "k" not in table and tree is None:
        raise r.fail("k", "is missing (or tree)")
    rates = table.get("acceptance_rates")
    if rates is not None:
        if not isinstance(rates, list) or not rates or not all(
                isinstance(a, (int, float)) and not isinstance(a, bool) and 0 <= a <= 1 for a in rates):
            raise r.fail("acceptance_rates", f"must be a list of probabilities, not {rates!r}")
        rates = tuple(float(a) for a in rates)
    length = r.number("acceptance_length", minimum=1.0)
    inferred = table.get("inferred", [])
    if not isinstance(inferred, list) or not all(isinstance(f, str) and f in table for f in inferred):
        raise r.fail("inferred", f"must list keys of this point, not {inferred!r}")
    note = r.text("note", optional=True) or ""
    n = r.number
    return PublishedPoint(
        source=source, index=index, quote=quote, gpu=gpu, gpu_count=n("gpu_count", integer=True, minimum=1),
        tp=n("tp", integer=True, minimum=1), ep=n("ep", integer=True, minimum=1),
        engine=r.text("engine", ENGINES, stated=True), engine_version=r.text("engine_version"),
        target=r.text("target", stated=True), precision=r.text("precision", optional=True),
        kv_precision=r.text("kv_precision", optional=True), draft_kind=r.text("draft_kind", DRAFT_KINDS, stated=True),
        draft_model=r.text("draft_model", optional=True), k=k, tree=tree, topk=n("topk", integer=True, minimum=1),
        depth=n("depth", integer=True, minimum=1), dataset=r.text("dataset", optional=True),
        input_len=n("input_len", integer=True, minimum=1), output_len=n("output_len", integer=True, minimum=1),
        temperature=n("temperature"), batch=n("batch", integer=True, minimum=1),
        concurrency=n("concurrency", integer=True, minimum=1), rate_rps=n("rate_rps", minimum=1e-12), metric=metric,
        plain=plain, spec=spec, speedup=speedup, speedup_stated=stated is not None, acceptance_length=length,
        acceptance_rates=rates, note=note, inferred=tuple(inferred),
        engine_settings=r.text("engine_settings", optional=True) or "")


def load_source(path: str | Path) -> list[PublishedPoint]:
    """The points of one source file."""
    path = Path(path)
    try:
        d = tomllib.loads(read_text(path, "published source"))
    except tomllib.TOMLDecodeError as e:
        raise SpecsimError(f"published corpus {path.name}: not valid TOML: {e}") from None
    unknown = sorted(set(d) - {"source", "defaults", "point"})
    if unknown:
        raise SpecsimError(f"published corpus {path.name}: {unknown[0]} is not a top-level key (source, defaults, "
                           "point)")
    source = _source(d.get("source"), path.name)
    defaults = d.get("defaults", {})
    if not isinstance(defaults, dict) or "quote" in defaults:
        raise SpecsimError(f"published corpus {path.name}: [defaults] must be a table of point keys without a quote")
    points = d.get("point")
    if not isinstance(points, list) or not points:
        raise SpecsimError(f"published corpus {path.name}: has no [[point]]")
    return [_point({**defaults, **p} if isinstance(p, dict) else p, source, i) for i, p in enumerate(points, 1)]


def load_corpus(folder: str | Path | None = None) -> list[PublishedPoint]:
    """Every point of every `*.toml` in `folder` (default: the shipped `scenarios/published/`), by file name; source
    ids must be unique and `independent_of` must name sources in the corpus."""
    folder = Path(folder) if folder is not None else FOLDER
    if not folder.is_dir():
        raise SpecsimError(f"published corpus {str(folder)!r} is not a folder")
    points: list[PublishedPoint] = []
    files: dict[str, str] = {}
    for path in sorted(folder.glob("*.toml")):
        source_points = load_source(path)
        sid = source_points[0].source.id
        if sid in files:
            raise SpecsimError(f"published corpus {path.name}: source id {sid!r} is already used by {files[sid]}")
        files[sid] = path.name
        points.extend(source_points)
    for p in points:
        missing = [c for c in p.source.independent_of if c not in files]
        if missing:
            raise SpecsimError(f"published corpus {p.source.file}: independent_of names {missing[0]!r}, "
                               "which is not a source in the corpus")
    return points
