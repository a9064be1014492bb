"""APBS' energy of one calculation, the way pbsolver computes it.

APBS' ``calcenergy total`` is ½ Σ_i q_i φ(r_i) with φ the grid's total potential: it contains
each charge's *self energy* on the grid, which depends on the grid and the charge spreading and
cancels only between calculations on the same grid (so users form differences,
``print elecEnergy solv - ref end``). pbsolver splits φ = φ_c + φ_rf with φ_c the analytic
Coulomb potential in ε_in (DESIGN §1) and reports, for atom i,

    E_i = ½ q_i [ Σ_{j≠i} k q_j / (ε_in r_ij) + φ_rf(r_i) ]

— the Coulomb energy of the atom's pairs in the solute's permittivity plus its reaction-field
energy, *without* the self term. The sum E = Σ_i E_i is APBS' total energy minus the self
energies: APBS' differences between calculations on the same grid (solvation, binding) are
differences of these numbers up to the two models' discretisation. For APBS' regularised
equation (``lrpbe``), whose solution is the reaction field, E_i = ½ q_i φ_rf(r_i).

Units: kJ/mol (k = :data:`pbsolver.COULOMB_KJ`).
"""

from __future__ import annotations

import numpy as np

from pbsolver.exceptions import InputError
from pbsolver.molecule.maps import COULOMB_KJ

#: Rows of the pair-distance block computed at once (memory: rows × atoms × 8 bytes × a few).
CHUNK = 512


def coulomb_atom_energies(atoms, eps: float) -> np.ndarray:
    """½ q_i Σ_{j≠i} k q_j / (ε r_ij) for each atom, kJ/mol (an exact pair sum, float64).

    Parameters
    ----------
    atoms : Atoms
    eps : float
        Relative permittivity of the medium (APBS ``pdie``).

    Raises
    ------
    InputError
        Two charged atoms at the same position (an infinite energy).
    """
    pos = np.asarray(atoms.positions, dtype=np.float64)
    q = np.asarray(atoms.charges, dtype=np.float64)
    n = len(q)
    out = np.zeros(n)
    charged = np.flatnonzero(q != 0)
    if charged.size < 2:
        return out
    p, qc = pos[charged], q[charged]
    for start in range(0, charged.size, CHUNK):
        rows = slice(start, min(start + CHUNK, charged.size))
        d = np.sqrt(((p[rows, None, :] - p[None, :, :]) ** 2).sum(axis=2))
        own = np.arange(rows.start, rows.stop)
        d[own - start, own] = np.inf  # no self term
        if not np.all(d > 0):
            i, j = (int(v) for v in np.argwhere(d == 0)[0])
            raise InputError(
                f"charged atoms {int(charged[start + i])} and {int(charged[j])} sit at the same "
                "position: their Coulomb energy is infinite"
            )
        out[charged[rows]] = 0.5 * qc[rows] * (COULOMB_KJ / eps) * (qc[None, :] / d).sum(axis=1)
    return out


def atom_energies(atoms, eps_in: float, phi_rf_at_atoms, equation: str = "lpbe") -> np.ndarray:
    """APBS-style per-atom energies (kJ/mol) without self terms; see the module docstring.

    Parameters
    ----------
    atoms : Atoms
    eps_in : float
        Solute permittivity (APBS ``pdie``), the medium of the Coulomb pairs.
    phi_rf_at_atoms : array (n,)
        φ_rf at the atoms, kJ mol⁻¹ e⁻¹ (zeros for a homogeneous calculation).
    equation : {"lpbe", "lrpbe"}
        ``lrpbe`` leaves the Coulomb pairs out (its solution is the reaction field alone).
    """
    rf = 0.5 * np.asarray(atoms.charges, dtype=np.float64) * np.asarray(phi_rf_at_atoms)
    if equation == "lrpbe":
        return rf
    return coulomb_atom_energies(atoms, eps_in) + rf


__all__ = ["atom_energies", "coulomb_atom_energies"]
