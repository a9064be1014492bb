"""The exact forces' error against the adjoint solve's tolerance (``adjoint_rtol``).

One trajectory (``trajectory.frames_of``) through :class:`pbsolver.ReactionFieldCalculator`
(``forces="exact"``, ``engine="stacked"``, batches of ``--batch``, ``compute_batch``) three
batches long, for each pair of forward ``rtol`` and ``adjoint_rtol`` below; the last batch's
forces are compared with those of a run at ``rtol = adjoint_rtol = 1e-10``: ‖F − F_ref‖/‖F_ref‖
over all frames and atoms. Beside each, the adjoint solve's iterations in each batch (the first
starts cold, the later ones from the last λ). The default ``adjoint_rtol`` (10 × rtol) is
chosen from these rows: the adjoint's share of the error no larger than the forward solve's.

    python benchmarks/adjoint_tolerance.py --pqr data/1lpb_chainA.pqr --spacing 0.8 --batch 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.md.engine import StackedFrames  # noqa: E402

#: (forward rtol, adjoint rtol) pairs, after the reference (1e-10, 1e-10).
PAIRS = [(1e-6, 1e-6), (1e-6, 1e-5), (1e-6, 1e-4), (1e-6, 1e-3), (1e-10, 1e-6), (1e-10, 1e-5),
         (1e-10, 1e-4)]  # fmt: skip


def counting_adjoint_iterations():
    """Wrap :meth:`StackedFrames.solve_adjoint` to record each call's iterations; the list."""
    counts = []
    solve = StackedFrames.solve_adjoint

    def counted(self, *args, **kwargs):
        lam, outcome = solve(self, *args, **kwargs)
        counts.append(int(outcome.iterations))
        return lam, outcome

    StackedFrames.solve_adjoint = counted
    return counts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pqr", default=str(pb.data.path("peptide.pqr")))
    p.add_argument("--spacing", type=float, default=0.8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--surface", choices=["vdw", "mol", "smol"], default="mol")
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    args = p.parse_args(argv)
    atoms = pb.read_pqr(args.pqr)
    b = args.batch
    frames = frames_of(atoms, 3 * b, drift=0.005, wiggle=0.01)
    counts = counting_adjoint_iterations()
    maps = "cuda" if args.backend == "cuda" else "cpu"

    def forces(rtol, adjoint_rtol):
        counts.clear()
        calc = pb.ReactionFieldCalculator(
            atoms, forces="exact", engine="stacked", spacing=args.spacing, surface=args.surface,
            ionic_strength=0.15, backend=args.backend, margin=6.0, skin=1.0, rtol=rtol,
            adjoint_rtol=adjoint_rtol, map_options={"maps_backend": maps},
        )  # fmt: skip
        last = [calc.compute_batch(frames[k * b : (k + 1) * b]) for k in range(3)][-1]
        return np.array([np.asarray(fr.forces) for fr in last]), list(counts)

    ref, _ = forces(1e-10, 1e-10)
    print(
        f"{Path(args.pqr).name}: {len(atoms)} atoms, surface {args.surface}, h {args.spacing} "
        f"Å, 0.15 M, {args.backend}, 3 batches of {b}; reference rtol = adjoint_rtol = 1e-10"
    )
    print("rtol    adjoint_rtol  ‖F − F_ref‖/‖F_ref‖  adjoint iterations a batch  seconds")
    for rtol, adjoint_rtol in PAIRS:
        t0 = time.perf_counter()
        f, its = forces(rtol, adjoint_rtol)
        err = np.linalg.norm(f - ref) / np.linalg.norm(ref)
        print(f"{rtol:<7.0e} {adjoint_rtol:<13.0e} {err:19.2e}  {str(its):26s}  "
              f"{time.perf_counter() - t0:7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
