"""Decode attention benchmark: fagen's split-KV decode kernel vs PyTorch SDPA's flash
(FlashAttention-2) and cuDNN backends, side by side in one process on the same inputs, as
effective K/V read bandwidth against the GPU's copy bandwidth measured in the same run.

Cells: bf16, head dim 128, one query token per sequence (--q-tokens N: N tokens, causal
bottom-right, as speculative verification), GQA 32/8 and MHA 32/32 (--heads), batch x context
(--batches, --contexts); a cell whose K and V exceed --max-kv-gb is skipped. Effective
bandwidth = the bytes of K and V (2 x B x Sk x Hkv x D x 2) / time: what one decode step must
read. Copy bandwidth: a device-to-device copy of a 1 GiB buffer, (bytes read + written) / time,
the best of 3 measurements. Timing: triton.testing.do_bench (CUDA events, warm-up, L2 cleared
before each run, median).

SDPA runs with enable_gqa where the backend takes it; where it does not, K and V are expanded
to the query heads first (the row notes "expanded": that backend then reads group-size times
the cache's bytes; the bandwidth column still counts the cache's bytes only).

    python3 bench/bench_decode.py --bundle decode.fab [--out decode.json]
    python3 bench/bench_decode.py --bundle decode.fab --q-tokens 4 --contexts 8192,32768

--paged [--page-size 16]: fagen's paged decode kernel too (a bundle built with kv_cache: paged,
bench/bench-decode.yaml), on the same K and V moved into a cache of page-size-token pages in
shuffled order, every sequence its full context; its output should equal the contiguous
kernel's bit for bit (the notes say where not; WRONG past the tolerance), and the table adds its TB/s and its ratio to the contiguous kernel
(the target: within 5 %), and what an append of the call's tokens adds (the same run with
k_new / v_new, the last tokens' own keys and values, over cache lengths that exclude them: the
output must still be the contiguous kernel's bit for bit).

--splits 1,2,4,8,16,32: fagen's kernel also with each of these split counts (Plan.
set_decode_splits; a split past the last key tile holds none), each output checked against the
reference, and a table of the times per count beside the planned count (* marks it) and cuDNN:
how the split rule (templates/common/decode_split.h) was measured.

--kernel-times: each timed call also runs 20 times under torch.profiler, and the rows get the
device time of each kernel it launched (fagen: the split kernel and its combine, with --paged
the paged call's too, its status memset included; SDPA's
kernels) per call, printed after the table for the cells of batch <= 16, and fagen's time with
one split (no workspace, no combine): where a small cell's time goes (kernels vs the gaps
between them, the combine, the split count; issue 34, decode small-batch speed).

Before timing, fagen's output is compared with SDPA flash's (else cuDNN's) on the same inputs
(max |diff| under 0.05 and finite, else the row is WRONG and the run exits 1). fagen runs each
plan with its workspace (the split partials; plan.run allocates it once).
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
from tables import is_wrong, run_row  # noqa: E402

BACKENDS = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))


def bench_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def copy_bandwidth(dev):
    """Device-to-device copy of 1 GiB: (read + written bytes) / time, best of 3, in TB/s."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    best = min(bench_ms(lambda: dst.copy_(src)) for _ in range(3))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / (best * 1e-3) / 1e12


def sdpa_call(backend, q, k, v, tokens):
    """SDPA on [B, H, S, D] views: the call to time and whether K/V had to be expanded."""
    mask = None
    if tokens > 1:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(tokens, k.shape[2])
    group = q.shape[1] // k.shape[1]

    def native():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=group > 1)

    try:
        native()
        return native, False
    except (RuntimeError, TypeError):
        if group == 1:
            raise
    ke, ve = (t.repeat_interleave(group, dim=1) for t in (k, v))

    def expanded():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask)

    expanded()
    return expanded, True


