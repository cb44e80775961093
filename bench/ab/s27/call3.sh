#!/usr/bin/env bash
# Session 27, call 3: main (6f31577's kernels; bench/bench.yaml's are 0d4d661's) against cuDNN
# 9.19 at every issue-5 cell: bench_fwd.py (FA3 protocol, 2 interleaved rounds), then
# ab_blocks.py (1 s blocks back to back, sustained).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27c
{
echo "== bench_fwd (FA3 protocol)"
timeout 240 python3 bench/bench_fwd.py --bundle fagen=$W/bench.fab --head-dims 64,128,256 --seqlens 2048,4096,8192,16384 --repeats 2 --out $OUT/fwd.json 2>&1 | tail -30
C=64x2048,64x4096,64x8192,64x16384,128x2048,128x4096,128x8192,128x16384,256x2048,256x4096,256x8192,256x16384
echo "== ab_blocks non-causal"
timeout 150 python3 bench/ab_blocks.py --bundle fagen=$W/bench.fab --sdpa cudnn --cells $C --seconds 1 --blocks 4 --out $OUT/sus-noncausal.json 2>&1 | tail -26
echo "== ab_blocks causal"
timeout 150 python3 bench/ab_blocks.py --bundle fagen=$W/bench.fab --sdpa cudnn --cells $C --causal --seconds 1 --blocks 4 --out $OUT/sus-causal.json 2>&1 | tail -26
} 2>&1 | tee $OUT/log.txt
