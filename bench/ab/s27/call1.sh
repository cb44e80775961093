#!/usr/bin/env bash
# Session 27, call 1: the varlen register split (32 + 2 x 232) — correctness, goldens vs the
# old split, speed A / B / A2; then the power probe at hd 128 causal 2k / 4k and hd 256 2k.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27a; F=.carry/fagen; G=$(mktemp -d); G2=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
echo "== check new varlen kernels (bench variants)"; timeout 240 $F check $W/varlen-new.fab --kernel varlen 2>&1 | tail -8; echo "rc=${PIPESTATUS[0]}"
echo "== goldens: old then new (bench variants, varlen)"
timeout 200 $F check $W/varlen-old.fab --kernel varlen --golden $G --update-golden 2>&1 | tail -2
timeout 200 $F check $W/varlen-new.fab --kernel varlen --golden $G 2>&1 | tail -4; echo "rc=${PIPESTATUS[0]}"
echo "== goldens: old then new (check-variants, sm90ws varlen)"
timeout 200 $F check $W/cv-old.fab --kernel varlen_sm90ws --golden $G2 --update-golden 2>&1 | tail -2
timeout 200 $F check $W/cv-new.fab --kernel varlen_sm90ws --golden $G2 2>&1 | tail -4; echo "rc=${PIPESTATUS[0]}"
echo "== nonfinite new varlen"; timeout 120 $F check $W/nf-new.fab --nonfinite --kernel varlen 2>&1 | tail -6
echo "== bench_variants varlen A/B/A2"
timeout 200 python3 bench/bench_variants.py --parts varlen --bundle A=$W/varlen-old.fab --bundle B=$W/varlen-new.fab --bundle A2=$W/varlen-old.fab --out $OUT/varlen-ab.json 2>&1 | tail -12
echo "== power probe causal"
timeout 150 python3 bench/probe_power.py $W/bench90a.fab --causal --shapes 128x2048,128x4096 --seconds 2 2>&1 | tail -10
echo "== power probe non-causal"
timeout 80 python3 bench/probe_power.py $W/bench90a.fab --shapes 256x2048 --seconds 2 2>&1 | tail -6
