"""Time to rtol 1e-6 on the GPU: SOR, multigrid (F/V/W) and MG-CG, next to CuPy's CG.

Same sphere problem as ``benchmarks/cpu_multigrid.py`` (ε 2 sphere of radius 6 Å in ε 80, three
off-centre charges, harmonic faces, zero Dirichlet boundary, 24 Å box of n³ nodes), given to
the solver as CuPy arrays (CuPy in, CuPy out). Each pbsolver row is a fresh ``pb.solve`` after
a warm-up solve and a set-up-only one: "seconds" is its wall time including its set-up (stencil
and hierarchy), "setup" that set-up alone (``maxiter=0``). A solve on the GPU keeps its grid's
workspace for the next problem of that grid (``LinearSystem.for_problem``), whose recorded
graphs then replay; before that workspace, a fresh solve replayed them only where CuPy's pool
handed back an earlier solve's addresses. "residual" is ‖b − Aφ‖₂/‖b‖₂ recomputed in float64
on the host (``operator.relative_residual``). The peer is ``cupyx.scipy.sparse.linalg.cg`` on
the assembled float64 matrix with a Jacobi preconditioner (what a CuPy user would write), rtol
1e-6.

    python benchmarks/gpu_solvers.py --sizes 129 257 --json out.json

``--new`` then times a fresh ``pb.solve`` of another problem of the same grid (the sphere's
radius 6.5 Å): "new", what a new problem of a known grid costs. ``--repeat K`` times K more
solves of the same problem through one ``Solver`` (the fastest is reported as "again").
``--fused-min-nodes N`` sets the multigrid smoother's threshold for its fused sweep
(:mod:`pbsolver.backends.cuda.fused_sweep`; 0: every level).
``--profile N`` runs one more solve of each pbsolver row (with ``--new``: of a third problem
of the grid) under cProfile and prints its N costliest functions by own time (host time: a
wait for the device shows as the call that waits). ``--cuda-profile`` runs one more solve of
the repeating ``Solver`` between ``cudaProfilerStart`` and ``cudaProfilerStop``, for Nsight
Compute's ``--profile-from-start off`` (``benchmarks/ncu_kernels.py`` sums its kernels):

    ncu --profile-from-start off --metrics gpu__time_duration.sum --export prof \
        python3 benchmarks/gpu_solvers.py --sizes 257 --methods mgcg --no-cupy-cg \
        --repeat 1 --cuda-profile
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pbsolver as pb  # noqa: E402
from pbsolver import operator as op  # noqa: E402
from pbsolver.bench import environment  # noqa: E402

METHODS = {
    "sor": ("sor", {}),
    "mg-F": ("multigrid", {"cycle": "F"}),
    "mg-V": ("multigrid", {"cycle": "V"}),
    "mg-W": ("multigrid", {"cycle": "W"}),
    "mgcg": ("mgcg", {}),
}


def to_device(problem):
    import cupy as cp

    kw = {"boundary": problem.boundary, "face_rule": problem.face_rule}
    return pb.Problem(
        problem.grid,
        cp.asarray(problem.epsilon),
        cp.asarray(problem.phi_coulomb),
        problem.eps_cavity,
        **kw,
    )


def run_pbsolver(label, problem_host, problem_dev, profile=0, repeat=0, cuda_profile=False,
                 other=None, third=None):  # fmt: skip
    import cupy as cp

    method, options = METHODS[label]
    pb.solve(problem_dev, method=method, backend="cuda", **options)  # warm-up, graphs
    cp.cuda.runtime.deviceSynchronize()
    setup = pb.solve(problem_dev, method=method, backend="cuda", maxiter=0, **options).seconds
    res = pb.solve(problem_dev, method=method, backend="cuda", **options)
    cp.cuda.runtime.deviceSynchronize()
    new = None
    if other is not None:  # a new problem of the same grid, after this one's solves
        new = pb.solve(other, method=method, backend="cuda", **options).seconds
        cp.cuda.runtime.deviceSynchronize()
    again = []
    solver = pb.Solver(method=method, backend="cuda", **options)
    for _ in range(repeat + 2 if repeat else 0):  # two to capture, then timed
        again.append(solver.solve(problem_dev).seconds)
    if cuda_profile:  # the repeated solve once more, for a kernel profiler
        cp.cuda.runtime.deviceSynchronize()
        cp.cuda.runtime.profilerStart()
        profiled = solver.solve(problem_dev)
        cp.cuda.runtime.deviceSynchronize()
        cp.cuda.runtime.profilerStop()
        print(
            f"--- n={problem_host.grid.shape[0]} {label}: {profiled.seconds:.4f} s, "
            f"{profiled.iterations} iterations, between profilerStart and profilerStop"
        )
    if profile:
        import cProfile
        import pstats

        # with --new: a fresh solve of a third problem of the grid (what "new" times)
        target = problem_dev if third is None else third
        prof = cProfile.Profile()
        prof.enable()
        profiled = pb.solve(target, method=method, backend="cuda", **options)
        cp.cuda.runtime.deviceSynchronize()
        prof.disable()
        what = "a third problem of the grid" if third is not None else "the same problem"
        print(f"--- n={problem_host.grid.shape[0]} {label}: {profiled.seconds:.4f} s, {what}, "
              "profiled")  # fmt: skip
        pstats.Stats(prof).sort_stats("tottime").print_stats(profile)
    return {
        "n": problem_host.grid.shape[0],
        "solver": f"pbsolver {label} (cuda)",
        "iterations": res.iterations,
        "setup": setup,
        "seconds": res.seconds,
        "again": min(again[2:]) if again else None,
        "new": new,
        "residual": op.relative_residual(problem_host, cp.asnumpy(res.phi_rf)),
        "reported": res.residual,
        "converged": res.converged,
    }


def run_cupy_cg(problem_host):
    import cupy as cp
    import cupyx.scipy.sparse as csp
    import cupyx.scipy.sparse.linalg as cspla

    A, b, _ = op.assemble_matrix(problem_host)
    A_dev = csp.csr_matrix(A.tocsr())
    b_dev = cp.asarray(b)
    inv_diag = 1.0 / A_dev.diagonal()
    M = cspla.LinearOperator(A.shape, matvec=lambda v: inv_diag * v, dtype=np.float64)
    count = [0]

    def callback(_xk):
        count[0] += 1

    cspla.cg(A_dev, b_dev, rtol=1e-6, M=M, maxiter=20)  # warm-up (kernels compiled)
    cp.cuda.runtime.deviceSynchronize()
    t0 = time.perf_counter()
    x, info = cspla.cg(A_dev, b_dev, rtol=1e-6, M=M, maxiter=10000, callback=callback)
    cp.cuda.runtime.deviceSynchronize()
    seconds = time.perf_counter() - t0
    residual = float(np.linalg.norm(b - A @ cp.asnumpy(x)) / np.linalg.norm(b))
    return {
        "n": problem_host.grid.shape[0],
        "solver": "cupyx cg + Jacobi, f64, assembled",
        "iterations": count[0],
        "setup": 0.0,
        "seconds": seconds,
        "residual": residual,
        "reported": None,
        "converged": info == 0,
    }


def main(argv=None):
    from cpu_multigrid import sphere_problem

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[129, 257])
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    ap.add_argument("--sor-max", type=int, default=257)
    ap.add_argument("--no-cupy-cg", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--profile", type=int, default=0, help="cProfile: print the N costliest")
    ap.add_argument("--repeat", type=int, default=0, help="time K more solves of one Solver")
    ap.add_argument(
        "--new",
        action="store_true",
        help="then time a fresh solve of another problem of the same grid ('new')",
    )
    ap.add_argument(
        "--cuda-profile",
        action="store_true",
        help="one more repeated solve between cudaProfilerStart and Stop (ncu)",
    )
    ap.add_argument(
        "--fused-min-nodes",
        type=int,
        help="the multigrid smoother's fused sweep from levels of this many nodes (0: all)",
    )
    args = ap.parse_args(argv)
    if args.fused_min_nodes is not None:
        from pbsolver.backends.cuda import fused_sweep

        fused_sweep.FUSED_MIN_NODES = args.fused_min_nodes
    rows = []
    for n in args.sizes:
        host = sphere_problem(n)
        dev = to_device(host)
        other = to_device(sphere_problem(n, radius=6.5)) if args.new else None
        third = to_device(sphere_problem(n, radius=5.5)) if args.new and args.profile else None
        for label in args.methods:
            if label == "sor" and n > args.sor_max:
                continue
            rows.append(
                run_pbsolver(
                    label, host, dev, args.profile, args.repeat, args.cuda_profile, other, third
                )  # fmt: skip
            )
            print(rows[-1], flush=True)
        if not args.no_cupy_cg:
            rows.append(run_cupy_cg(host))
            print(rows[-1], flush=True)
    info = environment(gpu=True)
    print(f"{'n':>4} {'solver':38} {'iter':>6} {'setup s':>8} {'total s':>8} {'again s':>8} "
          f"{'new s':>8} {'residual':>9} conv")  # fmt: skip
    for r in rows:
        again, new = (f"{r[k]:>8.4f}" if r.get(k) is not None else f"{'-':>8}"
                      for k in ("again", "new"))  # fmt: skip
        print(
            f"{r['n']:>4} {r['solver']:38} {r['iterations']:>6} {r['setup']:>8.4f} "
            f"{r['seconds']:>8.4f} {again} {new} {r['residual']:>9.2e} {r['converged']}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
