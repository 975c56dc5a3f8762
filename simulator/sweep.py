"""Speed-up of speculative decoding over plain decoding, swept over batch x (k or tree) x context.

A speculative step for a batch of B sequences on c cached tokens, drafting a tree T (a chain of k is the tree
1,1,...,1):

    T_step = sum_d t_draft(B, width_{d-1}, c + d - 1) + t_target(B, nodes + 1, c) + t_accept

(each pass with the engine's own work around it, `EngineOverheads`)

where pass d runs the draft over the nodes of depth d - 1 (the root is one token). Each sequence emits A + 1 tokens,
so the speed-up is E[A + 1] x T_plain / T_step with T_plain = t_target(B, 1, c) plus the engine's work around it;
k = 0 is plain decoding and gives exactly 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from . import SpecsimError
from .acceptance import Acceptance
from .cost import CostModel, memory_needed_bytes
from .drafts import Draft, as_draft
from .measured_range import MeasuredRange, measured_range
from .specs import ModelSpec
from .trees import Tree

PAYS = 1.0 + 1e-9  # a speed-up must beat this to count as "speculation pays"


@dataclass(frozen=True)
class Candidate:
    """What one step drafts: a chain of k (tree None) or a tree."""

    k: int | None
    tree: Tree | None = None

    @cached_property
    def shape(self) -> Tree:
        return self.tree if self.tree is not None else Tree.chain(self.k or 0)

    @cached_property
    def is_plain(self) -> bool:
        return self.tree is None and self.k == 0

    @property
    def tree_label(self) -> str | None:
        return None if self.tree is None else self.tree.label

    @cached_property
    def label(self) -> str:
        return f"tree {self.tree.label}" if self.tree is not None else f"k={self.k}"


def chains(ks: Iterable[int]) -> list[Candidate]:
    return [Candidate(k) for k in ks]


def candidates_from(ks: Iterable[int], trees: Iterable[str] = (), tree_budget: int | None = None,
                    acceptance: Acceptance | None = None) -> list[Candidate]:
    """Chains of every k, the trees given by branching (``4,2,2,1``), and Sequoia's best tree of `tree_budget`
    drafted nodes for the acceptance's per-rank vector."""
    from .trees import best_tree, parse_branching

    cands = [Candidate(k) for k in ks] + [Candidate(None, parse_branching(t)) for t in trees if t.strip()]
    if acceptance is not None and acceptance.ranks is None and any(c.tree is not None for c in cands):
        tree = next(c.tree for c in cands if c.tree is not None)
        raise SpecsimError(f"tree {tree.label} needs per-rank acceptance: give --acceptance ranks:R1,R2,... "
                           f"(P(j-th ranked candidate accepted)); {acceptance.spec} has none")
    if tree_budget is not None:
        if acceptance is None or acceptance.ranks is None or isinstance(acceptance.ranks[0], tuple):
            spec = acceptance.spec if acceptance is not None else "this acceptance"
            raise SpecsimError(f"--tree-budget needs per-rank acceptance: give --acceptance ranks:R1,R2,... ({spec} "
                               "has no per-rank information)")
        cands.append(Candidate(None, best_tree(acceptance.ranks, tree_budget)))
    return cands


def tokens_per_pass(candidate: Candidate, acceptance: Acceptance) -> float:
    """E[A + 1]: the acceptance model's own chain formula, or the per-rank tree formula for trees."""
    if candidate.tree is None:
        return acceptance.expected_tokens(candidate.k or 0)
    if acceptance.ranks is None:
        raise SpecsimError(f"tree {candidate.tree.label} needs per-rank acceptance: give --acceptance "
                           f"ranks:R1,R2,... (P(j-th ranked candidate accepted)); {acceptance.spec} has none")
    return 1.0 + candidate.tree.expected_accepted(acceptance.ranks)


@dataclass(frozen=True)
class StepPhases:
    """Where one decoding step's time goes: the draft passes, the verification pass (for plain decoding, its one
    pass), and the accept/reject bookkeeping, each with the engine's own work around it. The one record of a step's
    phases: `step_time` predicts it, the real engine measures it."""

    draft_s: float = 0.0
    verify_s: float = 0.0
    accept_s: float = 0.0
    bound: str = ""  # what limits the verification pass (predictions only): memory, compute or overhead

    @property
    def total_s(self) -> float:
        return self.draft_s + self.verify_s + self.accept_s


