#!/usr/bin/env bash
# A newcomer's transformers validation, N times: a fresh clone, a fresh venv (torch, transformers), an empty HOME;
# the pair exported, transformers' own passes calibrated, its assisted generation and prompt lookup validated.
#   bash benchmarks/fresh_clones_transformers.sh [N] [OUT_DIR]
# About 9 minutes per clone on a 2-core machine; run nothing else meanwhile. One summary line per clone.
set -euo pipefail
N=${1:-5}
OUT=${2:-$(mktemp -d /tmp/fresh-hf-XXXX)}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
  dir=$(mktemp -d /tmp/fresh-clone-XXXX)
  git clone -q "$REPO" "$dir/specsim"
  (
    cd "$dir/specsim"
    export HOME="$dir/home" XDG_CACHE_HOME="$dir/home/.cache"
    mkdir -p "$HOME"
    python3 -m venv .venv && . .venv/bin/activate
    pip install -q torch==2.13.0 >/dev/null 2>&1 && pip install -q -e '.[hf]' transformers==5.24.0 >/dev/null 2>&1
    specsim export --out pair/ --format hf >/dev/null 2>&1
    start=$(date +%s)
    specsim calibrate --quick --engine transformers --target pair/target --draft pair/draft \
      --out "$OUT/hf-profile-$i.json" > "$OUT/calibrate-$i.txt" 2>&1
    cal=$(( $(date +%s) - start ))
    specsim validate --quick --engine transformers --profile "$OUT/hf-profile-$i.json" --target pair/target \
      --draft pair/draft --json > "$OUT/validate-$i.json" 2>/dev/null
    python - "$OUT" "$i" "$cal" <<'PY'
import json, sys
out, i, cal = sys.argv[1:]
v = json.load(open(f"{out}/validate-{i}.json"))
rows = ", ".join(f"{r['run']} {100 * r['rel_error']:+.1f} %" for r in v["rows"])
print(f"clone {i}: calibrate {cal} s; validate median {100 * v['median_abs_err_speedup']:.1f} %, p90 "
      f"{100 * v['p90_abs_err_speedup']:.1f} %; {rows}; outputs differ: {v['outputs_differ'] or 'none'}", flush=True)
PY
  ) | tee -a "$OUT/summary.txt"
  rm -rf "$dir"
done
echo "results in $OUT"
