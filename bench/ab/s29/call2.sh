#!/usr/bin/env bash
# Session 29 call 2: the causal kernels' DRAM reads (call 1's ncu: 1.3-1.5x the minimum, cuDNN's
# at it). Bundles of bench/ab/s29/fwd.yaml built by one tree with the causal group budget at
# 32 MB (A = main's kernels), 16 MB (G16), 8 MB (G8), and with Q loads and O stores marked
# L2 evict-first (H: 32 MB, G16H: 16 MB). Checks (quick), ncu, then ab_blocks beside cuDNN.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s29b
M=gpu__time_duration.sum,sm__cycles_elapsed.avg,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum
{
for x in G16 G8 H G16H; do
  echo "== check $x (quick)"; timeout 60 .carry/fagen check $W/$x.fab --quick 2>&1 | tail -1
done
echo "== ncu causal: A G16 G8 H G16H, then cuDNN, per shape"
timeout 150 ncu --clock-control none --metrics $M -k regex:'fagen|cudnn' python3 bench/diag/ncu_once.py --causal --shapes 128x2048,64x2048,256x2048,128x16384 $W/A.fab $W/G16.fab $W/G8.fab $W/H.fab $W/G16H.fab 2>&1 | grep -E "^  [a-z]|dram__|lts__|gpu__time|sm__cycles" | sed -E 's/ \(132, 1, 1\).*//; s/ +/ /g'
echo "== ab_blocks causal"
timeout 200 python3 bench/ab_blocks.py --bundle A=$W/A.fab --bundle G16=$W/G16.fab --bundle G8=$W/G8.fab --bundle H=$W/H.fab --bundle G16H=$W/G16H.fab --sdpa cudnn --cells 128x2048,128x4096,64x2048,256x2048,128x16384 --causal --seconds 1 --blocks 4 --out $OUT/ab-causal.json 2>&1 | tail -31
echo "== ab_blocks non-causal (H's hints)"
timeout 60 python3 bench/ab_blocks.py --bundle A=$W/A.fab --bundle H=$W/H.fab --sdpa cudnn --cells 128x2048,256x2048 --seconds 1 --blocks 4 --out $OUT/ab-noncausal.json 2>&1 | tail -7
} 2>&1 | tee $OUT/log.txt
