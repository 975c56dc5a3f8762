"""`specsim validate`: predict every configuration from the calibration profile, run it for real on held-out prompts,
and report the error of each predictor, where the misses are, and how repeatable the measurement itself is.

Predictors (all with acceptance measured on the *calibration* prompts; the runs use *held-out* prompts):

- ``calibrated`` - the calibrated cost model with the measured per-position acceptance (P(A >= i));
- ``calibrated+iid`` / ``+markov`` / ``+trace`` / ``+beta`` - the same cost model with the other acceptance models;
- ``leviathan`` - (1 - a^(k+1)) / ((1 - a)(k c + 1)) with the measured alpha and the measured cost ratio c of a
  draft pass to a target pass at that batch (trees: depth c + 1);
- ``roofline`` - a pure roofline at the micro-benchmarked peak bandwidth and FLOP/s, no overheads, i.i.d. alpha.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.acceptance import Acceptance, IIDAcceptance, WithRanks, from_measured
from simulator.cost import CostModel
from simulator.sweep import Candidate, step_time, tokens_per_pass
from simulator.trees import Tree

from .profile import cost_model_from_profile, hardware_from_microbenchmarks, spec_from_dict

PRIMARY = "calibrated"


@dataclass(frozen=True)
class Prediction:
    tokens_per_pass: float
    step_s: float
    baseline_s: float
    draft_s: float
    verify_s: float
    accept_s: float

    @property
    def speedup(self) -> float:
        return self.tokens_per_pass * self.baseline_s / self.step_s


def datasheet_cost(profile: dict[str, Any], dtype: str) -> CostModel:
    """The pure roofline baseline: micro-benchmarked peaks, no overheads, no measurements."""
    hw = hardware_from_microbenchmarks(profile["device"]["name"], profile["microbenchmarks"],
                                       profile["device"].get("memory_bytes"))
    return CostModel.from_hardware(hw, dtype, datasheet=True)


def predictors(profile: dict[str, Any]) -> dict[str, Callable[[int, Candidate, int], Prediction]]:
    """name -> f(batch, candidate, context) for every predictor this profile supports."""
    acc = profile["acceptance"]
    target, draft = spec_from_dict(profile["models"]["target"]), spec_from_dict(profile["models"]["draft"])
    calibrated = cost_model_from_profile(profile)
    roofline = datasheet_cost(profile, target.dtype)
    variants = ["positional", "iid", "markov", "trace"] + (["beta"] if acc.get("beta") else [])
    models: dict[str, Acceptance] = {v: from_measured(acc, v) for v in variants}
    iid = models["iid"]

    def with_cost(cost: CostModel, acceptance: Acceptance) -> Callable[[int, Candidate, int], Prediction]:
        def f(batch: int, cand: Candidate, context: int) -> Prediction:
            st = step_time(cost, target, draft, batch, context, cand)
            base = cost.plain_step_s(target, batch, context)
            return Prediction(tokens_per_pass(cand, acceptance), st.total_s, base, st.draft_s, st.verify_s,
                              st.accept_s)
        return f

    def leviathan(batch: int, cand: Candidate, context: int) -> Prediction:
        base = calibrated.pass_time_s(target, batch, 1, context)
        c = calibrated.pass_time_s(draft, batch, 1, context) / base
        depth = cand.shape.depth
        return Prediction(tokens_per_pass(cand, iid), base * (1 + depth * c), base, base * depth * c, base, 0.0)

    out = {PRIMARY: with_cost(calibrated, models["positional"])}
    for v in variants[1:]:
        out[f"calibrated+{v}"] = with_cost(calibrated, models[v])
    out["leviathan"] = leviathan
    out["roofline"] = with_cost(roofline, WithRanks(IIDAcceptance(iid.alpha), tuple(acc["ranks"])))
    return out


def check_predictable(profile: dict[str, Any], candidates: Sequence[Candidate], batches: Sequence[int],
                      context: int) -> None:
    """Evaluate every predictor once per configuration before any run, so a bad request fails in seconds."""
    for f in predictors(profile).values():
        for cand in candidates:
            for b in batches:
                f(b, cand, context)


def _crossover(batches: Sequence[int], best: dict[int, float]) -> int | None:
    """The smallest batch at which the best speed-up is no longer above 1 (best k becomes 0); None if never."""
    for b in batches:
        if b in best and best[b] <= 1.0:
            return b
    return None


def miss_breakdown(pred: Prediction, meas: dict[str, Any]) -> dict[str, float]:
    """Split log(predicted / measured speed-up) into tokens per pass, baseline pass, and the step's terms."""
    m_step = meas["step_s"]["median"]
    terms = {
        "tokens_per_pass": np.log(pred.tokens_per_pass / meas["tokens_per_pass"]["median"]),
        "baseline_pass": np.log(pred.baseline_s / meas["plain_step_s"]["median"]),
        "draft": -(pred.draft_s - meas["draft_s"]["median"]) / m_step,
        "verify": -(pred.verify_s - meas["verify_s"]["median"]) / m_step,
        "accept": -(pred.accept_s - meas["accept_s"]["median"]) / m_step,
    }
    return {k: float(v) for k, v in terms.items()}


