"""bench/fa3.py, the FA3 shapes the probes share (no GPU, no torch)."""
import bench_test_util  # bench/ on the import path
import fa3  # noqa: E402


def expect_error(arg, words):
    bench_test_util.expect_value_error(fa3.parse_cells, arg, words)


def main():
    assert fa3.shape(128, 2048) == (8, 16)
    assert fa3.shape(256, 16384) == (1, 8)
    assert fa3.shape(64, 32768) == (1, 32)  # at least one sequence
    assert fa3.fwd_flops(128, 16384) == 4.0 * 1 * 16 * 16384 * 16384 * 128
    assert fa3.fwd_flops(128, 16384, causal=True) == fa3.fwd_flops(128, 16384) / 2
    assert fa3.parse_cells("256x2048,128x16384") == [(256, 2048), (128, 16384)]
    assert fa3.parse_cells(" 64x512") == [(64, 512)]
    expect_error("256y2048", "'256y2048' is not HDxSEQLEN")
    expect_error("256x2048x1", "is not HDxSEQLEN")
    expect_error("256x", "is not HDxSEQLEN")
    expect_error("0x2048", "must be positive")
    print("test_fa3: ok")


if __name__ == "__main__":
    main()
