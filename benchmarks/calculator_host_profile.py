"""Where the host time of ``ReactionFieldCalculator.compute_batch`` goes (cProfile).

The calculator and frames of ``benchmarks/md_pipeline.py`` part 3 (colipase, 65³ at 0.8 Å,
vdW, stacked engine): two warm-up batches, then ``--batches`` batches of ``--batch`` frames
under cProfile; prints the functions with the most own time and the wall time per frame.

    python benchmarks/calculator_host_profile.py --backend cuda --batch 64
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--method", default="multigrid")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--pqr", type=Path, default=None, help="default: data/1lpb_chainA.pqr")
    ap.add_argument("--timed", type=int, default=10, help="batches timed without the profiler")
    args = ap.parse_args(argv)
    # (a path of its own: a tree timed from a copy of its package has no data folder)
    atoms = pb.read_pqr(args.pqr or pb.data.path("1lpb_chainA.pqr"))
    b = args.batch
    frames = frames_of(atoms, (2 + args.batches) * b)
    calc = pb.ReactionFieldCalculator(
        atoms, spacing=0.8, shape=(65, 65, 65), margin=4.0, surface="vdw",
        backend=args.backend, rtol=1e-6, engine="stacked", method=args.method,
    )  # fmt: skip
    for i in range(2):
        calc.compute_batch(frames[i * b : (i + 1) * b])
    walls, steps = [], {"maps": [], "solve": [], "evaluate": []}
    for i in range(args.timed):  # the same frames again: the same work as the profiled batches
        j = 2 + i % args.batches
        start = time.perf_counter()
        results = calc.compute_batch(frames[j * b : (j + 1) * b])
        walls.append(time.perf_counter() - start)
        for k, v in steps.items():
            v.append(results[0].timings[k] * b)  # the batch's, not a frame's share
    print(f"batch of {b}: median {1e3 * statistics.median(walls):.3f} ms "
          f"(min {1e3 * min(walls):.3f}); per call " + ", ".join(
              f"{k} {1e3 * statistics.median(v):.3f} ms" for k, v in steps.items())
          + f"; iterations {results[0].iterations}")  # fmt: skip
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    for i in range(2, 2 + args.batches):
        calc.compute_batch(frames[i * b : (i + 1) * b])
    prof.disable()
    wall = time.perf_counter() - start
    n = args.batches * b
    print(f"{n} frames in batches of {b}: {1e3 * wall / n:.3f} ms a frame (under cProfile)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
