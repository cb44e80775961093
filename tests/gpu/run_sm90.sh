#!/bin/bash
# Dev loop for the sm90 (wgmma, sm_90a) forward template.
#   tests/gpu/run_sm90.sh build   here (nvcc, no GPU needed): .carry-sm90/sm90_harness for
#                                 sm_90a, CUDA runtime linked statically, plus the ptxas report
#   tests/gpu/run_sm90.sh run     on the H200 (carry .carry-sm90): SASS check (HGMMA), full
#                                 correctness grid, compute-sanitizer memcheck + racecheck on a
#                                 reduced grid, timing, then torch SDPA flash/cuDNN on the same
#                                 shapes in the same call; table last
#   tests/gpu/run_sm90.sh ws-build  here: .carry-ws/sm90_ws_harness, or $WS_OUT (warp-
#                                 specialized kernels, sm90/fwd_ws_kernel.cuh, beside the
#                                 cp.async defaults)
#   tests/gpu/run_sm90.sh ws      on the H200 (carry .carry-ws), one call of at most ~200 s:
#                                 SASS (HGMMA, TMA, setmaxnreg), full check grid, timing twice at
#                                 2k/8k/16k, SDPA flash/cuDNN, sanitizers on the reduced grid
#   tests/gpu/run_sm90.sh trace-build  here: .carry-ws/ws_trace, or $TRACE_OUT
#                                 (tests/gpu/ws_trace.cu: the sm90ws kernels with
#                                 -DFAGEN_WS_TRACE, clock64 at each tile's events); run it on the
#                                 H200: .carry-ws/ws_trace [--seqlens ...]
#   tests/gpu/run_sm90.sh hd256   on the H200, one call of at most ~135 s (issue 5): checks of the
#                                 hd 256 kernels and the hd 64/128 defaults, timing of hd 256
#                                 (2k, 8k, 16k) beside the portable template's default and SDPA
#                                 flash/cuDNN, sanitizers on the hd 256 candidate; table last
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fagen-sm90}
mkdir -p "$OUT"
bin=.carry-sm90/sm90_harness
build_harness() { # $1 source, $2 binary
  nvcc -std=c++17 -O3 --diag-error 20011,20013 -gencode arch=compute_90a,code=sm_90a -I . -I templates -I templates/common \
    -I check -I runtime/src --cudart static -Xcompiler -pthread -Xptxas -v "$1" \
    -o "$2" 2>&1 | tee "$2.ptxas.log" |
    grep -E "Compiling entry|spill|Used|warn|error" | sed 's/ptxas info *: //' | paste - - - |
    sed -E "s/Compiling entry function '([a-z0-9_]+)'.*stack frame, ([0-9]+) bytes spill stores.*Used ([0-9]+) registers.*/\1 regs=\3 spill=\2/" |
    grep fagen_ | tee "$2.regs.txt"
  grep -iE "warn|C7508|serializ" "$2.ptxas.log" || true
}
# compute-sanitizer on the reduced check grid of harness $1, logs into folder $2, one run per
# further argument "TOOL FILTER", each while left() (the mode's deadline) leaves >= 8 s.
sanitize() {
  local bin=$1 logs=$2 run tool filter t n=0
  shift 2
  command -v compute-sanitizer >/dev/null || return 0
  for run in "$@"; do
    tool=${run%% *} filter=${run#* } n=$((n + 1)) t=$(left)
    if [ "$t" -lt 8 ]; then echo "sanitizer $tool $filter: skipped (time)"; continue; fi
    timeout $((t - 3)) compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin" --check \
      --reduced --filter "$filter" >"$logs/sanitizer_${n}_$tool.log" 2>&1 || status=1
    echo "sanitizer $tool $filter: $(grep -E "SUMMARY" "$logs/sanitizer_${n}_$tool.log" | tr '\n' ' ')"
  done
}
# Every timed kernel of bench log $1 with its TFLOP/s, and again from log $2, sorted by shape.
bench_table() {
  awk '/^BENCH/ { sub(/seqlen= +/, "seqlen="); k = $2 " " $3 " " $4 " " $5; if (FILENAME == ARGV[2]) b[k] = $8; else a[k] = $8 }
    END { for (k in a) print k, a[k], b[k] }' "$1" "$2" |
    sed -e 's/fagen_fwd_//' -e 's/hd=//' -e 's/causal=//' -e 's/seqlen= *//' |
    sort -k1,1n -k2,2n -k3,3n -k5,5nr
}
case "${1:-}" in
ws-build)
  out="${WS_OUT:-.carry-ws/sm90_ws_harness}"
  mkdir -p "$(dirname "$out")"
  build_harness tests/gpu/sm90_ws_harness.cu "$out"
  ;;
