"""Ring attention (context parallelism, python/fagen/ring.py) on the GPUs of one host: fagen's
ring against the same ring with SDPA's cuDNN attention as the per-step op (the op PyTorch's own
context-parallel ring calls; it returns the LSE), and against one GPU. Run as a world of one
on an H100 (python/README.md has the numbers); on 2-8 GPUs not yet: no multi-GPU machine has
been lent. The ring itself is tested on CPUs (python/tests/test_ring.py).

Cells: bf16, head dim 128, causal (zig-zag shards), batch 1, 16 query and 16 kv heads
(--heads, --kv-heads; the cuDNN backend repeats K/V heads for GQA), 128k-512k tokens in all
(--seqlens), over W = the torchrun world. Each iteration is a forward and a backward
(ring_attention(...).backward(dout)); times are the slowest rank's mean over --iters after
--warmup, by CUDA events. One GPU: the same backend's plain call on the whole sequence (fagen:
fagen.attention; cuDNN: SDPA with its cuDNN backend) on rank 0 alone, "-" if it does not fit.
Scaling efficiency = time on one GPU / (W x time on W); the issue's target is >= 90 % on 2 GPUs
at 128k, and fagen's ring ahead of cuDNN's.

First (--check-seqlen, 0 skips) each ring's output and gradients at a short length are compared
with a float32 reference on the whole sequence: the ring's max error must be at most 2x (+1e-3
for gradients) that of fagen.attention on one GPU, as tests/gpu/python_check.py rules.

    fagen build bench/bench-ring.yaml -o .carry/ring.fab                         # here
    FAGEN_RT_LIB=.carry/libfagen_rt.so torchrun --standalone --nproc-per-node 2 \\
        bench/bench_ring.py --bundle .carry/ring.fab [--out ring.json]            # there

Exits 1 if a check failed.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fagen  # noqa: E402
from fagen import ring  # noqa: E402


class CudnnBackend:
    """SDPA's cuDNN attention as the ring's per-step op: aten._scaled_dot_product_cudnn_attention
    (compute_log_sumexp=True) and its backward, on BHSD views of the BSHD tensors. The aten op
    takes equal head counts: K/V heads are repeated for GQA and their gradients summed back."""

    def forward(self, q, k, v, causal, softmax_scale):
        k, v = (_repeat_heads(t, q.shape[2]) for t in (k, v))
        out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, True, 0.0, causal,
            False, scale=softmax_scale)
        return out.transpose(1, 2), lse.reshape(lse.shape[:3])  # cuDNN's lse is [b, h, s, 1]

    def backward(self, dout, q, k, v, out, lse, causal, softmax_scale):
        heads_kv = k.shape[2]
        k, v = (_repeat_heads(t, q.shape[2]) for t in (k, v))
        unused = torch.zeros((), dtype=torch.int64, device=q.device)  # philox seed, offset
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            dout.contiguous().transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2),
            v.transpose(1, 2), out.contiguous().transpose(1, 2), lse.contiguous().unsqueeze(-1),
            unused, unused, None, None, None, q.shape[1], k.shape[1], 0.0, causal,
            scale=softmax_scale)
        dk, dv = (_sum_heads(t.transpose(1, 2), heads_kv) for t in (dk, dv))
        return dq.transpose(1, 2), dk, dv


def _repeat_heads(t, heads_q):
    return t if t.shape[2] == heads_q else t.repeat_interleave(heads_q // t.shape[2], dim=2)


def _sum_heads(t, heads_kv):
    b, s, h, d = t.shape
    return t if h == heads_kv else t.reshape(b, s, heads_kv, h // heads_kv, d).sum(3)


def one_gpu(backend, q, k, v):
    """The backend's plain causal attention on one GPU (differentiable)."""
    if backend == "fagen":
        return fagen.attention(q, k, v, causal=True)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                              enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)


def inputs(args, seqlen, gen, requires_grad=True):
    """q, k, v, dout [batch, seqlen, heads, head_dim] bf16 on this GPU."""
    shapes = [(args.batch, seqlen, h, args.head_dim)
              for h in (args.heads, args.kv_heads, args.kv_heads, args.heads)]
    ts = [torch.randn(s, generator=gen, device="cuda", dtype=torch.bfloat16) for s in shapes]
    return [t.requires_grad_(requires_grad) for t in ts[:3]] + [ts[3]]


def max_errors(got, want):
    return [(a.float() - b.float()).abs().max().item() for a, b in zip(got, want)]


