"""Whether the copy races with the old ``stream_context`` (the stream entered, no waits).

One-off of the twenty-fifth session (README.md beside it), run from the project root with the
tests on the path. Reformatted for ruff after the run (two unused imports dropped); the
statements are those that ran.
"""

import sys

import cupy as cp

sys.path.insert(0, "tests")
import test_cuda_backend as t  # noqa: E402

from pbsolver.backends.cuda import CUDABackend  # noqa: E402

CUDABackend.stream_context = lambda self: self.stream
try:
    t.test_stream_context_orders_the_backend_stream_with_the_callers(cp)
    print("old stream_context: test PASSED (no race observed)")
except AssertionError as e:
    print("old stream_context: test FAILED as expected:", e)
