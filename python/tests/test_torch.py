"""fagen's PyTorch ops without a GPU: the schema, shapes through the fake implementation (meta
tensors and FakeTensorMode), autograd wiring, torch.library.opcheck, torch.compile(fullgraph=True)
with no graph break, the error messages, and kernels on demand (the spec entry, the error
without a toolchain, and, given the fagen CLI and nvcc, a real build into the cache).

    python -m unittest discover -s python/tests      # PYTHONPATH=python, torch installed

ctest (runtime_python_torch) sets FAGEN_RT_LIB, FAGEN_CLI and FAGEN_TEST_WRITE_BUNDLE (the tool
that writes the runtime tests' bundles); without them the tests that need those are skipped and
the others still run.
"""
import contextlib
import io
import os
import subprocess
import tempfile
import unittest
from unittest import mock

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fagen
from fagen import bundle as fagen_bundle
from fagen import ondemand

BF16, FP16 = torch.bfloat16, torch.float16


def meta(*shape, dtype=BF16, grad=False):
    return torch.empty(shape, dtype=dtype, device="meta", requires_grad=grad)


def forward_args(q, k, v, **kw):
    """The positional arguments of fagen::attention_forward, dense defaults overridden by kw."""
    a = dict(alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None, block_mask=None,
             max_seqlen_q=0, max_seqlen_k=0, mask="none", mask_align="bottom_right",
             window_left=-1, window_right=-1, softcap=0.0, dropout_p=0.0, softmax_scale=0.0,
             block_size=0, deterministic=False, bundle=0)
    a.update(kw)
    return (q, k, v) + tuple(a.values())


class SchemaTest(unittest.TestCase):
    def test_forward_schema(self):
        schema = str(torch.ops.fagen.attention_forward.default._schema)
        self.assertTrue(schema.startswith(
            "fagen::attention_forward(Tensor q, Tensor k, Tensor v, Tensor? alibi_slopes, "
            "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? block_mask, "
            "SymInt max_seqlen_q, SymInt max_seqlen_k, str mask, str mask_align,"), schema)
        self.assertTrue(schema.endswith("-> (Tensor, Tensor, Tensor)"), schema)
        self.assertNotIn("!", schema)  # no input is mutated

    def test_backward_schema(self):
        schema = str(torch.ops.fagen.attention_backward.default._schema)
        self.assertTrue(schema.startswith(
            "fagen::attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, "
            "Tensor lse, Tensor rng_state,"), schema)
        self.assertNotIn("!", schema)


