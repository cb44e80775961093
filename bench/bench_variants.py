"""Variant forward benchmark: what dropout, block sparsity, varlen and head dims 96 / 192 /
192x128 cost in fagen's kernels, side by side with PyTorch SDPA's flash (FlashAttention-2) and
cuDNN backends in one process on the same random inputs (bf16, FA3 protocol: batch x seqlen =
16k tokens, hidden 2048 for the query heads).

    python3 bench/bench_variants.py --bundle sm_90a=variants90a.fab --dense sm_90a=bench90a.fab \\
        [--bundle sm_90=variants.fab] [--out rows.json] [--parts dropout,sparse,headdim,varlen]

Parts (each row's ratios are printed last, as a table):
  dropout  p = 0.1: fagen with dropout vs the same template's dense kernel (--dense bundle),
           and vs SDPA flash / cuDNN with dropout_p = 0.1 (their own RNG; times only).
  sparse   a runtime block mask of 128-token blocks at 10% density (the diagonal block always
           kept, so every query sees a key) vs the dense kernel; seqlen 16k. The sparse output is
           checked against SDPA (efficient/math backend) with the expanded boolean mask.
  headdim  head dims 96, 192 and 192 (Q/K) x 128 (V) vs SDPA flash and cuDNN.
  varlen   packed sequences of random lengths (1k..15k, 64k tokens) vs the dense kernel run on
           a batch padded to the longest sequence, and the same sequences one SDPA call each.
Outputs are compared with SDPA flash (max |diff| < 0.05 in bf16) where both compute the same
function (not with dropout); a mismatch marks the row WRONG and the run fails. TFLOP/s count the
visible part: 4 * B * H * Sq * Sk * D (halved for causal; sparse: the kept blocks' share;
varlen: per sequence), with D = (Dqk + Dv) / 2.
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
from tables import fmt, is_wrong, ratio, write_json  # noqa: E402

DEV = torch.device("cuda")


def bench_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def labelled(specs):
    out = []
    for spec in specs or []:
        label, path = spec.split("=", 1) if "=" in spec else (os.path.basename(spec), spec)
        out.append((label, fagen_rt.Bundle(path)))
    return out


def rand(*shape):
    return torch.randn(*shape, device=DEV, dtype=torch.bfloat16)


def time_fagen(bundle, q, k, v, args=None, **variant):
    """(ms, output, kernel) of bundle's kernel for the call, or (None, None, reason)."""
    try:
        plan = bundle.plan_forward(q, k, v, **variant)
    except fagen_rt.FagenError as e:
        return None, None, str(e)[:80]
    if variant.get("cu_seqlens_q") is not None:
        o = torch.empty(q.shape[0], q.shape[1], v.shape[-1], device=DEV, dtype=q.dtype)
        lse = torch.empty(q.shape[1], q.shape[0], device=DEV, dtype=torch.float32)
    else:
        o = torch.empty(*q.shape[:3], v.shape[-1], device=DEV, dtype=q.dtype)
        lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=DEV, dtype=torch.float32)
    o.fill_(float("nan"))  # poisoned: a kernel that writes nothing shows up in the check
    plan.run(q, k, v, o, lse, args=args)
    torch.cuda.synchronize()
    out = o.clone()
    return bench_ms(lambda: plan.run(q, k, v, o, lse, args=args)), out, plan.kernel.split(" ")[0]


def time_sdpa(backend, q, k, v, **kw):
    """(ms, output) of SDPA on BHSD tensors with one backend, or (None, None) if unsupported."""
    try:
        with sdpa_kernel([backend]):
            fn = lambda: F.scaled_dot_product_attention(q, k, v, **kw)
            out = fn()
            return bench_ms(fn), out
    except Exception as e:  # a backend that does not support the call
        print(f"  {backend.name}: {type(e).__name__}: {str(e)[:90]}", flush=True)
        return None, None


def close(a, b, row, what):
    diff = (a.float() - b.float()).abs().max().item()
    row["max_abs_diff_" + what] = diff
    if is_wrong(diff):  # NaN fails too
        row["wrong"] = True


def part_dropout(bundles, dense, rows):
    for d in (64, 128):
        for causal in (False, True):
            for s in (2048, 8192, 16384):
                b, h = fa3.shape(d, s)
                q, k, v = (rand(b, h, s, d) for _ in range(3))
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                row = dict(part="dropout", head_dim=d, causal=causal, seqlen=s,
                           flops=fa3.fwd_flops(d, s, causal))
                args = fagen_rt.run_args(dropout_seed=7)
                for label, bundle in bundles:
                    row[label + "_ms"], _, row[label + "_kernel"] = time_fagen(
                        bundle, qt, kt, vt, args=args, causal=causal, dropout_p=0.1)
                for label, bundle in dense:
                    row[label + "_dense_ms"], _, row[label + "_dense_kernel"] = time_fagen(
                        bundle, qt, kt, vt, causal=causal)
                for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                      ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    row[name + "_ms"], _ = time_sdpa(backend, q, k, v, is_causal=causal,
                                                     dropout_p=0.1)
                rows.append(row)
                print(json.dumps(row), flush=True)


