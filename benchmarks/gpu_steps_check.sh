#!/usr/bin/env bash
# A short GPU check of the step's own work (a few minutes of a lease, after `gpu_check.sh` has run): calibrate the
# built-in pair, time real steps against the passes alone (`benchmarks/gpu_steps.py`, with what the profile prices),
# validate batch 1, 8, 64 x k 1, 4 and run the served stream's `off` rows. Same conventions as gpu_check.sh:
#   BUDGET_S=180 bash benchmarks/gpu_steps_check.sh /tmp/gs; tar czf $OUT/gpu-steps.tgz -C /tmp gs
# On a CPU (plumbing only): DEVICE=cpu SMALL=1 bash benchmarks/gpu_steps_check.sh /tmp/gs
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-out/gpu-steps}"
DEVICE="${DEVICE:-cuda}"
SMALL="${SMALL:-0}"
mkdir -p "$OUT"
CACHE="$(mktemp -d "${TMPDIR:-/tmp}/specsim-gpu-steps.XXXXXX")"
trap 'rm -rf "$CACHE"' EXIT
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME="$CACHE"
if ! python3 -c "import simpy" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
T0=$(date +%s)
step() {  # name, cap (s), command...
  local name=$1 cap=$2; shift 2
  local left=$(( ${BUDGET_S:-100000} - ($(date +%s) - T0) ))
  (( left < cap )) && cap=$left
  if (( cap < 10 )); then echo "=== $name: skipped (budget)" | tee -a "$OUT/log.txt"; return; fi
  echo "=== $name: $*" | tee -a "$OUT/log.txt"
  local t=$(date +%s%N)
  timeout "$cap" "$@" >> "$OUT/$name.txt" 2>&1
  echo "=== $name: exit $?, $(( ($(date +%s%N) - t) / 1000000 )) ms" | tee -a "$OUT/log.txt"
}
if [[ $SMALL == 1 ]]; then B=1,4; K=1,2; N=12; else B=1,8,64; K=1,4; N=40; fi
step calibrate 60 python3 specsim.py calibrate --device "$DEVICE" --quick --batch "$B" --out "$OUT/profile.json"
step steps 40 python3 benchmarks/gpu_steps.py --device "$DEVICE" --batches "$B" --steps "$N" --profile "$OUT/profile.json"
step validate 60 python3 specsim.py validate --profile "$OUT/profile.json" --batch "$B" --k "$K" --tree '' \
  --repeats 2 --tokens 48 --plot "$OUT"
step serving 60 python3 specsim.py validate --profile "$OUT/profile.json" --serving --quick --requests 32 \
  --max-batch 16 --policy off --passes 1 --output-tokens 32..64 --time-cap-s 20 --plot "$OUT"
tail -n 12 "$OUT"/steps.txt "$OUT"/validate.txt "$OUT"/serving.txt 2>/dev/null | tee "$OUT/summary.txt"
echo "=== all: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