class FakeShapesTest(unittest.TestCase):
    def test_bshd_gqa(self):
        q, k, v = meta(2, 100, 8, 64), meta(2, 120, 2, 64), meta(2, 120, 2, 64)
        out, lse = fagen.attention(q, k, v, causal=True, return_lse=True)
        self.assertEqual((out.shape, out.dtype), ((2, 100, 8, 64), BF16))
        self.assertEqual((lse.shape, lse.dtype), ((2, 8, 100), torch.float32))

    def test_head_dim_v(self):
        q, k, v = meta(1, 7, 4, 192, dtype=FP16), meta(1, 9, 4, 192, dtype=FP16), \
            meta(1, 9, 4, 128, dtype=FP16)
        self.assertEqual(fagen.attention(q, k, v).shape, (1, 7, 4, 128))

    def test_varlen(self):
        q, k = meta(300, 8, 64), meta(500, 4, 64)
        cu = torch.empty(4, dtype=torch.int32, device="meta")
        out, lse = fagen.attention(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=150,
                                   max_seqlen_k=250, return_lse=True)
        self.assertEqual(out.shape, (300, 8, 64))
        self.assertEqual(lse.shape, (8, 300))

    def test_fake_tensor_mode(self):
        with FakeTensorMode():
            q = torch.empty(2, 33, 4, 128, dtype=FP16, device="cuda")
            out, lse, rng = torch.ops.fagen.attention_forward(*forward_args(
                q, q, q, mask="causal", dropout_p=0.1))
            self.assertEqual((out.shape, out.device.type), ((2, 33, 4, 128), "cuda"))
            self.assertEqual((lse.shape, lse.device.type), ((2, 4, 33), "cuda"))
            self.assertEqual((rng.shape, rng.dtype, rng.device.type), ((2,), torch.int64, "cpu"))

    def test_backward_shapes(self):
        q, k, v = (meta(2, 50, h, 64, grad=True) for h in (6, 3, 3))
        fagen.attention(q, k, v, causal=True, dropout_p=0.1).sum().backward()
        self.assertEqual((q.grad.shape, k.grad.shape, v.grad.shape),
                         ((2, 50, 6, 64), (2, 50, 3, 64), (2, 50, 3, 64)))

    def test_lse_is_not_differentiable(self):
        q = meta(1, 8, 2, 64, grad=True)
        out, lse = fagen.attention(q, q, q, return_lse=True)
        self.assertTrue(out.requires_grad)
        self.assertFalse(lse.requires_grad)

    def test_strided_head_dim_is_made_contiguous(self):
        q = torch.empty(1, 64, 64, 4, dtype=BF16, device="meta").transpose(2, 3)[..., :2, :]
        self.assertNotEqual(q.stride(-1), 1)
        self.assertEqual(fagen.attention(q, q, q).shape, (1, 64, 2, 64))


class MergeStatesTest(unittest.TestCase):
    def test_schema_and_fake_shapes(self):
        schema = str(torch.ops.fagen.merge_states.default._schema)
        self.assertEqual(schema, "fagen::merge_states(Tensor o_states, Tensor lse_states, "
                                 "SymInt bundle) -> (Tensor, Tensor)")
        o_states = meta(3, 2, 5, 8, 128)
        lse_states = torch.empty(3, 2, 8, 5, device="meta")
        out, lse = fagen.merge_states(o_states, lse_states)
        self.assertEqual((tuple(out.shape), out.dtype), ((2, 5, 8, 128), BF16))
        self.assertEqual((tuple(lse.shape), lse.dtype), ((2, 8, 5), torch.float32))

    def test_opcheck(self):
        args = (meta(2, 1, 3, 4, 64, dtype=FP16), torch.empty(2, 1, 4, 3, device="meta"), 0)
        result = torch.library.opcheck(torch.ops.fagen.merge_states.default, args)
        self.assertEqual(set(result.values()), {"SUCCESS"}, result)

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"lse_states has shape \(3, 2, 5, 8\), expected "
                                                r"\(3, 2, 8, 5\)"):
            fagen.merge_states(meta(3, 2, 5, 8, 64), torch.empty(3, 2, 5, 8, device="meta"))
        with self.assertRaisesRegex(TypeError, "float16 or bfloat16 and lse_states float32"):
            fagen.merge_states(meta(1, 1, 1, 1, 64, dtype=torch.float32),
                               torch.empty(1, 1, 1, 1, device="meta"))


