r"""The multilevel φ_c on APBS's focusing grids: the plan, its time per level count, its accuracy.

For pka-lig's complex (``benchmarks/apbs_inputs/pka-lig/bx6_7_bin_apbs.pqr``) on its coarse
grid (97³ over 70 Å, centred on the complex) and its fine grid (97³ at 0.25 Å, centred on the
ligand), as APBS places them: the levels :func:`~pbsolver.backends.cpu.coulomb_fast.plan_levels`
picks with and without the atoms' positions, and the time of
:func:`~pbsolver.backends.cpu.coulomb_fast.coulomb_multilevel` with each forced level count
(best of ``--repeats``, after a call that compiles).

``--accuracy`` also compares the multilevel sum with the float64 direct sum on random
molecules (atoms on, near and off nodes): the largest error on the nodes within a spacing of
an atom (but not on one) and on the nodes farther away, relative to max|φ_c| on the latter.

    python benchmarks/coulomb_levels.py --accuracy
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

import pbsolver as pb
from pbsolver.backends.cpu import coulomb_fast as CF
from pbsolver.backends.cpu import maps as CM

HERE = Path(__file__).resolve().parent / "apbs_inputs" / "pka-lig"


def grids():
    """(name, shape, origin, spacing) of pka-lig's coarse and fine grids; the complex's atoms."""
    atoms = pb.read_pqr(HERE / "bx6_7_bin_apbs.pqr")
    lig = pb.read_pqr(HERE / "bx6_7_lig_apbs.pqr")
    centre = {
        "coarse": 0.5 * (atoms.positions.min(0) + atoms.positions.max(0)),
        "fine": 0.5 * (lig.positions.min(0) + lig.positions.max(0)),
    }
    out = []
    for name, h in (("coarse", 70.0 / 96), ("fine", 0.25)):
        out.append((name, (97, 97, 97), tuple(centre[name] - 48 * h), (h, h, h)))
    return out, atoms


def timing(repeats):
    specs, atoms = grids()
    q = atoms.charges
    pos = atoms.positions[q != 0]
    for name, shape, origin, h in specs:
        plain, _ = CF.plan_levels(shape, origin, h, len(pos))
        placed, _ = CF.plan_levels(shape, origin, h, len(pos), pos=pos)
        sizes = [g.shape[0] for g in plain], [g.shape[0] for g in placed]
        print(f"{name}: {len(pos)} charged atoms; levels planned without positions {sizes[0]}, "
              f"with positions {sizes[1]}")  # fmt: skip
        for levels in (2, 3, 4):
            CF.coulomb_multilevel(shape, origin, h, atoms.positions, q, 1.0, levels=levels)
            best = np.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                CF.coulomb_multilevel(shape, origin, h, atoms.positions, q, 1.0, levels=levels)
                best = min(best, time.perf_counter() - t0)
            print(f"  {levels} levels: {best:.3f} s")


def accuracy(seeds):
    for seed in seeds:
        rng = np.random.default_rng(seed)
        shape, spacing, origin = (41, 41, 41), (0.35, 0.35, 0.35), (-3.0, 1.0, 2.0)
        lo = np.asarray(origin)
        hi = lo + (np.asarray(shape) - 1) * np.asarray(spacing)
        pos = rng.uniform(lo + 0.2 * (hi - lo), hi - 0.2 * (hi - lo), (60, 3))
        idx = [rng.integers(1, n - 1, 3) for n in shape]
        on = lo + np.stack(idx, axis=1) * np.asarray(spacing)  # three atoms on nodes
        pos = np.vstack([pos, on, on[:1] + np.array([0.3, -0.2, 0.1]) * spacing[0]])
        q = rng.normal(0.0, 0.5, len(pos))
        fast = CF.coulomb_multilevel(shape, origin, spacing, pos, q, 1.0, levels=3)
        ref = CM.coulomb_sum(shape, origin, spacing, pos, q, 1.0, method="direct")
        axes = [o + h * np.arange(n) for n, o, h in zip(shape, origin, spacing, strict=True)]
        pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
        far = (cKDTree(pos).query(pts)[0] > max(spacing)).reshape(shape)
        near = ~far & np.isfinite(ref)
        scale = np.abs(ref[far]).max()
        with np.errstate(invalid="ignore"):  # inf − inf on the atoms' nodes (not compared)
            err = np.abs(fast - ref)
        print(f"seed {seed}: far nodes {err[far].max() / scale:.2e}, "
              f"near nodes ({int(near.sum())}) {err[near].max() / scale:.2e} "
              "of max|φ_c| on far nodes")  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--accuracy", action="store_true")
    args = ap.parse_args(argv)
    timing(args.repeats)
    if args.accuracy:
        accuracy((3, 4))


if __name__ == "__main__":
    main()
