"""Hugging Face transformers as the engine: a profile fitted to *its* plain passes and plain `generate()` calls (its
speculation predicted from that profile and checked against its runs in `calibrate.transformers_validation`). On
this machine's CPU (fp32): the models
are loaded there and every tensor made here lives there; transformers on a GPU is not timed by this module.

transformers decodes one sequence at a time (batch 1) and speculates two ways: ``generate(assistant_model=DRAFT)``
(a draft model proposes ``num_assistant_tokens`` tokens, the target verifies them in one pass) and
``generate(prompt_lookup_num_tokens=K)`` (the draft is the prompt itself: the continuation of the latest earlier
occurrence of the last one or two tokens). No speculative run enters the calibration; it measures:

- forward passes of each model through transformers' own ``forward`` with its ``DynamicCache`` (cropped back to
  the context between calls), over new tokens x context, and prefills; the cost model is fitted to them as to
  specsim's own passes (`simulator.rate_fit`), on this machine's measured bandwidth and FLOP/s;
- what ``generate()`` costs around its passes: a target's plain ``generate`` of N tokens against N passes gives
  the per-token work of its loop (logits processors, stopping criteria, bookkeeping); the draft's ``generate`` of
  1..8 tokens gives the fixed cost of one call (an assisted step calls the assistant's ``generate`` once) and the
  per-token work of its loop;
- acceptance along the target's greedy text from the calibration prompts: the draft model's greedy matches, and
  the candidates transformers' own `PromptLookupCandidateGenerator` proposes there (and its host time), on every
  calibration prompt (their greedy texts generated 16 at a time).

A speculative step of transformers is then: one call of the draft's ``generate`` (its fixed cost, then k draft
passes each with its loop's work), one verification pass of k + 1 tokens, and the target loop's work: the
profile's engine terms ``verify`` (loop + the call's fixed cost), ``draft`` (per draft pass) and ``plain``.
"""

from __future__ import annotations

import datetime as dt
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from calibrate.timing import Effort, Timer, interleaved
from scenarios.profile import (
    DeviceInfo,
    Fit,
    HeldoutErrors,
    MeasuredAcceptance,
    Microbenchmarks,
    PassRecord,
    Profile,
    assess_trust,
)
from simulator import SpecsimError, __version__
from simulator.cost import CostModel
from simulator.rate_fit import PassPoint, errors, fit_cost_model, heldout_split
from simulator.specs import EngineOverheads, ModelSpec, PerStep

INSTALL = ("pip install 'transformers>=4.46' (and write the built-in pair for it with: specsim export --out pair/; "
           "then --target pair/target --draft pair/draft)")
K_MAX = 8
DRAFT_CALL_KS = (1, 2, 3, 4, 6, 8)


def require_transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise SpecsimError(f"--engine transformers needs Hugging Face transformers: {INSTALL}") from None
    transformers.logging.set_verbosity_error()  # its deprecation notices are not the user's to act on
    transformers.logging.disable_progress_bar()
    return transformers


@dataclass
class HFModel:
    """A local Hugging Face checkpoint loaded by transformers (fp32, eval) and its shape as specsim reads it."""

    folder: Path
    model: Any
    spec: ModelSpec

    @property
    def cache_kw(self) -> str:
        """The keyword `forward` takes its cache by (``past_key_values``, renamed ``cache`` in transformers 5.x)."""
        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"


def load_hf(folder: str | Path, role: str) -> HFModel:
    """A local checkpoint folder (config.json + safetensors); nothing is downloaded."""
    from scenarios import model_from_config_json

    transformers = require_transformers()
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise SpecsimError(f"--{role} {folder}: not a Hugging Face model folder (no config.json); write the "
                           "built-in pair as one with: specsim export --out pair/")
    spec = model_from_config_json(folder / "config.json", "fp32")
    weights = [p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth")]
    if not weights:
        raise SpecsimError(f"--{role} {folder}: a config.json but no weights (model.safetensors or pytorch_model.bin); "
                           "put the checkpoint's weight files beside it, or write the built-in pair with: specsim "
                           "export --out pair/")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                                 local_files_only=True).eval()
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SpecsimError(f"--{role} {folder}: transformers cannot load it ({first[:200]}); give a complete local "
                           "checkpoint folder") from None
    return HFModel(folder, model, spec)


