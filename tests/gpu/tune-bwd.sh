#!/usr/bin/env bash
# `fagen tune` of backward kernels on a Hopper GPU (issue 32). Prepare here:
#   make build && mkdir -p .carry && cp build/fagen build/libfagen_rt.so .carry/
# then run this there with .carry carried. It
#   1. tunes tests/gpu/tune-bwd.yaml for sm_90a (the sm90ws backward: Q/dO stages, query walk,
#      dQ strategy)
#      and for sm_90 (the portable backward: tiles, warps, stages) into one database, compiling the
#      candidates there (nvcc of the GPU machine), at seqlens 2048 and 8192;
#   2. plans and builds the spec with the database (sm_90a and sm_90), shows which kernels took
#      tuned records, and runs `fagen check --quick` on the tuned bundles.
# Results in $OUT: tune.db (a rerun resumes from it), report-ARCH.svg, plan-ARCH.txt, tune.log.
# The tuner's summary tables, the tuned kernels, the checks and the timings last.
set -uo pipefail
cd "$(dirname "$0")/../.."
C=${CARRY:-.carry}
OUT=${OUT:-/tmp/fagen-tune-bwd}
mkdir -p "$OUT"
export FAGEN_CACHE_DIR=${FAGEN_CACHE_DIR:-/tmp/fagen-cache}
export PATH="$PATH:/usr/local/cuda/bin"
SPEC=tests/gpu/tune-bwd.yaml
db=$OUT/tune.db
log=$OUT/tune.log
status=0
summary=()
echo "nvcc: $(command -v nvcc) $(nvcc --version | tail -1)" | tee "$log"

for arch in sm_90a sm_90; do
  s=$SECONDS
  echo "=== fagen tune $SPEC --arch $arch" >>"$log"
  $C/fagen tune "$SPEC" --arch "$arch" --kernel bwd --shapes ${SHAPES:-2048,8192} -o "$db" \
    --report "$OUT/report-$arch.svg" ${TUNE_ARGS:-} >>"$log" 2>&1 || status=1
  summary+=("$(printf 'tune --arch %-7s %4d s' "$arch" $((SECONDS - s)))")
done

for arch in sm_90a sm_90; do
  echo "=== fagen plan/build --arch $arch --tuning" >>"$log"
  $C/fagen plan "$SPEC" --arch "$arch" --tuning "$db" >"$OUT/plan-$arch.txt" 2>>"$log" || status=1
  s=$SECONDS
  if $C/fagen build "$SPEC" --arch "$arch" --tuning "$db" -q -o "$OUT/tuned-$arch.fab" >>"$log" 2>&1; then
    $C/fagen inspect "$OUT/tuned-$arch.fab" | grep -E "^kernel|serves|tuning:" >>"$log"
    timeout 180 $C/fagen check "$OUT/tuned-$arch.fab" --quick >>"$log" 2>&1 || status=1
  else
    status=1
  fi
  summary+=("$(printf 'build+check --arch %-7s %4d s' "$arch" $((SECONDS - s)))")
  rm -f "$OUT/tuned-$arch.fab"
done
# The tuner's summary tables (default vs winner per bucket), the kernels the plans took from
# the database, the checks of the tuned bundles, the timings.
awk '/^workload / {p = 1} p && (/^$/ || /^fagen/ || /^===/) {p = 0} p' "$log"
for arch in sm_90a sm_90; do
  echo "tuned kernels, --arch $arch:"
  awk '/^kernel / {k = $2} /tuning=tuned/ {sub(/.*tuning=tuned /, ""); print "  " k ": " substr($0, 1, 60)}' \
    "$OUT/plan-$arch.txt"
done
grep -E "^fagen check:|^[0-9]+ passed, [0-9]+ failed" "$log"
printf '%s\n' "${summary[@]}"
exit $status
