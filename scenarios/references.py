"""Presets against published step times of real engines (`references.toml`): what each source measured, what the
preset predicts for the same step, and the relative error."""

from __future__ import annotations

from scenarios import _table, load_hardware, load_model
from simulator.cost import CostModel
from simulator.validation import Comparison


def compare_presets(contexts: tuple[int, ...] = (512, 2048), new_tokens: tuple[int, ...] = (1, 2, 4, 6),
                    batches: tuple[int, ...] | None = None) -> list[Comparison]:
    """Every reference against its preset: plain steps (n = 1) and verification steps (n = k + 1 tokens), at the
    batches the source measured (or `batches`: a fitted source extrapolated beyond its range)."""
    out: list[Comparison] = []
    for name, ref in _table("references").items():
        hw = load_hardware(ref["hardware"], ref["engine"])
        cost = CostModel.from_hardware(hw)
        target = load_model(ref["target"])
        if "c_fixed_s" in ref:
            for c in contexts:
                for b in batches or ref["batches"]:
                    for n in new_tokens:
                        published = (b * (c + n) * ref["c_kv_s"] + b * n * ref["c_token_s"] + ref["c_fixed_s"]
                                     + ref["c_step_s"])
                        predicted = cost.pass_time_s(target, b, n, c) + cost.overheads.engine.plain.at(b)
                        what = "plain step" if n == 1 else f"verify {n} tokens"
                        out.append(Comparison(name, what, b, n, c, published, predicted))
        else:
            b, c = ref["batch"], ref["context"]
            out.append(Comparison(name, "plain step", b, 1, c, b / ref["tokens_per_s"],
                                  cost.plain_step_s(target, b, c)))
    return out
