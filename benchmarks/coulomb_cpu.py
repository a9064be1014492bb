"""φ_c on the CPU: the direct sum against the multilevel sum (pbsolver.backends.cpu.coulomb_fast).

Cases: 1LPB chain A (data/1lpb_chainA.pqr, 1,252 atoms) on 65³, 129³ and 193³ grids, and the
10,016-atom assembly of benchmarks/maps_timing.py (8 copies of it) on 161³; each grid covers
the atoms plus ``--margin`` Å a side. Both methods are compiled (or loaded from numba's cache)
on a small grid first, then each is timed ``--repeat`` times; the best wall time and the
process CPU time of that run are kept. The table also gives the fast sum's largest error on
the nodes farther than one spacing from every charged atom, relative to the largest |φ_c|
there, its levels (grid sizes and reaches) and what ``method="auto"`` picks.

    python benchmarks/coulomb_cpu.py --out benchmarks/coulomb_cpu.json
    python benchmarks/coulomb_cpu.py --cases 65 129      # a subset
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
from scipy.spatial import cKDTree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from maps_timing import assembly  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.backends.cpu import coulomb_fast as CF  # noqa: E402
from pbsolver.backends.cpu import maps as CM  # noqa: E402
from pbsolver.molecule import maps  # noqa: E402

#: (label, atoms, nodes a side)
CASES = {
    "65": ("1lpb", 65),
    "129": ("1lpb", 129),
    "193": ("1lpb", 193),
    "10k": ("assembly", 161),
}


def timed(fn, repeat):
    """Best wall time of ``repeat`` runs and the process CPU time of that run, and the result."""
    best = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if best is None or w < best[0]:
            best = (w, c)
    return best, out


def far_error(grid, pos, ref, fast):
    """max |fast − ref| / max |ref| over the nodes farther than the largest spacing."""
    axes = grid.axes()
    far = np.zeros(grid.shape, dtype=bool)
    tree = cKDTree(pos)
    # plane by plane: the node list of a large grid would not fit beside the maps
    yz = np.stack(np.meshgrid(axes[1], axes[2], indexing="ij"), -1).reshape(-1, 2)
    for i, x in enumerate(axes[0]):
        pts = np.column_stack([np.full(len(yz), x), yz])
        d, _ = tree.query(pts)
        far[i] = (d > max(grid.spacing)).reshape(grid.shape[1:])
    return float(np.abs(fast[far] - ref[far]).max() / np.abs(ref[far]).max())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--margin", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    protein = pb.read_pqr(ROOT / "data" / "1lpb_chainA.pqr")
    # compile (or load) both methods on a small grid, so that no timing below includes it
    small = maps.grid_for_atoms(protein, 1.0, margin=2.0)
    args_small = (small.shape, small.origin, small.spacing, protein.positions, protein.charges)
    CM.coulomb_sum(*args_small, 1.0, method="direct")
    CF.coulomb_multilevel(*args_small, 1.0, levels=3)
    rows = []
    print(f"threads {os.cpu_count()}")
    print(
        f"{'case':>5} {'atoms':>6} {'grid':>15} {'h/Å':>6} {'direct s':>9} {'cpu s':>7} "
        f"{'fast s':>7} {'cpu s':>6} {'speed-up':>8} {'far err':>8} {'auto':>6}  levels"
    )
    for key in args.cases:
        which, n = CASES[key]
        atoms = protein if which == "1lpb" else assembly()
        lo, hi = atoms.bounds()
        h = float(np.max(hi - lo) + 2 * args.margin) / (n - 1)
        grid = maps.grid_for_atoms(atoms, h, shape=(n, n, n))
        keep = atoms.charges != 0
        pos, q = atoms.positions[keep], atoms.charges[keep]
        call = (grid.shape, grid.origin, grid.spacing, pos, q, 1.0)
        (wd, cd), ref = timed(lambda c=call: CM.coulomb_sum(*c, method="direct"), args.repeat)
        (wf, cf), fast = timed(lambda c=call: CM.coulomb_sum(*c, method="fast"), args.repeat)
        err = far_error(grid, pos, ref, fast)
        del ref, fast
        auto = "fast" if CF.use_fast("auto", grid.shape, grid.spacing, len(q)) else "direct"
        levels, _ = CF.plan_levels(grid.shape, grid.origin, grid.spacing, len(q))
        lev = " ".join(f"{g.shape[0]}({g.reach:.1f}Å)" for g in levels)
        rows.append({
            "case": key, "atoms": int(len(atoms)), "charged": int(len(q)),
            "shape": list(grid.shape), "spacing": h, "direct_wall_s": wd, "direct_cpu_s": cd,
            "fast_wall_s": wf, "fast_cpu_s": cf, "far_rel_error": err, "auto": auto,
            "levels": [{"shape": list(g.shape), "reach": g.reach} for g in levels],
        })  # fmt: skip
        print(f"{key:>5} {len(atoms):>6} {str(grid.shape):>15} {h:>6.3f} {wd:>9.2f} {cd:>7.2f} "
              f"{wf:>7.2f} {cf:>6.2f} {wd / wf:>7.1f}x {err:>8.1e} {auto:>6}  {lev}",
              flush=True)  # fmt: skip
    if args.out:
        meta = {
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "order": CF.ORDER,
            "reach": CF.REACH,
            "margin": args.margin,
            "repeat": args.repeat,
            "load_average": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d"),
        }
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
