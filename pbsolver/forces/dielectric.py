"""The dielectric-boundary term: derivatives through the face permittivities.

A face between nodes s and s' = s + e_a (spacing h_a) with permittivity ε enters the residual
R = b − A φ of both nodes: b_s += (ε − ε_c)(φc_s' − φc_s)/h_a², (Aφ)_s += ε (φ_s − φ_s')/h_a², and
the opposite at s'. With Φ = φ_c + φ_rf the total potential,

    ∂G/∂ε = λᵀ ∂R/∂ε = (λ_s − λ_s')(Φ_s' − Φ_s) / h_a²                          (1)

(λ = 0 on fixed nodes, so faces of the outer layer contribute nothing on a Dirichlet grid).
Faces come from the edge fraction f inside the solute, ε = 1 / (f/ε_in + (1 − f)/ε_out), so

    ∂ε/∂f = ε² (1/ε_out − 1/ε_in)                                               (2)

(a function of ε alone). Faces snapped to ε_in or ε_out (f within 1e-12 of 1 or 0) are flat in f;
no chord end lies strictly inside a fully covered or empty edge, so (2) is never used there
except on a set of measure zero. "smol" averages each raw fraction with 8 neighbours
(:func:`pbsolver.molecule.maps.smooth_fractions`, linear): its transpose
(:func:`smoothing_transpose`) carries ∂G/∂f_smooth back to the raw fractions. The raw fractions'
dependence on the atoms is that of the union of vdW spheres (:mod:`pbsolver.forces.lines`).
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.forces.coulomb import face_maps, force_loops
from pbsolver.forces.lines import periodic_owners, union_gradient
from pbsolver.forces.ses import ses_gradient
from pbsolver.forces.smooth import smooth_gradient
from pbsolver.molecule.maps import image_cutoff, reentrant_probe


def fraction_sensitivities(problem, phi, lam, eps_in, eps_out):
    """∂G/∂f of every face's edge fraction (that the faces were made from): ``(sx, sy, sz)``.

    Equations (1) and (2) of the module, in kJ mol⁻¹ per unit fraction; zero where Φ is not
    finite (a charge on a node, inside faces of ε_c whose fraction cannot move).
    """
    xp = array_module(phi)
    faces = face_maps(problem, xp)
    return force_loops(xp).fraction_sensitivities(
        xp.asarray(lam, dtype=xp.float64), xp.asarray(problem.phi_coulomb),
        xp.asarray(phi, dtype=xp.float64), faces, problem.grid.spacing,
        1.0 / eps_out - 1.0 / eps_in,
    )  # fmt: skip


def smoothing_transpose(gx, gy, gz):
    """The transpose of :func:`pbsolver.molecule.maps.smooth_fractions` applied to ``(gx, gy, gz)``.

    The smoothing adds to face a (orientation a) the faces b at offsets 0, +e_b, −e_a and
    −e_a + e_b, over 9; its transpose adds them back at the opposite offsets.
    """
    xp = array_module(gx)
    g = (gx, gy, gz)
    out = [gi / 9.0 for gi in g]
    for a in range(3):
        for b in (b for b in range(3) if b != a):
            s = g[a] / 9.0
            # face a at m read face b at m, m − e_b, m + e_a and m + e_a − e_b: face b at n
            # gets back from face a at n, n + e_b, n − e_a and n − e_a + e_b
            down = xp.roll(s, 1, axis=a)
            out[b] = out[b] + s + xp.roll(s, -1, axis=b) + down + xp.roll(down, -1, axis=b)
    return tuple(out)


def dielectric_gradient(atoms, problem, phi, lam, physics, *, box=None, ses_step=None,
                        nbisect=14, ses_ends=None):  # fmt: skip
    """∂G/∂r_i through the face fractions of ``physics.surface``: (n, 3).

    "svdw": the smooth union (:mod:`pbsolver.forces.smooth`); "mol" and "smol" (after
    :func:`smoothing_transpose`): the SES interval ends (:mod:`pbsolver.forces.ses`, with the
    maps' ``ses_step`` and ``nbisect``), with a zero probe the chord ends of the sphere union
    (:mod:`pbsolver.forces.lines`), as for "vdw". ``box``: the periodic images the maps used.
    ``ses_ends``: the SES interval ends, already recorded
    (:func:`~pbsolver.forces.ses.ses_gradient`'s ``ends``).
    """
    sens = face_sensitivities(problem, phi, lam, physics, at_reads=True)
    return surface_gradient(atoms, problem.grid, sens, physics, box=box, ses_step=ses_step,
                            nbisect=nbisect, ses_ends=ses_ends)  # fmt: skip


def face_sensitivities(problem, phi, lam, physics, *, at_reads=False):
    """∂G/∂f of the raw fractions the surface term reads: ``(sx, sy, sz)``.

    :func:`fraction_sensitivities`, through :func:`smoothing_transpose` for "smol". With
    ``at_reads`` on a NumPy problem of another surface, objects that compute them only where
    they are read (:class:`_FaceSensitivityAt`: the line ends or sample points).
    """
    if physics.surface == "smol" or array_module(phi) is not np or not at_reads:
        sens = fraction_sensitivities(problem, phi, lam, physics.eps_in, physics.eps_out)
        return smoothing_transpose(*sens) if physics.surface == "smol" else sens
    faces = face_maps(problem, np)
    return tuple(_FaceSensitivityAt(problem, phi, lam, physics, faces[axis], axis)
                 for axis in range(3))  # fmt: skip


def surface_gradient(atoms, grid, sens, physics, *, box=None, ses_step=None, nbisect=14,
                     ses_ends=None):  # fmt: skip
    """∂G/∂r_i of Σ ``sens`` · (edge fraction of ``physics.surface`` on ``grid``): (n, 3).

    ``sens`` as :func:`face_sensitivities` gives them; the other arguments are
    :func:`dielectric_gradient`'s.
    """
    pos, rad, owners = atoms.positions, atoms.radii, np.arange(len(atoms))
    probe = reentrant_probe(physics.surface, physics.probe_radius)
    if box is not None:  # the images face_fractions makes
        cutoff = image_cutoff(rad, physics.surface, physics.probe_radius)
        pos, rad, owners = periodic_owners(pos, rad, box, grid.origin, cutoff)
    if physics.surface == "svdw":
        return smooth_gradient(pos, rad, owners, grid, sens, len(atoms))
    if probe > 0:
        return ses_gradient(pos, rad, owners, probe, grid, sens, len(atoms), ses_step=ses_step,
                            nbisect=nbisect, ends=ses_ends)  # fmt: skip
    axes = grid.axes()
    grad = 0.0
    for axis in range(3):
        a1, a2 = [a for a in range(3) if a != axis]
        grad = grad + union_gradient(pos, rad, owners, axis, axes[a1], axes[a2],
                                     grid.origin[axis], grid.spacing[axis], grid.shape[axis],
                                     sens[axis], len(atoms))  # fmt: skip
    return grad


class _FaceSensitivityAt:
    """The faces' ∂G/∂f along one axis, computed where it is read (NumPy problems).

    Read like the grid array :func:`fraction_sensitivities` would make for that axis, at a
    tuple of (i, j, k) index arrays (``s[i, j, k]``) or at flat C-order indices
    (``s.take(flat)``), it gives the same values there (the same body): the line ends of "mol"
    and "vdw" and the sample points of "svdw" read a small part of the grid's faces.
    """

    def __init__(self, problem, phi, lam, physics, face, axis):
        self.args = (np.asarray(lam, dtype=np.float64), problem.phi_coulomb,
                     np.asarray(phi, dtype=np.float64), face, axis, problem.grid.spacing,
                     1.0 / physics.eps_out - 1.0 / physics.eps_in)  # fmt: skip

    def __getitem__(self, index):
        return self.take(np.ravel_multi_index(index, self.args[0].shape))

    def take(self, flat):
        return force_loops(np).fraction_sensitivity_at(*self.args, flat)


__all__ = [
    "dielectric_gradient",
    "face_sensitivities",
    "fraction_sensitivities",
    "smoothing_transpose",
    "surface_gradient",
]
