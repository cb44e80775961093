#!/usr/bin/env python3
"""Varlen kernels never write outside their tensors, whatever cu_seqlens hold (GPU).

For every varlen kernel of a bundle (forward and backward, each template), runs calls whose
device-side cu_seqlens the host cannot vet: offsets past total_q / total_k, a decreasing array,
a negative and a huge entry, and a valid array as the control. O, LSE, dQ, dK, dV and the
backward's workspace lie inside larger allocations whose guard regions before and after are
poisoned; after each call (and a synchronize, which would raise a CUDA error such as an
illegal address) every guard must be untouched. The runtime's promise (fagen.h,
docs/runtime-api.md): a bad array gives wrong values inside the outputs, never an access
outside them. Run it under `compute-sanitizer --tool memcheck` too (tests/gpu/run.sh does),
which also sees reads outside Q, K, V.

    PYTHONPATH=bench FAGEN_RT_LIB=.carry/libfagen_rt.so python3 tests/gpu/varlen_guard.py \
        .carry/variants.fab
Prints one line per (kernel, case) and exits 1 on any touched guard or CUDA error.
"""

import re
import sys

import torch

import fagen_rt

GUARD = 1 << 14  # elements (bytes for the workspace) before and after each output
TOTAL_Q, TOTAL_K, MAX_Q, MAX_K, HEADS_Q, HEADS_KV = 1000, 1200, 600, 700, 4, 2
CASES = {  # name: (cu_seqlens_q, cu_seqlens_k); batch 3
    "valid": ([0, 600, 800, 1000], [0, 700, 900, 1200]),
    "past_total": ([0, 600, 1200, 1800], [0, 700, 1400, 2100]),
    "decreasing": ([0, 600, 300, 1000], [0, 700, 200, 1200]),
    "negative_huge": ([0, -50, 2**31 - 1, 1000], [-7, 700, 2**31 - 1, 2**31 - 1]),
    "long_sequence": ([0, 1000, 1000, 1000], [0, 1200, 1200, 1200]),  # past max_seqlen
}
POISON = {torch.float32: -12345.0, torch.bfloat16: 77.0, torch.float16: 77.0, torch.uint8: 0xA5}


class Guarded:
    """A tensor of `shape` inside a poisoned allocation with GUARD elements either side."""

    def __init__(self, shape, dtype, fill=None):
        n = 1
        for d in shape:
            n *= d
        self.n, self.dtype = n, dtype
        self.buf = torch.full((n + 2 * GUARD,), POISON[dtype], dtype=dtype, device="cuda")
        self.t = self.buf[GUARD:GUARD + n].view(shape)
        if fill is not None:
            self.t.copy_(fill)

    def guards_intact(self):
        p = POISON[self.dtype]
        return bool((self.buf[:GUARD] == p).all() and (self.buf[GUARD + self.n:] == p).all())


def variant_of(description):
    """Keywords of Bundle.plan_forward for a kernel description (fagen_bundle_kernel_name)."""
    kw = {}
    if " mask causal" in description:
        kw["causal"] = True
    if " mask window" in description:
        kw.update(mask="window", window=(64, 0))
    if " top_left" in description:
        kw["mask_align"] = "top_left"
    if " softcap" in description:
        kw["softcap"] = 30.0
    if " alibi" in description or " block_sparse" in description:
        return None  # not in the varlen grid
    if " dropout" in description:
        kw["dropout_p"] = 0.125
    return kw


def main():
    bundle = fagen_rt.Bundle(sys.argv[1])
    torch.manual_seed(0)
    failures = rows = 0
    for index, desc in enumerate(bundle.kernel_names):
        if " varlen" not in desc:
            continue
        m = re.search(r"\((fwd|bwd) (\S+) (bf16|fp16) head_dim (\d+)/(\d+)", desc)
        kw = variant_of(desc)
        if m is None or kw is None:
            continue
        pass_, arch, dt, dqk, dv = m.group(1), m.group(2), m.group(3), int(m.group(4)), int(m.group(5))
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        name = desc.split(" ")[0]
        q = torch.randn(TOTAL_Q, HEADS_Q, dqk, dtype=dtype, device="cuda")
        k = torch.randn(TOTAL_K, HEADS_KV, dqk, dtype=dtype, device="cuda")
        v = torch.randn(TOTAL_K, HEADS_KV, dv, dtype=dtype, device="cuda")
        for case, (cq, ck) in CASES.items():
            cu_q = torch.tensor(cq, dtype=torch.int32, device="cuda")
            cu_k = torch.tensor(ck, dtype=torch.int32, device="cuda")
            variant = dict(kw, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=MAX_Q,
                           max_seqlen_k=MAX_K)
            args = fagen_rt.run_args(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, dropout_seed=7)
            try:
                if pass_ == "fwd":
                    plan = bundle.plan_forward(q, k, v, kernel_index=index, **variant)
                else:
                    plan = bundle.plan_backward(q, k, v, kernel_index=index,
                                                deterministic="_det_" in name, **variant)
            except fagen_rt.FagenError as e:
                if e.status_name == "FAGEN_ERROR_NO_KERNEL_FOR_GPU":
                    print(f"{name:72s} {case:14s} skipped: {e}")
                    break
                raise
            o = Guarded((TOTAL_Q, HEADS_Q, dv), dtype)
            lse = Guarded((HEADS_Q, TOTAL_Q), torch.float32)
            outs = [("o", o), ("lse", lse)]
            error = ""
            try:
                if pass_ == "fwd":
                    plan.run(q, k, v, o.t, lse.t, args=args)
                else:
                    o.t.copy_(torch.randn_like(o.t))
                    lse.t.copy_(torch.rand_like(lse.t) + 5)
                    do = torch.randn_like(o.t)
                    dq = Guarded(q.shape, dtype)
                    dk = Guarded(k.shape, dtype)
                    dvv = Guarded(v.shape, dtype)
                    ws = Guarded((max(plan.workspace_bytes, 1),), torch.uint8)
                    outs = [("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dvv),
                            ("workspace", ws)]
                    plan.run_backward(q, k, v, o.t, lse.t, do, dq.t, dk.t, dvv.t, ws.t,
                                      args=args)
                torch.cuda.synchronize()
            except Exception as e:  # a CUDA error poisons the context: report and stop
                print(f"{name:72s} {case:14s} FAIL: {e}")
                return 1
            touched = [n for n, g in outs if not g.guards_intact()]
            rows += 1
            if touched:
                error = "guards touched: " + ", ".join(touched)
            elif case == "valid" and pass_ == "fwd" and not torch.isfinite(o.t).all():
                error = "the valid call's O is not finite"
            failures += bool(error)
            print(f"{name:72s} {case:14s} {'FAIL ' + error if error else 'ok'}")
    print(f"varlen guard: {rows} calls, {failures} with a touched guard")
    return 1 if failures or rows == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