class DecodePagedTest(unittest.TestCase):
    def paged_args(self, batch=3, tokens=2, pages=40, page=16, heads=(8, 2), d=128):
        return (meta(batch, tokens, heads[0], d), meta(pages, page, heads[1], d),
                meta(pages, page, heads[1], d),
                torch.empty(batch, 6, dtype=torch.int32, device="meta"),
                torch.empty(batch, dtype=torch.int32, device="meta"))

    def test_schema_and_fake_shapes(self):
        schema = str(torch.ops.fagen.decode_paged.default._schema)
        self.assertEqual(schema, "fagen::decode_paged(Tensor q, Tensor k_cache, Tensor v_cache, "
                                 "Tensor block_table, Tensor seqused_k, SymInt max_seqlen_k, "
                                 "str mask, str mask_align, SymInt window_left, "
                                 "SymInt window_right, float softcap, float softmax_scale, "
                                 "SymInt bundle) -> (Tensor, Tensor)")
        out, lse = fagen.decode_paged(*self.paged_args(), max_seqlen_k=90, causal=True,
                                      return_lse=True)
        self.assertEqual((tuple(out.shape), out.dtype), ((3, 2, 8, 128), BF16))
        self.assertEqual((tuple(lse.shape), lse.dtype), ((3, 8, 2), torch.float32))

    def test_opcheck(self):
        args = self.paged_args() + (90, "causal", "bottom_right", -1, -1, 0.0, 0.0, 0)
        result = torch.library.opcheck(torch.ops.fagen.decode_paged.default, args)
        self.assertEqual(set(result.values()), {"SUCCESS"}, result)

    def test_errors(self):
        q, k, v, table, used = self.paged_args()
        with self.assertRaisesRegex(TypeError, "block_table and seqused_k must be int32"):
            fagen.decode_paged(q, k, v, table.long(), used, max_seqlen_k=90)
        with self.assertRaisesRegex(ValueError, r"seqused_k \[batch\] for batch 3"):
            fagen.decode_paged(q, k, v, table, used[:2], max_seqlen_k=90)


class DecodePagedAppendTest(unittest.TestCase):
    """fagen.decode_paged(..., k_new=, v_new=): the new tokens' keys and values written into the
    caches (in place) before the decode."""

    def args(self, batch=3, tokens=2, heads=(8, 2), d=128):
        q, k, v, table, used = DecodePagedTest().paged_args(batch, tokens, heads=heads, d=d)
        return q, k, v, meta(batch, tokens, heads[1], d), meta(batch, tokens, heads[1], d), \
            table, used

    def test_schema_mutates_the_caches(self):
        schema = str(torch.ops.fagen.decode_paged_append.default._schema)
        self.assertEqual(schema, "fagen::decode_paged_append(Tensor q, Tensor(a1!) k_cache, "
                                 "Tensor(a2!) v_cache, Tensor k_new, Tensor v_new, "
                                 "Tensor block_table, Tensor seqused_k, SymInt max_seqlen_k, "
                                 "str mask, str mask_align, SymInt window_left, "
                                 "SymInt window_right, float softcap, float softmax_scale, "
                                 "SymInt bundle) -> (Tensor, Tensor)")
        q, k, v, k_new, v_new, table, used = self.args()
        out, lse = fagen.decode_paged(q, k, v, table, used, max_seqlen_k=90, causal=True,
                                      k_new=k_new, v_new=v_new, return_lse=True)
        self.assertEqual((tuple(out.shape), out.dtype), ((3, 2, 8, 128), BF16))
        self.assertEqual((tuple(lse.shape), lse.dtype), ((3, 8, 2), torch.float32))

    def test_opcheck(self):
        args = self.args() + (90, "causal", "bottom_right", -1, -1, 0.0, 0.0, 0)
        result = torch.library.opcheck(torch.ops.fagen.decode_paged_append.default, args)
        self.assertEqual(set(result.values()), {"SUCCESS"}, result)

    def test_errors(self):
        q, k, v, k_new, v_new, table, used = self.args()
        with self.assertRaisesRegex(ValueError, "pass k_new and v_new together"):
            fagen.decode_paged(q, k, v, table, used, max_seqlen_k=90, k_new=k_new)
        with self.assertRaisesRegex(ValueError, r"k_new must be \[batch, tokens, heads_kv, "
                                                r"head_dim\] = \(3, 2, 2, 128\)"):
            fagen.decode_paged(q, k, v, table, used, max_seqlen_k=90, k_new=k_new[:, :1],
                               v_new=v_new)
        with self.assertRaisesRegex(ValueError, "v_new must be"):
            fagen.decode_paged(q, k, v, table, used, max_seqlen_k=90, k_new=k_new,
                               v_new=v_new.to(FP16))
        strided = meta(40, 16, 128, 2).transpose(2, 3)  # written in place: no copy may stand in
        with self.assertRaisesRegex(ValueError, "head dim must be contiguous"):
            fagen.decode_paged(q, strided, v, table, used, max_seqlen_k=90, k_new=k_new,
                               v_new=v_new)


