"""Chunked prefill over a paged KV cache from Python on a GPU: fagen.prefill_paged (the torch
op) and fagen.runtime's plan_forward_paged / run_paged / status, for every paged varlen forward
kernel of the bundles (tests/gpu/check-paged.yaml's f*, bench/bench-prefill.yaml's paged*).

    FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONPATH=python \\
        python3 tests/gpu/prefill_paged_check.py --bundle .carry/paged.fab \\
        --bundle .carry/bench-prefill.fab

Per kernel and head layout (GQA 4:1 and 7:1): a batch of uneven sequences (one new token over
a cache, a whole prompt, a chunk ending at a page boundary, one at a boundary - 1, a long chunk
over a long cache, a 1-key sequence) in pages of shuffled order with NaN in every row no
sequence owns:
- fagen.prefill_paged against the float64 reference per sequence: out within 2x (+1e-4) the
  error of the same math in the input dtype, LSE within 1e-3;
- the runtime's paged run equal bit for bit to the contiguous varlen twin (the kernel of the
  name without _pagedN up to its stage count, same arch, where the bundle has it) on the same
  keys, out and LSE; status clean;
- a bad page id and a length past seqlen_k: Plan.status names them;
- once: torch.compile(fullgraph=True) of a function calling fagen.prefill_paged equals eager.
Prints one line per check and exits non-zero if any failed.
"""
import argparse
import math
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import fagen  # noqa: E402
from bench_prefill import cu_seqlens, paged_cache  # noqa: E402
from check_runner import Checks  # noqa: E402

DEV = "cuda"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


check = Checks(60)


def kernel_variant(name):
    """(dtype, head_dim_qk, head_dim_v, causal, mask_align, page size) from a paged varlen
    forward's name (fagen_fwd_bf16_hd192x128_causaltl_varlen_paged16_sm80_...), or None."""
    m = re.match(r"fagen_fwd_(bf16|fp16)_hd(\d+)(?:x(\d+))?_(none|causal|causaltl)_varlen_"
                 r"paged(\d+)_", name)
    if not m:
        return None
    dtype, dqk, dv, mask, page = m.groups()
    return (DTYPES[dtype], int(dqk), int(dv or dqk), mask != "none",
            "top_left" if mask == "causaltl" else "bottom_right", int(page))


def lengths(page):
    """(new tokens, cache lengths) of the batch: uneven, at page boundaries, new <= cached."""
    keys = [3 * page + 1, 130, 4 * page, 2 * page - 1, 700, 1]
    new = [1, 130, 77, 50, 300, 1]
    return [min(n, k) for n, k in zip(new, keys)], keys


def reference(q, ks, vs, q_lens, causal, top_left, upcast=True):
    """Per sequence: out [total_q, Hq, Dv] and LSE float32 [Hq, total_q] of the packed q over
    its keys (float64, or with upcast=False the input dtype)."""
    outs, lses, start = [], [], 0
    for n, k, v in zip(q_lens, ks, vs):
        qs = q[start:start + n]
        start += n
        if upcast:
            qs, k, v = qs.double(), k.double(), v.double()
        group = qs.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = torch.einsum("ihd,jhd->hij", qs, k) / math.sqrt(qs.shape[-1])
        if causal:
            i = torch.arange(n, device=DEV)[:, None]
            j = torch.arange(k.shape[0], device=DEV)[None, :]
            s = s.masked_fill(j > i + (0 if top_left else k.shape[0] - n), float("-inf"))
        lses.append(torch.logsumexp(s.double(), dim=-1).float())
        outs.append(torch.einsum("hij,jhd->ihd", torch.softmax(s, dim=-1), v))
    return torch.cat(outs).to(q.dtype), torch.cat(lses, dim=1)


def max_err(a, b):
    return (a.float() - b.float()).abs().max().item()


