"""Acceptance models that transfer: fit every model on one dataset of the shipped production traces and predict each
other dataset's exact replay (tokens per step at k = 2, 5, 7), for EAGLE-3 and n-gram drafts. Outside the test
suite (about a minute).

    python benchmarks/acceptance_transfer.py [--traces ../shared/data/acceptance-traces] [--ks 2,5,7]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from scenarios.traces import load_acceptance_trace
from simulator.acceptance_fit import MODELS, AcceptanceData, choose, cross_validate, transfer

DATASETS = ("cnn", "gsm8k", "instructcoder", "sharegpt")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data"
                    / "acceptance-traces")
    ap.add_argument("--ks", default="2,5,7")
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    for column in ("eagle", "ngram"):
        data = {d: AcceptanceData.from_yields(load_acceptance_trace(a.traces / f"llama3.1-8b-instruct_{d}.jsonl",
                                                                    column).yields, f"{d}:{column}")
                for d in DATASETS}
        errs = {m: [] for m in MODELS}
        chosen_errs = []
        for train in DATASETS:
            tests = {d: v for d, v in data.items() if d != train}
            result = transfer(data[train], tests, ks)
            chosen = choose(cross_validate(data[train], folds=5).errors)  # picked on the training set alone
            for m in MODELS:
                for tok, _ in result[m].values():
                    errs[m].append(tok)
            chosen_errs += [tok for tok, _ in result[chosen].values()]
            print(f"{column}: fit on {train}: chosen by 5-fold held-out error: {chosen}")
        print(f"\n{column}: fit on one dataset, predict each other dataset's replay at k = {a.ks} "
              f"(mean |error| of tokens per step over 12 train/test pairs x {len(ks)} k; max in brackets)")
        for m in MODELS:
            e = np.concatenate(errs[m])
            print(f"  {m:11s} {100 * e.mean():5.1f} %  [{100 * e.max():5.1f} %]")
        e = np.concatenate(chosen_errs)
        print(f"  {'chosen':11s} {100 * e.mean():5.1f} %  [{100 * e.max():5.1f} %]\n")


if __name__ == "__main__":
    main()
