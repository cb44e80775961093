"""Chunked prefill benchmark: fagen's varlen forward over a paged KV cache (fwd_paged_kernel)
against the contiguous varlen forward of the same template and tile (its twin; the stage count
may differ) on the same keys, beside fagen's sm90ws contiguous varlen forward and PyTorch SDPA's
flash and cuDNN backends on the equivalent dense inputs, in one process.

Cells: bf16, head dim 128, causal (bottom-right: new token i of a chunk of T sees the cached
keys and the chunk's tokens up to itself), GQA 32/8; batch x new tokens per sequence x keys
cached before the chunk (--batches, --new-tokens, --cached); every sequence of a cell has the
same lengths (so that SDPA can run it densely). The paged run reads the same K and V moved into
a cache of page-size-token pages in shuffled order (--page-sizes, one paged kernel per size in
the bundle, bench/bench-prefill.yaml); its output and LSE must equal the twin's bit for bit.
Timing: triton.testing.do_bench (CUDA events, warm-up, L2 cleared before each run, median);
TFLOP/s counts the visible (query, key) pairs: 4 x D x pairs x batch x heads_q / time.

    python3 bench/bench_prefill.py --bundle bench-prefill.fab [--out prefill.json]

The paged kernel's target: within 5 % of the twin's time (paged/twin <= 1.05). Exits 1 if a
paged run differs from its twin, an output is WRONG against SDPA, or a run failed.
"""
import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from bench_decode import BACKENDS, bench_ms, sdpa_call  # noqa: E402
from fagen import runtime as fagen_rt  # noqa: E402
from tables import is_wrong, run_row  # noqa: E402


