"""Where the fused red–black sweep pays: one sweep at each size, two-pass against fused.

The multigrid smoother sweeps a level with :mod:`pbsolver.backends.cuda.fused_sweep` from
``FUSED_MIN_NODES`` nodes up. This script times, on one GPU, a sweep of each size both ways
(GPU time from CUDA events around replays of a captured graph of 20 sweeps; the package's
random high-contrast problem, float32, no salt) and checks that the two give the same bits,
so that the threshold is set from measurements. Whole solves with another threshold:
``gpu_solvers.py --fused-min-nodes N`` (a process each: a solver's captured cycles keep the
smoother they were recorded with)::

    python benchmarks/fused_threshold.py --sizes 96 128 160 192 224 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

from pbsolver.backends.cuda import CUDABackend, fused_sweep  # noqa: E402
from pbsolver.bench import environment, random_problem  # noqa: E402

SWEEPS = 20


def gpu_ms(cp, stream, fn, reps=5, trials=5):
    """Median GPU milliseconds of ``fn`` (CUDA events on ``stream``)."""
    fn()
    stream.synchronize()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for _ in range(trials):
        e0.record(stream)
        for _ in range(reps):
            fn()
        e1.record(stream)
        e1.synchronize()
        out.append(cp.cuda.get_elapsed_time(e0, e1) / reps)
    return statistics.median(out)


def sweep_row(n):
    """µs a sweep, two-pass and fused, at n³, and whether their iterates are the same bits."""
    import cupy as cp

    gpu = CUDABackend()
    st = gpu.stencil(random_problem(n, xp=cp, seed=n), np.float32)
    x0 = cp.random.standard_normal((n, n, n), dtype=cp.float32)
    work = cp.empty_like(x0)
    a, b = x0.copy(), x0.copy()
    gpu.sor_sweeps(st, a, 1.9, 3)
    gpu.rb_sor_sweeps(st, b, 0, 1.9, 3, work=work)
    same = bool(cp.array_equal(a, b))
    x = x0.copy()
    point = gpu_ms(cp, gpu.dev.stream, lambda: gpu.sor_sweeps(st, x, 1.9, SWEEPS)) / SWEEPS
    fused = gpu_ms(
        cp, gpu.dev.stream, lambda: gpu.rb_sor_sweeps(st, x, 0, 1.9, SWEEPS, work=work)
    ) / SWEEPS  # fmt: skip
    return {"n": n, "two_pass_us": point * 1e3, "fused_us": fused * 1e3,
            "fused_over_two_pass": fused / point, "same_bits": same}  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[96, 128, 160, 192, 224, 256])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = {"environment": environment(True), "threshold": fused_sweep.FUSED_MIN_NODES}
    res["sweeps"] = []
    fused_sweep.FUSED_MIN_NODES = 0  # every size fused here, to find where it pays
    for n in args.sizes:
        res["sweeps"].append(sweep_row(n))
        print(res["sweeps"][-1], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
