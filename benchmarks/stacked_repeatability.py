"""Whether the stacked engine gives the same energies run after run, and the general path's.

The colipase frames of ``benchmarks/forces_cost.py`` (1,252 atoms, 0.5 Å, 0.15 M, ``--surface``):
a ``ReactionFieldCalculator(engine="stacked")`` is given the warm-up batch of 32, then the same
batch of 32 frames ``--repeats`` times. Prints each repeat's seconds and its largest relative
energy difference from the first, and, for the first ``--check`` frames, the general path's
energy on the stacked engine's own grid (maps, solve, energy of :mod:`pbsolver.molecule`).

    python benchmarks/stacked_repeatability.py --backend cuda --surface mol
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.molecule.energy import reaction_field_terms  # noqa: E402
from pbsolver.molecule.maps import build_maps  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--surface", choices=["vdw", "mol", "smol"], default="mol")
    p.add_argument("--pqr", default=str(pb.data.path("1lpb_chainA.pqr")))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check", type=int, default=2)
    args = p.parse_args(argv)
    atoms = pb.read_pqr(args.pqr)
    frames = frames_of(atoms, 34, drift=0.005, wiggle=0.01)
    physics = pb.PhysicsOptions(surface=args.surface, ionic_strength=0.15)
    calc = pb.ReactionFieldCalculator(
        atoms, engine="stacked", spacing=0.5, physics=physics, backend=args.backend, rtol=1e-6,
        margin=8.0, skin=2.0, map_options={"maps_backend": args.backend},
    )  # fmt: skip
    calc.compute_batch(frames[:32])
    runs = []
    for r in range(args.repeats):
        start = time.perf_counter()
        out = calc.compute_batch(frames[2:34])
        seconds = time.perf_counter() - start
        e = np.array([fr.energy for fr in out])
        runs.append(e)
        diff = np.abs(e / runs[0] - 1).max()
        print(f"repeat {r}: {seconds:.3f} s, {out[0].iterations} iterations, largest relative "
              f"difference from repeat 0 {diff:.2e}; grid {out[0].grid}")  # fmt: skip
    grid = out[0].grid
    solver = pb.Solver(backend=args.backend, rtol=1e-9, dtype=np.float64)
    for k in range(args.check):
        a = calc.atoms_at(frames[2 + k])
        maps = build_maps(a, grid, physics=physics, maps_backend=args.backend)
        res = solver.solve(pb.Problem.from_maps(maps))
        phi = res.phi_rf.get() if hasattr(res.phi_rf, "get") else res.phi_rf
        e = float(np.sum(reaction_field_terms(a, grid, phi)))
        print(f"frame {2 + k}: stacked {runs[0][k]:.6f}, general path on its grid {e:.6f} "
              f"kJ/mol, relative {abs(runs[0][k] / e - 1):.2e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
