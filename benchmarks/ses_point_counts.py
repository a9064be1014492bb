r"""What the SES point test does, counted: candidates, projections, circles and arcs per test.

Runs the SES line bodies as plain Python (``NUMBA_DISABLE_JIT=1``, set here) over every
``--every``-th line of one axis of the first frame of the exported MM/PBSA frames
(``benchmarks/mmpbsa_frames.py export``), with each body that the point test
(``probe_reaches``) calls wrapped in a counter. Nothing of the test is copied: the counters
sit around the bodies :func:`pbsolver.backends.bodies.maps.make_ses` compiles.

    python benchmarks/ses_point_counts.py .gpu/fkbp_frames.npz --axis 0 --every 9

Per point test it prints: the point tests themselves (``probe_reaches``), the answers found by
the last probe centre kept (``hit cache``), the candidates looked at (``sphere_probe``), the
radial projections checked for burial (``buried``), the circles looked at
(``circle_height``), those within the probe of the point's plane (``circle_local``), the arcs
tested (``in_arc``), and the samples and bisections of the zones.
"""

from __future__ import annotations

import argparse
import collections
import os
import time

os.environ["NUMBA_DISABLE_JIT"] = "1"  # before numba is imported: the bodies run as Python

import numpy as np  # noqa: E402

from pbsolver.backends import get_backend  # noqa: E402
from pbsolver.backends.bodies import maps as B  # noqa: E402
from pbsolver.backends.bodies.lines import compile_lines  # noqa: E402
from pbsolver.molecule import maps as M  # noqa: E402

COUNTED = ("probe_reaches", "sphere_probe_body", "buried_body", "circle_height_body",
           "circle_local_body", "in_arc_body", "remember_body", "zone")  # fmt: skip


def counting_jit(counts):
    """A stand-in for ``jit`` that returns the body itself, counting the calls of some."""

    def jit(body):
        name = body.__name__
        if name not in COUNTED:
            return body

        def counted(*args):
            counts[name] += 1
            result = body(*args)
            if name == "zone":  # samples: the zone's sample points (bisections are the rest)
                zs, ze, step = args[5], args[6], args[20]
                counts["samples"] += max(1, int(np.ceil((ze - zs) / step))) + 1
            if name == "probe_reaches" and not result:
                counts["solute answers"] += 1
            return result

        return counted

    return jit


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("npz")
    ap.add_argument("--axis", type=int, default=0)
    ap.add_argument("--every", type=int, default=9, help="every n-th line of the axis")
    args = ap.parse_args()
    data = np.load(args.npz)
    shape = tuple(int(s) for s in data["shape"])
    h = float(data["spacing"])
    pos = np.asarray(data["positions"][0], dtype=np.float64)
    rad = np.asarray(data["radii"], dtype=np.float64)
    origin = 0.5 * (pos.min(0) + pos.max(0)) - 0.5 * (np.asarray(shape) - 1) * h
    probe, nbisect = 1.4, 14
    counts = collections.Counter()
    ses = B.make_ses(counting_jit(counts), *compile_lines(lambda f: f))
    nb, features, exposed = M.ses_geometry(get_backend("cpu"), pos, rad, probe)
    _exposed, circ_start, _circ_j, geom, arc_start, arcs = features
    acc = rad + probe
    axis = args.axis
    a1, a2 = [a for a in range(3) if a != axis]
    us, vs = (origin[a] + h * np.arange(shape[a]) for a in (a1, a2))
    bins = M.line_bins(pos, acc, axis, us, vs)
    ebins = M.line_bins(pos, acc + probe, axis, us, vs, subset=exposed)
    step = M.ses_sampling_step(h, None)
    maxacc = float(acc.max())
    out = np.zeros(shape)
    lines, t0 = 0, time.perf_counter()
    for line in range(0, len(us) * len(vs), args.every):
        iu, iv, u, v = ses["line"](line, us, vs)
        cap = ses["bin_count"](u, v, maxacc, *bins[:6])
        if cap == 0:
            continue
        ecap = max(1, ses["bin_count"](u, v, maxacc + probe, *ebins[:6]))
        lines += 1
        ses["ses_line"](
            out, axis, 0, iu, iv, u, v, origin[axis], h, shape[axis], 0, shape[axis], pos, rad,
            acc, probe, step, nbisect, maxacc, maxacc + probe, *bins, *ebins, *nb, circ_start,
            geom, arc_start, arcs, np.empty(cap), np.empty(cap), np.empty(cap), np.empty(cap),
            np.empty(ecap, dtype=np.int64), np.empty(ecap), np.zeros(4),
        )  # fmt: skip
    tests = counts["probe_reaches"]
    counts["hit cache"] = tests - counts["solute answers"] - counts["remember_body"]
    counts["bisections"] = tests - counts["samples"]
    seconds = time.perf_counter() - t0
    print(f"{args.npz}: frame 0, axis {axis}, every {args.every}th line: {lines} lines with "
          f"atoms, {len(pos)} atoms, grid {shape} at {h} Å ({seconds:.1f} s)")  # fmt: skip
    print(f"{'':24s} {'count':>10s} {'per test':>9s}")
    for name in ("probe_reaches", "hit cache", "solute answers", "remember_body",
                 "sphere_probe_body", "buried_body", "circle_height_body", "circle_local_body",
                 "in_arc_body", "zone", "samples", "bisections"):  # fmt: skip
        print(f"{name:24s} {counts[name]:10d} {counts[name] / max(tests, 1):9.3f}")


if __name__ == "__main__":
    main()
