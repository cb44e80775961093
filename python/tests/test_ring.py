"""fagen.ring on CPUs: ring attention over 2 and 4 processes (torch.multiprocessing + gloo) with
the reference backend in float64, against full attention with autograd (SDPA's math on one
process): the forward output and LSE, dq, dk, dv, causal (zig-zag shards) and not (contiguous
shards), GQA, odd sizes, a subgroup of the world; and, in this process, the zig-zag order, the
causal schedule (every visible query-key pair computed exactly once), the merge, the reference
backend and the error messages.

    PYTHONPATH=python python -m unittest discover -v -s python/tests -p 'test_ring*'
"""
import datetime
import math
import os
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from fagen import ring

F64 = torch.float64

# (batch, local q tokens, local k tokens, heads_q, heads_kv, head_dim, causal, softmax_scale):
# causal shards are two chunks of local/2 tokens; non-causal q and k shards may differ in length.
CASES = [
    (1, 6, 6, 4, 2, 8, True, None),
    (2, 10, 10, 2, 2, 16, True, 0.3),
    (1, 14, 14, 2, 1, 12, True, None),
    (1, 5, 7, 4, 2, 8, False, None),
    (2, 3, 4, 2, 1, 16, False, 0.5),
]


def full_attention(q, k, v, causal, scale):
    """out [b, s, h, d] and lse [b, h, s] of the whole sequence: SDPA's math, autograd."""
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale,
                                         enable_gqa=True)
    s = qt @ kt.repeat_interleave(q.shape[2] // k.shape[2], dim=1).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), -math.inf)
    return out.transpose(1, 2), torch.logsumexp(s, dim=-1)


def shard(x, rank, world, causal, dim=1):
    return ring.zigzag_shard(x, rank, world, dim) if causal else x.chunk(world, dim)[rank]


def check_case(case, rank, world, group=None, seed=0):
    """Runs one case on this rank and compares its shard with full attention."""
    b, lq, lk, hq, hkv, d, causal, softmax_scale = case
    gen = torch.Generator().manual_seed(seed)
    q, dout = (torch.randn(b, lq * world, hq, d, dtype=F64, generator=gen) for _ in range(2))
    k, v = (torch.randn(b, lk * world, hkv, d, dtype=F64, generator=gen) for _ in range(2))
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    scale = softmax_scale or 1 / math.sqrt(d)
    out_ref, lse_ref = full_attention(*full, causal, scale)
    (out_ref * dout).sum().backward()

    local = [shard(t, rank, world, causal).requires_grad_() for t in (q, k, v)]
    out, lse = ring.ring_attention(*local, causal=causal, softmax_scale=softmax_scale,
                                   group=group, backend=ring.ReferenceBackend(), return_lse=True)
    (out * shard(dout, rank, world, causal)).sum().backward()
    what = f"case {case}, rank {rank} of {world}"
    torch.testing.assert_close(out, shard(out_ref.detach(), rank, world, causal), msg=what)
    torch.testing.assert_close(lse, shard(lse_ref, rank, world, causal, dim=2), msg=what)
    for name, mine, ref in zip("qkv", local, full):
        torch.testing.assert_close(mine.grad, shard(ref.grad, rank, world, causal),
                                   msg=f"d{name}: {what}")
    if causal:
        torch.testing.assert_close(ring.zigzag_gather(out.detach(), group), out_ref.detach())


def check_errors(rank):
    """Errors raised before any communication, alike on every rank."""
    x = torch.zeros(1, 6, 4, 8, dtype=F64)
    ref = ring.ReferenceBackend()
    cases = [
        ((x[:, :5], x[:, :5], x[:, :5]), dict(causal=True, backend=ref), "same even local_seqlen"),
        ((x, x[:, :, :3], x[:, :, :3]), dict(backend=ref), "not a multiple of heads_kv"),
        ((x, x[0], x), dict(backend=ref), "must be [batch, local_seqlen"),
        ((x, x.float(), x), dict(backend=ref), "pass q, k, v alike"),
        ((x, x, x), dict(), "pass backend=ReferenceBackend()"),
    ]
    for args, kw, message in cases:
        try:
            ring.ring_attention(*args, **kw)
        except (ValueError, TypeError) as e:
            assert message in str(e), f"rank {rank}: {e!r} lacks {message!r}"
        else:
            raise AssertionError(f"rank {rank}: no error for {message!r}")


def worker(rank, world, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        for i, case in enumerate(CASES):
            check_case(case, rank, world, seed=i)
        if world == 2:
            check_errors(rank)
        if world == 4:  # two rings of two on subgroups whose ranks are not the global ones
            groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
            mine = groups[rank % 2]
            check_case(CASES[0], dist.get_rank(mine), 2, group=mine, seed=10 + rank % 2)
            check_case(CASES[3], dist.get_rank(mine), 2, group=mine, seed=20 + rank % 2)
        dist.barrier()
    finally:
        dist.destroy_process_group()


class RingProcessesTest(unittest.TestCase):
    def spawn(self, world):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(world, os.path.join(tmp, "rendezvous")), nprocs=world)

    def test_two_ranks(self):
        self.spawn(2)

    def test_four_ranks(self):
        self.spawn(4)


class ZigzagTest(unittest.TestCase):
    def test_round_trip(self):
        for world in (1, 2, 3, 4):
            x = torch.arange(2 * world * 3 * 2).view(2, 2 * world * 3)
            shards = [ring.zigzag_shard(x, r, world) for r in range(world)]
            self.assertTrue(torch.equal(ring.zigzag_unshard(shards), x))

    def test_order(self):
        x = torch.arange(8)  # world 2: chunks of 2 tokens, rank 0 holds chunks 0 and 3
        self.assertEqual(ring.zigzag_shard(x, 0, 2, dim=0).tolist(), [0, 1, 6, 7])
        self.assertEqual(ring.zigzag_shard(x, 1, 2, dim=0).tolist(), [2, 3, 4, 5])

    def test_errors(self):
        x = torch.zeros(1, 10)
        with self.assertRaisesRegex(ValueError, "not divisible by 2 x world_size = 4"):
            ring.zigzag_shard(x, 0, 2)
        with self.assertRaisesRegex(ValueError, r"rank 2 is not in \[0, 2\)"):
            ring.zigzag_shard(x, 2, 2)
        with self.assertRaisesRegex(ValueError, "shard 1 has shape"):
            ring.zigzag_unshard([torch.zeros(1, 4), torch.zeros(1, 6)])
        with self.assertRaisesRegex(ValueError, "odd length 3"):
            ring.zigzag_unshard([torch.zeros(1, 3)])


class ScheduleTest(unittest.TestCase):
    def test_causal_pairs_once(self):
        """Over the ring's steps, every rank computes each (query, key) pair of the causal mask
        among its queries exactly once, and no other pair."""
        for world in (1, 2, 3, 4):
            c = 2  # tokens a chunk
            pos = [ring.zigzag_shard(torch.arange(2 * world * c), r, world, dim=0)
                   for r in range(world)]
            for rank in range(world):
                seen = torch.zeros(2 * world * c, 2 * world * c, dtype=torch.int64)
                for step, (rows, keys, causal) in enumerate(ring._steps(rank, world, True, 2 * c)):
                    qp, kp = pos[rank][rows], pos[(rank - step) % world][keys]
                    visible = torch.ones(len(qp), len(kp), dtype=torch.bool)
                    if causal:
                        visible = kp.unsqueeze(0) <= qp.unsqueeze(1)
                    self.assertTrue(causal or bool((kp.unsqueeze(0) <= qp.unsqueeze(1)).all()))
                    seen[qp.unsqueeze(1), kp.unsqueeze(0)] += visible.long()
                want = torch.zeros_like(seen)
                want[pos[rank]] = torch.ones(2 * world * c, 2 * world * c).tril().long()[pos[rank]]
                self.assertTrue(torch.equal(seen, want), f"world {world}, rank {rank}")


class ReferenceBackendTest(unittest.TestCase):
    def test_against_autograd(self):
        gen = torch.Generator().manual_seed(1)
        for sq, sk, causal in ((5, 5, True), (3, 7, True), (6, 4, False)):
            q = torch.randn(2, sq, 4, 8, dtype=F64, generator=gen, requires_grad=True)
            k, v = (torch.randn(2, sk, 2, 8, dtype=F64, generator=gen, requires_grad=True)
                    for _ in range(2))
            dout = torch.randn(2, sq, 4, 8, dtype=F64, generator=gen)
            s = torch.einsum("bqhd,bkhd->bhqk", q, k.repeat_interleave(2, dim=2)) * 0.4
            if causal:  # bottom-right: query i sees keys j <= i + sk - sq
                s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq).logical_not(),
                                  -math.inf)
            out_ref = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v.repeat_interleave(2, 2))
            grads = torch.autograd.grad((out_ref * dout).sum(), (q, k, v))
            backend = ring.ReferenceBackend()
            with torch.no_grad():
                out, lse = backend.forward(q, k, v, causal, 0.4)
                mine = backend.backward(dout, q, k, v, out, lse, causal, 0.4)
            torch.testing.assert_close(out, out_ref.detach())
            torch.testing.assert_close(lse, torch.logsumexp(s, -1).detach())
            for a, b in zip(mine, grads):
                torch.testing.assert_close(a, b)


