#!/usr/bin/env bash
# The split-KV decode and fagen_merge_states on a GPU (issue 34, part 1). Prepare here with
# `scripts/gpu-prepare` (builds fagen, libfagen_rt.so, .carry/decode.fab from
# tests/gpu/check-decode.yaml and .carry/bench-decode.fab from bench/bench-decode.yaml), then run
# this on the GPU machine with .carry carried. About 3 minutes on an H100; prints a short table
# last, and exits 1 if a step failed.
#   1. fagen check .carry/decode.fab: every decode kernel on the decode grid (1..16 query tokens,
#      1 to 16k keys, GQA 4:1 and 7:1, MQA, batches, rows without keys), each case with one
#      split (O written by the kernel) and with the planned splits and their combine, against
#      the float64 reference.
#   2. fagen check --nonfinite (NaN in K, V, Q and +Inf in Q: docs/numerics.md's rules, with the
#      planned splits), and tests/gpu/merge_check.py: fagen_run_merge_states against a float64
#      merge (-inf and NaN rows, a permuted layout).
#   3. compute-sanitizer: memcheck on the quick grid of every kernel, racecheck on two.
#   4. bench/bench_decode.py: fagen vs SDPA flash and cuDNN, TB/s and % of the copy bandwidth,
#      (--paged) the paged kernel beside the contiguous one, and (--kernel-times) each small
#      cell's kernels' device times and fagen's time with one split.
# With .carry/paged.fab (tests/gpu/check-paged.yaml, issue 34 part 2): fagen check of the paged
# decode kernels (uneven cache lengths, shared and shuffled pages, bad entries reported, paged
# == contiguous bitwise) and memcheck on its quick grid (the bad-entry runs included), and
# tests/gpu/append_check.py (decode with an append: every paged decode kernel; memcheck and
# racecheck on one).
# About 3 more minutes. With .carry/paged90a.fab (the same spec for sm_90a: its chunked prefill on
# the sm90ws forward): fagen check of its paged forwards, memcheck on them, racecheck on the
# gather (16-token pages) and the TMA-page form (256).
set -uo pipefail
cd "$(dirname "$0")/../.."
C=${CARRY:-.carry}
OUT=${OUT:-/tmp/fagen-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FAGEN_RT_LIB=$C/libfagen_rt.so PYTHONPATH=python
status=0
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv

step() { # name, log, command...: at most STEP_S seconds (240 by default)
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  if timeout --kill-after=10 "${STEP_S:-240}" "$@"; then summary+=("$(printf '%-26s ok   (%ds)' "$name" $((SECONDS - t0)))")
  else
    summary+=("$(printf '%-26s FAIL (%ds)' "$name" $((SECONDS - t0)))"); status=1
    echo "--- $name failed; the last lines of $log:"; tail -n 12 "$log" 2>/dev/null | cut -c1-300
  fi
}

for f in fagen libfagen_rt.so decode.fab bench-decode.fab; do
  [ -f "$C/$f" ] || { echo "no $C/$f: run scripts/gpu-prepare first"; exit 1; }
done
step "check decode" "$OUT/check-decode.log" bash -c "$C/fagen check $C/decode.fab >$OUT/check-decode.log 2>&1"
tail -n 1 "$OUT/check-decode.log"
grep -E "MISMATCH|CUDA error|FAIL" "$OUT/check-decode.log" | cut -c1-300 | head -20
if [ -f "$C/paged.fab" ]; then
  step "check paged" "$OUT/check-paged.log" bash -c "$C/fagen check $C/paged.fab >$OUT/check-paged.log 2>&1"
  tail -n 1 "$OUT/check-paged.log"
  grep -E "MISMATCH|CUDA error|FAIL|NOT reported|differ" "$OUT/check-paged.log" | cut -c1-300 | head -20
  step "append (paged decode)" "$OUT/append.log" bash -c "python3 tests/gpu/append_check.py --bundle $C/paged.fab --bundle $C/bench-decode.fab >$OUT/append.log 2>&1"
  tail -n 1 "$OUT/append.log"
  grep -E "^FAIL" "$OUT/append.log" | cut -c1-300 | head -20
fi
if [ -f "$C/paged90a.fab" ]; then
  step "check paged sm90ws" "$OUT/check-paged90a.log" bash -c "$C/fagen check $C/paged90a.fab --kernel varlen_paged >$OUT/check-paged90a.log 2>&1"
  tail -n 1 "$OUT/check-paged90a.log"
  grep -E "MISMATCH|CUDA error|FAIL" "$OUT/check-paged90a.log" | cut -c1-300 | head -20
  if command -v compute-sanitizer >/dev/null; then
    step "sanitizers paged sm90ws" "$OUT/sanitizer-paged90a.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $C/fagen check $C/paged90a.fab --quick --kernel paged16_sm90ws >$OUT/sanitizer-paged90a.log 2>&1 && compute-sanitizer --tool racecheck --error-exitcode 3 $C/fagen check $C/paged90a.fab --quick --kernel paged16_sm90ws >>$OUT/sanitizer-paged90a.log 2>&1 && compute-sanitizer --tool racecheck --error-exitcode 3 $C/fagen check $C/paged90a.fab --quick --kernel paged256_sm90ws >>$OUT/sanitizer-paged90a.log 2>&1"
    grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-paged90a.log"
  fi
fi
step "check NaN/Inf inputs" "$OUT/check-decode-nonfinite.log" bash -c "$C/fagen check $C/decode.fab --nonfinite >$OUT/check-decode-nonfinite.log 2>&1"
tail -n 1 "$OUT/check-decode-nonfinite.log"
step "merge_states" "$OUT/merge.log" bash -c "python3 tests/gpu/merge_check.py $C/decode.fab >$OUT/merge.log 2>&1"
tail -n 1 "$OUT/merge.log"
if command -v compute-sanitizer >/dev/null; then
  step "memcheck (quick grid)" "$OUT/sanitizer-decode.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $C/fagen check $C/decode.fab --quick >$OUT/sanitizer-decode.log 2>&1"
  step "racecheck (quick, 2 kernels)" "$OUT/racecheck-decode.log" bash -c "compute-sanitizer --tool racecheck --error-exitcode 3 $C/fagen check $C/decode.fab --quick --kernel hd128_causal_sm80decode >$OUT/racecheck-decode.log 2>&1 && compute-sanitizer --tool racecheck --error-exitcode 3 $C/fagen check $C/decode.fab --quick --kernel hd64_window >>$OUT/racecheck-decode.log 2>&1"
  [ -f "$C/paged.fab" ] && step "memcheck paged (quick)" "$OUT/sanitizer-paged.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $C/fagen check $C/paged.fab --quick >$OUT/sanitizer-paged.log 2>&1" && grep -E "ERROR SUMMARY" "$OUT/sanitizer-paged.log" | tail -1
  [ -f "$C/paged.fab" ] && step "memcheck append (quick)" "$OUT/sanitizer-append.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 python3 tests/gpu/append_check.py --bundle $C/paged.fab --quick >$OUT/sanitizer-append.log 2>&1 && compute-sanitizer --tool racecheck --error-exitcode 3 python3 tests/gpu/append_check.py --bundle $C/paged.fab --quick >>$OUT/sanitizer-append.log 2>&1" && grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-append.log" | tail -2
  step "memcheck merge_states" "$OUT/sanitizer-merge.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 python3 tests/gpu/merge_check.py $C/decode.fab >$OUT/sanitizer-merge.log 2>&1"
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-decode.log" "$OUT/racecheck-decode.log" "$OUT/sanitizer-merge.log"
fi
step "bench decode" "$OUT/bench-decode.log" bash -c "python3 bench/bench_decode.py --bundle $C/bench-decode.fab --out $OUT/bench-decode.json ${BENCH_DECODE_ARGS:---paged --kernel-times} >$OUT/bench-decode.log 2>&1"
sed -n '/^copy bandwidth/,$p' "$OUT/bench-decode.log"
echo
printf '%s\n' "${summary[@]}"
exit $status
