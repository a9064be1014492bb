"""The free energy of the nonlinear Poisson–Boltzmann equation and its polar solvation energy.

**The functional.** With fixed charges ρ (e Å⁻³), φ the total potential (kJ mol⁻¹ e⁻¹),
k = 1389.35 kJ Å mol⁻¹ e⁻², κ̄² = ε_out κ² on the ion-accessible region and x = zφ/kT, the
electrostatic free energy of the nonlinear equation for a z:z salt (Sharp and Honig 1990; what
APBS reports for ``npbe`` with ``calcenergy total``, as ``qfEnergy − dielEnergy − qmEnergy``)
is

    G[φ] = ∫ ρφ dV − (1/8πk) ∫ ε |∇φ|² dV − (1/4πk) ∫ κ̄² (kT/z)² (cosh x − 1) dV
           (fixed charges)  (field energy)        (ions: osmotic pressure and entropy)

Its stationary point is the equation −∇·(ε∇φ) + κ̄² (kT/z) sinh x = 4πkρ, and at low potential
(cosh x − 1 ≈ x²/2) it is the linear ½ ∫ ρφ dV.

**The polar solvation energy** is G of the solvated state (ε, salt) minus G of the reference
state (homogeneous ε_c = ε_in, no salt, whose potential is φ_c, so G_ref = ½∫ρφ_c): APBS
computes both with two solves and subtracts. In the reaction-field split φ = φ_c + φ_rf the
difference is finite and needs no second solve. Write N = κ̄² (kT/z) sinh x for the ion term
and use three identities (integration by parts, fields decaying at infinity): Poisson's
equation for φ_c (∫ ε_c ∇φ_c·∇ψ = 4πk ∫ ρψ), and the reaction-field equation
−∇·(ε∇φ_rf) + N = ∇·((ε − ε_c)∇φ_c) tested with φ_c and with φ_rf:

    ∫ ε∇φ_rf·∇φ_c + ∫ Nφ_c = ∫ (ε_c − ε)|∇φ_c|²,    ∫ ε∇φ_rf·∇φ = 4πk ∫ ρφ_rf − ∫ Nφ_rf.

Expanding G[φ_c + φ_rf] − G_ref, the infinite self-energies cancel (∫ρφ_c − ½∫ρφ_c −
(1/8πk)∫ε|∇φ_c|² = (1/8πk)∫(ε_c − ε)|∇φ_c|²) and the identities leave

    ΔG = ½ Σ_i q_i φ_rf(r_i) + (1/8πk) ∫ N φ dV − (1/4πk) ∫ κ̄² (kT/z)² (cosh x − 1) dV
       = ½ Σ_i q_i φ_rf(r_i) + (1/4πk) ∫ κ̄² (kT/z)² [½ x sinh x − (cosh x − 1)] dV.

Terms included: the fixed charges' reaction-field energy (``fixed``, pbsolver's linear energy,
sampled at the atoms as in :mod:`pbsolver.molecule.energy`), the mobile ions' electrostatic
term −½ ∫ ρ_ion φ with ρ_ion = −N/4πk (``mobile``, ≥ 0) and the osmotic/entropic term
(``osmotic``, ≤ 0). The bracket is Σ_{n≥2} (n − 1) x^{2n}/(2n)! = x⁴/24 + …, so at low
potential the ion terms cancel to fourth order and ΔG tends to the linear ½ Σ q_i φ_rf(r_i); in
the linearised equation (cosh x − 1 → x²/2, sinh x → x) they cancel exactly. Not included:
non-polar terms, and any dielectric-boundary pressure beyond what φ_rf carries.

On the grid the ion integrals are sums over the nodes of κ̄² times the node's volume (the
trapezoidal rule: half weight on each outer face of a Dirichlet box, where the potential and
so the integrand are small), with the overflow-safe functions of
:mod:`pbsolver.nonlinear.boltzmann`, in kJ/mol: :func:`ion_terms`.
:func:`pbsolver.molecule.energy.solvation_terms` adds the fixed charges' term sampled at the
atoms and returns the three as :class:`SolvationTerms` (kJ/mol or kcal/mol).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import array_module, to_numpy
from pbsolver.exceptions import InputError
from pbsolver.io.units import kT_kj_per_mol
from pbsolver.molecule.maps import COULOMB_KJ
from pbsolver.nonlinear import boltzmann


@dataclass(frozen=True)
class SolvationTerms:
    """The polar solvation energy of a nonlinear solution and its terms (in ``units``).

    Attributes
    ----------
    fixed : float
        ½ Σ q_i φ_rf(r_i): the fixed charges in their reaction field.
    mobile : float
        (1/8πk) ∫ κ̄² (kT/z) φ sinh(zφ/kT) dV: the mobile ions in the potential (≥ 0).
    osmotic : float
        −(1/4πk) ∫ κ̄² (kT/z)² (cosh(zφ/kT) − 1) dV: the ions' osmotic/entropic term (≤ 0).
    units : str
    """

    fixed: float
    mobile: float
    osmotic: float
    units: str = "kJ/mol"

    @property
    def total(self) -> float:
        """ΔG = fixed + mobile + osmotic."""
        return self.fixed + self.mobile + self.osmotic


def node_volumes(grid, periodic: bool, xp=np):
    """Each node's share of the box volume, Å³ (trapezoidal: ½ per outer face if Dirichlet)."""
    weights = []
    for n, h in zip(grid.shape, grid.spacing, strict=True):
        w = xp.full(n, float(h))
        if not periodic:
            w[0] *= 0.5
            w[-1] *= 0.5
        weights.append(w)
    return weights[0][:, None, None] * weights[1][None, :, None] * weights[2][None, None, :]


