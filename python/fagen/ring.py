"""Ring attention for context parallelism: attention over a sequence sharded across the ranks of
a torch.distributed process group, forward and backward, with fagen's ops on each rank.

    q, k, v = (zigzag_shard(t, rank, world) for t in (q_full, k_full, v_full))
    out = fagen.ring_attention(q, k, v, causal=True)     # this rank's shard of the output
    out.sum().backward()                                  # dq, dk, dv of this rank's shard
    out_full = zigzag_gather(out)                         # every rank: the whole sequence

Each rank holds a shard of q, k and v, [batch, local_seqlen, heads, head_dim] (BSHD, GQA
allowed), the same shape on every rank. K and V travel around the ring (rank r sends to r + 1
and receives from r - 1, in the group's ranks) over torch.distributed point-to-point
(batch_isend_irecv); the transfer of the next step's K/V is issued before the current step's
attention, so it overlaps the compute. After W steps (W ranks) every local query has seen every
key. Each step's partial output and log-sum-exp (LSE) are merged online in float32 (float64 for
float64 inputs): out = sum_i w_i out_i / sum_i w_i with w_i = exp(lse_i - lse), exactly.

Causal attention balances the work by the zig-zag order (ring_flash_attn's zigzag ring and
PyTorch's context_parallel head-tail load balancer use the same one): the sequence is cut into
2W chunks and rank r holds chunks r and 2W-1-r (zigzag_shard). Step 0 is causal over the rank's
own two chunks; at step s the K/V come from rank r - s (mod W), and
  - s <= r: the received chunks are r - s, before both local ones, and 2W-1-r+s, after both:
    every local query sees the first received chunk and none the second;
  - s > r:  the received chunks W+r-s and W-1-r+s both lie between the local chunks: the
    second local chunk sees both, the first neither;
both non-causal over 2c x c (c tokens a chunk), as much work as step 0's causal 2c x 2c, so
every rank does the same work at every step. The only causal call is square (2c x 2c), where
the bottom-right and top-left alignments of a causal mask agree: no step needs an offset mask.
Without causal the shards may be in any order (e.g. contiguous) and every step is a full
non-causal attention of the local queries over the received keys.

The backward is the standard ring backward: every step calls the backend's backward with the
merged (global) out and LSE and dout on that step's (queries, keys) pair; dq accumulates
locally, dk and dv accumulate into buffers that travel the ring with their K/V, one step behind
them, and arrive home after the last step.

PyTorch's own context_parallel (torch.distributed.tensor.experimental) dispatches only the aten
SDPA ops (flash, efficient, cuDNN) through its ring and takes no custom op; this module is the
thin ring loop the fagen ops need instead, over the same torch.distributed process groups.

Backends (the per-step attention): FagenBackend (fagen.attention's kernels, CUDA; the default)
and ReferenceBackend (plain torch in float32/float64 on any device; what the CPU tests run).
Tested on CPUs with gloo (python/tests/test_ring.py); the fagen backend on GPUs
(tests/gpu/ring_check.py, bench/bench_ring.py): compiled, not run (no multi-GPU machine was lent
yet).
"""
import math

import torch
import torch.distributed as dist

__all__ = ["FagenBackend", "ReferenceBackend", "ring_attention", "zigzag_gather",
           "zigzag_shard", "zigzag_unshard"]


# ---------------------------------------------------------------------------- zig-zag order

