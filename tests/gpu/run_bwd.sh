#!/bin/bash
# Dev loop for the sm80 backward template (tests/gpu/bwd_harness.cu).
#   tests/gpu/run_bwd.sh build        here (nvcc, no GPU needed): build-bwd/bwd_harness for sm_90
#                                     (the portable template runs on Hopper as its sm_90 build),
#                                     CUDA runtime linked statically, plus the ptxas report
#   tests/gpu/run_bwd.sh build90      here: build-bwd/bwd_harness_sm90 for sm_90a, the sm90ws
#                                     backward kernels beside the portable defaults at hd 64 and
#                                     128 (run it with BIN=build-bwd/bwd_harness_sm90); with
#                                     NVCC_FLAGS=-DFAGEN_WS_TRACE a build whose --trace prints
#                                     where each CTA's time goes (bwd_harness.cu's header)
#   tests/gpu/run_bwd.sh run [ARGS]   on the GPU machine (carry build-bwd): correctness of every
#                                     kernel, timing, then torch SDPA flash backward on the same
#                                     shapes (tests/gpu/bwd_bench.py); the ratio table last.
#                                     ARGS go to the harness (e.g. --filter hd128).
#   tests/gpu/run_bwd.sh sanitize     compute-sanitizer memcheck + racecheck on a default kernel
#                                     and on the every-variant kernel (few cases: ~100x slower)
#   CHECK="a b" DET=b tests/gpu/run_bwd.sh ab base a b
#                                     A/B of build-bwd/bwd_harness_{base,a,b} (template copies
#                                     built with FAGEN_TEMPLATES=.. NAME=bwd_harness_a): check a and
#                                     b, time the defaults of each in turn (DET: with the
#                                     deterministic ones), sanitize DET, SDPA beside them
#                                     (SANITIZE=0: no sanitizers, SANITIZE_LABELS="a b": these
#                                     instead of DET; SEQLEN=N: time only N; FILTER=a,b: these
#                                     kernels instead of the portable defaults, e.g. the sm90ws
#                                     ones of build90 binaries; ROUNDS=N: the labels timed in
#                                     turn N times, each kernel's median TFLOP/s reported;
#                                     BENCH_S: each timing run's limit, default 150 s; grouped
#                                     causal kernels time two grids, the second as NAME_gG)
#   tests/gpu/run_bwd.sh prof [HD SEQLEN CAUSAL]
#                                     ncu (full set, clocks left alone) on one main-kernel launch of
#                                     build-bwd/bwd_harness_${PROF:-base} (default tiles) and on
#                                     SDPA flash's (FA2's) backward kernel at the same shape
#                                     (default hd 128, 16k, not causal): details + SASS source pages
#   tests/gpu/run_bwd.sh profws [HD SEQLEN CAUSAL]
#                                     ncu sections (throughput of the SMs, shared memory, L2 and
#                                     DRAM, the pipes, warp stalls, the launch's grid, block and
#                                     registers; clocks left alone) of one sm90ws main-kernel
#                                     launch of build-bwd/bwd_harness_${PROF:-sm90} (build90's
#                                     binary; default tiles) and of cuDNN's backward
#                                     kernel at the same shape (default hd 128, 8k, not causal):
#                                     $OUT/{ours,cudnn}_details.txt, their headline lines printed
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fagen-bwd}
mkdir -p "$OUT"
bin=${BIN:-build-bwd/${NAME:-bwd_harness}}
case "${1:-}" in
build)
  mkdir -p build-bwd
  # FAGEN_TEMPLATES=/copy/of/templates NAME=bwd_harness_base builds a version to A/B against.
  /usr/local/cuda/bin/nvcc -std=c++17 -O3 --diag-error 20011,20013 -gencode arch=compute_90,code=sm_90 \
    -I "${FAGEN_TEMPLATES:-templates}" \
    --cudart static -Xcompiler -pthread -Xptxas -v ${NVCC_FLAGS:-} tests/gpu/bwd_harness.cu \
    -o "$bin" >"$bin.ptxas.log" 2>&1 || { grep -E "error" "$bin.ptxas.log"; exit 1; }
  grep -E "Compiling entry|spill|Used" "$bin.ptxas.log" | sed 's/ptxas info *: //' | paste - - - |
    sed -E "s/Compiling entry function '([a-z0-9_]+)'.*stack frame, ([0-9]+) bytes spill stores.*Used ([0-9]+) registers.*/\1 regs=\3 spill=\2/" |
    grep fagen_ | grep -v "_pre \|_post "
  ;;