def kernel_times(fn, reps=20):
    """{kernel name: device microseconds per call} of `fn`'s launches (torch.profiler, CUPTI:
    the runtime's driver-API launches too), memsets and copies included."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
    except RuntimeError as e:  # no CUPTI: the timings stand without the breakdown
        print(f"--kernel-times: torch.profiler failed: {str(e).splitlines()[0][:200]}", flush=True)
        return {}
    out = {}
    for e in prof.key_averages():
        # Device events only (a host op's total would count its kernels again), self time.
        if "CUDA" not in str(getattr(e, "device_type", "CUDA")):
            continue
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            out[e.key] = us / reps
    return out


def paged_inputs(k, v, page_size, gen):
    """K and V [B, S, H, D] as caches [B * S / page_size pages, page_size, H, D] in shuffled
    page order, and the block table int32 [B, S / page_size]."""
    b, s, h, d = k.shape
    pages = b * s // page_size
    order = torch.randperm(pages, generator=gen).to(k.device)
    table = order.view(b, s // page_size).to(torch.int32).contiguous()
    caches = []
    for t in (k, v):
        cache = torch.empty(pages, page_size, h, d, device=t.device, dtype=t.dtype)
        cache[order] = t.reshape(pages, page_size, h, d)
        caches.append(cache)
    return caches[0], caches[1], table


def run_paged(bundle, q, k, v, o_contiguous, page_size, row, profile=False):
    """fagen's paged kernel on the cell's K and V (every cache length the context): its time
    and whether it gives the contiguous kernel's bits."""
    batch, context = k.shape[0], k.shape[1]
    if context % page_size:
        row["paged_error"] = f"context {context} is not a multiple of the page size {page_size}"
        return False
    kc, vc, table = paged_inputs(k, v, page_size, torch.Generator().manual_seed(1))
    used = torch.full((batch,), context, dtype=torch.int32, device=k.device)
    plan = bundle.plan_forward_paged(q, kc, vc, table, context, causal=True)
    row["paged_kernel"] = plan.kernel.split(" ")[0]
    o = torch.empty_like(o_contiguous)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32)
    plan.run_paged(q, kc, vc, o, lse, table, used)
    plan.status()
    row["paged_bitwise"] = bool(torch.equal(o, o_contiguous))
    row["paged_max_abs_diff"] = (o.float() - o_contiguous.float()).abs().max().item()
    row["paged_ms"] = bench_ms(lambda: plan.run_paged(q, kc, vc, o, lse, table, used))
    if profile:
        row["paged_kernel_us"] = kernel_times(lambda: plan.run_paged(q, kc, vc, o, lse, table,
                                                                     used))
    # With an append: the last tokens' K and V written into their own rows (NaN before it, as
    # is O) over the cache lengths before them, so the output is still the contiguous kernel's.
    tokens = q.shape[1]
    before = used - tokens
    k_new, v_new = k[:, -tokens:], v[:, -tokens:]
    keys = torch.arange(context - tokens, context, device=k.device)
    pages, rows = table[:, keys // page_size].long(), (keys % page_size).expand(batch, tokens)
    kc[pages, rows] = float("nan")
    vc[pages, rows] = float("nan")
    o.fill_(float("nan"))
    plan.run_paged(q, kc, vc, o, lse, table, before, k_new=k_new, v_new=v_new)
    plan.status()
    row["append_bitwise"] = bool(torch.equal(o, o_contiguous)
                                 and torch.equal(kc[pages, rows], k_new)
                                 and torch.equal(vc[pages, rows], v_new))
    row["append_ms"] = bench_ms(lambda: plan.run_paged(q, kc, vc, o, lse, table, before,
                                                       k_new=k_new, v_new=v_new))
    return not is_wrong(row["paged_max_abs_diff"]) and row["append_bitwise"]


def run_splits(bundle, q, k, v, reference, counts, row):
    """fagen's decode with each split count of `counts`: its time per count in
    row["split_ms"]; False if an output is WRONG against the reference."""
    ok = True
    row["split_ms"] = {}
    for n in counts:
        plan = bundle.plan_forward(q, k, v, causal=True)
        plan.set_decode_splits(n)
        o = torch.empty_like(q)
        lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device,
                          dtype=torch.float32)
        plan.run(q, k, v, o, lse)
        torch.cuda.synchronize()
        if reference is not None and is_wrong((o.float() - reference.float()).abs().max().item()):
            row.setdefault("split_wrong", []).append(n)
            ok = False
        row["split_ms"][n] = bench_ms(lambda: plan.run(q, k, v, o, lse))
    return ok