def new_cache(m: HFModel) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=m.model.config)
    except TypeError:  # transformers < 4.56
        return DynamicCache()


def crop(cache: Any, length: int) -> None:
    """Drop the cache's entries past `length` (a negative count removes that many, in every version)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


@torch.inference_mode()
def forward(m: HFModel, tokens: torch.Tensor, cache: Any) -> torch.Tensor:
    return m.model(tokens, use_cache=True, **{m.cache_kw: cache}).logits


def pass_step(m: HFModel, n: int, context: int, gen: torch.Generator) -> Callable[[], object]:
    """A decoding pass of `n` new tokens on `context` cached ones, as transformers runs it (its forward, its cache);
    a prefill (context 0) starts a new cache each time."""
    tokens = torch.randint(0, m.spec.vocab_size, (1, n), generator=gen)
    if context == 0:
        return lambda: forward(m, tokens, new_cache(m))
    cache = new_cache(m)
    forward(m, torch.randint(0, m.spec.vocab_size, (1, context), generator=gen), cache)

    def step() -> object:
        crop(cache, context)
        return forward(m, tokens, cache)

    return step


@dataclass(frozen=True)
class Grid:
    target_new_tokens: tuple[int, ...]
    draft_new_tokens: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill_tokens: tuple[int, ...]

    @classmethod
    def of(cls, quick: bool) -> Grid:
        """Every verification length of k = 1..8 (on a CPU a pass of 2-3 tokens can cost more than one of 5:
        transformers does not pad to the cheaper shape, so none is inferred), and prefills as long as the prompts
        made to repeat themselves plus a proposal."""
        if quick:
            return cls(tuple(range(1, K_MAX + 2)), (1, 2), (32, 192, 352), (16, 64, 128, 192))
        return cls(tuple(range(1, K_MAX + 2)), (1, 2, 3), (32, 128, 256, 416), (16, 48, 96, 160, 224))


def time_hf_passes(target: HFModel, draft: HFModel, grid: Grid, timer: Timer, effort: Effort, seed: int,
                   tick: Callable[[], None]) -> list[dict[str, Any]]:
    """Every grid point of both models, timed in interleaved rounds (`calibrate.timing.interleaved`)."""
    gen = torch.Generator().manual_seed(seed)
    points: dict[tuple[str, int, int], Callable[[], object]] = {}
    for m, ns in ((target, grid.target_new_tokens), (draft, grid.draft_new_tokens)):
        for c in grid.contexts:
            for n in ns:
                points[(m.spec.name, n, c)] = pass_step(m, n, c, gen)
        for n in grid.prefill_tokens:
            points[(m.spec.name, n, 0)] = pass_step(m, n, 0, gen)
    timings = interleaved(points, timer, effort, np.random.default_rng(seed), group=lambda key: key[0])
    records = []
    for (name, n, c), t in timings.items():
        records.append({"model": name, "batch": 1, "new_tokens": n, "context": c, **t.to_dict()})
        tick()
    return records


@torch.inference_mode()
def generate(m: HFModel, prompt: Sequence[int], new_tokens: int, **kw: Any) -> tuple[list[int], float]:
    """transformers' own `generate`, greedy, exactly `new_tokens` tokens: (the new tokens, seconds)."""
    ids = torch.tensor([list(prompt)])
    t0 = time.perf_counter()
    out = m.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, **kw)
    return out[0, ids.shape[1]:].tolist(), time.perf_counter() - t0


