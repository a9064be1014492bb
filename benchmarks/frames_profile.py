"""Where the stacked frame engine's time goes: each kernel and step timed alone.

Builds the engine of ``benchmarks/md_pipeline.py`` part 3 (colipase chain A, 1,252 atoms, 65³ at
0.8 Å, vdW, or ``--surface mol``/``smol``) and, for each batch size, times every step of
:meth:`StackedFrames.run` separately: host time to launch (no synchronisation) and wall time with
a synchronisation after it (the step's GPU time plus the launch). Medians of ``--repeat`` runs.

    python benchmarks/frames_profile.py --batches 1 32 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

import pbsolver as pb  # noqa: E402
from pbsolver.molecule import maps  # noqa: E402


def profile_batch(eng, atoms, grid, nf, repeat, rows):
    """Time every step of StackedFrames.run for batches of ``nf`` frames."""
    pos = np.repeat(atoms.positions[None], nf, axis=0)
    origins = np.repeat(np.asarray(grid.origin)[None], nf, axis=0)
    eng.run(pos, origins)  # compile, buffers, graphs
    buf = eng._buffers_for(nf)
    be = eng.backend

    def timed(name, fn):
        launch, wall = [], []
        for _ in range(repeat):
            be.synchronize()
            t0 = time.perf_counter()
            with be.stream_context():
                fn()
            t1 = time.perf_counter()
            be.synchronize()
            t2 = time.perf_counter()
            launch.append(t1 - t0)
            wall.append(t2 - t0)
        row = {"batch": nf, "step": name, "launch_ms": 1e3 * float(np.median(launch)),
               "wall_ms": 1e3 * float(np.median(wall))}  # fmt: skip
        rows.append(row)
        print(f"  B={nf:3d} {name:<28} launch {row['launch_ms']:8.3f} ms  "
              f"wall {row['wall_ms']:8.3f} ms  per frame {row['wall_ms'] / nf:8.4f} ms",
              flush=True)  # fmt: skip

    timed("upload positions", lambda: buf.pos.__setitem__(Ellipsis, eng.xp.asarray(pos)))
    if eng._ses is not None:  # the SES part of the maps, before the captured graph
        timed("SES (features, bins, lines)", lambda: eng._ses.run(
            eng._fraction_targets(buf), buf.pos, buf.origin, eng.stride))  # fmt: skip
        ses_kernels(eng, buf, nf, rows)
    timed("fill zeros (5 arrays)", lambda: [a.fill(0) for a in (buf.fx, buf.fy, buf.fz,
                                                                buf.cov, buf.bad)])  # fmt: skip
    for name, step in eng.map_steps(buf, nf):
        timed(name, step)
    system = buf.system
    timed("rhs norms", lambda: be.block_norms(system.checked.b, nf))
    timed("maps (whole _maps)", lambda: eng._maps(buf, nf))
    system.bnorms = be.block_norms(system.checked.b, nf)
    sv = eng.solver

    def solve(warm):
        system.guessed = [warm] * nf
        out = system.solve(eng._method(nf), rtol=sv.rtol, atol=sv.atol, maxiter=sv.maxiter)
        stats.append((out.method, out.iterations, out.reason, float(np.max(out.final))))
        return out

    stats = []

    timed("solve (cold, whole loop)", lambda: (buf.x.fill(0), solve(False)))
    x0 = buf.x.copy()
    print(f"  B={nf:3d} cold solve: method, iterations, reason, worst residual {stats[-1]}")
    timed("solve (from the solution)", lambda: (buf.x.__setitem__(Ellipsis, x0), solve(True)))
    print(f"  B={nf:3d} warm solve: method, iterations, reason, worst residual {stats[-1]}")
    timed("sample", lambda: eng._sample(buf, nf))
    timed("run() total, cold", lambda: eng.run(pos, origins))
    # warm: every frame moved by ~0.01 Å from the frame whose solution is the guess
    x0 = eng.run(pos, origins).phi[0].copy()
    moved = pos + np.random.default_rng(0).normal(0.0, 0.01, pos.shape)
    timed("run() total, warm (0.01 Å)", lambda: eng.run(moved, origins, x0=x0))


def ses_kernels(eng, buf, nf, rows):
    """One SES step with a synchronisation around each of its launches: time per kernel.

    What is left of the step's wall time is its array code (prefix sums, compaction, bins) and
    the size read-backs.
    """
    ses, be = eng._ses, eng.backend
    launch = ses._launch
    spent = {}

    def timed_launch(kernel, items, *args, threads=None):
        name = getattr(getattr(kernel, "py_func", kernel), "__name__", repr(kernel))
        be.synchronize()
        t0 = time.perf_counter()
        out = launch(kernel, items, *args, threads=threads)
        be.synchronize()
        n, t = spent.get(name, (0, 0.0))
        spent[name] = (n + 1, t + time.perf_counter() - t0)
        return out

    ses._launch = timed_launch
    try:
        be.synchronize()
        t0 = time.perf_counter()
        with be.stream_context():
            ses.run(eng._fraction_targets(buf), buf.pos, buf.origin, eng.stride)
        be.synchronize()
        total = time.perf_counter() - t0
    finally:
        del ses._launch
    spent["(array code and read-backs)"] = (0, total - sum(t for _, t in spent.values()))
    for name, (n, t) in spent.items():
        rows.append({"batch": nf, "step": f"SES {name}", "launches": n, "wall_ms": 1e3 * t})
        print(f"  B={nf:3d}   SES {name:<34} launches {n:2d}  wall {1e3 * t:8.3f} ms", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--salt", type=float, default=0.0, help="ionic strength, mol/L")
    ap.add_argument(
        "--method", choices=["sor", "multigrid"], default="sor", help="the engine's stacked solver"
    )
    ap.add_argument("--surface", choices=["vdw", "mol", "smol"], default="vdw")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from pbsolver.md.engine import StackedFrames

    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    grid = maps.grid_for_atoms(atoms, 0.8, shape=(65, 65, 65))
    solver = pb.Solver(method="sor", backend=args.backend, rtol=1e-6)
    kappa = maps.kappa_from_ionic_strength(args.salt, 78.54)
    eng = StackedFrames(
        atoms.charges,
        atoms.radii,
        grid.shape,
        grid.spacing,
        solver,
        kappa=kappa,
        method=args.method,
        surface=args.surface,
    )
    rows = []
    for nf in args.batches:
        profile_batch(eng, atoms, grid, nf, args.repeat, rows)
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "command": " ".join(sys.argv)}, indent=2))


if __name__ == "__main__":
    main()
