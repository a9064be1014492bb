"""APBS ``APOLAR`` sections: checked into parameters, then computed.

An APOLAR section asks for APBS's nonpolar model W = γ·SASA + p·SAV + ρ̄ Σᵢ ∫ uᵢ θ dV
(:mod:`pbsolver.molecule.apolar`, which follows APBS 3.4.1's definitions and quadratures, so
the energies are APBS's). Its keywords map one to one: ``gamma``, ``press``, ``bconc``,
``srad``, ``sdens``, ``dpos``, ``grid`` (the quadrature spacing of the volume and dispersion
integrals), ``mol``; ``srfm sacc`` is the only surface APBS accepts; ``swin`` and ``temp`` are
required by APBS and unused by its model. As APBS, every keyword but ``name``,
``calcenergy`` and ``calcforce`` must be given.

The dispersion term (``bconc`` ≠ 0) needs Lennard-Jones parameters, which only APBS's flat
parameter file carries: each atom's ``EPSILON`` column (looked up by residue and atom name)
and water's ``WAT OW`` line (its radius and epsilon).

Forces (``calcforce``) are F = −∂W/∂r, term by term; APBS 3.4.1 prints other numbers there
(see :mod:`pbsolver.molecule.apolar`), which :data:`FORCE_NOTE` says once in the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbsolver.apbs.section import Section
from pbsolver.exceptions import InputError

#: Keywords APBS requires in an APOLAR section (APOLparm_check).
REQUIRED = ("grid", "mol", "bconc", "sdens", "dpos", "press", "srfm", "srad", "swin", "temp",
            "gamma")  # fmt: skip
FORCE_NOTE = (
    "APOLAR forces are F = -dW/dr of each term; APBS 3.4.1 prints the SASA term as the raw "
    "finite-difference area derivative of the moved atom's own area, and its per-atom totals "
    "multiply the dispersion force by bconc twice"
)


@dataclass(kw_only=True)
class ApolarCalculation(Section):
    """One APOLAR section, ready to run.

    Attributes
    ----------
    index, name, molecule, atoms, energy, force, block
        :class:`~pbsolver.apbs.section.Section`'s (``block``: the ApolarBlock).
    epsilons : ndarray (n,)
        The atoms' Lennard-Jones well depths, kJ/mol (zeros without the dispersion term).
    params : ApolarParameters
    """

    epsilons: np.ndarray
    params: object


def plan_apolar(block, molecules, parm_table, source) -> ApolarCalculation:
    """The :class:`ApolarCalculation` of one APOLAR section, every value checked.

    Parameters
    ----------
    block : ApolarBlock
    molecules : list of Atoms
        The READ section's molecules.
    parm_table : dict or None
        :func:`pbsolver.apbs.files.read_parm`'s table (None: the input has no parameter file).
    source : str
        The input file's name, for messages.

    Raises
    ------
    InputError
        ``<file>:<line>: APOLAR #n: …`` for a missing keyword, a value out of range, or a
        dispersion term without Lennard-Jones parameters.
    """
    from pbsolver.apbs.files import atom_epsilons, water_parameters
    from pbsolver.molecule.apolar import ApolarParameters

    def fail(key, message):
        line = block.lines.get(key, block.line)
        return InputError(f"{source}:{line}: {block.label}: {message}")

    for key in REQUIRED:
        if getattr(block, key) is None:
            raise InputError(
                f"{source}:{block.line}: {block.label} (ending on line {block.end_line}) is "
                f"missing {key}, which APBS requires"
            )
    if not 1 <= block.mol <= len(molecules):
        raise fail("mol", f"mol {block.mol}: the READ section has {len(molecules)} molecule(s)")
    atoms = molecules[block.mol - 1]
    for key in ("sdens", "dpos", "temp"):
        if not getattr(block, key) > 0:
            raise fail(key, f"{key} must be > 0, got {getattr(block, key)}")
    for key in ("srad", "bconc", "swin"):
        if not getattr(block, key) >= 0:
            raise fail(key, f"{key} must be >= 0, got {getattr(block, key)}")
    if not all(h > 0 for h in block.grid):
        raise fail("grid", f"grid must be three spacings > 0 Å, got {block.grid}")
    water = (0.0, 0.0)
    epsilons = np.zeros(len(atoms))
    if block.bconc > 0:
        where = f"{source}:{block.lines['bconc']}: {block.label}"
        if parm_table is None:
            raise InputError(
                f"{where}: the dispersion term (bconc > 0) needs Lennard-Jones parameters from "
                "a parameter file: add 'parm flat FILE' to the READ section, as APBS requires"
            )
        water = water_parameters(parm_table, where)
        epsilons = atom_epsilons(atoms, parm_table, where)
    params = ApolarParameters(
        gamma=float(block.gamma),
        press=float(block.press),
        bconc=float(block.bconc),
        srad=float(block.srad),
        sdens=float(block.sdens),
        dpos=float(block.dpos),
        grid=tuple(float(h) for h in block.grid),
        water_radius=water[0],
        water_epsilon=water[1],
    )
    return ApolarCalculation.from_block(block, atoms, epsilons=epsilons, params=params)


def run_apolar(calc):
    """The terms of one APOLAR calculation: :class:`pbsolver.molecule.apolar.ApolarResult`."""
    from pbsolver.molecule.apolar import apolar_terms

    atoms = calc.atoms
    return apolar_terms(atoms.positions, atoms.radii, calc.epsilons, calc.params,
                        forces=calc.force != "no")  # fmt: skip


__all__ = ["FORCE_NOTE", "REQUIRED", "ApolarCalculation", "plan_apolar", "run_apolar"]
