"""MD-pipeline benchmark: frames per second of the reaction-field calculator, and batched solves.

Part 1, frames per second for a ~1,000-atom solute on a 65³ grid, every frame doing maps + solve +
energy + forces (``ReactionFieldCalculator``): cold starts, warm starts, and warm starts with the
frames solved in batches (``compute_batch``). The solute is colipase chain A (1,252 atoms,
``data/1lpb_chainA.pqr``) moving slowly: a rigid drift of 0.01 Å a frame plus a smooth per-atom
wiggle of ±0.02 Å.

Part 2, solves per second for batches of independent 65³ and 97³ problems (the protein's maps at
several positions): one by one (multigrid and SOR) against ``pb.solve_batch`` stacked (the
block-by-block multigrid and SOR, one launch a kernel for the whole batch) and, on the GPU, one
CUDA stream per worker.

Part 3, the stacked frame engine (``engine="stacked"``, :mod:`pbsolver.md.engine`; vdW surface):
the same solute and frames, one by one (cold and warm) and in batches of ``--stacked-batches``
frames (maps, solve and forces of a whole batch in batched launches), against the general path
on the same surface.

Prints a table and writes JSON: wall time and process CPU time (all threads; steadier than
wall time on a shared machine) per frame or solve. Timings are ratios inside one run; absolute
GPU numbers count only from a GPU run (device and versions are recorded).

    python benchmarks/md_pipeline.py --backend cpu --json benchmarks/md_pipeline_cpu.json
    python benchmarks/md_pipeline.py --backend cuda --frames 64 --batch 16 \
        --json benchmarks/md_pipeline_h200.json
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

# the checkout's library after an installed or PYTHONPATH one (so PYTHONPATH=<tree> times <tree>)
sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402, F401 (also used as md_pipeline.frames_of)

import pbsolver as pb  # noqa: E402
from pbsolver.molecule import maps  # noqa: E402


def device_info(backend):
    info = {
        "backend": backend,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pbsolver": pb.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    import numba

    info["numba"] = numba.__version__
    if backend == "cuda":
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        info["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        info["cupy"] = cp.__version__
        try:
            import numba_cuda

            info["numba_cuda"] = numba_cuda.__version__
        except Exception:  # version attribute missing in some releases
            pass
    return info


# ---------------------------------------------------------------------- part 1
def pipeline(atoms, args):
    frames = frames_of(atoms, args.frames)
    common = {
        "spacing": args.spacing,
        "shape": (65, 65, 65),
        "margin": 4.0,
        "surface": args.surface,
        "backend": args.backend,
        "method": args.method,
        "rtol": args.rtol,
        "map_options": {"maps_backend": args.maps_backend},
    }
    rows = []

    def run(label, warm, batch=None, mode="auto", method=None):
        opts = dict(common)
        if method is not None:
            opts["method"] = method
        calc = pb.ReactionFieldCalculator(atoms, warm_start=warm, **opts)
        calc.compute(frames[0])  # places the grid, compiles, captures graphs
        if warm:
            calc.compute(frames[0])
        todo = frames[1:]
        cpu0 = time.process_time()
        start = time.perf_counter()
        results = []
        if batch is None:
            results = [calc.compute(f) for f in todo]
        else:
            for i in range(0, len(todo), batch):
                results += calc.compute_batch(todo[i : i + batch], mode=mode)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        row = {"case": label, "method": opts["method"], **_frame_stats(results, wall, cpu)}
        rows.append(row)
        print(
            f"  {label:<34} {row['frames_per_s']:8.3f} frames/s  {row['ms_per_frame']:9.1f} ms"
            f"  (cpu {row['cpu_ms_per_frame']:9.1f} ms)  it {row['iterations']:6.1f}"
            f"  maps {row['maps_ms']:8.1f}  solve {row['solve_ms']:8.1f}"
            f"  eval {row['evaluate_ms']:6.1f} ms",
            flush=True,
        )
        return row

    print(f"Part 1: {len(atoms)} atoms, 65³ grid at {args.spacing} Å, surface {args.surface}, "
          f"method {args.method}, maps on {args.maps_backend}, "
          f"{args.frames - 1} timed frames")  # fmt: skip
    run("cold, one by one", warm=False)
    run("warm, one by one", warm=True)
    run(f"warm, batches of {args.batch} (auto)", warm=True, batch=args.batch)
    run("cold, one by one, SOR", warm=False, method="sor")
    run("warm, one by one, SOR", warm=True, method="sor")
    run(f"warm, batches of {args.batch}, SOR stacked", warm=True, batch=args.batch,
        mode="stacked", method="sor")  # fmt: skip
    return rows


# ---------------------------------------------------------------------- part 3
def stacked(atoms, args):
    """Frames per second of the stacked engine (vdW) against the general path on vdW."""
    batches = sorted(args.stacked_batches)
    segments = max(1, args.repeats)
    frames = frames_of(atoms, 1 + segments * max(2 * max(batches), args.frames, 32))
    common = {
        "spacing": args.spacing,
        "shape": (65, 65, 65),
        "margin": 4.0,
        "surface": "vdw",
        "backend": args.backend,
        "rtol": args.rtol,
    }
    rows = []

    def run(label, engine, warm, batch=None, count=None, **extra):
        """Time ``segments`` consecutive runs of ``count`` frames; the rate is their median."""
        calc = pb.ReactionFieldCalculator(atoms, warm_start=warm, engine=engine, **common, **extra)
        count = count or args.frames - 1
        todo = frames[1 : 1 + segments * count]
        calc.compute(frames[0])  # places the grid, compiles, captures graphs
        if batch is not None:
            calc.compute_batch(todo[:batch])  # buffers and graphs of this batch size
        cpu0 = time.process_time()
        results, walls = [], []
        for part in range(segments):
            chunk = todo[part * count : (part + 1) * count]
            start = time.perf_counter()
            if batch is None:
                results += [calc.compute(f) for f in chunk]
            else:
                for i in range(0, len(chunk) - batch + 1, batch):
                    results += calc.compute_batch(chunk[i : i + batch])
            walls.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu0
        wall = float(np.median(walls)) * segments  # the median segment's rate for all frames
        row = {
            "case": label,
            "engine": calc.engine,
            "regrids": int(sum(r.regridded for r in results)),
            "batch": batch or 1,
            **_frame_stats(results, wall, cpu),
            "segment_frames_per_s": [count / w for w in walls],
        }
        rows.append(row)
        print(
            f"  {label:<40} {row['frames_per_s']:9.2f} frames/s  {row['ms_per_frame']:8.3f} ms"
            f"  (cpu {row['cpu_ms_per_frame']:8.2f} ms)  it {row['iterations']:6.1f}"
            f"  maps {row['maps_ms']:7.3f}  solve {row['solve_ms']:7.3f}"
            f"  eval {row['evaluate_ms']:6.3f} ms  regrids {row['regrids']}",
            flush=True,
        )
        return row

    print(f"Part 3: stacked engine, {len(atoms)} atoms, 65³ at {args.spacing} Å, surface vdw, "
          f"rtol {args.rtol}; median of {segments} consecutive timed segments")  # fmt: skip
    few = min(args.frames, 16)
    run("general, warm, one by one (multigrid)", "general", True, count=few, method="multigrid",
        map_options={"maps_backend": args.maps_backend})  # fmt: skip
    for method in args.stacked_methods:
        tag = "" if method == "sor" else f" {method}"
        run(f"stacked{tag}, cold, one by one", "stacked", False, count=max(few, 32),
            method=method)  # fmt: skip
        run(f"stacked{tag}, warm, one by one", "stacked", True, count=max(few, 32),
            method=method)  # fmt: skip
        for b in batches:
            run(f"stacked{tag}, warm, batches of {b}", "stacked", True, batch=b, count=2 * b,
                method=method)  # fmt: skip
    return rows


def _frame_stats(results, wall, cpu) -> dict:
    """Per-frame wall/CPU time, iterations, step timings and convergence of timed frames."""
    n = len(results)
    return {
        "frames": n,
        "frames_per_s": n / wall,
        "ms_per_frame": 1e3 * wall / n,
        "cpu_ms_per_frame": 1e3 * cpu / n,
        "iterations": float(np.mean([r.iterations for r in results])),
        "maps_ms": 1e3 * float(np.mean([r.timings["maps"] for r in results])),
        "solve_ms": 1e3 * float(np.mean([r.timings["solve"] for r in results])),
        "evaluate_ms": 1e3 * float(np.mean([r.timings["evaluate"] for r in results])),
        "converged": all(r.converged for r in results),
        "energy_first": results[0].energy,
    }


# ---------------------------------------------------------------------- part 2
def throughput(atoms, args):
    rows = []
    batches = args.solve_batches or [args.batch]
    for n in args.sizes:
        spacing = (41.0 + 2 * 4.0) / (n - 1)  # the protein with a 4 Å margin fills the grid
        grid = maps.grid_for_atoms(atoms, spacing, shape=(n, n, n))
        problems = []
        for f in frames_of(atoms, max(batches), drift=0.05, wiggle=0.05, seed=1):
            moved = pb.Atoms(f, atoms.charges, atoms.radii)
            problems.append(pb.Problem.from_atoms(moved, grid=grid, surface="vdw"))
        if args.backend == "cuda":  # the maps on the device: solutions stay there too
            problems = [p.to("cupy") for p in problems]
        print(f"Part 2: problems of {n}³ (spacing {spacing:.3f} Å), batches of {batches}, "
              f"median of {args.repeats} timed calls")  # fmt: skip

        opts = {"backend": args.backend, "rtol": args.rtol}
        few = problems[: min(16, len(problems))]  # one by one: the rate does not need more
        for m in ("multigrid", "sor"):
            rows.append(_timed(f"one by one, {m}", _one_by_one(m, opts), few, n, args.repeats))
        for b in batches:
            streams = args.backend == "cuda" and b == batches[0]  # slower: measured once
            modes = ["stacked"] + (["streams"] if streams else [])
            for mode in modes:
                for m in ("multigrid", "sor"):
                    rows.append(_timed(f"solve_batch {mode}, {m}, B={b}",
                                       _batched(mode, m, opts), problems[:b], n,
                                       args.repeats))  # fmt: skip
    return rows


def _one_by_one(method, opts):
    return lambda ps: [pb.solve(p, method=method, **opts) for p in ps]


def _batched(mode, method, opts):
    return lambda ps: pb.solve_batch(ps, mode=mode, method=method, **opts)


def _timed(label, fn, problems, n, repeats=1):
    """Median wall (and CPU) time a solve over ``repeats`` calls, after one untimed call."""
    fn(problems)  # compile, and capture at this size and batch (a pipeline's steady state)
    walls, cpus = [], []
    for _ in range(repeats):
        cpu0 = time.process_time()
        start = time.perf_counter()
        results = fn(problems)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu0)
    wall, cpu = float(np.median(walls)), float(np.median(cpus))
    row = {
        "case": label,
        "n": n,
        "batch": len(problems),
        "solves_per_s": len(problems) / wall,
        "ms_per_solve": 1e3 * wall / len(problems),
        "cpu_ms_per_solve": 1e3 * cpu / len(problems),
        "wall_s_each_call": walls,
        "iterations": float(np.mean([r.iterations for r in results])),
        "converged": all(r.converged for r in results),
    }
    print(
        f"  {label:<38} {row['solves_per_s']:8.3f} solves/s  {row['ms_per_solve']:9.2f} ms"
        f"  (cpu {row['cpu_ms_per_solve']:9.2f} ms)  it {row['iterations']:6.1f}",
        flush=True,
    )
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--frames", type=int, default=9, help="frames per case (first untimed)")
    ap.add_argument("--batch", type=int, default=4, help="frames / problems per batch")
    ap.add_argument("--sizes", type=int, nargs="+", default=[65, 97])
    ap.add_argument("--solve-batches", type=int, nargs="+", default=None,
                    help="part 2's stacked batch sizes (default: --batch)")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=3,
                    help="part 2's timed calls, part 3's timed segments, a case")  # fmt: skip
    ap.add_argument("--spacing", type=float, default=0.8, help="65³ grid spacing, Å")
    ap.add_argument("--surface", default="mol", choices=("mol", "smol", "vdw"))
    ap.add_argument("--method", default="multigrid")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--maps-backend", default="cpu", choices=("cpu", "cuda"),
                    help="where the calculator's map kernels run")  # fmt: skip
    ap.add_argument("--stacked-batches", type=int, nargs="+", default=[4],
                    help="batch sizes of part 3 (stacked engine)")  # fmt: skip
    ap.add_argument(
        "--stacked-methods",
        nargs="+",
        default=["sor", "multigrid"],
        choices=["sor", "multigrid"],
        help="solvers of part 3's stacked engine",
    )
    ap.add_argument("--skip-pipeline", action="store_true")
    ap.add_argument("--skip-stacked", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.backend == "auto":
        from pbsolver.backends import cuda_available

        args.backend = "cuda" if cuda_available() else "cpu"
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    out = {
        "command": " ".join(["python", "benchmarks/md_pipeline.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": device_info(args.backend),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "pipeline": [] if args.skip_pipeline else pipeline(atoms, args),
        "throughput": [] if args.skip_throughput else throughput(atoms, args),
        "stacked": [] if args.skip_stacked else stacked(atoms, args),
    }
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return out


if __name__ == "__main__":
    main()