trace-build)
  out="${TRACE_OUT:-.carry-ws/ws_trace}"
  mkdir -p "$(dirname "$out")"
  build_harness tests/gpu/ws_trace.cu "$out"
  ;;
ws)
  export PYTHONUNBUFFERED=1
  bin=.carry-ws/sm90_ws_harness
  t0=$(date +%s)
  work=$(mktemp -d)
  left() { echo $(( ${DEADLINE_S:-200} - ($(date +%s) - t0) )); }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv || true
  status=0
  if command -v cuobjdump >/dev/null; then
    cuobjdump --dump-sass "$bin" 2>&1 | awk '/Function : / { f = $3 } f ~ /fagen/ {
        h[f] += /HGMMA/; t[f] += /UTMALDG/; r[f] += /USETMAXREG/; l[f] += /LDL|STL/ }
      END { for (f in h) printf "SASS %s HGMMA %d UTMALDG %d USETMAXREG %d LDL+STL %d\n", f, h[f], t[f], r[f], l[f] }' |
      sort | tee "$work/sass.txt"
  fi
  timeout 90 "$bin" --check ${WS_FILTER:+--filter "$WS_FILTER"} >"$work/check.log" 2>&1 || status=1
  grep -E "FAIL|device|failed" "$work/check.log" | head -n 20
  grep SUMMARY "$work/check.log" || echo "CHECK did not finish (rc $status)"
  tail -n 3 "$work/check.log"
  for rep in bench again; do
    timeout 40 "$bin" --bench --seqlens ${WS_SEQLENS:-2048,8192,16384} ${WS_FILTER:+--filter "$WS_FILTER"} \
      --csv "$work/fagen_$rep.csv" >"$work/$rep.log" 2>&1 || status=1
  done
  timeout 50 python3 -c "import sys; sys.path.insert(0, 'tests/gpu'); import sdpa_bench as b
b.SHAPES = [(hd, s) for hd in (64, 128, 256) for s in (${WS_SEQLENS:-2048,8192,16384},)]
sys.argv = ['sdpa_bench.py', '$work/table.csv', 'new=$work/fagen_bench.csv', 'again=$work/fagen_again.csv']
b.main()" >"$work/table.txt" 2>&1 || true
  # WS_SANITIZE: "TOOL FILTER;TOOL FILTER;..."
  IFS=';' read -ra runs <<<"${WS_SANITIZE:-racecheck bf16_hd128_causal_m128n128s2_pp;memcheck bf16_hd128_causal_m128n128s2_pp;racecheck bf16_hd64_nomask_m192n128s2_pp_pers}"
  sanitize "$bin" "$work" "${runs[@]}"
  bench_table "$work/bench.log" "$work/again.log" >"$work/bench_all.txt"
  tar czf "$OUT/ws.tgz" -C "$work" .
  cat "$work/bench_all.txt"
  sed 's/fagen_fwd_//' "$work/table.txt"
  grep SUMMARY "$work/check.log" || true
  exit $status
  ;;
build)
  mkdir -p .carry-sm90
  build_harness tests/gpu/sm90_harness.cu "$bin"
  ;;
run)
  # One device call of at most ~190 s: correctness, timing and the SDPA table first, the
  # sanitizers with whatever time is left (DEADLINE_S from the start), the table again last.
  export PYTHONUNBUFFERED=1
  t0=$(date +%s)
  left() { echo $(( ${DEADLINE_S:-190} - ($(date +%s) - t0) )); }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv || true
  status=0
  if command -v cuobjdump >/dev/null; then
    cuobjdump --dump-sass "$bin" >"$OUT/sass.txt" 2>&1 || true
    echo "SASS: HGMMA $(grep -c HGMMA "$OUT/sass.txt") HMMA $(grep -c ' HMMA' "$OUT/sass.txt")" \
      "LDL $(grep -c 'LDL' "$OUT/sass.txt") STL $(grep -c 'STL' "$OUT/sass.txt")"
  fi
  timeout 110 "$bin" --check >"$OUT/check.log" 2>&1 || status=1
  grep -E "FAIL|device" "$OUT/check.log" | head -n 30
  grep SUMMARY "$OUT/check.log" || echo "CHECK did not finish (rc $status)"
  timeout 40 "$bin" --bench --seqlens 2048,16384 --csv "$OUT/fagen_bench.csv" >"$OUT/bench.log" 2>&1 || status=1
  timeout 30 "$bin" --bench --seqlens 2048,16384 --csv "$OUT/fagen_again.csv" >"$OUT/bench_again.log" 2>&1 || true
  timeout 60 python3 tests/gpu/sdpa_bench.py - new="$OUT/fagen_bench.csv" again="$OUT/fagen_again.csv" \
    >"$OUT/table.txt" 2>&1 || true
  sanitize "$bin" "$OUT" "memcheck bf16_hd128_causal_m128n128s2" \
    "racecheck bf16_hd128_causal_m128n128s2" "racecheck bf16_hd64_nomask_m128n128s3" \
    "memcheck bf16_hd64_causal_m64n128s2_e25d3" "racecheck bf16_hd64_causal_m64n128s2_e25d3"
  grep -vE "^ *256 |8192|4096" "$OUT/table.txt" | sed 's/fagen_fwd_sm90_//'
  grep SUMMARY "$OUT/check.log" || true
  exit $status
  ;;
