"""Time of the refinement's float64 residual (the problem's own operator) on one backend.

The refined solve decides convergence with :class:`pbsolver.backends.ProblemOperator`: the
faces formed from the problem's maps in float64 at every node. This times
``residual_and_norm`` and ``residual_norm`` on it (the fastest of ``--repeat`` calls), on
``benchmarks/cpu_multigrid.py``'s sphere problem (node map, harmonic faces) with a random
float64 iterate, and prints the norm (the same digits before and after a change of rounding
only).

    python benchmarks/operator_residual.py --sizes 129 193
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_multigrid import sphere_problem  # noqa: E402

from pbsolver.backends import get_backend  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[129])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    be = get_backend(args.backend)
    for n in args.sizes:
        problem = sphere_problem(n)
        _, op = be.refined_system(problem, np.float32)
        x = be.asarray(np.random.default_rng(0).normal(size=problem.grid.shape), np.float64)
        out = be.zeros(problem.grid.shape, np.float32)
        calls = {
            "residual_and_norm": partial(be.residual_and_norm, op, x, out),
            "residual_norm": partial(be.residual_norm, op, x),
        }
        for name, call in calls.items():
            call()  # compiled or loaded
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                value = call()
                be.synchronize()
                times.append(time.perf_counter() - t0)
            print(f"{n:>4} {args.backend} {name:18s} {min(times) * 1e3:8.2f} ms  norm {value!r}")


if __name__ == "__main__":
    main()
