#!/usr/bin/env bash
# Session 27, call 9: hd 128 non-causal 192 x 64 against 192 x 80 (main's bucket from 1k),
# back to back beside cuDNN, both label orders; a quick check of the 64-key kernel first.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27g
{
echo "== check"; timeout 100 .carry/fagen check $W/n64.fab 2>&1 | tail -1
C=128x1024,128x2048,128x4096,128x8192,128x16384
timeout 200 python3 bench/ab_blocks.py --bundle n64=$W/n64.fab --bundle n80=$W/n80.fab --sdpa cudnn --cells $C --seconds 1 --blocks 6 --out $OUT/ab1.json 2>&1 | tail -16
timeout 200 python3 bench/ab_blocks.py --bundle n80=$W/n80.fab --bundle n64=$W/n64.fab --sdpa cudnn --cells $C --seconds 1 --blocks 6 --out $OUT/ab2.json 2>&1 | tail -16
} 2>&1 | tee $OUT/log.txt