build90)
  mkdir -p build-bwd
  bin=${BIN:-build-bwd/bwd_harness_sm90}
  /usr/local/cuda/bin/nvcc -std=c++17 -O3 --diag-error 20011,20013 -gencode arch=compute_90a,code=sm_90a -I . \
    -I "${FAGEN_TEMPLATES:-templates}" -I runtime/src -DFAGEN_HARNESS_SM90 -DFAGEN_HARNESS_SM90_ONLY \
    --cudart static -Xcompiler -pthread -Xptxas -v ${NVCC_FLAGS:-} tests/gpu/bwd_harness.cu \
    -o "$bin" >"$bin.ptxas.log" 2>&1 || { grep -E "error" "$bin.ptxas.log"; exit 1; }
  grep -E "Compiling entry|spill|Used" "$bin.ptxas.log" | sed 's/ptxas info *: //' | paste - - - |
    sed -E "s/Compiling entry function '([a-z0-9_]+)'.*stack frame, ([0-9]+) bytes spill stores.*Used ([0-9]+) registers.*/\1 regs=\3 spill=\2/" |
    grep fagen_ | grep -v "_pre \|_post "
  ;;
run)
  shift
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv || true
  status=0
  # Time limits: a deadlocked deterministic kernel must not eat the whole device call.
  timeout ${CHECK_S:-150} "$bin" --check "$@" 2>&1 | tee "$OUT/check.log" |
    grep -E "FAIL|SUMMARY|device" || status=1
  timeout ${BENCH_S:-150} "$bin" --bench --csv "$OUT/bwd_bench.csv" "$@" 2>&1 |
    tee "$OUT/bench.log" | tail -n 2 || status=1
  timeout ${SDPA_S:-120} python3 tests/gpu/bwd_bench.py "$OUT/bwd_bench.csv" "$OUT/table.csv" 2>&1 |
    tee "$OUT/table.txt" || status=1
  grep SUMMARY "$OUT/check.log"
  exit $status
  ;;
ab)
  # A/B of template versions built as build-bwd/bwd_harness_LABEL: the defaults timed in turn,
  # every LABEL in $CHECK checked first, then SDPA on the same shapes and the sanitizers.
  shift
  export PYTHONUNBUFFERED=1
  status=0
  defaults="hd64_none_sm80_m128n128w8s2,hd64_causal_sm80_m128n128w8s2,hd128_none_sm80_m64n128w8s2"
  defaults="$defaults,hd128_causal_sm80_m64n128w8s2,hd256_none_sm80_m64n64w8s2,hd256_causal_sm80_m64n64w8s2"
  # The checks run side by side (the CPU references are most of their time), then the timing.
  for label in $CHECK; do
    (rc=0
     timeout ${CHECK_S:-120} build-bwd/bwd_harness_$label --check >"$OUT/check_$label.log" 2>&1 || rc=$?
     echo $rc >"$OUT/check_$label.rc") &
  done
  wait
  for label in $CHECK; do
    [ "$(cat "$OUT/check_$label.rc")" = 0 ] || status=1
    echo "$label: rc $(cat "$OUT/check_$label.rc"), $(grep -c FAIL "$OUT/check_$label.log") FAIL, $(grep SUMMARY "$OUT/check_$label.log")"
  done
  echo "head_dim,causal,seqlen,kernel,ms,tflops,main_ms" >"$OUT/ab.csv"
  for round in $(seq "${ROUNDS:-1}"); do
    for label in "$@"; do
      f="${FILTER:-$defaults}"
      [ "$label" = "${DET:-}" ] && f="$f,_det_"
      rm -f "$OUT/b_$label.csv"
      timeout ${BENCH_S:-150} build-bwd/bwd_harness_$label --bench --filter "$f" --csv "$OUT/b_$label.csv" \
        ${SEQLEN:+--seqlen $SEQLEN} >"$OUT/bench_${label}_$round.log" 2>&1 || status=1
      [ -f "$OUT/b_$label.csv" ] && tail -n +2 "$OUT/b_$label.csv" | sed "s/,fagen_bwd_/,$label:/" >>"$OUT/ab.csv"
    done
  done
  if [ "${SANITIZE:-1}" = 1 ]; then
    for label in ${SANITIZE_LABELS:-${DET:-v4}}; do
      echo "sanitize $label"
      BIN=build-bwd/bwd_harness_$label tests/gpu/run_bwd.sh sanitize || status=1
    done
  fi
  timeout 60 python3 tests/gpu/bwd_bench.py "$OUT/ab.csv" "$OUT/table.csv" 2>&1 | tee "$OUT/table.txt"
  exit $status
  ;;
