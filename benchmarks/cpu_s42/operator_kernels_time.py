"""Time of the CPU operator kernels (``assemble``, ``residual_and_sumsq``), one tree.

Random maps of the exact forces' CPU grid (81×97×81: float32 face maps and κ̄², float64 φ_c
and right-hand side, a float32 iterate), Dirichlet; the median of ``--repeat`` calls of each
kernel after one untimed call, and a digest of the outputs (the trees must agree bit for bit).

    PYTHONPATH=<tree> python benchmarks/cpu_s42/operator_kernels_time.py
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

import pbsolver
from pbsolver.backends.bodies.operator import FACE_MAPS
from pbsolver.backends.cpu import operator_kernels as K

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from force_kernels_cpu import median_ms  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    shape = (81, 97, 81)
    faces = [rng.uniform(2.0, 80.0, shape).astype(np.float32) for _ in range(3)]
    kappa2 = rng.uniform(0.0, 1.0, shape).astype(np.float32)
    phi_c = rng.normal(size=shape)
    x = rng.normal(size=shape).astype(np.float32)
    h2 = (0.25, 0.25, 0.25)
    b = np.empty(shape)
    cx, cy, cz, diag = (np.empty(shape, np.float32) for _ in range(4))
    out = np.empty(shape, np.float32)

    def assemble():
        K.assemble(phi_c, *faces, FACE_MAPS, kappa2, True, 2.0, *h2, False, b, True, cx, cy, cz,
                   diag)  # fmt: skip

    total = []

    def residual():
        total.append(K.residual_and_sumsq(x, b, *faces, FACE_MAPS, kappa2, True, *h2, out, False))

    t_assemble = median_ms(assemble, args.repeat)
    t_residual = median_ms(residual, args.repeat)
    digest = hashlib.sha256()
    for a in (b, cx, cy, cz, diag, out, np.array(total[-1])):
        digest.update(np.ascontiguousarray(a).tobytes())
    print(f"{pbsolver.__file__}: {shape}, medians of {args.repeat}: assemble {t_assemble:.2f} ms, "
          f"residual_and_sumsq {t_residual:.2f} ms; outputs {digest.hexdigest()[:16]}")  # fmt: skip


if __name__ == "__main__":
    main()