def zigzag_shard(x, rank, world_size, dim=1):
    """Rank `rank`'s shard of a full sequence in the zig-zag order: x cut along `dim` (the
    sequence dim, 1 in BSHD) into 2 x world_size equal chunks, chunks rank and
    2 x world_size - 1 - rank concatenated. Returns a new tensor (contiguous)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"zigzag_shard: rank {rank} is not in [0, {world_size})")
    n = x.shape[dim]
    if n % (2 * world_size):
        raise ValueError(f"zigzag_shard: the sequence length {n} (dim {dim}) is not divisible "
                         f"by 2 x world_size = {2 * world_size}; pad it to a multiple")
    chunks = x.chunk(2 * world_size, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world_size - 1 - rank]], dim=dim)


def zigzag_unshard(shards, dim=1):
    """The full sequence from every rank's zig-zag shard (a list in rank order): the inverse of
    zigzag_shard."""
    shards = list(shards)
    if not shards:
        raise ValueError("zigzag_unshard: no shards")
    shape = shards[0].shape
    for r, s in enumerate(shards):
        if s.shape != shape:
            raise ValueError(f"zigzag_unshard: shard {r} has shape {tuple(s.shape)}, shard 0 "
                             f"{tuple(shape)}; every rank's shard has the same shape")
    if shape[dim] % 2:
        raise ValueError(f"zigzag_unshard: a shard of odd length {shape[dim]} (dim {dim}) is "
                         f"not two chunks of the zig-zag order")
    heads = [s.chunk(2, dim=dim)[0] for s in shards]
    tails = [s.chunk(2, dim=dim)[1] for s in shards]
    return torch.cat(heads + tails[::-1], dim=dim)


def zigzag_gather(x, group=None, dim=1):
    """The full sequence on every rank of `group` (default: the world) from each rank's zig-zag
    shard x (all_gather, then zigzag_unshard). Not differentiable."""
    shards = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(shards, x.contiguous(), group=group)
    return zigzag_unshard(shards, dim=dim)


# ---------------------------------------------------------------------------- backends

class ReferenceBackend:
    """Softmax attention in plain torch on any device, computed in float32 (float64 inputs in
    float64): the per-step op of the CPU tests, and a readable statement of what a backend
    returns. forward(q, k, v, causal, softmax_scale) -> (out, lse float [batch, heads_q,
    seqlen_q]); backward(dout, q, k, v, out, lse, causal, softmax_scale) -> (dq, dk, dv) from
    an out and lse that may be those of a larger attention (the ring's global ones): the
    probabilities are exp(s - lse), so this step's share of the softmax. causal aligns at the
    bottom right (key j visible to query i iff j <= i + seqlen_k - seqlen_q), as fagen's
    default; the ring asks for it only on square steps."""

    def forward(self, q, k, v, causal, softmax_scale):
        s, v_ = self._scores(q, k, v, causal, softmax_scale)
        lse = torch.logsumexp(s, dim=-1)                                  # [b, h, sq]
        p = torch.exp(s - lse.unsqueeze(-1))
        return torch.einsum("bhqk,bkhd->bqhd", p, v_), lse

    def backward(self, dout, q, k, v, out, lse, causal, softmax_scale):
        s, v_ = self._scores(q, k, v, causal, softmax_scale)
        dt = s.dtype
        q_, k_ = q.to(dt), _expand_heads(k.to(dt), q.shape[2])
        dout, out = dout.to(dt), out.to(dt)
        p = torch.exp(s - lse.to(dt).unsqueeze(-1))                       # [b, h, sq, sk]
        dv = torch.einsum("bhqk,bqhd->bkhd", p, dout)
        dp = torch.einsum("bqhd,bkhd->bhqk", dout, v_)
        delta = (dout * out).sum(-1).transpose(1, 2).unsqueeze(-1)        # [b, h, sq, 1]
        ds = p * (dp - delta) * softmax_scale
        dq = torch.einsum("bhqk,bkhd->bqhd", ds, k_)
        dk = torch.einsum("bhqk,bqhd->bkhd", ds, q_)
        return dq, _sum_heads(dk, k.shape[2]), _sum_heads(dv, k.shape[2])

    @staticmethod
    def _scores(q, k, v, causal, softmax_scale):
        """Scaled, masked scores [b, h, sq, sk] and v with heads_q heads, in the compute dtype."""
        dt = torch.promote_types(q.dtype, torch.float32)
        k_, v_ = (_expand_heads(t.to(dt), q.shape[2]) for t in (k, v))
        s = torch.einsum("bqhd,bkhd->bhqk", q.to(dt), k_) * softmax_scale
        if causal:
            sq, sk = q.shape[1], k.shape[1]
            i = torch.arange(sq, device=q.device).unsqueeze(1)
            j = torch.arange(sk, device=q.device)
            s = s.masked_fill(j > i + (sk - sq), -math.inf)
        return s, v_


def _expand_heads(t, heads_q):
    """[b, s, heads_kv, d] -> [b, s, heads_q, d]: query head h reads kv head h // group."""
    return t.repeat_interleave(heads_q // t.shape[2], dim=2)


def _sum_heads(t, heads_kv):
    """[b, s, heads_q, d] -> [b, s, heads_kv, d]: the gradient of _expand_heads."""
    b, s, h, d = t.shape
    return t.view(b, s, heads_kv, h // heads_kv, d).sum(3)


class FagenBackend:
    """fagen's kernels as the per-step op (CUDA, float16/bfloat16): the forward is
    fagen.attention(..., return_lse=True), the backward the op fagen::attention_backward fed
    with the ring's global out and lse (the kernel recomputes exp(s - lse), so it takes any
    lse). Kernels come from the loaded bundles (or `bundle` alone), else are built on demand
    as for fagen.attention; a ring needs the causal and the non-causal kernel (fwd and bwd
    passes). deterministic: bitwise-repeatable dq, dk, dv per step. Compiled, not run."""

    def __init__(self, bundle=None, deterministic=False):
        self.bundle = bundle
        self.deterministic = deterministic

    def forward(self, q, k, v, causal, softmax_scale):
        from .ops import attention
        return attention(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True,
                         bundle=self.bundle)

    def backward(self, dout, q, k, v, out, lse, causal, softmax_scale):
        no_dropout = torch.zeros(2, dtype=torch.int64)
        return torch.ops.fagen.attention_backward(
            dout, q, k, v, out, lse.contiguous(), no_dropout, None, None, None, None, 0, 0,
            "causal" if causal else "none", "bottom_right", -1, -1, 0.0, 0.0,
            float(softmax_scale), 0, self.deterministic,
            0 if self.bundle is None else self.bundle.id)


# ---------------------------------------------------------------------------- the ring

class _Ring:
    """This rank's neighbours in `group`: sends go to group rank + 1, receives come from
    group rank - 1, both as global ranks (what P2POp takes)."""

    def __init__(self, group):
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        if self.rank < 0:
            raise ValueError("ring_attention: this process is not a member of `group`")
        self.size = dist.get_world_size(self.group)
        ranks = dist.get_process_group_ranks(self.group)
        self.next = ranks[(self.rank + 1) % self.size]
        self.prev = ranks[(self.rank - 1) % self.size]

    def shift(self, *tensors):
        """Starts sending `tensors` to the next rank and receiving the previous rank's into new
        buffers; returns the pending transfer (wait() -> the received tensors)."""
        if self.size == 1:  # a ring of one: the tensors come back to their sender
            return _Transfer([], [], list(tensors))
        sent = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in sent]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in sent]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in received]
        return _Transfer(dist.batch_isend_irecv(ops), sent, received)