class PrefillPagedTest(unittest.TestCase):
    """fagen.prefill_paged: chunked prefill (packed new tokens) over a paged KV cache."""

    def paged_args(self, total=70, batch=3, pages=40, page=16, heads=(8, 2), d=128):
        return (meta(total, heads[0], d), meta(pages, page, heads[1], d),
                meta(pages, page, heads[1], d),
                torch.empty(batch, 6, dtype=torch.int32, device="meta"),
                torch.empty(batch, dtype=torch.int32, device="meta"),
                torch.empty(batch + 1, dtype=torch.int32, device="meta"))

    def call(self, q, k, v, table, used, cu, **kw):
        kw = dict(dict(cu_seqlens_q=cu, max_seqlen_q=40, max_seqlen_k=90, causal=True), **kw)
        return fagen.prefill_paged(q, k, v, table, used, **kw)

    def test_schema_and_fake_shapes(self):
        schema = str(torch.ops.fagen.prefill_paged.default._schema)
        self.assertEqual(schema, "fagen::prefill_paged(Tensor q, Tensor k_cache, Tensor v_cache, "
                                 "Tensor block_table, Tensor seqused_k, Tensor cu_seqlens_q, "
                                 "SymInt max_seqlen_q, SymInt max_seqlen_k, str mask, "
                                 "str mask_align, float softmax_scale, SymInt bundle) -> "
                                 "(Tensor, Tensor)")
        out, lse = self.call(*self.paged_args(), return_lse=True)
        self.assertEqual((tuple(out.shape), out.dtype), ((70, 8, 128), BF16))
        self.assertEqual((tuple(lse.shape), lse.dtype), ((8, 70), torch.float32))
        q, k, v, table, used, cu = self.paged_args()
        out = self.call(q, k, v[..., :64], table, used, cu)  # head_dim_v 64
        self.assertEqual(tuple(out.shape), (70, 8, 64))

    def test_fake_tensor_mode(self):
        with FakeTensorMode():
            q, k = torch.empty(33, 4, 64, dtype=FP16), torch.empty(9, 32, 1, 64, dtype=FP16)
            table = torch.empty(2, 4, dtype=torch.int32)
            used, cu = torch.empty(2, dtype=torch.int32), torch.empty(3, dtype=torch.int32)
            out = fagen.prefill_paged(q, k, k, table, used, cu_seqlens_q=cu, max_seqlen_q=20,
                                      max_seqlen_k=128)
            self.assertEqual((tuple(out.shape), out.dtype), ((33, 4, 64), FP16))

    def test_opcheck(self):
        args = self.paged_args() + (40, 90, "causal", "bottom_right", 0.0, 0)
        result = torch.library.opcheck(torch.ops.fagen.prefill_paged.default, args)
        self.assertEqual(set(result.values()), {"SUCCESS"}, result)

    def test_errors(self):
        q, k, v, table, used, cu = self.paged_args()
        with self.assertRaisesRegex(ValueError, r"q must be \[total_q, heads_q, head_dim\]"):
            self.call(q.unsqueeze(0), k, v, table, used, cu)
        with self.assertRaisesRegex(TypeError, "cu_seqlens_q must be int32"):
            self.call(q, k, v, table, used, cu.long())
        with self.assertRaisesRegex(TypeError, "float16 or bfloat16 alike"):
            self.call(q, k.half(), v, table, used, cu)
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_q must be \[batch \+ 1\]"):
            self.call(q, k, v, table, used, cu[:3])
        with self.assertRaisesRegex(ValueError, "mask_align must be one of"):
            self.call(q, k, v, table, used, cu, mask_align="left")
        with self.assertRaisesRegex(TypeError, "cu_seqlens_q"):
            fagen.prefill_paged(q, k, v, table, used, max_seqlen_q=40, max_seqlen_k=90)