def ion_terms(problem, phi_rf, volumes=None) -> tuple[float, float]:
    """The ion terms (mobile, osmotic) of ``problem`` at ``phi_rf``, kJ/mol.

    Parameters
    ----------
    problem : Problem
        Its κ̄², φ_c, ion valence and temperature are used (zero without salt).
    phi_rf : array (nx, ny, nz)
        The reaction-field potential, kJ mol⁻¹ e⁻¹ (NumPy or CuPy; the sums run where it is,
        whichever library the problem's maps are in).
    volumes : array (nx, ny, nz), optional
        Each node's volume in the integrals, Å³ (default :func:`node_volumes`): e.g. a focusing
        level's nodes outside a finer level (:mod:`pbsolver.apbs.energy`).
    """
    if problem.kappa2 is None:
        return 0.0, 0.0
    xp = array_module(phi_rf)
    if tuple(phi_rf.shape) != problem.grid.shape:
        raise InputError(f"phi_rf has shape {tuple(phi_rf.shape)}, the grid {problem.grid.shape}")
    kT = kT_kj_per_mol(problem.temperature)
    z = float(problem.ion_valence)

    def here(a):
        """A map of the problem in φ_rf's library (a device problem may meet a host φ_rf)."""
        return xp.asarray(to_numpy(a) if xp is np else a, dtype=np.float64)

    k2 = here(problem.kappa2)
    salty = k2 > 0
    phic = xp.where(salty, here(problem.phi_coulomb), 0.0)
    x = (z / kT) * (phic + xp.asarray(phi_rf, dtype=np.float64))
    if volumes is None:
        volumes = node_volumes(problem.grid, problem.boundary == "periodic", xp)
    elif tuple(volumes.shape) != problem.grid.shape:
        raise InputError(f"volumes has shape {tuple(volumes.shape)}, the grid {problem.grid.shape}")
    weight = k2 * here(volumes)
    weight *= (kT / z) ** 2 / (4.0 * np.pi * COULOMB_KJ)
    mobile = 0.5 * float(xp.vdot(weight, xp.where(salty, x * boltzmann.term(x, xp), 0.0)))
    osmotic = -float(xp.vdot(weight, xp.where(salty, boltzmann.excess_energy(x, xp), 0.0)))
    return mobile, osmotic


__all__ = ["SolvationTerms", "ion_terms", "node_volumes"]
