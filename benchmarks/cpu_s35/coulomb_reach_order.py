"""φ_c by the multilevel sum for colipase on 65³ at 0.8 Å: time and error against the direct sum.

For each reach given (in coarse spacings, ``coulomb_multilevel(reach=...)``), the median of
``--repeat`` timed calls after one untimed one, and the largest error on the nodes farther than
a spacing from every atom, relative to the largest |φ_c| there (the tests' measure). The
interpolation order is the module constant ``ORDER`` of the tree on ``PYTHONPATH``: run it on a
copy with that line changed to try another order (README.md here).

    python benchmarks/cpu_s35/coulomb_reach_order.py --reaches 8.5 7 6
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

import pbsolver as pb
from pbsolver.backends.cpu import coulomb_fast as CF

DATA = Path(__file__).resolve().parents[2] / "data"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reaches", type=float, nargs="+", default=[CF.REACH])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    atoms = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    pos, q = atoms.positions, atoms.charges
    shape, h = (65, 65, 65), (0.8, 0.8, 0.8)
    origin = tuple(pos.mean(0) - 32 * 0.8)
    ref = CF.coulomb_multilevel(shape, origin, h, pos, q, 1.0, levels=1)  # the direct sum
    axes = [origin[d] + h[d] * np.arange(shape[d]) for d in range(3)]
    nodes = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    far = (cKDTree(pos).query(nodes)[0] > h[0]).reshape(shape)
    scale = np.abs(ref[far]).max()
    print(f"ORDER {CF.ORDER}")
    for reach in args.reaches:
        CF.coulomb_multilevel(shape, origin, h, pos, q, 1.0, reach=reach)
        seconds = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = CF.coulomb_multilevel(shape, origin, h, pos, q, 1.0, reach=reach)
            seconds.append(time.perf_counter() - start)
        err = np.abs(out - ref)[far].max() / scale
        print(f"reach {reach:g}: {np.median(seconds) * 1e3:.1f} ms, largest error {err:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
