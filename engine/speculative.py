"""Real speculative decoding, batched: B sequences, each at its own position and accepting its own number of tokens.

In the style of gpt-fast's `speculative_decode`: a step drafts k tokens (or a tree), verifies them in one target pass
and keeps what the accept/reject rule (`engine.rejection`) accepts; a tree's accepted path then has its cache entries
moved to consecutive slots.

Everything a step decides is decided on the device for the whole batch (the accept rule, the tree walk, the cache
roll-back and compaction, the next positions); the host reads the step's outcome once, at its end, to extend each
sequence's text. Passes run through a `PassRunner` (eager, or CUDA graphs replayed per shape), and the step's phases
are timed with CUDA events on a GPU (so the host's launch gaps count, as they do in an engine) and a wall clock on
the CPU.

Caches roll back by position: every sequence b keeps P[b], the slot of its current (last emitted, not yet cached)
token; a rejected draft's entries beyond P simply get overwritten later. Each draft phase starts with a two-token
pass over [previous, current] at [P - 1, P], which (re)writes whatever the draft had not yet cached.

One concept past 500 lines: a speculative step and the loops that run it (generate, in turns, served); its parts
share the caches' positions and cannot be read apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from engine.heads import MedusaHeads
from engine.model import KEY_ALIGN, Decoder, KVCache, Window, causal_window, prefill_window, round_keys
from engine.pass_runner import EagerRunner, PassRunner
from engine.rejection import RULES, TreeTables, accept_chain, distribution, sample, walk_tree
from simulator import SpecsimError
from simulator.sweep import StepPhases
from simulator.trees import Tree


@dataclass
class StepRecord:
    accepted: list[int]  # A per sequence (drafted tokens accepted)
    tried: list[int]  # per sequence, drafted tokens the accept rule examined (up to and including the rejection)
    phases: StepPhases  # measured: drafting, the verification (or plain) pass, accept/reject and bookkeeping
    captured: bool = False  # a CUDA graph was captured during the step: its time is not a steady-state time
    verify_pass_s: float | None = None  # the target's forward alone, the start of the verify phase (`PhaseClock`)


@dataclass
class RunResult:
    tokens: list[list[int]]  # generated tokens per sequence (exactly max_new_tokens each)
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float = 0.0
    prefill_s: float = 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Mean tokens emitted per sequence per target pass (A + 1), over every step of every sequence."""
        n = sum(len(s.accepted) for s in self.steps)
        return sum(a + 1 for s in self.steps for a in s.accepted) / max(n, 1)

    @property
    def timed_steps(self) -> list[StepRecord]:
        """The steps whose time is a steady-state time (none of their passes was being captured as a graph)."""
        return [s for s in self.steps if not s.captured]

    @property
    def decode_s(self) -> float:
        """Time of the timed steps."""
        return sum(s.phases.total_s for s in self.timed_steps)

    @property
    def emitted_per_s(self) -> float:
        """Tokens emitted per second over the timed steps (every sequence's, also past max_new_tokens)."""
        steps = self.timed_steps
        return sum(a + 1 for s in steps for a in s.accepted) / max(sum(s.phases.total_s for s in steps), 1e-12)


class Ngram:
    """Prompt lookup (vLLM's ngram proposer): propose the k tokens that followed the latest earlier occurrence of the
    text's last n-gram, n from `max_n` down to `min_n`; with no match, nothing (the sequence takes a plain step). A
    proposal shorter than k repeats its last token. A proposal is a point mass (q one-hot). The host time it takes
    grows with the text it scans (`calibrate.ngram_host` measures it)."""

    def __init__(self, max_n: int = 3, min_n: int = 2) -> None:
        self.max_n, self.min_n = max_n, min_n

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        h = list(history)
        for n in range(min(self.max_n, len(h) - 1), self.min_n - 1, -1):
            suffix = h[-n:]
            for start in range(len(h) - n - 1, -1, -1):
                if h[start:start + n] == suffix:
                    cont = h[start + n:start + n + k]
                    if cont:
                        return (cont + [cont[-1]] * k)[:k]
        return []


DRAFTERS = ("model", "heads", "ngram")
PREFILL_BUCKET = 32  # a served prefill through CUDA graphs pads its prompts to a multiple of this many tokens


