"""Analytic reference energies (kJ/mol) for the validation tests: Born, Kirkwood, Debye–Hückel."""

from __future__ import annotations

import numpy as np
from scipy.special import eval_legendre

K = 1389.35457  # kJ Å mol⁻¹ e⁻²


def born(q, a, eps_in, eps_out):
    """Reaction-field energy of a charge q at the centre of a sphere of radius a."""
    return 0.5 * K * q * q / a * (1.0 / eps_out - 1.0 / eps_in)


def kirkwood(positions, charges, a, eps_in, eps_out, nterms=400):
    """Reaction-field energy ½ Σ_ij q_i q_j G_rf(r_i, r_j) of charges inside a dielectric sphere.

    G_rf = (1/a) Σ_n (n+1)(ε_in − ε_out) / (ε_in ((n+1) ε_out + n ε_in)) (r_i r_j/a²)^n P_n(cos γ)
    (Kirkwood 1934, no salt), sphere centred at the origin.
    """
    pos = np.asarray(positions, dtype=float)
    q = np.asarray(charges, dtype=float)
    r = np.linalg.norm(pos, axis=1)
    total = 0.0
    n = np.arange(nterms)
    coef = (n + 1) * (eps_in - eps_out) / (eps_in * ((n + 1) * eps_out + n * eps_in))
    for i in range(len(q)):
        for j in range(len(q)):
            x = r[i] * r[j] / (a * a)
            if r[i] == 0 or r[j] == 0:
                cosg = 1.0
            else:
                cosg = float(np.clip(pos[i] @ pos[j] / (r[i] * r[j]), -1, 1))
            terms = coef * x**n * eval_legendre(n, cosg)
            total += q[i] * q[j] * terms.sum() / a
    return 0.5 * K * total


def born_salt(q, a, eps_in, eps_out, kappa, b):
    """Charge at the centre of a sphere (radius a, ε_in) in salt that is excluded within b ≥ a.

    φ_rf(0) = k q [(1/ε_out − 1/ε_in)/a − κ/(ε_out (1 + κ b))]; G = ½ q φ_rf(0).
    """
    return (
        0.5 * K * q * q * ((1.0 / eps_out - 1.0 / eps_in) / a - kappa / (eps_out * (1 + kappa * b)))
    )
