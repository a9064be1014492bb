"""Whether this tree's CPU operator kernels equal another tree's bit for bit, over odd cases.

``assemble`` (with and without the stencil), ``residual_and_sumsq`` and ``residual_sumsq`` of
``--old`` (a copy of ``pbsolver/backends/cpu/operator_kernels.py`` from another tree, e.g.
``.gpu/base_s42/...`` made by ``git archive 1117417 pbsolver``) against this tree's, on random
maps of shapes with nz = 1, 2, 5, 10 and 81, Dirichlet and periodic, face maps and node maps
(both face rules), with and without κ̄², float32 and float64 stencils, a charge on a node
(φ_c = inf). Prints one line; raises on the first difference.

    python benchmarks/cpu_s42/operator_kernels_equal.py --old OLD/operator_kernels.py
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True)
    args = p.parse_args(argv)
    # the other tree's module under its own name, compiled into a scratch cache (its file's
    # cache index would otherwise name this tree's module)
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
    spec = importlib.util.spec_from_file_location("old_operator_kernels", args.old)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    from pbsolver.backends.bodies.operator import FACE_MAPS
    from pbsolver.backends.cpu import operator_kernels as new

    rng = np.random.default_rng(0)
    cases = 0
    for shape in [(9, 7, 5), (6, 5, 2), (5, 4, 1), (8, 9, 10), (21, 17, 81)]:
        for periodic in (False, True):
            for mode in (FACE_MAPS, 1, 2):
                for salt in (False, True):
                    for dtype in (np.float32, np.float64):
                        n = 3 if mode == FACE_MAPS else 1
                        maps = [rng.uniform(2.0, 80.0, shape).astype(np.float32)] * 3
                        if n == 3:
                            maps = [rng.uniform(2.0, 80.0, shape).astype(np.float32)
                                    for _ in range(3)]  # fmt: skip
                        k2 = (rng.uniform(0.0, 1.0, shape).astype(np.float32) if salt
                              else np.zeros((1, 1, 1), np.float32))  # fmt: skip
                        phi_c = rng.normal(size=shape)
                        if shape[2] > 3:
                            phi_c[2, 2, 2] = np.inf
                        x = rng.normal(size=shape).astype(dtype)
                        h2 = (0.25, 0.3, 0.2)
                        for stencil in (True, False):
                            outs = []
                            for mod in (old, new):
                                b = np.full(shape, 7.0)
                                st = [np.full(shape, 7.0, dtype) for _ in range(4)]
                                mod.assemble(phi_c, *maps, mode, k2, salt, 2.0, *h2, periodic, b,
                                             stencil, *st)  # fmt: skip
                                r = np.empty(shape, dtype)
                                t = mod.residual_and_sumsq(x, b, *maps, mode, k2, salt, *h2, r,
                                                           periodic)  # fmt: skip
                                s = mod.residual_sumsq(x, b, *maps, mode, k2, salt, *h2, periodic)
                                outs.append((b, *st, r, np.array([t, s])))
                            for a, c in zip(*outs, strict=True):
                                if not np.array_equal(a, c, equal_nan=True):
                                    raise SystemExit(
                                        f"differ: {shape} periodic={periodic} "
                                        f"mode={mode} salt={salt} {dtype.__name__}"
                                    )
                            cases += 1
    print(f"{cases} cases: assemble, residual_and_sumsq and residual_sumsq equal bit for bit")


if __name__ == "__main__":
    main()
