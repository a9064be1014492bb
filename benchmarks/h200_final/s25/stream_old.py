# the old stream_context (the backend's stream entered, no waits): does the copy race?
import contextlib, sys
import numpy as np, cupy as cp
sys.path.insert(0, "tests")
import test_cuda_backend as t
from pbsolver.backends.cuda import CUDABackend
CUDABackend.stream_context = lambda self: self.stream
try:
    t.test_stream_context_orders_the_backend_stream_with_the_callers(cp)
    print("old stream_context: test PASSED (no race observed)")
except AssertionError as e:
    print("old stream_context: test FAILED as expected:", e)
