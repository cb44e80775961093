#!/usr/bin/env bash
# Session 27, call 6: call 5's 128 x 64 against 128 x 80 again, the order swapped, 1k-16k.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27e
timeout 400 python3 bench/ab_blocks.py --bundle n64=$W/n64.fab --bundle n80=$W/n80.fab --sdpa cudnn --cells 256x1024,256x2048,256x4096,256x8192,256x16384 --seconds 1 --blocks 6 --out $OUT/ab.json 2>&1 | tail -16 | tee $OUT/log.txt
