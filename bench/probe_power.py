"""A probe, not a benchmark: the SM clock and board power while fagen and cuDNN run.

Each cell runs one implementation back to back for --seconds (no L2 clears, a sync every 20
calls) while `nvidia-smi` samples power, SM clock, temperature and the active clock-event
reasons every 20 ms; the first 0.5 s of samples are dropped. Cells alternate fagen / cuDNN
twice with a 2 s rest before each, on FlashAttention-3's shapes (batch x seqlen = 16k tokens,
hidden 2048, bf16, non-causal, normal inputs). Prints each cell's TFLOP/s, median clock, median
power and TFLOP/s per GHz (work a cycle, the figure the clock does not move).

    python3 bench/probe_power.py bench.fab [--shapes 256x2048,256x16384] [--seconds 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fagen_rt  # noqa: E402

FIELDS = "timestamp,power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.active"


def sample(fn, seconds):
    """Runs fn back to back for `seconds` under nvidia-smi; returns (ms per call, samples)."""
    with tempfile.NamedTemporaryFile("w+", suffix=".csv") as log:
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                "-lms", "20"], stdout=log, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.2)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            calls = 0
            while time.perf_counter() - t0 < seconds:
                for _ in range(20):
                    fn()
                calls += 20
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
        finally:
            smi.terminate()
            smi.wait()
        log.seek(0)
        rows = [line.split(", ") for line in log.read().splitlines() if line.count(",") >= 4]
    keep = rows[int(0.7 / 0.02):]  # 0.2 s before the loop + its first 0.5 s
    return elapsed * 1e3 / calls, keep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--shapes", default="256x2048,256x16384,128x16384",
                    help="HDxSEQLEN list (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    dev = "cuda"
    bundle = fagen_rt.Bundle(args.bundle)
    print(f"{'hd':>3} {'s':>5} {'impl':>6} {'TFLOP/s':>8} {'MHz':>6} {'W':>6} {'degC':>5} "
          f"{'TF/GHz':>7}  reasons (count)")
    for cell in args.shapes.split(","):
        d, s = (int(x) for x in cell.split("x"))
        b, h = max(1, 16384 // s), 2048 // d
        flops = 4.0 * b * h * s * s * d
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        plan = bundle.plan_forward(qt, kt, vt, causal=False)
        o = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
        lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)

        def run_cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)

        impls = (("fagen", lambda: plan.run(qt, kt, vt, o, lse)), ("cudnn", run_cudnn))
        for _ in range(2):
            for name, fn in impls:
                fn()
                torch.cuda.synchronize()
                time.sleep(2.0)
                ms, rows = sample(fn, args.seconds)
                if not rows:
                    print(f"{d:>3} {s:>5} {name:>6}: no nvidia-smi samples", flush=True)
                    continue
                mhz = statistics.median(float(r[2]) for r in rows)
                watts = statistics.median(float(r[1]) for r in rows)
                temp = statistics.median(float(r[3]) for r in rows)
                reasons = {}
                for r in rows:
                    reasons[r[4].strip()] = reasons.get(r[4].strip(), 0) + 1
                tf = flops / ms / 1e9
                print(f"{d:>3} {s:>5} {name:>6} {tf:8.1f} {mhz:6.0f} {watts:6.1f} {temp:5.0f} "
                      f"{tf / (mhz / 1e3):7.1f}  {reasons}", flush=True)


if __name__ == "__main__":
    main()
