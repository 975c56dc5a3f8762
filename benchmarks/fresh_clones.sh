#!/usr/bin/env bash
# A newcomer's first try, N times: a fresh clone, a fresh venv, an empty HOME, then one of two jobs.
#   bash benchmarks/fresh_clones.sh [N] [OUT_DIR] [DRAFTERS]     the README's first calibration, then validations of
#                                                                the draft model, the built-in heads and n-gram lookup
#                                                                (DRAFTERS: default "model heads ngram")
#   ENGINE=transformers bash benchmarks/fresh_clones.sh [N] [OUT_DIR]
#                                                                the pair exported, transformers' own passes
#                                                                calibrated, its assisted generation and prompt lookup
#                                                                validated (about 9 minutes a clone; VALIDATE
#                                                                replaces --quick, e.g. VALIDATE="--k 1..8
#                                                                --repeats 2" for every k and K 2..8 on 8 prompts)
#   ENGINE=llama.cpp bash benchmarks/fresh_clones.sh [N] [OUT_DIR]
#                                                                the pair exported, llama.cpp's own passes
#                                                                calibrated, a served stream through llama-server
#                                                                against its simulation (--serving --k 4; about 6
#                                                                minutes a clone); needs a build
#                                                                (benchmarks/build_llama_cpp.sh), found as specsim
#                                                                finds it before HOME is emptied
#   ENGINE=bench bash benchmarks/fresh_clones.sh [N] [OUT_DIR]
#                                                                the user's benchmark as the judge: llama-server
#                                                                serving the pair plain and speculative, driven by
#                                                                GuideLLM (CLIENT=aiperf: AIPerf) at five Poisson
#                                                                rates (fractions of its measured capacity), fitted on
#                                                                two, validated on the rest
#                                                                (benchmarks/bench_clients.py llama; about 15 minutes
#                                                                a clone); needs the llama.cpp build and the client in
#                                                                a venv of its own (GUIDELLM_BIN / AIPERF_BIN)
# Minutes per clone on a 2-core machine; run nothing else meanwhile. One summary line per clone. OMP_NUM_THREADS=1
# runs torch on one thread (steady where a co-tenant holds a core for minutes: docs/validation.md);
# SPECSIM_LLAMA_THREADS=1 does the same for llama.cpp.
set -euo pipefail
N=${1:-5}
OUT=${2:-$(mktemp -d /tmp/fresh-clones-XXXX)}
DRAFTERS=${3:-model heads ngram}
ENGINE=${ENGINE:-specsim}
case "$ENGINE" in specsim|transformers|llama.cpp|bench) ;;
  *) echo "fresh_clones.sh: ENGINE must be specsim, transformers, llama.cpp or bench, not '$ENGINE'" >&2; exit 2;; esac
if [ "$ENGINE" = llama.cpp ] || [ "$ENGINE" = bench ]; then
  export SPECSIM_LLAMA_CPP=${SPECSIM_LLAMA_CPP:-${XDG_CACHE_HOME:-$HOME/.cache}/specsim/llama.cpp}
  [ -x "$SPECSIM_LLAMA_CPP/bin/llama-server" ] || {
    echo "fresh_clones.sh: no llama-server in $SPECSIM_LLAMA_CPP/bin: build it with bash benchmarks/build_llama_cpp.sh" >&2; exit 2; }
fi
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"

specsim_clone() {  # $1: clone number
  local i=$1 start cal tree d
  pip install -q -e . >/dev/null 2>&1
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
}

transformers_clone() {  # $1: clone number
  local i=$1 start cal
  pip install -q -e '.[hf]' transformers==5.24.0 >/dev/null 2>&1
  specsim export --out pair/ --format hf >/dev/null 2>&1
  start=$(date +%s)
  specsim calibrate --quick --engine transformers --target pair/target --draft pair/draft \
    --out "$OUT/hf-profile-$i.json" > "$OUT/calibrate-$i.txt" 2>&1
  cal=$(( $(date +%s) - start ))
  specsim validate ${VALIDATE:---quick} --engine transformers --profile "$OUT/hf-profile-$i.json" \
    --target pair/target --draft pair/draft --json > "$OUT/validate-$i.json" 2>/dev/null
  python - "$OUT" "$i" "$cal" <<'PY'
import json, sys
out, i, cal = sys.argv[1:]
v = json.load(open(f"{out}/validate-{i}.json"))
rows = ", ".join(f"{r['run']} {100 * r['rel_error']:+.1f} %" for r in v["rows"])
print(f"clone {i}: calibrate {cal} s; validate median {100 * v['median_abs_err_speedup']:.1f} %, p90 "
      f"{100 * v['p90_abs_err_speedup']:.1f} %; {rows}; outputs differ: {v['outputs_differ'] or 'none'}", flush=True)
PY
}

