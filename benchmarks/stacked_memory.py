"""Bytes a grid node a frame that the stacked engine's batches allocate on the CPU (tracemalloc).

For each surface and kind of forces, a fresh :class:`pbsolver.ReactionFieldCalculator`
(``engine="stacked"``, CPU, the shipped peptide at ``--spacing``, 0.15 M) runs two batches of B
frames under tracemalloc (its kernels compiled untraced first, by another calculator); the
peak of NumPy's traced allocations (the engine's buffers, the forces' arrays; not numba's own
inside kernels) is printed per grid node and frame, beside
:meth:`pbsolver.md.engine.StackedFrames.batch_bytes`'s estimate of the same batch. The
constants of ``pbsolver/md/engine.py`` come from these rows.

    python benchmarks/stacked_memory.py --spacing 0.8 --batches 1 2 4 8
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spacing", type=float, default=0.8)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--surfaces", nargs="+", default=["vdw", "mol", "smol"])
    args = p.parse_args(argv)
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    frames = frames_of(atoms, 2 * max(args.batches), drift=0.005, wiggle=0.01)
    print("surface forces B  traced peak MB  traced B/node/frame  estimate B/node/frame")
    for forces in ("field", "exact"):
        for surface in args.surfaces:
            kw = {"forces": forces, "engine": "stacked", "spacing": args.spacing,
                  "surface": surface, "ionic_strength": 0.15, "backend": "cpu", "margin": 6.0,
                  "skin": 1.0}  # fmt: skip
            warm = pb.ReactionFieldCalculator(atoms, **kw)
            for b in args.batches:  # every batch size's kernels compiled untraced
                warm.compute_batch(frames[:b])
            del warm
            for b in args.batches:
                gc.collect()
                tracemalloc.start()
                try:
                    calc = pb.ReactionFieldCalculator(atoms, **kw)
                    calc.compute_batch(frames[:b])
                    calc.compute_batch(frames[b : 2 * b])
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                engine = calc._stacked
                size = engine.grid.size
                estimate = engine.batch_bytes(b, exact=forces == "exact")
                print(f"{surface:7s} {forces:6s} {b:2d} {peak / 1e6:14.1f} "
                      f"{peak / size / b:20.0f} {estimate / size / b:22.0f}")  # fmt: skip
                del calc


if __name__ == "__main__":
    main()
