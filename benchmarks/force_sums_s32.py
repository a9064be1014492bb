"""The thirty-second session's two force sums on the CPU, each against what it replaced.

* "mdh": the Debye–Hückel sum over a box's outer layer (44,550 nodes of a 40×48×40 Å box, 149
  centres inside), its exp as libm's ``math.exp`` (the loop does not vectorise) and as
  :func:`pbsolver.backends.cpu.fast_math.exp32` (the package's);
* "coulomb": the φ_c sum over an 81×97×81 grid (2 % zero weights) through a node list
  (``grid_nodes`` then ``coulomb_sums``, as before) and from the grid's axes
  (``coulomb_grid_sums``, the package's), with and without a periodic box.

    python benchmarks/force_sums_s32.py --repeat 20

Prints each variant's milliseconds (the mean of ``--repeat`` calls after one) and the largest
difference between the two, relative to each centre's largest component.
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

from pbsolver.backends.bodies import forces as B  # noqa: E402
from pbsolver.backends.cpu import forces as F  # noqa: E402

FM = {"reassoc", "contract", "nsz", "arcp", "afn"}


def _libm_mdh_sums():
    """The package's radial-sum loop with libm's exp in the Debye–Hückel slope."""
    inv3, dh, img = (njit(inline="always", fastmath=FM)(b)
                     for b in B.radial_bodies(np.float32, math.exp))  # fmt: skip
    term = njit(inline="always", fastmath=FM)(B.make_radial_term(inv3, dh, img))
    per_item, tile = F.CENTRES_PER_ITEM, F.TILE_NODES

    @njit(parallel=True, fastmath=FM)
    def sums(px, py, pz, w, centres, box, radii, kappa, eps_out, inv_c, out):
        n, m = centres.shape[0], px.shape[0]
        for item in prange((n + per_item - 1) // per_item):
            first, last = item * per_item, min(n, item * per_item + per_item)
            for lo in range(0, m, tile):
                hi = min(m, lo + tile)
                tx, ty, tz, tw = px[lo:hi], py[lo:hi], pz[lo:hi], w[lo:hi]
                for i in range(first, last):
                    gx = gy = gz = np.float32(0.0)
                    for p in range(hi - lo):
                        fx, fy, fz = term(tx, ty, tz, tw, p, centres[i, 0], centres[i, 1],
                                          centres[i, 2], box, False, True, radii[i], kappa,
                                          eps_out, inv_c)  # fmt: skip
                        gx += fx
                        gy += fy
                        gz += fz
                    out[i, 0] += gx
                    out[i, 1] += gy
                    out[i, 2] += gz

    def run(points, weights, centres, radii, kappa, eps_out, eps_c):
        ref = 0.5 * (centres.min(axis=0) + centres.max(axis=0))
        rows = (points - ref[:, None]).astype(np.float32)
        out = np.zeros((len(centres), 3))
        f32 = np.float32
        sums(*rows, weights.astype(f32), (centres - ref).astype(f32), np.ones(3, f32),
             radii.astype(f32), f32(kappa), f32(eps_out), f32(1.0 / eps_c), out)  # fmt: skip
        return out

    return run


def _timed(fn, repeat):
    out = fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1e3, out


def _rel(a, b):
    return float((np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)).max())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args(argv)
    rng = np.random.default_rng(1)
    lengths = np.array([40.0, 48.0, 40.0])
    m = 44_550
    pts = rng.uniform(0.0, 1.0, (3, m)) * lengths[:, None]
    face = rng.integers(0, 6, m)
    pts[face // 2, np.arange(m)] = np.where(face % 2 == 0, 0.0, lengths[face // 2])
    w = rng.normal(size=m)
    centres = rng.uniform(12.0, 28.0, (149, 3)) + [0.0, 4.0, 0.0]
    radii = rng.uniform(1.0, 2.0, 149)
    dh = (0.1245, 78.54, 2.0)
    libm = _libm_mdh_sums()
    t_old, old = _timed(lambda: libm(pts, w, centres, radii, *dh), args.repeat)
    t_new, new = _timed(lambda: F.debye_huckel_sums(pts, w, centres, radii, *dh), args.repeat)
    print(f"mdh: libm exp {t_old:.2f} ms, exp32 {t_new:.2f} ms, difference {_rel(new, old):.1e}")

    shape, origin, h = (81, 97, 81), (-20.0, -24.0, -20.0), (0.5, 0.5, 0.5)
    field = rng.normal(size=shape)
    field[rng.uniform(size=shape) < 0.02] = 0.0
    cen = rng.uniform(-8.0, 8.0, (149, 3))
    for box in (None, (40.5, 48.5, 40.5)):
        t_old, old = _timed(lambda b=box: F.coulomb_sums(*F.grid_nodes(field, origin, h), cen, b),
                            args.repeat)  # fmt: skip
        t_new, new = _timed(lambda b=box: F.coulomb_grid_sums(field, origin, h, cen, b),
                            args.repeat)  # fmt: skip
        what = "coulomb" + ("" if box is None else ", box")
        print(f"{what}: node list {t_old:.2f} ms, grid {t_new:.2f} ms, "
              f"difference {_rel(new, old):.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
