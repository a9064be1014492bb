"""Batch throughput on one and on several GPUs: ``pbsolver batch --workers N`` and dask-cuda.

Makes ``--files`` HDF5 inputs of ``--grids-per-file`` grids each (n³ nodes: random dielectric
spheres 2 : 80 and a few point charges, harmonic faces, zero Dirichlet boundary), then runs the
real command line on them, once per configuration, each into a fresh output folder:

* ``pbsolver batch IN... --out-dir D --workers 1 --gpus 0``       (one GPU)
* ``pbsolver batch IN... --out-dir D --workers K --gpus 0,..,K-1`` (K GPUs, one worker each)
* ``pbsolver batch IN... --out-dir D --local-cluster K``           (dask-cuda LocalCUDACluster)

and reports grids solved per second (wall time of the whole command: start-up, reads, solves,
writes) and the speed-up over one GPU. Every output is checked afterwards: all grids present,
converged, residual ≤ rtol.

    python benchmarks/multi_gpu_batch.py --files 20 --grids-per-file 10 --n 129 \
        --gpus 2 --json out.json --workdir /tmp/mgpu
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import h5py
import numpy as np


def make_file(path, n, grids, seed):
    import pbsolver as pb

    rng = np.random.default_rng(seed)
    h = 24.0 / (n - 1)
    grid = pb.Grid((n, n, n), spacing=h, origin=(-12.0, -12.0, -12.0))
    x, y, z = grid.coordinates()
    problems = {}
    for g in range(grids):
        eps = np.full(grid.shape, 80.0, dtype=np.float32)
        for _ in range(3):
            c = rng.uniform(-4.0, 4.0, 3)
            r = rng.uniform(3.0, 6.0)
            eps[(x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 < r * r] = 2.0
        phi = np.zeros(grid.shape)
        for _ in range(4):
            c = rng.uniform(-3.0, 3.0, 3)
            r = np.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 + 0.09)
            phi += pb.COULOMB_KJ * rng.uniform(-1, 1) / (2.0 * r)
        problems[f"g{g:03d}"] = pb.Problem(
            grid, eps, phi.astype(np.float32), 2.0, face_rule="harmonic"
        )
    pb.write_hdf5(path, problems)
    return str(path)


def run(cmd, env):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def check_outputs(out_dir, inputs, rtol):
    solved = bad = 0
    for src in inputs:
        with h5py.File(Path(out_dir) / Path(src).name, "r") as fh:
            for grp in fh["grids"].values():
                s = grp["solver"].attrs
                if bool(s["converged"]) and float(s["residual"]) <= rtol * 1.0001:
                    solved += 1
                else:
                    bad += 1
    return solved, bad


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--grids-per-file", type=int, default=10)
    ap.add_argument("--n", type=int, default=129)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--method", default="auto")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--workdir", default="/tmp/pbsolver-mgpu")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--backend", default="cuda", help="cpu only for a smoke test of the script")
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    (work / "in").mkdir(parents=True)
    t0 = time.perf_counter()
    paths = [work / "in" / f"set{i:03d}.h5" for i in range(args.files)]
    with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        inputs = list(
            pool.map(
                make_file,
                paths,
                [args.n] * args.files,
                [args.grids_per_file] * args.files,
                range(args.files),
            )
        )
    total = args.files * args.grids_per_file
    print(f"made {total} grids of {args.n}³ in {time.perf_counter() - t0:.1f} s", flush=True)

    base = [
        sys.executable,
        "-m",
        "pbsolver",
        "-q",
        "batch",
        *inputs,
        "--method",
        args.method,
        "--rtol",
        str(args.rtol),
        "--backend",
        args.backend,
    ]
    configs = [("1 GPU, --workers 1", ["--workers", "1", "--gpus", "0"])]
    if args.gpus > 1:
        ids = ",".join(str(i) for i in range(args.gpus))
        configs.append(
            (
                f"{args.gpus} GPUs, --workers {args.gpus}",
                ["--workers", str(args.gpus), "--gpus", ids],
            )
        )
        if not args.no_dask:
            configs.append(
                (
                    f"{args.gpus} GPUs, --local-cluster {args.gpus} (dask-cuda)",
                    ["--local-cluster", str(args.gpus)],
                )
            )
    rows = []
    env = dict(os.environ)
    for i, (label, extra) in enumerate(configs):
        out = work / f"out{i}"
        seconds, proc = run([*base, "--out-dir", str(out), *extra], env)
        solved, bad = check_outputs(out, inputs, args.rtol) if proc.returncode == 0 else (0, 0)
        row = {
            "config": label,
            "command": " ".join(["pbsolver batch IN...", *extra]),
            "exit": proc.returncode,
            "grids": total,
            "solved": solved,
            "bad": bad,
            "seconds": seconds,
            "grids_per_s": solved / seconds if seconds else 0.0,
            "stderr_tail": proc.stderr[-2000:],
        }
        rows.append(row)
        print({k: v for k, v in row.items() if k != "stderr_tail"}, flush=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], flush=True)
        shutil.rmtree(out, ignore_errors=True)
    one = rows[0]["grids_per_s"] or float("nan")
    print(
        f"\n{'configuration':48} {'exit':>4} {'solved':>7} {'s':>8} {'grids/s':>8} {'× 1 GPU':>8}"
    )
    for r in rows:
        print(
            f"{r['config']:48} {r['exit']:>4} {r['solved']:>7} {r['seconds']:>8.1f} "
            f"{r['grids_per_s']:>8.2f} {r['grids_per_s'] / one:>8.2f}"
        )
    if args.json:
        import pbsolver as pb

        info = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "pbsolver": pb.__version__,
            "n": args.n,
            "grids": total,
            "method": args.method,
            "rtol": args.rtol,
            "nvidia_smi": subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
            ).stdout.strip(),
        }
        with open(args.json, "w") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
