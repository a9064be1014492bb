r"""Where the stacked engine's SES time goes: each launch of :class:`pbsolver.md.ses.FrameSES`.

Issue 22's GPU path is bound by the SES step (``benchmarks/h200_final/s16b``'s synchronous
profile). This benchmark runs that step alone on the complex of the exported MM/PBSA frames
(``benchmarks/mmpbsa_frames.py export``), B frames at a time on the benchmark's grid, and
times every launch (neighbour lists, features, the three axes' line kernels) with the device
synchronised around it. Variants that answer what the line kernel spends its time on:

* ``--pieces P``: each line cut into P pieces (each a thread) instead of the default.
* ``--no-zones``: a sampling step longer than any line and one bisection, so that each
  reentrant zone costs two point tests: what is left is the chord gathering and merging.
* ``--threads T``: the line kernel launched with T threads a block (default: the engine's).
* ``--order off``: the lines in their natural order instead of costliest first (CUDA's
  default, ``FrameSES(order_lines=True)``); ``--order on off`` times both.
* ``--cprofile``: the first run under cProfile, with the call counts of the point test
  (``solute_at``) and of the zones; run it with ``NUMBA_DISABLE_JIT=1 --backend cpu --frames 1``
  to count the point tests of a frame (the bodies then run as Python).

The fractions of each variant are compared with the default run's (identical unless the
zones were skipped).

    python3 benchmarks/ses_line_profile.py .gpu/fkbp_frames.npz --backend cuda --frames 32 \
        --pieces 1 2 4 0 --json ses_profile.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from pbsolver.backends import get_backend
from pbsolver.md.ses import FrameSES


class TimedSES(FrameSES):
    """A FrameSES whose launches are timed (device synchronised before and after each)."""

    def __init__(self, *args, pieces=None, line_threads=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.times = []
        self.line_threads = line_threads
        if pieces:
            base = self.kernels
            self.kernels = type(base)(**{**vars(base), "pieces": lambda n, lines: pieces})

    def _launch(self, kernel, items, *args, threads=None):
        self.backend.synchronize()
        t0 = time.perf_counter()
        if threads is not None and self.line_threads:  # the line kernel's launches
            threads = self.line_threads
        super()._launch(kernel, items, *args, threads=threads)
        self.backend.synchronize()
        name = getattr(kernel, "__name__", None) or getattr(kernel, "py_func", kernel).__name__
        self.times.append((name, items, time.perf_counter() - t0))


def frames(npz, count, shape, spacing):
    """The complex's first ``count`` frames and a grid origin per frame (centred on the atoms)."""
    data = np.load(npz)
    pos = np.asarray(data["positions"][:count], dtype=np.float64)
    reps = -(-count // pos.shape[0])
    pos = np.concatenate([pos] * reps)[:count]
    centre = 0.5 * (pos.min(axis=1) + pos.max(axis=1))
    origin = centre - 0.5 * (np.asarray(shape) - 1) * spacing
    return pos, origin, np.asarray(data["radii"], dtype=np.float64)


def run_once(backend, radii, pos, origin, shape, spacing, pieces, zones, repeats, threads=None,
             profile=False, order=True):  # fmt: skip
    """Time ``repeats`` runs of one variant; (launch table of the last, wall times, fractions)."""
    xp = backend.array_module()
    kwargs = {"order_lines": order}
    if not zones:
        kwargs.update(ses_step=1e9, nbisect=1)
    ses = TimedSES(backend, radii, 1.4, shape, (spacing,) * 3, pieces=pieces,
                   line_threads=threads, **kwargs)  # fmt: skip
    nf = pos.shape[0]
    stride = shape[0] + shape[0] % 2
    out = [xp.zeros((nf * stride, shape[1], shape[2])) for _ in range(3)]
    dpos, dorigin = xp.asarray(pos), xp.asarray(origin)
    walls = []
    for k in range(repeats + 1):  # the first compiles
        ses.times = []
        backend.synchronize()
        t0 = time.perf_counter()
        if profile and k == 0:
            _profiled(ses.run, out, dpos, dorigin, stride)
        else:
            ses.run(out, dpos, dorigin, stride)
        backend.synchronize()
        walls.append(time.perf_counter() - t0)
    return ses.times, walls[1:] or walls, [backend.to_host(a) for a in out]


def _profiled(run, *args):
    """``run(*args)`` under cProfile; print the point test's and the zones' call counts."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(run, *args)
    stats = pstats.Stats(prof).stats
    for (_, _, name), (_, ncalls, *_rest) in sorted(stats.items()):
        if name in ("solute_at", "zone", "probe_reaches"):
            print(f"  calls of {name}: {ncalls}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("npz")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--pieces", type=int, nargs="*", default=[0], help="pieces a line (0: the kernels' default)"
    )
    ap.add_argument("--no-zones", action="store_true", help="also time without zone sampling")
    ap.add_argument("--threads", type=int, nargs="*", default=[0],
                    help="threads a block of the line kernel (0: the engine's)")  # fmt: skip
    ap.add_argument("--min-blocks", type=int, nargs="*", default=[-1],
                    help="compile the CUDA line kernel with launch bounds (threads, N) for each N "
                    "(0: none; -1: the library's LINE_MIN_BLOCKS)")  # fmt: skip
    ap.add_argument("--order", nargs="*", default=["on"], choices=("on", "off"),
                    help="lines costliest first (on) or in their natural order (off)")  # fmt: skip
    ap.add_argument("--cprofile", action="store_true", help="count the point tests (see above)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    data = np.load(args.npz)
    shape = tuple(int(s) for s in data["shape"])
    spacing = float(data["spacing"])
    pos, origin, radii = frames(args.npz, args.frames, shape, spacing)
    backend = get_backend(args.backend)
    print(f"{args.frames} frames of {pos.shape[1]} atoms, grid {shape} at {spacing} Å, "
          f"backend {args.backend}")  # fmt: skip
    orders = [o == "on" for o in args.order]
    variants = [(p, True, t, o, b) for b in args.min_blocks for o in orders for t in args.threads
                for p in args.pieces]  # fmt: skip
    if args.no_zones:
        variants += [(p, False, t, o, b) for b in args.min_blocks for o in orders
                     for t in args.threads for p in args.pieces]  # fmt: skip
    report = {"frames": args.frames, "atoms": int(pos.shape[1]), "shape": shape,
              "spacing": spacing, "variants": []}  # fmt: skip
    reference = None
    for pieces, zones, threads, order, min_blocks in variants:
        if min_blocks >= 0:  # the kernel set compiled again with these launch bounds
            import pbsolver.backends.frame_kernels as fk

            fk.LINE_MIN_BLOCKS = min_blocks or None
            fk._CUDA = None
        times, walls, fractions = run_once(backend, radii, pos, origin, shape, spacing, pieces,
                                           zones, args.repeats, threads or None,
                                           args.cprofile, order)  # fmt: skip
        if reference is None:
            reference = fractions
        diff = max(float(np.abs(a - b).max()) for a, b in zip(fractions, reference, strict=True))
        label = (f"pieces={pieces or 'default'} zones={'on' if zones else 'off'} "
                 f"threads={threads or 'default'} order={'on' if order else 'off'} "
                 f"min_blocks={min_blocks}")  # fmt: skip
        print(f"\n{label}: wall {min(walls):.4f} s (runs {', '.join(f'{w:.4f}' for w in walls)}),"
              f" max |Δfraction| vs first variant {diff:.3g}")  # fmt: skip
        for name, items, dt in times:
            print(f"  {name:<22s} {items:>10d} items  {1e3 * dt:9.2f} ms")
        report["variants"].append({
            "pieces": pieces, "zones": zones, "threads": threads, "order": order,
            "min_blocks": min_blocks, "wall_s": walls,
            "max_diff": diff,
            "launches": [{"kernel": n, "items": i, "s": t} for n, i, t in times],
        })  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return report


if __name__ == "__main__":
    main()
