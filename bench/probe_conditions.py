"""A probe, not a benchmark: how fagen and cuDNN time under the benchmark's conditions.

Short bursts (10 warm-up calls, then 40 timed with CUDA events, the median), each cell with and
without clearing a 256 MB buffer before every call (bench_fwd.py's do_bench clears L2 so), on
normal and on uniform inputs, beside SDPA's cuDNN backend on the same inputs. Non-causal bf16,
FlashAttention-3's shapes (batch x seqlen = 16k tokens, hidden 2048) at hd 256 2k / 4k / 16k and
hd 128 2k / 16k. On an H200 (2026-12-01) both ran 10-15 % faster in such bursts than in
bench_fwd.py's 100 ms runs, and the ratio moved 1.04-1.17 between cells.

    python3 bench/probe_conditions.py bench.fab      # a bundle with sm_90a dense forwards
"""
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa3  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402

SHAPES = ((256, 2048), (256, 4096), (256, 16384), (128, 2048), (128, 16384))


def median_ms(fn, flush_buf, reps=40):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush_buf is not None:
            flush_buf.zero_()
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: probe_conditions.py BUNDLE.fab")
    dev = "cuda"
    bundle = fagen_rt.Bundle(sys.argv[1])
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
    print(f"{'hd':>3} {'s':>5} {'data':>7} {'flush':>5} {'fagen':>7} {'cudnn':>7} {'ratio':>6}")
    for d, s in SHAPES:
        b, h = fa3.shape(d, s)
        flops = fa3.fwd_flops(d, s)
        for data in ("normal", "uniform"):
            if data == "normal":
                q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
                           for _ in range(3))
            else:
                q, k, v = (torch.rand(b, h, s, d, device=dev, dtype=torch.bfloat16) - 0.5
                           for _ in range(3))
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            plan = bundle.plan_forward(qt, kt, vt, causal=False)
            o = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
            lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)

            def run_fagen():
                plan.run(qt, kt, vt, o, lse)

            def run_cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v)

            for flushed in (True, False):
                buf = flush if flushed else None
                tf, tc = median_ms(run_fagen, buf), median_ms(run_cudnn, buf)
                print(f"{d:>3} {s:>5} {data:>7} {str(flushed):>5} {flops / tf / 1e9:7.1f} "
                      f"{flops / tc / 1e9:7.1f} {tc / tf:6.3f}", flush=True)


if __name__ == "__main__":
    main()
