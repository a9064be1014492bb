"""The "mdh" boundary values on the CPU: the Debye–Hückel sum over a grid's outer layer.

The peptide (149 atoms) and the outer layer of an 81×97×81 grid at 0.5 Å around it (43,522
points), κ of 0.15 M: ``debye_huckel_points`` of the tree on ``PYTHONPATH``, the median of ten
calls after one, and the values (saved with ``--save``, compared with ``--compare``).

    PYTHONPATH=$OLD python benchmarks/cpu_s35/dh_points.py --save old.npy
    python benchmarks/cpu_s35/dh_points.py --compare old.npy
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.backends.cpu import maps as CM
from pbsolver.molecule.maps import kappa_from_ionic_strength, outer_layer_points

DATA = Path(__file__).resolve().parents[2] / "data"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args(argv)
    atoms = pb.read_pqr(DATA / "peptide.pqr")
    half = 0.5 * np.array([40, 48, 40])
    grid = pb.Grid((81, 97, 81), spacing=0.5, origin=tuple(atoms.positions.mean(0) - half))
    points = outer_layer_points(grid)[1]
    kappa = kappa_from_ionic_strength(0.15)
    call = (points, atoms.positions, atoms.charges, atoms.radii, kappa, 694.7, 78.54, 2.0)
    values = CM.debye_huckel_points(*call)
    seconds = []
    for _ in range(10):
        start = time.perf_counter()
        values = CM.debye_huckel_points(*call)
        seconds.append(time.perf_counter() - start)
    print(f"{len(points)} points, {len(atoms)} atoms: {np.median(seconds) * 1e3:.2f} ms")
    if args.save:
        np.save(args.save, values)
    if args.compare:
        ref = np.load(args.compare)
        print(f"largest relative difference from {args.compare.name}: "
              f"{np.abs((values - ref) / ref).max():.1e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
