"""Registers and static SASS of the forces' radial-sums kernels (sm_90), no device needed.

The kernels of :func:`pbsolver.backends.cuda.forces.radial_sums` of the tree on ``PYTHONPATH``
(one per (periodic, mdh) where the tree has ``radial_sums_kernel``; else its one kernel with
the two flags as arguments), compiled as they are launched (``fastmath=True``) by
``benchmarks/sass.py`` (``PTXAS``, ``NVDISASM``): registers, the number of SASS instructions
and those of the inner loop's kinds (shared-memory loads, special functions, float
arithmetic, branches). To compare two trees, run it with each on ``PYTHONPATH``::

    PTXAS=.../ptxas NVDISASM=.../nvdisasm PYTHONPATH=. python benchmarks/radial_sums_sass.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sass import sass_of  # noqa: E402  (names a device before the kernels are imported)

from pbsolver.backends.cuda import forces as F  # noqa: E402

#: The instruction kinds printed (prefixes of SASS opcodes).
KINDS = ("LDS", "MUFU", "FFMA", "FMUL", "FADD", "BRA")


def main():
    f4, i8 = np.float32, np.int64

    def z(*shape, dtype=f4):
        return np.zeros(shape, dtype=dtype)

    head = (z(70), z(70), z(70), z(70), z(11, 3), z(3))
    tail = (z(11), f4(0.1), f4(78.5), f4(0.5), z(2, dtype=i8), z(2, dtype=i8), 70,
            z(1, 11, 3, dtype=np.float64))  # fmt: skip
    for periodic, mdh in ((False, False), (True, False), (False, True)):
        if hasattr(F, "radial_sums_kernel"):
            info, ops = sass_of(F.radial_sums_kernel(periodic, mdh).py_func, head + tail,
                                fastmath=True)  # as launched  # fmt: skip
        else:  # the one kernel with the flags as arguments
            info, ops = sass_of(F._k_radial_sums.py_func, (*head, periodic, mdh, *tail),
                                fastmath=True)  # fmt: skip
        kinds = sorted(((op, n) for op, n in ops.items() if op.startswith(KINDS)),
                       key=lambda item: -item[1])  # fmt: skip
        print(f"periodic={periodic} mdh={mdh}: {'; '.join(info)}; {sum(ops.values())} SASS "
              "instructions; "
              + ", ".join(f"{op} {n}" for op, n in kinds))  # fmt: skip


if __name__ == "__main__":
    main()
