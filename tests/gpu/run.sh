#!/usr/bin/env bash
# The GPU tier, on the H200 (or any NVIDIA GPU the bundles were built for). Prepare here with
# `scripts/gpu-prepare` (builds fagen, libfagen_rt.so and the bundles into .carry/), then run
# this on the GPU machine with .carry carried along. Prints a short table last.
#   1. fagen check: every kernel of tests/gpu/check.yaml vs the float64 reference, full grid,
#      and against the committed golden digests in tests/golden/check (a change of numerics
#      between commits fails it); then again (bitwise repeatability within the run).
#   2. compute-sanitizer memcheck and racecheck on a reduced grid.
#   3. bench/bench_fwd.py and bench/bench_bwd.py: fagen vs SDPA flash and cuDNN, forward (the
#      sm_90 and, with .carry/bench90a.fab, the sm_90a bundle) and backward (with the
#      deterministic kernels, and with dropout p 0.1), same inputs, one process.
#   4. bench/bench_variants.py (with .carry/bench-variants*.fab): dropout, block sparsity, varlen
#      and head dims 96/192/192x128, forward, both templates, vs SDPA flash and cuDNN.
#   With .carry/bwd90.fab (tests/gpu/check-bwd90.yaml): fagen check of the sm90ws backward on
#   every variant it serves, and memcheck on it.
#   With .carry/decode.fab (tests/gpu/check-decode.yaml): fagen check of the split-KV decode
#   kernels on the decode grid and memcheck on it (tests/gpu/decode_check.sh does more: the
#   merge of states, racecheck and the decode benchmark).
#   With .carry/variants.fab (tests/gpu/check-variants.yaml): fagen check on every variant,
#   forward and backward, against tests/golden/check-variants, and the sanitizers on it; with
#   .carry/nonfinite.fab
#   (tests/gpu/check-nonfinite.yaml): fagen check --nonfinite (docs/numerics.md); and
#   tests/gpu/varlen_guard.py on its varlen kernels (bad cu_seqlens write nothing outside the
#   outputs), plain and under memcheck.
# UPDATE_GOLDEN=1 (after a deliberate numerics change) runs only the golden steps: it rewrites
# the digests of both bundles that moved, checks them by a second run, and leaves them in
# tests/golden/ and $OUT/golden/ (to fetch from a remote machine; commit the diff).
# UPDATE_GOLDEN=check or UPDATE_GOLDEN=check-variants does one bundle (tests/golden/NAME).
set -uo pipefail
cd "$(dirname "$0")/../.."
C=${CARRY:-.carry}
OUT=${OUT:-/tmp/fagen-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FAGEN_RT_LIB=$C/libfagen_rt.so
status=0
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv

step() { # name, log, command... (each step at most STEP_S seconds, 600 by default: a hung
          # kernel, e.g. a deterministic backward waiting on a semaphore, fails its step, not the
          # run). A failed step prints its log's last lines (fagen check writes a line per case
          # as it ends, so a stall shows the case after the last one printed): the logs stay
          # in $OUT, which a remote machine may not hand back whole.
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  if timeout --kill-after=10 "${STEP_S:-600}" "$@"; then summary+=("$(printf '%-28s ok   (%ds)' "$name" $((SECONDS - t0)))")
  else
    summary+=("$(printf '%-28s FAIL (%ds)' "$name" $((SECONDS - t0)))"); status=1
    echo "--- $name failed; the last lines of $log:"; tail -n 8 "$log" 2>/dev/null | cut -c1-300
    return 1
  fi
}

if [ -n "${UPDATE_GOLDEN:-}" ]; then
  # Per bundle: a copy of the committed digests, rewritten where this run's outputs moved
  # (stale files removed), compared by a second run, then copied back over tests/golden/NAME.
  names="check check-variants"; [ "$UPDATE_GOLDEN" = 1 ] || names=$UPDATE_GOLDEN
  for name in $names; do
    fab=$C/$name.fab; [ "$name" = check-variants ] && fab=$C/variants.fab
    case $name in check|check-variants) ;; *) echo "UPDATE_GOLDEN=$name: expected 1, check or check-variants"; status=1; continue;; esac
    [ -f "$fab" ] || { echo "no $fab: run scripts/gpu-prepare"; status=1; continue; }
    work=$OUT/golden/$name
    rm -rf "$work"; mkdir -p "$work"
    [ -d "tests/golden/$name" ] && cp -r "tests/golden/$name/." "$work/"
    if step "golden update $name" "$OUT/golden-$name.log" bash -c "$C/fagen check $fab --golden $work --update-golden >$OUT/golden-$name.log 2>&1" &&
       step "golden repeat $name" "$OUT/golden-$name-repeat.log" bash -c "$C/fagen check $fab --golden $work >$OUT/golden-$name-repeat.log 2>&1"; then
      rm -rf "tests/golden/$name"; mkdir -p tests/golden; cp -r "$work" "tests/golden/$name"
    else
      echo "tests/golden/$name left as it was: the update or its repeat failed"
    fi
    grep -hE "golden|MISMATCH" "$OUT/golden-$name.log" "$OUT/golden-$name-repeat.log" 2>/dev/null | cut -c1-300 | tail -20
  done
  echo; printf '%s\n' "${summary[@]}"
  exit $status
