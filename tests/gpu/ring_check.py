"""fagen's ring-attention backend on one GPU, where no multi-GPU machine is at hand: the ring's
loop is tested on CPUs with the reference backend (python/tests/test_ring.py), so what a GPU must
show is that ring.FagenBackend computes what ring.ReferenceBackend does on every kind of call the
ring makes, and that the ring of one process is fagen.attention bit for bit.

- Calls, bf16, GQA 8/2 and MHA, head dim 128, chunks of c tokens (odd c too): the causal step
  over the rank's two chunks (2c x 2c), the first received chunk seen by every local query
  (2c x c), the second local chunk over both received chunks (c x 2c); the backward of each fed
  an out and LSE of a larger attention (this step's keys and as many more), sliced as the ring
  slices them. Bound: max error <= 2e-2 x max |reference| (float32), which a wrong slice, mask
  or LSE exceeds by far; the numerics of the kernels themselves are python_check.py's.
- A ring of one process (a world of one, gloo: nothing is sent): out, lse, dq, dk, dv equal to
  fagen.attention(..., causal=True, return_lse=True) and its backward.

    fagen build bench/bench-ring.yaml -o .carry/ring.fab       # here (or build on demand)
    FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONPATH=python \\
        python3 tests/gpu/ring_check.py --bundle .carry/ring.fab

Prints one line per check and exits 1 if one failed. Ran on an H100 (2026-12-07): 35 of 35.
"""
import argparse
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import fagen
from fagen import ring

DEV = "cuda"


def rand(*shape):
    return torch.randn(*shape, device=DEV, dtype=torch.bfloat16)


def close(name, got, want):
    err, bound = (got.float() - want.float()).abs().max().item(), 2e-2 * want.abs().max().item()
    ok = err <= bound
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max error {err:.3g} (bound {bound:.3g})",
          flush=True)
    return ok


def check_calls(c, heads_q, heads_kv, d=128):
    """FagenBackend vs ReferenceBackend on the ring's three kinds of call."""
    fa, ref = ring.FagenBackend(), ring.ReferenceBackend()
    scale = 1 / math.sqrt(d)
    q, dout = rand(1, 2 * c, heads_q, d), rand(1, 2 * c, heads_q, d)
    k, v = rand(1, 2 * c, heads_kv, d), rand(1, 2 * c, heads_kv, d)
    calls = [("causal 2c x 2c", slice(None), slice(None), True),
             ("first chunk 2c x c", slice(None), slice(None, c), False),
             ("second half c x 2c", slice(c, None), slice(None), False)]
    ok = True
    for what, rows, keys, causal in calls:
        name = f"c={c} {heads_q}/{heads_kv} {what}"
        args = (q[:, rows], k[:, keys], v[:, keys], causal, scale)
        (out_f, lse_f), (out_r, lse_r) = fa.forward(*args), ref.forward(*args)
        ok &= close(f"{name} out", out_f, out_r) & close(f"{name} lse", lse_f, lse_r)
        # The ring's global out and LSE, sliced as the ring slices them: as if as much softmax
        # mass sat on other ranks' keys.
        out_g = rand(1, 2 * c, heads_q, d)[:, rows]
        lse_g = torch.zeros(1, heads_q, 2 * c, device=DEV)
        lse_g[:, :, rows] = lse_r + math.log(2)
        lse_g = lse_g[:, :, rows]
        grads_f = fa.backward(dout[:, rows], *args[:3], out_g, lse_g, causal, scale)
        grads_r = ref.backward(dout[:, rows], *args[:3], out_g, lse_g, causal, scale)
        for n, gf, gr in zip(("dq", "dk", "dv"), grads_f, grads_r):
            ok &= close(f"{name} {n}", gf, gr)
    return ok


def check_ring_of_one(c=300, heads_q=8, heads_kv=2, d=128):
    """ring_attention over a world of one equals fagen.attention bit for bit."""
    q, k, v = (rand(1, 2 * c, h, d).requires_grad_() for h in (heads_q, heads_kv, heads_kv))
    dout = rand(1, 2 * c, heads_q, d)
    scale = 1 / math.sqrt(d)  # the same float on both sides
    out, lse = fagen.attention(q, k, v, causal=True, softmax_scale=scale, return_lse=True)
    want = [out, lse] + list(torch.autograd.grad(out, (q, k, v), dout))
    out, lse = ring.ring_attention(q, k, v, causal=True, softmax_scale=scale, return_lse=True)
    got = [out, lse] + list(torch.autograd.grad(out, (q, k, v), dout))
    ok = True
    for n, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        same = torch.equal(a, b)
        ok &= same
        print(f"{'ok  ' if same else 'FAIL'} ring of one {n}: "
              f"{'bit for bit' if same else 'differs from fagen.attention'}", flush=True)
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", help="a bundle with bench/bench-ring.yaml's kernels")
    args = p.parse_args()
    if args.bundle:
        fagen.Bundle(args.bundle)
    print(torch.cuda.get_device_name(), flush=True)
    ok = True
    for c, heads_q, heads_kv in ((256, 16, 16), (333, 8, 2)):
        ok &= check_calls(c, heads_q, heads_kv)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}",
                                rank=0, world_size=1)
        ok &= check_ring_of_one()
        dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