class _Transfer:
    def __init__(self, works, sent, received):
        self.works, self.sent, self.received = works, sent, received  # sent: alive until done

    def wait(self):
        for w in self.works:
            w.wait()
        return self.received


def _steps(rank, size, causal, seqlen):
    """Per ring step: (query rows, key rows, causal) as slices of the local queries and the
    received keys (the zig-zag schedule of the module docstring)."""
    every, half = slice(None), seqlen // 2
    if not causal:
        return [(every, every, False)] * size
    return [(every, every, True)] + [
        (every, slice(None, half), False) if s <= rank else (slice(half, None), every, False)
        for s in range(1, size)]


def _merge(out, lse, out_i, lse_i):
    """Merges (out_i, lse_i) into the running (out, lse) in place, exactly: weights
    exp(lse_x - lse_new); a row with no keys yet (lse -inf) takes nothing from its state."""
    new = torch.logaddexp(lse, lse_i)
    finite = new.masked_fill(new == -math.inf, 0.0)
    w, w_i = (torch.exp(x - finite).transpose(1, 2).unsqueeze(-1) for x in (lse, lse_i))
    out.copy_(out * w + out_i.to(out.dtype) * w_i)
    lse.copy_(new)


def _check(q, k, v, causal, size):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"ring_attention: {name} must be [batch, local_seqlen, heads, "
                             f"head_dim], got shape {tuple(t.shape)}")
        if t.dtype != q.dtype or t.device != q.device:
            raise TypeError(f"ring_attention: {name} is {t.dtype} on {t.device}, q {q.dtype} "
                            f"on {q.device}; pass q, k, v alike")
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"ring_attention: q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)} must agree on batch, and k and v on seqlen and "
                         f"heads")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"ring_attention: q's head_dim {q.shape[3]} != k's {k.shape[3]}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"ring_attention: heads_q ({q.shape[2]}) is not a multiple of "
                         f"heads_kv ({k.shape[2]})")
    if causal and (q.shape[1] != k.shape[1] or q.shape[1] % 2):
        raise ValueError(f"ring_attention: causal=True takes zig-zag shards (zigzag_shard): q "
                         f"and k of the same even local_seqlen (two chunks), got {q.shape[1]} "
                         f"and {k.shape[1]}; shard a sequence divisible by 2 x world_size "
                         f"({2 * size})")


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, group, backend):
        ring = _Ring(group)
        acc = torch.promote_types(q.dtype, torch.float32)
        b, sq, h, _ = q.shape
        out = q.new_zeros((b, sq, h, v.shape[3]), dtype=acc)
        lse = q.new_full((b, h, sq), -math.inf, dtype=acc)
        kv = (k, v)
        for step, (rows, keys, mask) in enumerate(_steps(ring.rank, ring.size, causal, sq)):
            pending = ring.shift(*kv) if step + 1 < ring.size else None
            out_i, lse_i = backend.forward(q[:, rows], kv[0][:, keys], kv[1][:, keys], mask,
                                           softmax_scale)
            _merge(out[:, rows], lse[:, :, rows], out_i, lse_i)
            if pending is not None:
                kv = tuple(pending.wait())
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.softmax_scale, ctx.group = causal, softmax_scale, group
        ctx.backend = backend
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        ring, backend, scale = _Ring(ctx.group), ctx.backend, ctx.softmax_scale
        acc = torch.promote_types(q.dtype, torch.float32)
        dq = torch.zeros_like(q, dtype=acc)
        kv, dkv, to_next = (k, v), None, None
        for step, (rows, keys, mask) in enumerate(_steps(ring.rank, ring.size, ctx.causal,
                                                         q.shape[1])):
            pending = ring.shift(*kv) if step + 1 < ring.size else None
            dq_i, dk_i, dv_i = backend.backward(
                dout[:, rows], q[:, rows], kv[0][:, keys], kv[1][:, keys], out[:, rows],
                lse[:, :, rows], mask, scale)
            dq[:, rows] += dq_i
            # The gradient of the K/V held now: this rank's share added to the sum that the
            # ranks before it on the K/V's way have sent along (none yet at step 0).
            dkv = (torch.zeros_like(kv[0], dtype=acc), torch.zeros_like(kv[1], dtype=acc)) \
                if to_next is None else to_next.wait()
            dkv[0][:, keys] += dk_i
            dkv[1][:, keys] += dv_i
            to_next = ring.shift(*dkv)
            if pending is not None:
                kv = tuple(pending.wait())
        dk, dv = to_next.wait()  # after size shifts, this rank's own K/V's gradient is home
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