def compare(profile: dict[str, Any], measured: list[dict[str, Any]], trees: Sequence[Tree], context: int,
            batches: Sequence[int]) -> dict[str, Any]:
    """Predicted against measured for every configuration and predictor, with summaries."""
    preds = predictors(profile)
    by_label = {t.label: t for t in trees}
    target_name = profile["models"]["target"]["name"]
    timed = [(p["batch"], p["new_tokens"]) for p in profile["passes"]
             if p["model"] == target_name and p.get("median_s")]
    max_batch = max(b for b, _ in timed)
    max_rows = max(b * n for b, n in timed)
    rows = []
    for m in measured:
        cand = Candidate(m["k"]) if m["tree"] is None else Candidate(None, by_label[m["tree"]])
        row: dict[str, Any] = {"batch": m["batch"], "k": m["k"], "tree": m["tree"], "measured": m, "predicted": {}}
        # Beyond the calibrated grid the prediction extrapolates the fit instead of interpolating measurements.
        row["extrapolated"] = m["batch"] > max_batch or m["batch"] * cand.shape.verify_tokens > max_rows
        for name, f in preds.items():
            p = f(m["batch"], cand, context)
            row["predicted"][name] = {
                "tokens_per_pass": p.tokens_per_pass, "step_s": p.step_s, "speedup": p.speedup,
                "tokens_per_s": m["batch"] * p.tokens_per_pass / p.step_s,
                "err_speedup": p.speedup / m["speedup"]["median"] - 1.0,
                "err_tokens_per_pass": p.tokens_per_pass / m["tokens_per_pass"]["median"] - 1.0,
                "err_step": p.step_s / m["step_s"]["median"] - 1.0,
            }
            if name == PRIMARY:
                row["miss_terms"] = miss_breakdown(p, m)
        row["repeatability"] = m["speedup"]["iqr"] / m["speedup"]["median"]
        rows.append(row)
    summary = {}
    for name in preds:
        e = np.abs([r["predicted"][name]["err_speedup"] for r in rows])
        t = np.abs([r["predicted"][name]["err_tokens_per_pass"] for r in rows])
        summary[name] = {"median_abs_err_speedup": float(np.median(e)), "p90_abs_err_speedup":
                         float(np.percentile(e, 90)), "median_abs_err_tokens_per_pass": float(np.median(t)),
                         "mean_abs_err_tokens_per_pass": float(np.mean(t))}
    best_meas: dict[int, float] = {}
    best_pred: dict[int, float] = {}
    for r in rows:
        best_meas[r["batch"]] = max(best_meas.get(r["batch"], 0.0), r["measured"]["speedup"]["median"])
        best_pred[r["batch"]] = max(best_pred.get(r["batch"], 0.0), r["predicted"][PRIMARY]["speedup"])
    cm, cp = _crossover(batches, best_meas), _crossover(batches, best_pred)
    steps_apart = (0 if cm == cp else abs((batches.index(cm) if cm in batches else len(batches))
                                          - (batches.index(cp) if cp in batches else len(batches))))
    noise = [r["repeatability"] for r in rows]
    misses = sorted(rows, key=lambda r: -abs(r["predicted"][PRIMARY]["err_speedup"]))
    worst = []
    for r in misses[:5]:
        terms = r["miss_terms"]
        main = max(terms, key=lambda k: abs(terms[k]))
        worst.append({"batch": r["batch"], "k": r["k"], "tree": r["tree"],
                      "err_speedup": r["predicted"][PRIMARY]["err_speedup"], "main_term": main,
                      "terms": terms, "repeatability": r["repeatability"]})
    return {
        "context": context,
        "rows": rows,
        "predictors": summary,
        "crossover": {"measured": cm, "predicted": cp, "grid_steps_apart": steps_apart},
        "repeatability": {"median_rel_iqr_speedup": float(np.median(noise)), "max_rel_iqr_speedup": float(max(noise))},
        "worst": worst,
    }


def predicted_curves(profile: dict[str, Any], candidates: Sequence[Candidate], batches: Sequence[int],
                     context: int) -> dict[str, list[tuple[int, float]]]:
    f = predictors(profile)[PRIMARY]
    out = {}
    for cand in candidates:
        label = f"tree {cand.tree.label}" if cand.tree is not None else f"k = {cand.k}"
        out[label] = [(b, f(b, cand, context).speedup) for b in batches]
    return out
