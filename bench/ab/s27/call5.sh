#!/usr/bin/env bash
# Session 27, call 5: hd 256 non-causal on pinned key tiles, sustained: 128 x 80 (main's
# bucket), 128 x 64 (no padded keys at 2k-8k), 128 x 64 with the staged epilogue.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27e
{
echo "== check (quick)"
for n in n64 n64s; do timeout 100 .carry/fagen check $W/$n.fab --quick 2>&1 | tail -1; done
echo "== ab_blocks"
timeout 300 python3 bench/ab_blocks.py --bundle n80=$W/n80.fab --bundle n64=$W/n64.fab --bundle n64s=$W/n64s.fab --sdpa cudnn --cells 256x2048,256x4096,256x8192 --seconds 1 --blocks 8 --out $OUT/ab.json 2>&1 | tail -14
} 2>&1 | tee $OUT/log.txt
