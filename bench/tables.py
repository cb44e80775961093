"""Cells of the benchmarks' printed tables (bench_fwd.py, bench_bwd.py, bench_variants.py)."""


def fmt(x):
    """TFLOP/s with one decimal, or "-" where there is no number."""
    return "%.1f" % x if x else "-"


def ratio(a, b):
    """a / b as "1.23x", or "-" where either is missing."""
    return "%.2fx" % (a / b) if a and b else "-"