def step_time(cost: CostModel, target: ModelSpec, draft: Draft | ModelSpec | None, batch: int, context: int,
              candidate: Candidate, proposal_rate: float = 1.0) -> StepPhases:
    """Time of one speculative step (plain decoding for k = 0): `step_times` at one batch. A speculative step is
    never cheaper than a plain one at the same batch: its verification pass (k + 1 tokens) costs at least a
    one-token step, whatever a noisy calibration says, so no prediction exceeds the tokens a step emits."""
    draft_s, verify_s, accept_s, bound = step_times(cost, target, draft, np.array([batch]), context, candidate,
                                                    proposal_rate)
    return StepPhases(float(draft_s[0]), float(verify_s[0]), float(accept_s[0]), str(bound[0]))


@dataclass(frozen=True)
class SweepRow:
    batch: int
    k: int | None
    tree: str | None
    context: int
    tokens_per_pass: float
    step_time_s: float
    baseline_time_s: float
    speedup: float
    bound: str
    fits: bool
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    tree_nodes: int = 0
    extrapolated: bool = False  # beyond what was measured: `extrapolated_in` says where
    # "k": more drafts per step than the acceptance's source measured; "batch", "rows" (batch x verified tokens),
    # "context": past the calibration's decoding passes (`simulator.measured_range`), its fit extrapolated
    extrapolated_in: tuple[str, ...] = ()


@dataclass(frozen=True)
class BestRow:
    batch: int
    context: int
    k: int | None
    tree: str | None
    speedup: float


@dataclass(frozen=True)
class SweepResult:
    rows: tuple[SweepRow, ...]
    best: tuple[BestRow, ...]
    disable_above_batch: int | None  # see `disable_above`
    disable_above_batch_by_context: tuple[tuple[int, int | None], ...] = field(default=())
    # (context, smallest batch left out): from that batch on not even plain decoding fits (weights and KV cache)
    unfit_from_batch: tuple[tuple[int, int], ...] = field(default=())
    # (context, ((first, last), ...)): the runs of swept batches where the best choice speculates (`paying_ranges`)
    pays_by_context: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = field(default=())
    measured_range: MeasuredRange | None = None  # the calibration's passes' reach (None: a preset)

    def pays_in(self, context: int) -> tuple[tuple[int, int], ...]:
        return dict(self.pays_by_context).get(context, ())


def paying_ranges(best: Sequence[BestRow]) -> tuple[tuple[int, int], ...]:
    """The runs of consecutive swept batches (of one context) where the best choice speculates, as (first, last).
    A dense target gives one run from the smallest batch (speculation off above B); an MoE target may give a run
    that starts later (verification wakes experts a one-token step does not, until the batch wakes most of them)
    or several."""
    out: list[list[int]] = []
    previous_paid = False
    for b in sorted(best, key=lambda r: r.batch):
        paid = b.k != 0 or b.tree is not None
        if paid and previous_paid:
            out[-1][1] = b.batch
        elif paid:
            out.append([b.batch, b.batch])
        previous_paid = paid
    return tuple((lo, hi) for lo, hi in out)


def disable_above(rows: Sequence[SweepRow], largest: int | None = None) -> int | None:
    """The batch above which speculation never pays in `rows`: it still pays there; 0 if it never pays; None if it
    pays at the largest batch swept that plain decoding fits in memory (`largest`: the largest asked for; batches
    where nothing fits are no reason to switch speculation off)."""
    batches = [r.batch for r in rows]
    if not batches:
        return 0 if largest is not None else None
    paying = [r.batch for r in rows if r.fits and (r.k != 0 or r.tree) and r.speedup > PAYS]
    if not paying:
        return 0
    fitting = [r.batch for r in rows if r.fits]
    top = min(largest if largest is not None else max(batches), max(fitting))
    last = max(paying)
    return None if last >= top else last


