"""Time of the compiled check of a problem's host maps (``scan_maps``), one tree.

The maps of the peptide (``data/peptide.pqr``) at 0.5 Å, "mol", 0.15 M, ``Problem.from_atoms``'
8 Å margin: the three face maps, φ_c and κ̄² as :class:`pbsolver.Problem` holds them, scanned
``--repeat`` times; the median and the flags. Every new problem of a large host grid runs this
scan (``pbsolver.problem.SCAN_NODES``), so every CPU frame of the MD calculator does.

    PYTHONPATH=<tree> python benchmarks/cpu_s42/map_scan_time.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pbsolver as pb
from pbsolver.backends.cpu.validation import scan_maps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=50)
    args = p.parse_args(argv)
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    problem = pb.Problem.from_atoms(atoms, spacing=0.5, surface="mol", ionic_strength=0.15,
                                    margin=8.0)  # fmt: skip
    faces = tuple(np.ascontiguousarray(f) for f in problem.epsilon_faces)
    phi = np.ascontiguousarray(problem.phi_coulomb)
    kappa2 = np.ascontiguousarray(problem.kappa2)
    seconds = []
    for _ in range(args.repeat + 1):
        t0 = time.perf_counter()
        flags = scan_maps(faces, phi, kappa2)
        seconds.append(time.perf_counter() - t0)
    dtypes = ", ".join(str(a.dtype) for a in (*faces, phi, kappa2))
    print(f"{pb.__file__}: grid {problem.grid.shape} ({dtypes}); scan_maps median "
          f"{1e3 * statistics.median(seconds[1:]):.3f} ms of {args.repeat}; {flags}")  # fmt: skip


if __name__ == "__main__":
    main()
