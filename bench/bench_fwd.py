"""Forward attention benchmark: fagen vs PyTorch SDPA's flash (FlashAttention-2) and cuDNN
backends, side by side in one process on the same random inputs.

FlashAttention-3 protocol: bf16 (--dtype fp16: fp16 inputs, a bundle with fp16 kernels such as
bench/bench-fp16.yaml's), batch x seqlen = 16k tokens (--batch N: batch N at every seqlen),
hidden 2048 (heads = 2048 / head_dim), seqlen 512..16k, causal and not.
TFLOP/s = 4*B*H*S^2*D (halved for causal) / time.
Timing: triton.testing.do_bench (CUDA events, warm-up, L2 cleared before each run, median).
--repeats N times every implementation of a row N times in interleaved rounds (each fagen
bundle, flash, cuDNN; each round starts one name later) and keeps the median: on the H200 the
same cubin measured up to 11 % apart within a row and cuDNN's time up to 10 % apart between
processes (2026-11-30); the rounds are kept as NAME_ms_all.

    python3 bench/bench_fwd.py --bundle bench.fab [--out results.json] [--head-dims 64,128]
    python3 bench/bench_fwd.py --bundle default=bench.fab --bundle tuned=tuned.fab   # compare
    python3 bench/bench_fwd.py --bundle a=a.fab --bundle b=b.fab --repeats 3        # A/B
    python3 bench/bench_fwd.py --bundle fp16.fab --dtype fp16     # bench/bench-fp16.yaml's kernels
    python3 bench/bench_fwd.py --bundle bench.fab --workspace-ab --repeats 3  # tile counter A/B

fagen runs each plan with its forward workspace (a tile counter for the sm90ws kernels of
uneven tiles: one CTA per SM taking tiles as they free up); --workspace-ab also times every
bundle without one (label nows_LABEL: one CTA per tile), the same cubins.

Before timing, each fagen output is compared with SDPA's flash output on the same inputs
(max |diff| must stay under 0.05 and be finite, else the row is marked WRONG and the run fails).
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa3  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402
from tables import fmt, is_wrong, ratio, write_json  # noqa: E402

SEQLENS = {64: (512, 1024, 2048, 4096, 8192, 16384), 128: (512, 1024, 2048, 4096, 8192, 16384),
           256: (2048, 8192)}


def bench_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, action="append",
                    help="a bundle with forward kernels of --dtype (bench/bench.yaml: bf16); repeat as "
                         "LABEL=PATH to time several bundles side by side (e.g. default vs tuned)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default=None, help="comma-separated; default: the FA3 protocol's")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"),
                    help="input and output type (default bf16, the FA3 protocol's)")
    ap.add_argument("--workspace-ab", action="store_true",
                    help="also time each bundle without a forward workspace (nows_LABEL)")
    ap.add_argument("--batch", type=int, default=None,
                    help="batch size of every shape (default: 16384 // seqlen, so that each "
                         "shape has 16k tokens); e.g. to see how the work tiles fill the SMs")
    ap.add_argument("--repeats", type=int, default=1,
                    help="time each implementation this many times in interleaved rounds and "
                         "keep the median (default 1)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.batch is not None and args.batch < 1:
        ap.error(f"--batch must be >= 1, got {args.batch}")

    dev = torch.device("cuda")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    props = torch.cuda.get_device_properties(0)
    bundles = []
    for i, spec in enumerate(args.bundle):
        label, path = spec.split("=", 1) if "=" in spec else ("fagen" if i == 0 else "fagen%d" % i, spec)
        bundles.append((label, fagen_rt.Bundle(path), True))
        if args.workspace_ab:
            bundles.append(("nows_" + label, bundles[-1][1], False))
    labels = [label for label, _, _ in bundles]
    paths = [p.split("=", 1)[-1] for p in args.bundle]
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "fagen": fagen_rt.version(), "dtype": args.dtype,
            "bundles": {label: os.path.basename(paths[i // (2 if args.workspace_ab else 1)])
                        for i, label in enumerate(labels)},
            "workspace_ab": args.workspace_ab, "rows": []}
    print(json.dumps({k: v for k, v in meta.items() if k != "rows"}), flush=True)
    torch.manual_seed(0)
    failed = False
    for d in [int(x) for x in args.head_dims.split(",")]:
        seqlens = [int(x) for x in args.seqlens.split(",")] if args.seqlens else SEQLENS[d]
        for causal in (False, True):
            for s in seqlens:
                b, h = fa3.shape(d, s)
                b = args.batch or b
                q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype) for _ in range(3))
                flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
                row = dict(head_dim=d, causal=causal, seqlen=s, batch=b, heads=h)
                # fagen reads [B, S, H, D]-indexed views; the BHSD tensors' transposes are that.
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                fagen_out = None
                timed = {}  # name -> (the call to time, its SDPA backend or None)
                for label, bundle, ws in bundles:
                    try:
                        plan = bundle.plan_forward(qt, kt, vt, causal=causal)
                        o = torch.empty(b, s, h, d, device=dev, dtype=dtype)
                        lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
                        plan.run(qt, kt, vt, o, lse, workspace=ws)
                        row[label + "_workspace_bytes"] = plan.workspace_bytes if ws else 0
                        row[label + "_kernel"] = plan.kernel.split(" ")[0]
                        if fagen_out is None:
                            fagen_out = o.transpose(1, 2)
                        else:  # every bundle must compute the same function
                            diff = (o.transpose(1, 2).float() - fagen_out.float()).abs().max().item()
                            row[label + "_max_abs_diff_vs_" + labels[0]] = diff
                            if is_wrong(diff):
                                row["wrong"] = True
                        run = lambda plan=plan, o=o, lse=lse, ws=ws: plan.run(qt, kt, vt, o, lse,
                                                                              workspace=ws)
                        timed[label] = (run, None)
                    except fagen_rt.FagenError as e:
                        print(f"{label} d={d} causal={causal} s={s}: {e}", flush=True)
                for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                      ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    try:
                        with sdpa_kernel([backend]):
                            ref = fn()
                        timed[name] = (fn, backend)
                        if name == "flash" and fagen_out is not None:
                            row["max_abs_diff_vs_flash"] = (fagen_out.float() - ref.float()).abs().max().item()
                    except Exception as e:  # a backend that does not support the shape
                        print(f"{name} d={d} causal={causal} s={s}: {type(e).__name__}: {str(e)[:100]}",
                              flush=True)
                runs = {name: [] for name in timed}
                names = list(timed)
                for rnd in range(args.repeats if names else 0):  # interleaved rounds,
                    first = rnd % len(names)                       # each from the next name
                    for name in names[first:] + names[:first]:
                        if name not in runs:  # failed in an earlier round
                            continue
                        fn, backend = timed[name]
                        try:
                            if backend is None:
                                runs[name].append(bench_ms(fn))
                            else:
                                with sdpa_kernel([backend]):
                                    runs[name].append(bench_ms(fn))
                        except Exception as e:  # the row keeps the others' times
                            print(f"{name} d={d} causal={causal} s={s}: timing failed: "
                                  f"{type(e).__name__}: {str(e)[:100]}", flush=True)
                            del runs[name]
                for name, ms in runs.items():
                    row[name + "_ms"] = statistics.median(ms)
                    if args.repeats > 1:
                        row[name + "_ms_all"] = ms
                for name in labels + ["flash", "cudnn"]:
                    if row.get(name + "_ms"):
                        row[name + "_tflops"] = flops / row[name + "_ms"] / 1e9
                if is_wrong(row.get("max_abs_diff_vs_flash", 0.0)):
                    row["wrong"] = True
                failed = failed or row.get("wrong", False)
                meta["rows"].append(row)
                print(json.dumps(row), flush=True)
                del q, k, v
                torch.cuda.empty_cache()

    head = "%-3s %-6s %6s " % ("hd", "causal", "seqlen") + " ".join("%8s" % l[:8] for l in labels)
    head += "    flash    cudnn " + " ".join("%12s" % (l[:6] + "/flash") for l in labels)
    head += " " + " ".join("%12s" % (l[:6] + "/cudnn") for l in labels)
    if len(labels) > 1:
        head += " " + " ".join("%13s" % (l[:6] + "/" + labels[0][:6]) for l in labels[1:])
    print("\n" + head + "  kernel")
    for r in meta["rows"]:
        t = {n: r.get(n + "_tflops") for n in labels + ["flash", "cudnn"]}
        line = "%3d %-6s %6d " % (r["head_dim"], "yes" if r["causal"] else "no", r["seqlen"])
        line += " ".join("%8s" % fmt(t[l]) for l in labels) + " %8s %8s " % (fmt(t["flash"]), fmt(t["cudnn"]))
        line += " ".join("%12s" % ratio(t[l], t["flash"]) for l in labels) + " "
        line += " ".join("%12s" % ratio(t[l], t["cudnn"]) for l in labels)
        if len(labels) > 1:
            line += " " + " ".join("%13s" % ratio(t[l], t[labels[0]]) for l in labels[1:])
        line += "  " + " ".join(r.get(l + "_kernel", "-").replace("fagen_fwd_bf16_", "") for l in labels)
        print(line + ("  WRONG" if r.get("wrong") else ""))
    if args.out:
        write_json(args.out, meta)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
