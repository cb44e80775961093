"""`import fagen_rt` with bench/ on sys.path (PYTHONPATH=bench, as tests/gpu scripts run) gives the
runtime binding, which lives in the package as python/fagen/runtime.py."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from fagen import runtime  # noqa: E402

sys.modules[__name__] = runtime
