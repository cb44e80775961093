#!/usr/bin/env bash
# Session 29 call 3 (docs/perf/sm90-fwd.md run 73): the causal groups at 16 MB of K/V with a
# last group of at least two tiles a CTA (N) against main (A): ab_blocks both label orders
# beside cuDNN at every causal cell, ncu of the causal cells, then goldens of A's sm90ws kernels
# (tests/gpu/check.yaml, full grid) against N's, the check-variants sm90ws kernels (quick),
# racecheck / memcheck of N's hd 128 causal kernel (quick).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s29c
G=$(mktemp -d)
M=gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum
{
C=128x2048,128x4096,64x2048,256x2048,64x4096,256x4096,128x8192,64x8192,256x8192,128x16384,64x16384,256x16384
echo "== ab_blocks causal A N"
timeout 170 python3 bench/ab_blocks.py --bundle A=$W/A.fab --bundle N=$W/N.fab --sdpa cudnn --cells $C --causal --seconds 1 --blocks 3 --out $OUT/ab1.json 2>&1 | tail -37
echo "== ab_blocks causal N A"
timeout 170 python3 bench/ab_blocks.py --bundle N=$W/N.fab --bundle A=$W/A.fab --sdpa cudnn --cells $C --causal --seconds 1 --blocks 3 --out $OUT/ab2.json 2>&1 | tail -37
echo "== ncu causal: A then N then cuDNN, per shape"
timeout 100 ncu --clock-control none --metrics $M -k regex:'fagen|cudnn' python3 bench/diag/ncu_once.py --causal --shapes 128x2048,64x2048,256x2048,128x8192,256x16384 $W/A.fab $W/N.fab 2>&1 | grep -E "^  [a-z]|dram__|lts__|gpu__time" | sed -E 's/ \(132, 1, 1\).*//; s/ +/ /g'
echo "== goldens from A, then N against them (full grid, sm90ws kernels)"
timeout 150 .carry/fagen check $W/check-A.fab --kernel sm90ws --golden $G --update-golden 2>&1 | tail -1
timeout 150 .carry/fagen check $W/check-N.fab --kernel sm90ws --golden $G 2>&1 | tail -1
echo "== check-variants sm90ws (quick)"
timeout 90 .carry/fagen check $W/variants-N.fab --kernel sm90ws --quick 2>&1 | tail -1
for tool in racecheck memcheck; do
  echo "== $tool N hd128_causal (quick)"
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 3 .carry/fagen check $W/N.fab --quick --kernel hd128_causal 2>&1 | grep -E "SUMMARY|passed" | tail -2
done
} 2>&1 | tee $OUT/log.txt
