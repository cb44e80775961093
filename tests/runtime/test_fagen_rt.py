"""Tests python/fagen/runtime.py (the ctypes binding, imported here as fagen_rt) without a GPU or
torch: against no driver, and against the fake libcuda.

The driver is opened once per process, so each situation runs in a child process:
    test_fagen_rt.py --lib LIB --fake-cuda FAKE --write-bundle TOOL --work-dir DIR
"""
import argparse
import os
import subprocess
import sys
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from fagen import runtime  # noqa: E402

sys.modules["fagen_rt"] = runtime  # the name the binding had under bench/


class FakeTensor:
    """What fagen_rt reads from a torch tensor: shape, stride(), dim(), dtype, data_ptr()."""

    def __init__(self, shape, dtype="torch.float16", ptr=0x10000, strides=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self._ptr = ptr
        if strides is None:
            strides, acc = [], 1
            for n in reversed(shape):
                strides.insert(0, acc)
                acc *= n
        self._strides = tuple(strides)

    def stride(self):
        return self._strides

    def dim(self):
        return len(self.shape)

    def data_ptr(self):
        return self._ptr

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return {"torch.float16": 2, "torch.bfloat16": 2, "torch.uint8": 1}.get(self.dtype, 4)


def expect_error(fn, status_name, *parts):
    import fagen_rt
    try:
        fn()
    except fagen_rt.FagenError as e:
        assert e.status_name == status_name, f"{e.status_name} != {status_name}: {e}"
        for part in parts:
            assert part in str(e), f"{part!r} not in {str(e)!r}"
        return
    raise AssertionError(f"expected FagenError {status_name}")


def child(mode, bundle_dir):
    import fagen_rt
    assert fagen_rt.version()
    expect_error(lambda: fagen_rt.Bundle("/nonexistent.fab"), "FAGEN_ERROR_IO", "/nonexistent.fab")
    bundle = fagen_rt.Bundle(os.path.join(bundle_dir, "test.fab"))
    assert len(bundle.kernel_names) == 4, bundle.kernel_names
    assert bundle.kernel_names[2].startswith("fagen_fwd_fp16_d128_causal_sm90a ")

    q = FakeTensor((2, 1000, 16, 128))
    k = FakeTensor((2, 577, 4, 128))
    v = FakeTensor((2, 577, 4, 128))
    bad_heads = FakeTensor((2, 1000, 32, 128))
    k5 = FakeTensor((2, 577, 5, 128))
    expect_error(lambda: bundle.plan_forward(bad_heads, k5, k5), "FAGEN_ERROR_INVALID_ARGUMENT",
                 "heads_q (32) is not a multiple of heads_kv (5)")
    padded = FakeTensor((2, 577, 4, 128), strides=(577 * 4 * 132, 4 * 132, 132, 1))
    expect_error(lambda: bundle.plan_forward(q, padded, v), "FAGEN_ERROR_INVALID_ARGUMENT",
                 "k_strides[1] (head) is 132 elements")
    expect_error(lambda: bundle.plan_forward(FakeTensor((2, 1000, 16, 96)), FakeTensor((2, 577, 4, 96)),
                                             FakeTensor((2, 577, 4, 96)), causal=True),
                 "FAGEN_ERROR_NOT_SUPPORTED", "add a variant with dtype fp16, head_dim 96")

    if mode == "nodriver":
        expect_error(lambda: bundle.plan_forward(q, k, v, causal=True), "FAGEN_ERROR_NO_DRIVER",
                     "no CUDA driver found", "bundles can still be built and inspected")
        return
    plan = bundle.plan_forward(q, k, v, causal=True)
    assert plan.kernel.startswith("fagen_fwd_fp16_d128_causal_sm90a"), plan.kernel
    assert plan.grid == (8, 16, 2), plan.grid
    pinned = bundle.plan_forward(q, k, v, causal=True, kernel_index=2)
    assert pinned.kernel == plan.kernel
    expect_error(lambda: bundle.plan_forward(q, k, v, causal=True, kernel_index=0),
                 "FAGEN_ERROR_NOT_SUPPORTED", "is a fwd kernel for bf16")
    o, lse = FakeTensor((2, 1000, 16, 128), ptr=0x20000), FakeTensor((2, 16, 1000), ptr=0x30000)
    plan.run(q, k, v, o, lse, stream=0)
    misaligned = FakeTensor((2, 1000, 16, 128), ptr=0x20008)
    expect_error(lambda: plan.run(q, k, v, misaligned, lse, stream=0),
                 "FAGEN_ERROR_INVALID_ARGUMENT", "o is not 16-byte aligned")
    expect_error(lambda: bundle.plan_forward(q, k, v, causal=True, softcap=30.0),
                 "FAGEN_ERROR_NOT_SUPPORTED", "fp16 head_dim 128/128 mask causal softcap;",
                 "score_mod softcap")
    variants(bundle_dir)
    paged(bundle_dir)


def paged(bundle_dir):
    """Bundle.plan_forward_paged, Plan.run_paged and Plan.status against the fake driver, whose
    "device" memory is host memory (the status record is read from it)."""
    import ctypes
    import fagen_rt
    bundle = fagen_rt.Bundle(os.path.join(bundle_dir, "paged.fab"))
    q = FakeTensor((4, 1, 32, 128))
    cache = FakeTensor((512, 16, 8, 128))
    table = FakeTensor((4, 64), "torch.int32", ptr=0x40000)
    used = FakeTensor((4,), "torch.int32", ptr=0x40400)
    plan = bundle.plan_forward_paged(q, cache, cache, table, 1000, causal=True)
    assert plan.kernel.startswith("fagen_fwd_fp16_hd128_causal_paged16_sm80decode"), plan.kernel
    assert plan.workspace_bytes >= 256
    # The split count: planned, then set (the workspace follows; one split keeps the status
    # records, 16 bytes a thread block of the decode (8 kv heads x 4 sequences) and of the
    # append (4), and the lengths an append writes, each 256-byte aligned).
    planned, planned_bytes = plan.decode_splits, plan.workspace_bytes
    assert planned >= 1, planned
    plan.set_decode_splits(1)
    assert (plan.decode_splits, plan.grid[0], plan.workspace_bytes) == (1, 1, 768 + 256), \
        (plan.decode_splits, plan.grid, plan.workspace_bytes)
    plan.set_decode_splits(planned)
    assert plan.workspace_bytes == planned_bytes
    expect_error(lambda: plan.set_decode_splits(200), "FAGEN_ERROR_INVALID_ARGUMENT",
                 "num_splits (200) must be in 1..128")
    expect_error(lambda: bundle.plan_forward_paged(q, cache, cache, table, 64 * 16 + 1,
                                                   causal=True),
                 "FAGEN_ERROR_INVALID_ARGUMENT", "seqlen_k (1025) exceeds the block table's 1024")
    expect_error(lambda: bundle.plan_forward_paged(q, FakeTensor((512, 32, 8, 128)),
                                                   FakeTensor((512, 32, 8, 128)), table, 1000,
                                                   causal=True),
                 "FAGEN_ERROR_NOT_SUPPORTED", "kv_cache paged, page_size 32")
    # The contiguous plan of the same call is refused by run_paged, and the reverse.
    o, lse = FakeTensor((4, 1, 32, 128), ptr=0x20000), FakeTensor((4, 32, 1), ptr=0x30000)
    buffer = (ctypes.c_uint8 * (plan.workspace_bytes + 256))()
    base = (ctypes.addressof(buffer) + 255) // 256 * 256
    workspace = FakeTensor((plan.workspace_bytes,), "torch.uint8", ptr=base)
    plan.run_paged(q, cache, cache, o, lse, table, used, stream=0, workspace=workspace)
    plan.status(workspace, stream=0)
    status_at = base + plan._plan.workspace_offsets[2]
    ctypes.memmove(status_at, (ctypes.c_int32 * 4)(1, 2, 5, 9999), 16)
    expect_error(lambda: plan.status(workspace, stream=0), "FAGEN_ERROR_INVALID_ARGUMENT",
                 "block_table[2][5] = 9999 is not a page id in [0, 512)")
    expect_error(lambda: plan.run(q, cache, cache, o, lse, stream=0, workspace=workspace),
                 "FAGEN_ERROR_INVALID_ARGUMENT", "run it with fagen_run_forward_paged")
    prefill(bundle, cache, workspace)


def expect_value_error(fn, *parts):
    try:
        fn()
    except ValueError as e:
        for part in parts:
            assert part in str(e), f"{part!r} not in {str(e)!r}"
        return
    raise AssertionError("expected ValueError")


def prefill(bundle, cache, workspace):
    """Chunked prefill over the pages: a varlen call (packed q, cu_seqlens_q, max_seqlen_q)
    through Bundle.plan_forward_paged and Plan.run_paged plans and launches the paged varlen
    forward once over (query tiles, heads_q, batch), with its arguments checked in Python."""
    import fagen_rt
    fake = fake_driver()
    q = FakeTensor((450, 32, 128))  # 3 sequences' new tokens, packed; the longest 200
    table = FakeTensor((3, 64), "torch.int32", ptr=0x40000)
    used = FakeTensor((3,), "torch.int32", ptr=0x40400)
    cu_q = FakeTensor((4,), "torch.int32", ptr=0x40800)
    varlen = dict(causal=True, cu_seqlens_q=cu_q, max_seqlen_q=200)
    plan = bundle.plan_forward_paged(q, cache, cache, table, 1000, **varlen)
    name = "fagen_fwd_fp16_hd128_causal_varlen_paged16_sm80_m128n64w4s2"
    assert plan.kernel.startswith(name + " "), plan.kernel
    assert plan.grid == (2, 32, 3), plan.grid  # ceil(200 / 128) query tiles
    assert plan.run_args == fagen_rt.RUN_ARG_CU_SEQLENS, plan.run_args
    assert plan.workspace_bytes == 256  # the status record alone
    pinned = bundle.plan_forward_paged(q, cache, cache, table, 1000, kernel_index=8, **varlen)
    assert pinned.kernel == plan.kernel
    # The C runtime's own checks come through: seqlen_k within the block table.
    expect_error(lambda: bundle.plan_forward_paged(q, cache, cache, table, 64 * 16 + 1,
                                                   **varlen),
                 "FAGEN_ERROR_INVALID_ARGUMENT", "seqlen_k (1025) exceeds the block table's 1024")
    # A decode-shaped q, or no max_seqlen_q, or packed keys' arguments: refused in Python.
    expect_value_error(lambda: bundle.plan_forward_paged(FakeTensor((3, 150, 32, 128)), cache,
                                                         cache, table, 1000, **varlen),
                       "q must be [total_q, heads_q, head_dim] (cu_seqlens_q given)",
                       "(3, 150, 32, 128)")
    expect_value_error(lambda: bundle.plan_forward_paged(q, cache, cache, table, 1000,
                                                         causal=True, cu_seqlens_q=cu_q),
                       "needs max_seqlen_q")
    expect_value_error(lambda: bundle.plan_forward_paged(q, cache, cache, table, 1000,
                                                         cu_seqlens_k=cu_q, **varlen),
                       "cu_seqlens_k is not read by a paged call")
    expect_value_error(lambda: bundle.plan_forward_paged(
        q, cache, cache, table, 1000, causal=True, cu_seqlens_q=FakeTensor((5,), "torch.int32"),
        max_seqlen_q=200), "block_table has 3 rows but the call has batch 4")
    expect_value_error(lambda: bundle.plan_forward_paged(q, FakeTensor((512, 16, 1024)), cache,
                                                         table, 1000, **varlen),
                       "k_cache must be [num_pages, page_size, heads_kv, head_dim]")
    # No paged varlen kernel for 32-token pages: the runtime names the spec keys.
    expect_error(lambda: bundle.plan_forward_paged(q, FakeTensor((512, 32, 8, 128)),
                                                   FakeTensor((512, 32, 8, 128)), table, 1000,
                                                   **varlen),
                 "FAGEN_ERROR_NOT_SUPPORTED", "page_size 32")

    o = FakeTensor((450, 32, 128), ptr=0x20000)
    lse = FakeTensor((32, 450), "torch.float32", ptr=0x30000)
    expect_value_error(lambda: plan.run_paged(q, cache, cache, o, lse, table, used, stream=0,
                                              workspace=workspace),
                       "pass cu_seqlens_q")
    expect_value_error(lambda: plan.run_paged(q, cache, cache, o, lse, table, used, stream=0,
                                              workspace=workspace, cu_seqlens_q=cu_q,
                                              args=fagen_rt.run_args()),
                       "not both")
    start = fake.fake_cuda_launch_count()
    plan.run_paged(q, cache, cache, o, lse, table, used, stream=0, workspace=workspace,
                   cu_seqlens_q=cu_q)
    assert launches_since(fake, start) == [(name, (2, 32, 3), (128, 1, 1))]
    plan.status(workspace, stream=0)
    # The same through args (what the torch op passes).
    plan.run_paged(q, cache, cache, o, lse, table, used, stream=0, workspace=workspace,
                   args=fagen_rt.run_args(cu_seqlens_q=cu_q))
    assert len(launches_since(fake, start)) == 2


def fake_driver():
    """The fake libcuda the runtime opened (FAGEN_LIBCUDA), its launch log readable."""
    import ctypes
    fake = ctypes.CDLL(os.environ["FAGEN_LIBCUDA"])
    u3 = ctypes.c_uint * 3
    fake.fake_cuda_launch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, u3, u3,
                                      ctypes.c_void_p, ctypes.c_size_t]
    return fake