@dataclass
class Decoding:
    """What to run: plain (k = 0), a chain of k, or a tree; drafted by the draft model or by prompt lookup."""

    k: int = 0
    tree: Tree | None = None
    drafter: str = "model"  # "model" (the draft model), "heads" (prediction heads) or "ngram" (prompt lookup)
    temperature: float = 1.0
    rule: str = "exact"
    schedule: tuple[int, ...] = ()  # a chain's k per step, cycled (0: a plain step with the draft loaded)

    def __post_init__(self) -> None:
        if self.k < 0:
            raise SpecsimError(f"k must be >= 0, got {self.k}")
        if self.schedule and (self.tree is not None or min(self.schedule) < 0 or self.k != max(self.schedule)):
            raise SpecsimError("a schedule is a chain's k per step (each >= 0) and k must be its largest")
        if self.rule not in RULES:
            raise SpecsimError(f"unknown rule {self.rule!r}; use one of {', '.join(RULES)}")
        if self.drafter not in DRAFTERS:
            raise SpecsimError(f"unknown drafter {self.drafter!r}; use {', '.join(DRAFTERS)}")
        if self.tree is not None and self.drafter == "ngram":
            raise SpecsimError("prompt lookup proposes one continuation; trees need the draft model")
        if self.temperature < 0:
            raise SpecsimError("temperature must be >= 0")

    @property
    def span(self) -> int:
        """Cache slots one step may write past the current token."""
        return self.tree.n_nodes if self.tree is not None else self.k

    def k_at(self, step: int) -> int:
        """The chain's draft length at step `step` (0-based)."""
        return self.schedule[step % len(self.schedule)] if self.schedule else self.k


class PhaseClock:
    """Marks between a step's phases: CUDA events on a GPU (read after the step's one sync, so the GPU's time,
    launch gaps included), the wall clock on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.pass_mark: Any = None
        self.started_s = time.perf_counter()  # the host's clock at the step's call: its wall time starts here

    def _now(self) -> Any:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def _between_s(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def mark(self) -> None:
        self.marks.append(self._now())

    def mark_pass(self) -> None:
        """The end of the target's forward pass, inside the verify phase (before its probabilities are formed)."""
        self.pass_mark = self._now()

    def durations_s(self) -> list[float]:
        """Seconds between consecutive marks (after the device has passed the last one)."""
        return [self._between_s(a, b) for a, b in zip(self.marks, self.marks[1:])]

    def pass_s(self) -> float | None:
        """Seconds from the start of the verify phase (the second mark) to the end of the target's forward."""
        return self._between_s(self.marks[1], self.pass_mark) if self.pass_mark is not None else None


@dataclass
class _Batch:
    """The running batch: positions on the device and their host mirror, the current and previous tokens on the
    device, the text on the host."""

    P: torch.Tensor  # (B,) slot of each current token
    P_host: list[int]
    cur: torch.Tensor  # (B,) current (last emitted, not yet cached) token
    prev: torch.Tensor  # (B,) the token before it
    history: list[list[int]]
    out: list[list[int]]
    lag: int = 0  # tokens before `prev` the draft has not cached (plain steps of a schedule since it last drafted)
    # (B, d): the target's final hidden state at the position before each current token, where prediction heads
    # read (`engine.heads`); kept only when the engine has heads
    features: torch.Tensor | None = None


