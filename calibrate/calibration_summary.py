"""The calibration summary printed at the end of `specsim calibrate` (plain text from a profile; no torch)."""

from __future__ import annotations

from pathlib import Path

from scenarios import datasheet_for
from scenarios.profile import Profile


def _peak_note(name: str) -> str:
    """The datasheet peaks of a preset matching the device name, if any (CUDA devices)."""
    hw = datasheet_for(name)
    if hw is None:
        return ""
    return (f" (datasheet {hw.name}: {hw.mem_bw_bytes_per_s / 1e9:,.0f} GB/s, "
            f"{hw.peak_flops('bf16') / 1e12:,.0f} TFLOP/s bf16)")


def _device_lines(profile: Profile) -> list[str]:
    """What was measured of the device: micro-benchmarks here, or, for an imported profile, where its step times
    came from (the ceilings are then the preset's datasheet)."""
    micro, dev = profile.micro, profile.device
    raw = micro.raw
    if profile.origin.startswith("transformers:"):
        n = {m: sum(1 for p in profile.timed if p.model == m) for m in (profile.target.name, profile.draft.name)}
        return [f"device: {dev.name} ({dev.kind}, {dev.details.get('engine', 'transformers')}); "
                f"{sum(n.values())} of transformers' own passes timed "
                f"({', '.join(f'{v} of {m}' for m, v in n.items())})",
                f"memory bandwidth: read {micro.read_bytes_per_s / 1e9:.1f} GB/s, copy "
                f"{micro.copy_bytes_per_s / 1e9:.1f} GB/s"]
    if profile.origin != "specsim":
        phases: dict[str, int] = {}
        for p in profile.timed:
            phases[p.model] = phases.get(p.model, 0) + 1
        return [f"imported: {sum(phases.values())} step times from {profile.origin} "
                f"({', '.join(f'{n} of {m}' for m, n in phases.items())}); device {dev.name}, ceilings from "
                f"{raw.get('source', 'its preset')}"]
    read = raw.get("bandwidth", {}).get("read", {})
    iqr = f" (IQR {100 * read['iqr_s'] / read['median_s']:.0f} %)" if read.get("median_s") else ""
    return [f"device: {dev.name} ({dev.kind}, torch {dev.details.get('torch')}){_peak_note(dev.name)}; "
            f"passes timed {'as CUDA graphs' if profile.engine_mode == 'graph' else 'eagerly'}",
            f"memory bandwidth: read {micro.read_bytes_per_s / 1e9:.1f} GB/s{iqr}, copy "
            f"{micro.copy_bytes_per_s / 1e9:.1f} GB/s",
            "matmul FLOP/s: " + ", ".join(
                f"{dt} {m['flops_per_s'] / 1e9:,.0f} GFLOP/s (n={m['size']})" for dt, m in raw["matmul"].items()),
            f"call overhead: {micro.call_overhead_s * 1e6:.1f} us per tiny op"]


def _noise(tax: dict, name: str, what: str) -> str:
    """How a measured cost compares with what the same work differs by, and whether it is priced."""
    if f"{name}_noise" not in tax:
        return ""
    priced = "priced" if tax[f"{name}_priced"] else "not priced"
    return f" ({what} {100 * tax[f'{name}_noise']:.1f} %: {priced})"