fi

# The committed digests; the repeat compares with them again, so that two runs with equal
# digests show the kernels bitwise repeatable.
golden=tests/golden/check
step "check vs tests/golden" "$OUT/check.log" bash -c "$C/fagen check $C/check.fab --golden $golden >$OUT/check.log 2>&1"
tail -n 2 "$OUT/check.log"
grep -E "MISMATCH|error|golden: " "$OUT/check.log" | cut -c1-300 | head -20
step "check vs golden (repeat)" "$OUT/check-golden.log" bash -c "$C/fagen check $C/check.fab --golden $golden >$OUT/check-golden.log 2>&1"
tail -n 2 "$OUT/check-golden.log"
if command -v compute-sanitizer >/dev/null; then
  step "memcheck (quick grid)" "$OUT/sanitizer.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $C/fagen check $C/check.fab --quick >$OUT/sanitizer.log 2>&1"
  step "racecheck (quick grid)" "$OUT/sanitizer.log" bash -c "compute-sanitizer --tool racecheck --error-exitcode 3 $C/fagen check $C/check.fab --quick --kernel hd128 >>$OUT/sanitizer.log 2>&1"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log"
fi
if [ -f "$C/variants.fab" ]; then
  step "check variants vs golden" "$OUT/check-variants.log" bash -c "$C/fagen check $C/variants.fab --golden tests/golden/check-variants >$OUT/check-variants.log 2>&1"
  tail -n 2 "$OUT/check-variants.log"
  grep -E "MISMATCH|FAIL|error|golden: " "$OUT/check-variants.log" | cut -c1-300 | head -20
fi
if [ -f "$C/bwd90.fab" ]; then
  # The sm90ws backward (tests/gpu/check-bwd90.yaml): every variant it serves, full grid, and
  # memcheck on a reduced one.
  step "check sm90ws backward" "$OUT/check-bwd90.log" bash -c "$C/fagen check $C/bwd90.fab >$OUT/check-bwd90.log 2>&1"
  tail -n 1 "$OUT/check-bwd90.log"
  if command -v compute-sanitizer >/dev/null; then
    step "memcheck sm90ws backward" "$OUT/sanitizer-bwd90.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $C/fagen check $C/bwd90.fab --quick --kernel _sm90ws_m >$OUT/sanitizer-bwd90.log 2>&1"
    grep -E "ERROR SUMMARY" "$OUT/sanitizer-bwd90.log" | tail -1
  fi
fi
if [ -f "$C/decode.fab" ]; then
  step "check decode" "$OUT/check-decode.log" bash -c "$C/fagen check $C/decode.fab >$OUT/check-decode.log 2>&1"
  tail -n 1 "$OUT/check-decode.log"
  if command -v compute-sanitizer >/dev/null; then
    step "memcheck decode" "$OUT/sanitizer-decode.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $C/fagen check $C/decode.fab --quick >$OUT/sanitizer-decode.log 2>&1"
    grep -E "ERROR SUMMARY" "$OUT/sanitizer-decode.log" | tail -1
  fi
