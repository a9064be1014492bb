"""APBS' energy of one calculation, the way pbsolver computes it.

APBS' ``calcenergy total`` is ½ Σ_i q_i φ(r_i) with φ the grid's total potential: it contains
each charge's *self energy* on the grid, which depends on the grid and the charge spreading and
cancels only between calculations on the same grid (so users form differences,
``print elecEnergy solv - ref end``). pbsolver splits φ = φ_c + φ_rf with φ_c the analytic
Coulomb potential in ε_in (DESIGN §1) and reports, for atom i,

    E_i = ½ q_i [ Σ_{j≠i} k q_j / (ε_in r_ij) + φ_rf(r_i) ]

— the Coulomb energy of the atom's pairs in the solute's permittivity
(:func:`pbsolver.molecule.energy.coulomb_energy`) plus its reaction-field energy
(:func:`pbsolver.molecule.energy.reaction_field_terms`), *without* the self term. The sum
E = Σ_i E_i is APBS' total energy minus the self energies: APBS' differences between
calculations on the same grid (solvation, binding) are differences of these numbers up to the
two models' discretisation. For APBS' regularised equation (``lrpbe``), whose solution is the
reaction field, E_i = ½ q_i φ_rf(r_i).

With focusing, φ_rf(r_i) comes from the finest level that holds atom i; APBS' total energy
takes the charges outside its finest grid from the coarser levels too (its "external energy").

Units: kJ/mol.
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.molecule.energy import coulomb_energy, reaction_field_terms
from pbsolver.molecule.focusing import finest_level


def level_rf_terms(atoms, levels) -> np.ndarray:
    """Per-atom reaction-field terms ½ q_i φ_rf(r_i) after each focusing level, kJ/mol.

    Parameters
    ----------
    atoms : Atoms
    levels : list of FocusLevel
        Coarsest first; every atom lies inside the first.

    Returns
    -------
    ndarray (len(levels), n)
        Row k takes each atom's φ_rf from the finest of levels 0…k that holds it: the energies
        APBS reports for level k.
    """
    pos = np.asarray(atoms.positions)
    terms = np.zeros(len(atoms))
    rows = np.zeros((len(levels), len(atoms)))
    for k, level in enumerate(levels):
        inside = np.flatnonzero(finest_level([level.grid], pos) == 0)
        if inside.size:
            phi = to_numpy(level.result.phi_rf)
            terms[inside] = reaction_field_terms(atoms[inside], level.grid, phi)
        rows[k] = terms
    return rows


def pair_terms(atoms, eps_in: float, equation: str = "lpbe") -> np.ndarray:
    """Per-atom Coulomb terms ½ q_i Σ_{j≠i} k q_j / (ε_in r_ij) of APBS' energy, kJ/mol.

    Parameters
    ----------
    atoms : Atoms
    eps_in : float
        Solute permittivity (APBS ``pdie``), the medium of the Coulomb pairs.
    equation : {"lpbe", "lrpbe"}
        ``lrpbe`` has none (its solution is the reaction field alone): zeros.

    Returns
    -------
    ndarray (n,)
        Added to the reaction-field terms (:func:`level_rf_terms`) they are the per-atom
        energies of ``calcenergy comps``, summing to ``calcenergy total``.

    Raises
    ------
    InputError
        Two charged atoms at the same position (an infinite Coulomb energy).
    """
    if equation == "lrpbe":
        return np.zeros(len(atoms))
    return coulomb_energy(atoms, eps_in, per_atom=True)


__all__ = ["level_rf_terms", "pair_terms"]
