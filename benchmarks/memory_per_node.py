"""Peak memory per grid node of a default solve, and who holds it (issue 18).

The problem is :func:`pbsolver.bench.random_problem` with salt: ε 1 in four random spheres in
ε 80, three charges, κ̄² outside, zero Dirichlet boundary (the issue's case), solved with the
public :class:`pbsolver.Solver` (``method="auto"`` unless ``--method``, float32 storage with
float64 refinement, rtol 1e-6; the method that ran is printed).

Peak
    CPU: the peak of ``tracemalloc`` (NumPy registers every array buffer with it; numba's own
    small per-plane partials are not traced) during ``Solver.solve``, less what was traced
    before it, i.e. the solve's own arrays on top of the problem's. CUDA: the CuPy memory
    pool's held bytes after the solve less those before it (the pool keeps every block it was
    given until ``free_all_blocks``, which is called before the solve, so this is the
    high-water mark of the pool, an upper bound of the high-water of live device arrays).
Owners
    A second solve through the same objects ``Solver.solve`` uses (the linear system, the
    method and its hierarchy), whose arrays are then counted once each (views deduplicated by
    their buffer) at the end of the solve: the problem's arrays, the float32 sweep stencil,
    the float64 refinement operator, the iterate, the hierarchy (coarse levels, residual
    buffers, transfer indices, its float64 inputs), the Krylov vectors and the refinement
    buffers the loop keeps. "transient" is the peak less all of them: a stencil build's
    temporaries, or a refinement phase's buffers where the loop does not keep them.

Each size runs in a fresh process after a warm-up solve on a small grid (numba compiles, CuPy
kernels load). ``--before REV`` measures the tree of a git revision side by side (extracted
with ``git archive`` into a temporary folder and put first on ``PYTHONPATH``).

    python benchmarks/memory_per_node.py --sizes 129 257
    python benchmarks/memory_per_node.py --sizes 129 257 --before main --json out.json
    python benchmarks/memory_per_node.py --sizes 129 --method mgcg   # the GPU's default on the CPU
    python benchmarks/memory_per_node.py --backend cuda --sizes 257 385 513
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OWNERS = ("problem", "stencil32", "refine64", "iterate", "hierarchy", "krylov", "refine work")


def _buffers(obj, seen, out, owner):
    """Add the array buffers under ``obj`` (arrays, tuples, dataclass-like objects) to ``out``."""
    if obj is None:
        return
    if isinstance(obj, tuple | list):
        for item in obj:
            _buffers(item, seen, out, owner)
        return
    if hasattr(obj, "__cuda_array_interface__") or isinstance(obj, np.ndarray):
        base = obj
        while getattr(base, "base", None) is not None and hasattr(base.base, "nbytes"):
            base = base.base
        key = _address(base)
        if key not in seen:
            seen.add(key)
            out[owner] = out.get(owner, 0) + int(base.nbytes)
        return
    for name in ("cx", "cy", "cz", "diag", "b", "shift"):
        if hasattr(obj, name):
            _buffers(getattr(obj, name), seen, out, owner)


def _address(a):
    if isinstance(a, np.ndarray):
        return ("host", a.__array_interface__["data"][0], a.nbytes)
    return ("device", a.__cuda_array_interface__["data"][0], a.nbytes)


def _problem_arrays(p):
    faces = p.epsilon_faces or ()
    return [p.epsilon, *faces, p.phi_coulomb, p.kappa2, p.boundary_values]


def _hierarchy_arrays(h):
    arrays = list(h.inputs)
    for i, lev in enumerate(h.levels):
        if i > 0:
            arrays += [lev.stencil, lev.x]
        arrays.append(lev.r)
        if lev.transfer is not None:
            arrays += [*lev.transfer.pos, *lev.transfer.lo, *lev.transfer.hi]
    for c in h.coarse:
        arrays += [c.work or (), c.two or ()]
    arrays.append(h.coarse_inverse)
    return arrays


def owners(problem, solver, backend):
    """Bytes held at the end of a solve, by owner (a second solve through the internals)."""
    from pbsolver.solving.system import LinearSystem

    name = solver.method_for(backend, problem)
    method = solver.make_method(name)
    system = LinearSystem.for_problem(backend, problem, solver.dtype, solver.refine)
    system.solve(method, rtol=solver.rtol)
    seen, out = set(), {}
    _buffers(_problem_arrays(problem), seen, out, "problem")
    _buffers(system.st, seen, out, "stencil32")
    if system.checked is not system.st:
        _buffers(system.checked, seen, out, "refine64")
    _buffers(getattr(system, "operator64", None), seen, out, "refine64")
    _buffers(system.x, seen, out, "iterate")
    h = getattr(method, "hierarchy", None)
    if h is not None:
        _buffers(_hierarchy_arrays(h), seen, out, "hierarchy")
    krylov = [getattr(method, k, None) for k in ("r", "z", "p", "q")]
    zero_b = getattr(method, "_zero_b", None)
    _buffers([*krylov, getattr(zero_b, "b", None)], seen, out, "krylov")
    _buffers(getattr(system, "work", None), seen, out, "refine work")
    return name, out


def measure(n, backend_name, method="auto"):
    """One size in this process: warm up, then the traced solve and the owners."""
    import pbsolver as pb
    from pbsolver.backends import get_backend
    from pbsolver.bench import random_problem

    backend = get_backend(backend_name)
    gpu = backend_name == "cuda"
    xp = np
    if gpu:
        import cupy as xp

        pool = xp.get_default_memory_pool()
    solver = pb.Solver(method=method, backend=backend_name, rtol=1e-6)
    for warm in (33, 65):  # compile both the serial (small) and the parallel kernels
        solver.solve(random_problem(warm, xp=xp, seed=1, salt=True))
    problem = random_problem(n, xp=xp, seed=100 + n, salt=True)
    nodes = n**3
    if gpu:
        backend.synchronize()
        pool.free_all_blocks()
        before = pool.total_bytes()
        start = time.perf_counter()
        res = solver.solve(problem)
        backend.synchronize()
        seconds = time.perf_counter() - start
        peak = pool.total_bytes() - before
        how = "cupy pool held bytes after - before (free_all_blocks first)"
    else:
        import tracemalloc

        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        start = time.perf_counter()
        res = solver.solve(problem)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        how = "tracemalloc peak during Solver.solve less the traced bytes before"
    converged, iterations, residual = bool(res.converged), int(res.iterations), res.residual
    del res
    if gpu:
        pool.free_all_blocks()
    name, held = owners(problem, solver, backend)
    problem_bytes = held.get("problem", 0)
    solve_held = sum(v for k, v in held.items() if k != "problem")
    row = {
        "n": n,
        "backend": backend_name,
        "method": name,
        "how": how,
        "seconds": seconds,
        "converged": converged,
        "iterations": iterations,
        "relative_residual": float(residual),
        "peak_bytes": int(peak),
        "peak_per_node": peak / nodes,
        "problem_per_node": problem_bytes / nodes,
        "owners_per_node": {k: held.get(k, 0) / nodes for k in OWNERS},
        "transient_per_node": max(0, peak - solve_held) / nodes,
    }
    return row


def _tree_of(rev, tmp):
    """Extract the ``pbsolver`` package of git revision ``rev`` into ``tmp``; return ``tmp``."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "pbsolver"],
                             check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    return tmp, sha


