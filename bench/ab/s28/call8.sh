#!/usr/bin/env bash
# Session 28 call 8 (docs/perf/sm90-fwd.md run 72): kStaggerSlack (B) against main (A) on the
# non-causal dense forwards, sustained (bench/ab_blocks.py, both label orders), after fagen check
# of B. A.fab / B.fab: bench/ab/s28/nc.yaml without hd 64, built by main's fagen (9a30207) and by
# the kStaggerSlack tree (--arch sm_90a --no-cache).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s28e
{
echo "== check B (quick, odd shapes, 3-CTA persistent runs)"
timeout 150 .carry/fagen check $W/B.fab --quick 2>&1 | tail -3
echo "== ab_blocks A B cudnn"
timeout 150 python3 bench/ab_blocks.py --bundle A=$W/A.fab --bundle B=$W/B.fab --sdpa cudnn --cells 256x2048,256x4096,128x2048 --seconds 1 --blocks 9 --out $OUT/ab1.json 2>&1 | tail -16
echo "== ab_blocks B A cudnn"
timeout 150 python3 bench/ab_blocks.py --bundle B=$W/B.fab --bundle A=$W/A.fab --sdpa cudnn --cells 256x2048,256x4096,128x2048 --seconds 1 --blocks 9 --out $OUT/ab2.json 2>&1 | tail -16
} 2>&1 | tee $OUT/log.txt
