#!/bin/bash
# Session 28 calls 3-5 (docs/perf/sm90-fwd.md run 71): ws_trace (O hash over a poisoned buffer,
# then cycles) of main's hd 256 128x64 against the Q ring (_qr), hd 128 128x128 (call 3: plain
# and _qr; calls 4-5: _to and _to_qr), 2k and 4k. The binary, built with
# `TRACE_OUT=.carry-ws/s28b/ws_trace tests/gpu/run_sm90.sh trace-build` from branch
# wip/sm90ws-q-ring as it stood: call 3 the ring with O staged in the warpgroup's slot and
# stored with TMA; call 4 the ring with the register epilogue; call 5 that plus the next tile's
# first-warpgroup rows loaded halfway through the current tile (kEarlyQ, the branch's commit).
# (Call 3's filter below dropped the _to and _so lines instead.)
set -u
D=.carry-ws/s28b
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
for f in hd256_m128n64 hd128_m128n128; do
  timeout 150 $D/ws_trace --seqlens 2048,4096 --filter $f 2>&1
done | grep -v "_so\|m128n128 \|m128n128_pers" | tee $OUT/trace.txt
echo; grep -E "^OHASH" $OUT/trace.txt
grep -E "^TRACE" $OUT/trace.txt | sed -E 's/\| cycles.*overhead/ overhead/; s/\| producer.*//'
