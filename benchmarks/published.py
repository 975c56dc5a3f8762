"""Every published measurement of the corpus (`scenarios/published/`) predicted by specsim, and the engine presets'
costs fitted to it and cross-validated by source.

    python benchmarks/published.py [--plot docs/published-vs-measured.png] [--fit] [--json]

Each point is priced as its source ran it: its GPU preset and count (tensor parallel), its target and precision, its
draft kind (a draft model, an EAGLE-1 or EAGLE-3 head, MTP, n-gram lookup), its k or tree (SGLang's steps, topk and
draft tokens), its batch or concurrency and context, and its engine's preset (`scenarios/engines.toml`). The
acceptance is the point's own published mean acceptance length (or 1 + the sum of its per-position rates), so the
error left is the cost model's: speed-up = acceptance length x plain step / speculative step.

A point is left out, with the reason printed, where specsim has no preset for its GPU or target, where no
acceptance was published, or where its load is a request rate (no batch to price a step at).

`--fit` refits each engine's costs (per step, per draft pass by kind, per speculative step) to every point, prints
them as engines.toml keys, and cross-validates leave-one-source-out: each source predicted by costs fitted without
it (a source's copies, `independent_of`, left out with it). Without `--fit` the presets as shipped predict every
point, and the leave-one-source-out table is still computed (fitting is a second or two).

The costs are linear in the parameters, so each point is priced once by the model's passes (`step_time` with the
engine's costs set to zero) and the fit works on the decomposition; the presets as shipped are then checked through
the model itself (the same numbers, to rounding).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios import engine_family, hardware_names, load_engine_preset, load_hardware, load_model, model_names  # noqa: E402
from scenarios.draft_specs import load_draft  # noqa: E402
from scenarios.published import PublishedPoint, load_corpus  # noqa: E402
from scenarios.setup import shard_draft  # noqa: E402
from simulator import SpecsimError  # noqa: E402
from simulator.cost import CostModel  # noqa: E402
from simulator.drafts import Draft, eagle_head  # noqa: E402
from simulator.specs import DTYPE_BYTES, KV_OF_WEIGHTS, EngineOverheads, ModelSpec  # noqa: E402
from simulator.sweep import Candidate, step_time  # noqa: E402
from simulator.trees import Tree  # noqa: E402

# Targets without a preset priced as the preset of the same shape, with the reason.
TARGET_ALIASES = {
    "deepseek-ai/DeepSeek-V3.2": ("deepseek-v3", "DeepSeek-V3.2 is DeepSeek-V3's shape (671 B, 37 B active, MLA, one "
                                  "MTP module) with DSA sparse attention, which reads at most 2,048 cached tokens: the "
                                  "same reads at the corpus's short contexts"),
}
DEFAULT_CONTEXT = 512  # tokens in the cache where the source gives no lengths (MT-Bench-like prompts)
DRAFT_MODELS = {"llama-3.2-1b": ("llama-3.2-1b",), "qwen3-0.6b": ("qwen3-0.6b",), "qwen2.5-0.5b": ("qwen2.5-0.5b",),
                "llama-68m": ("llama-68m",)}
PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4", "int4": "int4",
             "w4a16": "w4a16", "q4_k_m": "q4_k_m", "q5_k_m": "q5_k_m", "q8_0": "q8_0"}
PRIOR_US = {"step_us": 1000.0, "spec_step_us": 1000.0, "pass_us": 300.0, "seq_us": 0.0}
PRIOR_WEIGHT = 0.02  # a prior's pull, as log-error: 1 ms off a prior counts as a 2 % miss on one point


@dataclass(frozen=True)
class Priced:
    """A point priced by the model's passes alone (engine costs zero) and what its engine adds, per parameter."""

    point: PublishedPoint
    engine: str  # the engine preset (its version) that prices it: its mechanisms are in the passes below
    kind: str
    batch: int
    context: int
    acceptance_length: float
    plain_s: float  # one plain step's passes
    draft_s: float  # one speculative step's drafting passes (and a head's fusion)
    verify_s: float  # its verification pass
    draft_passes: int
    tree: bool

    @property
    def measured(self) -> float:
        return float(self.point.speedup)

    @property
    def family(self) -> str:
        """The engine whose fitted costs price it (its versions share them; they differ in mechanisms)."""
        return engine_family(self.engine)

    def predict(self, step_us: float, spec_step_us: float, pass_us: float, kind_step_us: float,
                tree_us: float = 0.0, seq_us: float = 0.0) -> float:
        plain = self.plain_s + step_us * 1e-6
        # the model's rule (`simulator.sweep.step_times`): a verification is never cheaper than a plain step
        verify = max(self.verify_s + (spec_step_us + seq_us * self.batch) * 1e-6, plain)
        spec = (self.draft_s + verify + (kind_step_us + (tree_us if self.tree else 0.0)) * 1e-6
                + self.draft_passes * pass_us * 1e-6)
        return self.acceptance_length * plain / spec


