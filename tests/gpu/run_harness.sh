#!/bin/bash
# Dev loop for the sm80 forward template on a GPU machine.
#   tests/gpu/run_harness.sh build   here (nvcc, no GPU needed): .carry/fwd_harness for sm_90
#                                    (the portable template runs on Hopper as its sm_90 build),
#                                    CUDA runtime linked statically, plus the ptxas report
#   tests/gpu/run_harness.sh run     on the GPU machine (carry .carry): correctness, timing,
#                                    then torch SDPA flash/cuDNN on the same shapes; table last
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fagen-harness}
mkdir -p "$OUT"
case "${1:-}" in
build)
  # FAGEN_TEMPLATES=/copy/of/templates NAME=fwd_harness_base builds a baseline to A/B against.
  mkdir -p .carry
  templates=${FAGEN_TEMPLATES:-templates}
  nvcc -std=c++17 -O3 --diag-error 20011,20013 -gencode arch=compute_90,code=sm_90 -I "$templates" \
    -I "$templates/common" -I . -I check -I runtime/src --cudart static -Xcompiler -pthread -Xptxas -v \
    tests/gpu/fwd_harness.cu -o ".carry/${NAME:-fwd_harness}" 2>&1 | tee ".carry/${NAME:-fwd_harness}.ptxas.log" |
    grep -E "Compiling entry|spill|Used" | sed 's/ptxas info *: //' | paste - - - |
    sed -E "s/Compiling entry function '([a-z0-9_]+)'.*stack frame, ([0-9]+) bytes spill stores.*Used ([0-9]+) registers.*/\1 regs=\3 spill=\2/" |
    grep fagen_
  ;;
run)
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv || true
  status=0
  .carry/fwd_harness --check 2>&1 | tee "$OUT/check.log" | grep -E "FAIL|SUMMARY|device" || status=1
  # Out-of-bounds accesses and races on default kernels (all check cases).
  if command -v compute-sanitizer >/dev/null; then
    for run in "memcheck hd128_causal_m128n64w4s2" "racecheck hd128_causal_m128n64w4s2" \
               "racecheck hd64_nomask_m128n128w4s2"; do
      set -- $run
      timeout 120 compute-sanitizer --tool $1 --error-exitcode 3 .carry/fwd_harness --check \
        --filter $2 2>&1 | tail -n 2 || status=1
    done
  fi
  .carry/fwd_harness --bench --csv "$OUT/fagen_bench.csv" 2>&1 | tee "$OUT/bench.log" | tail -n 3
  # An older build to compare against in the same run (build it with FAGEN_TEMPLATES=... NAME=).
  versions="new=$OUT/fagen_bench.csv"
  if [ -x .carry/fwd_harness_base ]; then
    .carry/fwd_harness_base --bench --csv "$OUT/fagen_base.csv" >"$OUT/bench_base.log" 2>&1
    versions="$versions base=$OUT/fagen_base.csv"
  fi
  # The same build again: the spread between the two is the noise floor of a comparison.
  .carry/fwd_harness --bench --csv "$OUT/fagen_again.csv" >"$OUT/bench_again.log" 2>&1
  versions="$versions again=$OUT/fagen_again.csv"
  python3 tests/gpu/sdpa_bench.py "$OUT/table.csv" $versions
  grep SUMMARY "$OUT/check.log"
  exit $status
  ;;
*)
  echo "usage: $0 build|run" >&2
  exit 2
  ;;
esac
