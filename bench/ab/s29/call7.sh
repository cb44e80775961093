#!/usr/bin/env bash
# Session 29 call 7: the review's mend of run 73 (causal_tail_groups: the last group capped at
# 32 MB in every case, 64-bit arithmetic, CTAs at once = min(grid, %nsmid)); its orders at the
# FA3 shapes are call 4's (a host check). Goldens of main's sm90ws kernels (tests/gpu/check.yaml,
# full grid) against the mended tree's (F), then ab_blocks: main, F, and F without a workspace
# (one CTA a tile: the %nsmid path), bitwise against main at the FA3 shapes.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s29f
G=$(mktemp -d)
{
echo "== goldens from A, then F against them (full grid, sm90ws kernels)"
timeout 100 .carry/fagen check $W/check-A.fab --kernel sm90ws --golden $G --update-golden 2>&1 | tail -1
timeout 100 .carry/fagen check $W/check-F.fab --kernel sm90ws --golden $G 2>&1 | tail -1
echo "== ab_blocks causal A F Fn"
timeout 90 python3 bench/ab_blocks.py --bundle A=$W/A.fab --bundle F=$W/F.fab --bundle Fn=$W/F.fab:nows --sdpa cudnn --cells 128x2048,256x2048,64x2048 --causal --seconds 1 --blocks 2 --out $OUT/ab.json 2>&1 | tail -13
} 2>&1 | tee $OUT/log.txt
