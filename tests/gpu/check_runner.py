"""What the GPU check scripts share: named checks that each run to their end, one line each
(ok, or FAIL with the exception and its traceback), counted for the summary."""
import time
import traceback


class Checks:
    """check(name, fn, *args): runs fn(*args) (its return value, if any, ends the ok line);
    `width` pads the names."""

    def __init__(self, width):
        self.width = width
        self.results = []  # (name, passed)

    def __call__(self, name, fn, *args):
        t0 = time.time()
        try:
            detail = fn(*args) or ""
            self.results.append((name, True))
            print(f"ok    {name:{self.width}s} {time.time() - t0:5.1f}s {detail}", flush=True)
        except Exception as e:  # every check runs; the summary counts the failures
            self.results.append((name, False))
            print(f"FAIL  {name:{self.width}s} {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()

    def failed(self):
        return [name for name, passed in self.results if not passed]
