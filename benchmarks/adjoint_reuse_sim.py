"""The adjoint solve on the CUDA backend with and without the forward solve's system (a check).

Run under numba's CUDA simulator where no GPU is lent (several minutes on 2 cores):

    NUMBA_ENABLE_CUDASIM=1 python benchmarks/adjoint_reuse_sim.py

or on a GPU as it is. A random molecule ("svdw", 0.1 M) on an 11×11×9 grid; float32 multigrid
with float64 refinement to rtol 1e-5. Prints the forward solve, then the adjoint's cycles
with a system of its own and with the forward's (``LinearSystem.with_rhs``), their largest
difference (0 expected: the same operator, hierarchy and arithmetic), and whether the forward
solution is intact after both.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first

import pbsolver as pb  # noqa: E402
from pbsolver.forces.adjoint import adjoint_solve  # noqa: E402
from pbsolver.molecule import maps as M  # noqa: E402


def main():
    rng = np.random.default_rng(8)
    n = 6
    atoms = pb.Atoms(rng.normal(0, 1.2, (n, 3)), rng.uniform(-1, 1, n), rng.uniform(1.2, 1.8, n))
    grid = M.grid_for_atoms(atoms, 0.9, 0.5)
    problem = pb.Problem.from_maps(M.build_maps(atoms, grid, surface="svdw", ionic_strength=0.1))
    backend = "cuda"
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":  # small launches, NumPy arrays
        from pbsolver.backends.cuda import CUDABackend, KernelConfig

        backend = CUDABackend(device="numba", config=KernelConfig(
            point_block=(4, 4, 2), jacobi_block=(8, 4, 2), reduce_block=(8, 4), reduce_chunk=3,
            flat_threads=32))  # fmt: skip
    solver = pb.Solver(method="multigrid", backend=backend, rtol=1e-5, dtype=np.float32)
    forward = solver.solve(problem, keep_system=True)
    print(f"grid {grid.shape}; forward on {forward.backend}: {forward.iterations} cycles, "
          f"converged {forward.converged}")  # fmt: skip
    source = rng.normal(size=grid.shape)
    own, r_own = adjoint_solve(problem, source, solver, x0=forward.phi_rf)
    reused, r_reused = adjoint_solve(problem, source, solver, x0=forward.phi_rf,
                                     system=forward.system)  # fmt: skip
    diff = float(np.abs(np.asarray(own) - np.asarray(reused)).max())
    print(f"adjoint: {r_own.iterations} cycles (own system), {r_reused.iterations} (forward's); "
          f"largest difference {diff:g} of {float(np.abs(np.asarray(own)).max()):.3g}")  # fmt: skip
    again = solver.solve(problem)
    print("forward solution intact:", bool(np.array_equal(np.asarray(again.phi_rf),
                                                         np.asarray(forward.phi_rf))))  # fmt: skip


if __name__ == "__main__":
    main()
