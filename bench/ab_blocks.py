"""A/B of forward kernels back to back, in blocks: for each cell (FlashAttention-3's shapes,
bf16, normal inputs, no L2 clears), each label's call runs back to back for --seconds (ms a
call from CUDA events over the block), the labels in turn, --blocks rounds, the round's order
rotated so that each label runs first in turn (give a multiple of the label count as --blocks
to balance that). Prints, per cell, each label's median ms, its blocks' spread ((max - min) /
median), its median over the first label's (> 1: slower than the first) and its max |diff| to
the first label's O.

Labels: bundles, LABEL=PATH (each plan run with its forward workspace, as bench_fwd.py does) or
LABEL=PATH:nows (without); and SDPA's backends with --sdpa cudnn / flash (after the bundles).
The first label's O is the reference: a label whose O differs from it by more than 0.05 (or is
not finite) is marked WRONG, and the exit status is then 1. In a cell where the first label does
not run (its bundle has no kernel for the shape, or its SDPA backend refuses it), the first
label that runs is the reference, and a line says so.

Why: bench_fwd.py times each label in do_bench rounds with pauses between them, whose power
state differs from round to round: on the H200 one launch timed against itself there read
0.97-1.01 (2026-12-01). Blocks of back-to-back calls under the power cap spread 0.1-1.7 % there,
so this is the A/B for effects of 1-2 % (docs/perf/README.md). It measures
the sustained regime, not bench_fwd.py's.

The queue is kept full: a block syncs only every `sync_every` calls, chosen so that about 50 ms
of work sits between syncs (at least 20 calls), so the host's launch latency after a sync
(tens of microseconds, more for SDPA than for fagen's ctypes call) stays under 0.1 % of a
block; SDPA's backend is selected once around a block, not per call.

    python3 bench/ab_blocks.py --bundle A=a.fab --bundle B=b.fab --cells 256x2048,128x16384
    python3 bench/ab_blocks.py --bundle ws=x.fab --bundle nows=x.fab:nows --cells 256x8192 --causal
    python3 bench/ab_blocks.py --bundle fagen=x.fab --sdpa cudnn --cells 256x2048 --out ab.json
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa3  # noqa: E402
import tables  # noqa: E402

SYNC_MS = 50.0  # work between syncs inside a block (see the docstring)
MIN_SYNC_EVERY = 20


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


def check_labels(labels, blocks, seconds):
    """'' or why the run cannot go ahead; a note where --blocks leaves the first places
    unbalanced is the caller's (balanced())."""
    if len(labels) < 2:
        return "give two labels or more (--bundle LABEL=PATH, --sdpa cudnn)"
    if len(set(labels)) != len(labels):
        return "each label once: " + ", ".join(labels)
    if blocks < 1 or not seconds > 0:
        return "--blocks must be >= 1 and --seconds > 0"
    return ""


def balanced(labels, blocks):
    """Whether every label runs first equally often over `blocks` rounds."""
    return blocks % len(labels) == 0


def round_order(labels, r):
    """The labels of round r: rotated by r, so each runs first once every len(labels) rounds
    (the cyclic order itself is kept)."""
    k = r % len(labels)
    return labels[k:] + labels[:k]


def sync_every(ms_per_call):
    """Calls between syncs: about SYNC_MS of work, at least MIN_SYNC_EVERY."""
    if not ms_per_call > 0:
        return MIN_SYNC_EVERY
    return max(MIN_SYNC_EVERY, int(SYNC_MS / ms_per_call))


def summarize(times, first):
    """(median, spread, median / first label's median) of one label's block times (ms)."""
    med = statistics.median(times)
    spread = (max(times) - min(times)) / med if med > 0 else 0.0
    return med, spread, med / first if first > 0 else float("nan")


