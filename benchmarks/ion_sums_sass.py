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
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sass import sass_of  # noqa: E402  (names a device before the kernels are imported)

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
        info, opcodes = sass_of(kernel.py_func, args)
        ops = collections.Counter()
        for op, n in opcodes.items():  # opcodes without their suffixes
            ops[op.split(".")[0]] += n
        print(f"{name}: {'; '.join(info)}")
        print(f"  {sum(ops.values())} SASS instructions; "
              + ", ".join(f"{op} {n}" for op, n in ops.most_common(12)))  # fmt: skip


if __name__ == "__main__":
    main()
