"""Backward attention benchmark: fagen vs PyTorch SDPA's flash (FlashAttention-2) and cuDNN
backends, side by side in one process on the same random inputs, through fagen's runtime and a
bundle (bench/bench.yaml builds forward and backward kernels).

FlashAttention-3 protocol: bf16, batch x seqlen = 16k tokens, hidden 2048 (heads = 2048 /
head_dim), causal and not. Backward FLOPs = 2.5x the forward's: 10*B*H*S^2*D (halved for
causal). Timed: fagen's backward call (its three kernels: D = rowsum(dO*O), the main kernel,
dQ conversion) against SDPA's backward (torch.autograd.grad of its output, the forward not
timed). triton.testing.do_bench: CUDA events, warm-up, L2 cleared before each run, median.

    python3 bench/bench_bwd.py --bundle bench.fab [--out results.json] [--deterministic]
    python3 bench/bench_bwd.py --bundle old=a.fab --bundle new=b.fab   # A/B in one process
    python3 bench/bench_bwd.py --bundle b.fab --head-dims 192x128       # Q/K 192, V 128 (MLA)

Head dims QKxV (e.g. 192x128) give V and dO their own head dim; heads = 2048 / QK, backward FLOPs
2*B*H*S^2*(3 QK + 2 V) (the five GEMMs; 10*B*H*S^2*D when equal), the reference the first SDPA
backend that runs the shape. Before timing, fagen's dQ, dK, dV are compared with SDPA flash's
(or that reference's) on the same inputs (max |diff|
relative to max |grad| must stay under 2e-2 in bf16, else the row is marked WRONG and the run
fails). --deterministic times the bundle's deterministic kernels beside the default ones, and
checks that their gradients after the timed runs equal the first run's bit for bit (else WRONG).
--train-step also times a training step's attention, forward + backward of the same call
(fagen's forward and backward plans back to back; SDPA's forward and autograd.grad under each
backend), 3.5x the forward's FLOPs, and prints it as a second table.
--dropout P also times the backward with dropout p (fagen's dropout kernels of the bundle, SDPA
flash and cuDNN with dropout_p), and prints what dropout costs each: the dropout backward's time
over the dense one's (the masks differ, so those gradients are only checked to be finite).
--kernel-times also runs each default backward 20 times under torch.profiler (fagen's, SDPA
flash's and cuDNN's on the same inputs) and prints each one's kernels' device time per call:
fagen's _pre / main / _post beside cuDNN's dot_do_o / main / dQ conversion.
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
import fa3  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402
from bench_decode import kernel_times  # noqa: E402
from tables import fmt, ratio, write_json  # noqa: E402

SEQLENS = (2048, 4096, 8192, 16384)


def bench_ms(fn):
    return do_bench(fn, warmup=10, rep=60, return_mode="median")


def rel_diff(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()


def empty_like_layout(t, layout):
    """An uninitialised [B, S, H, D]-indexed tensor like t, in `layout` memory."""
    if layout == "bhsd":
        return torch.empty(t.transpose(1, 2).shape, dtype=t.dtype, device=t.device).transpose(1, 2)
    return torch.empty_like(t)


def fagen_forward(fplan, q, k, v, layout, args=None):
    """fagen's forward into new O and LSE (the backward's inputs)."""
    o = empty_like_layout(q, layout)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
    fplan.run(q, k, v, o, lse, args=args)
    return o, lse


def fagen_backward(plan, q, k, v, o, lse, do, row, label, layout, args=None):
    """Runs `plan` once into dQ, dK, dV poisoned with NaN (and its workspace); records the
    kernel in row[label + "_kernel"]. Returns (run, (dq, dk, dv)): run repeats the call."""
    dq, dk, dv = (empty_like_layout(t, layout) for t in (q, k, v))
    ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    run = lambda: plan.run_backward(q, k, v, o, lse, do, dq, dk, dv, ws, args=args)
    for t in (dq, dk, dv):
        t.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    row[label + "_kernel"] = plan.kernel.split(" ")[0]
    return run, (dq, dk, dv)


def fagen_rows(name, bundle, q, k, v, do, causal, det_modes, row, ref_grads, layout,
               train_step=False, profile=False):
    """Runs fagen's forward then backward per deterministic mode; fills row[name...] in place
    (train_step: also row[name + "_step_ms"], forward + default backward).
    q, k, v, do: [B, S, H, D]-indexed views of `layout` memory; O, dQ, dK, dV alike."""
    fplan = bundle.plan_forward(q, k, v, causal=causal, out_layout=layout)
    o, lse = fagen_forward(fplan, q, k, v, layout)
    for det in det_modes:
        label = name + "_det" if det else name
        try:
            plan = bundle.plan_backward(q, k, v, deterministic=det, causal=causal, out_layout=layout)
        except fagen_rt.FagenError as e:
            print(f"{label}: {e}", flush=True)
            continue
        run, grads = fagen_backward(plan, q, k, v, o, lse, do, row, label, layout)
        diffs = [rel_diff(g, r) for g, r in zip(grads, ref_grads)]
        row[label + "_rel_diff"] = max(diffs)
        if not max(diffs) < 2e-2:  # NaN fails too
            row["wrong"] = True
        first = [t.clone() for t in grads] if det else None
        row[label + "_ms"] = bench_ms(run)
        if profile and not det:
            row[label + "_kernel_us"] = kernel_times(run)
        if train_step and not det:
            row[label + "_step_ms"] = bench_ms(lambda: (fplan.run(q, k, v, o, lse), run()))
        if det:  # the timed runs' last result must equal the first bit for bit
            same = all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                       for a, b in zip(first, grads))
            row[label + "_repeatable"] = same
            if not same:
                row["wrong"] = True


def fagen_dropout_row(name, bundle, q, k, v, do, causal, p, row, layout):
    """fagen's forward and backward with dropout p (seed 1, offset 0): fills row[name +
    "_drop..."]; the gradients must be finite (their mask is fagen's own)."""
    label = name + "_drop"
    args = fagen_rt.run_args(dropout_seed=1, dropout_offset=0)
    try:
        fplan = bundle.plan_forward(q, k, v, causal=causal, dropout_p=p, out_layout=layout)
        plan = bundle.plan_backward(q, k, v, causal=causal, dropout_p=p, out_layout=layout)
    except fagen_rt.FagenError as e:
        print(f"{label}: {e}", flush=True)
        return
    o, lse = fagen_forward(fplan, q, k, v, layout, args=args)
    run, grads = fagen_backward(plan, q, k, v, o, lse, do, row, label, layout, args=args)
    if not all(bool(torch.isfinite(t).all()) for t in grads):
        row["wrong"] = True
    row[label + "_ms"] = bench_ms(run)


def parse_head_dims(text):
    """'64,128,192x128' -> [(64, 64), (128, 128), (192, 128)]: (Q/K head dim, V head dim)."""
    dims = []
    for item in text.split(","):
        parts = item.strip().split("x")
        try:
            qk, v = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (None, None)
        except ValueError:
            qk = None
        if qk is None or qk <= 0 or v <= 0:
            raise SystemExit(f"--head-dims: '{item}' is not a head dim (128) or QKxV (192x128)")
        dims.append((qk, v))
    return dims


def dims_label(dqk, dv):
    return str(dqk) if dqk == dv else f"{dqk}x{dv}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, action="append",
                    help="a bundle with bf16 fwd + bwd kernels (bench/bench.yaml); repeat as "
                         "LABEL=PATH to time several bundles side by side (an A/B of templates)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--head-dims", default="64,128,256",
                    help="head dims, each D or QKxV (Q/K and V apart, e.g. 192x128)")
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    ap.add_argument("--deterministic", action="store_true",
                    help="also time the deterministic backward kernels")
    ap.add_argument("--dropout", type=float, default=0.0, metavar="P",
                    help="also time the backward with dropout P (the bundle's dropout kernels, "
                         "SDPA flash's and cuDNN's) and print what dropout costs")
    ap.add_argument("--train-step", action="store_true",
                    help="also time forward + backward of the same call (a training step's "
                         "attention) against SDPA flash and cuDNN")
    ap.add_argument("--kernel-times", action="store_true",
                    help="profile each default backward's kernels (torch.profiler) and print "
                         "their device times per call, fagen's beside SDPA flash's and cuDNN's")
    ap.add_argument("--layout", default="bshd", choices=("bshd", "bhsd"),
                    help="memory layout of every tensor (both sides see the same memory); "
                         "bshd: FlashAttention-3's benchmark, bhsd: torch's default")
    args = ap.parse_args()

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    bundles = []
    for i, spec in enumerate(args.bundle):
        label, path = spec.split("=", 1) if "=" in spec else ("fagen" if i == 0 else "fagen%d" % i, spec)
        bundles.append((label, fagen_rt.Bundle(path)))
    labels = [label for label, _ in bundles]
    meta = {"gpu": props.name, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "fagen": fagen_rt.version(),
            "bundles": {label: os.path.basename(p.split("=", 1)[-1]) for label, p in zip(labels, args.bundle)},
            "layout": args.layout, "rows": []}
    print(json.dumps({k: v for k, v in meta.items() if k != "rows"}), flush=True)
    det_modes = (False, True) if args.deterministic else (False,)
    torch.manual_seed(0)
    failed = False
    for d, dv in parse_head_dims(args.head_dims):
        for causal in (False, True):
            for s in [int(x) for x in args.seqlens.split(",")]:
                b, h = fa3.shape(d, s)
                # fagen takes [B, S, H, D]-indexed tensors, SDPA [B, H, S, D]: views of the same
                # memory, laid out as --layout says. V and dO have head dim dv.
                if args.layout == "bhsd":
                    q, k, v, do = (torch.randn(b, h, s, w, device=dev, dtype=torch.bfloat16)
                                   .transpose(1, 2) for w in (d, d, dv, dv))
                else:
                    q, k, v, do = (torch.randn(b, s, h, w, device=dev, dtype=torch.bfloat16)
                                   for w in (d, d, dv, dv))
                visible = b * h * s * s * (0.5 if causal else 1.0)
                flops = 2.0 * visible * (3 * d + 2 * dv)  # backward: S, dP, dV, dK, dQ
                step_flops = flops + 2.0 * visible * (d + dv)  # + the forward
                row = dict(head_dim=d, head_dim_v=dv, causal=causal, seqlen=s, batch=b, heads=h)
                ref_grads = None
                sdpa_runs = [("flash", SDPBackend.FLASH_ATTENTION, 0.0),
                             ("cudnn", SDPBackend.CUDNN_ATTENTION, 0.0)]
                if args.dropout > 0:
                    sdpa_runs += [("flash_drop", SDPBackend.FLASH_ATTENTION, args.dropout),
                                  ("cudnn_drop", SDPBackend.CUDNN_ATTENTION, args.dropout)]
                for name, backend, drop_p in sdpa_runs:
                    try:
                        qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
                        with sdpa_kernel([backend]):
                            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                                 dropout_p=drop_p)
                        dot = do.transpose(1, 2)
                        grads = torch.autograd.grad(out, (qt, kt, vt), dot, retain_graph=True)
                        if ref_grads is None and drop_p == 0:  # flash's, else cuDNN's
                            ref_grads = [g.transpose(1, 2) for g in grads]
                            row["reference"] = name
                        grad = lambda: torch.autograd.grad(out, (qt, kt, vt), dot,  # noqa: E731
                                                           retain_graph=True)
                        row[name + "_ms"] = bench_ms(grad)
                        if args.kernel_times and drop_p == 0:
                            row[name + "_kernel_us"] = kernel_times(grad)
                        del out
                        if args.train_step and drop_p == 0:
                            def step():
                                with sdpa_kernel([backend]):
                                    o2 = F.scaled_dot_product_attention(qt, kt, vt,
                                                                        is_causal=causal)
                                torch.autograd.grad(o2, (qt, kt, vt), dot)
                            row[name + "_step_ms"] = bench_ms(step)
                    except Exception as e:  # a backend that does not support the shape
                        print(f"{name} d={d} causal={causal} s={s}: {type(e).__name__}: "
                              f"{str(e)[:100]}", flush=True)
                if ref_grads is not None:
                    for label, bundle in bundles:
                        fagen_rows(label, bundle, q, k, v, do, causal, det_modes, row, ref_grads,
                                   args.layout, args.train_step, args.kernel_times)
                        if args.dropout > 0:
                            fagen_dropout_row(label, bundle, q, k, v, do, causal, args.dropout,
                                              row, args.layout)
                for name in (labels + [l + "_det" for l in labels] + [l + "_drop" for l in labels]
                             + ["flash", "cudnn", "flash_drop", "cudnn_drop"]):
                    if row.get(name + "_ms"):
                        row[name + "_tflops"] = flops / row[name + "_ms"] / 1e9
                    if row.get(name + "_step_ms"):  # forward + backward
                        row[name + "_step_tflops"] = step_flops / row[name + "_step_ms"] / 1e9
                failed = failed or row.get("wrong", False)
                meta["rows"].append(row)
                print(json.dumps(row), flush=True)
                del q, k, v, do, ref_grads
                torch.cuda.empty_cache()

    dets = [l + "_det" for l in labels] if args.deterministic else []
    cols = labels + dets
    head = "%-3s %-6s %6s " % ("hd", "causal", "seqlen") + " ".join("%8s" % c[-8:] for c in cols)
    head += "    flash    cudnn " + " ".join("%12s" % (l[:6] + "/flash") for l in labels)
    head += " " + " ".join("%12s" % (l[:6] + "/cudnn") for l in labels)
    head += "".join(" %13s" % (l[:6] + "/" + labels[0][:6]) for l in labels[1:])
    head += "".join(" %12s" % (l[:6] + " det/") for l in labels if args.deterministic)
    print("\n" + head + "  kernel")
    for r in meta["rows"]:
        t = {n: r.get(n + "_tflops") for n in cols + ["flash", "cudnn"]}
        line = "%3s %-6s %6d " % (dims_label(r["head_dim"], r["head_dim_v"]),
                                  "yes" if r["causal"] else "no", r["seqlen"])
        line += " ".join("%8s" % fmt(t[c]) for c in cols) + " %8s %8s " % (fmt(t["flash"]), fmt(t["cudnn"]))
        line += " ".join("%12s" % ratio(t[l], t["flash"]) for l in labels) + " "
        line += " ".join("%12s" % ratio(t[l], t["cudnn"]) for l in labels)
        line += "".join(" %13s" % ratio(t[l], t[labels[0]]) for l in labels[1:])
        line += "".join(" %12s" % ratio(t[l + "_det"], t[l]) for l in labels if args.deterministic)
        line += "  " + r.get(labels[0] + "_kernel", "-").replace("fagen_bwd_bf16_", "")
        print(line + ("  WRONG" if r.get("wrong") else ""))
    if args.train_step:
        print("\ntraining step (forward + backward of one call, 3.5x the forward's FLOPs): "
              "TFLOP/s")
        head = "%-3s %-6s %6s " % ("hd", "causal", "seqlen") + " ".join(
            "%8s" % l[-8:] for l in labels) + "    flash    cudnn "
        head += " ".join("%12s" % (l[:6] + "/flash") for l in labels) + " "
        print(head + " ".join("%12s" % (l[:6] + "/cudnn") for l in labels))
        for r in meta["rows"]:
            t = {n: r.get(n + "_step_tflops") for n in labels + ["flash", "cudnn"]}
            line = "%3s %-6s %6d " % (dims_label(r["head_dim"], r["head_dim_v"]),
                                  "yes" if r["causal"] else "no", r["seqlen"])
            line += " ".join("%8s" % fmt(t[l]) for l in labels)
            line += " %8s %8s " % (fmt(t["flash"]), fmt(t["cudnn"]))
            line += " ".join("%12s" % ratio(t[l], t["flash"]) for l in labels) + " "
            line += " ".join("%12s" % ratio(t[l], t["cudnn"]) for l in labels)
            print(line + ("  WRONG" if r.get("wrong") else ""))
    if args.dropout > 0:
        print("\ndropout p = %g: TFLOP/s of the dropout backward, its time over the dense one's"
              % args.dropout)
        head = "%-3s %-6s %6s " % ("hd", "causal", "seqlen") + " ".join(
            "%8s %10s" % (l[:8], l[:5] + " cost") for l in labels + ["flash", "cudnn"])
        print(head + " " + " ".join("%12s %12s" % (l[:6] + "/flash", l[:6] + "/cudnn")
                                    for l in labels) + "  kernel")
        for r in meta["rows"]:
            line = "%3s %-6s %6d " % (dims_label(r["head_dim"], r["head_dim_v"]),
                                  "yes" if r["causal"] else "no", r["seqlen"])
            for l in labels + ["flash", "cudnn"]:
                drop, dense = r.get(l + "_drop_ms"), r.get(l + "_ms")
                line += "%8s %10s " % (fmt(r.get(l + "_drop_tflops")),
                                       ratio(drop, dense) if drop and dense else "-")
            line += " ".join("%12s %12s" % (ratio(r.get(l + "_drop_tflops"),
                                                  r.get("flash_drop_tflops")),
                                            ratio(r.get(l + "_drop_tflops"),
                                                  r.get("cudnn_drop_tflops")))
                             for l in labels)
            line += "  " + r.get(labels[0] + "_drop_kernel", "-").replace("fagen_bwd_bf16_", "")
            print(line + ("  WRONG" if r.get("wrong") else ""))
    if args.kernel_times:
        print("\nkernel device time per call, us (--kernel-times): each kernel, largest first")
        for r in meta["rows"]:
            for name in labels + ["flash", "cudnn"]:
                times = r.get(name + "_kernel_us")
                if not times:
                    continue
                kernels = " + ".join("%.1f %s" % (us, k.split("(")[0][-40:])
                                     for k, us in sorted(times.items(), key=lambda kv: -kv[1]))
                print("%3s %-6s %6d %-8s %9.1f = %s" % (
                    dims_label(r["head_dim"], r["head_dim_v"]), "yes" if r["causal"] else "no",
                    r["seqlen"], name[:8], sum(times.values()), kernels))
    if args.out:
        write_json(args.out, meta)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
