#!/usr/bin/env bash
# The tuner on the H200 (issue: `fagen tune`). Prepare here with `scripts/gpu-prepare`, run this
# there with .carry carried. It
#   1. tunes every example spec in specs/ into one database, timing each (the budget: all of
#      them within 10 minutes on one H200),
#   2. tunes bench/bench.yaml into the same database (shared workloads resume),
#   3. builds the benchmark bundle with the winners, and times default vs tuned vs SDPA flash
#      and cuDNN in one process (bench/bench_fwd.py).
# Results in $OUT: tuning.db, report.svg, tune.log, bench.json, bench.log. Short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
C=${CARRY:-.carry}
OUT=${OUT:-/tmp/fagen-tune}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FAGEN_RT_LIB=$C/libfagen_rt.so FAGEN_CACHE_DIR=${FAGEN_CACHE_DIR:-/tmp/fagen-cache}
export PATH="$PATH:/usr/local/cuda/bin"
ARCH=${ARCH:-sm_90}
db=$OUT/tuning.db
log=$OUT/tune.log
status=0
summary=()
echo "nvcc: $(command -v nvcc) $(nvcc --version | tail -1)" | tee -a "$log"

t0=$SECONDS
for spec in specs/*.yaml; do
  s=$SECONDS
  echo "=== fagen tune $spec --arch $ARCH" >>"$log"
  $C/fagen tune "$spec" --arch "$ARCH" -o "$db" ${TUNE_ARGS:-} >>"$log" 2>&1 || status=1
  summary+=("$(printf 'tune %-24s %4d s' "$(basename "$spec")" $((SECONDS - s)))")
done
summary+=("$(printf 'tune all example specs        %4d s (budget 600 s)' $((SECONDS - t0)))")

s=$SECONDS
echo "=== fagen tune bench/bench.yaml --arch $ARCH" >>"$log"
$C/fagen tune bench/bench.yaml --arch "$ARCH" -o "$db" --report "$OUT/report.svg" ${TUNE_ARGS:-} \
  >>"$log" 2>&1 || status=1
summary+=("$(printf 'tune bench/bench.yaml         %4d s' $((SECONDS - s)))")

if $C/fagen build bench/bench.yaml --arch "$ARCH" --tuning "$db" -q -o "$OUT/tuned.fab" >>"$log" 2>&1; then
  $C/fagen inspect "$OUT/tuned.fab" | grep -E "^kernel|serves|tuning:" >>"$log"
  if [ -z "${SKIP_BENCH:-}" ]; then
    python3 bench/bench_fwd.py --bundle "default=$C/bench.fab" --bundle "tuned=$OUT/tuned.fab" \
      --out "$OUT/bench.json" ${BENCH_ARGS:---head-dims 64,128 --seqlens 512,2048,8192} \
      >"$OUT/bench.log" 2>&1 || status=1
  fi
else
  status=1
fi
# The tuner's own summary of the benchmark spec: default vs winner per bucket.
awk '/^=== fagen tune bench/ {on = 1} on && /^workload / {p = 1} p && /^$/ {p = 0} p' "$log"
[ -f "$OUT/bench.log" ] && sed -n '/^hd  causal/,$p' "$OUT/bench.log"
printf '%s\n' "${summary[@]}"
rm -f "$OUT/tuned.fab"
exit $status