def _best_and_disable(rows: list[SweepRow], largest: int | None = None, contexts: Sequence[int] = (),
                      unfit: Sequence[tuple[int, int]] = ()) -> SweepResult:
    best: list[BestRow] = []
    groups: dict[tuple[int, int], list[SweepRow]] = {}
    for r in rows:
        groups.setdefault((r.context, r.batch), []).append(r)
    for (context, batch), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        fitting = [r for r in group if r.fits]
        if not fitting:
            continue
        # Plain decoding (speed-up 1) is always an option, swept or not; ties go to the simpler choice.
        top = max(fitting, key=lambda r: (r.speedup > PAYS, r.speedup, -(r.tree_nodes or 0)))
        if top.speedup > PAYS:
            best.append(BestRow(batch, context, top.k, top.tree, top.speedup))
        else:
            best.append(BestRow(batch, context, 0, None, 1.0))
    all_contexts = sorted(set(contexts) or {r.context for r in rows})
    by_context = tuple((c, disable_above([r for r in rows if r.context == c], largest)) for c in all_contexts)
    pays = tuple((c, paying_ranges([b for b in best if b.context == c])) for c in all_contexts)
    return SweepResult(tuple(rows), tuple(best), disable_above(rows, largest), by_context, tuple(unfit), pays)


BOUNDS = np.array(["memory", "compute", "overhead"])


def drafting_times(cost: CostModel, target: ModelSpec, draft: Draft, b: np.ndarray, shape: Tree,
                   context: int) -> np.ndarray:
    """A step's drafting on the device at each batch in `b`, the engine's work around each pass included
    (`simulator.drafts` says what each kind's passes read and compute):

    - a draft model or a head: a pass per depth over that depth's nodes; the first pass of a head runs over every
      row the target verified (their hidden states are its input), a draft model's over the tokens it catches up
      on (`EngineOverheads.draft_catchup_tokens`); EAGLE-3's fc fusing the target's hidden states once, over the
      verified rows;
    - Medusa: its heads' weights read once, for one row per sequence (the heads ride in the target's graph: one
      layer's launches, no pass of its own);
    - a model-free draft: nothing on the device (its host lookup is `HostCost`).

    Around them, the engine's own cost for this kind (`EngineOverheads.drafting`): per draft pass and once per
    step."""
    kind_cost = cost.overheads.engine.drafting(draft.kind)
    per_pass, per_step = kind_cost.per_pass, kind_cost.per_step
    zeros = np.zeros(b.shape)
    around = per_step.fixed_s + per_step.per_sequence_s * b + zeros
    if draft.kind == "medusa":
        draft.depth_limit(shape.depth)
        measured = cost.measured_batch_times(draft.name, b)  # a calibration timed these heads' pass
        if measured is not None:
            return measured + per_pass.fixed_s + per_pass.per_sequence_s * b + around
        nbytes = draft.head_params * _bytes_per_param(draft.dtype)
        return cost.linear_times(nbytes, 2.0 * draft.head_params * b, b) + cost.overheads.layer_s + around
    if draft.module is None:
        return around
    widths = list(shape.draft_pass_widths)
    widths[0] = max(widths[0], shape.verify_tokens if draft.reads_verified_rows else cost.draft_catchup_tokens)
    spec = cost.spec_factor(b) if cost.spec_drift else 1.0  # a serving benchmark's speculative runs' factor
    if cost.overheads.engine.drafts_per_sequence:  # each sequence's passes on its own, one sequence after another
        t = around + b * sum(cost.pass_times(draft.module, np.ones(b.shape), width, context + d) * spec
                             + per_pass.fixed_s + per_pass.per_sequence_s for d, width in enumerate(widths))
    else:
        t = around + sum(cost.pass_times(draft.module, b, width, context + d) * spec + per_pass.fixed_s
                         + per_pass.per_sequence_s * b for d, width in enumerate(widths))
    if draft.fusion_params:
        rows = b * shape.verify_tokens
        t = t + cost.linear_times(draft.fusion_params * draft.module.bytes_per_param,
                                  2.0 * draft.fusion_params * rows, rows)
    if draft.vocab_mapping_s:  # another vocabulary: every drafted token re-tokenised for the target on the host
        t = t + draft.vocab_mapping_s * b * shape.n_nodes
    return t


def _bytes_per_param(dtype: str) -> float:
    from .specs import dtype_bytes

    return dtype_bytes(dtype)


