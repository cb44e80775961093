#!/usr/bin/env bash
# Session 29 call 1b: call 1's ncu again with its output kept (call 1's grep dropped the metric lines).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s29a
M=gpu__time_duration.sum,sm__cycles_elapsed.avg,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
{
echo "== ncu causal"
timeout 120 ncu --clock-control none --metrics $M -k regex:'fagen|cudnn' python3 bench/diag/ncu_once.py --causal --shapes 128x2048,64x2048,256x2048,128x16384 $W/main.fab 2>&1 | grep -vE "==PROF==|^ *-+ |Section|Metric Name" | head -90
} 2>&1 | tee $OUT/ncu.txt
