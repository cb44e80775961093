#!/usr/bin/env bash
# Session 29 call 1: (a) ncu of the causal 2k cells, fagen (main's planner kernels) and cuDNN:
# L2 read sectors, DRAM reads, instructions, shared-memory wavefronts, cycles; (b) main against
# cuDNN under sustained load (bench/ab_blocks.py) at every 2k-16k cell, causal and not: the
# final tree of session 28 (79e8798's full-tile rule for the wait was not re-timed).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s29a
M=gpu__time_duration.sum,sm__cycles_elapsed.avg,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
{
echo "== ncu causal"
timeout 120 ncu --clock-control none --metrics $M -k regex:'fagen|cudnn' python3 bench/diag/ncu_once.py --causal --shapes 128x2048,64x2048,256x2048,128x16384 $W/main.fab 2>&1 | grep -E "^  [a-z_]|fagen_fwd|cudnn|sm90|==PROF==|rror" | head -80
echo "== ncu non-causal"
timeout 90 ncu --clock-control none --metrics $M -k regex:'fagen|cudnn' python3 bench/diag/ncu_once.py --shapes 256x2048,128x2048 $W/main.fab 2>&1 | grep -E "^  [a-z_]|fagen_fwd|cudnn|sm90|rror" | head -60
C=64x2048,64x4096,64x8192,64x16384,128x2048,128x4096,128x8192,128x16384,256x2048,256x4096,256x8192,256x16384
echo "== ab_blocks causal"
timeout 170 python3 bench/ab_blocks.py --bundle fagen=$W/main.fab --sdpa cudnn --cells $C --causal --seconds 1 --blocks 4 --out $OUT/sus-causal.json 2>&1 | tail -26
echo "== ab_blocks non-causal"
timeout 170 python3 bench/ab_blocks.py --bundle fagen=$W/main.fab --sdpa cudnn --cells $C --seconds 1 --blocks 4 --out $OUT/sus-noncausal.json 2>&1 | tail -26
} 2>&1 | tee $OUT/log.txt
