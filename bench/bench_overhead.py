"""Where a forward kernel's time goes at short sequences: per-launch fixed cost vs streaming rate.

At a fixed query length (Sq = 2048, batch 8, hidden 2048, non-causal, bf16) the work tiles stay
the same while the keys grow, so t(Sk) = fixed + Sk * per_key. A least-squares line over
Sk = 1k..16k separates what every work tile pays once (launch, Q load, pipeline fill, the first
and last steps that nothing overlaps, the O/LSE epilogue, the wave tail) from the main loop's
rate. fagen (a bundle of bench/bench.yaml; the kernel its runtime picks at Sk = 2k, pinned for
every Sk) and SDPA's flash and cuDNN backends, same inputs.

    python3 bench/bench_overhead.py --bundle bench90a.fab [--head-dims 64,128,256] [--out f.json]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fagen import runtime as fagen_rt  # noqa: E402
from tables import write_json  # noqa: E402

SQ, BATCH, KEYS = 2048, 8, (1024, 2048, 4096, 8192, 16384)


def fit(xs, ys):
    """Least-squares line y = a + b x: (a, b)."""
    n, sx, sy = len(xs), sum(xs), sum(ys)
    sxx, sxy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys))
    b = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return (sy - b * sx) / n, b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a bundle of bench/bench.yaml (dense bf16)")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--fagen-only", action="store_true", help="do not time SDPA's backends")
    ap.add_argument("--no-check", action="store_true",
                    help="skip the output check (ablation builds that leave out a stage)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    bundle = fagen_rt.Bundle(args.bundle)
    rows = []
    torch.manual_seed(0)
    for d in [int(x) for x in args.head_dims.split(",")]:
        h = 2048 // d
        times = {"fagen": []} if args.fagen_only else {"fagen": [], "flash": [], "cudnn": []}
        # One kernel for every Sk, the one the runtime picks for Sq = Sk = 2k: with seqlen
        # buckets in the bundle the runtime's own choice would switch kernels along the line.
        probe = torch.empty(BATCH, h, SQ, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
        index = bundle.plan_forward(probe, probe, probe)._plan.kernel_index
        del probe
        for sk in KEYS:
            q = torch.randn(BATCH, h, SQ, d, device=dev, dtype=torch.bfloat16)
            k, v = (torch.randn(BATCH, h, sk, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            plan = bundle.plan_forward(qt, kt, vt, kernel_index=index)
            kernel = plan.kernel.split(" ")[0]
            o = torch.full((BATCH, SQ, h, d), float("nan"), device=dev, dtype=torch.bfloat16)
            lse = torch.empty(BATCH, h, SQ, device=dev, dtype=torch.float32)
            plan.run(qt, kt, vt, o, lse)
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                ref = F.scaled_dot_product_attention(q, k, v)
            diff = (o.transpose(1, 2).float() - ref.float()).abs().max().item()
            if not diff < 0.05 and not args.no_check:
                print(f"WRONG: hd {d} Sk {sk}: max |fagen - flash| = {diff}")
                return 1
            times["fagen"].append(do_bench(lambda: plan.run(qt, kt, vt, o, lse), warmup=25,
                                           rep=100, return_mode="median"))
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                  ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                if name not in times:
                    continue
                with sdpa_kernel([backend]):
                    times[name].append(do_bench(lambda: F.scaled_dot_product_attention(q, k, v),
                                                warmup=25, rep=100, return_mode="median"))
            del q, k, v, o
            torch.cuda.empty_cache()
        for name, ts in times.items():
            a, b = fit(KEYS, ts)
            per_key_flops = 4.0 * BATCH * h * SQ * d  # one more key column, all queries
            row = dict(head_dim=d, impl=name, kernel=kernel if name == "fagen" else name,
                       ms=dict(zip(KEYS, ts)), fixed_us=a * 1e3,
                       streaming_tflops=per_key_flops / b / 1e9,
                       fixed_share_at_2k=a / ts[KEYS.index(2048)])
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\nSq 2048 x Sk 1k..16k, batch 8, hidden 2048, non-causal: t = fixed + Sk x per-key")
    print("%-3s %-6s %9s %14s %16s %10s  kernel" % ("hd", "impl", "fixed_us", "stream_TFLOP/s",
                                                    "fixed_share@2k", "TFLOP/s@2k"))
    for r in rows:
        tf2k = 4.0 * BATCH * (2048 // r["head_dim"]) * SQ * 2048 * r["head_dim"] / r["ms"][2048] / 1e9
        print("%-3d %-6s %9.1f %14.1f %15.0f%% %10.1f  %s" % (
            r["head_dim"], r["impl"], r["fixed_us"], r["streaming_tflops"],
            100 * r["fixed_share_at_2k"], tf2k, r["kernel"]))
    if args.out:
        write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
