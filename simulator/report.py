"""Sweep results as text: a condensed table, CSV, and plain dicts for machine-readable output. Strings and dicts
only; the CLI prints them."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from .measured_range import MeasuredRange
from .sweep import SweepResult, SweepRow

ROW_FIELDS = ["batch", "k", "tree", "context", "tokens_per_pass", "step_time_s", "baseline_time_s", "speedup",
              "bound", "fits", "draft_time_s", "verify_time_s", "tree_nodes", "extrapolated"]


def result_to_dict(result: SweepResult, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        **meta,
        "rows": [asdict(r) for r in result.rows],
        "best": [asdict(b) for b in result.best],
        "disable_above_batch": result.disable_above_batch,
        "disable_above_batch_by_context": [
            {"context": c, "disable_above_batch": v} for c, v in result.disable_above_batch_by_context
        ],
        "does_not_fit_from_batch": [{"context": c, "batch": b} for c, b in result.unfit_from_batch],
        "speculation_pays_in_batches": [{"context": c, "ranges": [list(r) for r in ranges]}
                                        for c, ranges in result.pays_by_context],
    }


def result_to_csv(result: SweepResult) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=ROW_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in result.rows:
        w.writerow({k: v for k, v in asdict(r).items() if k in ROW_FIELDS})
    return buf.getvalue()


def _candidate_key(r: SweepRow) -> str:
    return f"tree {r.tree}" if r.tree else f"k={r.k}"


def condensed_batches(batches: list[int], best_k: dict[int, str], limit: int = 24) -> list[int]:
    """All batches if few; else the powers of two plus the batches on either side of every change of best choice."""
    if len(batches) <= limit:
        return batches
    keep = {b for b in batches if b & (b - 1) == 0} | {batches[0], batches[-1]}
    for prev, cur in zip(batches, batches[1:]):
        if best_k.get(prev) != best_k.get(cur):
            keep |= {prev, cur}
    return sorted(keep)


EXTRAPOLATED = ("* more drafts per step than the acceptance's source measured: its model is extrapolated there "
                "(the JSON and CSV rows say extrapolated)")


def marks(r: SweepRow) -> str:
    """'*' past the acceptance's measured draft lengths, '^' past the calibration's measured passes."""
    where = r.extrapolated_in or (("k",) if r.extrapolated else ())
    return ("*" if "k" in where else "") + ("^" if any(w != "k" for w in where) else "")


def beyond_passes_note(result: SweepResult) -> str:
    reach = result.measured_range
    passes = reach is None or reach.what == MeasuredRange.what
    return (f"^ past {reach.what if reach else 'the passes the profile measured'} "
            f"({reach.describe() if reach else 'its calibration grid'}): the cost model extrapolates its fit there "
            "(the JSON and CSV rows say extrapolated); "
            + ("calibrate with --batch and --context covering it" if passes else
               "benchmark a load and lengths that cover it"))


def extrapolation_notes(rows: Sequence[SweepRow], result: SweepResult) -> list[str]:
    """The footnotes of the marks these rows carry."""
    shown = "".join(marks(r) for r in rows)
    return ([EXTRAPOLATED] if "*" in shown else []) + ([beyond_passes_note(result)] if "^" in shown else [])


def near_ties(rows: Sequence[SweepRow], best: SweepRow | None, tolerance: float) -> str:
    """The chain lengths whose speed-up is within `tolerance` of the best chain's (the prediction cannot tell them
    apart), as ' ~5-8'; '' where the best stands alone or is not a chain."""
    if best is None or best.tree or not best.k or tolerance <= 0:
        return ""
    ks = sorted(int(r.k) for r in rows if r.fits and r.tree is None and r.k and
                r.speedup >= best.speedup * (1 - tolerance))
    if len(ks) < 2:
        return ""
    run = ks == list(range(ks[0], ks[-1] + 1))
    return f" ~{ks[0]}-{ks[-1]}" if run else " ~" + ",".join(map(str, ks))


def batch_ranges(ranges: Sequence[tuple[int, int]]) -> str:
    """(1, 1), (8, 96) -> '1 and 8-96'."""
    parts = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def describe_disable(value: int | None, batches: list[int], rows: Sequence[SweepRow] = (),
                     memory_capped: bool = False, ranges: Sequence[tuple[int, int]] | None = None) -> str:
    """The summary line of one context's table; `rows` (that context's) tell a memory limit from a speed-up lost;
    `memory_capped`: larger batches were asked for and left out because nothing fits. Where speculation pays in
    batch ranges that do not start at the smallest batch (an MoE target), the line gives the ranges."""
    fitting = [r.batch for r in rows if r.fits]
    if ranges and fitting and (len(ranges) > 1 or ranges[0][0] > min(fitting)):
        swept = sorted(set(fitting))
        paying = {b for b in swept if any(lo <= b <= hi for lo, hi in ranges)}
        off: list[tuple[int, int]] = []
        for b in swept:  # the runs of swept batches where it does not pay
            if b in paying:
                continue
            if off and swept.index(b) == swept.index(off[-1][1]) + 1:
                off[-1] = (off[-1][0], b)
            else:
                off.append((b, b))
        still = (f" (it still pays at the largest batch {'that fits' if memory_capped else 'swept'})"
                 if ranges[-1][1] == max(swept) else "")
        return f"speculation pays only at batches {batch_ranges(ranges)}: keep it off at {batch_ranges(off)}{still}"
    if value is None:
        if fitting and (memory_capped or max(fitting) < max(batches)):
            return f"speculation still pays at the largest batch that fits ({max(fitting)})"
        return f"speculation still pays at the largest batch swept ({max(batches)})"
    if value == 0:
        if fitting and not any(r.fits and (r.k != 0 or r.tree) for r in rows):
            return ("the draft does not fit: at no batch swept do its weights and KV cache fit beside the target's "
                    "(a memory limit, not speculation that does not pay)")
        return "speculation never pays in this sweep: keep it off"
    drafted_fit = [r.batch for r in rows if r.fits and (r.k != 0 or r.tree)]
    if drafted_fit and value == max(drafted_fit) and max(fitting) > value:
        return (f"disable speculation above batch {value}: above it the draft's weights and KV cache no longer fit "
                "beside the target's (a memory limit; speculation still paid there)")
    return f"disable speculation above batch {value}"


def format_hardware_table(result: SweepResult, every_row_hint: str = "", tolerance: float = 0.0) -> str:
    """One block per context: batch, baseline tokens/s, speed-up per k or tree, best choice and bound; a condensed
    table says so and where every row is (`every_row_hint`, e.g. the output options that carry them). With a
    `tolerance` (the prediction's resolution), the best choice names the draft lengths within it of the best, so
    a best k that moves over differences the prediction cannot resolve reads as the near-tie it is."""
    out: list[str] = []
    unfit = dict(result.unfit_from_batch)
    contexts = sorted({r.context for r in result.rows} | set(unfit))
    for context in contexts:
        rows = [r for r in result.rows if r.context == context]
        if not rows:
            out += [f"context {context} tokens:", f"  nothing fits: from batch {unfit[context]:,} on (the smallest "
                    "asked for) the target's weights and KV cache exceed the device's memory (split the target over "
                    "GPUs with --tp N, or a smaller --dtype)", ""]
            continue
        keys: list[str] = []
        for r in rows:
            key = _candidate_key(r)
            if key not in keys:
                keys.append(key)
        by = {(r.batch, _candidate_key(r)): r for r in rows}
        best = {b.batch: b for b in result.best if b.context == context}
        best_key = {b: (f"tree {v.tree}" if v.tree else f"k={v.k}") for b, v in best.items()}
        batches = sorted({r.batch for r in rows})
        shown = condensed_batches(batches, best_key)
        header = ["batch", "base tok/s"] + keys + ["best", "bound"]
        table = [header]
        for b in shown:
            base = next(r for r in rows if r.batch == b)
            cells = [str(b), f"{b / base.baseline_time_s:,.0f}"]
            for key in keys:
                r = by.get((b, key))
                cells.append("-" if r is None else (f"{r.speedup:.2f}{marks(r)}" if r.fits else "oom"))
            bb = best.get(b)
            tie = near_ties([r for r in rows if r.batch == b], by.get((b, best_key.get(b, ""))), tolerance)
            cells.append(best_key[b] + tie if bb else "oom")
            bound_row = by.get((b, best_key.get(b, ""))) or (base if bb else None)
            cells.append(bound_row.bound if bound_row else "-")
            table.append(cells)
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        out.append(f"context {context} tokens:")
        for row in table:
            out.append("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if len(shown) < len(batches):
            out.append(f"  (condensed: {len(shown)} of {len(batches)} batches shown, the powers of two and the rows "
                       f"around each change of best choice{'; ' + every_row_hint if every_row_hint else ''})")
        out += ["  " + note for note in extrapolation_notes(rows, result)]
        if tolerance > 0 and any(near_ties([r for r in rows if r.batch == b], by.get((b, best_key.get(b, ""))),
                                           tolerance) for b in shown):
            out.append(f"  ~a-b: the draft lengths within {100 * tolerance:.0f} % of the best's speed-up (the "
                       "prediction's resolution): any of them is as good as the best shown")
        if context in unfit:
            out.append(f"  from batch {unfit[context]:,} on nothing fits (the target's weights and KV cache exceed "
                       "the device's memory): those batches are left out")
        by_ctx = dict(result.disable_above_batch_by_context)
        out.append("  " + describe_disable(by_ctx.get(context), batches, rows, context in unfit,
                                           result.pays_in(context)))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def format_formula_table(result: SweepResult, cost_ratio: float) -> str:
    header = ["k / tree", "tokens/pass", "cost/token", "speed-up"]
    table = [header]
    for r in result.rows:
        label = f"tree {r.tree}" if r.tree else str(r.k)
        table.append([label, f"{r.tokens_per_pass:.2f}", f"{r.step_time_s / r.tokens_per_pass:.2f}",
                      f"{r.speedup:.2f}{marks(r)}"])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table]
    b = result.best[0]
    choice = f"tree {b.tree}" if b.tree else f"k = {b.k}"
    lines.append(f"best: {choice}, speed-up {b.speedup:.2f} (draft/target cost ratio c = {cost_ratio:g}; "
                 "cost per token relative to plain decoding)")
    lines += extrapolation_notes(result.rows, result)
    return "\n".join(lines) + "\n"