def check(args, backends, rank, world):
    """Each ring's out, dq, dk, dv against the float32 reference, beside one-GPU fagen's."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = inputs(args, args.check_seqlen, gen)
    ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
    out_ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in ref), is_causal=True,
                                             enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)
    want = [out_ref] + list(torch.autograd.grad(out_ref, ref, dout.float()))
    out = fagen.attention(q, k, v, causal=True)
    base = max_errors([out] + list(torch.autograd.grad(out, (q, k, v), dout)), want)
    ok = True
    for name, backend in backends.items():
        local = [ring.zigzag_shard(t.detach(), rank, world).requires_grad_() for t in (q, k, v)]
        out = ring.ring_attention(*local, causal=True, backend=backend)
        got = [out] + list(torch.autograd.grad(out, local, ring.zigzag_shard(dout, rank, world)))
        mine = [ring.zigzag_shard(t, rank, world) for t in want]
        errs = torch.tensor(max_errors(got, mine), device="cuda")
        dist.all_reduce(errs, op=dist.ReduceOp.MAX)
        for what, e, b, slack in zip(("out", "dq", "dk", "dv"), errs.tolist(), base,
                                     (0.0, 1e-3, 1e-3, 1e-3)):
            good = e <= 2 * b + slack
            ok &= good
            if rank == 0:
                print(f"{'ok  ' if good else 'FAIL'} check {name:6s} {what}: ring max error "
                      f"{e:.3g}, one-GPU fagen {b:.3g}", flush=True)
    return ok


def time_ms(fn, args):
    """Mean ms of fn over args.iters after args.warmup, by CUDA events on this GPU."""
    for _ in range(args.warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(args.iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / args.iters


def time_ring(args, backend, seqlen, rank, world):
    """The slowest rank's ms of a forward and of a forward + backward."""
    gen = torch.Generator(device="cuda").manual_seed(1 + rank)
    q, k, v, dout = inputs(args, seqlen // world, gen)

    def fwd():
        with torch.no_grad():
            ring.ring_attention(q, k, v, causal=True, backend=backend)

    def fwd_bwd():
        ring.ring_attention(q, k, v, causal=True, backend=backend).backward(dout)

    dist.barrier()
    ms = torch.tensor([time_ms(fwd, args), time_ms(fwd_bwd, args)], device="cuda")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    return ms.tolist()


def time_one_gpu(args, backend, seqlen, rank):
    """ms of the plain forward + backward on rank 0's GPU over the whole sequence (NaN on the
    other ranks, or if it does not fit), shared with every rank."""
    ms = float("nan")
    if rank == 0:
        try:
            gen = torch.Generator(device="cuda").manual_seed(1)
            q, k, v, dout = inputs(args, seqlen, gen)
            ms = time_ms(lambda: one_gpu(backend, q, k, v).backward(dout), args)
        except torch.cuda.OutOfMemoryError:
            pass
        torch.cuda.empty_cache()
    got = torch.tensor([ms], device="cuda")
    dist.broadcast(got, src=0)
    return got.item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", help="a fagen bundle with the kernels of bench/bench-ring.yaml")
    p.add_argument("--seqlens", default="131072,262144,524288", help="whole-sequence tokens")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--backends", default="fagen,cudnn")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--check-seqlen", type=int, default=4096, help="0: no accuracy check")
    p.add_argument("--no-one-gpu", action="store_true", help="skip the one-GPU baseline")
    p.add_argument("--out", help="write the results as JSON")
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    if args.bundle:
        fagen.Bundle(args.bundle)
    backends = {name: {"fagen": ring.FagenBackend, "cudnn": CudnnBackend}[name]()
                for name in args.backends.split(",")}
    ok = check(args, backends, rank, world) if args.check_seqlen else True

    rows = []
    for seqlen in (int(s) for s in args.seqlens.split(",")):
        if seqlen % (2 * world):
            raise SystemExit(f"--seqlens: {seqlen} is not divisible by 2 x world = {2 * world}")
        # forward + backward: 4 x D x visible pairs (fwd) and 2.5 x that (bwd), per GPU
        flops = 3.5 * 4 * args.head_dim * seqlen * (seqlen + 1) / 2 * args.batch * args.heads
        for name, backend in backends.items():
            fwd, fwd_bwd = time_ring(args, backend, seqlen, rank, world)
            single = float("nan") if args.no_one_gpu else time_one_gpu(args, name, seqlen, rank)
            row = dict(backend=name, world=world, seqlen=seqlen, fwd_ms=fwd, fwd_bwd_ms=fwd_bwd,
                       one_gpu_fwd_bwd_ms=None if math.isnan(single) else single,
                       efficiency=None if math.isnan(single) else single / (world * fwd_bwd),
                       tflops_per_gpu=flops / world / (fwd_bwd * 1e-3) / 1e12)
            rows.append(row)
            if rank == 0:
                eff = "-" if row["efficiency"] is None else f"{100 * row['efficiency']:.1f} %"
                print(f"{name:6s} W={world} {seqlen:7d} tokens: fwd {fwd:9.1f} ms, fwd+bwd "
                      f"{fwd_bwd:9.1f} ms ({row['tflops_per_gpu']:.0f} TFLOP/s a GPU), one GPU "
                      f"{single:9.1f} ms, efficiency {eff}", flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), args=vars(args), rows=rows), f,
                      indent=1)
    dist.destroy_process_group()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
