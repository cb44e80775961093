"""A probe, not a benchmark: the SM clock and board power while fagen and cuDNN run.

Each cell runs one implementation back to back for --seconds (no L2 clears, a sync every 20
calls) while `nvidia-smi` samples this GPU's power, SM clock, temperature and active
clock-event reasons every 20 ms. Samples and calls of the first 0.5 s are dropped: TFLOP/s and
the medians cover the same window. Cells alternate fagen / cuDNN twice with a 2 s rest before
each, on FlashAttention-3's shapes (batch x seqlen = 16k tokens, hidden 2048, bf16,
normal inputs; non-causal unless --causal). Prints each cell's TFLOP/s, median clock, median
power and TFLOP/s per GHz (work a cycle, the figure the clock does not move).

    python3 bench/probe_power.py bench.fab [--shapes 256x2048,256x16384] [--causal] [--seconds 3]
        [--gpu ID]
"""
import argparse
import datetime
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa3  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402

FIELDS = "timestamp,power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.active"
SKIP_S = 0.5  # the start of each run, left out of every figure


def smi_gpu_id(explicit):
    """The nvidia-smi -i argument for torch's device 0: --gpu, else its UUID."""
    if explicit:
        return explicit
    uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or "")
    if not uuid:
        sys.exit("probe_power.py: cannot tell which GPU nvidia-smi should sample; pass --gpu "
                 "(an nvidia-smi index or UUID)")
    return uuid if uuid.startswith("GPU-") else "GPU-" + uuid


def sample(fn, seconds, gpu):
    """Runs fn back to back for `seconds` under nvidia-smi; returns (ms per call, samples), both
    over the run past its first SKIP_S seconds."""
    with tempfile.NamedTemporaryFile("w+", suffix=".csv") as log, \
            tempfile.TemporaryFile("w+") as err:
        smi = subprocess.Popen(["nvidia-smi", "-i", gpu, f"--query-gpu={FIELDS}",
                                "--format=csv,noheader,nounits", "-lms", "20"],
                               stdout=log, stderr=err)
        try:
            time.sleep(0.2)
            torch.cuda.synchronize()
            wall0, t0 = datetime.datetime.now(), time.perf_counter()
            marks, calls = [], 0  # (seconds since t0, calls done) after each sync
            while time.perf_counter() - t0 < seconds:
                for _ in range(20):
                    fn()
                calls += 20
                torch.cuda.synchronize()
                marks.append((time.perf_counter() - t0, calls))
        finally:
            early = smi.poll()
            smi.terminate()
            smi.wait()
        if early is not None:  # its message may be on either stream
            err.seek(0)
            log.seek(0)
            said = (err.read() + log.read()).strip()[:300]
            sys.exit(f"probe_power.py: nvidia-smi -i {gpu} exited with {early}: {said}")
        log.seek(0)
        lines = log.read().splitlines()
    first = next(m for m in marks if m[0] >= SKIP_S) if marks[-1][0] >= SKIP_S else marks[0]
    last = marks[-1]
    ms = (last[0] - first[0]) * 1e3 / max(last[1] - first[1], 1)
    lo = wall0 + datetime.timedelta(seconds=first[0])
    hi = wall0 + datetime.timedelta(seconds=last[0])
    rows = []
    for line in lines:
        r = [x.strip() for x in line.split(",")]
        if len(r) < 5:
            continue
        try:
            at = datetime.datetime.strptime(r[0], "%Y/%m/%d %H:%M:%S.%f")
            row = (float(r[1]), float(r[2]), float(r[3]), r[4])
        except ValueError:  # "[N/A]" or an unexpected format: not a sample
            continue
        if lo <= at <= hi:
            rows.append(row)
    return ms, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--shapes", default="256x2048,256x16384,128x16384",
                    help="HDxSEQLEN list (default %(default)s)")
    ap.add_argument("--causal", action="store_true",
                    help="causal mask for both (FLOPs halved); the shapes are square, where "
                         "fagen's bottom-right and SDPA's top-left alignments are the same mask")
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="length of each run, at least 1 (default %(default)s)")
    ap.add_argument("--gpu", default=None,
                    help="nvidia-smi's id of the GPU torch runs on (default: its UUID)")
    args = ap.parse_args()
    if args.seconds < 1:
        ap.error(f"--seconds must be at least 1 (the first {SKIP_S} s are left out), "
                 f"got {args.seconds}")
    try:
        shapes = fa3.parse_cells(args.shapes)
    except ValueError as e:
        ap.error(f"--shapes: {e}")
    dev = "cuda"
    gpu = smi_gpu_id(args.gpu)
    bundle = fagen_rt.Bundle(args.bundle)
    if args.causal:
        print("causal")
    print(f"{'hd':>3} {'s':>5} {'impl':>6} {'TFLOP/s':>8} {'MHz':>6} {'W':>6} {'degC':>5} "
          f"{'TF/GHz':>7}  reasons (count)")
    for d, s in shapes:
        b, h = fa3.shape(d, s)
        flops = fa3.fwd_flops(d, s, args.causal)
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        plan = bundle.plan_forward(qt, kt, vt, causal=args.causal)
        o = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
        lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)

        def run_cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

        impls = (("fagen", lambda: plan.run(qt, kt, vt, o, lse)), ("cudnn", run_cudnn))
        for _ in range(2):
            for name, fn in impls:
                fn()
                torch.cuda.synchronize()
                time.sleep(2.0)
                ms, rows = sample(fn, args.seconds, gpu)
                if not rows:
                    sys.exit(f"probe_power.py: no nvidia-smi samples of GPU {gpu} in the window "
                             f"({d} x {s}, {name})")
                watts = statistics.median(r[0] for r in rows)
                mhz = statistics.median(r[1] for r in rows)
                temp = statistics.median(r[2] for r in rows)
                reasons = {}
                for r in rows:
                    reasons[r[3]] = reasons.get(r[3], 0) + 1
                tf = flops / ms / 1e9
                print(f"{d:>3} {s:>5} {name:>6} {tf:8.1f} {mhz:6.0f} {watts:6.1f} {temp:5.0f} "
                      f"{tf / (mhz / 1e3):7.1f}  {reasons}", flush=True)


if __name__ == "__main__":
    main()
