#!/usr/bin/env bash
# A newcomer's first try, N times: a fresh clone, a fresh venv, an empty HOME; the README's first calibration, then
# validations of the draft model, the built-in heads and n-gram lookup. Prints one summary line per clone.
#   bash benchmarks/fresh_clones.sh [N] [OUT_DIR] [DRAFTERS]      (DRAFTERS: default "model heads ngram")
# Minutes per clone on a 2-core machine; run nothing else meanwhile.
set -euo pipefail
N=${1:-5}
OUT=${2:-$(mktemp -d /tmp/fresh-clones-XXXX)}
DRAFTERS=${3:-model heads ngram}
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
    pip install -q torch==2.13.0 >/dev/null 2>&1 && pip install -q -e . >/dev/null 2>&1
    start=$(date +%s)
    specsim calibrate --quick --out "$OUT/profile-$i.json" > "$OUT/calibrate-$i.txt" 2>&1
    cal=$(( $(date +%s) - start ))
    for d in $DRAFTERS; do
      tree=(); [ "$d" = heads ] && tree=(--tree 2,2); [ "$d" = ngram ] && tree=(--tree '')
      specsim validate --profile "$OUT/profile-$i.json" --quick --drafter "$d" "${tree[@]}" --json \
        > "$OUT/validate-$d-$i.json" 2>/dev/null
    done
    python - "$OUT" "$i" "$cal" $DRAFTERS <<'PY'
import json, sys
out, i, cal, drafters = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
p = json.load(open(f"{out}/profile-{i}.json"))
h = p["fit"]["heldout"]
parts = [f"clone {i}: calibrate --quick {cal} s, held out {100 * h['median_abs_err']:.1f} / {100 * h['p90_abs_err']:.1f} %, "
         f"{'trusted' if p['trust']['trusted'] else 'UNTRUSTED (' + '; '.join(p['trust']['reasons']) + ')'}"]
for kind in drafters:
    v = json.load(open(f"{out}/validate-{kind}-{i}.json"))["predictors"]["calibrated"]
    parts.append(f"validate {kind} {100 * v['median_abs_err_speedup']:.1f} / {100 * v['p90_abs_err_speedup']:.1f} %")
print("; ".join(parts), flush=True)
PY
  ) | tee -a "$OUT/summary.txt"
  rm -rf "$dir"
done
echo "results in $OUT"
