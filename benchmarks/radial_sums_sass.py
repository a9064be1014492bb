"""Registers and static SASS of the forces' radial-sums kernels (sm_90), no device needed.

The kernels of :func:`pbsolver.backends.cuda.forces.radial_sums` of the tree on ``PYTHONPATH``
(one per (periodic, mdh) where the tree has ``radial_sums_kernel``; else its one kernel with
the two flags as arguments), compiled to PTX by numba-cuda as they are launched
(``fastmath=True``), then ``ptxas -v`` (``PTXAS``: the ``nvidia-cuda-nvcc`` wheel's) and
``nvdisasm`` (``NVDISASM``: the ``nvidia-cuda-nvdisasm`` wheel's): registers, the number of
SASS instructions and those of the inner loop's kinds (shared-memory loads, special functions,
float arithmetic, branches). To compare two trees, run it with each on ``PYTHONPATH``::

    PTXAS=.../ptxas NVDISASM=.../nvdisasm PYTHONPATH=. python benchmarks/radial_sums_sass.py
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numba.cuda.dispatcher as dispatcher
import numpy as np
from numba import cuda

# device functions are compiled for "the current device": there is none here, so name one
dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_cuda_ptx import _types  # noqa: E402

from pbsolver.backends.cuda import forces as F  # noqa: E402

#: The instruction kinds printed (prefixes of SASS opcodes).
KINDS = ("LDS", "MUFU", "FFMA", "FMUL", "FADD", "BRA")


def sass_of(function, args):
    """(ptxas's register line, Counter of SASS opcodes) of a kernel's Python function."""
    ptx, _ = cuda.compile_ptx(function, _types(args), cc=(9, 0), fastmath=True)
    # a ptxas older than libnvvm reads the PTX (the kernels use nothing newer)
    ptx = re.sub(r"^\.version \d+\.\d+", ".version 8.5", ptx, flags=re.M)
    folder = tempfile.mkdtemp()
    src, cubin = os.path.join(folder, "k.ptx"), os.path.join(folder, "k.cubin")
    with open(src, "w") as f:
        f.write(ptx)
    out = subprocess.run([os.environ["PTXAS"], "-v", "-arch=sm_90", src, "-o", cubin],
                         capture_output=True, text=True, check=True)  # fmt: skip
    info = "; ".join(line.split(":", 1)[-1].strip() for line in out.stderr.splitlines()
                     if "registers" in line)  # fmt: skip
    sass = subprocess.run([os.environ["NVDISASM"], "-c", cubin], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m:
            ops[m.group(1)] += 1
    return info, ops


def main():
    f4, i8 = np.float32, np.int64

    def z(*shape, dtype=f4):
        return np.zeros(shape, dtype=dtype)

    head = (z(70), z(70), z(70), z(70), z(11, 3), z(3))
    tail = (z(11), f4(0.1), f4(78.5), f4(0.5), z(2, dtype=i8), z(2, dtype=i8), 70,
            z(1, 11, 3, dtype=np.float64))  # fmt: skip
    for periodic, mdh in ((False, False), (True, False), (False, True)):
        if hasattr(F, "radial_sums_kernel"):
            info, ops = sass_of(F.radial_sums_kernel(periodic, mdh).py_func, head + tail)
        else:  # the one kernel with the flags as arguments
            info, ops = sass_of(F._k_radial_sums.py_func, (*head, periodic, mdh, *tail))
        kinds = sorted(((op, n) for op, n in ops.items() if op.startswith(KINDS)),
                       key=lambda item: -item[1])  # fmt: skip
        print(f"periodic={periodic} mdh={mdh}: {info}; {sum(ops.values())} SASS instructions; "
              + ", ".join(f"{op} {n}" for op, n in kinds))  # fmt: skip


if __name__ == "__main__":
    main()
