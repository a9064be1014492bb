"""``pbsolver batch --stack``: grids a second, grid by grid against stacked, and equal outputs.

Makes ``--files`` HDF5 files of ``--grids-per-file`` random n³ problems (the inputs of
``multi_gpu_batch.py``), then runs :func:`pbsolver.jobs.batch.run_batch` in this process (as
``pbsolver batch`` does with one worker) once per ``--stacks`` value into a fresh output
directory, after one untimed run that compiles and captures. Prints grids a second and the
largest relative difference between each run's reaction fields and the first run's.

    python benchmarks/batch_stack.py --files 2 --grids-per-file 16 --n 65 --stacks 1 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

from multi_gpu_batch import make_file  # noqa: E402

from pbsolver.jobs import batch  # noqa: E402


def fields(out_dir, inputs):
    """{(file, grid): reaction field} of one run's outputs."""
    out = {}
    for src in inputs:
        with h5py.File(Path(out_dir) / Path(src).name, "r") as fh:
            for name, grp in fh["grids"].items():
                assert bool(grp["solver"].attrs["converged"]), (src, name)
                out[(Path(src).name, name)] = grp["reaction_field"][...]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--grids-per-file", type=int, default=16)
    ap.add_argument("--n", type=int, default=65)
    ap.add_argument("--stacks", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--method", default="auto")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pbsolver-stack-"))
    try:
        inputs = [make_file(work / f"in{i}.h5", args.n, args.grids_per_file, seed=i)
                  for i in range(args.files)]  # fmt: skip
        solve = batch.SolveOptions(method=args.method, backend=args.backend, rtol=args.rtol)
        rows, first = [], None
        print(f"{args.files} files × {args.grids_per_file} grids of {args.n}³, "
              f"backend {args.backend}, method {args.method}, rtol {args.rtol}")  # fmt: skip
        for stack in args.stacks:
            for attempt in ("warm-up", "timed"):
                out = work / f"out-{stack}-{attempt}"
                out.mkdir()
                jobs = [(p, out / Path(p).name) for p in inputs]
                start = time.perf_counter()
                report = batch.run_batch(jobs, solve=solve, stack=stack, progress=False)
                wall = time.perf_counter() - start
                assert report.ok, report.failed
            got = fields(out, inputs)
            first = first or got
            diff = max(float(np.abs(got[k] - first[k]).max() / np.abs(first[k]).max())
                       for k in first)  # fmt: skip
            n = len(report.solved)
            rows.append({"stack": stack, "grids": n, "grids_per_s": n / wall, "wall_s": wall,
                         "max_rel_diff_to_first": diff})  # fmt: skip
            print(f"  --stack {stack:3d}: {n} grids in {wall:7.3f} s = {n / wall:8.2f} grids/s"
                  f"   max |Δφ|/max|φ| against --stack {args.stacks[0]}: {diff:.1e}",
                  flush=True)  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