class OpcheckTest(unittest.TestCase):
    """torch.library.opcheck on meta tensors: schema, autograd registration, fake tensors and
    AOT dispatch (the real kernels need a GPU: tests/gpu/python_check.py)."""

    def check(self, args):
        result = torch.library.opcheck(torch.ops.fagen.attention_forward.default, args)
        self.assertEqual(set(result.values()), {"SUCCESS"}, result)

    def test_dense_causal_dropout(self):
        q, k = meta(2, 100, 8, 64, grad=True), meta(2, 120, 2, 64, grad=True)
        self.check(forward_args(q, k, k.detach().clone().requires_grad_(), mask="causal",
                                dropout_p=0.25))

    def test_window_softcap(self):
        q = meta(1, 64, 4, 128, dtype=FP16, grad=True)
        self.check(forward_args(q, q, q, mask="window", window_left=16, window_right=0,
                                softcap=30.0))

    def test_varlen_alibi(self):
        q = meta(300, 8, 64, grad=True)
        cu = torch.empty(3, dtype=torch.int32, device="meta")
        slopes = torch.empty(8, dtype=torch.float32, device="meta")
        self.check(forward_args(q, q, q, alibi_slopes=slopes, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                max_seqlen_q=200, max_seqlen_k=200, mask="causal"))

    def test_block_mask(self):
        q = meta(2, 256, 4, 64, grad=True)
        bm = torch.empty(2, 4, 2, 2, dtype=torch.uint8, device="meta")
        self.check(forward_args(q, q, q, block_mask=bm, block_size=128))

    def test_strided_inputs(self):
        qkv = meta(2, 40, 3, 4, 64, grad=True)  # q, k, v as views of one projection
        q, k, v = qkv.unbind(2)
        self.assertFalse(q.is_contiguous())
        self.check(forward_args(q, k, v, mask="causal"))
        out = fagen.attention(q, k, v, causal=True)
        self.assertTrue(out.is_contiguous())
        out.sum().backward()
        self.assertEqual(qkv.grad.shape, qkv.shape)

    def test_backward_op(self):
        q, k = meta(2, 30, 4, 64), meta(2, 40, 2, 64)
        lse = torch.empty(2, 4, 30, device="meta")
        rng = torch.zeros(2, dtype=torch.int64)
        args = (q, q, k, k, q, lse, rng) + forward_args(q, k, k)[3:]
        result = torch.library.opcheck(torch.ops.fagen.attention_backward.default, args)
        self.assertEqual(set(result.values()), {"SUCCESS"}, result)


class CompileTest(unittest.TestCase):
    def test_fullgraph_no_graph_break(self):
        def loss(q, k, v):
            return fagen.attention(q, k, v, causal=True, dropout_p=0.1).float().square().sum()

        q, k, v = (meta(2, 64, h, 64, grad=True) for h in (4, 2, 2))
        explained = torch._dynamo.explain(loss)(q, k, v)
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0))
        torch._dynamo.reset()
        compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
        compiled(q, k, v).backward()
        self.assertEqual(q.grad.shape, q.shape)
        self.assertEqual(k.grad.shape, k.shape)

    def test_graph_holds_both_ops(self):
        seen = []

        def backend(gm, inputs):
            from functorch.compile import make_boxed_func
            from torch._functorch.aot_autograd import aot_module_simplified

            def keep(g, _):
                seen.extend(str(n.target) for n in g.graph.nodes if n.op == "call_function")
                return make_boxed_func(g)
            return aot_module_simplified(gm, inputs, fw_compiler=keep, bw_compiler=keep)

        q = meta(1, 32, 2, 64, grad=True)
        torch._dynamo.reset()
        torch.compile(lambda q: fagen.attention(q, q, q).sum(), backend=backend,
                      fullgraph=True)(q).backward()
        self.assertIn("fagen.attention_forward.default", seen)
        self.assertIn("fagen.attention_backward.default", seen)


