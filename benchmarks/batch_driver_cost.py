"""Host work of the ``pbsolver batch`` driver process, per grid (CPU machine, no GPU needed).

With several GPU workers the single driver process becomes the bottleneck when it does per-grid
host work (unpickling results, compressing and writing part files). This script runs
:func:`pbsolver.jobs.batch.run_batch` in this process, as ``pbsolver batch`` does, on ``--files`` x
``--grids-per-file`` grids of n³ (the inputs of ``multi_gpu_batch.py``), once in this process
(``--workers 1``) and once with a pool of worker processes (``--workers 2``), and reports per
grid:

* ``driver_cpu_s``: CPU time of this (driver) process, from ``time.process_time`` (workers'
  time excluded). In-process runs solve here too, so this is only meaningful for pools;
* ``record_s``: time in ``batch._record`` (takes a finished grid; writes its part file when the
  driver writes parts);
* ``part_write_s``: time in ``batch._write_part`` seen by this process (the driver's writes,
  and the in-process worker's: worker processes are not instrumented);
* ``finish_s``: time in ``batch._finish`` (assembles the output from the part files).

On a 2-core machine the CPU solves dominate the wall time; the driver's numbers are the point.

    python benchmarks/batch_driver_cost.py --files 2 --grids-per-file 5 --n 129
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from multi_gpu_batch import make_file  # noqa: E402

from pbsolver.jobs import batch  # noqa: E402

SECTIONS = {"_record": "record_s", "_write_part": "part_write_s", "_finish": "finish_s"}


def instrument(totals):
    """Wrap the driver's per-grid functions so that their time adds up in ``totals``."""
    originals = {}
    for name, label in SECTIONS.items():
        fn = getattr(batch, name)
        originals[name] = fn

        @functools.wraps(fn)
        def timed(*args, _fn=fn, _label=label, **kw):
            t0 = time.perf_counter()
            try:
                return _fn(*args, **kw)
            finally:
                totals[_label] += time.perf_counter() - t0

        setattr(batch, name, timed)
    return originals


def one_run(inputs, out_dir, workers, solve):
    totals = defaultdict(float)
    originals = instrument(totals)
    try:
        executor = batch.LocalExecutor() if workers == 1 else batch.ProcessExecutor(workers, [])
        jobs = [(p, out_dir / Path(p).name) for p in inputs]
        c0, w0 = time.process_time(), time.perf_counter()
        report = batch.run_batch(jobs, solve=solve, executor=executor, progress=False)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    finally:
        for name, fn in originals.items():
            setattr(batch, name, fn)
    assert report.ok, report.failed
    n = len(report.solved)
    row = {"workers": workers, "grids": n, "wall_s": wall / n, "driver_cpu_s": cpu / n}
    row.update({label: totals[label] / n for label in SECTIONS.values()})
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--grids-per-file", type=int, default=5)
    ap.add_argument("--n", type=int, default=129)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="pbsolver-driver-"))
    try:
        inputs = [
            make_file(work / f"set{i:03d}.h5", args.n, args.grids_per_file, i)
            for i in range(args.files)
        ]
        solve = batch.SolveOptions(backend="cpu", rtol=args.rtol)
        rows = []
        for workers in args.workers:
            out = work / f"out{workers}"
            out.mkdir()
            rows.append(one_run(inputs, out, workers, solve))
            shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cols = ["wall_s", "driver_cpu_s", *SECTIONS.values()]
    print(f"{args.files} files x {args.grids_per_file} grids of {args.n}^3, seconds per grid")
    print(f"{'workers':>7} " + " ".join(f"{c:>13}" for c in cols))
    for r in rows:
        print(f"{r['workers']:>7} " + " ".join(f"{r[c]:>13.3f}" for c in cols))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"n": args.n, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