# Where an engine's mechanisms changed between its versions (engines.toml [ENGINE.versions.V]): a point takes the
# version its source states, else the one current at its date.
VERSION_DATES = {"vllm": (("2026-01", "0.2x"), ("", "0.10")),  # 2026: drafting in graphs, async scheduling
                 "sglang": (("2025-09", "0.5"), ("", "0.4")),  # PR #10372 (Sept 2025): the capture ceiling 256
                 "tensorrt-llm": (("", "1.0"),), "llama.cpp": (("", "b10450"),)}


def engine_of(p: PublishedPoint) -> str:
    """The engine preset (ENGINE@VERSION, + the run's stated settings) that describes a point's engine, version and
    launch flags (engines.toml)."""
    name = _engine_version(p)
    return f"{name}+{p.engine_settings}" if p.engine_settings else name


def _engine_version(p: PublishedPoint) -> str:
    stated = re.match(r"v?(\d+)\.(\d+)", p.engine_version or "")
    if stated and p.engine == "sglang":
        return f"sglang@{stated[1]}.{stated[2]}" if stated[1] == "0" and stated[2] in "45" else "sglang@0.5"
    if stated and p.engine == "vllm":
        return "vllm@0.10" if int(stated[2]) < 20 else "vllm@0.2x"
    return f"{p.engine}@" + next(v for since, v in VERSION_DATES[p.engine] if str(p.source.date) >= since)


def _tree(p: PublishedPoint) -> Tree | None:
    """SGLang's and EAGLE's trees (steps, topk, draft tokens) as a tree of `depth` levels holding k nodes,
    front-loaded up to topk a level; None for a chain."""
    k = p.k or 0
    depth = p.depth or 0
    if not k or not (p.topk and p.topk > 1) and not p.tree:
        return None
    depth = min(depth or max(1, math.ceil(math.log(k + 1, max(p.topk or 2, 2)))), k)
    widths = [1] * depth
    left = k - depth
    for d in range(depth):
        room = max((p.topk or 2) ** (d + 1) - widths[d], 0)
        add = min(room, left)
        widths[d] += add
        left -= add
    widths[-1] += left
    parents, ranks, prev_first = [], [], 0
    for w in widths:
        first = len(parents) + 1
        for r in range(w):
            parents.append(prev_first)
            ranks.append(r + 1)
        prev_first = first
    return Tree(tuple(parents), tuple(ranks), label=f"{k} nodes, depth {depth}")


def _draft(p: PublishedPoint, target: ModelSpec) -> Draft:
    kind = p.draft_kind
    if kind == "model":
        name = (p.draft_model or "").lower().split("/")[-1].replace("-instruct", "").replace("meta-", "")
        preset = next((m for m in model_names() if m == name or name.startswith(m)), None)
        if preset is None:
            raise SpecsimError(f"no preset for the draft model {p.draft_model}")
        return load_draft(preset, target, target.dtype)
    if kind == "eagle":
        return eagle_head(target)
    if kind == "eagle3":
        return load_draft("eagle3", target, target.dtype)
    if kind == "mtp":
        return load_draft("mtp:1", target, target.dtype)
    if kind in ("ngram", "suffix"):
        return load_draft(kind, target, target.dtype)
    raise SpecsimError(f"draft kind {kind} not priced")


def acceptance_length(p: PublishedPoint) -> float | None:
    """The point's mean tokens per step: published, or 1 + the sum of its per-position acceptance rates (vLLM's
    counters: the share of steps whose i-th drafted token was accepted)."""
    if p.acceptance_length is not None:
        return p.acceptance_length
    if p.acceptance_rates:
        return 1.0 + float(sum(p.acceptance_rates))
    return None


def target_of(p: PublishedPoint, dtype: str) -> ModelSpec:
    """The point's target in its stated precision: a preset with a dtype of its own (DeepSeek-V3's FP8 checkpoint)
    keeps it unless the point states another (NVIDIA's NVFP4 DeepSeek-R1), whose KV cache is then what those weights
    keep (`KV_OF_WEIGHTS`: FP8 beside 4-bit weights)."""
    full = load_model(p.target, dtype) if p.precision else load_model(p.target)
    if p.precision and full.dtype != dtype:
        full = replace(full, dtype=dtype, kv_dtype=KV_OF_WEIGHTS.get(dtype, full.kv_dtype))
    return full


