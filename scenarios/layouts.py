"""An engine's GPUs laid out for an MoE target (--ep, --dp): the shares `simulator.moe_parallel.split` makes, and
the links its all-to-alls cross, from AIConfigurator's measured DeepEP tables where the package ships them for this
GPU, model width, top-k and expert count (aiconfigurator-core 0.12: H100 and H200 under SGLang 0.5.6, H200, B200,
B300, GB200, GB300 under 0.5.12), else the cited links' model."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from functools import cache
from pathlib import Path
from typing import Any

from simulator import SpecsimError
from simulator.drafts import Draft
from simulator.expert_comm import A2aTable, ExpertLinks
from simulator.moe_parallel import default_links, split
from simulator.specs import EngineOverheads, HardwareSpec, ModelSpec, PerStep

# AIConfigurator's system of each preset (scenarios/hardware.toml)
SYSTEM_OF = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200-sxm": "b200_sxm", "b300-sxm": "b300_sxm",
             "gb200": "gb200", "gb300": "gb300"}
# GPUs one NVLink domain joins: an HGX node's 8; GB200/GB300 NVL72: a rack's 72 (NVIDIA GB200 NVL72 datasheet)
DOMAIN_GPUS = {"gb200": 72, "gb300": 72}
US = 1e-6


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in v.replace("post", ".").split("."))


@cache
def _tables(system: str, d_model: int, topk: int, n_experts: int) -> tuple[A2aTable, ...]:
    """SGLang's DeepEP tables of `system` for this shape (the expert count nearest in log)."""
    try:
        import aiconfigurator_core
        import pandas as pd
    except ImportError:
        return ()
    base = Path(aiconfigurator_core.__file__).resolve().parent / "systems" / "data" / system / "comm" / "sglang"
    out = []
    for mode, cols in (("ll", ("dispatch_avg_t_us", "combine_avg_t_us")),
                       ("normal", ("dispatch_transmit_us", "combine_transmit_us"))):
        best = None  # the version that measured the most node counts for this shape (the newest of equals)
        paths = sorted(base.glob(f"*/wideep_deepep_{mode}_perf.parquet"), key=lambda p: _version_key(p.parent.name))
        for path in paths:
            df = pd.read_parquet(path)
            df = df[(df.hidden_size == d_model) & (df.num_topk == topk)]
            if not df.empty and (best is None or df.node_num.nunique() >= best[1].node_num.nunique()):
                best = (path, df)
        if best is None:
            continue
        path, df = best
        e = min(df.num_experts.unique(), key=lambda x: abs(math.log(x / n_experts)))
        df = df[df.num_experts == e].groupby(["node_num", "num_token"], as_index=False)[list(cols)].min()
        nodes, tokens = sorted(df.node_num.unique()), sorted(df.num_token.unique())
        grid = {c: df.pivot(index="node_num", columns="num_token", values=c).reindex(index=nodes, columns=tokens)
                for c in cols}
        out.append(A2aTable(mode, tuple(int(n) for n in nodes), tuple(int(t) for t in tokens),
                            *(tuple(tuple(float(x) * US for x in row) for row in grid[c].to_numpy()) for c in cols),
                            source=f"AIConfigurator {system}/comm/sglang/{path.parent.name}/{path.name} (hidden "
                                   f"{d_model}, top-{topk}, {e} experts)"))
    return tuple(out)


def links_for(hw: HardwareSpec, key: str, model: ModelSpec) -> ExpertLinks:
    """The expert all-to-all's links on `hw` (preset `key`) for `model`'s shape: measured tables where there are,
    else the links' model."""
    if hw.interconnect is None:
        raise SpecsimError(f"preset {hw.name} has no interconnect to spread experts over (hardware.toml)")
    base = default_links(hw.interconnect.bw_bytes_per_s, DOMAIN_GPUS.get(key, 8))
    system = SYSTEM_OF.get(key)
    tables = _tables(system, model.d_model, model.experts_per_token, model.n_experts) if system else ()
    return replace(base, tables=tables, source="; ".join(t.source for t in tables) or base.source)


def spread_draft(draft: Draft, tp: int, ep: int, dp: int) -> Draft:
    """The draft on the target's layout: an MoE draft (DeepSeek's MTP module) spread as the target, a dense one in
    the attention groups."""
    if draft.module is None:
        return draft
    m = draft.module
    ep_d = ep if m.is_moe and m.n_experts % ep == 0 else 1
    return replace(draft, module=split(m, tp, ep_d, dp, role="draft"))


def layout_words(tp: int, ep: int, dp: int) -> str:
    att = f"DP attention {dp} x TP {tp // dp}" if dp > 1 else f"TP {tp}"
    return f"{tp} GPUs: {att}, EP {ep}" if ep > 1 else f"{tp} GPUs: {att}, experts TP {tp}"


def per_group(engine: EngineOverheads, dp: int) -> EngineOverheads:
    """The engine's host work a request under DP attention: each of the dp groups runs its own scheduler (SGLang's
    DP attention starts a scheduler process per group) over its own B / dp requests, at once, so a step pays each
    per-request cost for B / dp of them."""
    def scaled(p: PerStep) -> PerStep:
        return replace(p, per_sequence_s=p.per_sequence_s / dp)

    steps = {f.name: scaled(getattr(engine, f.name)) for f in fields(engine)
             if isinstance(getattr(engine, f.name), PerStep)}
    kinds = tuple(replace(k, per_pass=scaled(k.per_pass), per_step=scaled(k.per_step)) for k in engine.kinds)
    return replace(engine, **steps, kinds=kinds)


def apply_layout(setup: Any, hw_key: str, tp: int, ep: int, dp: int) -> Any:
    """`setup` (resolved unsplit) with its target and draft spread over `tp` GPUs (EP `ep`, DP attention `dp`) and
    its hardware given the all-to-all's links; the caption says the layout."""
    cost = setup.cost
    hw = cost.hardware
    if tp > 1 and hw.interconnect is None:
        raise SpecsimError(f"preset {hw.name} has no interconnect for --tp (hardware.toml); use --tp 1")
    target = split(setup.target, tp, ep, dp)
    links = links_for(hw, hw_key, setup.target) if target.is_moe else None
    cost = replace(cost, hardware=replace(hw, expert_links=links),
                   overheads=replace(cost.overheads, engine=per_group(cost.overheads.engine, dp)))
    measured = "measured DeepEP" if links is not None and links.tables else "modelled"
    where = f"{setup.where}, {layout_words(tp, ep, dp)} ({measured} all-to-all)" if ep > 1 else \
        f"{setup.where}, {layout_words(tp, ep, dp)}"
    return replace(setup, cost=cost, target=target, draft=spread_draft(setup.draft, tp, ep, dp), where=where)
