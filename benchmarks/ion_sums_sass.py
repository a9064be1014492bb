"""Registers and static SASS of the frame engine's ion-accessible column kernels (sm_90).

The map kernel (``frame_kernels.cuda_kernels().ion``) and the forces' chord-end sums
(``.ion_end_sums``) of the tree on ``PYTHONPATH``, compiled to PTX by numba-cuda (no device
needed), then ``ptxas -v`` (``PTXAS``: the ``nvidia-cuda-nvcc`` wheel's) and ``nvdisasm``
(``NVDISASM``: the ``nvidia-cuda-nvdisasm`` wheel's): registers, stack, spills, the number of
SASS instructions and the commonest opcodes. To compare two trees, run it with each on
``PYTHONPATH``::

    PTXAS=.../ptxas NVDISASM=.../nvdisasm PYTHONPATH=. python benchmarks/ion_sums_sass.py
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

from pbsolver.backends import frame_kernels  # noqa: E402


def z(*shape, dtype=np.float64):
    return np.zeros(shape, dtype=dtype)


def main():
    nf, na = 2, 5
    # the argument kinds of tests/test_cuda_ptx.py's column kernels
    column = (z(nf, na, 3), z(na), 4, 3, 3, 4, z(nf, 3), z(3), 2, z(1, dtype=np.int64))
    kernels = frame_kernels.cuda_kernels()
    for name, kernel, args in (("ion", kernels.ion, (z(nf * 4, 3, 3), *column)),
                               ("ion_end_sums", kernels.ion_end_sums,
                                (z(nf * na, 3), z(nf * 4, 3, 3), *column))):  # fmt: skip
        ptx, _ = cuda.compile_ptx(kernel.py_func, _types(args), cc=(9, 0))
        # a ptxas older than libnvvm reads the PTX (the kernels use nothing newer)
        ptx = re.sub(r"^\.version \d+\.\d+", ".version 8.5", ptx, flags=re.M)
        folder = tempfile.mkdtemp()
        src, cubin = os.path.join(folder, "k.ptx"), os.path.join(folder, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        out = subprocess.run([os.environ["PTXAS"], "-v", "-arch=sm_90", src, "-o", cubin],
                             capture_output=True, text=True, check=True)  # fmt: skip
        info = [line.split(":", 1)[-1].strip() for line in out.stderr.splitlines()
                if "registers" in line or "stack frame" in line]  # fmt: skip
        sass = subprocess.run([os.environ["NVDISASM"], "-c", cubin], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
        ops = collections.Counter()
        for line in sass.splitlines():
            m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
            if m:
                ops[m.group(1)] += 1
        print(f"{name}: {'; '.join(info)}")
        print(f"  {sum(ops.values())} SASS instructions; "
              + ", ".join(f"{op} {n}" for op, n in ops.most_common(12)))  # fmt: skip


if __name__ == "__main__":
    main()
