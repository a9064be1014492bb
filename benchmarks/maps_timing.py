"""Time the map builders on a 10,016-atom protein assembly on a 161³ grid (CPU backend).

The assembly is 8 copies of 1LPB chain A (data/1lpb_chainA.pqr, 1,252 atoms) on a 2×2×2
lattice 40/34/40 Å apart: protein-like atom density and surface, 10,016 atoms. Each builder
is run once to compile (numba caches to disk) and then timed ``--repeat`` times; the best
wall time and the process CPU time of that run are printed and written as JSON.

    python benchmarks/maps_timing.py --out benchmarks/maps_timing.json
    python benchmarks/maps_timing.py --backend cuda      # on a GPU machine (host copies included)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pbsolver as pb  # noqa: E402
from pbsolver.molecule import maps  # noqa: E402


def assembly(copies=(2, 2, 2), offset=(40.0, 34.0, 40.0)):
    """8 translated copies of the shipped protein (10,016 atoms)."""
    base = pb.read_pqr(ROOT / "data" / "1lpb_chainA.pqr")
    parts = []
    for i in range(copies[0]):
        for j in range(copies[1]):
            for k in range(copies[2]):
                parts.append(base.positions + np.array([i, j, k]) * np.asarray(offset))
    n = len(parts)
    return pb.Atoms(np.vstack(parts), np.tile(base.charges, n), np.tile(base.radii, n))


def timed(fn, repeat):
    fn()  # compile / load the numba cache
    best = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if best is None or w < best[0]:
            best = (w, c)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, default=161)
    ap.add_argument("--margin", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="one copy on 65³ (smoke test)")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    atoms = pb.read_pqr(ROOT / "data" / "1lpb_chainA.pqr") if args.small else assembly()
    n = 65 if args.small else args.shape
    lo, hi = atoms.bounds()
    h = float(np.max(hi - lo) + 2 * args.margin) / (n - 1)
    grid = maps.grid_for_atoms(atoms, h, shape=(n, n, n))
    print(f"{len(atoms)} atoms, grid {grid.shape}, h = {h:.3f} Å, threads {os.cpu_count()}")
    be = args.backend
    jobs = {
        "faces mol (SES)": lambda: maps.face_fractions(atoms, grid, "mol", backend=be),
        "faces vdw": lambda: maps.face_fractions(atoms, grid, "vdw", backend=be),
        "kappa2 (I=0.15 M)": lambda: maps.kappa2_map(atoms, grid, 0.15, backend=be),
        "phi_c direct sum": lambda: maps.coulomb_potential(atoms, grid, 2.0, backend=be),
        "boundary mdh": lambda: maps.boundary_values(atoms, grid, 2.0, 78.54, 0.15, backend=be),
    }
    rows = []
    for name, fn in jobs.items():
        wall, cpu = timed(fn, args.repeat)
        rows.append({"map": name, "wall_s": wall, "cpu_s": cpu})
        print(f"{name:22s} wall {wall:8.3f} s   cpu {cpu:8.3f} s", flush=True)
    if args.out:
        meta = {
            "atoms": len(atoms),
            "shape": list(grid.shape),
            "spacing": h,
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "backend": be,
            "date": time.strftime("%Y-%m-%d"),
        }
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
