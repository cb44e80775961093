"""Forward attention benchmark: fagen vs PyTorch SDPA's flash (FlashAttention-2) and cuDNN
backends, side by side in one process on the same random inputs.

FlashAttention-3 protocol: bf16, batch x seqlen = 16k tokens, hidden 2048 (heads = 2048 /
head_dim), seqlen 512..16k, causal and not. TFLOP/s = 4*B*H*S^2*D (halved for causal) / time.
Timing: triton.testing.do_bench (CUDA events, warm-up, L2 cleared before each run, median).

    python3 bench/bench_fwd.py --bundle bench.fab [--out results.json] [--head-dims 64,128]

Before timing, each fagen output is compared with SDPA's flash output on the same inputs
(max |diff| must stay under 0.05 in bf16, else the row is marked WRONG and the run fails).
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
import fagen_rt  # noqa: E402

SEQLENS = {64: (512, 1024, 2048, 4096, 8192, 16384), 128: (512, 1024, 2048, 4096, 8192, 16384),
           256: (2048, 8192)}


def bench_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a bundle with bf16 forward kernels (bench/bench.yaml)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default=None, help="comma-separated; default: the FA3 protocol's")
    args = ap.parse_args()

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    bundle = fagen_rt.Bundle(args.bundle)
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "fagen": fagen_rt.version(),
            "bundle": os.path.basename(args.bundle), "rows": []}
    print(json.dumps({k: v for k, v in meta.items() if k != "rows"}), flush=True)
    torch.manual_seed(0)
    failed = False
    for d in [int(x) for x in args.head_dims.split(",")]:
        seqlens = [int(x) for x in args.seqlens.split(",")] if args.seqlens else SEQLENS[d]
        for causal in (False, True):
            for s in seqlens:
                b, h = max(1, 16384 // s), 2048 // d
                q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
                flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
                row = dict(head_dim=d, causal=causal, seqlen=s, batch=b, heads=h)
                # fagen reads [B, S, H, D]-indexed views; the BHSD tensors' transposes are that.
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                try:
                    plan = bundle.plan_forward(qt, kt, vt, causal=causal)
                    o = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
                    lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
                    plan.run(qt, kt, vt, o, lse)
                    row["kernel"] = plan.kernel.split(" ")[0]
                    fagen_out = o.transpose(1, 2)
                    row["fagen_ms"] = bench_ms(lambda: plan.run(qt, kt, vt, o, lse))
                except fagen_rt.FagenError as e:
                    print(f"fagen d={d} causal={causal} s={s}: {e}", flush=True)
                    fagen_out = None
                for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                      ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        with sdpa_kernel([backend]):
                            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            ref = fn()
                            row[name + "_ms"] = bench_ms(fn)
                        if name == "flash" and fagen_out is not None:
                            row["max_abs_diff_vs_flash"] = (fagen_out.float() - ref.float()).abs().max().item()
                    except Exception as e:  # a backend that does not support the shape
                        print(f"{name} d={d} causal={causal} s={s}: {type(e).__name__}: {str(e)[:100]}",
                              flush=True)
                for name in ("fagen", "flash", "cudnn"):
                    if row.get(name + "_ms"):
                        row[name + "_tflops"] = flops / row[name + "_ms"] / 1e9
                if row.get("max_abs_diff_vs_flash", 0) > 0.05:
                    row["wrong"] = True
                    failed = True
                meta["rows"].append(row)
                print(json.dumps(row), flush=True)
                del q, k, v
                torch.cuda.empty_cache()

    def fmt(x):
        return "%7.1f" % x if x else "      -"

    def ratio(a, b):
        return "%5.2fx" % (a / b) if a and b else "    -"

    print("\nhd causal  seqlen   fagen   flash   cudnn  fagen/flash fagen/cudnn  kernel")
    for r in meta["rows"]:
        f, fl, cu = r.get("fagen_tflops"), r.get("flash_tflops"), r.get("cudnn_tflops")
        print("%3d %-6s %6d %s %s %s   %s      %s     %s%s" % (
            r["head_dim"], "yes" if r["causal"] else "no", r["seqlen"], fmt(f), fmt(fl), fmt(cu),
            ratio(f, fl), ratio(f, cu), r.get("kernel", "-"), "  WRONG" if r.get("wrong") else ""))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(meta, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
