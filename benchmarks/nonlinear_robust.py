"""Robustness of the nonlinear solve (issue 20): a nucleic acid on n³ grids in 1 M and 0.01 M salt.

The RNA hairpin of ``benchmarks/npbe/boxb19_rna.pqr`` (boxB, 19 nucleotides, −18 e; from APBS'
``examples/protein-rna``) by default, on an n³ grid whose spacing makes the molecule and a
``--margin`` fit, SES surface (1.4 Å probe), ε 2 / 78.54, 1:1 salt with 2 Å ions, Debye–Hückel
boundary values; the nonlinear equation solved to ``--rtol`` (1e-6) on ``--backend`` (cpu or
cuda), float32 with float64 refinement. Each row: whether it converged and why it stopped
(``result.reason``), Newton steps and linear iterations, the largest |zφ/kT| over the
ion-accessible nodes, the polar solvation energy and its terms, the maps' and the solve's wall
times, and memory: pbsolver's estimate (:func:`pbsolver.resources.estimate_bytes`) against
the measured peak (CPU: growth of the peak resident set during the solve; CUDA: the bytes CuPy's
pool held after the solve beyond the problem's maps, the pool emptied before it). The exit
status is 1 when a solve did not converge.

With 2 Å ions (the default) the ion-accessible region starts 2 Å beyond the atoms' spheres and
|zφ/kT| there stays below 10 on this RNA (9 at 0.01 M); ``--ion-radius 0`` lets the ions touch
the spheres, where it passes 20 kT at 0.01 M: the strongly nonlinear case.

    python benchmarks/nonlinear_robust.py --n 97 --backend cpu
    python benchmarks/nonlinear_robust.py --n 385 --backend cuda --json robust_h200.json
    python benchmarks/nonlinear_robust.py --n 385 --backend cuda --ion-radius 0
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.arrays import to_numpy
from pbsolver.backends import get_backend
from pbsolver.io.units import kT_kj_per_mol
from pbsolver.molecule.energy import solvation_terms
from pbsolver.resources import estimate_bytes, format_bytes

HERE = Path(__file__).resolve().parent
PQR = HERE / "npbe" / "boxb19_rna.pqr"


def resident(key: str = "VmHWM") -> int | None:
    """Peak (VmHWM) or current (VmRSS) resident bytes of this process (Linux), or None."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak() -> bool:
    """Reset VmHWM to the current resident set (Linux ≥ 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def build(atoms, n, margin, ionic_strength, ion_radius, maps_backend):
    """The n³ nonlinear problem of ``atoms`` (spacing chosen so that atoms and margin fit)."""
    lo, hi = atoms.bounds(with_radii=True)
    spacing = (float(np.max(hi - lo)) + 2.0 * margin) / (n - 1)
    center = tuple(0.5 * (lo + hi) + 0.37 * spacing)  # off the nodes: no charge on a node
    return pb.Problem.from_atoms(atoms, spacing=spacing, shape=(n, n, n), center=center,
                                 ionic_strength=ionic_strength, ion_radius=ion_radius,
                                 nonlinear=True, maps_backend=maps_backend)  # fmt: skip


def run(atoms, n, salt, args) -> dict:
    """One grid and salt: maps, the nonlinear solve, its report."""
    start = time.perf_counter()
    problem = build(atoms, n, args.margin, salt, args.ion_radius, args.maps_backend)
    t_maps = time.perf_counter() - start
    solver = pb.Solver(backend=args.backend, method=args.method, rtol=args.rtol, dtype=args.dtype)
    method = solver.method_for(get_backend(args.backend), problem)
    estimate = estimate_bytes(problem.grid.shape, method, args.backend, args.dtype,
                              nonlinear=True)  # fmt: skip
    gc.collect()
    pool = None
    if args.backend == "cuda":
        import cupy as cp

        pool = cp.get_default_memory_pool()
        pool.free_all_blocks()
        problem = problem.to("cupy")
        held0 = pool.total_bytes()
    else:
        reset_peak()
        base = resident("VmRSS")
    start = time.perf_counter()
    res = solver.solve(problem)
    seconds = time.perf_counter() - start
    if pool is not None:
        measured = pool.total_bytes() - held0
        what = "bytes CuPy's pool held after the solve, beyond the problem's maps"
    else:
        peak = resident("VmHWM")
        measured = None if peak is None or base is None else peak - base
        what = "peak resident growth during the solve"
    host = problem.to("numpy")
    phi = to_numpy(res.phi_rf)
    salty = host.kappa2 > 0
    kT = kT_kj_per_mol(host.temperature)
    x = np.abs(host.phi_coulomb[salty] + phi[salty]) * host.ion_valence / kT
    terms = solvation_terms(atoms, host, phi) if res.newton_steps is not None else None
    return {
        "n": n,
        "spacing": host.grid.spacing[0],
        "ionic_strength": salt,
        "backend": args.backend,
        "method": res.method,
        "dtype": args.dtype,
        "converged": res.converged,
        "reason": res.reason,
        "newton_steps": res.newton_steps,
        "linear_iterations": res.iterations,
        "residual": res.residual,
        "history": list(res.residual_norms),
        "max_zphi_kT": float(x.max()) if x.size else 0.0,
        "nodes_beyond_20kT": int(np.count_nonzero(x > 20.0)),
        "energy_kj_mol": None if terms is None else terms.total,
        "terms": None
        if terms is None
        else {
            "fixed": terms.fixed,
            "mobile": terms.mobile,
            "osmotic": terms.osmotic,
        },  # fmt: skip
        "maps_s": t_maps,
        "solve_s": seconds,
        "memory_estimate_bytes": estimate,
        "memory_measured_bytes": measured,
        "memory_measured": what,
    }


def warm_up(atoms, args):
    """Compile the kernels (and capture nothing big) on a small grid."""
    problem = build(atoms, 33, args.margin, 0.1, args.ion_radius, args.maps_backend)
    if args.backend == "cuda":
        problem = problem.to("cupy")
    pb.Solver(backend=args.backend, method=args.method, rtol=args.rtol, dtype=args.dtype).solve(
        problem
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[385], help="nodes a side")
    ap.add_argument("--salts", type=float, nargs="+", default=[1.0, 0.01], help="mol/L")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--maps-backend", default=None, choices=("cpu", "cuda"),
                    help="where the maps are built (default: --backend)")  # fmt: skip
    ap.add_argument("--method", default="auto")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                    help="storage (float32: with float64 refinement)")  # fmt: skip
    ap.add_argument("--margin", type=float, default=10.0, help="Å")
    ap.add_argument("--ion-radius", type=float, default=2.0, help="Å")
    ap.add_argument("--pqr", type=Path, default=PQR)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.maps_backend = args.maps_backend or args.backend
    atoms = pb.read_pqr(args.pqr)
    print(f"{args.pqr.name}: {len(atoms)} atoms, charge {atoms.charges.sum():+.2f} e, "
          f"{args.backend}, rtol {args.rtol:g}, {platform.node()}", flush=True)  # fmt: skip
    warm_up(atoms, args)
    print("| n | h (Å) | salt (M) | method | reason | Newton | iterations | max \\|zφ/kT\\| "
          "| ΔG (kJ/mol) | maps s | solve s | memory est. / measured |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    failed = False
    for n in args.n:
        for salt in args.salts:
            r = run(atoms, n, salt, args)
            rows.append(r)
            failed |= not r["converged"]
            measured = r["memory_measured_bytes"]
            energy = "–" if r["energy_kj_mol"] is None else f"{r['energy_kj_mol']:.1f}"
            print(
                f"| {n} | {r['spacing']:.3f} | {salt:g} | {r['method']} | {r['reason']} | "
                f"{r['newton_steps']} | {r['linear_iterations']} | {r['max_zphi_kT']:.1f} | "
                f"{energy} | {r['maps_s']:.1f} | {r['solve_s']:.1f} | "
                f"{format_bytes(r['memory_estimate_bytes'])} / "
                f"{'–' if measured is None else format_bytes(measured)} |",
                flush=True,
            )
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "node": platform.node(),
            "cpus": os.cpu_count(),
        },  # fmt: skip
        "pqr": args.pqr.name,
        "atoms": len(atoms),
        "net_charge": float(atoms.charges.sum()),
        "command": "python benchmarks/nonlinear_robust.py " + " ".join(argv or sys.argv[1:]),
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
