r"""How many SES lines the receptor recomputes from its complex's (issue 22).

For the first frame of the exported FKBP–DSS frames (``mmpbsa_frames.py export``), on a grid of
the exported shape and spacing centred on the frame's atoms: the receptor atoms whose accessible
sphere meets the ligand's (:func:`pbsolver.molecule.part_surface.changed_atoms`), and per axis
the lines recomputed (:func:`~pbsolver.molecule.part_surface.changed_lines`) against the lines
of their bounding window and those of the old window (3·max R + r_p around the ligand's box).

    python benchmarks/part_surface_lines.py .gpu/fkbp_frames.npz
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import pbsolver as pb
from pbsolver.molecule.maps import grid_for_atoms
from pbsolver.molecule.part_surface import LINE_SLACK, changed_atoms, changed_lines, part_reach


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz")
    p.add_argument("--probe", type=float, default=1.4)
    args = p.parse_args(argv)
    data = np.load(args.npz)
    atoms = pb.Atoms(data["positions"][0], data["charges"], data["radii"])
    grid = grid_for_atoms(atoms, float(data["spacing"]), shape=tuple(int(s) for s in data["shape"]))
    rec, lig = atoms[data["receptor"]], atoms[data["ligand"]]
    centres, acc = changed_atoms(rec, lig, args.probe)
    print(f"changed atoms: {len(centres) - len(lig)} of {len(rec)} receptor atoms, and "
          f"{len(lig)} ligand atoms; grid {grid.shape}")  # fmt: skip
    flags = changed_lines(np, grid.shape, grid.spacing, np.asarray([grid.origin]),
                          np.zeros(len(centres), dtype=np.int64), centres,
                          acc + args.probe + LINE_SLACK)  # fmt: skip
    reach = part_reach(atoms.radii, args.probe)
    lo, hi = lig.positions.min(axis=0), lig.positions.max(axis=0)
    for axis, flag in enumerate(flags):
        a1, a2 = [a for a in range(3) if a != axis]
        flag = flag.reshape(grid.shape[a1], grid.shape[a2])
        i1, i2 = np.nonzero(flag)
        window = (i1.max() - i1.min() + 1) * (i2.max() - i2.min() + 1)
        old = 1
        for a in (a1, a2):
            h, o = grid.spacing[a], grid.origin[a]
            first = max(0, math.floor((lo[a] - reach - h - o) / h))
            last = min(grid.shape[a] - 1, math.ceil((hi[a] + reach + h - o) / h))
            old *= last - first + 1
        print(f"axis {axis}: {int(flag.sum())} lines recomputed, {window} in their window, "
              f"{old} in the old window, {flag.size} in all")  # fmt: skip


if __name__ == "__main__":
    main()
