"""One forward call inside an NVTX range named "prof", for Nsight Compute: a fagen bundle's
kernel (the runtime's plan picks it) or SDPA's flash / cuDNN kernel, on the FlashAttention-3
protocol's inputs (bf16, batch x seqlen = 16k tokens, hidden 2048), after three warm-up calls.

    ncu --nvtx --nvtx-include "prof/" --launch-count 1 --set full -o rep \\
        python3 bench/profile_fwd.py --bundle bench90a.fab --head-dim 128 --seqlen 2048
    ncu --nvtx --nvtx-include "prof/" --launch-count 1 \\
        --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \\
        python3 bench/profile_fwd.py --sdpa cudnn --head-dim 128 --seqlen 2048 --causal
    ncu --nvtx --nvtx-include "prof/" --launch-count 1 \\
        --metrics smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \\
        python3 bench/profile_fwd.py --bundle bench.fab --head-dim 64 --seqlen 8192 --dropout 0.1

Memory: [batch, seq, heads, head_dim] (BSHD) unless --layout bhsd. The fagen output is
poisoned (NaN) before the profiled call and checked against SDPA flash (max |diff| < 0.05)
after it; with --dropout (the bundle's dropout kernel, seed 1) only checked to be finite.
Used to count DRAM bytes per kernel (the sm90ws tile order, docs/perf/sm90-fwd.md) and to
compare the pipes and stalls of a dropout kernel with its dense one (docs/perf/sm80-fwd.md).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa3  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    who = ap.add_mutually_exclusive_group(required=True)
    who.add_argument("--bundle", help="a bundle with a bf16 forward kernel for the call")
    who.add_argument("--sdpa", choices=("flash", "cudnn"), help="profile SDPA's backend instead")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--layout", choices=("bshd", "bhsd"), default="bshd")
    ap.add_argument("--dropout", type=float, default=0.0, metavar="P",
                    help="a bundle's dropout kernel with drop probability P (its output is then "
                         "checked only for being finite)")
    args = ap.parse_args()
    if not 0.0 <= args.dropout < 1.0:
        ap.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.dropout and not args.bundle:
        ap.error("--dropout needs --bundle (SDPA's dropout runs other kernels)")
    if not 1 <= args.seqlen <= 16384:
        ap.error(f"--seqlen must be in [1, 16384] (batch = 16384 / seqlen), got {args.seqlen}")
    if args.head_dim not in (32, 64, 128, 256):
        ap.error(f"--head-dim must be 32, 64, 128 or 256 (heads = 2048 / head dim), "
                 f"got {args.head_dim}")
    s, d = args.seqlen, args.head_dim
    b, h = fa3.shape(d, s)
    torch.manual_seed(0)
    shape = (b, s, h, d) if args.layout == "bshd" else (b, h, s, d)
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    # fagen indexes [B, S, H, D], SDPA [B, H, S, D]: views of the same memory.
    qs, ks, vs = (x if args.layout == "bshd" else x.transpose(1, 2) for x in (q, k, v))
    qt, kt, vt = (x.transpose(1, 2) for x in (qs, ks, vs))

    def sdpa(backend):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)

    if args.bundle:
        try:
            variant = {"dropout_p": args.dropout} if args.dropout else {}
            plan = fagen_rt.Bundle(args.bundle).plan_forward(qs, ks, vs, causal=args.causal,
                                                              **variant)
        except fagen_rt.FagenError as e:
            print(f"{args.bundle}: {e}", file=sys.stderr)
            return 1
        print("kernel", plan.kernel, "grid", plan.grid, flush=True)
        o = torch.empty((b, s, h, d), device="cuda", dtype=torch.bfloat16)
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        run_args = fagen_rt.run_args(dropout_seed=1) if args.dropout else None
        run = lambda: plan.run(qs, ks, vs, o, lse, args=run_args)
    else:
        backend = SDPBackend.CUDNN_ATTENTION if args.sdpa == "cudnn" else SDPBackend.FLASH_ATTENTION
        run = lambda: sdpa(backend)
    for _ in range(3):
        run()
    if args.bundle:
        o.fill_(float("nan"))  # poisoned: the check below sees the profiled call's output
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    run()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    if args.bundle and args.dropout:
        if not torch.isfinite(o).all().item():
            print("WRONG: the dropout kernel's output is not finite", file=sys.stderr)
            return 1
        print("output finite (dropout: not compared with SDPA)")
    elif args.bundle:
        ref = sdpa(SDPBackend.FLASH_ATTENTION)
        diff = (o.transpose(1, 2).float() - ref.float()).abs().max().item()
        print(f"max |O - SDPA flash| = {diff:.3g}")
        if not diff < 0.05:  # NaN fails too
            print("WRONG: the output differs from SDPA flash", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
