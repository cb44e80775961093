"""Shared by the benchmarks (bench_fwd.py, bench_bwd.py, bench_variants.py, bench_kernels.py,
bench_overhead.py, ab_blocks.py, bench_decode.py, bench_prefill.py): the cells of their printed tables, the JSON they write, and
when a row's output is WRONG."""
import json
import math
import os

WRONG_ABS_DIFF = 0.05  # max |diff| in bf16 / fp16 over which two outputs are not one function


def is_wrong(max_abs_diff):
    """Over WRONG_ABS_DIFF, or not a number (NaN / inf outputs)."""
    return not (math.isfinite(max_abs_diff) and max_abs_diff <= WRONG_ABS_DIFF)


def fmt(x):
    """TFLOP/s with one decimal, or "-" where there is no number."""
    return "%.1f" % x if x else "-"


def ratio(a, b):
    """a / b as "1.23x", or "-" where either is missing."""
    return "%.2fx" % (a / b) if a and b else "-"


def write_json(path, obj):
    """Writes obj as JSON to path through a temporary file and a rename: an interrupted run
    leaves the previous file (or none), never half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1)
    os.replace(tmp, path)


def run_row(meta, row, cell, errors, out=None, free=None):
    """One benchmark cell: row["ok"] = cell(), or False with the first line of an `errors`
    exception (cut at 300 characters) in row["error"]; the row appended to meta["rows"] and
    printed as one JSON line, free() called (torch.cuda.empty_cache: the next cell's tensors
    start from the same pool) and `out`, when given, rewritten. Returns row["ok"]."""
    try:
        row["ok"] = cell()
    except errors as e:
        row["ok"], row["error"] = False, str(e).splitlines()[0][:300]
    meta["rows"].append(row)
    print(json.dumps(row), flush=True)
    if free is not None:
        free()
    if out:
        write_json(out, meta)
    return row["ok"]

