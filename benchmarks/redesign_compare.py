"""One tree's timings for the one-pipeline comparison (issue 16): run it once per tree.

Uses only the public API, so the same script measures the commit before the redesign and the
commit after it (``PYTHONPATH=<tree>``); ``benchmarks/redesign_compare.sh`` runs both trees
alternately in one GPU session and ``--table`` prints the side-by-side table.

Cases (all rtol 1e-6, float32 storage with float64 refinement, the second of identical calls
timed so that compilation and graph capture are excluded):

* frames/s of the MD calculator's stacked engine: colipase chain A (1,252 atoms,
  ``data/1lpb_chainA.pqr``) on 65³ at 0.8 Å, vdW surface, maps + solve + energy + forces, warm
  starts, one by one (SOR, the fastest one-by-one case) and in batches of 32 (multigrid);
  median of three consecutive segments;
* ``pb.solve_batch`` of 16 problems of 65³ (the protein's maps at 16 positions), stacked
  multigrid; median of three calls;
* time to solution of one problem at 129³ and 257³ (``pbsolver.bench.random_problem``: four
  ε-1 spheres in ε 80 with salt, Dirichlet), SOR, multigrid and MG-CG; the true float64
  relative residual is recorded.

    PYTHONPATH=<tree> python benchmarks/redesign_compare.py --label new --json new.json
    python benchmarks/redesign_compare.py --table old.json new.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402


def frames_per_second(pb, atoms, backend, batch, method, segments=3):
    """Median frames/s of ``segments`` consecutive runs of the stacked engine."""
    per = 64 if batch > 1 else 32
    frames = frames_of(atoms, 2 + batch + segments * per)
    calc = pb.ReactionFieldCalculator(atoms, spacing=0.8, shape=(65, 65, 65), margin=4.0,
                                      surface="vdw", backend=backend, rtol=1e-6,
                                      engine="stacked", method=method)  # fmt: skip
    calc.compute(frames[0])  # places the grid, compiles, captures graphs
    if batch > 1:
        calc.compute_batch(frames[1 : 1 + batch])  # this batch size's buffers and graphs
    todo = frames[1 + batch :]
    rates, results = [], []
    for s in range(segments):
        chunk = todo[s * per : (s + 1) * per]
        start = time.perf_counter()
        if batch == 1:
            results += [calc.compute(f) for f in chunk]
        else:
            for i in range(0, per, batch):
                results += calc.compute_batch(chunk[i : i + batch])
        rates.append(per / (time.perf_counter() - start))
    return {
        "frames_per_s": statistics.median(rates),
        "segments": rates,
        "iterations": float(np.mean([r.iterations for r in results])),
        "converged": all(r.converged for r in results),
        "energy_first": float(results[0].energy),
        # per-frame shares of the calls' maps, solve and evaluation (ms)
        "ms": {
            k: 1e3 * float(np.mean([r.timings[k] for r in results]))
            for k in ("maps", "solve", "evaluate")
        },
    }


def device_problem(pb, p):
    """``p`` with CuPy arrays (public attributes only: the same code for both trees)."""
    import cupy as cp

    def dev(a):
        return None if a is None else cp.asarray(a)

    faces = None if p.epsilon_faces is None else tuple(dev(f) for f in p.epsilon_faces)
    return pb.Problem(p.grid, epsilon=dev(p.epsilon), phi_coulomb=dev(p.phi_coulomb),
                      eps_cavity=p.eps_cavity, epsilon_faces=faces, kappa2=dev(p.kappa2),
                      boundary=p.boundary, boundary_values=dev(p.boundary_values),
                      face_rule=p.face_rule)  # fmt: skip


def solve_batch_rate(pb, atoms, backend, count=16, n=65, repeats=3):
    """Median solves/s of ``pb.solve_batch`` (stacked multigrid) on ``count`` n³ problems."""
    spacing = (41.0 + 2 * 4.0) / (n - 1)
    center = atoms.positions.mean(axis=0)
    grid = pb.Grid((n, n, n), spacing=spacing, origin=tuple(center - spacing * (n - 1) / 2))
    problems = []
    for f in frames_of(atoms, count, drift=0.05, wiggle=0.05, seed=1):
        moved = pb.Atoms(f, atoms.charges, atoms.radii)
        p = pb.Problem.from_atoms(moved, grid=grid, surface="vdw")
        problems.append(device_problem(pb, p) if backend == "cuda" else p)

    def call():
        return pb.solve_batch(problems, mode="stacked", method="multigrid", backend=backend,
                              rtol=1e-6)  # fmt: skip

    call()
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        results = call()
        walls.append(time.perf_counter() - start)
    return {
        "solves_per_s": count / statistics.median(walls),
        "walls": walls,
        "iterations": float(np.mean([r.iterations for r in results])),
        "converged": all(r.converged for r in results),
    }


def time_to_solution(pb, backend, n, method):
    """Seconds of the second of two identical solves, and its float64 relative residual."""
    from pbsolver.bench import random_problem  # the same generator in both trees
    from pbsolver.operator import relative_residual

    host = random_problem(n, seed=100 + n, salt=True)
    p = device_problem(pb, host) if backend == "cuda" else host
    solver = pb.Solver(method=method, backend=backend, rtol=1e-6)
    solver.solve(p)
    if backend == "cuda":
        import cupy as cp

        cp.cuda.Device().synchronize()
    start = time.perf_counter()
    res = solver.solve(p)
    seconds = time.perf_counter() - start
    phi = res.phi_rf.get() if hasattr(res.phi_rf, "get") else res.phi_rf
    return {
        "seconds": seconds,
        "iterations": res.iterations,
        "converged": bool(res.converged),
        "true_residual": float(relative_residual(host, phi)),
    }


def measure(args) -> dict:
    import pbsolver as pb

    atoms = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    out = {"label": args.label, "pbsolver": pb.__file__, "cases": {}}
    cases = out["cases"]

    def record(name, fn):
        t0 = time.perf_counter()
        try:
            cases[name] = fn()
        except Exception as exc:  # a case that fails is recorded, not hidden
            cases[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{args.label:>4} {name:<28} {json.dumps(cases[name])[:150]}"
              f"  ({time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip

    be = args.backend
    if "frames" in args.parts:
        record("frames, one by one (sor)", lambda: frames_per_second(pb, atoms, be, 1, "sor"))
        record("frames, batches of 32 (mg)",
               lambda: frames_per_second(pb, atoms, be, 32, "multigrid"))  # fmt: skip
    if "batch" in args.parts:
        record("solve_batch 16 x 65^3", lambda: solve_batch_rate(pb, atoms, be))
    if "solve" in args.parts:
        for n in args.sizes:
            for method in ("sor", "multigrid", "mgcg"):
                record(f"{n}^3 {method}", lambda n=n, m=method: time_to_solution(pb, be, n, m))
    return out


def table(paths) -> str:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    names = list(dict.fromkeys(n for r in runs for n in r["cases"]))
    head = "| case | " + " | ".join(r["label"] for r in runs) + " |"
    lines = [head, "|" + "---|" * (len(runs) + 1)]
    for name in names:
        cells = []
        for r in runs:
            c = r["cases"].get(name, {})
            if "error" in c:
                cells.append("error")
            elif "frames_per_s" in c:
                cells.append(f"{c['frames_per_s']:.0f} frames/s (it {c['iterations']:.1f})")
            elif "solves_per_s" in c:
                cells.append(f"{c['solves_per_s']:.1f} solves/s (it {c['iterations']:.1f})")
            elif "seconds" in c:
                cells.append(f"{1e3 * c['seconds']:.1f} ms (it {c['iterations']}, "
                             f"r {c['true_residual']:.1e})")  # fmt: skip
            else:
                cells.append("—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="tree")
    ap.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--parts", nargs="+", default=["frames", "batch", "solve"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[129, 257])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--table", nargs="+", default=None, help="print the table of these JSONs")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    out = measure(args)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