@torch.inference_mode()
def greedy_texts(m: HFModel, prompts: Sequence[Sequence[int]], new_tokens: int, tick: Callable[[], None],
                 chunk: int = 16) -> list[list[int]]:
    """transformers' greedy continuations of many prompts, up to `chunk` prompts of one length per `generate` call
    (no padding): on this CPU 16 at once took 0.7 s a prompt against 2.5 s one by one, with the same tokens."""
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(i)
    out: dict[int, list[int]] = {}
    for rows in by_length.values():
        for j in range(0, len(rows), chunk):
            part = rows[j:j + chunk]
            ids = torch.tensor([list(prompts[i]) for i in part])
            new = m.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                   min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)[:, ids.shape[1]:]
            for i, text in zip(part, new.tolist()):
                out[i] = text
                tick()
    return [out[i] for i in range(len(prompts))]


def median_time(fn: Callable[[], float], repeats: int) -> float:
    return float(np.median([fn() for _ in range(repeats)]))


def generate_overheads(target: HFModel, draft: HFModel, cost: CostModel, prompts: Sequence[Sequence[int]],
                       repeats: int, tick: Callable[[], None]) -> dict[str, Any]:
    """What `generate()` does around its passes, from plain calls only:

    - the target's loop: generate(N2) - generate(N1) over N2 - N1 tokens, less the fitted passes of those tokens;
    - the draft's call: generate(k) for k in DRAFT_CALL_KS fitted as a + b k; the fixed cost a, less the fitted
      prefill, is what one call of the assistant costs an assisted step; b less a fitted draft pass is its loop's
      per-token work."""
    n1, n2 = 4, 36
    steps, loop = [], []
    for p in prompts:
        pairs = [(generate(target, p, n1)[1], generate(target, p, n2)[1]) for _ in range(repeats)]  # in turns
        d1, d2 = (float(np.median(x)) for x in zip(*pairs))
        passes = sum(cost.pass_time_s(target.spec, 1, 1, len(p) + i) for i in range(n1 - 1, n2 - 1))
        steps.append((d2 - d1) / (n2 - n1))
        loop.append((d2 - d1 - passes) / (n2 - n1))
        tick()
    short = list(prompts[0][:16])
    calls = {k: median_time(lambda k=k: generate(draft, short, k)[1], repeats) for k in DRAFT_CALL_KS}
    tick()
    ks = np.array(DRAFT_CALL_KS, dtype=float)
    slope, intercept = np.polyfit(ks, np.array([calls[k] for k in DRAFT_CALL_KS]), 1)
    # generate(k) = call + prefill(16 tokens; its logits give the first token) + (k - 1) x (pass + per-token loop)
    prefill = cost.pass_time_s(draft.spec, 1, len(short), 0)
    draft_pass = cost.pass_time_s(draft.spec, 1, 1, len(short) + 4)
    return {"target_step_s": float(np.median(steps)), "target_loop_s": max(float(np.median(loop)), 0.0),
            "draft_call_s": max(float(intercept + slope - prefill), 0.0),
            "draft_loop_s": max(float(slope - draft_pass), 0.0),
            "draft_generate_s_by_k": {str(k): v for k, v in calls.items()},
            "tokens": [n1, n2], "prompts": len(prompts), "repeats": repeats}


@torch.inference_mode()
def logits_of(m: HFModel, seq: Sequence[int]) -> torch.Tensor:
    return m.model(torch.tensor([list(seq)])).logits[0].float()


def measure_hf_acceptance(target: HFModel, draft: HFModel, prompts: Sequence[Sequence[int]], new_tokens: int,
                          seed: int, tick: Callable[[], None]) -> tuple[dict[str, Any], list[list[int]]]:
    """The draft's acceptance along the target's greedy text from each prompt (as `measure_acceptance` does for
    specsim's engine, through transformers' passes); and that text, for the lookup."""
    from calibrate.measure_acceptance import N_RANKS, rank_acceptance, summarize_acceptance
    from engine.rejection import distribution

    gen = torch.Generator().manual_seed(seed)
    alphas, matches, ranks, texts = [], [], np.zeros(N_RANKS), []
    for prompt in prompts:
        out, _ = generate(target, prompt, new_tokens)
        seq = list(prompt) + out
        texts.append(out)
        sl = slice(len(prompt) - 1, len(prompt) - 1 + new_tokens)
        lp, lq = logits_of(target, seq)[sl], logits_of(draft, seq)[sl]
        p, q = distribution(lp, 1.0), distribution(lq, 1.0)
        alphas.append(torch.minimum(p, q).sum(-1).numpy().astype(float))
        matches.append((lp.argmax(-1) == lq.argmax(-1)).numpy())
        ranks += rank_acceptance(p, q, N_RANKS, 4, gen)
        tick()
    return summarize_acceptance(alphas, matches, ranks / len(prompts), prompts, new_tokens, 0.0, seed), texts


