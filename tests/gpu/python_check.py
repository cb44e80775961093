"""fagen.attention on a GPU: forward and gradients against SDPA and a float32 reference at odd
shapes, every variant of tests/gpu/python-check.yaml, dropout reproducibility and forward/backward
agreement, deterministic gradients, torch.compile(fullgraph=True), and a kernel built on demand.

    FAGEN_RT_LIB=.carry/libfagen_rt.so PYTHONPATH=python \\
        python3 tests/gpu/python_check.py --bundle .carry/python.fab [--cli .carry/fagen]

Accuracy rule (as FlashAttention's tests): fagen's max error against the float32 reference is at
most 2x (+1e-3 for gradients) that of the baseline in the input dtype: SDPA where it can express
the variant, else the same math computed in the input dtype. Prints one line per check and exits
non-zero if any failed.
"""
import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import traceback

import torch
import torch.nn.functional as F

import fagen

DEV = "cuda"
results = []


def check(name):
    def wrap(fn):
        def run(*args):
            t0 = time.time()
            try:
                detail = fn(*args) or ""
                results.append((name, True))
                print(f"ok    {name:44s} {time.time() - t0:5.1f}s {detail}", flush=True)
            except Exception as e:  # every check runs; the summary counts the failures
                results.append((name, False))
                print(f"FAIL  {name:44s} {type(e).__name__}: {e}", flush=True)
                traceback.print_exc()
        return run
    return wrap


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device=DEV, dtype=dtype).requires_grad_()


def visible(sq, sk, causal=False, window=None, top_left=False):
    """bool [sq, sk]: key j visible to query i (fagen's rule, docs/spec.md#masks)."""
    i = torch.arange(sq, device=DEV)[:, None]
    j = torch.arange(sk, device=DEV)[None, :]
    off = 0 if top_left else sk - sq
    keep = torch.ones(sq, sk, dtype=torch.bool, device=DEV)
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i + off - left
        if right >= 0:
            keep &= j <= i + off + right
    elif causal:
        keep &= j <= i + off
    return keep