class ErrorTest(unittest.TestCase):
    def expect(self, exc, parts, fn):
        with self.assertRaises(exc) as caught:
            fn()
        for part in parts:
            self.assertIn(part, str(caught.exception))

    def test_cpu_tensors(self):
        q = torch.zeros(1, 8, 2, 64, dtype=BF16)
        self.expect(ValueError, ["q is on cpu", "CUDA tensors"], lambda: fagen.attention(q, q, q))

    def test_dtype(self):
        q = meta(1, 8, 2, 64, dtype=torch.float32)
        self.expect(TypeError, ["q.dtype is torch.float32", "float16 or bfloat16"],
                    lambda: fagen.attention(q, q, q))
        k = meta(1, 8, 2, 64, dtype=FP16)
        self.expect(TypeError, ["k.dtype is torch.float16 but q.dtype is torch.bfloat16"],
                    lambda: fagen.attention(meta(1, 8, 2, 64), k, k))

    def test_layout_and_heads(self):
        self.expect(ValueError, ["q must be [batch, seqlen, heads, head_dim]", "(8, 2, 64)"],
                    lambda: fagen.attention(meta(8, 2, 64), meta(1, 8, 2, 64),
                                            meta(1, 8, 2, 64)))
        k = meta(1, 8, 3, 64)
        self.expect(ValueError, ["heads_q (8) is not a multiple of heads_kv (3)"],
                    lambda: fagen.attention(meta(1, 8, 8, 64), k, k))

    def test_varlen_needs_lengths(self):
        q, cu = meta(10, 2, 64), torch.empty(3, dtype=torch.int32, device="meta")
        self.expect(ValueError, ["needs cu_seqlens_k, max_seqlen_q and max_seqlen_k"],
                    lambda: fagen.attention(q, q, q, cu_seqlens_q=cu))

    def test_variant_arguments(self):
        q = meta(1, 300, 2, 64)
        slopes = torch.empty(2, device="meta")
        self.expect(ValueError, ["softcap and alibi_slopes are both score mods"],
                    lambda: fagen.attention(q, q, q, softcap=30.0, alibi_slopes=slopes))
        self.expect(ValueError, ["dropout_p is 1.0"], lambda: fagen.attention(q, q, q,
                                                                              dropout_p=1.0))
        self.expect(ValueError, ["mask_align is 'left'"],
                    lambda: fagen.attention(q, q, q, causal=True, mask_align="left"))
        bm = torch.empty(1, 2, 2, 2, dtype=torch.uint8, device="meta")
        self.expect(ValueError, ["fits block sizes [192, 256]", "pass block_size"],
                    lambda: fagen.attention(q, q, q, block_mask=bm))
        self.expect(ValueError, ["does not cover seqlen 300 x 300 in blocks of 64"],
                    lambda: fagen.attention(q, q, q, block_mask=bm, block_size=64))


