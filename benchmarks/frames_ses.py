"""SES frames per second: the stacked engine against the general per-frame path, side by side.

Colipase chain A (1,252 atoms, ``data/1lpb_chainA.pqr``) on a 65³ grid at 0.8 Å, surface "mol"
(or ``--surface smol``), rtol 1e-6, the frames of ``benchmarks/trajectory.py`` (a slow drift
and a wiggle). Two :class:`pbsolver.ReactionFieldCalculator` of one set-up, ``engine="stacked"``
and ``engine="general"``, each first given the same single frame (which places the same grid
and compiles) and the first batch (the batch size's buffers, kernels and graphs), then
``compute_batch`` of ``--batch`` frames ``--repeats`` times. Every frame
is maps + solve + energy + forces. Prints frames per second of both (wall and process CPU
time), their ratio, the engine's share of time in maps/solve/evaluate, and the largest
relative energy difference of the two paths on the same frames.

    python benchmarks/frames_ses.py --backend cpu --batch 32
    python benchmarks/frames_ses.py --backend cuda --batch 32 --repeats 5 --surface smol
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402


def run(calc, batches):
    """Time ``compute_batch`` over each batch: (wall s, CPU s, frames, energies, timings)."""
    wall = cpu = 0.0
    energies, timings = [], {}
    for frames in batches:
        c0, t0 = time.process_time(), time.perf_counter()
        out = calc.compute_batch(frames)
        calc.backend.synchronize()
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        energies += [fr.energy for fr in out]
        for fr in out:
            for k, v in fr.timings.items():
                timings[k] = timings.get(k, 0.0) + v
    return wall, cpu, sum(len(b) for b in batches), np.array(energies), timings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--surface", default="mol", choices=("mol", "smol", "vdw"))
    ap.add_argument("--batch", type=int, default=32, help="frames a compute_batch call")
    ap.add_argument("--repeats", type=int, default=1, help="timed batches per path")
    ap.add_argument("--only", choices=("stacked", "general"), default=None,
                    help="time one path only")  # fmt: skip
    args = ap.parse_args(argv)

    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    frames = frames_of(atoms, args.batch * args.repeats + 1)
    batches = [frames[1 + k * args.batch : 1 + (k + 1) * args.batch] for k in range(args.repeats)]
    if args.backend == "cuda":
        import cupy as cp

        batches = [[cp.asarray(f) for f in b] for b in batches]
    print(f"colipase {len(atoms)} atoms, 65³ at 0.8 Å, surface {args.surface!r}, rtol 1e-6, "
          f"backend {args.backend}, {args.repeats} batch(es) of {args.batch}",
          flush=True)  # fmt: skip
    results = {}
    for engine in ("stacked", "general"):
        if args.only not in (None, engine):
            continue
        calc = pb.ReactionFieldCalculator(
            atoms, spacing=0.8, shape=(65, 65, 65), margin=4.0, skin=2.0, surface=args.surface,
            backend=args.backend, engine=engine, rtol=1e-6, forces="field",
        )  # fmt: skip
        t0 = time.perf_counter()
        calc.compute(frames[0])  # places the grid, compiles, captures
        # the batch path's first call at the timed size: buffers, kernels specialised by the
        # frame count (φ_c's wide kernel from 8 frames), graphs and the stack's hierarchy
        calc.compute_batch(batches[0])
        print(f"  {engine:<8} first frames (compilation included) {time.perf_counter() - t0:.1f} s",
              flush=True)  # fmt: skip
        wall, cpu, n, energies, timings = run(calc, batches)
        results[engine] = energies
        share = ", ".join(f"{k} {1e3 * v / n:.1f}" for k, v in timings.items())
        print(f"  {engine:<8} {n / wall:8.3f} frames/s wall ({1e3 * wall / n:9.1f} ms a frame), "
              f"{n / cpu:8.3f} frames/s of process CPU time; ms a frame: {share}",
              flush=True)  # fmt: skip
        results[engine + "_fps"] = n / wall
    if "stacked_fps" in results and "general_fps" in results:
        ratio = results["stacked_fps"] / results["general_fps"]
        diff = np.abs(results["stacked"] / results["general"] - 1).max()
        print(
            f"  stacked / general: {ratio:.2f}x frames/s; energies agree to {diff:.2e} "
            "(relative, largest over the frames)"
        )


if __name__ == "__main__":
    main()
