#!/bin/bash
# Session 28 call 6 (docs/perf/sm90-fwd.md run 71): the Q ring (kQRing) in the TMA-store
# 128x128 kernels, with and without the tile counter (tests/gpu/sm90_ws_harness.cu of branch
# wip/sm90ws-q-ring, `WS_OUT=.carry-ws/s28c/sm90_ws_harness tests/gpu/run_sm90.sh ws-build`):
# full check grid, racecheck + memcheck (reduced grid), bench 2k/4k twice
set -u
B=.carry-ws/s28c/sm90_ws_harness
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
timeout 200 $B --check --filter _to_qr,_to_tc > $OUT/check.log 2>&1; echo "check rc $?"
grep -E "FAIL|SUMMARY|failed" $OUT/check.log | head -20
F=hd128_causal_m128n128s2_to,hd128_nomask_m128n128s2_to,hd64_causal_m128n128s2_to
for rep in 1 2; do
  timeout 90 $B --bench --seqlens 2048,4096 --filter $F > $OUT/bench$rep.log 2>&1; echo "bench $rep rc $?"
done
for tool in racecheck memcheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 3 $B --check --reduced \
    --filter hd128_causal_m128n128s2_to_tc_qr_pers,hd128_nomask_m128n128s2_to_qr_pers > $OUT/san_$tool.log 2>&1
  echo "$tool rc $? $(grep -E 'SUMMARY' $OUT/san_$tool.log | tr '\n' ' ')"
done
grep -h BENCH $OUT/bench1.log $OUT/bench2.log | sort -k2,5 | head -80