def block_mask_10pct(blocks, gen):
    """uint8 [blocks, blocks]: the diagonal plus random blocks, 10% of all."""
    keep = torch.rand(blocks, blocks, generator=gen) < (0.10 * blocks - 1) / (blocks - 1)
    keep |= torch.eye(blocks, dtype=torch.bool)
    return keep.to(torch.uint8)


def part_sparse(bundles, dense, rows):
    gen = torch.Generator().manual_seed(0)
    s, block = 16384, 128
    for d in (64, 128):
        h = 2048 // d
        q, k, v = (rand(1, h, s, d) for _ in range(3))
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        blocks = block_mask_10pct(s // block, gen)
        mask = blocks.to(DEV)[None, None].expand(1, h, -1, -1)  # broadcast: strides 0
        density = blocks.float().mean().item()
        row = dict(part="sparse", head_dim=d, causal=False, seqlen=s, density=density,
                   flops=4.0 * h * s * s * d * density)
        args = fagen_rt.run_args(block_mask=mask)
        outs = {}
        for label, bundle in bundles:
            row[label + "_ms"], outs[label], row[label + "_kernel"] = time_fagen(
                bundle, qt, kt, vt, args=args, block_sparse=("runtime", block))
        for label, bundle in dense:
            row[label + "_dense_ms"], _, row[label + "_dense_kernel"] = time_fagen(bundle, qt, kt, vt)
        # The reference: SDPA with the expanded boolean mask (one [S, S] broadcast over heads).
        bool_mask = blocks.to(DEV).bool().repeat_interleave(block, 0).repeat_interleave(block, 1)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask[None, None])
        for label, out in outs.items():
            if out is not None:
                close(out.transpose(1, 2), ref, row, label + "_vs_sdpa_masked")
        del bool_mask, ref
        rows.append(row)
        print(json.dumps(row), flush=True)


def part_headdim(bundles, rows):
    for dqk, dv in ((96, 96), (192, 192), (192, 128)):
        for causal in (False, True):
            for s in (2048, 8192, 16384):
                b, h = fa3.shape(dqk, s)
                q, k = rand(b, h, s, dqk), rand(b, h, s, dqk)
                v = rand(b, h, s, dv)
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                row = dict(part="headdim", head_dim=dqk, head_dim_v=dv, causal=causal, seqlen=s,
                           flops=2.0 * b * h * s * s * (dqk + dv) * (0.5 if causal else 1.0))
                outs = {}
                for label, bundle in bundles:
                    row[label + "_ms"], outs[label], row[label + "_kernel"] = time_fagen(
                        bundle, qt, kt, vt, causal=causal)
                ref = None
                for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                      ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    row[name + "_ms"], out = time_sdpa(backend, q, k, v, is_causal=causal)
                    ref = out if ref is None else ref
                if ref is None:  # neither backend: the math/efficient one, to check against
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                for label, out in outs.items():
                    if out is not None:
                        close(out.transpose(1, 2), ref, row, label + "_vs_sdpa")
                rows.append(row)
                print(json.dumps(row), flush=True)
                del q, k, v, ref, outs
                torch.cuda.empty_cache()


