"""Tests bench/fagen_rt.py without a GPU or torch: against no driver, and against the fake libcuda.

The driver is opened once per process, so each situation runs in a child process:
    test_fagen_rt.py --lib LIB --fake-cuda FAKE --write-bundle TOOL --work-dir DIR
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))


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