hd256)
  # Logs under $work, packed into $OUT/hd256.tgz at the end (at most 8 files come back).
  export PYTHONUNBUFFERED=1
  t0=$(date +%s)
  work=$(mktemp -d)
  left() { echo $(( ${DEADLINE_S:-132} - ($(date +%s) - t0) )); }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv || true
  status=0
  if command -v cuobjdump >/dev/null; then
    # Per hd 256 kernel: wgmma count and local-memory traffic (spills).
    cuobjdump --dump-sass "$bin" 2>&1 | awk '/Function : / { f = $3 } f ~ /hd256/ {
        h[f] += /HGMMA/; l[f] += /LDL|STL/ }
      END { for (f in h) printf "SASS %s HGMMA %d LDL+STL %d\n", f, h[f], l[f] }' |
      sort | tee "$work/sass_hd256.txt"
  fi
  defaults='bf16_hd64_nomask_m64n128s2$,bf16_hd64_causal_m64n128s2$,bf16_hd128_nomask_m128n128s2$'
  defaults="$defaults,bf16_hd128_causal_m128n128s2\$,bf16_hd128_causal_m64n64s2\$,f16_hd64_,f16_hd128_nomask_m128n128s2\$"
  defaults="$defaults,f16_hd128_causal_m128n128s2\$"
  timeout 60 "$bin" --check --filter "hd256,_ra$,$defaults" >"$work/check.log" 2>&1 || status=1
  grep -E "FAIL|device" "$work/check.log" | head -n 20
  grep SUMMARY "$work/check.log" || echo "CHECK did not finish (rc $status)"
  bench_filter='hd256,bf16_hd128_nomask_m128n128s2,bf16_hd128_causal_m128n128s2'
  timeout 20 "$bin" --bench --seqlens 2048,8192,16384 --filter "$bench_filter" \
    --csv "$work/fagen_bench.csv" >"$work/bench.log" 2>&1 || status=1
  timeout 20 "$bin" --bench --seqlens 2048,8192,16384 --filter "$bench_filter" \
    --csv "$work/fagen_again.csv" >"$work/bench_again.log" 2>&1 || true
  # sdpa_bench.py on the hd 256 shapes (its own list has hd 256 at 8k only).
  timeout 40 python3 -c "import sys; sys.path.insert(0, 'tests/gpu'); import sdpa_bench as b
b.SHAPES = [(128, 2048), (128, 16384), (256, 2048), (256, 8192), (256, 16384)]
sys.argv = ['sdpa_bench.py', '$work/table.csv', 'new=$work/fagen_bench.csv', 'again=$work/fagen_again.csv']
b.main()" >"$work/table.txt" 2>&1 || true
  sanitize "$bin" "$work" "racecheck bf16_hd256_causal_m128n80s2$" \
    "memcheck bf16_hd256_causal_m128n80s2$" "racecheck bf16_hd256_nomask_m128n64s2$"
  # Every timed kernel: TFLOP/s, then the same binary again.
  bench_table "$work/bench.log" "$work/bench_again.log" | tee "$work/bench_all.txt"
  tar czf "$OUT/hd256.tgz" -C "$work" .
  cp "$work/table.txt" "$work/check.log" "$OUT/" 2>/dev/null || true
  sed 's/fagen_fwd_sm90_//' "$work/table.txt"
  grep SUMMARY "$work/check.log" || true
  exit $status
  ;;
*)
  echo "usage: $0 build|run|hd256|ws-build|ws" >&2
  exit 2
  ;;
esac
