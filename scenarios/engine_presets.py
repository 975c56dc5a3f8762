"""Serving-engine presets (`scenarios/engines.toml`): what an engine pays around the GPU's passes, per step, per
pass, per draft kind and per version, with the published points each was fitted to and the range they span.

A preset's table:

    version, source, fitted_on, fit_gpus, fit_batch, fit_kinds   what it describes and where it was fitted
    step_overhead_us          a plain decoding step's engine work (what an overlap scheduler leaves unhidden)
    spec_step_overhead_us     a speculative step's instead (default: the plain step's): the host work a step pays
                              when the engine cannot overlap it with the device (SGLang's overlap scheduler is off
                              for speculation before its spec v2)
    pass_overhead_us, layer_overhead_us   every forward pass, every decoder layer of every pass
    draft_pass_us             around each draft pass of a kind without its own entry
    accept_overhead_us        every speculative step: the rejection sampler and the KV-cache roll-back
    tree_overhead_us          a tree's step on top (its mask, the tree walk, cache compaction)
    [NAME.draft.KIND]         per draft kind: pass_us / pass_per_sequence_us around each draft pass (launches, the
                              proposer's own work, sampling over the draft vocabulary), step_us /
                              step_per_sequence_us once per speculative step (preparing the proposer's inputs, the
                              head's catch-up over the accepted tokens); every cost >= 0
    spec_step_per_sequence_us a speculative step's host work per request that a plain step hides (SGLang's verify
                              loop over requests and accepted tokens with its overlap scheduler off)
    spec_overlap              the speculative step's host work overlapped with the device (SGLang's spec v2,
                              SGLANG_ENABLE_SPEC_V2=1): a speculative step pays a plain step's engine work, no more
    accept_per_sequence_us    the rejection sampler's host work per request (vLLM's sample step)
    graphed_costs_add         a graphed step's memory and compute times add (the GPU preset's ridge_p becomes 1)
    drafts_per_sequence       each sequence drafts on its own, one after another (llama-server's draft context a slot)
    cuda_graph_max_tokens, cuda_graph_max_bs, eager_layer_us   the capture ceiling (in batched tokens, in requests)
                              and the host launch time of a decoder layer a pass above it pays (`CudaGraphs`)
    max_num_seqs, attention_backend, overlap_scheduler, ...   the version's documented settings, for the record

and the speculation tax and all-reduce latency keys `scenarios.load_speculation_tax` and `load_hardware` read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from simulator import SpecsimError
from simulator.specs import CudaGraphs, DraftKindCost, EngineOverheads, Overheads, PerStep

MICRO = 1e-6
# a version's documented settings, kept with the preset for the record (--json, the report)
SETTING_KEYS = ("max_num_seqs", "max_running_requests", "cuda_graph_max_tokens", "cuda_graph_max_bs",
                "attention_backend", "overlap_scheduler", "spec_overlap", "drafter_in_graphs", "graphed_costs_add",
                "verify_tokens_add", "drafts_per_sequence")
KIND_KEYS = {"pass_us", "pass_per_sequence_us", "step_us", "step_per_sequence_us", "source"}


# A version's settings a user may override (`--engine-setting KEY=VALUE`, carried in the preset's name as
# 'ENGINE@VERSION+KEY=VALUE;KEY=VALUE'): what the engine's launch flags set, not the fitted costs
ENGINE_SETTINGS = {"max_num_seqs": int, "max_running_requests": int, "cuda_graph_max_tokens": int,
                   "cuda_graph_max_bs": int, "eager_layer_us": float, "overlap_scheduler": bool,
                   "spec_overlap": bool, "drafter_in_graphs": bool, "graphed_costs_add": bool,
                   "verify_tokens_add": bool, "drafts_per_sequence": bool, "attention_backend": str}


def engine_setting(text: str) -> tuple[str, Any]:
    """One 'KEY=VALUE' override of an engine version's settings, checked (a one-line error naming the keys)."""
    key, eq, value = text.partition("=")
    key = key.strip().lower().replace("-", "_")
    kind = ENGINE_SETTINGS.get(key)
    if not eq or kind is None:
        raise SpecsimError(f"--engine-setting {text!r}: give KEY=VALUE with KEY one of {', '.join(ENGINE_SETTINGS)}")
    value = value.strip()
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0", "on", "off"):
                raise ValueError
            return key, value.lower() in ("true", "1", "on")
        v = kind(value)
    except ValueError:
        raise SpecsimError(f"--engine-setting {text!r}: {key} takes a {kind.__name__}") from None
    if kind in (int, float) and not (math.isfinite(v) and v >= 0):
        raise SpecsimError(f"--engine-setting {text!r}: {key} must be a finite number >= 0")
    return key, v


