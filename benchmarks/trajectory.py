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
