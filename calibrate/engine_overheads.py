"""The engine's own work around its forward passes (`simulator.specs.EngineOverheads`), measured from real steps.

A calibrated pass is timed as the pass, the probabilities at its last position and one sample. A real step does
more, or other, work around its passes: building inputs, stacking the draft's distributions, the probabilities at
every verified position, the accept/reject rule with its residual draw, the tree walk, the cache roll-back and the
host's bookkeeping. Short real runs of three kinds (plain, a chain of 4, the tree 2,2,1) at the smallest and the
largest calibrated batch give each phase's median; minus what the calibration prices in it, timed alone right
before and after the run (the target's forward is marked inside each step), that is the engine's work, fitted as
a fixed cost plus a cost per sequence.

At the built-in pair's shapes the runs decode real text with the trained weights. At any other shapes the models
have random weights, so which drafts a chain accepts is replayed from a fixed acceptance model
(`RealEngine.force`, the rule's work real); a tree runs the real rule on whatever the random weights accept. What
the engine does per step hardly depends on how much it accepts, but a lot on the vocabulary: on a CPU a draw over
a 32,000-token vocabulary (`torch.multinomial`) makes the accept phase a sizeable part of a large batch's step,
where the built-in pair's small vocabulary makes it negligible. Chains and trees keep their drafting and
verification extras apart: a tree draws each node's candidates without replacement, far dearer per draft pass than
a chain's draw, and pooling the two would price every chain's drafting too high (the figures are in
docs/calibration.md, Figures behind the docstrings).

A step's accept phase runs to its host read on the wall clock (`engine.speculative.RealEngine.step`), so what the
host does outside the device's marks is in it. On a GPU, where the device's clock is precise, the target's pass is
timed alone with and without its draw, and a step's extras are everything it costs beyond the calibrated pass
(`timed_alone`), so that they also take off a draw timed alone that the calibrated pass hides.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from calibrate.timing import Timer
from engine.rejection import distribution, sample
from engine.speculative import Decoding, RealEngine, RunResult, StepRecord
from simulator.specs import EngineOverheads, PerStep
from simulator.sweep import Candidate
from simulator.trees import parse_branching

KINDS = ("plain", "draft", "verify", "chain_accept", "tree_draft", "tree_verify", "tree_walk")
TREE = parse_branching("2,2,1")
# The acceptance replayed in chains at shapes with random weights: the middle of what production pairs reach
# (the shared EAGLE-3 traces' per-token acceptance is 0.6-0.8).
FORCED_ACCEPTANCE = "iid:0.7"


@dataclass(frozen=True)
class Alone:
    """What the calibration prices in a step, timed alone (`timed_alone`): the step's draft passes, what a calibrated
    pass does after its forward (the probabilities at its last position, one sample), and, where the device's clock
    is precise (CUDA events), the target's forward of the step's tokens."""

    draft_s: float
    draw_s: float
    forward_s: float | None = None


def step_extras(alone: Alone, cand: Candidate, steps: Sequence[StepRecord]) -> dict[str, float]:
    """The engine's own work in real steps of one kind. `alone` is what the calibration prices in such a step, timed
    alone. Drafting's extra is the measured phase minus its passes, per draft pass; the verify (or plain) extra is
    the work after the target's forward minus the calibrated pass's own. The forward is the one timed alone where
    there is one (a GPU: the step's host work before it launches is then the step's), else the one marked inside
    each step (`StepRecord.verify_pass_s`: on a CPU, never a difference of two long passes timed apart). Plain steps
    give `plain`, chains `draft`, `verify` and `chain_accept`, trees `tree_draft`, `tree_verify` and `tree_walk`
    (`tree_extra` prices them). Medians over the steps."""
    def med(f: Callable[[StepRecord], float]) -> float:
        return float(np.median([f(s) for s in steps]))

    def forward(s: StepRecord) -> float:
        return alone.forward_s if alone.forward_s is not None else s.verify_pass_s  # type: ignore[return-value]

    steps = [s for s in steps if s.verify_pass_s is not None]
    if not steps:
        return {}
    if cand.is_plain:
        return {"plain": med(lambda s: s.phases.total_s - forward(s)) - alone.draw_s}
    tree = cand.tree is not None
    return {"tree_draft" if tree else "draft":
            (med(lambda s: s.phases.draft_s) - alone.draft_s) / len(cand.shape.draft_pass_widths),
            "tree_verify" if tree else "verify": med(lambda s: s.phases.verify_s - forward(s)) - alone.draw_s,
            "tree_walk" if tree else "chain_accept": med(lambda s: s.phases.accept_s)}


def tree_extra(extras: dict[str, float], tree_draft_passes: int) -> float:
    """What a tree step costs beyond a chain's extras, at one batch, from `step_extras` of both: the tree walk and
    compaction, plus its drafting and verification work beyond what a chain's extras price for the same passes
    (drawing each node's candidates without replacement, the probabilities at every node). The cost model adds the
    chain's per-pass extras to a tree's passes too, and this as `EngineOverheads.tree_accept`."""
    return (extras["tree_walk"] + tree_draft_passes * (extras["tree_draft"] - extras["draft"])
            + extras["tree_verify"] - extras["verify"])


def timed_alone(engine: RealEngine, batch: int, context: int, cand: Candidate, catchup_tokens: int,
                timer: Timer) -> Alone:
    """What the calibration prices in a step of `cand`, timed now on the engine's own models (`Alone`): the step's
    draft passes (its first re-reading `catchup_tokens`), each as the calibration times a pass
    (`calibrate.calibration.time_together`: the pass, the probabilities at its last position, one sample); the part
    of a calibrated target pass after its forward, the probabilities and one sample over `batch` rows; and on a GPU
    the target's forward of the step's tokens. Timed right before and after the engine's runs, not taken from the
    calibration minutes earlier: a shared machine drifts 10-20 % in that time, as much as the extras themselves at
    a large model.

    On a GPU the draw is what it adds to a calibrated pass (the pass with it minus the pass without), not the draw
    timed by itself: after a pass, its kernels launch while the pass still runs, so the draw alone (its launches on
    an idle device) overstates what it adds, and taking that off a real step prices plain steps short."""
    widths = list(cand.shape.draft_pass_widths)
    if widths:
        widths[0] = max(widths[0], catchup_tokens)
    assert engine.draft is not None or not widths
    times: dict[int, float] = {}
    for n in widths:
        if n not in times:
            run = engine.calibrated_pass(engine.draft, batch, n, context)
            times[n] = timer.measure(run, warmup=1, min_reps=3, max_reps=5, max_time_s=1.0).median_s
    draft_s = sum(times[w] for w in widths)
    if timer.cuda:  # the pass with and without its draw: what the draw adds to a pass as the calibration times it
        n = cand.shape.n_nodes + 1
        with_draw, forward = (timer.measure(engine.calibrated_pass(engine.target, batch, n, context, draw=draw),
                                            warmup=1, min_reps=5, max_reps=20, max_time_s=0.5).median_s
                              for draw in (True, False))
        return Alone(draft_s, max(with_draw - forward, 0.0), forward)
    logits = torch.randn(batch, 1, engine.target.cfg.vocab_size, device=engine.device,
                         dtype=engine.target.output.weight.dtype)
    after_forward = timer.measure(lambda: sample(distribution(logits[:, -1], 1.0), None), warmup=1, min_reps=5,
                                  max_reps=20, max_time_s=0.5).median_s
    return Alone(draft_s, after_forward, None)


def per_step(by_batch: dict[int, float], name: str = "", bounds: list[str] | None = None) -> PerStep:
    """A fixed cost and a cost per sequence through the (one or two) batches measured, neither negative: a work
    cannot take negative time. Where the line through the measurements would have a negative term, the fit is the
    least-squares one with that term held at zero (a constant at their mean, or a line through the origin, whichever
    is closer; zero where both are negative) and, given `bounds`, a sentence says so. (Holding the slope at zero but
    keeping the smallest batch's value would price the phase at whichever measurement happened to be noisier.)"""
    if len(by_batch) == 1:
        t = next(iter(by_batch.values()))
        if t < 0 and bounds is not None:
            bounds.append(f"engine, {name}: measured {t * 1e6:,.0f} us, held at 0")
        return PerStep(max(t, 0.0), 0.0)
    (b1, t1), (b2, t2) = sorted(by_batch.items())[0], sorted(by_batch.items())[-1]
    slope = (t2 - t1) / (b2 - b1)
    fixed = t1 - slope * b1
    if slope >= 0 and fixed >= 0:
        return PerStep(fixed, slope)
    if bounds is not None:
        bounds.append(f"engine, {name}: the line through batch {b1} ({t1 * 1e6:,.0f} us) and {b2} "
                      f"({t2 * 1e6:,.0f} us) has a negative term, held at 0")
    fits = [PerStep(f, s) for f, s in (((t1 + t2) / 2, 0.0), (0.0, (b1 * t1 + b2 * t2) / (b1 * b1 + b2 * b2)))
            if f >= 0 and s >= 0]
    if not fits:
        return PerStep(0.0, 0.0)
    return min(fits, key=lambda p: (t1 - p.fixed_s - p.per_sequence_s * b1) ** 2
               + (t2 - p.fixed_s - p.per_sequence_s * b2) ** 2)


def measure_engine_overheads(engine: RealEngine, prompts: Sequence[Sequence[int]], batches: Sequence[int],
                             new_tokens: int, repeats: int, gen: torch.Generator, catchup_tokens: int,
                             tick: Callable[[], None] | None = None,
                             bounds: list[str] | None = None) -> tuple[dict[str, dict[int, float]], EngineOverheads]:
    """Real runs of three kinds at each batch, interleaved and repeated (the extras are small differences of noisy
    step times), each run between two timings of what the calibration prices in it (`timed_alone`, averaged), each
    kind's extras the median over the repeats. With `engine.forced` set, chains replay it and trees run the real
    rule. `catchup_tokens`: how many tokens the draft re-reads in a step's first draft pass. Returns the extras by
    kind and batch, and the fitted `EngineOverheads`; a term held at zero is said in `bounds`. On a GPU, served
    prefills too (`join_extras`).

    The verify phase's extra is a difference: its own work after the forward (the probabilities at every verified
    position) minus what a calibrated pass does after its forward (one draw over the vocabulary per sequence), so
    at a large vocabulary it is negative. It is kept as two terms that cannot be: `verify`, the phase's own work,
    and `pass_draw`, the calibrated pass's draw (`EngineOverheads.verify_extra_s` takes one from the other)."""
    kinds = (Decoding(k=0), Decoding(k=4), Decoding(tree=TREE))
    timer = Timer(engine.device)
    if engine.runner.mode == "graph":  # capture every shape first; steps that still capture are left out below
        for b in batches:
            for how in kinds:
                _run(engine, [prompts[i % len(prompts)] for i in range(b)], new_tokens, how, gen)
    samples: dict[str, dict[int, list[float]]] = {k: {b: [] for b in batches} for k in (*KINDS, "pass_draw")}
    for _ in range(repeats):
        for b in batches:
            ps = [prompts[i % len(prompts)] for i in range(b)]
            context = int(np.mean([len(p) for p in ps])) - 1 + new_tokens // 2
            for how in kinds:
                cand = Candidate(how.k) if how.tree is None else Candidate(None, how.tree)
                with torch.inference_mode():
                    before = timed_alone(engine, b, context, cand, catchup_tokens, timer)
                run = _run(engine, ps, new_tokens, how, gen)
                with torch.inference_mode():
                    after = timed_alone(engine, b, context, cand, catchup_tokens, timer)
                alone = Alone((before.draft_s + after.draft_s) / 2, (before.draw_s + after.draw_s) / 2,
                              None if before.forward_s is None or after.forward_s is None
                              else (before.forward_s + after.forward_s) / 2)
                for kind, extra in step_extras(alone, cand, run.timed_steps).items():
                    samples[kind][b].append(extra)
                samples["pass_draw"][b].append(alone.draw_s)
                if tick:
                    tick()
    extras = {k: {b: float(np.median(v)) for b, v in by.items() if v} for k, by in samples.items()}
    n_tree = len(Candidate(None, TREE).shape.draft_pass_widths)
    extras["tree_accept"] = {b: tree_extra({k: extras[k][b] for k in KINDS}, n_tree) for b in batches
                             if all(b in extras[k] for k in KINDS)}
    # the verify phase's own work: its extra plus the calibrated pass's draw that the extra had taken off
    own = {"verify": {b: t + extras["pass_draw"][b] for b, t in extras["verify"].items() if b in extras["pass_draw"]}}
    if timer.cuda:
        extras["prefill"] = join_extras(engine, prompts, batches, repeats, timer)
    fitted = ("plain", "draft", "verify", "chain_accept", "tree_accept", "pass_draw", "prefill")
    return extras, EngineOverheads(**{k: per_step(own.get(k, extras[k]), k.replace("_", " "), bounds)
                                      for k in fitted if extras.get(k)})


def join_extras(engine: RealEngine, prompts: Sequence[Sequence[int]], batches: Sequence[int], repeats: int,
                timer: Timer, clock: Callable[[], float] = time.perf_counter) -> dict[int, float]:
    """A served prefill's own work (`EngineOverheads.prefill`) at each batch: the wall time of `RealEngine.join` of
    that many prompts (its graph captured by an untimed join first), less the calibrated pass over the same padded
    prompts timed alone (the pass and its draw at the last position, as the calibration times its prefill-shaped
    passes), medians over `repeats`. Only where the device's clock is precise (a GPU, where a join's own work is a
    sizeable part of a short pass): on a CPU it is a difference of two long passes."""
    out = {}
    for b in batches:
        ps = [prompts[i % len(prompts)] for i in range(b)]
        alone = engine.calibrated_pass(engine.target, b, engine.prefill_length(max(len(p) for p in ps)), 0)
        walls, passes = [], []
        with torch.inference_mode():
            for i in range(repeats + 1):
                batch = engine.open_batch(b, False)
                timer.sync()
                t0 = clock()
                engine.join(batch, ps, False, 1.0, None)
                timer.sync()
                if i:  # the first captures
                    walls.append(clock() - t0)
                engine.leave(batch, list(range(b)))
                passes.append(timer.measure(alone, warmup=1, min_reps=3, max_reps=5, max_time_s=0.5).median_s)
        out[b] = float(np.median(walls) - np.median(passes))
    return out


def _run(engine: RealEngine, prompts: Sequence[Sequence[int]], new_tokens: int, how: Decoding,
         gen: torch.Generator) -> RunResult:
    """One run until the first sequence is done; a tree runs the real rule (forced acceptance replays chains)."""
    forced, forced_rng = engine.forced, engine.forced_rng
    if how.tree is None or forced is None:
        return engine.generate(prompts, new_tokens, how, gen, until="first")
    engine.forced = None
    try:
        return engine.generate(prompts, new_tokens, how, gen, until="first")
    finally:
        engine.forced, engine.forced_rng = forced, forced_rng
