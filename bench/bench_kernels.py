"""Every forward kernel of a bundle, each pinned by index, on the same inputs: what each config of
a variant costs against the dense kernels of the same bundle (tile A/B runs, planner rules).

    python3 bench/bench_kernels.py --bundle tiles.fab [--bundle LABEL=other.fab ...]
        [--seqlens 2048,16384] [--filter TEXT] [--out rows.json]

A LABEL names a bundle's kernels LABEL/NAME (an A/B of two template builds with equal names).

The kernels' names say what to run (fagen_fwd_{dtype}_hd{D}_{mask}[_features]_{template}_
{config}): masks none, causal and window (--window-left keys to the left, default 256), score mods softcap (30) and
alibi (slopes 2^-(8 (h + 1) / H)), dropout (p = 0.1, seed 7). Varlen, block-sparse and backward
kernels are left out. FA3's protocol: batch x seqlen = 16k tokens, hidden 2048, BSHD memory,
bf16 or fp16, triton's do_bench median. Each output is poisoned (NaN) before the first run and
must come out finite. A kernel's row says its time, TFLOP/s (4 B H S^2 D, halved for causal;
window counts the keys it sees), its time over the fastest config of its own workload
(`x best`), and over the fastest dense kernel (no score mod, no dropout) of the same dtype, head
dim and mask (`x dense`: the variant's cost; 1.15 = 15 % slower). The table is printed last.
--repeats N times every kernel of a shape N times in interleaved rounds, each round starting one
kernel later (a fixed order biases by position: on the H200 identical cubins read up to 11 %
apart by their place among six labels), and keeps the median.
"""
import argparse
import json
import os
import re
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa3  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402
from tables import write_json  # noqa: E402

DEV = torch.device("cuda")
NAME = re.compile(r"^fagen_fwd_(?P<dtype>bf16|fp16)_hd(?P<qk>\d+)(?:x(?P<v>\d+))?_"
                  r"(?P<mask>[a-z]+)(?P<features>(?:_[a-z0-9]+)*?)_(?P<templ>sm80|sm90ws|sm90)_"
                  r"(?P<config>m\d+n\d+w\d+s\d+.*)$")


