#!/usr/bin/env bash
# Session 29 call 5: the final tree (run 73's causal groups; bench/ab/s29/fwd.yaml, whose
# non-causal cubins are main's) against cuDNN at every causal 2k-16k cell under sustained load
# (ab_blocks), bench_fwd.py's FA3 protocol at every cell, then the check-variants sm90ws kernels
# (quick) and racecheck / memcheck of the hd 256 and hd 64 causal kernels (quick).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s29e
C=64x2048,64x4096,64x8192,64x16384,128x2048,128x4096,128x8192,128x16384,256x2048,256x4096,256x8192,256x16384
{
echo "== ab_blocks causal"
timeout 160 python3 bench/ab_blocks.py --bundle fagen=$W/fwd.fab --sdpa cudnn --cells $C --causal --seconds 1 --blocks 4 --out $OUT/sus-causal.json 2>&1 | tail -26
echo "== bench_fwd (FA3 protocol)"
timeout 200 python3 bench/bench_fwd.py --bundle fagen=$W/fwd.fab --head-dims 64,128,256 --seqlens 2048,4096,8192,16384 --repeats 2 --out $OUT/fwd.json 2>&1 | tail -30
echo "== check-variants sm90ws (quick)"
timeout 60 .carry/fagen check $W/variants.fab --kernel sm90ws --quick 2>&1 | tail -1
for k in hd256_causal hd64_causal; do for tool in racecheck memcheck; do
  echo "== $tool $k (quick)"
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 .carry/fagen check $W/fwd.fab --quick --kernel $k 2>&1 | grep -E "SUMMARY|passed" | tail -2
done; done
} 2>&1 | tee $OUT/log.txt
