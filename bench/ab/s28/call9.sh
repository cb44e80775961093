#!/usr/bin/env bash
# Session 28 call 9 (docs/perf/sm90-fwd.md run 72): kStaggerSlack (B) against main (A): goldens
# of A's dense non-causal kernels compared with B's (full grid), the non-causal variants
# (V: bench/ab/s28/variants-nc.yaml) --quick, racecheck and memcheck of B's hd 256 kernel (its
# 3-CTA run staggers), and ab_blocks at cells call 8 did not time. A.fab / B.fab:
# bench/ab/s28/nc.yaml built by main's fagen and by the kStaggerSlack tree.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s28f
G=$(mktemp -d)
{
echo "== goldens from A, then B against them (full grid)"
timeout 120 .carry/fagen check $W/A.fab --golden $G --update-golden 2>&1 | tail -1
timeout 120 .carry/fagen check $W/B.fab --golden $G 2>&1 | tail -1
echo "== variants (quick)"
timeout 90 .carry/fagen check $W/V.fab --quick 2>&1 | tail -1
for tool in racecheck memcheck; do
  echo "== $tool B hd256 (quick)"
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 3 .carry/fagen check $W/B.fab --quick --kernel hd256 2>&1 | grep -E "SUMMARY|passed" | tail -2
done
echo "== ab_blocks A B cudnn"
timeout 150 python3 bench/ab_blocks.py --bundle A=$W/A.fab --bundle B=$W/B.fab --sdpa cudnn --cells 256x2048,64x2048,64x4096,256x8192 --seconds 1 --blocks 9 --out $OUT/ab1.json 2>&1 | tail -14
echo "== ab_blocks B A cudnn"
timeout 150 python3 bench/ab_blocks.py --bundle B=$W/B.fab --bundle A=$W/A.fab --sdpa cudnn --cells 256x2048,64x2048,64x4096,256x8192 --seconds 1 --blocks 9 --out $OUT/ab2.json 2>&1 | tail -14
} 2>&1 | tee $OUT/log.txt