def part_varlen(bundles, dense, rows):
    gen = torch.Generator().manual_seed(1)
    d, h = 128, 16
    lengths = []
    while sum(lengths) < 65536 - 1024:
        lengths.append(int(torch.randint(1024, 15 * 1024, (1,), generator=gen)))
    lengths[-1] += 65536 - sum(lengths) if sum(lengths) < 65536 else 0
    cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0).to(torch.int32).to(DEV)
    total, longest = sum(lengths), max(lengths)
    q, k, v = (rand(total, h, d) for _ in range(3))
    for causal in (False, True):
        flops = sum(4.0 * h * n * n * d * (0.5 if causal else 1.0) for n in lengths)
        row = dict(part="varlen", head_dim=d, causal=causal, seqlen=longest, sequences=len(lengths),
                   tokens=total, flops=flops)
        args = fagen_rt.run_args(cu_seqlens_q=cu, cu_seqlens_k=cu)
        outs = {}
        for label, bundle in bundles:
            row[label + "_ms"], outs[label], row[label + "_kernel"] = time_fagen(
                bundle, q, k, v, args=args, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu,
                max_seqlen_q=longest, max_seqlen_k=longest)
        # Dense: the same sequences padded to the longest, one batch.
        padded = rand(len(lengths), longest, h, d)
        for label, bundle in dense:
            row[label + "_dense_ms"], _, row[label + "_dense_kernel"] = time_fagen(
                bundle, padded, padded, padded, causal=causal)
        # SDPA: one call per sequence (it has no packed-sequence entry point).
        seqs = [(t[None].transpose(1, 2) for t in (q[a:a + n], k[a:a + n], v[a:a + n]))
                for a, n in zip(cu.tolist()[:-1], lengths)]
        seqs = [tuple(x) for x in seqs]
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel([backend]):
                    fn = lambda: [F.scaled_dot_product_attention(a, b_, c, is_causal=causal)
                                  for a, b_, c in seqs]
                    ref = fn()
                    row[name + "_ms"] = bench_ms(fn)
                if name == "flash":
                    for label, out in outs.items():
                        if out is not None:
                            got = torch.cat([o[0].transpose(0, 1) for o in ref], 0)
                            close(out, got, row, label + "_vs_flash")
            except Exception as e:
                print(f"  {name}: {type(e).__name__}: {str(e)[:90]}", flush=True)
        rows.append(row)
        print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", required=True, action="append",
                    help="LABEL=PATH of a bundle of bench/variants.yaml; repeatable")
    ap.add_argument("--dense", action="append", default=[],
                    help="LABEL=PATH of a dense bundle (bench/bench.yaml) for the same-template "
                         "baselines of dropout, sparse and varlen; repeatable")
    ap.add_argument("--parts", default="dropout,sparse,headdim,varlen")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    bundles, dense = labelled(args.bundle), labelled(args.dense)
    props = torch.cuda.get_device_properties(0)
    meta = {"gpu": props.name, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "fagen": fagen_rt.version(), "bundles": args.bundle, "dense": args.dense, "rows": []}
    print(json.dumps({k: v for k, v in meta.items() if k != "rows"}), flush=True)
    torch.manual_seed(0)
    rows = meta["rows"]
    parts = args.parts.split(",")
    if "dropout" in parts:
        part_dropout(bundles, dense, rows)
    if "sparse" in parts:
        part_sparse(bundles, dense, rows)
    if "headdim" in parts:
        part_headdim(bundles, rows)
    if "varlen" in parts:
        part_varlen(bundles, dense, rows)

    labels = [label for label, _ in bundles]
    dlabels = [label for label, _ in dense]

    def tf(r, key):
        ms = r.get(key + "_ms")
        return r["flops"] / ms / 1e9 if ms else None

    cols = [l for l in labels] + ["flash", "cudnn"]
    head = "%-8s %-7s %-6s %6s " % ("part", "hd", "causal", "seqlen") + " ".join("%8s" % c[:8] for c in cols)
    head += " " + " ".join("%12s" % (l[:6] + "/flash") for l in labels)
    head += " " + " ".join("%12s" % (l[:6] + "/cudnn") for l in labels)
    head += " " + " ".join("%12s" % (l[:6] + "/dense") for l in labels if l in dlabels)
    print("\nTFLOP/s of the visible work; X/dense = dense kernel's time / X's time, same template "
          "(dropout: its cost is 1 / ratio - 1; sparse: the speed-up; varlen: vs the padded batch)")
    print(head + "  kernel")
    failed = False
    for r in rows:
        t = {c: tf(r, c) for c in cols}
        hd = "%d" % r["head_dim"] + ("x%d" % r["head_dim_v"] if r.get("head_dim_v", r["head_dim"]) != r["head_dim"] else "")
        line = "%-8s %-7s %-6s %6d " % (r["part"], hd, "yes" if r["causal"] else "no", r["seqlen"])
        line += " ".join("%8s" % fmt(t[c]) for c in cols)
        line += " " + " ".join("%12s" % ratio(t[l], t["flash"]) for l in labels)
        line += " " + " ".join("%12s" % ratio(t[l], t["cudnn"]) for l in labels)
        line += " " + " ".join("%12s" % ratio(r.get(l + "_dense_ms"), r.get(l + "_ms"))
                               for l in labels if l in dlabels)
        kernels = " ".join(str(r.get(l + "_kernel", "-")).replace("fagen_fwd_bf16_", "") for l in labels)
        print(line + "  " + kernels + ("  WRONG" if r.get("wrong") else ""))
        failed = failed or r.get("wrong", False)
    if args.out:
        write_json(args.out, meta)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