def _run_child(n, backend, tree, method):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, __file__, "--child", str(n), "--backend", backend, "--method", method]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        return {"n": n, "backend": backend, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _line(label, row):
    if "error" in row:
        return f"{label:<10} {row['n']:>4}  error: {row['error']}"
    o = row["owners_per_node"]
    parts = " ".join(f"{o[k]:>7.1f}" for k in OWNERS[1:])
    return (
        f"{label:<10} {row['n']:>4} {row['method']:<9} {row['peak_per_node']:>7.1f} "
        f"{row['problem_per_node']:>7.1f} {parts} {row['transient_per_node']:>9.1f} "
        f"{row['seconds']:>7.2f} {row['iterations']:>4} {row['relative_residual']:.2e}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[129, 257])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--method", default="auto", help="the solver's method (default: auto)")
    ap.add_argument("--before", help="git revision to measure side by side (e.g. main)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.backend, args.method)))
        return 0
    trees = [("this tree", None)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            path, sha = _tree_of(args.before, tmp)
            trees.insert(0, (f"{args.before}@{sha}", path))
        here = str(Path(__file__).resolve().parents[1])
        print(f"B/node, {args.backend}, float32 + float64 refinement, rtol 1e-6, "
              f"method {args.method}")  # fmt: skip
        head = " ".join(f"{k:>7}" for k in ("stencil", "ref64", "iter", "hier", "krylov", "rwork"))
        print(f"{'tree':<10} {'n':>4} {'method':<9} {'peak':>7} {'problem':>7} {head} "
              f"{'transient':>9} {'solve s':>7} iter residual")  # fmt: skip
        for n in args.sizes:
            for label, tree in trees:
                row = _run_child(n, args.backend, tree or here, args.method)
                row["tree"] = label
                rows.append(row)
                print(_line(label[:10], row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
