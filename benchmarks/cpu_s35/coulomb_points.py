"""φ_c at a grid's outer layer on the CPU (the "sdh" and salt-free "mdh" boundary values).

hca-bind's complex (2,500 atoms, ``benchmarks/apbs_inputs/hca-bind/complex.pqr``) and the outer
layer of a 65³ grid at 1.5 Å around it (24,578 points): ``coulomb_points`` of the tree on
``PYTHONPATH``, the median of ten calls after one, and the values (``--save``/``--compare``).

    PYTHONPATH=$OLD python benchmarks/cpu_s35/coulomb_points.py --save old.npy
    python benchmarks/cpu_s35/coulomb_points.py --compare old.npy
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.backends.cpu import maps as CM
from pbsolver.molecule.maps import outer_layer_points

PQR = Path(__file__).resolve().parents[1] / "apbs_inputs" / "hca-bind" / "complex.pqr"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args(argv)
    atoms = pb.read_pqr(PQR)
    grid = pb.Grid((65, 65, 65), spacing=1.5, origin=tuple(atoms.positions.mean(0) - 48.0))
    points = outer_layer_points(grid)[1]
    call = (points, atoms.positions, atoms.charges, pb.COULOMB_KJ / 2.0, 1e-12)
    values = CM.coulomb_points(*call)
    seconds = []
    for _ in range(10):
        start = time.perf_counter()
        values = CM.coulomb_points(*call)
        seconds.append(time.perf_counter() - start)
    print(f"{len(points)} points, {len(atoms)} atoms: {np.median(seconds) * 1e3:.2f} ms")
    if args.save:
        np.save(args.save, values)
    if args.compare:
        ref = np.load(args.compare)
        print(f"largest difference from {args.compare.name}, relative to the largest value: "
              f"{np.abs(values - ref).max() / np.abs(ref).max():.1e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