prof | profws)
  # prof: the portable kernel beside SDPA flash (FA2), ncu's full set, details and SASS pages;
  # profws: the sm90ws kernel beside cuDNN, a few sections, their headline lines printed.
  hd=${2:-128} causal=${4:-0}
  mask=none
  [ "$causal" = 1 ] && mask=causal
  if [ "$1" = prof ]; then
    seqlen=${3:-16384} family=sm80 ext=w8s2 bin=build-bwd/bwd_harness_${PROF:-base}
    other=fa2 other_kernel=dq_dk_dv backend=flash what=(--set full)
  else
    seqlen=${3:-8192} family=sm90ws ext=s2 bin=build-bwd/bwd_harness_${PROF:-sm90}
    other=cudnn other_kernel=bprop backend=cudnn
    what=(--section SpeedOfLight --section MemoryWorkloadAnalysis
          --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis
          --section WarpStateStats --section LaunchStats)
  fi
  case $hd in 64) tile=m128n128$ext ;; 128) tile=m64n128$ext ;; *) tile=m64n64$ext ;; esac
  kern=fagen_bwd_bf16_hd${hd}_${mask}_${family}_$tile
  rep=/tmp/fagen-prof
  mkdir -p $rep
  status=0
  timeout ${PROF_S:-120} ncu --clock-control none "${what[@]}" -k "regex:^$kern\$" --launch-skip 2 \
    --launch-count 1 -f -o $rep/ours "$bin" --bench --filter "$kern" --seqlen "$seqlen" \
    >$rep/ncu_ours.log 2>&1 || status=1
  timeout ${PROF_S:-120} ncu --clock-control none "${what[@]}" -k "regex:$other_kernel" \
    --launch-skip 1 --launch-count 1 -f -o $rep/$other python3 tests/gpu/bwd_bench.py --profile \
    "$hd" "$seqlen" "$causal" $backend >$rep/ncu_$other.log 2>&1 || status=1
  for r in ours $other; do
    [ -f $rep/$r.ncu-rep ] || { echo "no $r profile: $(tail -n 2 $rep/ncu_$r.log)"; continue; }
    ncu --import $rep/$r.ncu-rep --page details >"$OUT/${r}_details.txt" 2>&1 || status=1
    if [ "$1" = prof ]; then
      ncu --import $rep/$r.ncu-rep --page source --print-source sass --csv \
        >"$OUT/${r}_source.csv" 2>&1 || status=1
      tail -n 3 $rep/ncu_$r.log
    else
      echo "== $r ($hd, $seqlen, causal $causal)"
      pat="^  [a-zA-Z_]|Duration|Throughput|Shared|Bank|Issue Slots Busy|Executed Ipc A"
      grep -m 32 -E "$pat|Grid Size|Block Size|Registers Per" "$OUT/${r}_details.txt" || true
    fi
  done
  exit $status
  ;;
sanitize)
  status=0
  for run in "memcheck hd128_causal_sm80_m64n128w8s2 3" "racecheck hd128_causal_sm80_m64n128w8s2 2" \
             "memcheck hd64_window_softcap_drop_bsr128_varlen_det 1"; do
    set -- $run
    echo "compute-sanitizer $1 $2 (cases: $3)"
    timeout ${SANITIZE_S:-25} compute-sanitizer --tool $1 --error-exitcode 3 "$bin" --check \
      --cases $3 --filter $2 2>&1 | grep -E "ERROR SUMMARY|SUMMARY|FAIL" || status=1
  done
  exit $status
  ;;
*)
  echo "usage: $0 build|build90|run [ARGS]|ab LABELS|prof [HD SEQLEN CAUSAL]|profws [HD SEQLEN CAUSAL]|sanitize" >&2
  exit 2
  ;;
esac
