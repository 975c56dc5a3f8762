"""Two routes to the same question, side by side (#66, "Routes that agree or explain"): for every GPU with both a
hardware preset (scenarios/hardware.toml) and an AIConfigurator system table (calibrate/aiconfigurator.py's
PRESET_OF), the same predictions priced

  (a) preset   `specsim predict --hardware NAME` (the vllm engine preset: its roofline and measured kernel terms);
  (b) profile  `specsim predict --profile P`, P written by `calibrate --from aiconfigurator:SYSTEM/vllm` (built
               in-process, at the one context asked: its passes there are the measured kernels' prices);

for Llama-3.1-8B + Llama-3.2-1B, Qwen3-30B-A3B + EAGLE-3 and DeepSeek-V3 (fp8, TP 8) + MTP, batches 1..256:x2,
k 0 and each route's best k, context 1,024, acceptance iid:0.7. Per GPU x target: the plain step and the best
speed-up of each route, their relative difference (profile / preset - 1) and the batch where it is largest; a cell
differing by more than 15 % at any batch is flagged with the kernel responsible where one can be named (the target's
pass broken down both ways: dense GEMMs, attention (MLA's module for DeepSeek), fused MoE, all-reduce, the rest), else
the pass that differs (plain step, verify, draft). docs/kernels.md, "Routes that disagree", has the table.

    python benchmarks/routes_check.py [--only h100] [--acceptance iid:0.7] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels_check import BATCHES, _err  # noqa: E402

from calibrate.aiconfigurator import installed, measured_kernels, parse_source  # noqa: E402
from calibrate.aiconfigurator_profile import aiconfigurator_profile  # noqa: E402
from scenarios.kernel_systems import PRESET_OF  # noqa: E402
from scenarios.profile import save_profile  # noqa: E402
from scenarios.setup import Setup, resolve_setup  # noqa: E402
from simulator import SpecsimError  # noqa: E402
from simulator.drafts import as_draft  # noqa: E402
from simulator.kernel_tables import decode_pass  # noqa: E402
from simulator.sweep import candidates_from, sweep  # noqa: E402

CONTEXT = 1024
KS = tuple(range(9))  # predict's default --k 0..8, cut to what the draft fills
FLAG = 0.15
# target, draft as predict takes it, the draft calibrate --from aiconfigurator prices beside it, dtype, TP
TARGETS = (("llama-3.1-8b", "llama-3.2-1b", "llama-3.2-1b", "bf16", 1),
           ("qwen3-30b-a3b", "eagle3", "qwen3-0.6b", "bf16", 1),
           ("deepseek-v3", "mtp", "llama-3.2-1b", "fp8", 8))
GROUPS = ("dense GEMMs", "attention", "fused MoE", "all-reduce", "the rest")


def systems() -> list[tuple[str, str]]:
    """(AIConfigurator system, preset) for every system with vllm tables and a preset."""
    have = installed()
    return [(s, p) for s, p in PRESET_OF.items() if "vllm" in have.get(s, {})]


@dataclass(frozen=True)
class Route:
    setup: Setup
    rows: dict[int, dict[str, Any]]  # batch -> plain_ms, best, best_k, and per k: step, verify, draft (ms)


def priced(s: Setup, acceptance: Any) -> dict[int, dict[str, Any]]:
    d = as_draft(s.draft)
    ks = [k for k in KS if d is None or d.max_depth is None or k <= d.max_depth]
    res = sweep(s.cost, s.target, s.draft, acceptance, BATCHES, candidates_from(ks, (), None, acceptance), (CONTEXT,))
    out: dict[int, dict[str, Any]] = {}
    for r in res.rows:
        if r.tree is not None:
            continue
        row = out.setdefault(r.batch, {"plain_ms": 1e3 * r.baseline_time_s, "best": 1.0, "best_k": 0, "k": {}})
        row["k"][r.k] = {"speedup": r.speedup, "step_ms": 1e3 * r.step_time_s, "verify_ms": 1e3 * r.verify_time_s,
                         "draft_ms": 1e3 * r.draft_time_s}
        if r.fits and r.speedup > row["best"]:
            row["best"], row["best_k"] = r.speedup, r.k
    return out


def preset_route(preset: str, target: str, draft: str, dtype: str, tp: int, acceptance: str) -> Route:
    s = resolve_setup(preset, None, target, draft, dtype, acceptance, engine="vllm", tp=tp)
    return Route(s, priced(s, s.acceptance))


def profile_route(system: str, target: str, draft: str, profile_draft: str, dtype: str, tp: int, acceptance: str,
                  folder: Path) -> Route:
    profile = aiconfigurator_profile(f"{system}/vllm", target, profile_draft, dtype, tp, "routes_check", {"tp": tp},
                                     contexts=(CONTEXT,))
    path = save_profile(profile, folder / f"{system}-{target}.json")
    s = resolve_setup(None, path, None, None if draft == profile_draft else draft, dtype, acceptance)
    return Route(s, priced(s, s.acceptance))


def _groups(pc: Any) -> tuple[float, ...]:
    ops = {o.name: 1e3 * o.time_s for o in pc.operators}
    return (ops.get("linear", 0.0), ops.get("attention", 0.0), ops.get("moe", 0.0), 1e3 * pc.comm_time_s,
            1e3 * pc.overhead_time_s)


def breakdown(system: str, a: Route, b: Route, model: str, new_tokens: int, batch: int
              ) -> dict[str, tuple[float, float]]:
    """One pass of the target's (`model` "target") or the draft's, GPU work in ms by group: (preset, profile). The
    preset's fixed terms (its layer floor, measured block-scaled fp8 GEMM floors and MLA term) are in "the rest". A
    model the profile measured is broken down by its kernel tables (`decode_pass`, what its passes are); a head it
    did not (EAGLE-3, MTP) by the profile's own formula. An MLA model's GEMMs, MLA module and the rest in one group
    (the tables' module holds the projections that the preset prices as GEMMs)."""
    spec = a.setup.target if model == "target" else a.setup.draft.module
    pre = _groups(a.setup.cost.pass_cost(spec, batch, new_tokens, CONTEXT))
    ours = b.setup.target if model == "target" else b.setup.draft.module
    if any(p.model == ours.name for p in b.setup.profile.passes):
        shapes, kernels, _ = measured_kernels(parse_source(f"{system}/vllm"), spec, a.setup.cost.hardware)
        t = decode_pass(shapes, kernels, batch, new_tokens, CONTEXT)
        tab = tuple(1e3 * x for x in (t.gemm_s, t.attention_s, t.moe_s, t.comm_s, t.other_s))
    else:
        tab = _groups(b.setup.cost.pass_cost(ours, batch, new_tokens, CONTEXT))
    if spec.attention == "mla":  # the tables' MLA module holds its projections, the preset's linear op them
        pre, tab = ((x[0] + x[1] + x[4], x[2], x[3]) for x in (pre, tab))
        return {g: (x, y) for g, x, y in zip(("MLA layers (GEMMs, MLA module, the rest)", *GROUPS[2:4]), pre, tab)}
    return {g: (x, y) for g, x, y in zip(GROUPS, pre, tab)}


def _diff(a: float, b: float) -> float:
    return _err(b, a) / 100.0  # profile against preset, as a fraction


def reason(system: str, a: Route, b: Route, batch: int, what: str) -> str:
    """Why the routes differ at `batch` (`what`: plain or speed-up): the kernel group that differs most in the pass
    that differs most (the target's plain step or verify, or the draft's pass)."""
    ra, rb = a.rows[batch], b.rows[batch]
    model, n, said = "target", 1, "plain step"
    if what != "plain":
        k = ra["best_k"] or rb["best_k"]
        if not k:
            return "speed-up"
        va, vb = ra["k"][k], rb["k"][k]
        dv, dd = abs(_diff(va["verify_ms"], vb["verify_ms"])), abs(_diff(va["draft_ms"], vb["draft_ms"]))
        pl = abs(_diff(ra["plain_ms"], rb["plain_ms"]))
        if dd > max(dv, pl):
            model, said = "draft", (f"draft ({b.setup.draft.name}) {va['draft_ms']:.2f} against "
                                    f"{vb['draft_ms']:.2f} ms a step at k = {k}; a pass")
        elif dv >= pl:
            n, said = k + 1, f"verify of {k + 1}"
    parts = breakdown(system, a, b, model, n, batch)
    g, (x, y) = max(parts.items(), key=lambda kv: abs(kv[1][1] - kv[1][0]))
    out = f"{said}: {g} {x:.2f} (preset) against {y:.2f} ms (profile)"
    cost = a.setup.cost
    if g == "fused MoE" and model == "target" and not cost.routing_power_law:  # the tables' own routing
        power = 1.01 if a.setup.target.attention == "mla" else 1.2
        routed = _groups(replace(cost, routing_power_law=power).pass_cost(a.setup.target, batch, n, CONTEXT))[2]
        closes = abs(routed / y - 1.0) <= FLAG
        out += (f"; under the tables' routing (--power-law-routing {power:g}) the preset's is {routed:.2f} ms"
                + ("" if closes else ": the fitted kernel, not the routing"))
    elif model == "draft" and b.setup.draft.kind != "model":
        out += " (the profile prices the head by its formula: no measured kernels, no all-reduce)"
    return out


def compare(system: str, a: Route, b: Route) -> dict[str, Any]:
    """The two routes' rows side by side, the largest difference, its batch and (beyond 15 %) its reason."""
    rows = []
    for batch in sorted(set(a.rows) & set(b.rows)):
        ra, rb = a.rows[batch], b.rows[batch]
        rows.append({"batch": batch, "preset_plain_ms": ra["plain_ms"], "profile_plain_ms": rb["plain_ms"],
                     "plain_diff": _diff(ra["plain_ms"], rb["plain_ms"]), "preset_best": ra["best"],
                     "preset_best_k": ra["best_k"], "profile_best": rb["best"], "profile_best_k": rb["best_k"],
                     "best_diff": _diff(ra["best"], rb["best"])})
    if not rows:
        return {"rows": [], "max_diff": None, "skipped": "no batch fits the GPU's memory at context "
                f"{CONTEXT} (preset: {', '.join(map(str, sorted(a.rows))) or 'none'}; profile: "
                f"{', '.join(map(str, sorted(b.rows))) or 'none'})"}
    worst = max(rows, key=lambda r: max(abs(r["plain_diff"]), abs(r["best_diff"])))
    what = "plain" if abs(worst["plain_diff"]) >= abs(worst["best_diff"]) else "speed-up"
    diff = worst["plain_diff"] if what == "plain" else worst["best_diff"]
    plain = max(rows, key=lambda r: abs(r["plain_diff"]))
    best = max(rows, key=lambda r: abs(r["best_diff"]))
    out = {"rows": rows, "max_diff": diff, "at_batch": worst["batch"], "of": what, "flagged": abs(diff) > FLAG,
           "max_plain_diff": plain["plain_diff"], "plain_at_batch": plain["batch"],
           "max_best_diff": best["best_diff"], "best_at_batch": best["batch"]}
    if out["flagged"]:
        out["reason"] = reason(system, a, b, worst["batch"], what)
        if what != "plain" and abs(plain["plain_diff"]) > FLAG:  # the plain steps differ too, for their own reason
            out["plain_reason"] = reason(system, a, b, plain["batch"], "plain")
    return out


def check_cell(system: str, preset: str, target: str, draft: str, profile_draft: str, dtype: str, tp: int,
               acceptance: str, folder: Path) -> dict[str, Any]:
    cell: dict[str, Any] = {"system": system, "preset": preset, "target": target, "draft": draft, "dtype": dtype,
                            "tp": tp}
    try:
        a = preset_route(preset, target, draft, dtype, tp, acceptance)
        b = profile_route(system, target, draft, profile_draft, dtype, tp, acceptance, folder)
    except SpecsimError as e:
        return {**cell, "skipped": str(e).splitlines()[0]}
    return {**cell, **compare(system, a, b)}


def report(cell: dict[str, Any]) -> str:
    head = f"{cell['preset']} ({cell['system']}), {cell['target']} + {cell['draft']}" + (
        f", TP {cell['tp']}" if cell["tp"] > 1 else "")
    if "skipped" in cell:
        return f"{head}: not compared: {cell['skipped']}"
    out = [head, "  batch | plain ms: preset  profile   diff | best speed-up: preset (k)  profile (k)   diff"]
    for r in cell["rows"]:
        out.append(f"  {r['batch']:5d} |        {r['preset_plain_ms']:7.2f}  {r['profile_plain_ms']:7.2f} "
                   f"{100 * r['plain_diff']:+6.1f}% |       {r['preset_best']:5.2f}x ({r['preset_best_k']})   "
                   f"{r['profile_best']:5.2f}x ({r['profile_best_k']}) {100 * r['best_diff']:+6.1f}%")
    out.append(f"  max difference {100 * cell['max_diff']:+.1f} % ({cell['of']}) at batch {cell['at_batch']} "
               f"(plain step {100 * cell['max_plain_diff']:+.1f} % at {cell['plain_at_batch']}, best speed-up "
               f"{100 * cell['max_best_diff']:+.1f} % at {cell['best_at_batch']})"
               + (f"\n  FLAGGED: {cell['reason']}" if cell["flagged"] else "")
               + (f"\n  and the plain step at batch {cell['plain_at_batch']}: {cell['plain_reason']}"
                  if "plain_reason" in cell else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="GPUs whose preset or system name contains this")
    ap.add_argument("--acceptance", default="iid:0.7")
    ap.add_argument("--json", default=None, help="write every cell here ('-': stdout instead of the tables)")
    args = ap.parse_args(argv)
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for system, preset in systems():
            if args.only and args.only not in system and args.only not in preset:
                continue
            for target, draft, profile_draft, dtype, tp in TARGETS:
                cell = check_cell(system, preset, target, draft, profile_draft, dtype, tp, args.acceptance,
                                  Path(tmp))
                cells.append(cell)
                if args.json != "-":
                    print(report(cell), flush=True)
    flagged = [c for c in cells if c.get("flagged")]
    summary = [f"{c['preset']}, {c['target']}: {100 * c['max_diff']:+.1f} % ({c['of']}) at batch {c['at_batch']}: "
               f"{c['reason']}" for c in flagged]
    if args.json == "-":
        print(json.dumps(cells, indent=1))
    else:
        print(f"\n{len(flagged)} of {sum('rows' in c for c in cells)} cells differ by more than {100 * FLAG:.0f} %:")
        print("\n".join(f"  {s}" for s in summary))
        if args.json:
            Path(args.json).write_text(json.dumps(cells, indent=1))
    return cells


if __name__ == "__main__":
    main()