fi
if [ -f "$C/nonfinite.fab" ]; then
  step "check NaN/Inf inputs" "$OUT/check-nonfinite.log" bash -c "$C/fagen check $C/nonfinite.fab --nonfinite >$OUT/check-nonfinite.log 2>&1 && $C/fagen check $C/check.fab --nonfinite >>$OUT/check-nonfinite.log 2>&1"
  grep -cE "PASS" "$OUT/check-nonfinite.log"; grep -E "FAIL" "$OUT/check-nonfinite.log" | head
fi
if [ -f "$C/variants.fab" ]; then
  # Varlen kernels with cu_seqlens past total_q / total_k, decreasing, negative: O, LSE, dQ, dK,
  # dV and the workspace between poisoned guard regions, which must stay untouched.
  step "varlen guard regions" "$OUT/varlen-guard.log" bash -c "PYTHONPATH=bench python3 tests/gpu/varlen_guard.py $C/variants.fab >$OUT/varlen-guard.log 2>&1"
  tail -n 1 "$OUT/varlen-guard.log"
  if command -v compute-sanitizer >/dev/null; then
    step "memcheck varlen guard" "$OUT/sanitizer-varlen.log" bash -c "PYTHONPATH=bench compute-sanitizer --tool memcheck --error-exitcode 3 python3 tests/gpu/varlen_guard.py $C/variants.fab >$OUT/sanitizer-varlen.log 2>&1"
    grep -E "ERROR SUMMARY" "$OUT/sanitizer-varlen.log" | tail -1
  fi
fi
if [ -f "$C/variants.fab" ] && command -v compute-sanitizer >/dev/null; then
  step "memcheck window fwd+bwd" "$OUT/sanitizer-variants.log" bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $C/fagen check $C/variants.fab --quick --kernel window >$OUT/sanitizer-variants.log 2>&1"
  step "racecheck bwd det (quick)" "$OUT/sanitizer-variants.log" bash -c "compute-sanitizer --tool racecheck --error-exitcode 3 $C/fagen check $C/variants.fab --quick --kernel _det_ >>$OUT/sanitizer-variants.log 2>&1"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-variants.log" | tail -4
fi
if [ -f "$C/bench.fab" ] && [ -z "${SKIP_BENCH:-}" ]; then
  bundles="--bundle sm_90=$C/bench.fab"
  [ -f "$C/bench90a.fab" ] && bundles="$bundles --bundle sm_90a=$C/bench90a.fab"
  step "bench fwd" "$OUT/bench.log" bash -c "python3 bench/bench_fwd.py $bundles --out $OUT/bench.json ${BENCH_ARGS:-} >$OUT/bench.log 2>&1"
  sed -n '/^hd  causal/,$p' "$OUT/bench.log"
  step "bench bwd" "$OUT/bench-bwd.log" bash -c "python3 bench/bench_bwd.py --bundle $C/bench.fab --deterministic --dropout 0.1 --out $OUT/bench-bwd.json ${BENCH_BWD_ARGS:-} >$OUT/bench-bwd.log 2>&1"
  sed -n '/^hd  causal/,$p' "$OUT/bench-bwd.log"
  if [ -f "$C/bench-variants90a.fab" ]; then
    step "bench variants fwd" "$OUT/bench-variants.log" bash -c "python3 bench/bench_variants.py --bundle sm_90a=$C/bench-variants90a.fab --bundle sm_90=$C/bench-variants.fab --dense sm_90a=$C/bench90a.fab --dense sm_90=$C/bench.fab --out $OUT/bench-variants.json >$OUT/bench-variants.log 2>&1"
    sed -n '/^part /,$p' "$OUT/bench-variants.log"
  fi
fi
echo
printf '%s\n' "${summary[@]}"
exit $status
