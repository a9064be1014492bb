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

For the nonlinear equation (``npbe`` with salt) APBS' total is the free energy
qf − diel − qm (``Vpmg_energy``), and its difference from the reference state is pbsolver's
nonlinear polar solvation energy (:mod:`pbsolver.nonlinear.energy`): the energy reported is
Σ_i E_i plus the mobile ions' two terms (``mobile`` + ``osmotic``, :func:`level_ion_terms`),
volume integrals over the solvent with no per-atom split.

With focusing, φ_rf(r_i) comes from the finest level that holds atom i; APBS' total energy
takes the charges outside its finest grid from the coarser levels too (its "external energy"),
and so do its ion integrals: a level's energy integrates each coarser level over the part of
its box outside the next finer one (APBS' ``extEnergy``), then its own box.

Units: kJ/mol.
"""

from __future__ import annotations

import numpy as np

from pbsolver.molecule.energy import coulomb_energy, reaction_field_terms
from pbsolver.molecule.focusing import finest_level
from pbsolver.nonlinear.energy import ion_terms, node_volumes


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
        if inside.size:  # (sampled where φ_rf lives: on a GPU, only the atoms' values return)
            terms[inside] = reaction_field_terms(atoms[inside], level.grid, level.result.phi_rf)
        rows[k] = terms
    return rows


def level_ion_terms(levels) -> np.ndarray:
    """The nonlinear free energy's ion terms (mobile, osmotic) after each level, kJ/mol.

    Parameters
    ----------
    levels : list of FocusLevel
        Coarsest first, each inside the one before it, nonlinear solutions
        (:func:`pbsolver.nonlinear.energy.ion_terms`; zeros without salt).

    Returns
    -------
    ndarray (len(levels), 2)
        Row k: levels 0…k−1 integrated outside the box of the level after each (their nodes'
        volumes less their overlap with that box), plus level k over its whole box, as APBS
        composes its energy after level k.
    """
    rows = np.zeros((len(levels), 2))
    outside = np.zeros(2)  # the coarser levels' share, outside the finer boxes
    for k, level in enumerate(levels):
        phi = level.result.phi_rf  # the sums run where it is (with the problem's maps)
        rows[k] = outside + ion_terms(level.problem, phi)
        if k + 1 < len(levels):
            vol = outside_volumes(level.grid, levels[k + 1].grid)
            outside = outside + ion_terms(level.problem, phi, volumes=vol)
    return rows


def outside_volumes(grid, inner) -> np.ndarray:
    """Each node's volume (Å³) outside the box of ``inner``, a grid inside ``grid``.

    A node's volume is its cell of half a spacing either side, clipped to ``grid``'s box (the
    trapezoidal weights of :func:`pbsolver.nonlinear.energy.node_volumes`); the part of it
    inside ``inner``'s box is removed, so that the two grids' volumes add up to ``grid``'s box.
    """
    whole = node_volumes(grid, False)
    overlap = []
    for x, h, o, n, ilo, ilen in zip(grid.axes(), grid.spacing, grid.origin, grid.shape,
                                     inner.origin, inner.lengths, strict=True):  # fmt: skip
        lo = np.maximum(x - 0.5 * h, o)
        hi = np.minimum(x + 0.5 * h, o + (n - 1) * h)
        overlap.append(np.clip(np.minimum(hi, ilo + ilen) - np.maximum(lo, ilo), 0.0, None))
    inside = overlap[0][:, None, None] * overlap[1][None, :, None] * overlap[2][None, None, :]
    return whole - inside


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


__all__ = ["level_ion_terms", "level_rf_terms", "outside_volumes", "pair_terms"]
