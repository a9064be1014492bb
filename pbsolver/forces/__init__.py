"""Forces that are the exact gradient of the discrete solvation energy (see :mod:`.gradient`)."""

from pbsolver.forces.gradient import (
    EXACT_SURFACES,
    SMOOTH_SURFACES,
    Forces,
    solvation_forces,
    supports,
)

__all__ = ["EXACT_SURFACES", "SMOOTH_SURFACES", "Forces", "solvation_forces", "supports"]
