"""Milliseconds of ``kept_ends`` (the compaction of the forces' recorded line ends) on random slots.

    PYTHONPATH=<tree> python benchmarks/kept_ends_timing.py --slots 60000

Slots six a line, 60 % of them written (bin ≥ 0), three atoms and a 3×3 slope each, as the
SES ends give them; the best of three means of 20 calls, and a checksum of the result (the same
for every tree).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pbsolver.backends.cpu.line_ends import kept_ends


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=60000)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    n = args.slots
    offsets = np.append(np.arange(0, n, 6, dtype=np.int64), n)
    bins = np.where(rng.random(n) < 0.6, rng.integers(0, 80, n), -1).astype(np.int64)
    atoms = rng.integers(-1, 149, (n, 3)).astype(np.int64)
    slopes = rng.random((n, 3, 3))
    out = kept_ends(offsets, 97, bins, atoms, slopes)  # compiled (or loaded) here
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(20):
            out = kept_ends(offsets, 97, bins, atoms, slopes)
        best = min(best, (time.perf_counter() - start) / 20)
    checksum = [float(np.asarray(a, dtype=float).sum()) for a in out]
    print(f"kept_ends, {n} slots: {best * 1e3:.3f} ms; checksum {checksum}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