def run_cell(bundle, dev, heads_q, heads_kv, batch, context, tokens, d, row, page_size=0,
             profile=False, splits=()):
    """Times fagen and the SDPA backends on one cell; fills `row`. False if fagen is WRONG."""
    q = torch.randn(batch, tokens, heads_q, d, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(batch, context, heads_kv, d, device=dev, dtype=torch.bfloat16)
            for _ in range(2))
    kv_bytes = 2 * k.numel() * k.element_size()
    plan = bundle.plan_forward(q, k, v, causal=True)
    row["fagen_kernel"] = plan.kernel.split(" ")[0]
    row["fagen_ctas"] = plan.grid[0] * plan.grid[1] * plan.grid[2]
    row["fagen_splits"] = plan.decode_splits
    row["fagen_workspace_bytes"] = plan.workspace_bytes
    o = torch.empty(batch, tokens, heads_q, d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(batch, heads_q, tokens, device=dev, dtype=torch.float32)
    plan.run(q, k, v, o, lse)
    torch.cuda.synchronize()
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    reference = None
    for name, backend in BACKENDS:
        try:
            call, expanded = sdpa_call(backend, qt, kt, vt, tokens)
        except RuntimeError as e:
            row[name + "_error"] = str(e).splitlines()[0][:200]
            continue
        if reference is None:
            reference = call().transpose(1, 2)
            row["reference"] = name
        row[name + "_expanded"] = expanded
        row[name + "_ms"] = bench_ms(call)
        if profile:
            row[name + "_kernel_us"] = kernel_times(call)
        del call
    ok = True
    if reference is not None:
        diff = (o.float() - reference.float()).abs().max().item()
        row["max_abs_diff"] = diff
        ok = not is_wrong(diff)
    row["fagen_ms"] = bench_ms(lambda: plan.run(q, k, v, o, lse))
    o_planned = o.clone()  # the planned splits' output, before the one-split run overwrites o
    if profile:
        row["fagen_kernel_us"] = kernel_times(lambda: plan.run(q, k, v, o, lse))
        # The same kernel without splits (no workspace: one launch, no combine).
        row["fagen_1split_ms"] = bench_ms(lambda: plan.run(q, k, v, o, lse, workspace=False))
    if page_size:
        ok = run_paged(bundle, q, k, v, o_planned, page_size, row, profile) and ok
    if splits:
        ok = run_splits(bundle, q, k, v, reference, splits, row) and ok
    for name in ("fagen", "paged") + tuple(n for n, _ in BACKENDS):
        if name + "_ms" in row:
            row[name + "_tbps"] = kv_bytes / (row[name + "_ms"] * 1e-3) / 1e12
    return ok


def cell(x, fmt="%.2f"):
    return fmt % x if x is not None else "-"


def print_kernel_times(rows):
    """Per cell of batch <= 16: each implementation's time per call (do_bench) beside the sum of
    its kernels' device times (the rest: launch gaps and the host)."""
    print("\nkernel device time per call, us (--kernel-times; cells of batch <= 16)")
    for r in rows:
        if r["batch"] > 16:
            continue
        parts = []
        for name in ("fagen", "paged", "flash", "cudnn"):
            times = r.get(name + "_kernel_us")
            if not times or name + "_ms" not in r:
                continue
            kernels = " + ".join("%.1f %s" % (us, k.split("(")[0][-32:])
                                 for k, us in sorted(times.items(), key=lambda kv: -kv[1]))
            parts.append("%s %.1f (kernels %.1f: %s)" % (name, r[name + "_ms"] * 1e3,
                                                        sum(times.values()), kernels))
        if "fagen_1split_ms" in r:
            parts.append("fagen one split %.1f" % (r["fagen_1split_ms"] * 1e3))
        print("%d/%d b%d s%d: %s" % (r["heads_q"], r["heads_kv"], r["batch"], r["context"],
                                     "; ".join(parts)))


def print_splits(rows):
    """Per cell: fagen's time (us) at each split count (* the planned one), and cuDNN's."""
    print("\nsplit counts, us (--splits; * the plan's count)")
    for r in rows:
        if "split_ms" not in r:
            continue
        times = ", ".join("%d%s: %.1f" % (n, "*" if n == r.get("fagen_splits") else "", ms * 1e3)
                          for n, ms in sorted(r["split_ms"].items(), reverse=True))
        wrong = " WRONG at %s" % r["split_wrong"] if r.get("split_wrong") else ""
        print("%d/%d b%d s%d: %s | cudnn %s%s" % (
            r["heads_q"], r["heads_kv"], r["batch"], r["context"], times,
            cell(r["cudnn_ms"] * 1e3 if "cudnn_ms" in r else None, "%.1f"), wrong))


def print_table(rows, copy_tbps, paged=False):
    print(f"\ncopy bandwidth {copy_tbps:.2f} TB/s (1 GiB device-to-device, read + write)")
    print("%-6s %5s %7s %5s %7s %6s %7s %7s %8s %8s %s" % (
        "heads", "batch", "context", "ctas", "fagen", "%copy", "flash", "cudnn", "vs flash",
        "vs cudnn", "paged (TB/s, vs fagen) notes" if paged else "notes"))
    for r in rows:
        f, fl, cu = (r.get(n + "_tbps") for n in ("fagen", "flash", "cudnn"))
        notes = []
        if paged and r.get("paged_tbps"):
            notes.append("paged %.2f %.2fx" % (r["paged_tbps"], r["paged_tbps"] / f))
        if paged and r.get("paged_bitwise") is False:
            notes.append("paged != contiguous")
        if paged and r.get("append_ms"):
            notes.append("append +%.1f us" % ((r["append_ms"] - r["paged_ms"]) * 1e3))
        if paged and r.get("append_bitwise") is False:
            notes.append("append != contiguous")
        if not r.get("ok", True):
            notes.append("WRONG (max |diff| %.3g)" % r.get("max_abs_diff", float("nan")))
        notes += [n + " expanded" for n, _ in BACKENDS if r.get(n + "_expanded")]
        notes += [n + " failed" for n, _ in BACKENDS if r.get(n + "_error")]
        print("%-6s %5d %7d %5d %7s %6s %7s %7s %8s %8s %s" % (
            "%d/%d" % (r["heads_q"], r["heads_kv"]), r["batch"], r["context"],
            r.get("fagen_ctas", 0), cell(f), cell(f / copy_tbps * 100 if f else None, "%.0f%%"),
            cell(fl), cell(cu), cell(f / fl if f and fl else None, "%.2fx"),
            cell(f / cu if f and cu else None, "%.2fx"), ", ".join(notes)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a bundle with a bf16 head-dim-128 causal "
                    "decode kernel (tests/gpu/check-decode.yaml's causal128)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--heads", default="32/8,32/32", help="query/kv heads, comma-separated")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--contexts", default="2048,16384,131072")
    ap.add_argument("--q-tokens", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--paged", action="store_true",
                    help="time the bundle's paged decode kernel too (--page-size)")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--splits", default="",
                    help="comma-separated split counts to time fagen's kernel with as well")
    ap.add_argument("--kernel-times", action="store_true",
                    help="profile each call's kernels (torch.profiler) and print their times")
    ap.add_argument("--max-kv-gb", type=float, default=16.0,
                    help="skip cells whose K and V take more (default 16)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    bundle = fagen_rt.Bundle(args.bundle)
    copy_tbps = copy_bandwidth(dev)
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "fagen": fagen_rt.version(),
            "bundle": os.path.basename(args.bundle), "q_tokens": args.q_tokens,
            "head_dim": args.head_dim, "copy_tbps": copy_tbps,
            "page_size": args.page_size if args.paged else 0, "rows": []}
    print(json.dumps({k: v for k, v in meta.items() if k != "rows"}), flush=True)
    torch.manual_seed(0)
    splits = [int(x) for x in args.splits.split(",") if x]
    if any(not 1 <= n <= 128 for n in splits):
        ap.error(f"--splits {args.splits}: each count must be in 1..128")
    failed = False
    for heads in args.heads.split(","):
        hq, hkv = (int(x) for x in heads.split("/"))
        for b in (int(x) for x in args.batches.split(",")):
            for s in (int(x) for x in args.contexts.split(",")):
                kv_gb = 2 * b * s * hkv * args.head_dim * 2 / 1e9
                if kv_gb > args.max_kv_gb:
                    print(f"skip {hq}/{hkv} batch {b} context {s}: K and V take {kv_gb:.1f} GB "
                          f"(--max-kv-gb {args.max_kv_gb})", flush=True)
                    continue
                row = dict(heads_q=hq, heads_kv=hkv, batch=b, context=s, q_tokens=args.q_tokens)
                failed |= not run_row(
                    meta, row,
                    lambda: run_cell(bundle, dev, hq, hkv, b, s, args.q_tokens, args.head_dim,
                                     row, args.page_size if args.paged else 0,
                                     args.kernel_times, splits),
                    (RuntimeError, fagen_rt.FagenError), args.out, torch.cuda.empty_cache)
    print_table(meta["rows"], copy_tbps, args.paged)
    if args.kernel_times:
        print_kernel_times(meta["rows"])
    if splits:
        print_splits(meta["rows"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
