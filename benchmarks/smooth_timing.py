"""Time the smol surface's 9-point smoothing kernel (``backends.cpu.frame_ses.smooth``).

Random fractions on an ``--n``³ grid, the kernel alone (outputs allocated once) on 1 and on
all of numba's threads, best of ``--repeat``; and a checksum of the result, so that two trees
can be compared for the same sums.

    python benchmarks/smooth_timing.py --n 129
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from pbsolver.backends.cpu.frame_ses import smooth


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=129)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    n = args.n
    f = [np.clip(rng.random((n, n, n)) * 1.5 - 0.25, 0.0, 1.0) for _ in range(3)]
    out = [np.empty_like(f[0]) for _ in range(3)]
    smooth(*f, *out, 1, n, n, n, n)  # compile or load
    for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
        numba.set_num_threads(threads)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            smooth(*f, *out, 1, n, n, n, n)
            times.append(time.perf_counter() - t0)
        print(f"{n}³, {threads} thread(s): {min(times):.4f} s")
    print("checksum", repr(float(sum(o.sum() for o in out))))


if __name__ == "__main__":
    main()
