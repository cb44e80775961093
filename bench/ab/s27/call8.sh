#!/usr/bin/env bash
# Session 27, call 8: the planner's new hd 256 non-causal kernel (128 x 64, run 69) in the
# check bundles: full grid (bf16, fp16), NaN/Inf, memcheck and racecheck (quick); fp16 timing.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27f; F=.carry/fagen; K=hd256_none_sm90ws
{
echo "== check bf16"; timeout 150 $F check $W/check.fab --kernel $K 2>&1 | grep -v " ok$" | tail -3; echo "rc=${PIPESTATUS[0]}"
echo "== check fp16"; timeout 150 $F check $W/fp16.fab --kernel $K 2>&1 | grep -v " ok$" | tail -3; echo "rc=${PIPESTATUS[0]}"
echo "== nonfinite"; timeout 100 $F check $W/check.fab --nonfinite --kernel $K 2>&1 | tail -5
for tool in memcheck racecheck; do
  echo "== $tool"; timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 $F check $W/check.fab --quick --kernel $K > $OUT/$tool.log 2>&1; echo "rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" $OUT/$tool.log | tail -2
done
echo "== bench_fwd fp16 hd 256"
timeout 150 python3 bench/bench_fwd.py --dtype fp16 --bundle fagen=$W/fp16.fab --head-dims 256 --seqlens 2048,4096,8192,16384 --repeats 2 --out $OUT/fp16.json 2>&1 | grep -v "^{" | tail -10
} 2>&1 | tee $OUT/log.txt