def case(bundle, index, variant, heads, seed):
    dtype, dqk, dv, causal, align, page = variant
    hq, hkv = heads
    gen = torch.Generator().manual_seed(seed)
    q_lens, k_lens = lengths(page)
    q = torch.randn(sum(q_lens), hq, dqk, generator=gen).to(DEV, dtype)
    ks = [torch.randn(n, hkv, dqk, generator=gen).to(DEV, dtype) for n in k_lens]
    vs = [torch.randn(n, hkv, dv, generator=gen).to(DEV, dtype) for n in k_lens]
    kc, vc, table = paged_cache(ks, vs, page, gen)
    used = torch.tensor(k_lens, dtype=torch.int32, device=DEV)
    cu_q = cu_seqlens(q_lens, DEV)
    max_q, max_k = max(q_lens), max(k_lens)
    top_left = align == "top_left"

    # The torch op against the float64 reference, bounded by the same math in the input dtype.
    out, lse = fagen.prefill_paged(q, kc, vc, table, used, cu_seqlens_q=cu_q, max_seqlen_q=max_q,
                                   max_seqlen_k=max_k, causal=causal, mask_align=align,
                                   return_lse=True, bundle=bundle)
    ref, ref_lse = reference(q, ks, vs, q_lens, causal, top_left)
    low, _ = reference(q, ks, vs, q_lens, causal, top_left, upcast=False)
    e, eb = max_err(out, ref), max_err(low, ref)
    if not e <= 2 * eb + 1e-4:
        raise AssertionError(f"out error {e:.3g} > 2 x {eb:.3g} + 1e-4 (the input dtype's math)")
    e_lse = max_err(lse, ref_lse)
    if not e_lse <= 1e-3:
        raise AssertionError(f"LSE error {e_lse:.3g} > 1e-3")
    notes = [f"out {e:.2g}/{eb:.2g} lse {e_lse:.2g}"]

    # The runtime's paged run, with its status, against the contiguous varlen twin.
    plan = bundle.plan_forward_paged(q, kc, vc, table, max_k, kernel_index=index, causal=causal,
                                     mask_align=align, cu_seqlens_q=cu_q, max_seqlen_q=max_q)
    o_paged, lse_paged = torch.empty_like(out), torch.empty_like(lse)
    plan.run_paged(q, kc, vc, o_paged, lse_paged, table, used, cu_seqlens_q=cu_q)
    plan.status()
    if not (torch.equal(o_paged, out) and torch.equal(lse_paged, lse)):
        raise AssertionError("the runtime's run differs from fagen.prefill_paged's")
    twin = fagen.runtime.contiguous_twin(bundle.kernel_names, index)
    if twin is not None:
        plain = bundle.kernel_names[twin].split(" ")[0]
        cu_k = cu_seqlens(k_lens, DEV)
        o_twin, lse_twin = bundle.forward(
            q, torch.cat(ks), torch.cat(vs), kernel_index=twin, causal=causal,
            mask_align=align, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q,
            max_seqlen_k=max_k, args=fagen.runtime.run_args(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k))
        if not torch.equal(o_twin, o_paged):
            raise AssertionError(f"paged != contiguous twin {plain}: max |diff| "
                                 f"{max_err(o_twin, o_paged):.3g}")
        if not torch.equal(lse_twin, lse_paged):
            raise AssertionError(f"LSE paged != contiguous twin {plain}")
        notes.append("== twin")
    else:
        notes.append("no twin in the bundle")

    # Bad entries: never loaded through, named by the status.
    longest = k_lens.index(max_k)
    for what, bad_table, bad_used, expect in (
            ("page id", (longest, 0, kc.shape[0] + 5), None, "is not a page id in [0, "),
            ("length", None, (0, max_k + 1), "is outside [0, seqlen_k")):
        t, u = table.clone(), used.clone()
        if bad_table:
            t[bad_table[0], bad_table[1]] = bad_table[2]
        if bad_used:
            u[bad_used[0]] = bad_used[1]
        plan.run_paged(q, kc, vc, o_paged, lse_paged, t, u, cu_seqlens_q=cu_q)
        try:
            plan.status()
        except fagen.FagenError as err:
            if expect not in str(err):
                raise AssertionError(f"bad {what}: status says {err}, expected {expect!r}")
        else:
            raise AssertionError(f"bad {what}: the status returned FAGEN_OK")
    notes.append("bad entries named")
    return " ".join(notes)


def compiled(variant):
    """The first loaded bundle serves the call (no bundle= inside the compiled function)."""
    dtype, dqk, dv, causal, align, page = variant
    q_lens, k_lens = lengths(page)
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(sum(q_lens), 8, dqk, generator=gen).to(DEV, dtype)
    ks = [torch.randn(n, 2, dqk, generator=gen).to(DEV, dtype) for n in k_lens]
    vs = [torch.randn(n, 2, dv, generator=gen).to(DEV, dtype) for n in k_lens]
    kc, vc, table = paged_cache(ks, vs, page, gen)
    used = torch.tensor(k_lens, dtype=torch.int32, device=DEV)
    cu_q = cu_seqlens(q_lens, DEV)

    def step(q, kc, vc, table, used, cu_q):
        out = fagen.prefill_paged(q, kc, vc, table, used, cu_seqlens_q=cu_q,
                                  max_seqlen_q=max(q_lens), max_seqlen_k=max(k_lens),
                                  causal=causal, mask_align=align)
        return out * 2

    eager = step(q, kc, vc, table, used, cu_q)
    got = torch.compile(step, fullgraph=True)(q, kc, vc, table, used, cu_q)
    if not torch.equal(got, eager):
        raise AssertionError(f"compiled != eager: max |diff| {max_err(got, eager):.3g}")
    return "== eager"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", action="append", required=True,
                    help="a bundle with paged varlen forward kernels (repeatable)")
    args = ap.parse_args()
    bundles = [fagen.Bundle(path) for path in args.bundle]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fagen {fagen.version()}, "
          f"{bundles}", flush=True)
    first = None
    for bundle in bundles:
        for index, full in enumerate(bundle.kernel_names):
            name = full.split(" ")[0]
            variant = kernel_variant(name)
            if variant is None:
                continue
            first = first or variant
            for heads in ((8, 2), (7, 1)):
                check(f"{name[10:50]} {heads[0]}/{heads[1]}", case, bundle, index, variant,
                      heads, index * 10 + heads[0])
    if first is None:
        sys.exit(f"no paged varlen forward kernel in {args.bundle}")
    check("torch.compile(fullgraph=True) of fagen.prefill_paged", compiled, first)
    failed = check.failed()
    print(f"prefill_paged_check: {len(check.results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
