#!/usr/bin/env bash
# Session 27, call 4: compute-sanitizer memcheck and racecheck (quick grid) on the varlen
# sm90ws kernels with the 32 + 2 x 232 register split (bench/variants.yaml, sm_90a).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so
W=.carry-ws/s27d; K=varlen_sm90ws
{
for tool in memcheck racecheck; do
  echo "== $tool ($K, quick)"
  timeout 250 compute-sanitizer --tool $tool --error-exitcode 3 .carry/fagen check $W/varlen-new.fab --quick --kernel $K > $OUT/$tool.log 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" $OUT/$tool.log | tail -3
done
} 2>&1 | tee $OUT/log.txt