def with_settings(table: dict[str, Any], overrides: str) -> dict[str, Any]:
    """An engine version's table with 'KEY=VALUE;...' overrides of its settings over it, said in its version."""
    settings = dict(engine_setting(s) for s in overrides.split(";") if s)
    if not settings:
        return table
    said = ", ".join(f"{k} = {v}" for k, v in settings.items())
    return {**table, **settings, "version": f"{table.get('version', '')} with {said}"}

@dataclass(frozen=True)
class EnginePreset:
    """An engine preset as data: its costs (`overheads`, with `EngineOverheads` inside) and what it describes."""

    name: str
    version: str
    overheads: Overheads
    source: str
    fitted_on: tuple[str, ...] = ()  # published sources (scenarios/published/) the costs were fitted to
    fit_gpus: tuple[str, ...] = ()  # hardware presets of those points
    fit_batch: tuple[int, int] | None = None  # the smallest and largest batch (or concurrency) among them
    fit_kinds: tuple[str, ...] = ()  # draft kinds among them
    kind_sources: tuple[tuple[str, str], ...] = ()  # (kind, source) of each per-kind entry
    settings: tuple[tuple[str, object], ...] = ()  # the version's documented settings (SETTING_KEYS), as given

    def mechanisms(self, batch: int, k: int) -> list[str]:
        """What decides a step of `batch` requests verifying k + 1 tokens each under this preset, in words free of
        the batch (so that batches decided alike read alike): the capture ceiling, how a verify's tokens add, the
        host work a request, the drafter's graphs, the engine's cap on running requests."""
        out = []
        o, settings = self.overheads, dict(self.settings)
        cap = settings.get("max_running_requests") or settings.get("max_num_seqs")
        if cap and batch > int(cap):
            key = "max_running_requests" if settings.get("max_running_requests") else "max_num_seqs"
            out.append(f"above {key} = {cap}: the engine runs at most {cap} requests (--engine-setting {key}=N)")
        graphs = o.graphs
        if graphs is not None and k > 0:
            if graphs.max_tokens and batch * (k + 1) > graphs.max_tokens:
                out.append(f"verify eager: {k + 1} tokens a request above the capture ceiling of {graphs.max_tokens} "
                           f"tokens ({graphs.eager_layer_s * 1e6:.0f} us a layer launched from the host)")
            elif graphs.max_batch and batch > graphs.max_batch:
                out.append(f"verify eager above batch {graphs.max_batch}: the capture ceiling "
                           f"({graphs.eager_layer_s * 1e6:.0f} us a layer launched from the host)")
            else:
                out.append("verify replays a CUDA graph")
        if k > 0 and o.verify_tokens_add:
            out.append("a verify's tokens beyond one a request add their compute to the one-token pass")
        elif k > 0 and settings.get("graphed_costs_add"):
            out.append("memory and compute times add in a graphed step (a verified token is never free)")
        if k > 0 and settings.get("spec_overlap"):
            out.append("the speculative step's host work overlapped with the device (spec_overlap: SGLang's spec v2)")
        if k > 0 and o.engine.verify.per_sequence_s:
            out.append(f"{o.engine.verify.per_sequence_s * 1e6:.0f} us a request of host work the speculative step "
                       "does not overlap (overlap scheduler off)")
        if k > 0 and o.engine.chain_accept.per_sequence_s:
            out.append(f"{o.engine.chain_accept.per_sequence_s * 1e6:.1f} us a request in the rejection sampler")
        if k > 0 and settings.get("drafter_in_graphs") is False:
            out.append("draft passes launched outside CUDA graphs")
        if k > 0 and o.engine.drafts_per_sequence:
            out.append("each stream drafts on its own (a draft context a slot): k one-stream draft passes a stream")
        return out

    @property
    def label(self) -> str:
        """The header's words: name, version and what it was fitted to."""
        version = f" {self.version}" if self.version else ""
        fitted = f", fitted to {', '.join(self.fitted_on)}" if self.fitted_on else ""
        return f"{self.name}{version} preset{fitted}"

    def outside(self, hardware: str | None = None, kind: str | None = None,
                batches: tuple[int, ...] = ()) -> list[str]:
        """Where a prediction leaves the range this preset was fitted on, in words (empty: inside it)."""
        out = []
        if not self.fitted_on:
            return ["any published measurement (the preset is not fitted to the corpus: its source says where its "
                    "costs come from)"]
        if hardware and self.fit_gpus and hardware not in self.fit_gpus:
            out.append(f"{hardware} (fitted on {', '.join(self.fit_gpus)})")
        if kind and kind not in ("model",) + self.fit_kinds and self.fit_kinds:
            out.append(f"a {kind} draft (fitted on {', '.join(self.fit_kinds)})")
        if batches and self.fit_batch and (min(batches) < self.fit_batch[0] or max(batches) > self.fit_batch[1]):
            out.append(f"batch {min(batches)}..{max(batches)} (fitted on {self.fit_batch[0]}..{self.fit_batch[1]})")
        return out


