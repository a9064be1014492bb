"""Forces that are the exact gradient of the discrete solvation energy.

Design notes
------------
The energy pbsolver reports is G = ½ Σ_i q_i I(φ)(r_i): interpolation I (trilinear, or Keys'
cubic convolution with ``interpolation="cubic"``) of the solution of A φ = b at the atoms. It
depends on the positions through the interpolation point, through
φ_c in b (and the Debye–Hückel values on a Dirichlet grid's outer layer), through the face
permittivities (edge fractions of the surface) and through κ̄² (the ion-accessible map). With λ
the solution of the adjoint equation A λ = ½ Iᵀq (A is symmetric: the same stencil, hierarchy
and solver; :mod:`.adjoint`),

    ∂G/∂p = ½ qᵀ (∂I/∂p) φ + λᵀ (∂b/∂p − (∂A/∂p) φ),

and every ∂/∂p is sparse and local: :mod:`.interpolation` (the charge term and ½ Iᵀq),
:mod:`.dielectric` (∂G/∂ε of a face is (λ_s − λ_s')(Φ_s' − Φ_s)/h², Φ = φ_c + φ_rf; ∂ε/∂f),
:mod:`.lines` ("vdw": the ends of the merged chords move with their spheres), :mod:`.ses`
("mol", "smol": vdW chord ends and reentrant crossings, which move with the one to three atoms
holding the nearest probe centre), :mod:`.smooth` ("svdw"), :mod:`.ionic` (κ̄²: the same chord
ends on the sub-sampled lines), :mod:`.coulomb`
(φ_c in b: a direct sum over the nodes, the cost of one φ_c map; the boundary values). Each
module's docstring has its derivation; :func:`solvation_forces` assembles them, and
:func:`central_difference_forces` is the check they are held to.

Where the energy is not differentiable
--------------------------------------
* "vdw" (exact edge fractions): the fractions are continuous in the positions with kinks (a
  chord end crossing a node; two chords starting to overlap) and unbounded slopes (a grid line
  grazing a sphere). The forces here are the exact gradient wherever it exists (checked against
  the map kernels to 1e-4 with 10⁻⁶ Å differences), but the energy is rough on a 10⁻³ Å scale:
  central differences at 10⁻³ Å agree only to ~10⁻², and the force jumps. For dynamics use
  "svdw", a smooth union of spheres (:mod:`pbsolver.molecule.smooth_surface`): its energy is
  C², its forces agree with central differences at 10⁻³ Å to ~10⁻⁵, and its energy differs from
  "vdw" by about 0.1 % on a peptide (Born and Kirkwood as accurate as exact fractions).
* κ̄² is exact along z and sampled across (:func:`pbsolver.molecule.maps.ion_accessibility`):
  continuous, differentiated exactly, with the same kind of kinks as "vdw" but weighted by the
  small ionic sensitivities (no measurable effect on the differences above).
* The trilinear interpolation has kinks where an atom crosses a node plane (probability 2δ/h
  per coordinate that central differences of step δ straddle one); an MD step crosses one
  often, and the work done then misses the energy change (``benchmarks/work_energy_path.py``).
  ``interpolation="cubic"`` is C¹ across node planes: no kink.
* A grid that moves with the atoms (the calculator's following grid, re-placed by whole nodes)
  makes G jump; forces are those of a fixed grid.

* "mol" and "smol": the kinks of "vdw", and more where the nearest probe centre changes feature
  (radial projection, free arc, arc end) or the reentrant surface meets itself. The map finds
  each reentrant crossing by bisection to ``ses_step·2⁻ⁿᵇⁱˢᵉᶜᵗ`` (8e-6 Å by default), so the
  computed energy is a staircase on that scale around the exact surface's energy, whose
  gradient these forces are (checked against the maps at ``nbisect=45``).

The stacked frame engine (:mod:`pbsolver.md.engine`) solves the adjoint equations of a batch as
one stacked solve and hands the stack's maps to :func:`frames_forces_from_adjoint`: the terms of
:func:`solvation_forces` after its adjoint solve (:func:`forces_from_adjoint` is its one-frame
case) for every frame at once.
"""

from pbsolver.forces.differences import central_difference_forces
from pbsolver.forces.gradient import (
    EXACT_SURFACES,
    SMOOTH_SURFACES,
    Forces,
    adjoint_source,
    forces_from_adjoint,
    frames_forces_from_adjoint,
    solvation_forces,
    supports,
)

__all__ = [
    "EXACT_SURFACES",
    "SMOOTH_SURFACES",
    "Forces",
    "adjoint_source",
    "central_difference_forces",
    "forces_from_adjoint",
    "frames_forces_from_adjoint",
    "solvation_forces",
    "supports",
]
