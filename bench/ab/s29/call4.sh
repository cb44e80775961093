#!/usr/bin/env bash
# Session 29 call 4 (docs/perf/sm90-fwd.md run 73): call 3's rule with the last causal group
# held to 32 MB of K/V (N2; hd 64 / 128 as N, hd 256's last groups 32 MB instead of 48) against
# main (A): ab_blocks both label orders beside cuDNN, ncu of hd 256, goldens of A's sm90ws
# kernels (tests/gpu/check.yaml, full grid) against N2's.
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s29d
G=$(mktemp -d)
M=gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum
C=256x2048,256x4096,256x8192,256x16384,128x2048,64x2048
{
echo "== ab_blocks causal A N2"
timeout 120 python3 bench/ab_blocks.py --bundle A=$W/A.fab --bundle N2=$W/N2.fab --sdpa cudnn --cells $C --causal --seconds 1 --blocks 3 --out $OUT/ab1.json 2>&1 | tail -19
echo "== ab_blocks causal N2 A"
timeout 120 python3 bench/ab_blocks.py --bundle N2=$W/N2.fab --bundle A=$W/A.fab --sdpa cudnn --cells $C --causal --seconds 1 --blocks 3 --out $OUT/ab2.json 2>&1 | tail -19
echo "== ncu causal: A then N2 then cuDNN, per shape"
timeout 80 ncu --clock-control none --metrics $M -k regex:'fagen|cudnn' python3 bench/diag/ncu_once.py --causal --shapes 256x2048,256x4096,256x8192,256x16384 $W/A.fab $W/N2.fab 2>&1 | grep -E "^  [a-z]|dram__|lts__|gpu__time" | sed -E 's/ \(132, 1, 1\).*//; s/ +/ /g'
echo "== goldens from A, then N2 against them (full grid, sm90ws kernels)"
timeout 150 .carry/fagen check $W/check-A.fab --kernel sm90ws --golden $G --update-golden 2>&1 | tail -1
timeout 150 .carry/fagen check $W/check-N2.fab --kernel sm90ws --golden $G 2>&1 | tail -1
} 2>&1 | tee $OUT/log.txt