class RealEngine:
    """A target and an optional draft decoder on one device (the target's), decoding batches of prompts."""

    # Each draft phase starts with a pass over [previous, current] (the module docstring): the first draft pass of a
    # step reads two tokens, not one (`simulator.specs.EngineOverheads.draft_catchup_tokens`).
    DRAFT_CATCHUP_TOKENS = 2

    def __init__(self, target: Decoder, draft: Decoder | None = None, runner: PassRunner | None = None,
                 key_bucket: int | None = None, heads: MedusaHeads | None = None) -> None:
        self.target, self.draft, self.heads = target, draft, heads
        self.device = target.device
        if draft is not None and draft.device != self.device:
            raise SpecsimError(f"draft on {draft.device} but target on {self.device}: put both on one device")
        self.runner = runner or EagerRunner()
        if heads is not None:
            if self.runner.mode == "graph":
                raise SpecsimError("prediction heads read the target's hidden state of its last pass: run them with "
                                   "eager passes (--eager)")
            if heads.d_model != target.cfg.d_model or heads.vocab_size != target.cfg.vocab_size:
                raise SpecsimError(f"heads of width {heads.d_model} over {heads.vocab_size} tokens do not fit a "
                                   f"target of width {target.cfg.d_model} over {target.cfg.vocab_size}")
            target.keep_hidden = True
        # Graphs are captured per number of keys read: coarser buckets mean fewer captures.
        self.key_bucket = key_bucket or (64 if self.runner.mode == "graph" else KEY_ALIGN)
        self._patterns: dict[int, Window] = {}
        # Forced acceptance (`force`): which drafts each step accepts comes from an acceptance model instead of the
        # accept/reject rule; everything else (passes, the rule's own work, the roll-back) is real.
        self.forced: Any = None
        self.forced_rng: np.random.Generator | None = None
        self._streams: list[Any] = []
        self._serving: list[Decoder] = []  # the models whose caches a served batch uses (`open_batch`)
        self._turn_caches: list[KVCache | None] = []  # the target caches of runs in turns, kept for the next ones

    def force(self, acceptance: Any, seed: int = 0) -> None:
        """Replay the accepted lengths of `acceptance` (a `simulator.acceptance.Acceptance`; one stream per sequence,
        so correlated models keep their correlation along a sequence) in every chain step from now on; None stops.
        For validating step times at shapes whose random weights accept nothing of each other."""
        self.forced = acceptance
        self.forced_rng = np.random.default_rng(seed) if acceptance is not None else None
    # -- set-up --------------------------------------------------------------------------------------------------
    def _check(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, how: Decoding, until: str) -> None:
        if not prompts:
            raise SpecsimError("no prompts to decode")
        vocab = self.target.cfg.vocab_size
        for p in prompts:
            if len(p) < 2:
                raise SpecsimError("each prompt needs at least 2 tokens")
            if max(p) >= vocab or min(p) < 0:
                raise SpecsimError(f"prompt token out of the vocabulary of {vocab}")
        if until not in ("all", "first"):
            raise SpecsimError(f"until must be 'all' or 'first', got {until!r}")
        # A sequence runs ahead of the one that decides when to stop: by a step's span with until="first", by up to
        # depth accepted tokens per step of the slowest with until="all"; a step writes span slots past P.
        depth = how.tree.depth if how.tree is not None else how.k
        longest = max(len(p) for p in prompts)
        run_ahead = 0 if until == "first" else max_new_tokens * depth
        need = longest + max_new_tokens + how.span + 2 + run_ahead
        for name, m in (("target", self.target), ("draft", self.draft)):
            if m is None:
                continue
            if need > m.cfg.max_seq_len:
                ahead = (f" + run-ahead ({run_ahead}: until every sequence has its new tokens, one may accept "
                         f"{depth} more a step than the slowest, {max_new_tokens} x {depth})" if run_ahead else "")
                raise SpecsimError(
                    f"the {name}'s cache holds {m.cfg.max_seq_len} tokens but prompt ({longest}) + new tokens "
                    f"({max_new_tokens}) + drafted span ({how.span}) + margin (2){ahead} need "
                    f"{need}; shorten the prompt, lower k or the tree, generate fewer tokens"
                    + (", or stop at the first sequence done (until='first')" if run_ahead else ""))
        if how.span and how.drafter == "model" and self.draft is None:
            raise SpecsimError("speculation with a draft model needs one")
        if how.span and how.drafter == "heads":
            if self.heads is None:
                raise SpecsimError("speculation with prediction heads needs them (RealEngine(heads=...))")
            if depth > self.heads.n_heads:
                raise SpecsimError(f"{self.heads.n_heads} heads draft at most {self.heads.n_heads} positions a step, "
                                   f"not {depth}")
        if self.draft is not None and self.draft.cfg.vocab_size != vocab:
            raise SpecsimError("draft and target vocabularies differ")

    def _prefill(self, prompts: Sequence[Sequence[int]], use_draft: bool) -> _Batch:
        """Cache every prompt token but the last (eagerly: prefill is not a decoding step). A cache with rows enough
        is reused, so graphs captured by earlier runs at this batch keep replaying (stale slots are never read: a
        token sees only its prefix and its own window)."""
        B = len(prompts)
        longest = max(len(p) for p in prompts)
        padded = torch.tensor([list(p[:-1]) + [0] * (longest - len(p)) for p in prompts], device=self.device)
        _, window = prefill_window([len(p) for p in prompts], self.device)
        for m in [self.target] + ([self.draft] if use_draft and self.draft is not None else []):
            if m.cache_rows < B:
                m.setup_cache(B)
            m(padded, window)  # padding sits past each prompt's end and is overwritten before it is ever attended
        P_host = [len(p) - 1 for p in prompts]
        features = None
        if self.heads is not None:  # the hidden state at the last cached prompt token (it predicted the current one)
            assert self.target.hidden is not None
            features = self.target.hidden[torch.arange(B, device=self.device),
                                          torch.tensor([len(p) - 2 for p in prompts], device=self.device)]
        return _Batch(torch.tensor(P_host, device=self.device), P_host,
                      torch.tensor([p[-1] for p in prompts], device=self.device),
                      torch.tensor([p[-2] for p in prompts], device=self.device),
                      [list(p) for p in prompts], [[] for _ in prompts], features=features)

    def _pass(self, model: Decoder, tokens: torch.Tensor, start: torch.Tensor, last_slot: int, pattern: tuple,
              window: Window) -> torch.Tensor:
        """One pass through the runner; `last_slot` (host) is the furthest slot it writes or reads."""
        keys = round_keys(last_slot + 1, model.cfg.max_seq_len, self.key_bucket)
        model.check_window(tokens.shape[0], last_slot, keys)
        w = Window(start, window.offsets, window.visible, keys, window.positions)
        return self.runner(model, tokens, w, pattern)

    def _causal(self, n: int) -> Window:
        """The offsets and visibility of n consecutive tokens (start and keys are filled in per pass)."""
        if n not in self._patterns:
            self._patterns[n] = causal_window(torch.zeros(1, dtype=torch.long, device=self.device), n, 0)
        return self._patterns[n]

    def _causal_pass(self, model: Decoder, tokens: torch.Tensor, start: torch.Tensor, start_host_max: int
                     ) -> torch.Tensor:
        n = tokens.shape[1]
        return self._pass(model, tokens, start, start_host_max + n - 1, ("causal", n), self._causal(n))

    def calibrated_pass(self, model: Decoder, batch: int, n: int, context: int, draw: bool = True
                        ) -> Callable[[], torch.Tensor]:
        """A pass as the calibration times one (`calibrate.calibration.time_together`: the pass, the probabilities
        at its last position, one sample; the forward alone without `draw`) over `batch` sequences x `n` random
        tokens at `context`, on this engine's models and caches (the slots it writes are rewritten before any run
        reads them)."""
        if model.cache_rows < batch:
            model.setup_cache(batch)
        tokens = torch.randint(0, model.cfg.vocab_size, (batch, n), device=self.device)
        start = torch.full((batch,), context, dtype=torch.long, device=self.device)

        def run() -> torch.Tensor:
            logits = self._causal_pass(model, tokens, start, context)
            return sample(distribution(logits[:, -1], 1.0), None) if draw else logits

        return run

    # -- the run -------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, how: Decoding,
                 gen: torch.Generator | None = None, until: str = "all") -> RunResult:
        """Decode until every sequence (``until="all"``) or the first one (``"first"``: every sequence stays active
        to the end, as in a continuously batched engine) has `max_new_tokens`; records per step what was accepted
        and where the time went. Returned tokens are cut to `max_new_tokens`."""
        self._check(prompts, max_new_tokens, how, until)
        if gen is not None and gen.device != self.device:
            raise SpecsimError(f"the random generator is on {gen.device} but the models on {self.device}")
        done = max if until == "first" else min
        t0 = time.perf_counter()
        use_draft = how.span > 0 and how.drafter == "model"
        if self.forced is not None:
            if how.tree is not None:
                raise SpecsimError("forced acceptance replays chains; validate trees with the built-in pair")
            # Stationary: a run of a few dozen tokens per sequence would otherwise replay only responses' openings.
            self._streams = [self.forced.stream(self.forced_rng, stationary=True) for _ in prompts]
        batch = self._prefill(prompts, use_draft)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        result = RunResult(batch.out, prefill_s=time.perf_counter() - t0)
        tables = TreeTables(how.tree, self.device) if how.tree is not None else None
        while done(len(o) for o in batch.out) < max_new_tokens:
            result.steps.append(self.step(batch, how, gen, tables, index=len(result.steps)))
        result.tokens = [o[:max_new_tokens] for o in batch.out]
        result.wall_s = time.perf_counter() - t0
        return result

    @torch.inference_mode()
    def generate_in_turns(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, hows: Sequence[Decoding],
                          gen: torch.Generator | None = None) -> list[RunResult]:
        """The same prompts decoded once per decoding in `hows` (each until its first sequence has `max_new_tokens`,
        as ``generate(until="first")``), the runs taking turns step by step (`next_turn`), so the runs spread over the
        same stretch of time and a machine whose speed drifts within it slows them alike. Each run keeps its own
        target cache (`Decoder.swap_cache`, outside every step's clock); at most one may use the draft. Eager passes
        only: a captured graph holds one cache's address."""
        if self.runner.mode == "graph":
            raise SpecsimError("runs in turns need eager passes (a captured CUDA graph holds one cache's address)")
        if sum(h.span > 0 and h.drafter == "model" for h in hows) > 1:
            raise SpecsimError("at most one of the runs in turns may use the draft (it has one cache)")
        for how in hows:
            self._check(prompts, max_new_tokens, how, "first")
            if self.forced is not None and how.tree is not None:
                raise SpecsimError("forced acceptance replays chains; validate trees with the built-in pair")
        n = len(hows)
        self._turn_caches += [None] * (n - 1 - len(self._turn_caches))
        away: list[KVCache | None] = [None] + self._turn_caches[:n - 1]  # run i's target cache while not in place
        here = 0

        def take(i: int) -> None:
            nonlocal here
            if i != here:
                away[here], away[i], here = self.target.swap_cache(away[i]), None, i

        batches, results, streams, tables = [], [], [], []
        try:
            for i, how in enumerate(hows):
                take(i)
                t0 = time.perf_counter()
                streams.append([self.forced.stream(self.forced_rng, stationary=True) for _ in prompts]
                               if self.forced is not None and how.span else [])
                batches.append(self._prefill(prompts, how.span > 0 and how.drafter == "model"))
                results.append(RunResult(batches[i].out, prefill_s=time.perf_counter() - t0))
                tables.append(TreeTables(how.tree, self.device) if how.tree is not None else None)
            while (i := next_turn([max(len(o) for o in b.out) for b in batches], [len(r.steps) for r in results],
                                  max_new_tokens)) is not None:
                take(i)
                self._streams = streams[i]
                results[i].steps.append(self.step(batches[i], hows[i], gen, tables[i], index=len(results[i].steps)))
        finally:
            take(0)
            self._turn_caches[:n - 1] = away[1:]
        for r in results:
            r.tokens = [o[:max_new_tokens] for o in r.tokens]
            r.wall_s = r.prefill_s + sum(s.phases.total_s for s in r.steps)  # its own time, not the turns' between
        return results

    def step(self, batch: _Batch, how: Decoding, gen: torch.Generator | None, tables: TreeTables | None = None,
             index: int = 0, draft_current: bool = False) -> StepRecord:
        """One decoding step of the running batch: plain, a chain (of the schedule's k at step `index`) or a tree.
        `draft_current`: a plain step also runs the draft over the current token, so its cache stays current (a
        serving engine's eager draft sync) instead of catching up when it next drafts."""
        captures = self.runner.captures
        clock = PhaseClock(self.device)
        clock.mark()
        k = how.k_at(index)
        if how.span == 0 or (tables is None and k == 0):
            packed = self._plain_step(batch, how, gen, clock, draft_current)
            batch.lag += 1 if how.span and not draft_current else 0  # a plain step: the draft falls one behind
        elif tables is not None:
            if self.forced is not None:
                raise SpecsimError("forced acceptance replays chains; validate trees with the built-in pair")
            packed = self._tree_step(batch, how, tables, gen, clock)
        elif how.drafter == "ngram":  # the lookup on the host is the draft phase; no sequence found: a plain step
            proposals = [Ngram().propose(h, k) for h in batch.history]
            if any(proposals):
                packed = self._chain_step(batch, replace(how, k=k, schedule=()), gen, clock, proposals)
            else:
                packed = self._plain_step(batch, how, gen, clock)
        else:
            packed = self._chain_step(batch, replace(how, k=k, schedule=()) if how.schedule else how, gen, clock)
        step = self._finish_step(batch, packed, clock)
        step.captured = self.runner.captures != captures
        return step

    # -- continuous batching (`calibrate.served_validation`): sequences join and leave the running batch between steps -
    def open_batch(self, rows: int, use_draft: bool) -> _Batch:
        """An empty running batch, with caches for `rows` sequences in the target (and the draft)."""
        self._serving = [self.target] + ([self.draft] if use_draft and self.draft is not None else [])
        for m in self._serving:
            if m.cache_rows < rows:
                m.setup_cache(rows)
        empty = torch.empty(0, dtype=torch.long, device=self.device)
        self._streams = []
        return _Batch(empty, [], empty, empty, [], [])

    @torch.inference_mode()
    def join(self, batch: _Batch, prompts: Sequence[Sequence[int]], use_draft: bool, temperature: float,
             gen: torch.Generator | None) -> None:
        """Prefill `prompts` into the cache rows after the running batch's, one pass per model padded to the longest
        prompt (`prefill_length`: with CUDA graphs, to a bucket, and replayed as the calibration times its
        prefill-shaped passes), and sample each one's first token from the target at its last prompt token: they
        join the batch with that token emitted. The draft's cache is filled too when `use_draft` (it is then
        current)."""
        B0, n = len(batch.P_host), len(prompts)
        lengths = [len(p) for p in prompts]
        longest = self.prefill_length(max(lengths))
        for m in [self.target] + ([self.draft] if use_draft and self.draft is not None else []):
            m.check_window(n, longest - 1, longest, row0=B0)
        padded = torch.tensor([list(p) + [0] * (longest - len(p)) for p in prompts], device=self.device)
        start = torch.zeros(n, dtype=torch.long, device=self.device)
        base = causal_window(start, longest, longest)
        window = Window(start, base.offsets, base.visible, round_keys(longest, self.target.cfg.max_seq_len),
                        row0=B0)
        graphed = self.runner.mode == "graph" and self.heads is None  # heads read the target's hidden state
        pattern = ("prefill", longest)

        def run(model: Decoder) -> torch.Tensor:
            return self.runner(model, padded, window, pattern) if graphed else model(padded, window)

        logits = run(self.target)
        at_last = (torch.arange(n, device=self.device), torch.tensor(lengths, device=self.device) - 1)
        last = logits[at_last]
        first = sample(distribution(last, temperature), gen)
        if self.heads is not None:
            assert self.target.hidden is not None
            new = self.target.hidden[at_last]
            batch.features = new if batch.features is None else torch.cat([batch.features, new])
        if use_draft and self.draft is not None:
            run(self.draft)  # padding sits past each prompt's end and is overwritten before it is read
        firsts = first.tolist()
        batch.P = torch.cat([batch.P, torch.tensor(lengths, device=self.device)])
        batch.P_host.extend(lengths)
        batch.cur = torch.cat([batch.cur, first])
        batch.prev = torch.cat([batch.prev, torch.tensor([p[-1] for p in prompts], device=self.device)])
        batch.history.extend(list(p) + [t] for p, t in zip(prompts, firsts))
        batch.out.extend([t] for t in firsts)
        if self.forced is not None:
            self._streams.extend(self.forced.stream(self.forced_rng, stationary=True) for _ in prompts)

    def prefill_length(self, longest: int) -> int:
        """The tokens a served prefill pass runs for prompts of at most `longest`: padded to a multiple of
        `PREFILL_BUCKET` when passes replay CUDA graphs (a stream of prompts of every length would capture a graph
        per length; eagerly a pass of any length costs nothing extra to start), at most the cache."""
        if self.runner.mode != "graph":
            return longest
        cache = min(m.cfg.max_seq_len for m in (self.target, self.draft) if m is not None)
        return max(longest, min(-(-longest // PREFILL_BUCKET) * PREFILL_BUCKET, cache))

    def leave(self, batch: _Batch, finished: Sequence[int]) -> list[int]:
        """Finished sequences leave; the last running rows move into the rows they free (both caches), so the batch
        stays in rows 0..B-1. Returns the new order: new row i holds what old row order[i] held."""
        gone = set(finished)
        B = len(batch.P_host)
        n_keep = B - len(gone)
        holes = [h for h in sorted(gone) if h < n_keep]  # freed rows the batch still spans
        movers = [r for r in range(n_keep, B) if r not in gone]  # running rows past the new end: one per hole
        order = list(range(n_keep))
        for h, r in zip(holes, movers):
            order[h] = r
        if movers:
            slots = max(batch.P_host[r] for r in movers) + 1
            for m in self._serving:
                m.move_rows(movers, holes, slots)
        idx = torch.tensor(order, dtype=torch.long, device=self.device)
        batch.P, batch.cur, batch.prev = batch.P[idx], batch.cur[idx], batch.prev[idx]
        if batch.features is not None:
            batch.features = batch.features[idx]
        batch.P_host = [batch.P_host[r] for r in order]
        batch.history = [batch.history[r] for r in order]
        batch.out = [batch.out[r] for r in order]
        if self._streams:
            self._streams = [self._streams[r] for r in order]
        return order

    def _finish_step(self, batch: _Batch, packed: torch.Tensor, clock: PhaseClock) -> StepRecord:
        """The step's one host read, `packed` (B, 2 + emitted slots): A, the candidates tried, then the emitted
        tokens (A accepted and the next one); the host extends each sequence's text."""
        rows = packed.tolist()
        for b, row in enumerate(rows):
            toks = row[2:row[0] + 3]
            batch.history[b].extend(toks)
            batch.out[b].extend(toks)
            batch.P_host[b] += len(toks)
        draft_s, verify_s, _ = clock.durations_s()  # on the device, launch gaps included
        # The accept phase is the rest of the step's wall time: the rule and bookkeeping on the device, and what the
        # host does outside the marks (its work before the first kernel, the read, the bookkeeping after it). On a
        # GPU the marks are the device's time and miss the host's (~0.1 ms of a 1.3 ms step on an H200).
        wall_s = time.perf_counter() - clock.started_s
        return StepRecord([r[0] for r in rows], [r[1] for r in rows],
                          StepPhases(draft_s, verify_s, max(wall_s - draft_s - verify_s, 0.0)),
                          verify_pass_s=clock.pass_s())

    def _advance(self, batch: _Batch, A: torch.Tensor, tried: torch.Tensor, emitted: torch.Tensor,
                 nxt: torch.Tensor, last_row: torch.Tensor | None = None) -> torch.Tensor:
        """Move every sequence past its A accepted tokens and the next one (on the device); returns the packed
        outcome (A, tried, accepted tokens, next token) for the step's one host read. With heads, the features move
        to the target's hidden state at each sequence's last kept row of the pass (`last_row`, default A: the row
        of a chain whose prediction was the next token)."""
        rows = torch.arange(A.shape[0], device=self.device)
        if self.heads is not None:
            assert self.target.hidden is not None
            batch.features = self.target.hidden[rows, A if last_row is None else last_row]
        batch.prev = torch.where(A > 0, emitted[rows, (A - 1).clamp(min=0)], batch.cur)
        batch.cur = nxt
        batch.P = batch.P + A + 1
        cols = torch.arange(emitted.shape[1] + 1, device=self.device)
        tokens = torch.where(cols[None, :] < A[:, None], torch.cat([emitted, emitted[:, :1]], 1), nxt[:, None])
        return torch.cat([A[:, None], tried[:, None], tokens], 1)

    def _plain_step(self, batch: _Batch, how: Decoding, gen: torch.Generator | None, clock: PhaseClock,
                    draft_current: bool = False) -> torch.Tensor:
        if draft_current and self.draft is not None:  # the draft reads the current token as the target does
            self._causal_pass(self.draft, batch.cur[:, None], batch.P, max(batch.P_host))
        clock.mark()
        logits = self._causal_pass(self.target, batch.cur[:, None], batch.P, max(batch.P_host))
        clock.mark_pass()
        nxt = sample(distribution(logits[:, -1], how.temperature), gen)
        clock.mark()
        A = torch.zeros_like(nxt)
        packed = self._advance(batch, A, A, nxt[:, None], nxt)
        clock.mark()
        return packed

    def _draft_window(self, batch: _Batch) -> torch.Tensor:
        """Draft logits at the current token after (re)caching [previous, current] at [P - 1, P], and, after
        scheduled plain steps, the `lag` tokens before them it missed (its catch-up)."""
        assert self.draft is not None
        if batch.lag == 0:
            toks = torch.stack([batch.prev, batch.cur], dim=1)
            return self._causal_pass(self.draft, toks, batch.P - 1, max(batch.P_host) - 1)[:, -1]
        n = batch.lag + 2
        toks = torch.tensor([h[-n:] for h in batch.history], device=self.device)
        logits = self._causal_pass(self.draft, toks, batch.P - (n - 1), max(batch.P_host) - (n - 1))[:, -1]
        batch.lag = 0
        return logits

    def _chain_step(self, batch: _Batch, how: Decoding, gen: torch.Generator | None,
                    clock: PhaseClock, proposals: list[list[int]] | None = None) -> torch.Tensor:
        k, T = how.k, how.temperature
        top = max(batch.P_host)
        proposed = None
        if proposals is not None:  # prompt lookup: a sequence without a proposal verifies padding it never accepts
            proposed = torch.tensor([bool(p) for p in proposals], device=self.device)
            d = torch.tensor([p or [0] * k for p in proposals], device=self.device)
            q = torch.nn.functional.one_hot(d, self.target.cfg.vocab_size).float()
        elif how.drafter == "heads":  # one pass of every head: head j proposes the token j + 1 past the current one
            assert self.heads is not None and batch.features is not None
            q = distribution(self.heads(batch.features)[:, :k], T)  # (B, k, V)
            d = torch.stack([sample(q[:, j], gen) for j in range(k)], 1)
        else:
            qs, ds = [], []
            logits = self._draft_window(batch)
            for j in range(k):
                qj = distribution(logits, T)
                dj = sample(qj, gen)
                qs.append(qj)
                ds.append(dj)
                if j + 1 < k:
                    logits = self._causal_pass(self.draft, dj[:, None], batch.P + j + 1, top + j + 1)[:, -1]
            q, d = torch.stack(qs, 1), torch.stack(ds, 1)  # (B, k, V), (B, k)
        clock.mark()
        verify_tokens = torch.cat([batch.cur[:, None], d], dim=1)
        logits = self._causal_pass(self.target, verify_tokens, batch.P, top)
        clock.mark_pass()
        p = distribution(logits, T)  # (B, k + 1, V)
        clock.mark()
        forced = None
        if self.forced is not None:  # the rule runs (its cost is real); its outcome is replaced by the model's
            forced = torch.tensor([min(stream(k), k) for stream in self._streams], device=self.device)
        A, nxt = accept_chain(p, q, d, how.rule, gen, forced)
        tried = (A + 1).clamp(max=k)
        if proposed is not None and not bool(proposed.all()):  # those without a proposal: a plain step's outcome
            A = torch.where(proposed, A, torch.zeros_like(A))
            tried = torch.where(proposed, tried, torch.zeros_like(tried))
            nxt = torch.where(proposed, nxt, sample(p[:, 0], gen))
        packed = self._advance(batch, A, tried, d, nxt)
        clock.mark()
        return packed

    # -- trees ---------------------------------------------------------------------------------------------------
    def _tree_step(self, batch: _Batch, how: Decoding, t: TreeTables, gen: torch.Generator | None,
                   clock: PhaseClock) -> torch.Tensor:
        T, N = how.temperature, t.tree.n_nodes
        B, V = batch.cur.shape[0], self.target.cfg.vocab_size
        top = max(batch.P_host)
        tokens = torch.zeros(B, N + 1, dtype=torch.long, device=self.device)
        tokens[:, 0] = batch.cur
        q_nodes = torch.zeros(B, N + 1, V, device=self.device)  # the draft's distribution at each parent node
        heads = how.drafter == "heads"
        if heads:  # head li proposes every node of depth li + 1, whatever its parent
            assert self.heads is not None and batch.features is not None
            head_logits = self.heads(batch.features)  # (B, H, V)
            q_logits = head_logits[:, :1]
        else:
            q_logits = self._draft_window(batch)[:, None]  # (B, nodes in this level, V)
        for li, level in enumerate(t.levels):
            if heads:
                q_logits = head_logits[:, li:li + 1].expand(B, len(level), V)
            q_level = distribution(q_logits, T if T > 0 else 1.0)  # greedy trees rank candidates by q at T = 1
            for j, node in enumerate(level):
                kids = t.children[node]
                q_nodes[:, node] = q_level[:, j]
                if T == 0:
                    picks = q_level[:, j].topk(len(kids), dim=-1).indices
                else:
                    picks = torch.multinomial(q_level[:, j], len(kids), replacement=False, generator=gen)
                tokens[:, kids] = picks
            if li + 1 < len(t.levels) and not heads:
                idx = t.level_index[li + 1]
                window = Window(batch.P, idx, t.ancestors[idx], 0, batch.P[:, None] + t.depth[idx])
                q_logits = self._pass(self.draft, tokens[:, idx], batch.P, top + N,
                                      ("tree", t.tree.label, li + 1), window)
        clock.mark()
        all_idx = torch.arange(N + 1, device=self.device)
        window = Window(batch.P, all_idx, t.ancestors, 0, batch.P[:, None] + t.depth)
        logits = self._pass(self.target, tokens, batch.P, top + N, ("tree", t.tree.label, "verify"), window)
        clock.mark_pass()
        p = distribution(logits, T)
        clock.mark()
        path, nxt, tried = walk_tree(p, q_nodes, tokens, t, T, how.rule, gen)
        A = (path >= 0).sum(1)
        # Compact: the accepted path's entries move to the consecutive slots P + 1 .. P + A in both caches.
        steps = torch.arange(path.shape[1], device=self.device)
        dst = batch.P[:, None] + 1 + steps
        src = torch.where(path >= 0, batch.P[:, None] + path.clamp(min=0), dst)
        self.target.move_cache(src, dst)
        if not heads:
            assert self.draft is not None
            self.draft.move_cache(src, dst)
        emitted = tokens.gather(1, path.clamp(min=0))
        # the pass's row of the last accepted node (the root when none was): its hidden state predicted `nxt`
        rows = torch.arange(B, device=self.device)
        last_row = torch.where(A > 0, path[rows, (A - 1).clamp(min=0)].clamp(min=0), torch.zeros_like(A))
        packed = self._advance(batch, A, tried, emitted, nxt, last_row)
        clock.mark()
        return packed


def next_turn(emitted: Sequence[int], steps: Sequence[int], max_new_tokens: int) -> int | None:
    """Which of several runs decoded in turns takes the next step (None: all are done): the unfinished one whose next
    step is centred earliest in its share of the tokens, at `emitted` plus half of what a step of it has emitted on
    average (one token before its first). Each run's steps then sit at the same fractions of the shared stretch of
    time: a plain run emitting one token a step and a speculative one emitting three alternate three to one."""
    best, when = None, float("inf")
    for i, (e, n) in enumerate(zip(emitted, steps)):
        centre = e + (e / n if n else 1.0) / 2
        if e < max_new_tokens and centre < when:
            best, when = i, centre
    return best
