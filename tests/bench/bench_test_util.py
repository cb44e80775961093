"""What the tests of bench/'s torch-free modules share: bench/ on the import path, and a check
that a call fails with a ValueError naming what was wrong."""
import os
import sys

BENCH = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                      "bench"))
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)


def expect_value_error(fn, arg, words):
    """fn(arg) raises ValueError whose message contains `words`."""
    try:
        fn(arg)
    except ValueError as e:
        assert words in str(e), (arg, str(e))
        return
    raise AssertionError(f"{fn.__name__}({arg!r}) did not fail")