def verify_pass_times(cost: CostModel, target: ModelSpec, b: np.ndarray, new_tokens: int, context: int) -> np.ndarray:
    """The target's pass over `new_tokens` a sequence. Where the engine's verified tokens add
    (`Overheads.verify_tokens_add`): the one-token pass as its kernels price it, plus what the tokens beyond one a
    sequence add with their memory and compute times summed (their FLOPs, activations, KV writes and, in an MoE,
    the experts they wake)."""
    t = cost.pass_times(target, b, new_tokens, context)
    if not cost.overheads.verify_tokens_add or new_tokens <= 1:
        return t
    summed = replace(cost, linear_ridge_p=1.0, measured={}, drift={})
    more = summed.formula_times(target, b, new_tokens, context)[0] - summed.formula_times(target, b, 1, context)[0]
    return cost.pass_times(target, b, 1, context) + more


def verify_times(cost: CostModel, target: ModelSpec, b: np.ndarray, new_tokens: float, context: int) -> np.ndarray:
    """The verification pass with the engine's work around it, at fractional mean new tokens too (a ragged batch:
    linear between the two whole counts around it); the pass times the cost model's `spec_factor` (a serving
    benchmark's speculative runs)."""
    extra = cost.overheads.engine.verify_extra_s(b)
    lo = int(np.floor(new_tokens))
    t_lo = verify_pass_times(cost, target, b, lo, context)
    if new_tokens != lo:
        t_lo = t_lo + (verify_pass_times(cost, target, b, lo + 1, context) - t_lo) * (new_tokens - lo)
    return (t_lo * cost.spec_factor(b) if cost.spec_drift else t_lo) + extra