def _number(d: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecsimError(f"engine preset {where!r}: {key} = {v!r} must be a finite number >= 0")
    return float(v)


def _kinds(d: dict[str, Any], where: str) -> tuple[tuple[DraftKindCost, ...], tuple[tuple[str, str], ...]]:
    table = d.get("draft", {})
    if not isinstance(table, dict):
        raise SpecsimError(f"engine preset {where!r}: [{where}.draft] must hold one table per draft kind")
    from simulator.drafts import DRAFT_KINDS

    costs, sources = [], []
    for kind, k in table.items():
        if kind not in DRAFT_KINDS:
            raise SpecsimError(f"engine preset {where!r}: draft kind {kind!r} is not one of {', '.join(DRAFT_KINDS)}")
        if not isinstance(k, dict):
            raise SpecsimError(f"engine preset {where!r}: [{where}.draft.{kind}] must be a table")
        unknown = sorted(set(k) - KIND_KEYS)
        if unknown:
            raise SpecsimError(f"engine preset {where!r}: draft.{kind}.{unknown[0]} is not one of "
                               f"{', '.join(sorted(KIND_KEYS))}")
        w = f"{where}.draft.{kind}"
        costs.append(DraftKindCost(kind, PerStep(_number(k, "pass_us", w, 0) * MICRO,
                                                 _number(k, "pass_per_sequence_us", w, 0) * MICRO),
                                   PerStep(_number(k, "step_us", w, 0) * MICRO,
                                           _number(k, "step_per_sequence_us", w, 0) * MICRO)))
        sources.append((kind, str(k.get("source", ""))))
    return tuple(costs), tuple(sources)


def engine_preset(name: str, d: dict[str, Any]) -> EnginePreset:
    """A preset from its table (engines.toml's `[name]`); a bad value is a one-line error naming it."""
    step = _number(d, "step_overhead_us", name)
    spec_step = _number(d, "spec_step_overhead_us", name, step)
    accept = _number(d, "accept_overhead_us", name)
    tree = _number(d, "tree_overhead_us", name, 0)
    kinds, kind_sources = _kinds(d, name)
    draft_pass = _number(d, "draft_pass_us", name, 0) * MICRO
    if d.get("drafter_in_graphs"):  # a draft pass is a graph replay: no eager pass's host work (the kinds' pass_us)
        kinds = tuple(replace(c, per_pass=PerStep()) for c in kinds)
        draft_pass = 0.0
    spec_seq = _number(d, "spec_step_per_sequence_us", name, 0) * MICRO
    if d.get("spec_overlap"):  # the speculative step's host work overlapped as a plain step's (SGLang's spec v2): it
        # pays no more than a plain step's unhidden work, and nothing a request or a draft kind's step
        spec_step, spec_seq = min(spec_step, step), 0.0
        kinds = tuple(replace(c, per_step=PerStep()) for c in kinds)
    accept_seq = _number(d, "accept_per_sequence_us", name, 0) * MICRO
    # the serving engines of the presets pack each sequence's own rows into a step (vLLM's and SGLang's flattened
    # token batches): a sequence with no proposal verifies one token
    engine = EngineOverheads(plain=PerStep(step * MICRO), verify=PerStep(spec_step * MICRO, spec_seq),
                             draft=PerStep(draft_pass),
                             chain_accept=PerStep(accept * MICRO, accept_seq),
                             tree_accept=PerStep((accept + tree) * MICRO, accept_seq),
                             ragged_verify=True, kinds=kinds,
                             drafts_per_sequence=bool(d.get("drafts_per_sequence", False)))
    graphs = None
    if any(key in d for key in ("cuda_graph_max_tokens", "cuda_graph_max_bs")):
        graphs = CudaGraphs(int(_number(d, "cuda_graph_max_tokens", name, 0)),
                            int(_number(d, "cuda_graph_max_bs", name, 0)),
                            _number(d, "eager_layer_us", name, 0) * MICRO, str(d.get("graphs_source", "")))
    passes = Overheads(pass_s=_number(d, "pass_overhead_us", name) * MICRO,
                       layer_s=_number(d, "layer_overhead_us", name) * MICRO, engine=engine, graphs=graphs,
                       verify_tokens_add=bool(d.get("verify_tokens_add", False)))
    batch = d.get("fit_batch")
    if batch is not None and (not isinstance(batch, list) or len(batch) != 2 or not all(
            isinstance(b, int) and b >= 1 for b in batch) or batch[0] > batch[1]):
        raise SpecsimError(f"engine preset {name!r}: fit_batch = {batch!r} must be [smallest, largest]")
    return EnginePreset(name, str(d.get("version", "")), passes, str(d.get("source", "")),
                        tuple(str(s) for s in d.get("fitted_on", [])), tuple(str(g) for g in d.get("fit_gpus", [])),
                        (int(batch[0]), int(batch[1])) if batch else None,
                        tuple(str(k) for k in d.get("fit_kinds", [])), kind_sources,
                        tuple((key, d[key]) for key in SETTING_KEYS if key in d))
