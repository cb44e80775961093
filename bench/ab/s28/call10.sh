#!/usr/bin/env bash
# Session 28 call 10: the final tree's non-causal forwards (kStaggerSlack; call 9's B.fab)
# against cuDNN under sustained load, every 2k-16k cell of the FA3 protocol's head dims
# (bench/ab_blocks.py).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s28g
{
timeout 280 python3 bench/ab_blocks.py --bundle B=$W/B.fab --sdpa cudnn --cells 256x2048,256x4096,256x8192,256x16384,128x2048,128x4096,128x8192,128x16384,64x2048,64x4096,64x8192,64x16384 --seconds 1 --blocks 6 --out $OUT/ab.json 2>&1 | tail -26
} 2>&1 | tee $OUT/log.txt