def step_times(cost: CostModel, target: ModelSpec, draft: Draft | ModelSpec | None, batches: np.ndarray,
               context: int, candidate: Candidate, proposal_rate: float = 1.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One step of `candidate` at each batch in `batches` and one context: (draft, verify, accept seconds, bound
    names). A step of a draft on the device: its drafting (`drafting_times`), the verification pass (never below a
    plain step) and the accept/reject rule.

    A model-free draft looks up every sequence on the host each step (`HostCost`; beside the device's work when the
    draft ``overlap``s, so the step takes the longer, else after it) and proposes for a sequence with probability
    `proposal_rate` (p). A step in which no sequence proposes, probability (1 - p)^B, is a plain step; otherwise the
    batch is verified, by an engine that pads (every sequence verifies k + 1) or one that packs ragged rows
    (`EngineOverheads.ragged_verify`: vLLM, SGLang; on average 1 + k p / (1 - (1 - p)^B) tokens a sequence). The
    expected step is returned."""
    b = np.asarray(batches, dtype=np.int64)
    shape = candidate.shape
    engine = cost.overheads.engine
    _, bound = cost.formula_times(target, b, shape.verify_tokens, context)
    plain = cost.plain_step_times(target, b, context)
    zeros = np.zeros(b.shape)
    if shape.n_nodes == 0:
        return zeros, plain, zeros, BOUNDS[bound]
    d = as_draft(draft)
    if d is None:
        raise SpecsimError("speculation with k > 0 needs a draft")
    accept = engine.tree_accept if candidate.tree is not None else engine.chain_accept
    accept_s = accept.fixed_s + accept.per_sequence_s * b
    draft_s = drafting_times(cost, target, d, b, shape, context)
    if d.on_device and proposal_rate >= 1.0:
        return draft_s, np.maximum(verify_times(cost, target, b, shape.verify_tokens, context), plain), accept_s, \
            BOUNDS[bound]
    p = float(proposal_rate)
    p_any = 1.0 - (1.0 - p) ** b
    drafted = shape.verify_tokens - 1
    if engine.ragged_verify:
        mean_tokens = 1.0 + drafted * p / np.maximum(p_any, 1e-300)
        spec_verify = np.array([float(verify_times(cost, target, b[i:i + 1], float(n), context)[0])
                                for i, n in enumerate(mean_tokens)]) if len(b) else zeros
    else:
        spec_verify = verify_times(cost, target, b, shape.verify_tokens, context)
    verify_s = p_any * np.maximum(spec_verify, plain) + (1.0 - p_any) * plain
    accept_s = p_any * accept_s
    draft_s = p_any * draft_s
    if d.on_device:
        return draft_s, verify_s, accept_s, BOUNDS[bound]
    host = d.host.at(b, context)
    lookup = np.maximum(host - (verify_s + accept_s), 0.0) if d.overlap else host
    return lookup + draft_s, verify_s, accept_s, BOUNDS[bound]  # draft_s: the engine's cost around the lookup


def sweep(cost: CostModel, target: ModelSpec, draft: ModelSpec | None, acceptance: Acceptance,
          batches: Sequence[int], candidates: Sequence[Candidate], contexts: Sequence[int]) -> SweepResult:
    """Every (batch, candidate, context): tokens per pass, step time, speed-up, bound and memory fit. Computed a
    candidate and a context at a time over all batches at once. Batches where not even plain decoding fits (the
    target's weights and its KV cache) are left out, and where they start is recorded."""
    if not len(batches) or not candidates or not contexts:
        raise SpecsimError("a sweep needs at least one batch, one k or tree, and one context")
    capacity = cost.hardware.mem_capacity_bytes * cost.hardware.usable_memory_fraction
    rows: list[SweepRow] = []
    unfit: list[tuple[int, int]] = []
    measured_k = acceptance.measured_up_to_k
    reach = measured_range(cost)
    for context in contexts:
        at = acceptance.at_context(context)  # the acceptance there, where it depends on context
        tokens = {cand: tokens_per_pass(cand, at) for cand in candidates}
        b = np.asarray(batches, dtype=np.int64)
        keep = memory_needed_bytes(target, None, b, context + 1) <= capacity
        if not keep.all():
            unfit.append((context, int(b[~keep].min())))
            b = b[keep]
        if not len(b):
            continue
        baseline = cost.plain_step_times(target, b, context)
        columns = []
        for cand in candidates:
            draft_s, verify_s, accept_s, bound = step_times(cost, target, draft, b, context, cand,
                                                            at.proposal_rate(cand.shape.depth))
            total = draft_s + verify_s + accept_s
            shape = cand.shape
            need = memory_needed_bytes(target, draft if shape.n_nodes else None, b, context + shape.verify_tokens)
            speedup = np.ones(b.shape) if cand.is_plain else tokens[cand] * baseline / total
            columns.append((cand, total, speedup, bound, need <= capacity, draft_s, verify_s))
        for i, batch in enumerate(b.tolist()):
            for cand, total, speedup, bound, fits, draft_s, verify_s in columns:
                beyond = (("k",) if measured_k is not None and cand.shape.depth > measured_k else ()) + \
                    (reach.beyond(batch, cand.shape.verify_tokens, context) if reach else ())
                rows.append(SweepRow(
                    batch=batch, k=cand.k, tree=cand.tree_label, context=context, tokens_per_pass=tokens[cand],
                    step_time_s=float(total[i]), baseline_time_s=float(baseline[i]), speedup=float(speedup[i]),
                    bound=str(bound[i]), fits=bool(fits[i]), draft_time_s=float(draft_s[i]),
                    verify_time_s=float(verify_s[i]), tree_nodes=cand.shape.n_nodes,
                    extrapolated=bool(beyond), extrapolated_in=beyond))
    return replace(_best_and_disable(rows, max(batches), contexts, unfit), measured_range=reach)


def leviathan_speedup(alpha: float, k: int, c: float) -> float:
    """Walltime improvement (1 - a^(k+1)) / ((1 - a)(k c + 1)) (Leviathan et al. 2023, Thm. 3.8)."""
    tokens = float(k + 1) if alpha == 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + 1)


def formula_sweep(acceptance: Acceptance, candidates: Sequence[Candidate], cost_ratio: float) -> SweepResult:
    """Closed-form mode: a target pass costs 1, a draft pass `cost_ratio`; a tree costs depth draft passes and one
    verification pass."""
    if not 0 <= cost_ratio:
        raise SpecsimError(f"the draft/target cost ratio c must be >= 0, got {cost_ratio}")
    rows = []
    measured_k = acceptance.measured_up_to_k
    for cand in candidates:
        shape = cand.shape
        tokens = tokens_per_pass(cand, acceptance)
        step = 1.0 + shape.depth * cost_ratio
        rows.append(SweepRow(batch=1, k=cand.k, tree=cand.tree_label, context=0, tokens_per_pass=tokens,
                             step_time_s=step, baseline_time_s=1.0, speedup=tokens / step, bound="formula",
                             fits=True, draft_time_s=shape.depth * cost_ratio, verify_time_s=1.0,
                             tree_nodes=shape.n_nodes,
                             extrapolated=measured_k is not None and shape.depth > measured_k,
                             extrapolated_in=("k",) if measured_k is not None and shape.depth > measured_k else ()))
    return _best_and_disable(rows)
