"""Merge-of-states benchmark: fagen_merge_states (the NAME_merge entry point of a decode kernel)
as effective bandwidth against the GPU's copy bandwidth measured in the same run, beside the
same merge in PyTorch (eager ops on the same tensors) (issue 34's target: merge at memory
bandwidth).

Cells: bf16, head dim 128, 32 heads, S states (--states) of [batch, seqlen, heads, head_dim]
(--shapes batch x seqlen): long rows of few states (ring attention and cascade: 2 states of
128k tokens), and decode-sized ones (64 sequences of one token, 16 states). Bytes = what a
merge must move: the states' O (S x B x T x H x D x 2) and LSE (S x B x H x T x 4) read, O and
LSE written. Copy bandwidth: bench_decode.copy_bandwidth ((bytes read + written) / time of a 1
GiB device-to-device copy, the best of 3). Timing: triton.testing.do_bench (CUDA events,
warm-up, L2 cleared before each run, median).

Before timing, fagen's O and LSE are compared with the float64 merge of tests/gpu/merge_check.py
(max |diff| of O under 0.02, of LSE under 1e-3, else the row is WRONG and the run exits 1).

    python3 bench/bench_merge.py --bundle decode.fab [--out merge.json]
"""
import argparse
import math
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from bench_decode import copy_bandwidth  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402
from merge_check import reference  # noqa: E402
from tables import write_json  # noqa: E402


def bench_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def torch_merge(o_states, lse_states):
    """The same merge in PyTorch eager ops (fp32 arithmetic): O [B, T, H, D], LSE [B, H, T]."""
    m = lse_states.amax(dim=0)
    w = torch.exp(lse_states - m)                            # [S, B, H, T]
    total = w.sum(dim=0)
    wo = (w / total).permute(0, 1, 3, 2).unsqueeze(-1)       # [S, B, T, H, 1]
    out = (wo * o_states.float()).sum(dim=0).to(o_states.dtype)
    return out, m + torch.log(total)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True,
                    help="a bundle with a bf16 decode kernel of the head dim (bench-decode.yaml)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--states", default="2,4,16", help="states merged, comma-separated")
    ap.add_argument("--shapes", default="1x131072,1x16384,64x1",
                    help="batch x seqlen of each state, comma-separated")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args()

    dev = torch.device("cuda")
    bundle = fagen_rt.Bundle(args.bundle)
    copy_tbps = copy_bandwidth(dev)
    meta = {"gpu": torch.cuda.get_device_properties(0).name, "torch": torch.__version__,
            "fagen": fagen_rt.version(), "copy_tbps": copy_tbps, "rows": []}
    print(f"{meta['gpu']}: copy bandwidth {copy_tbps:.2f} TB/s", flush=True)
    torch.manual_seed(0)
    failed = False
    h, d = args.heads, args.head_dim
    for shape in args.shapes.split(","):
        b, t = (int(x) for x in shape.split("x"))
        for s in (int(x) for x in args.states.split(",")):
            if s * b * t * h * d * 2 > 12 << 30:
                continue
            o_states = torch.randn(s, b, t, h, d, device=dev, dtype=torch.bfloat16)
            lse_states = 4 * torch.randn(s, b, h, t, device=dev)
            o = torch.empty(b, t, h, d, device=dev, dtype=torch.bfloat16)
            lse = torch.empty(b, h, t, device=dev)
            plan = bundle.plan_merge_states(o_states, lse_states, o, lse)
            plan.run_merge_states(o_states, lse_states, o, lse)
            torch.cuda.synchronize()
            chunk = max(1, (1 << 24) // (s * h * d))  # the float64 reference a slice at a time
            o_err = lse_err = 0.0
            for r0 in range(0, t, chunk):
                want_o, want_lse = reference(o_states[:, :, r0:r0 + chunk],
                                             lse_states[..., r0:r0 + chunk], torch.float64)
                o_err = max(o_err, (o[:, r0:r0 + chunk].double() - want_o).abs().max().item())
                lse_err = max(lse_err,
                              (lse[..., r0:r0 + chunk].double() - want_lse).abs().max().item())
            wrong = not (o_err < 0.02 and lse_err < 1e-3)
            nbytes = s * b * t * h * (d * 2 + 4) + b * t * h * (d * 2 + 4)
            row = dict(states=s, batch=b, seqlen=t, heads=h, head_dim=d, o_err=o_err,
                       lse_err=lse_err, wrong=wrong, bytes=nbytes)
            row["fagen_us"] = bench_ms(lambda: plan.run_merge_states(o_states, lse_states, o,
                                                                     lse)) * 1e3
            try:
                row["torch_us"] = bench_ms(lambda: torch_merge(o_states, lse_states)) * 1e3
            except torch.OutOfMemoryError:
                row["torch_us"] = None
            meta["rows"].append(row)
            print(row, flush=True)
            failed = failed or wrong
            del o_states, lse_states, o, lse, plan
            torch.cuda.empty_cache()
            if args.out:
                write_json(args.out, meta)

    print(f"\nmerge, bf16, {h} heads, head dim {d}; copy bandwidth {copy_tbps:.2f} TB/s")
    print("states  batch  seqlen    MB   fagen us  TB/s  % copy   torch us  TB/s  x torch")
    for r in meta["rows"]:
        tb = r["bytes"] / (r["fagen_us"] * 1e-6) / 1e12
        tt = r["bytes"] / (r["torch_us"] * 1e-6) / 1e12 if r["torch_us"] else math.nan
        print("%6d %6d %7d %6.0f %10.1f %5.2f %6.0f %% %10.1f %5.2f %7.2fx%s" % (
            r["states"], r["batch"], r["seqlen"], r["bytes"] / 1e6, r["fagen_us"], tb,
            100 * tb / copy_tbps, r["torch_us"] or math.nan, tt,
            (r["torch_us"] or math.nan) / r["fagen_us"], "  WRONG" if r["wrong"] else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
