"""Served llama-server streams re-simulated by the current simulator: what a change to the model or the profile
does to streams already served (their measured side kept), without serving them again.

    python benchmarks/llama_resimulate.py PROFILE.json SERVING.json [PROFILE.json SERVING.json ...] [--table]

PROFILE from `specsim calibrate --engine llama.cpp`, SERVING from `specsim validate --engine llama.cpp --serving
--json` with that profile. One line per stream (the median row and the median |error| over the rows, as reported
and as re-simulated); --table prints each re-simulated report in full.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.llama_served import format_llama_serving, resimulate  # noqa: E402
from scenarios.profile import load_profile  # noqa: E402
from simulator import SpecsimError  # noqa: E402


def median_row(report: dict) -> str:
    m = report["median_row"]
    r = next(r for r in report["rows"] if r["rate_per_s"] == m["rate_per_s"] and r["policy"] == m["policy"])
    th, tp = r["throughput"][2], r["tpot_p50_s"][2]
    e = report["median_abs_err"]
    met = "met" if abs(th) <= 0.05 and abs(tp) <= 0.10 else "missed"
    return (f"median row {m['rate_per_s']:g}/s {m['policy']} {100 * th:+.1f} / {100 * tp:+.1f} % ({met}), over the "
            f"rows {100 * e['throughput']:.1f} / {100 * e['tpot_p50_s']:.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="PROFILE.json SERVING.json pairs")
    ap.add_argument("--table", action="store_true", help="print each re-simulated report in full")
    args = ap.parse_args()
    if len(args.files) % 2:
        sys.exit("llama_resimulate.py: give files in pairs, PROFILE.json SERVING.json")
    for prof_path, serve_path in zip(args.files[::2], args.files[1::2]):
        try:
            profile = load_profile(prof_path)
        except (OSError, ValueError, SpecsimError) as e:
            sys.exit(f"llama_resimulate.py: {e}")
        try:
            report = json.loads(Path(serve_path).read_text())
            again = resimulate(profile, report)
        except (OSError, ValueError) as e:
            sys.exit(f"llama_resimulate.py: {serve_path}: {e}")
        except (KeyError, TypeError, AttributeError) as e:
            sys.exit(f"llama_resimulate.py: {serve_path} is not a served-stream report (missing {e}): give what "
                     "specsim validate --engine llama.cpp --serving --json wrote")
        print(f"{serve_path}: reported {median_row(report)}; re-simulated {median_row(again)}", flush=True)
        if args.table:
            print(format_llama_serving(again), "\n", flush=True)


if __name__ == "__main__":
    main()