def cited_only(e: EngineOverheads) -> EngineOverheads:
    """An engine's costs with the fitted ones at zero: what is left is what a source states (the rejection sampler's
    host work a request, `accept_per_sequence_us`)."""
    return EngineOverheads(chain_accept=replace(e.chain_accept, fixed_s=0.0),
                           tree_accept=replace(e.tree_accept, fixed_s=0.0), ragged_verify=True,
                           drafts_per_sequence=e.drafts_per_sequence)


def price(p: PublishedPoint, assumed_length: float | None = None) -> Priced:
    """The point priced by the passes alone; a SpecsimError says why it cannot be. `assumed_length` stands in for
    an acceptance the point does not publish (`anchored_series`)."""
    if p.speedup is None:
        raise SpecsimError("no speed-up published")
    if p.gpu is None or p.gpu not in hardware_names():
        raise SpecsimError(f"no hardware preset for {p.gpu or 'an unnamed GPU'}")
    if p.target in TARGET_ALIASES:
        p = replace(p, target=TARGET_ALIASES[p.target][0])
    if p.target not in model_names():
        raise SpecsimError(f"no model preset for {p.target}")
    al = acceptance_length(p) or assumed_length
    if al is None:
        raise SpecsimError("no acceptance published")
    batch = p.batch or p.concurrency
    if batch is None:
        raise SpecsimError("a request rate, not a batch")
    dtype = PRECISION.get(p.precision or "bf16")
    if dtype is None or dtype not in DTYPE_BYTES:
        raise SpecsimError(f"precision {p.precision} not priced")
    tp = p.tp or p.gpu_count or 1
    engine = engine_of(p)
    hw = load_hardware(p.gpu, engine)  # the engine's mechanisms: graphs, how costs add, its collectives
    full = target_of(p, dtype)
    target = full.shard(tp) if tp > 1 else full
    draft = shard_draft(_draft(p, full), tp, hw)
    cost = CostModel.from_hardware(hw, target.dtype)
    cost = replace(cost, overheads=replace(cost.overheads, pass_s=0.0, engine=cited_only(cost.overheads.engine)))
    context = (p.input_len + (p.output_len or 0) // 2) if p.input_len else DEFAULT_CONTEXT
    tree = _tree(p)
    cand = Candidate(None, tree) if tree is not None else Candidate(p.k or 1)
    plain = step_time(cost, target, draft, batch, context, Candidate(0)).total_s
    spec = step_time(cost, target, draft, batch, context, cand)
    graphed_drafter = dict(load_engine_preset(engine).settings).get("drafter_in_graphs", False)
    passes = 0 if not draft.on_device or graphed_drafter else (1 if draft.kind == "medusa" else cand.shape.depth)
    return Priced(p, engine, p.draft_kind, batch, context, al, plain, spec.draft_s + spec.accept_s, spec.verify_s,
                  passes, tree is not None)


# -- the fit ---------------------------------------------------------------------------------------------------------

@dataclass
class Params:
    """Each engine's fitted costs in microseconds, every one >= 0 (its versions share them): `engine[e]` =
    {step_us, spec_step_us, pass_us, seq_us, tree_us} (pass_us: a draft pass of a kind it has no entry for; seq_us:
    a speculative step's host work a request where the overlap scheduler is off), `kind[(e, kind)]` = {pass_us,
    step_us} (a kind's draft pass in place of pass_us, and its step on top of spec_step_us)."""

    engine: dict[str, dict[str, float]]
    kind: dict[tuple[str, str], dict[str, float]]

    pooled: dict[str, dict[str, float]] = field(default_factory=dict)  # a kind's departure, shared by engines

    def costs(self, q: Priced) -> tuple[float, float, float, float, float, float]:
        e = self.engine.get(q.family, {})
        if e and q.engine in VERSION_FIXED_US:
            e = {**e, **VERSION_FIXED_US[q.engine]}
        overlap = "spec_overlap=true" in q.engine.lower()  # SGLang's spec v2: as engine_presets.engine_preset
        k = self.kind.get((q.family, q.kind))
        if k is None and q.kind in self.pooled and e:  # a kind this engine was not fitted on: the engines' common
            d = self.pooled[q.kind]
            k = {"pass_us": soft_positive(e["pass_us"] + d["d_pass_us"]), "step_us": soft_positive(d["d_step_us"])}
        k = k or {}
        step, spec_step = e.get("step_us", PRIOR_US["step_us"]), e.get("spec_step_us", PRIOR_US["spec_step_us"])
        if overlap:
            return step, min(spec_step, step), k.get("pass_us", e.get("pass_us", PRIOR_US["pass_us"])), 0.0, \
                e.get("tree_us", 0.0), 0.0
        return (step, spec_step, k.get("pass_us", e.get("pass_us", PRIOR_US["pass_us"])), k.get("step_us", 0.0),
                e.get("tree_us", 0.0), e.get("seq_us", 0.0))

    def predict(self, q: Priced) -> float:
        return q.predict(*self.costs(q))

    def plain_step_s(self, q: Priced) -> float:
        return q.plain_s + self.costs(q)[0] * 1e-6


def soft_positive(us: float, scale_us: float = 20.0) -> float:
    """max(us, 0) with a slope everywhere (softplus over `scale_us`), so the fit never stalls where a cost of a
    kind (its engine's plus its departures) would go below zero."""
    return scale_us * float(np.logaddexp(0.0, us / scale_us))


def measured_plain_step_s(q: Priced) -> float | None:
    """The plain step's time the point publishes, where its metric gives one: a TPOT or ITL, a user's tokens per
    second, or one request's output throughput. A batch's output throughput is not one: at a concurrency above one
    a benchmark's throughput holds the prefills and the ramps (angelslim-issue-163 at batch 64: 52 ms a token-step
    where the passes take 7)."""
    p = q.point
    if p.plain is None:
        return None
    if p.metric in ("tpot_ms", "itl_ms"):
        return p.plain * 1e-3
    if p.metric == "tokens_per_s_per_user":
        return 1.0 / p.plain
    if p.metric == "output_throughput_tok_s" and q.batch == 1:
        return 1.0 / p.plain
    return None


# Held, not fitted: vLLM's step cost is SpecDecode-Bench's fit of vLLM 0.10.1's own step times on one H100
# (scenarios/references.toml, checked by benchmarks/preset_check.py) less the H100 preset's passes under vllm@0.10's
# mechanisms (`vllm_step_us`); that fit charges the same constant to a plain and a speculative step
# (overhead_constant_per_step, both arms), so the speculative step's is the same, and the rejection sampler's host
# work a request is cited (`accept_per_sequence_us`). Its overlap of host work is not off under speculation (no
# seq_us), nor TensorRT-LLM's (its overlap scheduler is on by default); SGLang's is (engines.toml).
def vllm_step_us(reference: str = "llama-3.1-8b-h100-vllm", engine: str | None = None) -> float:
    """vLLM's engine cost a step, us: the reference's plain steps (its batches, contexts 512 and 2,048) less the
    passes of its hardware preset under its engine version (GPU work only), least squares (the mean difference)."""
    from scenarios import _table

    ref = _table("references")[reference]
    hw = load_hardware(ref["hardware"], engine or ref["engine"])
    cost = CostModel.from_hardware(hw)
    model = load_model(ref["target"])
    bare = replace(cost, overheads=replace(cost.overheads, engine=EngineOverheads()))
    rest = [b * (c + 1) * ref["c_kv_s"] + b * ref["c_token_s"] + ref["c_fixed_s"] + ref["c_step_s"]
            - bare.pass_time_s(model, b, 1, c) for c in (512, 2048) for b in ref["batches"]]
    return 1e6 * float(np.mean(rest))


_VLLM_STEP_US = round(vllm_step_us())
FIXED_US = {("vllm", "step_us"): float(_VLLM_STEP_US), ("vllm", "spec_step_us"): float(_VLLM_STEP_US),
            ("vllm", "seq_us"): 0.0, ("tensorrt-llm", "seq_us"): 0.0}
# each vLLM version's held step: the same measured steps less its own passes (engines.toml [vllm.versions.V])
VERSION_FIXED_US = {v: {"step_us": float(u), "spec_step_us": float(u)}
                    for v in ("vllm@0.10", "vllm@0.2x") for u in (round(vllm_step_us(engine=v)),)}
LOSS = "linear"  # plain least squares: soft_l1 moved the fit between minima from run to run of the corpus
DELTA_WEIGHT = 0.02  # a kind's departure from the engines' common costs: 1 ms of it counts as a 2 % miss
ENGINE_DELTA_WEIGHT = 0.01  # an engine's own departure for a kind on top of that
ENGINE_WORDS = ("step_us", "spec_step_us", "pass_us", "seq_us")


def fitted_names(points: list[Priced]) -> list[tuple[object, str]]:
    """The fitted parameters for `points`: per engine (its versions share them) the plain step's cost, the
    speculative step's, a draft pass's and a speculative step's a request (where not held); per draft kind, a
    departure shared by the engines; per engine and kind, its own departure."""
    engines = sorted({q.family for q in points})
    names: list[tuple[object, str]] = [(e, w) for e in engines for w in ENGINE_WORDS if (e, w) not in FIXED_US]
    names += [(("*", k), w) for k in sorted({q.kind for q in points}) for w in ("d_pass_us", "d_step_us")]
    names += [(ek, w) for ek in sorted({(q.family, q.kind) for q in points}) for w in ("d_pass_us", "d_step_us")]
    return names


def parameter_counts(points: list[Priced]) -> dict[str, int]:
    """How many numbers the fit sets per engine (its own and its kinds'; '*': the kinds' shared departures)."""
    out: dict[str, int] = {}
    for key, _ in fitted_names(points):
        e = key if isinstance(key, str) else key[0]
        out[e] = out.get(e, 0) + 1
    return out


def fit(points: list[Priced]) -> Params:
    """Least squares in log speed-up over `points` (and in log plain step where a point publishes one, which fixes
    the costs' scale: a speed-up alone sees only their ratio), every cost >= 0 (`fitted_names`). A kind's draft pass
    costs its engine's pass plus the departures (kept >= 0), its step the departures' (>= 0, on top of the
    engine's speculative step); departures are pulled towards zero so that a kind few points show keeps its
    engine's costs, and each engine-level cost weakly towards a prior, so a cost no point constrains stays at it.
    scipy's bounded least squares (a test dependency), from two starts."""
    from scipy.optimize import least_squares

    engines = sorted({q.family for q in points})
    kinds = sorted({(q.family, q.kind) for q in points})
    pooled = sorted({q.kind for q in points})
    names = fitted_names(points)
    prior = np.array([PRIOR_US.get(w, 0.0) for _, w in names])
    weight = np.array([PRIOR_WEIGHT if not w.startswith("d_") else
                       (DELTA_WEIGHT if key[0] == "*" else ENGINE_DELTA_WEIGHT) for key, w in names])
    lower = np.array([0.0 if not w.startswith("d_") else -5000.0 for _, w in names])
    meas = np.log([q.measured for q in points])
    plain_pts = [(q, t) for q in points if (t := measured_plain_step_s(q)) is not None]

    def unpack(x: np.ndarray) -> Params:
        out = Params({e: {w: v for (fe, w), v in FIXED_US.items() if fe == e} for e in engines}, {})
        deltas: dict[tuple[object, str], float] = {}
        for (key, what), v in zip(names, x):
            if isinstance(key, str):
                out.engine[key][what] = float(v)
            else:
                deltas[(key, what)] = float(v)
        for ek in kinds:
            e = out.engine[ek[0]]
            d_pass = deltas[(("*", ek[1]), "d_pass_us")] + deltas.get((ek, "d_pass_us"), 0.0)
            d_step = deltas[(("*", ek[1]), "d_step_us")] + deltas.get((ek, "d_step_us"), 0.0)
            out.kind[ek] = {"pass_us": soft_positive(e["pass_us"] + d_pass), "step_us": soft_positive(d_step)}
        out.pooled = {k: {"d_pass_us": deltas[(("*", k), "d_pass_us")], "d_step_us": deltas[(("*", k), "d_step_us")]}
                      for k in pooled}
        return out

    def residuals(x: np.ndarray) -> np.ndarray:
        params = unpack(x)
        r = np.log([params.predict(q) for q in points]) - meas
        rp = np.log([params.plain_step_s(q) / t for q, t in plain_pts])
        return np.concatenate([r, rp, weight * (x - prior) / 1000.0])

    best = None
    for start in (prior, np.where(np.isclose(prior, 0.0), 500.0, prior)):  # from the priors, and kinds at +0.5 ms
        res = least_squares(residuals, start, bounds=(lower, 20000.0), loss=LOSS, f_scale=0.1, x_scale=300.0)
        if best is None or res.cost < best.cost:
            best = res
    return unpack(best.x)


def preset_params(engines: set[str]) -> Params:
    """The costs engines.toml ships, in the fit's terms (per engine: its versions share them)."""
    out = Params({}, {})
    from scenarios import _engine_table
    from scenarios.engine_presets import engine_preset

    for e in {engine_family(e) for e in engines}:  # (the draft passes' costs kept where a version graphs them)
        eng = engine_preset(e, {**_engine_table(e), "drafter_in_graphs": False}).overheads.engine
        out.engine[e] = {"step_us": eng.plain.fixed_s * 1e6, "spec_step_us": (eng.verify.fixed_s
                                                                              + eng.chain_accept.fixed_s) * 1e6,
                         "pass_us": eng.draft.fixed_s * 1e6, "seq_us": eng.verify.per_sequence_s * 1e6,
                         "tree_us": (eng.tree_accept.fixed_s - eng.chain_accept.fixed_s) * 1e6}
        for c in eng.kinds:
            out.kind[(e, c.kind)] = {"pass_us": c.per_pass.fixed_s * 1e6, "step_us": c.per_step.fixed_s * 1e6}
    return out


def through_the_model(q: Priced) -> float:
    """The point's speed-up from the model itself with its engine's preset as shipped (`load_hardware(gpu,
    engine)`, `step_time`): what `specsim predict --engine E` says, for the check that the fit's decomposition is the
    model's arithmetic."""
    p = q.point
    if p.target in TARGET_ALIASES:
        p = replace(p, target=TARGET_ALIASES[p.target][0])
    dtype = PRECISION.get(p.precision or "bf16")
    tp = p.tp or p.gpu_count or 1
    hw = load_hardware(p.gpu, q.engine)
    full = target_of(p, dtype)
    target = full.shard(tp) if tp > 1 else full
    draft = shard_draft(_draft(p, full), tp, hw)
    cost = CostModel.from_hardware(hw, target.dtype)
    tree = _tree(p)
    cand = Candidate(None, tree) if tree is not None else Candidate(p.k or 1)
    plain = step_time(cost, target, draft, q.batch, q.context, Candidate(0)).total_s
    spec = step_time(cost, target, draft, q.batch, q.context, cand).total_s
    return q.acceptance_length * plain / spec


def groups(points: list[Priced]) -> dict[str, set[str]]:
    """Each source with the sources that copy it or that it copies (`independent_of`): left out together."""
    out: dict[str, set[str]] = {}
    for q in points:
        s = q.point.source
        out.setdefault(s.id, {s.id}).update(s.independent_of)
    for sid, linked in list(out.items()):
        for other in linked:
            out.setdefault(other, {other}).add(sid)
    return out


def loso(points: list[Priced]) -> dict[str, list[tuple[Priced, float]]]:
    """Leave one source out: each source's points predicted by costs fitted to every other source's."""
    linked = groups(points)
    out: dict[str, list[tuple[Priced, float]]] = {}
    for sid in sorted({q.point.source.id for q in points}):
        held = [q for q in points if q.point.source.id == sid]
        train = [q for q in points if q.point.source.id not in linked[sid]]
        params = fit(train)
        out[sid] = [(q, params.predict(q)) for q in held]
    return out


def corpus() -> tuple[list[Priced], list[Priced], list[tuple[PublishedPoint, str]]]:
    """The corpus priced: the points the presets are fitted to and judged on, the held-out points (sources added
    after the presets were fixed: predicted only), and the points left out with the reason."""
    priced, held_out, skipped = [], [], []
    for p in load_corpus():
        try:
            (held_out if p.source.held_out else priced).append(price(p))
        except SpecsimError as e:
            skipped.append((p, str(e)))
    return priced, held_out, skipped


def error_pct(pred: float, meas: float) -> float:
    return 100.0 * (pred / meas - 1.0)


def summary(errs: list[float]) -> str:
    a = np.abs(errs)
    return (f"median |error| {np.median(a):.1f} %, p90 {np.percentile(a, 90):.1f} %, max {a.max():.1f} % "
            f"({len(a)} points)")


def anchored_series(points: list[PublishedPoint], shipped: Params) -> list[tuple[str, list[tuple[int, float, float]]]]:
    """Batch sweeps that publish no acceptance (the EAGLE-3 paper's SGLang table): each series' acceptance length
    solved from its smallest batch (its error is zero by construction), its other batches predicted with it. What
    this checks is the shape in batch of the presets' costs, not their level."""
    series: dict[tuple, list[PublishedPoint]] = {}
    for p in points:
        if acceptance_length(p) is None and p.speedup is not None and (p.batch or p.concurrency):
            key = (p.source.id, p.engine, p.gpu, p.target, p.draft_kind, p.k, p.tree, p.metric, p.input_len)
            series.setdefault(key, []).append(p)
    out = []
    for key, members in series.items():
        if len(members) < 3:
            continue
        try:
            priced = sorted((price(p, assumed_length=1.0) for p in members), key=lambda q: q.batch)
        except SpecsimError:
            continue
        length = priced[0].measured / shipped.predict(priced[0])
        rows = [(q.batch, q.measured, length * shipped.predict(q)) for q in priced[1:]]
        out.append((f"{key[0]} {key[1]} {key[2]} {key[3]} {key[4]} k={key[5]} (acceptance length {length:.2f} "
                    f"from batch {priced[0].batch})", rows))
    return out


def must_show(priced: list[Priced], shipped: Params, held: dict[int, float]) -> None:
    """The issue's three figures: vLLM + EAGLE-3's K sweep on Llama-3.1-8B, Qwen3-30B-A3B + EAGLE-3 on SGLang at
    batch 1 against a dense target of its active size, and a Blackwell measurement."""
    sweep = sorted((q for q in priced if q.point.source.id == "vllm-issue-20780" and q.kind == "eagle3"),
                   key=lambda q: q.point.k or 0)
    if sweep:
        print("\nvLLM + EAGLE-3, Llama-3.1-8B, H100, batch 1 (vllm-issue-20780), speed-up by K:")
        rows = [(q.point.k, q.measured, shipped.predict(q), held[id(q)]) for q in sweep]
        print("  K     " + "".join(f"{k:>7d}" for k, *_ in rows) + "   best K")
        for i, name in ((1, "measured"), (2, "preset"), (3, "LOSO")):
            best = max(rows, key=lambda r: r[i])
            print(f"  {name:9s}" + "".join(f"{r[i]:7.2f}" for r in rows) + f"   K = {best[0]} ({best[i]:.2f}x)")
    moe = next((q for q in priced if q.point.label == "specforge-issue-339#1"), None)
    if moe is not None:
        p = moe.point
        full = load_model(p.target)
        dense = replace(full, name="dense-like-qwen3-30b-a3b", n_experts=0, experts_per_token=0, d_ff_expert=0,
                        d_ff_shared=0, dense_layers=0, d_ff=full.experts_per_token * full.d_ff_expert)
        print(f"\nQwen3-30B-A3B + EAGLE-3 on SGLang, 2 H100s, batch 1, 3 draft tokens, acceptance length "
              f"{moe.acceptance_length} ({p.label}): measured {moe.measured:.2f}x, preset {shipped.predict(moe):.2f}x, "
              f"LOSO {held[id(moe)]:.2f}x")
        for name, target in (("Qwen3-30B-A3B (MoE)", full), (f"dense, {dense.matmul_params / 1e9:.2f} B params "
                                                                    "(its active size)", dense)):
            for engine in ("sglang", "vllm"):
                hw = load_hardware("h100-sxm", engine)
                cost = CostModel.from_hardware(hw)
                t = target.shard(2)
                head = shard_draft(load_draft("eagle3", full if target is full else dense), 2, hw)
                plain = step_time(cost, t, head, 1, moe.context, Candidate(0)).total_s
                spec = step_time(cost, t, head, 1, moe.context, Candidate(3))
                ratio = cost.pass_time_s(t, 1, 4, moe.context) / cost.pass_time_s(t, 1, 1, moe.context)
                print(f"  {name:38s} {engine:7s} preset: {moe.acceptance_length * plain / spec.total_s:.2f}x "
                      f"(plain step {plain * 1e3:.2f} ms, speculative {spec.total_s * 1e3:.2f} ms: draft "
                      f"{spec.draft_s * 1e3:.2f}, verify {spec.verify_s * 1e3:.2f}; a 4-token pass / a 1-token pass "
                      f"{ratio:.2f}x; breaks even at acceptance length {spec.total_s / plain:.2f})")
    blackwell = [q for q in priced if q.point.gpu in ("b200-sxm", "b300-sxm", "gb200") and q.kind in ("mtp", "eagle3")]
    if blackwell:
        print("\nBlackwell (FP4/FP8 weights) with MTP or EAGLE-3:")
        for q in blackwell:
            print(f"  {q.point.label:30s} {q.point.gpu} x{q.point.gpu_count} {q.point.target} {q.point.precision} "
                  f"{q.kind} k={q.point.k}: measured {q.measured:.2f}x, preset {shipped.predict(q):.2f}x "
                  f"({error_pct(shipped.predict(q), q.measured):+.1f} %), LOSO {held[id(q)]:.2f}x "
                  f"({error_pct(held[id(q)], q.measured):+.1f} %)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", type=Path, help="write predicted against measured speed-up to this PNG")
    ap.add_argument("--fit", action="store_true", help="print the costs fitted to every point as engines.toml keys")
    ap.add_argument("--json", action="store_true", help="one JSON object per point")
    args = ap.parse_args()

    priced, held_out, skipped = corpus()
    shipped = preset_params({q.engine for q in priced + held_out})
    cross = loso(priced)
    held = {id(q): pred for rows in cross.values() for q, pred in rows}
    if args.json:
        for q in priced:
            print(json.dumps({"point": q.point.label, "engine": q.engine, "kind": q.kind, "batch": q.batch,
                              "measured": q.measured, "preset": shipped.predict(q), "loso": held[id(q)]}))
        return 0
    print(f"{len(priced)} points priced, {len(skipped)} left out; speed-up predicted from each point's own "
          "acceptance length\n")
    print(f"{'point':36s} {'engine':12s} {'gpu':9s} {'kind':6s} {'k':>3s} {'batch':>5s} {'AL':>5s} "
          f"{'measured':>8s} {'preset':>7s} {'err%':>6s} {'LOSO':>6s} {'err%':>6s}")
    for q in priced:
        pre, lo = shipped.predict(q), held[id(q)]
        print(f"{q.point.label:36s} {q.engine:12s} {q.point.gpu:9s} {q.kind:6s} {q.point.k or 0:3d} {q.batch:5d} "
              f"{q.acceptance_length:5.2f} {q.measured:8.2f} {pre:7.2f} {error_pct(pre, q.measured):+6.1f} "
              f"{lo:6.2f} {error_pct(lo, q.measured):+6.1f}")
    print("\nby source (leave-one-source-out, median |error|):")
    medians = {}
    for sid, rows in cross.items():
        errs = [abs(error_pct(pred, q.measured)) for q, pred in rows]
        medians[sid] = float(np.median(errs))
        print(f"  {sid:40s} {len(rows):3d} points  {medians[sid]:5.1f} %")
    preset_errs = [error_pct(shipped.predict(q), q.measured) for q in priced]
    loso_errs = [error_pct(held[id(q)], q.measured) for q in priced]
    gap = max(abs(through_the_model(q) / shipped.predict(q) - 1) for q in priced)
    print(f"\npresets as shipped:       {summary(preset_errs)} (through the model itself: within {100 * gap:.2f} % "
          "of the decomposition)")
    print(f"leave one source out:     {summary(loso_errs)}; worst source median {max(medians.values()):.1f} % "
          f"({max(medians, key=medians.get)})")
    must_show(priced, shipped, held)
    if held_out:
        print("\nheld out (added after the presets were fixed; predicted, never fitted), presets as shipped:")
        for q in held_out:
            pred = shipped.predict(q)
            print(f"  {q.point.label:36s} {q.engine:12s} {q.point.gpu} x{q.point.gpu_count} {q.point.target} {q.kind} "
                  f"k={q.point.k} batch {q.batch}: measured {q.measured:.2f}x, predicted {pred:.2f}x "
                  f"({error_pct(pred, q.measured):+.1f} %)")
        print(f"  {summary([error_pct(shipped.predict(q), q.measured) for q in held_out])}")
    counts = parameter_counts(priced)
    print("\nfitted parameters: " + ", ".join(f"{e} {n}" for e, n in sorted(counts.items()) if e != "*")
          + f", and {counts.get('*', 0)} kinds' departures shared by the engines (every cost >= 0; the rest are "
          "mechanisms with their settings from the engines' code and docs, engines.toml)")
    series = anchored_series([p for p, _ in skipped], shipped)
    if series:
        print("\nbatch sweeps without a published acceptance, anchored on their smallest batch (presets as shipped):")
        errs = []
        for name, rows in series:
            errs += [error_pct(pred, meas) for _, meas, pred in rows]
            print(f"  {name}")
            print("    " + "  ".join(f"b{b}: {meas:.2f}/{pred:.2f} ({error_pct(pred, meas):+.0f} %)"
                                     for b, meas, pred in rows))
        print(f"  measured/predicted; {summary(errs)}")
    if skipped:
        print("\nleft out:")
        for p, why in skipped:
            print(f"  {p.label}: {why}")
    if args.fit:
        params = fit(priced)
        in_sample = [error_pct(params.predict(q), q.measured) for q in priced]
        print(f"\nfitted to every point, in sample: {summary(in_sample)}")
        print("fitted costs (engines.toml):")
        for e, d in params.engine.items():
            print(f"  [{e}] " + ", ".join(f"{k} = {v:.0f}" for k, v in d.items()))
        for (e, kind), d in params.kind.items():
            print(f"  [{e}.draft.{kind}] " + ", ".join(f"{k} = {v:.0f}" for k, v in d.items()))
        print(f"  [vllm] step_overhead_us = {_VLLM_STEP_US:.0f} held: SpecDecode-Bench's vLLM step times on one H100 "
              "less the H100 preset's passes (vllm_step_us)")
        for e in sorted(params.engine):
            mine = [q for q in priced if q.family == e]
            print(f"  [{e}] fitted_on = {sorted({q.point.source.id for q in mine})}, fit_gpus = "
                  f"{sorted({q.point.gpu for q in mine})}, fit_batch = [{min(q.batch for q in mine)}, "
                  f"{max(q.batch for q in mine)}], fit_kinds = {sorted({q.kind for q in mine})}")
    if args.plot:
        from plots.published_vs_measured import published_vs_measured

        fig = published_vs_measured([(q.engine, q.measured, held[id(q)], q.point.label) for q in priced])
        fig.savefig(args.plot, dpi=110, bbox_inches="tight")
        print(f"\nwrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