class SpecEntryTest(unittest.TestCase):
    """The spec entry a call needs (docs/spec.md's keys), and the error naming it."""

    def entry(self, q, k, v, pass_="fwd", deterministic=False, **variant):
        problem = fagen.runtime.Bundle._problem(q, k, v, **variant)
        return fagen_bundle.describe(problem, pass_, deterministic)

    def test_dense_causal(self):
        q = meta(2, 100, 8, 128)
        v, why = self.entry(q, q, q, causal=True)
        self.assertEqual(ondemand.spec_entry(v), "- name: bf16_hd128_causal\n  dtype: bf16\n"
                         "  head_dim: 128\n  mask: causal\n  passes: [fwd]\n")
        self.assertEqual(why, "a bf16 forward with head_dim 128, causal")

    def test_every_feature(self):
        q, k, v = meta(300, 8, 192, dtype=FP16), meta(400, 2, 192, dtype=FP16), \
            meta(400, 2, 128, dtype=FP16)
        cu = torch.empty(3, dtype=torch.int32, device="meta")
        described, why = self.entry(q, k, v, "bwd", True, mask="window", window=(64, 0),
                                    mask_align="top_left", softcap=20.0, dropout_p=0.1,
                                    cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=200,
                                    max_seqlen_k=200, block_sparse=("runtime", 64))
        self.assertEqual(ondemand.spec_entry(described), """\
- name: fp16_hd192x128_windowtl_softcap_drop_bsr64_varlen_det
  dtype: fp16
  head_dim_qk: 192
  head_dim_v: 128
  mask: window
  mask_align: top_left
  score_mod: softcap
  dropout: true
  varlen: true
  block_sparse: {block: 64, layout: runtime}
  passes: [bwd]
  deterministic: true
""")
        self.assertEqual(why, "a fp16 backward with head_dim 192/128, window top_left, softcap, "
                              "dropout, varlen, block mask 64, deterministic")

    def test_no_toolchain_names_the_entry(self):
        q = meta(1, 64, 4, 96)
        with mock.patch.object(ondemand, "find_cli", return_value=None), \
                mock.patch.object(fagen_bundle, "_bundles", {}):
            with self.assertRaises(fagen.KernelNotBuilt) as caught:
                fagen_bundle.plan("fwd", 0, 0, lambda: (9, 0), q, q, q, causal=True)
        text = str(caught.exception)
        for part in ("no loaded bundle serves a bf16 forward with head_dim 96, causal",
                     "the fagen CLI is not here", "fagen build SPEC --arch sm_90a -o attn.fab",
                     "- name: bf16_hd96_causal\n  dtype: bf16\n  head_dim: 96\n"):
            self.assertIn(part, text)
        self.assertIn("head_dim: 96", caught.exception.entry)

    def test_archs(self):
        self.assertEqual([ondemand.arch_for(c) for c in ((8, 0), (8, 9), (9, 0), (10, 0))],
                         ["sm_80", "sm_80", "sm_90a", "sm_100a"])
        with self.assertRaises(fagen.KernelNotBuilt):
            ondemand.arch_for((7, 5))

    def test_cache_dir(self):
        with mock.patch.dict(os.environ, {"FAGEN_CACHE_DIR": "/x/c", "XDG_CACHE_HOME": "/y"}):
            self.assertEqual(ondemand.cache_dir(), "/x/c")
        with mock.patch.dict(os.environ, {"FAGEN_CACHE_DIR": "", "XDG_CACHE_HOME": "/y"}):
            self.assertEqual(ondemand.cache_dir(), "/y/fagen")


class TrainGptExampleTest(unittest.TestCase):
    """examples/train_gpt.py's model with fagen attention, on meta tensors: forward, backward and
    torch.compile(fullgraph=True); its synthetic data follows the Markov table."""

    @classmethod
    def setUpClass(cls):
        import importlib.util
        path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_gpt.py")
        spec = importlib.util.spec_from_file_location("train_gpt", path)
        cls.gpt = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.gpt)

    def test_model_on_meta(self):
        model = self.gpt.GPT(32, 64, 128, 2, 2, "fagen").to(device="meta", dtype=BF16)
        idx = torch.zeros(3, 64, dtype=torch.long, device="meta")
        logits = model(idx)
        self.assertEqual(logits.shape, (3, 64, 32))
        logits.float().sum().backward()
        self.assertEqual(model.blocks[0].attn.qkv.weight.grad.shape, (384, 128))
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(idx)
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0))

    def test_markov_data(self):
        data = self.gpt.markov_batches(2, 3, 40, 16, 0, "cpu")
        self.assertEqual(data.shape, (2, 3, 41))
        g = torch.Generator().manual_seed(0)
        table = torch.randint(0, 16, (16, 16, 4), generator=g)
        for s in data.view(-1, 41):
            for t in range(2, 41):
                self.assertIn(int(s[t]), table[s[t - 2], s[t - 1]].tolist())


