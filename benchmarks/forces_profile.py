"""Where an exact-forces frame's force time goes: cProfile of ``solvation_forces`` in a calculator.

A :class:`pbsolver.ReactionFieldCalculator` with ``forces="exact"`` (general engine, warm
starts) runs ``--warmup`` frames, then ``--frames`` more with only
:func:`pbsolver.forces.solvation_forces` profiled (the maps and the forward solve are not); the
functions are listed by cumulative time per frame (``--whole``: the whole ``compute`` of each
frame, maps and forward solve included). The same set-up as ``benchmarks/forces_cost.py``
(peptide, h 0.5 Å, 0.15 M, margin 8 Å).

    python benchmarks/forces_profile.py --surface mol --top 30
    python benchmarks/forces_profile.py --backend cuda --surface mol --batch 32 --frames 1 \
        --warmup 1   # compute_batch on the stacked engine
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of, warm_exact_batches  # noqa: E402

import pbsolver as pb  # noqa: E402
import pbsolver.forces as forces_module  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pqr", default=str(pb.data.path("peptide.pqr")))
    p.add_argument("--surface", choices=["svdw", "vdw", "mol", "smol"], default="mol")
    p.add_argument("--spacing", type=float, default=0.5)
    p.add_argument("--salt", type=float, default=0.15)
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--frames", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--whole", action="store_true", help="profile the whole frame, not the forces")
    p.add_argument("--callers", help="also print the callers of the functions matching this regex")
    p.add_argument("--batch", type=int, default=0,
                   help="profile whole compute_batch calls of this many frames on the stacked "
                   "engine (--frames of them after --warmup)")  # fmt: skip
    args = p.parse_args(argv)
    if args.batch:
        return profile_batches(args)

    atoms = pb.read_pqr(args.pqr)
    frames = frames_of(atoms, args.frames + args.warmup, drift=0.005, wiggle=0.01)
    calc = pb.ReactionFieldCalculator(
        atoms, forces="exact", engine="general", spacing=args.spacing, surface=args.surface,
        ionic_strength=args.salt, backend=args.backend, rtol=1e-6, margin=8.0, skin=2.0,
        map_options={"maps_backend": args.backend},
    )  # fmt: skip
    for pos in frames[: args.warmup]:
        calc.compute(pos)
    profile = cProfile.Profile()
    forces = forces_module.solvation_forces  # the calculator imports it from here per frame

    def profiled(*a, **k):
        profile.enable()
        try:
            return forces(*a, **k)
        finally:
            profile.disable()

    if args.whole:
        profile.enable()
    else:
        forces_module.solvation_forces = profiled
    try:
        for pos in frames[args.warmup :]:
            calc.compute(pos)
    finally:
        profile.disable()
        forces_module.solvation_forces = forces
    part = "whole frames" if args.whole else "forces"
    print(f"{Path(args.pqr).name}: {len(atoms)} atoms, surface {args.surface}, backend "
          f"{args.backend}; cumulative seconds of the {part}, {args.frames} frames")  # fmt: skip
    stats = pstats.Stats(profile).sort_stats("cumulative")
    stats.print_stats(args.top)
    if args.callers:
        stats.print_callers(args.callers)


def profile_batches(args):
    """cProfile of whole ``compute_batch`` calls with exact forces on the stacked engine."""
    atoms, calc, batches = warm_exact_batches(pb, args, args.frames)
    n = args.batch
    profile = cProfile.Profile()
    profile.enable()
    try:
        for b in batches:
            calc.compute_batch(b)
    finally:
        profile.disable()
    print(f"{Path(args.pqr).name}: {len(atoms)} atoms, surface {args.surface}, backend "
          f"{args.backend}; cumulative seconds of {args.frames} compute_batch calls of {n} "
          "frames (stacked engine, exact forces)")  # fmt: skip
    stats = pstats.Stats(profile).sort_stats("cumulative")
    stats.print_stats(args.top)
    if args.callers:
        stats.print_callers(args.callers)


if __name__ == "__main__":
    main()
