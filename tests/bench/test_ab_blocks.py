"""bench/ab_blocks.py's parsing and bookkeeping (no GPU, no torch)."""
import bench_test_util  # bench/ on the import path
import ab_blocks  # noqa: E402
import tables  # noqa: E402


def expect_error(arg, words):
    bench_test_util.expect_value_error(ab_blocks.parse_bundle, arg, words)


def main():
    assert ab_blocks.parse_bundle("A=bench90a.fab") == ("A", "bench90a.fab", True)
    assert ab_blocks.parse_bundle("nows=x/y.fab:nows") == ("nows", "x/y.fab", False)
    assert ab_blocks.parse_bundle("B=a=b.fab") == ("B", "a=b.fab", True)
    expect_error("bench90a.fab", "is not LABEL=PATH[:nows]")
    expect_error("=x.fab", "is not LABEL=PATH[:nows]")
    expect_error("A=", "is not LABEL=PATH[:nows]")
    expect_error("A=:nows", "has no path")
    expect_error("cudnn=x.fab", "are --sdpa's")
    expect_error("flash=x.fab", "are --sdpa's")
    # Each label first once every len(labels) rounds, the order kept otherwise.
    labels = ["A", "B", "cudnn"]
    assert ab_blocks.round_order(labels, 0) == ["A", "B", "cudnn"]
    assert ab_blocks.round_order(labels, 1) == ["B", "cudnn", "A"]
    assert ab_blocks.round_order(labels, 2) == ["cudnn", "A", "B"]
    assert ab_blocks.round_order(labels, 3) == ["A", "B", "cudnn"]
    assert [ab_blocks.round_order(labels, r)[0] for r in range(6)] == labels * 2
    # Labels: two or more, each once; --blocks and --seconds positive.
    assert ab_blocks.check_labels(["A", "B"], 4, 1.0) == ""
    assert "two labels or more" in ab_blocks.check_labels(["A"], 4, 1.0)
    assert "each label once" in ab_blocks.check_labels(["A", "cudnn", "A"], 4, 1.0)
    assert "--blocks" in ab_blocks.check_labels(["A", "B"], 0, 1.0)
    assert "--seconds" in ab_blocks.check_labels(["A", "B"], 4, 0.0)
    assert ab_blocks.balanced(["A", "B"], 4) and not ab_blocks.balanced(["A", "B", "C"], 4)
    # About 50 ms of work between syncs, at least 20 calls.
    assert ab_blocks.sync_every(0.25) == 200
    assert ab_blocks.sync_every(3.0) == 20
    assert ab_blocks.sync_every(0.0) == 20
    # WRONG (bench/tables.py, shared with bench_fwd.py and bench_variants.py): over 0.05, NaN
    # or inf.
    assert not tables.is_wrong(0.0) and not tables.is_wrong(0.05)
    assert tables.is_wrong(0.0501)
    assert tables.is_wrong(float("nan")) and tables.is_wrong(float("inf"))
    # run_row (bench_decode.py, bench_prefill.py): a cell's result or its error's first line,
    # the row kept, printed and written, free() after each cell.
    import json, os, tempfile
    freed = []
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        meta = {"gpu": "x", "rows": []}
        assert tables.run_row(meta, {"n": 1}, lambda: True, (RuntimeError,), out,
                              lambda: freed.append(1))

        def fails():
            raise RuntimeError("first line " + "y" * 400 + "\nsecond line")
        assert not tables.run_row(meta, {"n": 2}, fails, (RuntimeError,), out,
                                  lambda: freed.append(2))
        assert freed == [1, 2]
        with open(out) as fh:
            rows = json.load(fh)["rows"]
        assert rows[0] == {"n": 1, "ok": True}
        assert rows[1]["ok"] is False and rows[1]["error"].startswith("first line y")
        assert len(rows[1]["error"]) == 300 and "second" not in rows[1]["error"]
        # An exception not in `errors` goes through; nothing written without `out`.
        try:
            tables.run_row(meta, {"n": 3}, lambda: 1 // 0, (RuntimeError,))
            raise AssertionError("ZeroDivisionError swallowed")
        except ZeroDivisionError:
            pass
        assert tables.run_row(meta, {"n": 4}, lambda: True, (RuntimeError,))
        assert len(meta["rows"]) == 3 and len(rows) == 2
    # Median, spread and ratio to the first label's median.
    med, spread, ratio = ab_blocks.summarize([1.0, 1.02, 0.98, 1.01], 0.5)
    assert abs(med - 1.005) < 1e-12
    assert abs(spread - 0.04 / 1.005) < 1e-12
    assert abs(ratio - 2.01) < 1e-12
    # The reference moves to the first label that ran, and says so.
    assert ab_blocks.reference_note(["A", "B", "cudnn"], ["A", "B", "cudnn"], 128, 2048) == ""
    note = ab_blocks.reference_note(["A", "B", "cudnn"], ["B", "cudnn"], 128, 2048)
    assert "A did not run" in note and "B is this cell's reference" in note
    assert "d=128 s=2048" in note
    assert ab_blocks.reference_note(["A", "B", "cudnn"], ["A", "cudnn"], 128, 2048) == ""
    assert ab_blocks.reference_note(["A", "B"], [], 128, 2048) == ""
    print("test_ab_blocks: ok")


if __name__ == "__main__":
    main()
