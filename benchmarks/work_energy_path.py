"""Work against energy along a straight path: where exact forces stop conserving energy.

The peptide's atoms move in straight lines (random directions, ``--step`` Å rms per
coordinate a step) through a :class:`pbsolver.ReactionFieldCalculator` with exact forces on
the smooth vdW surface, grid held still. For each step k the discrepancy

    d_k = (E_{k+1} − E_k) + ½ (F_k + F_{k+1}) · Δx

is what the trapezoidal work misses: O(Δx³) where the energy is smooth, O(Δx²) where a force
jumps. The steps are split by whether some atom crossed a plane of grid nodes (where the
trilinear interpolation of φ_rf at the atoms has a kink; ``--interpolation cubic`` has none).
The sum of d over the steps is the drift an NVE integrator would see along this path.

    python benchmarks/work_energy_path.py --json benchmarks/forces/work_energy_path.json
    python benchmarks/work_energy_path.py --interpolation cubic \
        --json benchmarks/forces/work_energy_path_cubic.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import pbsolver as pb


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--step", type=float, default=0.004, help="Å rms a coordinate a step")
    p.add_argument("--spacing", type=float, default=0.7)
    p.add_argument("--surface", default="svdw")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--interpolation", default="linear", choices=["linear", "cubic"])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    velocity = np.random.default_rng(args.seed).normal(0.0, args.step, atoms.positions.shape)
    calc = pb.ReactionFieldCalculator(
        atoms, surface=args.surface, spacing=args.spacing, forces="exact", rtol=1e-10,
        margin=3.0, skin=4.0, eps_in=1.0, eps_out=78.5, backend="cpu", dtype=np.float64,
        interpolation=args.interpolation,
    )  # fmt: skip
    energies, forces, points = [], [], []
    start = time.perf_counter()
    for k in range(args.steps + 1):
        x = atoms.positions + k * velocity
        frame = calc.compute(x)
        if k and frame.regridded:
            raise SystemExit("the grid moved: use a larger skin")
        energies.append(frame.energy)
        forces.append(np.asarray(frame.forces))
        points.append(x)
    seconds = time.perf_counter() - start
    grid = calc.grid
    origin, h = np.asarray(grid.origin), np.asarray(grid.spacing)
    d, crossed = [], []
    for k in range(args.steps):
        dx = points[k + 1] - points[k]
        d.append(
            (energies[k + 1] - energies[k]) + 0.5 * float(np.sum((forces[k] + forces[k + 1]) * dx))
        )
        cells = [np.floor((points[j] - origin) / h) for j in (k, k + 1)]
        crossed.append(bool(np.any(cells[0] != cells[1])))
    d, crossed = np.array(d), np.array(crossed)
    out = {
        "args": vars(args),
        "grid": list(grid.shape),
        "seconds": seconds,
        "sum_of_discrepancies_kj_per_mol": float(d.sum()),
        "steps_with_a_plane_crossing": int(crossed.sum()),
        "mean_abs_d_with_crossing": float(np.abs(d[crossed]).mean()) if crossed.any() else None,
        "mean_abs_d_without_crossing": float(np.abs(d[~crossed]).mean())
        if (~crossed).any()
        else None,
        "energy_change_kj_per_mol": float(energies[-1] - energies[0]),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
