"""Variants of the forces' φ_c sum on the CPU, timed side by side (measurement only).

Σ_p w_p (p − c_i)/|p − c_i|³ for ``--centres`` centres over ``--points`` random nodes, as
:func:`pbsolver.backends.cpu.forces.coulomb_sums` sums it (float32 terms in tiles of nodes that
stay in L1, float64 totals; since the thirty-first session), against two float64 variants tried
for issue 19's CPU cost before it (the package's loop then was the float64 one, one work item a
centre, at the same speed as ``tiled``):

* ``tiled``: the nodes in tiles of ``--tile`` (a few hundred kB, resident in L2) with every
  centre's partial sum per tile, the partials added in tile order (the same determinism);
* ``tiled-rsqrt``: the same with 1/r³ from a float32 reciprocal square root and two float64
  Newton steps (within 1e-15 of the float64 one).

The last lines give each variant's largest difference from the package's sum.

    python benchmarks/radial_sum_variants.py
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first

from pbsolver.backends.cpu import forces  # noqa: E402

FASTMATH = {"reassoc", "contract", "nsz", "arcp", "afn"}


def make_tiled(tile, rsqrt):
    if rsqrt:

        def inverse_cube(r2):
            s = np.float64(np.float32(1.0) / math.sqrt(np.float32(r2)))
            s = s * (1.5 - 0.5 * r2 * s * s)
            s = s * (1.5 - 0.5 * r2 * s * s)
            return s * s * s

    else:

        def inverse_cube(r2):
            return 1.0 / (r2 * math.sqrt(r2))

    inverse_cube = njit(inline="always", fastmath=FASTMATH)(inverse_cube)

    @njit(fastmath=FASTMATH, parallel=True)
    def tiled(points, w, centres, out):
        m = points.shape[1]
        nt = (m + tile - 1) // tile
        n = centres.shape[0]
        part = np.zeros((nt, n, 3))
        for t in prange(nt):
            lo = t * tile
            hi = min(m, lo + tile)
            for i in range(n):
                gx = 0.0
                gy = 0.0
                gz = 0.0
                cx, cy, cz = centres[i, 0], centres[i, 1], centres[i, 2]
                for p in range(lo, hi):
                    dx = points[0, p] - cx
                    dy = points[1, p] - cy
                    dz = points[2, p] - cz
                    f = w[p] * inverse_cube(dx * dx + dy * dy + dz * dz)
                    gx += f * dx
                    gy += f * dy
                    gz += f * dz
                part[t, i, 0] = gx
                part[t, i, 1] = gy
                part[t, i, 2] = gz
        for i in range(n):
            for a in range(3):
                acc = 0.0
                for t in range(nt):
                    acc += part[t, i, a]
                out[i, a] = acc

    return tiled


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=500_000)
    p.add_argument("--centres", type=int, default=149)
    p.add_argument("--tile", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    points = rng.uniform(-20.0, 20.0, (3, args.points))
    weights = rng.normal(size=args.points)
    centres = rng.uniform(-5.0, 5.0, (args.centres, 3))
    variants = {"package": lambda out: out.__setitem__(slice(None), forces.coulomb_sums(
        points, weights, centres))}  # fmt: skip
    for name, rsqrt in (("tiled", False), ("tiled-rsqrt", True)):
        kernel = make_tiled(args.tile, rsqrt)
        variants[name] = lambda out, k=kernel: k(points, weights, centres, out)
    results = {}
    for name, run in variants.items():
        out = np.zeros((args.centres, 3))
        run(out)  # compile
        start = time.perf_counter()
        for _ in range(args.repeat):
            run(out)
        results[name] = out.copy()
        print(f"{name:12s} {1e3 * (time.perf_counter() - start) / args.repeat:8.1f} ms", flush=True)
    ref = results["package"]
    for name, out in results.items():
        print(f"{name:12s} max |diff| / max |package| = "
              f"{np.abs(out - ref).max() / np.abs(ref).max():.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