def math_attention(q, k, v, keep=None, softcap=0.0, alibi=None, scale=None, drop_keep=None,
                   dropout_p=0.0, upcast=True):
    """The variant's definition on [batch, seq, heads, dim] tensors (GQA by repeating k, v)."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    scale = scale or 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = s.shape[-2:]
    if alibi is not None:
        i = torch.arange(sq, device=DEV)[:, None]
        j = torch.arange(sk, device=DEV)[None, :]
        s = s - alibi.view(1, -1, 1, 1) * (i + sk - sq - j).abs().to(s.dtype)
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    if drop_keep is not None:
        p = p * drop_keep / (1 - dropout_p)
    return torch.einsum("bhij,bjhd->bihd", p.to(v.dtype), v).to(dtype)


def grads(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout)


def max_err(a, b):
    return (a.float() - b.float()).abs().max().item()


def compare(name, got, bases, ref, grad=False):
    """fagen's error vs the larger of the baselines' errors, all against the reference. The
    baselines: the variant's math in the input dtype, and SDPA where it expresses the variant
    (whose math backend may compute in float32, so it alone would be too strict a bound)."""
    e, eb = max_err(got, ref), max(max_err(b, ref) for b in bases)
    bound = 2 * eb + (1e-3 if grad else 1e-4)
    if not (e <= bound):
        raise AssertionError(f"{name}: fagen error {e:.3g} > {bound:.3g} (baseline {eb:.3g})")
    return f"{name} {e:.2g}/{eb:.2g}"


def compare_all(out, ref, bases, inputs, dout):
    """out and d(inputs) of fagen against the reference and the baselines (outputs of the same
    inputs)."""
    g = grads(out, inputs, dout)
    gr = grads(ref, inputs, dout)
    gb = [grads(b, inputs, dout) for b in bases]
    notes = [compare("out", out, bases, ref)]
    for i, n in enumerate(("dq", "dk", "dv")):
        notes.append(compare(n, g[i], [b[i] for b in gb], gr[i], grad=True))
    return " ".join(notes)


def run_case(q, k, v, fagen_kw, keep=None, sdpa=None, **math_kw):
    """fagen vs the float32 reference, bounded by the math in q.dtype and SDPA (if given)."""
    dout = torch.randn(q.shape[:-1] + (v.shape[-1],), device=DEV, dtype=q.dtype)
    out = fagen.attention(q, k, v, **fagen_kw)
    ref = math_attention(q, k, v, keep, **math_kw)
    bases = [math_attention(q, k, v, keep, upcast=False, **math_kw)]
    bases += [sdpa(q, k, v)] if sdpa else []
    return compare_all(out, ref, bases, (q, k, v), dout)


def sdpa_bshd(mask=None, is_causal=False):
    def call(q, k, v):
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), attn_mask=mask,
                                           is_causal=is_causal,
                                           enable_gqa=q.shape[2] != k.shape[2])
        return o.transpose(1, 2)
    return call


@check("bf16 hd128 causal GQA 8/2, 113x257 (bottom-right)")
def causal_gqa():
    q, k, v = rand(2, 113, 8, 128), rand(2, 257, 2, 128), rand(2, 257, 2, 128)
    keep = visible(113, 257, causal=True)
    return run_case(q, k, v, dict(causal=True), keep, sdpa_bshd(mask=keep))


@check("bf16 hd128 causal top-left, 150x200 (SDPA is_causal)")
def causal_top_left():
    q, k, v = rand(3, 150, 4, 128), rand(3, 200, 4, 128), rand(3, 200, 4, 128)
    return run_case(q, k, v, dict(causal=True, mask_align="top_left"),
                    visible(150, 200, causal=True, top_left=True), sdpa_bshd(is_causal=True))


@check("fp16 hd64 dense MQA 16/1, 77x131")
def dense_mqa():
    q = rand(1, 77, 16, 64, dtype=torch.float16)
    k, v = rand(1, 131, 1, 64, dtype=torch.float16), rand(1, 131, 1, 64, dtype=torch.float16)
    return run_case(q, k, v, {}, None, sdpa_bshd())


@check("bf16 hd64 window (48, 0), 300x300")
def window():
    q, k, v = (rand(2, 300, 4, 64) for _ in range(3))
    keep = visible(300, 300, window=(48, 0))
    return run_case(q, k, v, dict(window=(48, 0)), keep, sdpa_bshd(mask=keep))


@check("bf16 hd128 causal softcap 5, 129x129")
def softcap():
    q, k = ((rand(2, 129, 4, 128) * 1.5).detach().requires_grad_() for _ in range(2))
    v = rand(2, 129, 4, 128)  # logits of std ~2.3: the cap bends them
    return run_case(q, k, v, dict(causal=True, softcap=5.0), visible(129, 129, causal=True),
                    softcap=5.0)


@check("bf16 hd64 causal alibi, 90x150")
def alibi():
    q, k, v = rand(2, 90, 8, 64), rand(2, 150, 8, 64), rand(2, 150, 8, 64)
    slopes = torch.tensor([2 ** (-8 * (h + 1) / 8) for h in range(8)], device=DEV)
    return run_case(q, k, v, dict(causal=True, alibi_slopes=slopes),
                    visible(90, 150, causal=True), alibi=slopes)


@check("bf16 hd192x128 causal, 65x65")
def head_dim_v():
    q, k, v = rand(2, 65, 4, 192), rand(2, 65, 4, 192), rand(2, 65, 4, 128)
    keep = visible(65, 65, causal=True)
    return run_case(q, k, v, dict(causal=True), keep, sdpa_bshd(mask=keep))


@check("bf16 hd64 block mask 128, 300x300")
def block_mask():
    q, k, v = (rand(2, 300, 4, 64) for _ in range(3))
    blocks = (torch.rand(2, 4, 3, 3, device=DEV) < 0.6).to(torch.uint8)
    blocks[..., 0] = 1  # every query row sees a block
    keep = blocks.bool().repeat_interleave(128, -2).repeat_interleave(128, -1)[..., :300, :300]
    dout = torch.randn(2, 300, 4, 64, device=DEV, dtype=torch.bfloat16)
    out = fagen.attention(q, k, v, block_mask=blocks)
    ref = math_attention(q, k, v, keep)
    bases = [math_attention(q, k, v, keep, upcast=False), sdpa_bshd(mask=keep)(q, k, v)]
    return compare_all(out, ref, bases, (q, k, v), dout)


@check("bf16 hd64 varlen causal, lengths 37/100/5 x 60/100/9")
def varlen():
    lq, lk = [37, 100, 5], [60, 100, 9]
    cu = lambda ls: torch.tensor([0] + list(torch.tensor(ls).cumsum(0)), dtype=torch.int32,
                                 device=DEV)
    q, k, v = rand(sum(lq), 4, 64), rand(sum(lk), 2, 64), rand(sum(lk), 2, 64)
    dout = torch.randn(sum(lq), 4, 64, device=DEV, dtype=torch.bfloat16)
    out = fagen.attention(q, k, v, causal=True, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk),
                          max_seqlen_q=max(lq), max_seqlen_k=max(lk))
    pieces = {"ref": [], "low": [], "sdpa": []}
    for b in range(3):
        qs = q[sum(lq[:b]):sum(lq[:b + 1])][None]
        ks, vs = (t[sum(lk[:b]):sum(lk[:b + 1])][None] for t in (k, v))
        keep = visible(lq[b], lk[b], causal=True)
        pieces["ref"].append(math_attention(qs, ks, vs, keep)[0])
        pieces["low"].append(math_attention(qs, ks, vs, keep, upcast=False)[0])
        pieces["sdpa"].append(sdpa_bshd(mask=keep)(qs, ks, vs)[0])
    ref, low, sdpa = (torch.cat(pieces[n]) for n in ("ref", "low", "sdpa"))
    return compare_all(out, ref, [low, sdpa], (q, k, v), dout)


@check("dropout: torch.manual_seed reproduces, fwd/bwd agree")
def dropout():
    # v = identity (64 keys, head dim 64) makes out[i, j] = P[i, j] * keep[i, j] / (1 - p): the
    # forward's keep mask is read off its output; the backward must use the same mask.
    p = 0.25
    q, k = rand(2, 64, 4, 64), rand(2, 64, 4, 64)
    eye = torch.eye(64, device=DEV, dtype=torch.bfloat16)
    v = eye[None, :, None, :].expand(2, 64, 4, 64).contiguous().requires_grad_()
    torch.manual_seed(7)
    out = fagen.attention(q, k, v, dropout_p=p)
    torch.manual_seed(7)
    again = fagen.attention(q, k, v, dropout_p=p)
    other = fagen.attention(q, k, v, dropout_p=p)  # the generator moved on: another mask
    assert torch.equal(out, again), "same seed, different output"
    assert not torch.equal(out, other), "the generator's offset did not advance"
    drop_keep = (out != 0).permute(0, 2, 1, 3)  # [b, h, i, j]
    kept = drop_keep.float().mean().item()
    assert abs(kept - (1 - p)) < 0.03, f"kept fraction {kept:.3f}, expected {1 - p}"
    dout = torch.randn_like(out)
    ref = math_attention(q, k, v, drop_keep=drop_keep, dropout_p=p)
    base = math_attention(q, k, v, drop_keep=drop_keep, dropout_p=p, upcast=False)
    return f"kept {kept:.3f} " + compare_all(out, ref, [base], (q, k, v), dout)


@check("deterministic backward: bitwise-equal gradients")
def deterministic():
    q, k, v = rand(2, 777, 8, 64), rand(2, 777, 8, 64), rand(2, 777, 8, 64)
    dout = torch.randn_like(q)
    first = grads(fagen.attention(q, k, v, causal=True, deterministic=True), (q, k, v), dout)
    for _ in range(3):
        again = grads(fagen.attention(q, k, v, causal=True, deterministic=True), (q, k, v), dout)
        assert all(torch.equal(a, b) for a, b in zip(first, again)), "gradients differ"


@check("torch.compile(fullgraph=True): one graph, eager's results")
def compiled():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(256, 3 * 256, dtype=torch.bfloat16, device=DEV)
            self.proj = torch.nn.Linear(256, 256, dtype=torch.bfloat16, device=DEV)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, 4, 64).unbind(2)
            return self.proj(fagen.attention(q, k, v, causal=True).reshape(b, t, 256))

    torch.manual_seed(0)
    block = Block()
    x = torch.randn(4, 333, 256, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    explained = torch._dynamo.explain(block)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained
    torch._dynamo.reset()
    eager_out = block(x)
    eager_grads = torch.autograd.grad(eager_out.float().square().mean(), [x] + list(
        block.parameters()))
    fn = torch.compile(block, fullgraph=True)
    out = fn(x)
    got = torch.autograd.grad(out.float().square().mean(), [x] + list(block.parameters()))
    assert max_err(out, eager_out) < 2e-2, max_err(out, eager_out)
    errs = [max_err(a, b) / (b.float().abs().max().item() + 1e-6) for a, b in
            zip(got, eager_grads)]
    assert max(errs) < 2e-2, errs
    return f"max relative grad diff {max(errs):.2g}"


@check("kernel on demand: fp16 hd96 built, cached, correct")
def on_demand(cli):
    from fagen import ondemand
    if not cli or ondemand.find_nvcc() is None:
        return "SKIPPED: needs --cli and nvcc on this machine"
    cache = tempfile.mkdtemp()
    try:
        os.environ["FAGEN_CACHE_DIR"], os.environ["FAGEN_CLI"] = cache, cli
        q, k, v = (rand(1, 100, 2, 96, dtype=torch.float16) for _ in range(3))
        note = run_case(q, k, v, {}, None, sdpa_bshd())
        assert os.listdir(os.path.join(cache, "bundles")), "nothing built"
        return note
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        del os.environ["FAGEN_CACHE_DIR"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True, help="tests/gpu/python-check.yaml built")
    ap.add_argument("--cli", help="the fagen CLI, for the on-demand check (with nvcc)")
    args = ap.parse_args()
    bundle = fagen.Bundle(args.bundle)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fagen {fagen.version()}, "
          f"{bundle}", flush=True)
    torch.manual_seed(1234)
    for fn in (causal_gqa, causal_top_left, dense_mqa, window, softcap, alibi, head_dim_v,
               block_mask, varlen, dropout, deterministic, compiled):
        fn()
    on_demand(args.cli)
    failed = [n for n, ok in results if not ok]
    print(f"python_check: {len(results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
