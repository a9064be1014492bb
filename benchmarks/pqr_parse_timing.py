"""Time reading PQR files with :func:`pbsolver.read_pqr`: the best of ``--repeat`` passes.

Usage: ``python benchmarks/pqr_parse_timing.py benchmarks/apbs_inputs/actin-dimer/*.pqr``.
"""

from __future__ import annotations

import argparse
import time

from pbsolver.molecule.atoms import read_pqr


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    atoms = [read_pqr(f) for f in args.files]  # warm-up
    best = float("inf")
    for _ in range(args.repeat):
        t = time.perf_counter()
        atoms = [read_pqr(f) for f in args.files]
        best = min(best, time.perf_counter() - t)
    print(f"{sum(len(a) for a in atoms)} atoms in {len(args.files)} files: {best * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
