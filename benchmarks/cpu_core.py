"""SOR against Jacobi on this CPU, and how SOR's sweep count grows with n (issue: core solver).

Problem: a dielectric sphere (ε 2, radius a quarter of the box) in ε 78.54 with three
off-centre charges, φ_c analytic in ε_c = 2, harmonic faces, zero Dirichlet boundary, rtol 1e-6
(float32 storage with float64 refinement, the default). Every number printed comes from this run.

    python benchmarks/cpu_core.py [--jacobi-sizes 65 97] [--sor-sizes 33 65 129] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numba
import numpy as np

import pbsolver as pb

CHARGES = [((0.8, 0.3, -0.5), 1.0), ((-1.2, 0.9, 0.4), -0.5), ((0.2, -1.5, 1.1), 0.5)]


def sphere_problem(n, box=24.0):
    h = box / (n - 1)
    grid = pb.Grid((n, n, n), spacing=h, origin=(-box / 2,) * 3)
    x, y, z = grid.coordinates()
    eps = np.where(x * x + y * y + z * z < (box / 4) ** 2, 2.0, 78.54)
    phi_c = np.zeros(grid.shape)
    for (cx, cy, cz), q in CHARGES:
        r = np.sqrt((x - cx) ** 2 + (y - cy) ** 2 + (z - cz) ** 2 + 1e-3)
        phi_c += pb.COULOMB_KJ * q / (2.0 * r)
    return pb.Problem(grid, eps, phi_c, 2.0, face_rule="harmonic")


def run(method, n, **kw):
    p = sphere_problem(n)
    pb.solve(p, method=method, backend="cpu", maxiter=20)  # compile / warm caches
    res = pb.solve(p, method=method, backend="cpu", **kw)
    return {
        "method": method,
        "n": n,
        "iterations": res.iterations,
        "seconds": round(res.seconds, 3),
        "residual": res.residual,
        "converged": res.converged,
    }


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--jacobi-sizes", type=int, nargs="*", default=[65, 97])
    ap.add_argument("--sor-sizes", type=int, nargs="*", default=[33, 65, 129])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    for n in args.jacobi_sizes:
        rows.append(run("sor", n))
        rows.append(run("jacobi", n))
    for n in args.sor_sizes:
        if n not in args.jacobi_sizes:
            rows.append(run("sor", n))
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "pbsolver": pb.__version__,
    }
    print(" ".join(f"{k}={v}" for k, v in info.items()))
    print(f"{'method':8} {'n':>5} {'iterations':>10} {'seconds':>9} {'residual':>10} converged")
    for r in rows:
        print(
            f"{r['method']:8} {r['n']:>5} {r['iterations']:>10} {r['seconds']:>9.3f} "
            f"{r['residual']:>10.2e} {r['converged']}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