def lookup_candidates(K: int) -> Any:
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    return PromptLookupCandidateGenerator(num_output_tokens=K, max_matching_ngram_size=2, max_length=1 << 20)


def measure_lookup(target: HFModel, prompts: Sequence[Sequence[int]], new_tokens: int, ks: Sequence[int],
                   tick: Callable[[], None]) -> dict[str, Any]:
    """transformers' prompt lookup along the target's greedy text from prompts that repeat themselves: at every
    position, how many tokens its `PromptLookupCandidateGenerator` proposes and how many of them the target's own
    next tokens match (greedy: the accepted run), and its host time per call."""
    from calibrate.ngram import repeating

    by_k: dict[str, dict[str, Any]] = {}
    repeated = [repeating(p) for p in prompts]
    texts = list(zip(repeated, greedy_texts(target, repeated, new_tokens, tick)))
    for K in ks:
        finder = lookup_candidates(K)
        proposed, accepted, host = [], [], []
        for rp, out in texts:
            seq = torch.tensor([rp + out])
            for t in range(new_tokens - 1):
                ids = seq[:, :len(rp) + t]
                t0 = time.perf_counter()
                cand, _ = finder.get_candidates(ids)
                host.append(time.perf_counter() - t0)
                drafted = cand[0, ids.shape[1]:].tolist()
                truth = out[t:t + len(drafted)]
                run = 0
                while run < len(drafted) and run < len(truth) and drafted[run] == truth[run]:
                    run += 1
                proposed.append(len(drafted))
                accepted.append(run)
        n = new_tokens - 1
        by_k[str(K)] = {"proposed_mean": float(np.mean(proposed)), "accepted_mean": float(np.mean(accepted)),
                        "proposal_rate": float(np.mean(np.array(proposed) > 0)),
                        "host_s": float(np.median(host)),
                        "proposed": [proposed[i:i + n] for i in range(0, len(proposed), n)],
                        "accepted": [accepted[i:i + n] for i in range(0, len(accepted), n)]}
    return {"prompt_form": "repeating", "prompts": len(prompts), "tokens_per_prompt": new_tokens, "by_k": by_k}


