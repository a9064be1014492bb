"""φ_c on small grids: the direct sum against the multilevel sum, and what "auto" picks.

The peptide (149 atoms) and colipase (1,252) on n³ grids at 0.5 Å centred on the molecule:
the median of five calls after one untimed one of ``coulomb_sum(method="direct")`` and of
``method="fast"`` (whose plan may be one level: the finite-kernel direct sum of the hierarchy's
top, plus the nodes on an atom), the cost model's estimates and ``use_fast("auto", ...)``.

    python benchmarks/cpu_s35/coulomb_auto.py
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.backends.cpu import coulomb_fast as CF
from pbsolver.backends.cpu import maps as CM

DATA = Path(__file__).resolve().parents[2] / "data"


def median_ms(method, *args, repeat=5):
    """Median ms of ``coulomb_sum(*args, method=method)`` over ``repeat`` calls after one."""
    CM.coulomb_sum(*args, method=method)
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        CM.coulomb_sum(*args, method=method)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds)) * 1e3


def main() -> int:
    for name in ("peptide.pqr", "1lpb_chainA.pqr"):
        atoms = pb.read_pqr(DATA / name)
        pos, q = atoms.positions, atoms.charges
        nq = int((q != 0).sum())
        for n in (33, 41, 49, 65, 81):
            shape, h = (n, n, n), (0.5, 0.5, 0.5)
            origin = tuple(pos.mean(0) - 0.5 * (n - 1) / 2)
            direct = median_ms("direct", shape, origin, h, pos, q, 1.0)
            fast = median_ms("fast", shape, origin, h, pos, q, 1.0)
            levels = len(CF.plan_levels(shape, origin, h, nq, pos=pos)[0])
            print(f"{name:16s} {n}³, {nq * n**3:.2e} pairs: direct {direct:.1f} ms, fast "
                  f"{fast:.1f} ms ({levels} level{'s' if levels > 1 else ''}); estimated "
                  f"{CF.fast_cost(shape, h, nq) / 1e6:.1f} / {CF.direct_cost(shape, nq) / 1e6:.1f} "
                  f"core-ms; auto sums fast: {CF.use_fast('auto', shape, h, nq)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
