"""specsim's own mixture of experts on this CPU (engine/moe.py, the specsim-moe preset): calibrated with independent
and with shared routing, each profile's held-out pass-time error (verify passes of 1..9 tokens over batches up to 32:
rows 1..288), the pass time against tokens per pass it predicts beside what was measured, and a validation of real
speculative decoding at that shape (acceptance replayed).

    python benchmarks/moe_cpu.py [--sharing 0,0.5] [--quick] [--out DIR]

Each calibration takes a few minutes and each validation a few more; run nothing else meanwhile (the machine is
shared: the figures are measurements, never assertions).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def specsim(*args: str) -> str:
    r = subprocess.run([sys.executable, "specsim.py", *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"specsim {' '.join(args)} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sharing", default="0,0.5", help="routing sharings to calibrate with")
    ap.add_argument("--quick", action="store_true", help="quick calibrations (batches 1..8)")
    ap.add_argument("--out", type=Path, default=None, help="keep the profiles here")
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="moe-cpu-"))
    out.mkdir(parents=True, exist_ok=True)
    for s in a.sharing.split(","):
        path = out / f"moe-sharing-{s}.json"
        grid = ["--quick"] if a.quick else ["--batch", "1..32:x2", "--context", "64,384"]
        specsim("calibrate", "--target", "specsim-moe", "--expert-sharing", s, *grid, "--out", str(path))
        p = json.loads(path.read_text())
        h = p["fit"]["heldout"]
        print(f"sharing {s}: held-out pass times ({h['n']} points): median |error| {100 * h['median_abs_err']:.1f} %, "
              f"p90 {100 * h['p90_abs_err']:.1f} %, max {100 * h['max_abs_err']:.1f} %; "
              f"trusted {p['trust']['trusted']}")
        points = sorted((q["batch"] * q["new_tokens"], q["batch"], q["new_tokens"], q["rel_error"])
                        for q in h["points"] if q["model"] == "specsim-moe")
        print("  held out, rows (batch x tokens): predicted / measured - 1: "
              + ", ".join(f"{r} ({b}x{n}) {100 * e:+.0f} %" for r, b, n, e in points))
        v = json.loads(specsim("validate", "--profile", str(path), "--acceptance", "iid:0.7", "--tree", "",
                               "--quick", "--json"))
        for name in ("calibrated", "calibrated@replayed"):
            s_ = v["predictors"][name]
            print(f"  validate --quick at this shape, {name}: speed-up median |error| "
                  f"{100 * s_['median_abs_err_speedup']:.1f} %, p90 {100 * s_['p90_abs_err_speedup']:.1f} %")
    print(f"profiles in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
