#!/bin/bash
# Session 28 call 1 (docs/perf/sm90-fwd.md run 71): ws_trace (tests/gpu/ws_trace.cu, built with
# `TRACE_OUT=.carry-ws/s28a/ws_trace tests/gpu/run_sm90.sh trace-build` from run 48's per-consumer
# Q barriers on main) of hd 256 128x64 (main) against per-consumer Q (_qc), hd 128 128x128 _to vs
# _to_qc. (Call 2 ran the next script's first form and stopped at a launch error: the hash
# launch came before the shared-memory attribute was set.)
set -u
D=.carry-ws/s28a
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
for f in hd256_m128n64 hd128_m128n128_to; do
  timeout 120 $D/ws_trace --seqlens 2048,4096 --filter $f 2>&1
done | tee $OUT/trace.txt
