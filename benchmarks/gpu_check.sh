#!/usr/bin/env bash
# The GPU check, one prepared run on one lent GPU (budget: at most 8 minutes), writing every log, profile, JSON and
# plot into one folder ($OUT, or the first argument):
#   1. calibrate the built-in pair on CUDA (graphs; quick grid up to batch 64) and time it;
#   2. validate it: batch 1..64, k 1, 2, 4, 6 and the tree 2,2,1, against real runs;
#   3. calibrate the llama-3.1-8b / llama-3.2-1b shapes over batch 1..256:x2 and contexts 128, 1024 (random
#      weights drawn on the device) and time it;
#   4. predict from that profile beside the h200 preset, and validate it at those shapes with EAGLE-3's ShareGPT
#      acceptance replayed (the hidden-chain model `specsim acceptance fit` chose for that trace: no file needed);
#   5. served streams against their simulation (`validate --serving --quick`): the built-in pair, and the 8B / 1B
#      shapes with EAGLE-3's acceptance replayed (off, fixed:4, adaptive at four rates to past saturation);
#   2b. real steps against the passes timed alone, and what the profile prices (benchmarks/gpu_steps.py);
#   6. exactness on the device; last, what a served prefill and a served step cost, eager and replayed
#      (benchmarks/gpu_prefill.py, skipped when the budget is spent); then a summary of the figures
#      (benchmarks/gpu_report.py: each served row's step and prefill pieces and the served loop's own work too).
#
# The device machine has no package registry: simpy travels as a wheel. Before the call, here, once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 --platform any -d .whl simpy==4.1.1
# and run with the device tool, carry [".whl"], timeout_s 585, command (a device call returns at most 8 files, so
# the folder travels back as one archive, written even when a step is stopped):
#   BUDGET_S=520 bash benchmarks/gpu_check.sh /tmp/gc; tar czf $OUT/gpu-check.tgz -C /tmp gc; cp /tmp/gc/summary.txt $OUT
# Measured on the first H200 run (2026-12-04): calibrations 31 and 72 s, validate 63 s, exactness 10 s, the shapes'
# validation 88 s at 2 repeats; the served streams at 96 requests ran past 60 s caps (a graph captured per batch and
# keys read before anything is timed), hence their smaller sizes here. The second lease: 43 / 73 s, 78 s, 14 s,
# 82 s; the served streams 56 s and, at the 8B shapes, past the 90 s cap (its stream done at 68 s, its 16-seed
# simulations after), hence its 130 s cap now; gpu_prefill.py took 24 s.
#
# The same script runs the plumbing on a CPU in a few minutes (no GPU figures, tiny grids; 2-core CPU: see the
# closing line of its log):
#   DEVICE=cpu SMALL=1 bash benchmarks/gpu_check.sh /tmp/gpu-check
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-${OUT:-out/gpu-check}}"
DEVICE="${DEVICE:-cuda}"
SMALL="${SMALL:-0}"
mkdir -p "$OUT"
T0=$(date +%s)
LOG="$OUT/log.txt"
: > "$LOG"
# Profiles the run writes without --out land in a cache of its own, removed when the script ends however it ends.
CACHE="$(mktemp -d "${TMPDIR:-/tmp}/specsim-gpu-check-cache.XXXXXX")"
trap 'rm -rf "$CACHE"' EXIT
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME="$CACHE"

if ! python3 -c "import simpy" 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
  else
    echo "simpy is missing and no .whl/ folder came with the call (see the header of this script)" | tee -a "$LOG"
    exit 2
  fi
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
SPECSIM="python3 specsim.py"

# With BUDGET_S set, every step is stopped at its cap (third argument, seconds) or where the whole run would pass
# BUDGET_S, whichever is first, and a step with under 10 s left is skipped: one slow step cannot eat the lease that
# the later ones need (a stopped step records exit 124).
BUDGET_S="${BUDGET_S:-0}"
step() {  # step NAME 'COMMAND' [CAP_S]: run it (stdout and stderr to the log unless it redirects), record the time
  local name="$1" cmd="$2" cap="${3:-0}"
  local runner=(bash -c "$cmd")
  if [ "$BUDGET_S" -gt 0 ]; then
    local left=$(( T0 + BUDGET_S - $(date +%s) ))
    if [ "$cap" -le 0 ] || [ "$cap" -gt "$left" ]; then cap=$left; fi
    if [ "$cap" -lt 10 ]; then
      echo "=== $name: skipped, ${left} s of the budget left" | tee -a "$LOG"
      echo "$name 125 0" >> "$OUT/times.txt"
      return
    fi
    runner=(timeout --kill-after=5 "$cap" bash -c "$cmd")
  fi
  echo "=== $name: $cmd" | tee -a "$LOG"
  local t0; t0=$(date +%s%N)
  "${runner[@]}" >> "$LOG" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "=== $name: exit $rc, $ms ms" | tee -a "$LOG"
  echo "$name $rc $ms" >> "$OUT/times.txt"
}

