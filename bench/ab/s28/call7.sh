#!/bin/bash
# Session 28 call 7 (docs/perf/sm90-fwd.md run 72): ws_trace of the persistent even-tile kernels
# with the slack CTAs started half a tile late (kStaggerSlack, _st) against main's: hd 256
# 128x64, hd 128 192x80 _to; twice. Built with `TRACE_OUT=.carry-ws/s28d/ws_trace
# tests/gpu/run_sm90.sh trace-build` (tests/gpu/ws_trace.cu as committed; the _st kernels
# were the experiment then, the planner's default since).
set -u
D=.carry-ws/s28d
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
for rep in 1 2; do
  timeout 100 $D/ws_trace --seqlens 2048,4096,8192 --filter hd256_m128n64 2>&1
  timeout 60 $D/ws_trace --seqlens 2048,4096 --filter hd128_m192n80_to 2>&1
done > $OUT/trace.txt
grep -E "^OHASH" $OUT/trace.txt | sort -u -k2,4 | awk '{print $2,$3,$4,$5,$6}'
grep -E "^TIME|^TRACE" $OUT/trace.txt | grep _pers | sed -E 's/\| cycles.*overhead/ overhead/; s/\| producer.*//; s/untraced median//'