class FagenBackendTest(unittest.TestCase):
    def test_calls_on_meta_tensors(self):
        """The fagen backend's calls fit the ops' schemas and shapes (fake implementations on
        meta tensors; no kernel runs): a zig-zag half step, sliced as the ring slices."""
        q, dout = (torch.empty(2, 12, 4, 64, dtype=torch.bfloat16, device="meta")
                   for _ in range(2))
        k, v = (torch.empty(2, 12, 2, 64, dtype=torch.bfloat16, device="meta") for _ in range(2))
        backend = ring.FagenBackend(deterministic=True)
        out, lse = backend.forward(q[:, 6:], k, v, False, 0.125)
        self.assertEqual((out.shape, lse.shape, lse.dtype),
                         ((2, 6, 4, 64), (2, 4, 6), torch.float32))
        lse_full = torch.empty(2, 4, 12, dtype=torch.float32, device="meta")
        dq, dk, dv = backend.backward(dout[:, 6:], q[:, 6:], k, v, out, lse_full[:, :, 6:], False,
                                      0.125)
        self.assertEqual((dq.shape, dk.shape, dv.shape), ((2, 6, 4, 64), (2, 12, 2, 64),
                                                          (2, 12, 2, 64)))


class MergeTest(unittest.TestCase):
    def test_exact_and_empty_rows(self):
        gen = torch.Generator().manual_seed(2)
        s = torch.randn(1, 2, 3, 7, dtype=F64, generator=gen)     # [b, h, q, k]
        v = torch.randn(1, 7, 2, 4, dtype=F64, generator=gen)     # [b, k, h, d]
        s[:, :, 0, :3] = -math.inf                                # row 0 sees no key of part 1

        def part(keys):
            lse = torch.logsumexp(s[..., keys], -1)
            p = torch.exp(s[..., keys] - lse.unsqueeze(-1)).nan_to_num(0.0)
            return torch.einsum("bhqk,bkhd->bqhd", p, v[:, keys]), lse

        out = torch.zeros(1, 3, 2, 4, dtype=F64)
        lse = torch.full((1, 2, 3), -math.inf, dtype=F64)
        for keys in (slice(0, 3), slice(3, 7)):
            ring._merge(out, lse, *part(keys))
        torch.testing.assert_close(out, part(slice(None))[0])
        torch.testing.assert_close(lse, torch.logsumexp(s, -1))


if __name__ == "__main__":
    unittest.main()