llama.cpp_clone() {  # $1: clone number
  local i=$1 start cal
  pip install -q -e '.[hf]' >/dev/null 2>&1
  specsim export --out pair/ --format both >/dev/null 2>&1
  start=$(date +%s)
  specsim calibrate --quick --engine llama.cpp --target pair/target --draft pair/draft \
    --out "$OUT/llama-profile-$i.json" > "$OUT/calibrate-$i.txt" 2>&1
  cal=$(( $(date +%s) - start ))
  specsim validate --quick --engine llama.cpp --serving --k 4 --profile "$OUT/llama-profile-$i.json" \
    --target pair/target --draft pair/draft --json > "$OUT/serving-$i.json" 2>/dev/null
  python - "$OUT" "$i" "$cal" <<'PY'
import json, sys
out, i, cal = sys.argv[1:]
p = json.load(open(f"{out}/llama-profile-{i}.json"))
h = p["fit"]["heldout"]
v = json.load(open(f"{out}/serving-{i}.json"))
m = v["median_row"]
row = next(r for r in v["rows"] if r["rate_per_s"] == m["rate_per_s"] and r["policy"] == m["policy"])
th, tp = row["throughput"][2], row["tpot_p50_s"][2]
e = v["median_abs_err"]
met = abs(th) <= 0.05 and abs(tp) <= 0.10
print(f"clone {i}: calibrate {cal} s, {v['threads']} threads, held out {100 * h['median_abs_err']:.1f} %"
      f"{'' if p['trust']['trusted'] else ' (untrusted)'}; median row {m['rate_per_s']:g}/s {m['policy']}: "
      f"throughput {100 * th:+.1f} %, TPOT p50 {100 * tp:+.1f} % ({'met' if met else 'missed'}); over the rows "
      f"{100 * e['throughput']:.1f} / {100 * e['tpot_p50_s']:.1f} %", flush=True)
PY
}

bench_clone() {  # $1: clone number
  local i=$1 start took
  pip install -q -e '.[hf]' >/dev/null 2>&1
  start=$(date +%s)
  python benchmarks/bench_clients.py llama "$OUT/bench-$i" --client "${CLIENT:-guidellm}" > "$OUT/bench-$i.log" 2>&1
  specsim validate --against "$OUT/bench-$i/manifest.toml" --plot "$OUT/bench-$i" > "$OUT/bench-$i/validate.txt" 2>&1
  specsim validate --against "$OUT/bench-$i/manifest.toml" --json > "$OUT/bench-$i/validate.json" 2>/dev/null
  took=$(( $(date +%s) - start ))
  python - "$OUT/bench-$i/validate.json" "$i" "$took" <<'PY'
import json, sys
path, i, took = sys.argv[1:]
v = json.load(open(path))
g, e = v["goal"], v["median_abs_err"]
judged = [r for r in v["rows"] if not r["fit"] and not r["saturated"]]
cells = ", ".join(f"{r['policy']} {r['rate_per_s']:.3g}/s {100 * r['throughput'][2]:+.1f} / {100 * r['tpot_p50_s'][2]:+.1f} %"
                  for r in judged)
every = g["met"] == g["judged_below_saturation"] and g["judged_below_saturation"] > 0
print(f"clone {i}: {took} s; goal met on {g['met']} of {g['judged_below_saturation']} judged runs below saturation "
      f"({'every one' if every else 'missed: ' + ', '.join(g['misses'])}); throughput / TPOT p50: {cells}; median "
      f"over the judged runs {100 * e['throughput']:.1f} / {100 * e['tpot_p50_s']:.1f} %", flush=True)
PY
}

for i in $(seq 1 "$N"); do
  dir=$(mktemp -d /tmp/fresh-clone-XXXX)
  git clone -q "$REPO" "$dir/specsim"
  (
    cd "$dir/specsim"
    export HOME="$dir/home" XDG_CACHE_HOME="$dir/home/.cache"
    mkdir -p "$HOME"
    python3 -m venv .venv && . .venv/bin/activate
    pip install -q torch==2.13.0 >/dev/null 2>&1
    "${ENGINE}_clone" "$i"
  ) | tee -a "$OUT/summary.txt"
  rm -rf "$dir"
done
echo "results in $OUT"
