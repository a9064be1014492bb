"""The CPU point sums behind the boundary values: time and values of the tree on ``PYTHONPATH``.

``--kind dh``: the "mdh" Debye–Hückel sum (``debye_huckel_points``) of the peptide (149 atoms)
over the outer layer of an 81×97×81 grid at 0.5 Å around it (43,522 points), κ of 0.15 M.
``--kind coulomb``: φ_c (``coulomb_points``) of hca-bind's complex (2,500 atoms,
``benchmarks/apbs_inputs/hca-bind/complex.pqr``) over the outer layer of a 65³ grid at 1.5 Å
(24,578 points). The median of ten calls after one; ``--save``/``--compare`` the values.

    PYTHONPATH=$OLD python benchmarks/cpu_s35/point_sums.py --kind dh --save old.npy
    python benchmarks/cpu_s35/point_sums.py --kind dh --compare old.npy
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.backends.cpu import maps as CM
from pbsolver.molecule.maps import kappa_from_ionic_strength, outer_layer_points

ROOT = Path(__file__).resolve().parents[2]


def dh_case():
    atoms = pb.read_pqr(ROOT / "data" / "peptide.pqr")
    half = 0.5 * np.array([40, 48, 40])
    grid = pb.Grid((81, 97, 81), spacing=0.5, origin=tuple(atoms.positions.mean(0) - half))
    points = outer_layer_points(grid)[1]
    kappa = kappa_from_ionic_strength(0.15)
    return atoms, CM.debye_huckel_points, (points, atoms.positions, atoms.charges, atoms.radii,
                                           kappa, 694.7, 78.54, 2.0)  # fmt: skip


def coulomb_case():
    atoms = pb.read_pqr(ROOT / "benchmarks" / "apbs_inputs" / "hca-bind" / "complex.pqr")
    grid = pb.Grid((65, 65, 65), spacing=1.5, origin=tuple(atoms.positions.mean(0) - 48.0))
    points = outer_layer_points(grid)[1]
    return atoms, CM.coulomb_points, (points, atoms.positions, atoms.charges,
                                      pb.COULOMB_KJ / 2.0, 1e-12)  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["dh", "coulomb"], default="dh")
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args(argv)
    atoms, kernel, call = dh_case() if args.kind == "dh" else coulomb_case()
    values = kernel(*call)
    seconds = []
    for _ in range(10):
        start = time.perf_counter()
        values = kernel(*call)
        seconds.append(time.perf_counter() - start)
    print(f"{args.kind}: {len(call[0])} points, {len(atoms)} atoms: "
          f"{np.median(seconds) * 1e3:.2f} ms")  # fmt: skip
    if args.save:
        np.save(args.save, values)
    if args.compare:
        ref = np.load(args.compare)
        rel = np.abs((values - ref) / ref).max()
        of_max = np.abs(values - ref).max() / np.abs(ref).max()
        print(f"largest difference from {args.compare.name}: {rel:.1e} relative, "
              f"{of_max:.1e} of the largest value")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