def reference_note(labels, present, d, s):
    """A line saying that a cell's reference is not the first label (which did not run there:
    it failed to plan, or its SDPA backend refused the shape), else ''."""
    if not present or present[0] == labels[0]:
        return ""
    return (f"d={d} s={s}: {labels[0]} did not run, so {present[0]} is this cell's reference "
            f"(its /first ratios and max|diff| are against {present[0]})")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", action="append", default=[],
                    help="LABEL=PATH or LABEL=PATH:nows (without its forward workspace); repeat")
    ap.add_argument("--sdpa", action="append", default=[], choices=("cudnn", "flash"),
                    help="add SDPA's backend as a label (after the bundles); repeat")
    ap.add_argument("--cells", default="256x2048,256x16384", help="HDxSEQLEN,... (FA3 shapes)")
    ap.add_argument("--causal", action="store_true")
    # 1 s blocks, 4 each: spreads 0.1-1.7 % on the H200 (2026-12-01).
    ap.add_argument("--seconds", type=float, default=1.0, help="length of a block (s)")
    ap.add_argument("--blocks", type=int, default=4, help="blocks per label and cell")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    try:
        specs = [parse_bundle(b) for b in args.bundle]
        cells = fa3.parse_cells(args.cells)
    except ValueError as e:
        ap.error(str(e))
    labels = [s[0] for s in specs] + args.sdpa
    why = check_labels(labels, args.blocks, args.seconds)
    if why:
        ap.error(why)
    if not balanced(labels, args.blocks):
        print(f"ab_blocks.py: note: --blocks {args.blocks} is not a multiple of the "
              f"{len(labels)} labels: some label runs first more often", file=sys.stderr)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from fagen import runtime as fagen_rt

    bundles = {}
    for label, path, _ in specs:
        if path not in bundles:
            bundles[path] = fagen_rt.Bundle(path)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "fagen": fagen_rt.version(),
            "labels": labels, "bundles": {l: {"path": p, "workspace": w} for l, p, w in specs},
            "causal": args.causal, "seconds": args.seconds, "blocks": args.blocks}
    print(json.dumps(meta), flush=True)
    print("hd seqlen causal  label       ms  spread  /first  TFLOP/s  max|diff|")
    rows, failed = [], False
    for d, s in cells:
        b, h = fa3.shape(d, s)
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, S, H, D] views
        calls, outs, info = {}, {}, {}
        for label, path, ws in specs:
            try:
                plan = bundles[path].plan_forward(qt, kt, vt, causal=args.causal)
            except fagen_rt.FagenError as e:
                print(f"{label} d={d} s={s}: {e}", flush=True)
                continue
            o = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
            lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
            calls[label] = (lambda plan=plan, o=o, lse=lse, ws=ws:
                            plan.run(qt, kt, vt, o, lse, workspace=ws), contextlib.nullcontext)
            calls[label][0]()
            outs[label] = o.transpose(1, 2)
            info[label] = {"kernel": plan.kernel.split(" ")[0],
                           "workspace_bytes": plan.workspace_bytes if ws else 0}
        for name in args.sdpa:
            backend = SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)  # noqa: E731
            ctx = lambda backend=backend: sdpa_kernel([backend])  # noqa: E731
            try:
                with ctx():
                    outs[name] = run()
            except Exception as e:  # a backend that does not support the shape
                print(f"{name} d={d} s={s}: {type(e).__name__}: {str(e)[:100]}", flush=True)
                continue
            calls[name] = (run, ctx)
        present = [l for l in labels if l in calls]
        if len(present) < 2:
            continue
        note = reference_note(labels, present, d, s)
        if note:
            print(note, flush=True)

        def block(label, seconds, every):
            fn, ctx = calls[label]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with ctx():
                torch.cuda.synchronize()
                start.record()
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    for _ in range(every):
                        fn()
                    n += every
                    torch.cuda.synchronize()
                end.record()
                torch.cuda.synchronize()
            return start.elapsed_time(end) / n

        every = {}
        for label in present:  # warm-up (clocks, modules, workspaces), then its sync interval
            every[label] = sync_every(block(label, 0.3, MIN_SYNC_EVERY))
        times = {label: [] for label in present}
        for r in range(args.blocks):
            for label in round_order(present, r):
                times[label].append(block(label, args.seconds, every[label]))
        first = statistics.median(times[present[0]])
        flops = fa3.fwd_flops(d, s, args.causal)
        for label in present:
            med, spread, ratio = summarize(times[label], first)
            diff = (outs[label].float() - outs[present[0]].float()).abs().max().item()
            wrong = tables.is_wrong(diff)
            failed |= wrong
            row = {"head_dim": d, "seqlen": s, "causal": args.causal, "label": label,
                   "reference": present[0], "ms": med,
                   "spread": spread, "over_first": ratio, "tflops": flops / med / 1e9,
                   "max_abs_diff_vs_first": diff, "wrong": wrong, "sync_every": every[label],
                   "blocks_ms": times[label], **info.get(label, {})}
            rows.append(row)
            print(f"{d:3d} {s:6d} {int(args.causal):6d}  {label:8s} {med:8.4f}  {spread:5.1%}  "
                  f"{ratio:6.3f}  {row['tflops']:7.1f}  {diff:.4f}{'  WRONG' if wrong else ''}",
                  flush=True)
    if args.out:
        tables.write_json(args.out, {**meta, "rows": rows})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