def parse(name):
    """The call a kernel serves, from its name, or None where this script does not run it."""
    m = NAME.match(name)
    if not m:
        return None
    features = [f for f in m.group("features").split("_") if f]
    if any(f.startswith("bs") or f in ("varlen", "det") for f in features):
        return None
    if m.group("mask") not in ("none", "causal", "window"):
        return None
    qk = int(m.group("qk"))
    return dict(dtype=m.group("dtype"), qk=qk, v=int(m.group("v") or qk), mask=m.group("mask"),
                softcap="softcap" in features, alibi="alibi" in features,
                dropout="drop" in features, templ=m.group("templ"), config=m.group("config"),
                workload=name[:m.start("templ") - 1],
                dense="fagen_fwd_%s_%s_%s" % (m.group("dtype"), name.split("_")[3],
                                                m.group("mask")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, action="append",
                    help="a bundle (repeatable; kernels of every bundle are timed)")
    ap.add_argument("--seqlens", default="2048,16384")
    ap.add_argument("--filter", default="", help="only kernels whose name contains TEXT")
    ap.add_argument("--window-left", type=int, default=256,
                    help="keys to the left of the diagonal that window kernels see")
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=1,
                    help="interleaved rounds per shape, each starting one kernel later; median")
    args = ap.parse_args()
    if args.repeats < 1:
        sys.exit("bench_kernels: --repeats must be at least 1")
    seqlens = [int(s) for s in args.seqlens.split(",")]
    kernels = []  # (bundle, index, name, call)
    for spec in args.bundle:
        label, path = spec.split("=", 1) if "=" in spec else ("", spec)
        bundle = fagen_rt.Bundle(path)
        for i, described in enumerate(bundle.kernel_names):
            name = described.split(" ")[0]  # the runtime appends "(fwd sm_90 ...)"
            call = parse(name)
            if call is None or args.filter not in name:
                continue
            shown = label + "/" + name if label else name
            if not any(k[2] == shown for k in kernels):
                kernels.append((bundle, i, shown, call))
    if not kernels:
        sys.exit("bench_kernels: no forward kernel to time (see --filter and the docstring)")
    rows, failed = [], False
    torch.manual_seed(0)
    for s in seqlens:
        for key in sorted({(c["dtype"], c["qk"], c["v"]) for _, _, _, c in kernels}):
            dtype, qk, dv = key
            b, h = fa3.shape(qk, s)
            tdtype = torch.bfloat16 if dtype == "bf16" else torch.float16
            q = torch.randn(b, s, h, qk, device=DEV, dtype=tdtype)
            k = torch.randn(b, s, h, qk, device=DEV, dtype=tdtype)
            v = torch.randn(b, s, h, dv, device=DEV, dtype=tdtype)
            o = torch.empty(b, s, h, dv, device=DEV, dtype=tdtype)
            lse = torch.empty(b, h, s, device=DEV, dtype=torch.float32)
            slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)],
                                  device=DEV, dtype=torch.float32)
            timed = []  # (name, call, plan, run args, finite) of this shape
            for bundle, index, name, c in kernels:
                if (c["dtype"], c["qk"], c["v"]) != key:
                    continue
                variant = dict(mask=c["mask"], softcap=30.0 if c["softcap"] else 0.0,
                               alibi=c["alibi"], dropout_p=0.1 if c["dropout"] else 0.0)
                if c["mask"] == "window":
                    variant["window"] = (args.window_left, 0)
                run = fagen_rt.run_args(alibi_slopes=slopes if c["alibi"] else None,
                                        dropout_seed=7)
                try:
                    plan = bundle.plan_forward(q, k, v, kernel_index=index, **variant)
                except fagen_rt.FagenError as e:
                    print(f"{name}: {str(e)[:120]}", flush=True)
                    continue
                o.fill_(float("nan"))
                plan.run(q, k, v, o, lse, args=run)
                torch.cuda.synchronize()
                finite = bool(torch.isfinite(o).all().item())
                failed |= not finite
                timed.append((name, c, plan, run, finite))
            times = {name: [] for name, _, _, _, _ in timed}
            for r in range(args.repeats):
                for i in range(len(timed)):
                    name, c, plan, run, _ = timed[(i + r) % len(timed)]
                    times[name].append(do_bench(lambda: plan.run(q, k, v, o, lse, args=run),
                                                warmup=25, rep=100, return_mode="median"))
            for name, c, plan, run, finite in timed:
                ms = statistics.median(times[name])
                keys = s if c["mask"] == "none" else min(s, args.window_left + 1) \
                    if c["mask"] == "window" else (s + 1) / 2
                flops = 2.0 * b * h * s * keys * (c["qk"] + c["v"])
                row = dict(kernel=name, seqlen=s, ms=ms, tflops=flops / ms * 1e-9,
                           window_left=args.window_left if c["mask"] == "window" else None,
                           finite=finite, rounds_ms=times[name], **c)
                rows.append(row)
                print(json.dumps(row), flush=True)
            del q, k, v, o, lse
    for r in rows:
        same = [x["ms"] for x in rows if x["seqlen"] == r["seqlen"]
                and x["workload"] == r["workload"]]
        dense = [x["ms"] for x in rows if x["seqlen"] == r["seqlen"]
                 and x["workload"] == r["dense"]]
        r["x_best"] = r["ms"] / min(same)
        r["x_dense"] = r["ms"] / min(dense) if dense else None
    if args.out:
        write_json(args.out, rows)
    print("\n| kernel | seqlen | ms | TFLOP/s | x best | x dense |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in sorted(rows, key=lambda r: (r["workload"], r["seqlen"], r["ms"])):
        xd = "%.3f" % r["x_dense"] if r["x_dense"] else "-"
        bad = "" if r["finite"] else " NOT FINITE"
        print(f"| `{r['kernel']}`{bad} | {r['seqlen']} | {r['ms']:.3f} | {r['tflops']:.1f} | "
              f"{r['x_best']:.3f} | {xd} |")
    if failed:
        sys.exit("bench_kernels: a kernel left non-finite values in its output")


if __name__ == "__main__":
    main()