def hf_profile(target_dir: str | Path, draft_dir: str | Path, quick: bool, seed: int, command: str,
               options: Mapping[str, Any], progress: Any) -> Profile:
    """`specsim calibrate --engine transformers`: see the module docstring."""
    from calibrate.microbench import n_microbenchmarks, run_microbenchmarks
    from engine.builtin import encode, prompts
    from engine.device import device_identity, device_state
    from scenarios.host import host_summary

    transformers = require_transformers()
    target, draft = load_hf(target_dir, "target"), load_hf(draft_dir, "draft")
    if target.spec.vocab_size != draft.spec.vocab_size:
        raise SpecsimError(f"the target's vocabulary ({target.spec.vocab_size}) is not the draft's "
                           f"({draft.spec.vocab_size}); transformers' assisted generation needs one tokenizer")
    if target.spec.name == draft.spec.name:
        draft.spec = replace(draft.spec, name=draft.spec.name + "-draft")
    device = torch.device("cpu")
    timer, effort = Timer(device), Effort.of(quick, False)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    state_start = device_state(device)
    with progress("micro-benchmarks", n_microbenchmarks(device)) as bar:
        micro = run_microbenchmarks(timer, quick, lambda: bar.update(1))
    grid = Grid.of(quick)
    n_points = (len(grid.contexts) * (len(grid.target_new_tokens) + len(grid.draft_new_tokens))
                + 2 * len(grid.prefill_tokens))
    with progress(f"transformers' passes ({target.folder.name}, {draft.folder.name})", n_points) as bar:
        passes = time_hf_passes(target, draft, grid, timer, effort, seed, lambda: bar.update(1))

    specs = {target.spec.name: target.spec, draft.spec.name: draft.spec}
    points = [PassPoint(r["model"], r["batch"], r["new_tokens"], r["context"], r["median_s"]) for r in passes]
    train, test = heldout_split(points, 0.25, np.random.default_rng(seed))
    hw = Microbenchmarks.from_dict(micro).hardware(device_identity(device)["name"], None)
    gemm = micro["matmul"].get("fp32")["flops_per_s"]
    with progress("fit", 1) as bar:
        fit = fit_cost_model(train, specs, hw, gemm, micro["bandwidth"]["read_bytes_per_s"], "fp32")
        bar.update(1)
    cost = fit.cost

    n_prompts, n_tokens, repeats = (12, 64, 3) if quick else (24, 96, 5)
    calib = [encode(p) for p in prompts("calibration")[:n_prompts]]
    with progress("generate() around its passes (plain calls)", min(3, n_prompts) + 1) as bar:
        loop = generate_overheads(target, draft, cost, calib[:3], repeats, lambda: bar.update(1))
    with progress("acceptance (the target's greedy text)", n_prompts) as bar:
        acc, _ = measure_hf_acceptance(target, draft, calib, n_tokens, seed, lambda: bar.update(1))
    # Every calibration prompt for the lookup: what it finds varies from text to text far more than a draft's
    # acceptance (one text copies itself whole and accepts every proposal), and the first 12 prompts' tokens per
    # step at K = 2-8 stood 10-17 % above the held-out prompts' where all 64 stood within 1-3 %.
    lookup_prompts = [encode(p) for p in prompts("calibration")]
    with progress("prompt lookup (prompts that repeat themselves)", len(lookup_prompts)) as bar:
        acc["lookup"] = measure_lookup(target, lookup_prompts, n_tokens, range(1, K_MAX + 1), lambda: bar.update(1))
    acc["transformers_loop"] = loop

    engine = EngineOverheads(plain=PerStep(loop["target_loop_s"]), draft=PerStep(loop["draft_loop_s"]),
                             verify=PerStep(loop["target_loop_s"] + loop["draft_call_s"]), draft_catchup_tokens=2)
    overheads = replace(cost.overheads, engine=engine)
    heldout = HeldoutErrors.from_dict(errors(cost, test, specs))
    datasheet = CostModel.from_hardware(hw, "fp32", datasheet=True)
    records = tuple(PassRecord.from_dict(r) for r in passes)
    identity = {**device_identity(device), "engine": f"transformers {transformers.__version__}"}
    return Profile(
        command=command, created=created, device=DeviceInfo.from_dict(identity), dtype="fp32",
        target=target.spec, draft=draft.spec, micro=Microbenchmarks.from_dict(micro), passes=records,
        fit=Fit(cost.linear_rates, cost.attention_rates, overheads, heldout,
                HeldoutErrors.from_dict(errors(datasheet, test, specs)), len(train), cost.attention_overlap, (),
                {"method": "non-negative least squares on relative error, to transformers' own passes; see "
                           "calibrate/transformers_engine.py",
                 "seconds_per_linear_byte": {"rows": list(fit.knots), "values": list(fit.seconds_per_linear_byte)},
                 "bounds": list(fit.bounds),
                 "assumed": ["an assisted step's loop costs what a plain step's does, plus one call of the "
                             "assistant's generate(); both measured on plain calls"]}),
        acceptance=MeasuredAcceptance.from_dict(acc), options=dict(options), engine_mode="eager", quick=quick,
        origin=f"transformers:{target.folder}", trust=assess_trust(heldout, records), specsim_version=__version__,
        device_state={"start": state_start, "end": device_state(device)}, host=host_summary())
