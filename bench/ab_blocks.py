"""A/B of forward kernels back to back, in blocks: for each cell (FlashAttention-3's shapes,
bf16, normal inputs), each label's call runs back to back for --seconds (a sync every 20 calls;
ms a call from CUDA events over the block), the labels in turn, --blocks rounds, the order
rotated each round so that no label always runs first or after the same one. Prints, per cell,
each label's median ms, its blocks' spread ((max - min) / median) and its median over the first
label's (> 1: slower than the first).

Labels: bundles, LABEL=PATH (each plan run with its forward workspace, as bench_fwd.py does) or
LABEL=PATH:nows (without); and SDPA's backends with --sdpa cudnn / flash. Every label's O is
compared with the first's (max |diff| in the table; over 0.05 the cell is marked WRONG).

Why: bench_fwd.py times each label in do_bench rounds with pauses between them, whose power
state differs from round to round: on the H200 one launch timed against itself there read
0.97-1.01 (session 25, docs/perf/README.md). Blocks of back-to-back calls under the power cap
spread under 1 %, so this is the A/B for effects of 1-2 % (it measures the sustained regime,
not bench_fwd.py's).

    python3 bench/ab_blocks.py --bundle A=a.fab --bundle B=b.fab --cells 256x2048,128x16384
    python3 bench/ab_blocks.py --bundle ws=x.fab --bundle nows=x.fab:nows --cells 256x8192 --causal
    python3 bench/ab_blocks.py --bundle fagen=x.fab --sdpa cudnn --cells 256x2048 --out ab.json
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa3  # noqa: E402

SYNC_EVERY = 20  # calls between synchronizations inside a block


def parse_bundle(spec):
    """'A=path/x.fab' -> ('A', 'path/x.fab', True); 'A=x.fab:nows' -> ('A', 'x.fab', False).
    ValueError naming the spec that is not LABEL=PATH[:nows]."""
    label, sep, rest = spec.partition("=")
    if not sep or not label or not rest:
        raise ValueError(f"--bundle '{spec}' is not LABEL=PATH[:nows], e.g. A=bench90a.fab")
    if label in ("cudnn", "flash"):
        raise ValueError(f"--bundle '{spec}': the labels cudnn and flash are --sdpa's")
    path, workspace = rest, True
    if rest.endswith(":nows"):
        path, workspace = rest[: -len(":nows")], False
    if not path:
        raise ValueError(f"--bundle '{spec}' has no path")
    return label, path, workspace


def round_order(labels, r):
    """The labels of round r: rotated by r, so each runs first once every len(labels) rounds."""
    k = r % len(labels)
    return labels[k:] + labels[:k]


def summarize(times, first):
    """(median, spread, median / first label's median) of one label's block times (ms)."""
    med = statistics.median(times)
    spread = (max(times) - min(times)) / med if med > 0 else 0.0
    return med, spread, med / first if first > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", action="append", default=[],
                    help="LABEL=PATH or LABEL=PATH:nows (without its forward workspace); repeat")
    ap.add_argument("--sdpa", action="append", default=[], choices=("cudnn", "flash"),
                    help="add SDPA's backend as a label; repeat")
    ap.add_argument("--cells", default="256x2048,256x16384", help="HDxSEQLEN,... (FA3 shapes)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seconds", type=float, default=1.0, help="length of a block")
    ap.add_argument("--blocks", type=int, default=4, help="blocks per label and cell")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    try:
        specs = [parse_bundle(b) for b in args.bundle]
        cells = fa3.parse_cells(args.cells)
    except ValueError as e:
        ap.error(str(e))
    labels = [s[0] for s in specs] + args.sdpa
    if len(labels) < 2 or len(set(labels)) != len(labels):
        ap.error("give two labels or more, each once (--bundle LABEL=PATH, --sdpa cudnn)")
    if args.blocks < 1 or args.seconds <= 0:
        ap.error("--blocks must be >= 1 and --seconds > 0")

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fagen_rt

    bundles = {}
    for label, path, _ in specs:
        if path not in bundles:
            bundles[path] = fagen_rt.Bundle(path)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows = []
    print(json.dumps({"gpu": torch.cuda.get_device_name(0), "labels": labels,
                      "causal": args.causal, "seconds": args.seconds, "blocks": args.blocks}),
          flush=True)
    print("hd seqlen causal  label       ms  spread  /first  TFLOP/s  max|diff|")
    for d, s in cells:
        b, h = fa3.shape(d, s)
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, S, H, D] views
        calls, outs = {}, {}
        for label, path, ws in specs:
            plan = bundles[path].plan_forward(qt, kt, vt, causal=args.causal)
            o = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
            lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
            calls[label] = (lambda plan=plan, o=o, lse=lse, ws=ws:
                            plan.run(qt, kt, vt, o, lse, workspace=ws))
            calls[label]()
            outs[label] = o.transpose(1, 2)
        for name in args.sdpa:
            backend = SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION

            def run(backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
            calls[name] = run
            outs[name] = run()

        def block(fn, seconds):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for _ in range(SYNC_EVERY):
                    fn()
                n += SYNC_EVERY
                torch.cuda.synchronize()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / n

        for label in labels:  # warm-up: clocks, modules, workspaces
            block(calls[label], 0.3)
        times = {label: [] for label in labels}
        for r in range(args.blocks):
            for label in round_order(labels, r):
                times[label].append(block(calls[label], args.seconds))
        first = statistics.median(times[labels[0]])
        flops = fa3.fwd_flops(d, s, args.causal)
        for label in labels:
            med, spread, ratio = summarize(times[label], first)
            diff = (outs[label].float() - outs[labels[0]].float()).abs().max().item()
            row = {"head_dim": d, "seqlen": s, "causal": args.causal, "label": label, "ms": med,
                   "spread": spread, "over_first": ratio, "tflops": flops / med / 1e9,
                   "max_abs_diff_vs_first": diff, "blocks_ms": times[label]}
            rows.append(row)
            print(f"{d:3d} {s:6d} {int(args.causal):6d}  {label:8s} {med:8.4f}  {spread:5.1%}  "
                  f"{ratio:6.3f}  {row['tflops']:7.1f}  {diff:.4f}{'  WRONG' if diff > 0.05 else ''}",
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"labels": labels, "causal": args.causal, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
