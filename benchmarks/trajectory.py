"""The benchmarks' test trajectory: a solute drifting slowly and wiggling (NumPy only).

Imported by scripts that also time trees of pbsolver other than this one, so it imports nothing
of the package.
"""

from __future__ import annotations

import numpy as np


def frames_of(atoms, count, drift=0.01, wiggle=0.02, seed=0):
    """``count`` frames of ``atoms`` (positions, Å).

    A rigid drift of ``drift`` Å a frame plus a smooth per-atom wiggle of ±``wiggle`` Å.
    """
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=3)
    direction /= np.linalg.norm(direction)
    phase = rng.uniform(0, 2 * np.pi, size=atoms.positions.shape)
    return [
        atoms.positions + k * drift * direction + wiggle * np.sin(0.3 * k + phase)
        for k in range(count)
    ]


def warm_exact_batches(pb, args, count):
    """A stacked-engine calculator with exact forces, warmed up, and ``count`` batches to time.

    ``pb`` is the pbsolver module of the tree being timed (this module imports none);
    ``args`` has ``pqr``, ``batch``, ``warmup``, ``spacing``, ``surface``, ``salt`` and
    ``backend``. Returns ``(atoms, calculator, batches)``; ``args.warmup`` batches of this
    trajectory have run through ``compute_batch`` already.
    """
    atoms = pb.read_pqr(args.pqr)
    n = args.batch
    frames = frames_of(atoms, n * (count + args.warmup), drift=0.005, wiggle=0.01)
    calc = pb.ReactionFieldCalculator(
        atoms, forces="exact", engine="stacked", spacing=args.spacing, surface=args.surface,
        ionic_strength=args.salt, backend=args.backend, rtol=1e-6, margin=8.0, skin=2.0,
    )  # fmt: skip
    batches = [frames[k : k + n] for k in range(0, len(frames), n)]
    for b in batches[: args.warmup]:
        calc.compute_batch(b)
    return atoms, calc, batches[args.warmup :]