def ring_attention(q, k, v, *, causal=False, softmax_scale=None, group=None, backend=None,
                   return_lse=False):
    """softmax(q k^T * softmax_scale) v over a sequence sharded across the ranks of `group`
    (a torch.distributed process group; default: the world), each rank passing its shard:
    q [batch, local_seqlen, heads_q, head_dim], k [batch, local_seqlen_k, heads_kv, head_dim],
    v [batch, local_seqlen_k, heads_kv, head_dim_v] (heads_q a multiple of heads_kv), the same
    shapes on every rank. causal=True: the shards are in the zig-zag order (zigzag_shard) and
    query t sees keys up to t in the full sequence; else any order, every key seen.
    softmax_scale: default 1/sqrt(head_dim). backend: the per-step op, FagenBackend() by
    default (CUDA), ReferenceBackend() (plain torch, any device), or any object with their
    forward and backward. Differentiable in q, k, v (every rank must call backward).

    Returns this rank's out [batch, local_seqlen, heads_q, head_dim_v] in q's dtype, and with
    return_lse also the log-sum-exp (float32, float64 for float64 q; [batch, heads_q,
    local_seqlen]; not differentiable)."""
    size = dist.get_world_size(group)
    _check(q, k, v, causal, size)
    if backend is None and q.device.type != "cuda":
        raise ValueError(f"ring_attention: q is on {q.device}; the default backend (fagen's "
                         f"kernels) runs on CUDA tensors: pass backend=ReferenceBackend() for "
                         f"plain torch")
    scale = float(softmax_scale) if softmax_scale else 1.0 / math.sqrt(q.shape[3])
    out, lse = _RingAttention.apply(q, k, v, bool(causal), scale, group,
                                    backend if backend is not None else FagenBackend())
    return (out, lse) if return_lse else out