{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,power.draw,driver_version --format=csv 2>&1 || true
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
} >> "$LOG" 2>&1
: > "$OUT/times.txt"

if [ "$SMALL" = 1 ]; then
  # Plumbing only: every step runs once at the smallest size that exercises its code (the figures mean nothing).
  BUILTIN_BATCH=1,2; VALIDATE="--batch 1,2 --k 4 --tree 2,1 --repeats 1 --tokens 8"
  REAL="--target llama-68m --draft llama-68m --batch 1,2 --context 64"; PRED_BATCH=1..4:x2; SAMPLES=500
  SHAPES="--batch 1 --k 2 --repeats 1 --tokens 8 --prompt-tokens 16"
  SERVE="--requests 6 --max-batch 2 --rate 50 --policy off,fixed:2 --passes 1 --output-tokens 4..8"
  SERVE_SHAPES="--requests 6 --max-batch 2 --rate 50 --policy off,adaptive --passes 1 --prompt-tokens 16..32 \
    --output-tokens 4..8"
else
  BUILTIN_BATCH=1..64:x2; VALIDATE="--batch 1,2,4,8,16,32,64 --k 1,2,4,6 --tree 2,2,1 --repeats 3 --tokens 48"
  REAL="--target llama-3.1-8b --draft llama-3.2-1b --batch 1..256:x2 --context 128,1024"; PRED_BATCH=1..256:x2
  SAMPLES=20000; SHAPES="--batch 1,8,32 --k 1,2,4 --repeats 2 --tokens 48 --prompt-tokens 512"
  SERVE="--requests 32 --max-batch 16 --policy off,adaptive --passes 1 --output-tokens 32..64"
  SERVE_SHAPES="--requests 24 --max-batch 16 --policy off,adaptive --passes 1 --prompt-tokens 128..256 \
    --output-tokens 32..64"
fi
EAGLE_SHAREGPT="hmm:0.8817,0.6407,0.07342/0.903,0.04214,0.05489/0.06914,0.6495,0.2814/0.0001,0.9998,0.0001"

step calibrate-builtin "$SPECSIM calibrate --device $DEVICE --quick --batch $BUILTIN_BATCH --out $OUT/builtin-profile.json" 110
step validate "$SPECSIM validate --profile $OUT/builtin-profile.json $VALIDATE --plot $OUT --json > $OUT/validate.json" 90
step steps "python3 benchmarks/gpu_steps.py --device $DEVICE --batches $([ "$SMALL" = 1 ] && echo 1,4 --steps 12 || echo 1,8,64) \
  --profile $OUT/builtin-profile.json > $OUT/steps.txt" 40
step exactness "$SPECSIM exactness --device $DEVICE --samples $SAMPLES --k 1,4 --tree 2,2" 45
step calibrate-real "$SPECSIM calibrate --device $DEVICE --quick $REAL --out $OUT/real-profile.json" 170
step predict-profile "$SPECSIM predict --profile $OUT/real-profile.json --acceptance iid:0.7 --batch $PRED_BATCH \
  --k 0..6 --context 1024" 25
step predict-preset "$SPECSIM predict --hardware h200 --acceptance iid:0.7 --batch $PRED_BATCH --k 0..6 --context 1024" 25
step validate-shapes "$SPECSIM validate --profile $OUT/real-profile.json --acceptance '$EAGLE_SHAREGPT' --tree '' \
  $SHAPES --json > $OUT/validate-shapes.json" 110
step validate-serving "$SPECSIM validate --profile $OUT/builtin-profile.json --serving --quick $SERVE \
  --time-cap-s 20 --plot $OUT --json > $OUT/validate-serving.json" 75
step validate-serving-shapes "$SPECSIM validate --profile $OUT/real-profile.json --serving --quick \
  --acceptance '$EAGLE_SHAREGPT' $SERVE_SHAPES --time-cap-s 20 --json > $OUT/validate-serving-shapes.json" 130
step prefill "python3 benchmarks/gpu_prefill.py $([ "$DEVICE" = cpu ] && echo --device cpu --joins 3) > $OUT/prefill.txt" 45
python3 benchmarks/gpu_report.py "$OUT" | tee "$OUT/summary.txt"
echo "=== all steps: $(( $(date +%s) - T0 )) s" | tee -a "$LOG"
