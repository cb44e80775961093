#!/usr/bin/env bash
# Session 27, call 7: hd 256 non-causal 128 x 64 against 128 x 80 under the FA3 protocol
# (bench_fwd.py, 3 interleaved rounds; the bundles hold no causal kernel: those rows time SDPA only).
set -uo pipefail
export FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONUNBUFFERED=1
W=.carry-ws/s27e
timeout 400 python3 bench/bench_fwd.py --bundle n80=$W/n80.fab --bundle n64=$W/n64.fab --head-dims 256 --seqlens 1024,2048,4096,8192,16384 --repeats 3 --out $OUT/fwd.json 2>&1 | grep -v "^{" | tail -14 | tee $OUT/log.txt