def paged_cache(ks, vs, page, gen, spare=2, shuffled=True):
    """Sequences' keys and values (lists of [n_b, Hkv, D]) moved into caches [num_pages, page,
    Hkv, D] of `page`-token pages in shuffled order (else in the sequences' order), NaN in every
    row no sequence owns and in `spare` pages no sequence uses; returns (k_cache, v_cache,
    block_table int32 [batch, most pages + 1], -1 past each sequence's pages)."""
    counts = [-(-k.shape[0] // page) for k in ks]
    num_pages = sum(counts) + spare
    dev = ks[0].device
    order = (torch.randperm(num_pages, generator=gen) if shuffled
             else torch.arange(num_pages)).to(dev)
    table = torch.full((len(ks), max(counts) + 1), -1, dtype=torch.int32, device=dev)
    caches = [torch.full((num_pages, page) + t[0].shape[1:], float("nan"), dtype=t[0].dtype,
                         device=dev) for t in (ks, vs)]
    start = 0
    for b, n in enumerate(counts):
        ids = order[start:start + n]
        start += n
        table[b, :n] = ids.to(torch.int32)
        for cache, t in zip(caches, (ks[b], vs[b])):
            padded = torch.full((n * page,) + t.shape[1:], float("nan"), dtype=t.dtype,
                                device=dev)
            padded[:t.shape[0]] = t
            cache[ids] = padded.view((n, page) + t.shape[1:])
    return caches[0], caches[1], table


def cu_seqlens(lengths, dev):
    """int32 [batch + 1] offsets of packed sequences of these lengths."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=dev)


def find_kernels(bundle):
    """{page size: index} of the bundle's paged varlen forwards, the index of their contiguous
    twin (fagen.runtime.contiguous_twin: one for all of them, or None), and that of an sm90ws
    contiguous varlen forward (or None)."""
    names = [n.split(" ")[0] for n in bundle.kernel_names]
    paged, twins, ws = {}, set(), None
    for i, name in enumerate(names):
        if not name.startswith("fagen_fwd_") or "_varlen_" not in name:
            continue
        m = re.search(r"_paged(\d+)_", name)
        if m:
            paged[int(m.group(1))] = i
            twins.add(fagen_rt.contiguous_twin(bundle.kernel_names, i))
        elif "_sm90ws_" in name:
            ws = i
    return paged, (twins.pop() if len(twins) == 1 else None), ws


def pairs(new, keys):
    """Visible (query, key) pairs of one head of one sequence: bottom-right causal."""
    return new * (keys - new) + new * (new + 1) // 2


def run_cell(bundle, kernels, dev, hq, hkv, d, batch, new, cached, row, shuffled=True):
    """Times the twin, the paged kernels, sm90ws and SDPA on one cell; fills `row`. False if a
    paged run differs from the twin or the twin is WRONG against SDPA."""
    paged, twin, ws = kernels
    keys = cached + new
    q = torch.randn(batch, new, hq, d, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(batch, keys, hkv, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    qp, kp, vp = q.view(-1, hq, d), k.view(-1, hkv, d), v.view(-1, hkv, d)
    cu_q, cu_k = cu_seqlens([new] * batch, dev), cu_seqlens([keys] * batch, dev)
    varlen = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=new,
                  max_seqlen_k=keys)
    args = fagen_rt.run_args(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    o_twin = torch.empty_like(qp)
    lse_twin = torch.empty(hq, batch * new, device=dev, dtype=torch.float32)
    plan = bundle.plan_forward(qp, kp, vp, kernel_index=twin, **varlen)
    row["twin_kernel"] = plan.kernel.split(" ")[0]
    plan.run(qp, kp, vp, o_twin, lse_twin, args=args)
    row["twin_ms"] = bench_ms(lambda: plan.run(qp, kp, vp, o_twin, lse_twin, args=args))
    ok = True
    if ws is not None:
        o = torch.empty_like(qp)
        lse = torch.empty_like(lse_twin)
        plan_ws = bundle.plan_forward(qp, kp, vp, kernel_index=ws, **varlen)
        row["ws_ms"] = bench_ms(lambda: plan_ws.run(qp, kp, vp, o, lse, args=args))
    used = torch.full((batch,), keys, dtype=torch.int32, device=dev)
    args_q = fagen_rt.run_args(cu_seqlens_q=cu_q)
    for page, index in sorted(paged.items()):
        kc, vc, table = paged_cache(list(k.unbind(0)), list(v.unbind(0)), page,
                                    torch.Generator().manual_seed(page), shuffled=shuffled)
        plan_p = bundle.plan_forward_paged(qp, kc, vc, table, keys, kernel_index=index,
                                           causal=True, cu_seqlens_q=cu_q, max_seqlen_q=new)
        o, lse = torch.empty_like(qp), torch.empty_like(lse_twin)
        plan_p.run_paged(qp, kc, vc, o, lse, table, used, args=args_q)
        plan_p.status()
        same = bool(torch.equal(o, o_twin) and torch.equal(lse, lse_twin))
        row[f"paged{page}_bitwise"] = same
        ok = ok and same
        if not same:
            row[f"paged{page}_max_abs_diff"] = (o.float() - o_twin.float()).abs().max().item()
        row[f"paged{page}_ms"] = bench_ms(
            lambda: plan_p.run_paged(qp, kc, vc, o, lse, table, used, args=args_q))
        del kc, vc
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    for name, backend in BACKENDS:
        try:
            call, expanded = sdpa_call(backend, qt, kt, vt, new)
            if "max_abs_diff" not in row:
                ref = call().transpose(1, 2).reshape(-1, hq, d)
                row["reference"] = name
                row["max_abs_diff"] = (o_twin.float() - ref.float()).abs().max().item()
                ok = ok and not is_wrong(row["max_abs_diff"])
                del ref
            row[name + "_expanded"] = expanded
            row[name + "_ms"] = bench_ms(call)
            del call
        except RuntimeError as e:
            row[name + "_error"] = str(e).splitlines()[0][:200]
    flops = 4 * d * pairs(new, keys) * batch * hq
    for key in [x for x in row if x.endswith("_ms")]:
        row[key[:-3] + "_tflops"] = flops / (row[key] * 1e-3) / 1e12
    return ok


def cell(x, fmt="%.2f"):
    return fmt % x if x is not None else "-"


def print_table(rows, pages, heads):
    print(f"\nchunked prefill, bf16 hd 128 causal, heads {heads}: ms (TFLOP/s); paged/twin: the "
          f"target is <= 1.05")
    head = "%5s %5s %6s %14s" % ("batch", "new", "cached", "twin")
    for p in pages:
        head += " %14s %6s" % (f"paged{p}", "/twin")
    print(head + " %14s %14s %14s %s" % ("sm90ws", "sdpa flash", "sdpa cudnn", "notes"))
    for r in rows:
        line = "%5d %5d %6d" % (r["batch"], r["new"], r["cached"])

        def timed(name):
            ms = r.get(name + "_ms")
            return "%14s" % ("%.3f (%.0f)" % (ms, r[name + "_tflops"]) if ms else "-")
        line += " " + timed("twin")
        for p in pages:
            ratio = (r[f"paged{p}_ms"] / r["twin_ms"] if r.get(f"paged{p}_ms") and
                     r.get("twin_ms") else None)
            line += " " + timed(f"paged{p}") + " %6s" % cell(ratio)
        line += " " + " ".join(timed(n) for n in ("ws", "flash", "cudnn"))
        notes = [f"paged{p} != twin" for p in pages if r.get(f"paged{p}_bitwise") is False]
        notes += [n + " expanded" for n, _ in BACKENDS if r.get(n + "_expanded")]
        notes += [n + " failed" for n, _ in BACKENDS if r.get(n + "_error")]
        if "error" in r:
            notes.append("ERROR " + r["error"][:80])
        elif not r.get("ok", True):
            notes.append("WRONG (max |diff| vs sdpa %s)" % cell(r.get("max_abs_diff"), "%.3g"))
        print(line + " " + ", ".join(notes))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, help="bench/bench-prefill.yaml built")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--heads", default="32/8", help="query/kv heads")
    ap.add_argument("--batches", default="4,16")
    ap.add_argument("--new-tokens", default="512,2048", help="query tokens per sequence")
    ap.add_argument("--cached", default="2048,16384", help="keys cached before the chunk")
    ap.add_argument("--page-order", choices=("shuffled", "sequential"), default="shuffled",
                    help="where a sequence's pages lie in the cache: shuffled (as a serving "
                         "engine's allocator leaves them) or one after the other")
    args = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    bundle = fagen_rt.Bundle(args.bundle)
    kernels = find_kernels(bundle)
    if not kernels[0] or kernels[1] is None:
        sys.exit(f"{args.bundle}: needs paged varlen forward kernels and their one contiguous "
                 f"twin of the same tile (bench/bench-prefill.yaml); it has "
                 f"{bundle.kernel_names}")
    hq, hkv = (int(x) for x in args.heads.split("/"))
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "fagen": fagen_rt.version(),
            "bundle": os.path.basename(args.bundle), "heads": args.heads,
            "page_order": args.page_order, "rows": []}
    print(json.dumps({k: v for k, v in meta.items() if k != "rows"}), flush=True)
    torch.manual_seed(0)
    failed = False
    for b in (int(x) for x in args.batches.split(",")):
        for new in (int(x) for x in args.new_tokens.split(",")):
            for cached in (int(x) for x in args.cached.split(",")):
                row = dict(batch=b, new=new, cached=cached, heads_q=hq, heads_kv=hkv)
                failed |= not run_row(
                    meta, row,
                    lambda: run_cell(bundle, kernels, dev, hq, hkv, 128, b, new, cached, row,
                                     args.page_order == "shuffled"),
                    (RuntimeError, ValueError, fagen_rt.FagenError), args.out,
                    torch.cuda.empty_cache)
    print_table(meta["rows"], sorted(kernels[0]), args.heads)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
