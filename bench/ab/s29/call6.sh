#!/usr/bin/env bash
# Session 29 call 6: racecheck of the final tree's hd 64 causal kernels (quick), which call 5's
# 60 s limit cut off (it takes ~64 s); first the 192 x 128 kernel alone, then both.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so
mkdir -p $OUT
timeout 240 compute-sanitizer --tool racecheck --error-exitcode 3 .carry/fagen check .carry-ws/s29e/fwd.fab --quick --kernel hd64_causal_sm90ws_m192 2>&1 | grep -E "SUMMARY|passed|rror" | tail -3
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 .carry/fagen check .carry-ws/s29e/fwd.fab --quick --kernel hd64_causal 2>&1 | tail -8 | tee $OUT/racecheck-hd64-all.txt
