#!/usr/bin/env bash
# Session 27, call 2: Q's A fragments in registers for S (kQInRegs; 128 x 128 two-consumer
# sm90ws kernels): correctness (goldens of the base tree, full grid, variants quick, NaN/Inf),
# then A (base) / B (Q in registers) back to back beside cuDNN, and B's clock under the cap.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27b; F=.carry/fagen; G=$(mktemp -d); K=sm90ws_m128n128
{
echo "== goldens from base, then new against them (check.yaml, $K)"
timeout 200 $F check $W/check-base.fab --kernel $K --golden $G --update-golden 2>&1 | tail -1
timeout 200 $F check $W/check-new.fab --kernel $K --golden $G 2>&1 | grep -v " ok$" | tail -8; echo "rc=${PIPESTATUS[0]}"
echo "== variants quick ($K)"; timeout 200 $F check $W/cv-new.fab --quick --kernel $K 2>&1 | grep -v " ok$" | tail -5; echo "rc=${PIPESTATUS[0]}"
echo "== nonfinite ($K)"; timeout 100 $F check $W/nf-new.fab --nonfinite --kernel $K 2>&1 | grep -c PASS; timeout 100 $F check $W/nf-new.fab --nonfinite --kernel $K 2>&1 | tail -1
echo "== A/B causal"
timeout 200 python3 bench/ab_blocks.py --bundle A=$W/bench-base.fab --bundle B=$W/bench-new.fab --sdpa cudnn --cells 128x2048,128x4096,64x1024,128x8192 --causal --seconds 1 --blocks 6 --out $OUT/ab-causal.json 2>&1 | tail -16
echo "== A/B non-causal"
timeout 100 python3 bench/ab_blocks.py --bundle A=$W/bench-base.fab --bundle B=$W/bench-new.fab --sdpa cudnn --cells 128x1024,128x2048 --seconds 1 --blocks 6 --out $OUT/ab-noncausal.json 2>&1 | tail -9
echo "== power B causal"
timeout 80 python3 bench/probe_power.py $W/bench-new.fab --causal --shapes 128x2048 --seconds 2 2>&1 | tail -5
} 2>&1 | tee $OUT/log.txt