def format_summary(profile: Profile, path: Path) -> str:
    micro, fit = profile.micro, profile.fit
    raw = micro.raw
    lines = _device_lines(profile)
    for dt, rows in raw.get("skinny", {}).items():
        lines.append(f"skinny {dt} GEMM, GB/s of weight by rows: " + ", ".join(
            f"{r['rows']}: {r['bytes_per_s'] / 1e9:.1f}" for r in rows))
    ov = fit.overheads
    lines.append(f"fitted overheads: {ov.pass_s * 1e6:.0f} us per pass, {ov.layer_s * 1e6:.0f} us per layer, "
                 f"{ov.row_s * 1e6:.2f} us per token row, {ov.sequence_layer_s * 1e6:.1f} us per sequence and layer")
    for name in ("plain", "draft", "verify", "chain_accept", "tree_accept", "pass_draw", "prefill"):
        v = getattr(ov.engine, name)
        if v.fixed_s or v.per_sequence_s:
            per = "request per prefill" if name == "prefill" else "sequence per step"
            lines.append(f"  engine, {name.replace('_', ' ')}: {v.fixed_s * 1e6:.0f} us + "
                         f"{v.per_sequence_s * 1e6:.1f} us per {per}")
    lin = fit.linear_rates
    lines.append("fitted linear-layer time per weight byte by rows, as GB/s: " + ", ".join(
        f"{r}: {b / 1e9:.1f}" for r, b in zip(lin.rows, lin.mem_bw_bytes_per_s)))
    h, d = fit.heldout, fit.datasheet_heldout
    lines.append(f"held-out pass times ({h.n} passes the fit never saw; it was fitted to {fit.train_points} others): "
                 f"median |error| "
                 f"{100 * h.median_abs_err:.1f} %, p90 {100 * h.p90_abs_err:.1f} %, max {100 * h.max_abs_err:.1f} %")
    if d.n:
        lines.append(f"  pure roofline (measured peaks, no overheads) on the same points: median |error| "
                     f"{100 * d.median_abs_err:.1f} %, p90 {100 * d.p90_abs_err:.1f} %")
    if fit.verify_ratio_batch1:
        lines.append("batch-1 verify cost t(k+1)/t(1), measured -> fitted: " + ", ".join(
            f"k={r['k']}: {r['measured_ratio']:.2f}->{r['predicted_ratio']:.2f}" for r in fit.verify_ratio_batch1))
    by = profile.speculation_tax.get("by_batch") or {}
    if by:
        block = profile.speculation_tax["block"]
        lines.append("speculation off and switching k in this engine, by batch: " + "; ".join(
            f"B={b}: k = 0 step {100 * v['off_fraction']:+.1f} % vs no draft"
            f"{_noise(v, 'off', 'two runs of the same steps differ by up to')}, catch-up of {block} tokens "
            f"{1e3 * v['catchup_measured_s']:.2f} ms (priced {1e3 * v['catchup_predicted_s']:.2f}), "
            f"switch 4 -> 2 {100 * v['switch_fraction']:+.1f} % of a plain step"
            f"{_noise(v, 'switch', 'steady steps stray up to')}" for b, v in by.items()))
    if profile.acceptance is not None:
        a = profile.acceptance
        lines.append(f"acceptance ({'greedy, ' if a.temperature == 0 else 'built-in pair, '}{a.prompts} calibration "
                     f"prompts): alpha {a.alpha:.3f}, P(A >= i) {', '.join(f'{v:.2f}' for v in a.survival[:4])}, "
                     f"measured = measured:{a.chosen}")
        loop, lookup = a.raw.get("transformers_loop"), a.raw.get("lookup")
        if loop:
            lines.append(f"transformers' generate(): {1e3 * loop['target_loop_s']:.2f} ms a step around the "
                         f"target's pass; the assistant's call {1e3 * loop['draft_call_s']:.2f} ms + "
                         f"{1e3 * loop['draft_loop_s']:.2f} ms a drafted token")
        if lookup:
            by = lookup["by_k"]
            lines.append("prompt lookup (prompts that repeat themselves), accepted of proposed by K: " + ", ".join(
                f"{k}: {v['accepted_mean']:.2f}/{v['proposed_mean']:.2f}" for k, v in by.items()))
        bc = a.by_context
        if bc:
            d, loo = bc["decay"], bc["leave_one_out"]
            lines.append(
                f"acceptance against context ({bc['texts']} texts, {bc['span']}-token windows to "
                f"{max(bc['contexts']):.0f}): alpha {d['high']:.3f} falling to {d['low']:.3f} around context "
                f"{d['c50']:.0f} (width {d['width']:.0f}); each window predicted from the others: median |error| "
                f"{100 * loo['median_abs_err']:.1f} %, max {100 * loo['max_abs_err']:.1f} %; use it with "
                "--acceptance measured@context")
    heads = profile.acceptance.heads if profile.acceptance is not None else None
    if heads:
        from scenarios.draft_specs import BUILTIN_HEADS

        passes = sorted((p.batch, p.median_s) for p in profile.timed if p.model == BUILTIN_HEADS)
        timed = ", ".join(f"{b}: {1e3 * t:.2f}" for b, t in passes)
        lines.append(f"prediction heads ({heads['n_heads']}, {BUILTIN_HEADS}): alpha by head "
                     + ", ".join(f"{a:.3f}" for a in heads["alpha_by_head"]) + "; P(A >= i) "
                     + ", ".join(f"{a:.3f}" for a in heads["survival"]) + f"; their pass by batch, ms: {timed}; "
                     "use them with --draft medusa")
    ngram = profile.acceptance.ngram if profile.acceptance is not None else None
    if ngram:
        host = ngram.get("host", {})
        held = host.get("heldout", {}).get("median_abs_err")
        survival = ", ".join(f"{s:.3f}" for s in ngram["survival_given_proposal"])
        lines.append(f"n-gram lookup (prompts that repeat themselves): proposes on {100 * ngram['proposal_rate']:.0f} "
                     f"% of steps; of a proposal P(A >= i) {survival}"
                     + f"; host time {1e6 * host.get('per_sequence_s', 0):.1f} us per sequence + "
                     f"{1e9 * host.get('per_context_token_s', 0):.1f} ns per sequence and context token"
                     + (f" (held out: median |error| {100 * held:.1f} %)" if held is not None else "")
                     + "; use it with --draft ngram")
    for bound in fit.extra.get("bounds", ()):
        lines.append(f"held at a bound: {bound}")
    for assumption in fit.extra.get("assumed", ()):
        lines.append(f"assumed: {assumption}")
    if profile.not_measured:
        lines.append(f"not measured{' (quick)' if profile.quick else ''}: {'; '.join(profile.not_measured)} - run "
                     "specsim calibrate without --quick for them")
    oom = [p for p in profile.passes if p.oom]
    if oom:
        lines.append(f"{len(oom)} grid points ran out of memory and were skipped (recorded in the profile)")
    if profile.trust.trusted:
        lines.append("trusted: the fit predicts held-out passes and the measurements repeat")
    else:
        lines.append("UNTRUSTED: " + "; ".join(profile.trust.reasons) + " - predictions from this profile say so, and "
                     "the default lookup prefers a trusted profile")
    lines.append(f"profile written to {path}")
    return "\n".join(lines)