def launches_since(fake, start):
    """(function, grid, block) of the fake driver's launches from index `start`."""
    import ctypes
    out = []
    for i in range(start, fake.fake_cuda_launch_count()):
        name = ctypes.create_string_buffer(256)
        grid, block = (ctypes.c_uint * 3)(), (ctypes.c_uint * 3)()
        params = ctypes.create_string_buffer(8)
        assert fake.fake_cuda_launch(i, name, 256, grid, block, params, 8) == 0
        out.append((name.value.decode(), tuple(grid), tuple(block)))
    return out


def variants(bundle_dir):
    """The variant and backward API through ctypes, against the fake driver's launch log."""
    import ctypes
    import fagen_rt
    assert ctypes.sizeof(fagen_rt._Problem) == 304  # as tests/unit/RuntimeTest.cpp asserts
    assert ctypes.sizeof(fagen_rt.RunArgs) == 88
    assert ctypes.sizeof(fagen_rt._Plan) == 1192 and fagen_rt._Plan.params.offset == 168
    assert fagen_rt.library().fagen_abi_version() == fagen_rt.ABI_VERSION
    fake = fake_driver()
    bundle = fagen_rt.Bundle(os.path.join(bundle_dir, "variants.fab"))

    # Packed varlen bf16 hd64, top-left window, softcap, dropout: batch 3, longest 700 / 900.
    q = FakeTensor((1500, 16, 64), "torch.bfloat16")
    k = FakeTensor((2000, 4, 64), "torch.bfloat16")
    cu_q, cu_k = FakeTensor((4,), ptr=0x40000), FakeTensor((4,), ptr=0x40100)
    variant = dict(mask="window", window=(256, -1), mask_align="top_left", softcap=50.0,
                   dropout_p=0.125, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=700,
                   max_seqlen_k=900)
    plan = bundle.plan_forward(q, k, k, **variant)
    name = "fagen_bwd_bf16_hd64_windowtl_softcap_drop_varlen_sm80"
    assert plan.kernel.startswith(name.replace("_bwd_", "_fwd_") + " "), plan.kernel
    assert plan.grid == (6, 16, 3), plan.grid
    assert plan.run_args == fagen_rt.RUN_ARG_CU_SEQLENS | fagen_rt.RUN_ARG_DROPOUT_SEED
    o, lse = FakeTensor((1500, 16, 64), ptr=0x20000), FakeTensor((16, 1500), ptr=0x30000)
    expect_error(lambda: plan.run(q, k, k, o, lse, stream=0), "FAGEN_ERROR_INVALID_ARGUMENT",
                 "args is null but the plan's variant reads cu_seqlens_q/_k")
    args = fagen_rt.run_args(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, dropout_seed=1)
    # The struct holds its tensors: a temporary passed in lives as long as the struct (a
    # freed cu_seqlens tensor's memory, reused before the launch read it, gave garbage).
    temp = FakeTensor((4,), ptr=0x40200)
    held = weakref.ref(temp)
    temp_args = fagen_rt.run_args(cu_seqlens_k=temp)
    del temp
    assert held() is not None and temp_args.cu_seqlens_k == 0x40200
    del temp_args
    assert held() is None
    start = fake.fake_cuda_launch_count()
    plan.run(q, k, k, o, lse, stream=0, args=args)
    assert launches_since(fake, start) == [(name.replace("_bwd_", "_fwd_"), (6, 16, 3), (128, 1, 1))]

    back = bundle.plan_backward(q, k, k, **variant)
    assert back.workspace_bytes > 0
    assert back.grid == (8, 4, 3), back.grid
    assert back.pre_post_grid == (11, 16, 3), back.pre_post_grid
    small = FakeTensor((back.workspace_bytes - 256,), "torch.uint8", ptr=0x100000)
    start = fake.fake_cuda_launch_count()
    expect_error(lambda: back.run_backward(q, k, k, o, lse, o, q, k, k, small, stream=0,
                                           args=args),
                 "FAGEN_ERROR_INVALID_ARGUMENT", "is less than plan->workspace_bytes")
    assert fake.fake_cuda_launch_count() == start
    ws = FakeTensor((back.workspace_bytes,), "torch.uint8", ptr=0x100000)
    back.run_backward(q, k, k, o, lse, o, q, k, k, ws, stream=0, args=args)
    assert launches_since(fake, start) == [(name + "_pre", (11, 16, 3), (128, 1, 1)),
                                           (name, (8, 4, 3), (256, 1, 1)),
                                           (name + "_post", (11, 16, 3), (128, 1, 1))]
    expect_error(lambda: bundle.plan_backward(q, k, k, deterministic=True, **variant),
                 "FAGEN_ERROR_NOT_SUPPORTED", "passes [fwd, bwd] and deterministic true")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--fake-cuda")
    ap.add_argument("--write-bundle")
    ap.add_argument("--work-dir")
    ap.add_argument("--mode", choices=["nodriver", "fake"])
    ap.add_argument("--bundle-dir")
    args = ap.parse_args()
    if args.mode:
        os.environ["FAGEN_RT_LIB"] = args.lib
        child(args.mode, args.bundle_dir)
        print(f"{args.mode}: ok")
        return
    os.makedirs(args.work_dir, exist_ok=True)
    subprocess.run([args.write_bundle, args.work_dir], check=True)
    situations = [("nodriver", "/nonexistent/libcuda.so.1"), ("fake", args.fake_cuda)]
    for mode, libcuda in situations:
        env = dict(os.environ, FAGEN_LIBCUDA=libcuda)
        subprocess.run([sys.executable, __file__, "--lib", args.lib, "--mode", mode,
                        "--bundle-dir", args.work_dir], check=True, env=env)


if __name__ == "__main__":
    main()
