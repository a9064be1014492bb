"""What an SES line costs on the CPU: body calls a line, and the time with fewer bisections.

1. The SES line body run as plain Python with a counter on every body it calls, over every
   fourth row of the lines along z of colipase on 65³ at 0.8 Å (probe 1.4 Å, sampling step
   0.25 Å, 14 bisections): calls a line of each body.
2. ``face_fractions(surface="mol")`` of the same grid, compiled, with 14, 7, 3 and 1 bisections
   and sampling steps of 0.25 and 0.4 Å: the median of three calls after one untimed one (the
   SES geometry is kept across calls, so this is the three axes' lines), and the largest change
   of any edge fraction from the 14-bisection, 0.25 Å result.

    python benchmarks/cpu_s35/ses_line_work.py
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.backends import get_backend
from pbsolver.backends.bodies import maps as B
from pbsolver.backends.bodies.lines import compile_lines
from pbsolver.backends.cpu import maps as K
from pbsolver.molecule import maps as M

DATA = Path(__file__).resolve().parents[2] / "data"


def counted_bodies(counts):
    """The SES bodies as plain Python, each call counted by name."""

    def jit(f):
        name = f.__name__

        def counted(*args):
            counts[name] += 1
            return f(*args)

        return counted

    return B.make_ses(jit, *compile_lines(jit))


def body_calls(atoms, grid, probe=1.4, step=0.25, nbisect=14):
    counts = collections.Counter()
    ses_line = counted_bodies(counts)["ses_line"]
    pos, vdw = np.ascontiguousarray(atoms.positions), np.ascontiguousarray(atoms.radii)
    acc = vdw + probe
    nb, features, exposed = M.ses_geometry(get_backend("cpu"), pos, vdw, probe)
    axis, h, n = 2, grid.spacing[2], grid.shape[2]
    us = grid.origin[0] + grid.spacing[0] * np.arange(grid.shape[0])
    vs = grid.origin[1] + grid.spacing[1] * np.arange(grid.shape[1])
    bins = M.line_bins(pos, acc, axis, us, vs)
    ebins = M.line_bins(pos, acc + probe, axis, us, vs, subset=exposed)
    args = K.ses_kernel_args(axis, us, vs, grid.origin[axis], h, n, pos, vdw, acc, probe, step,
                             nbisect, bins, ebins, features, nb)  # fmt: skip
    rest = args[14:-1]  # bins, exposed bins, neighbour lists, circles, arcs
    out = np.zeros(grid.shape)
    lines = 0
    cap = 1024
    for iu in range(0, len(us), 4):
        for iv in range(len(vs)):
            scratch = (np.empty(cap), np.empty(cap), np.empty(cap), np.empty(cap),
                       np.empty(cap, dtype=np.int64), np.empty(cap), np.zeros(4))  # fmt: skip
            ses_line(out, axis, 0, iu, iv, us[iu], vs[iv], grid.origin[axis], h, n, 0, n, pos,
                     vdw, acc, probe, step, nbisect, args[12], args[13], *rest,
                     *scratch)  # fmt: skip
            lines += 1
    return lines, counts


def main() -> int:
    atoms = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    grid = pb.Grid((65, 65, 65), spacing=0.8, origin=tuple(atoms.positions.mean(0) - 32 * 0.8))
    lines, counts = body_calls(atoms, grid)
    print(f"{lines} lines along z (every fourth row), calls a line:")
    for name, n in counts.most_common(12):
        print(f"  {name:24s} {n / lines:8.1f}")
    ref = None
    for nbisect in (14, 7, 3, 1):
        for step in (None, 0.4):
            M.face_fractions(atoms, grid, surface="mol", nbisect=nbisect, ses_step=step)
            seconds = []
            for _ in range(3):
                start = time.perf_counter()
                f = M.face_fractions(atoms, grid, surface="mol", nbisect=nbisect, ses_step=step)
                seconds.append(time.perf_counter() - start)
            ref = f if ref is None else ref
            change = max(float(np.abs(a - b).max()) for a, b in zip(f, ref, strict=True))
            print(f"nbisect {nbisect:2d}, step {step or 0.25}: {np.median(seconds) * 1e3:.1f} ms, "
                  f"largest change of a fraction {change:.1e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