def needs(*names):
    missing = [n for n in names if not os.environ.get(n)]
    return unittest.skipIf(missing, f"set {', '.join(missing)} (ctest does)")


@needs("FAGEN_RT_LIB", "FAGEN_TEST_WRITE_BUNDLE")
class LoadedBundleTest(unittest.TestCase):
    """Bundles the runtime tests write (tests/common/TestBundles.h): the pool, a named bundle,
    and the error that names the spec entry for it."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        subprocess.run([os.environ["FAGEN_TEST_WRITE_BUNDLE"], cls.dir], check=True)

    def test_pool_and_named_bundle(self):
        b = fagen.Bundle(os.path.join(self.dir, "test.fab"))
        self.assertIn(b, fagen.loaded())
        self.assertEqual(len(b.kernel_names), 4)
        self.assertIn("test.fab", repr(b))
        q = meta(2, 1000, 16, 96, dtype=FP16)
        with self.assertRaises(fagen.KernelNotBuilt) as caught:
            fagen_bundle.plan("fwd", b.id, 0, lambda: (9, 0), q, q, q, causal=True)
        text = str(caught.exception)
        self.assertIn(f"{b.path} has no kernel for a fp16 forward with head_dim 96, causal", text)
        self.assertIn("add a variant with dtype fp16, head_dim 96", text)  # the runtime's reason
        self.assertIn("Add this variant to its spec and rebuild it", text)
        self.assertIn("- name: fp16_hd96_causal", text)


@needs("FAGEN_RT_LIB", "FAGEN_CLI")
class OnDemandBuildTest(unittest.TestCase):
    """A call no bundle serves builds its kernel with the fagen CLI and nvcc (no GPU needed to
    compile) into $FAGEN_CACHE_DIR, says so once, and a second call finds it in the cache."""

    def test_build_once(self):
        if ondemand.find_nvcc() is None:
            self.skipTest("nvcc not found")
        q = meta(1, 64, 2, 64, dtype=FP16)
        with tempfile.TemporaryDirectory() as cache, \
                mock.patch.dict(os.environ, {"FAGEN_CACHE_DIR": cache}), \
                mock.patch.object(fagen_bundle, "_bundles", {}), \
                mock.patch.object(fagen_bundle, "_plans", {}):
            said = io.StringIO()
            with contextlib.redirect_stderr(said):
                with self.assertRaises(fagen.FagenError) as caught:
                    fagen_bundle.plan("fwd", 0, 0, lambda: (8, 0), q, q, q)
            # Built and loaded; planning it then needs the driver this machine lacks.
            self.assertEqual(caught.exception.status_name, "FAGEN_ERROR_NO_DRIVER")
            built = [f for f in os.listdir(os.path.join(cache, "bundles")) if f.endswith(".fab")]
            self.assertEqual(len(built), 1, os.listdir(os.path.join(cache, "bundles")))
            self.assertIn("fagen: compiling the kernels for a fp16 forward with head_dim 64, none",
                          said.getvalue())
            [loaded] = fagen.loaded()
            self.assertTrue(loaded.kernel_names[0].startswith("fagen_fwd_fp16_hd64_none_sm80"),
                            loaded.kernel_names)
            path = os.path.join(cache, "bundles", built[0])
            mtime = os.stat(path).st_mtime_ns
            said = io.StringIO()
            with contextlib.redirect_stderr(said), mock.patch.object(fagen_bundle, "_bundles", {}):
                with self.assertRaises(fagen.FagenError):
                    fagen_bundle.plan("fwd", 0, 0, lambda: (8, 0), q, q, q)
            self.assertEqual(said.getvalue(), "")  # from the cache: no compile, nothing said
            self.assertEqual(os.stat(path).st_mtime_ns, mtime)


if __name__ == "__main__":
    unittest.main()
