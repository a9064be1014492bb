"""The exact gradient of the discrete solvation energy: every term, assembled.

G = ½ Σ_i q_i I(φ)(r_i) with A φ = b. With λ from the adjoint solve A λ = ½ Iᵀq
(:mod:`pbsolver.forces.adjoint`),

    ∂G/∂r_i = ½ q_i ∂I/∂r_i · φ                                  charge   (interpolation)
            + Σ_faces ∂G/∂f · ∂f/∂r_i                            dielectric boundary
            + Σ_nodes ∂G/∂κ̄² · ∂κ̄²/∂r_i                           ionic boundary
            + Σ_nodes μ · ∂φ_c/∂r_i                              φ_c in b
            + Σ_fixed ν · ∂g/∂r_i                                Dirichlet values

(:mod:`~pbsolver.forces.interpolation`, :mod:`~pbsolver.forces.dielectric` with
:mod:`~pbsolver.forces.lines`, :mod:`~pbsolver.forces.ionic`, :mod:`~pbsolver.forces.coulomb`).
The forces are F_i = −∂G/∂r_i at a fixed grid: a grid that moves with the atoms (the
calculator's following grid, re-placed by whole nodes) makes G jump, and no force sees that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.exceptions import InputError
from pbsolver.forces.adjoint import adjoint_solve
from pbsolver.forces.coulomb import (
    boundary_gradient,
    boundary_weights,
    coulomb_sensitivity,
    face_maps,
    frames_boundary_gradient,
    frames_coulomb_gradient,
)
from pbsolver.forces.dielectric import face_sensitivities, surface_gradient
from pbsolver.forces.interpolation import (
    interpolation_gradient,
    interpolation_transpose,
    stack_offsets,
)
from pbsolver.forces.ionic import ionic_gradient, kappa_sensitivity
from pbsolver.molecule.atoms import Atoms
from pbsolver.options import PhysicsOptions, unit_factor

#: Surfaces whose energy :func:`solvation_forces` differentiates exactly (with
#: ``probe_radius=0`` "mol" and "smol" are the vdW surface and its 9-point smoothing).
EXACT_SURFACES = ("vdw", "svdw", "mol", "smol")
#: Of those, the surfaces whose energy is differentiable (smooth in the positions): "vdw" has
#: kinks and unbounded slopes where grid lines graze spheres (see :mod:`pbsolver.forces.lines`),
#: and so do "mol" and "smol", with more kinks where the reentrant surface changes feature
#: (:mod:`pbsolver.forces.ses`).
SMOOTH_SURFACES = ("svdw",)


def supports(physics, *, smooth=False) -> bool:
    """Whether :func:`solvation_forces` gives the exact gradient for ``physics``.

    Both boundaries (periodic or Dirichlet) and every boundary kind are covered; the surfaces of
    :data:`EXACT_SURFACES` (``smooth=True``: of :data:`SMOOTH_SURFACES`, whose energy is also
    differentiable); the linearised equation only (``nonlinear=True`` with salt is not
    covered).
    """
    if physics.nonlinear and physics.has_salt:
        return False
    return physics.surface in (SMOOTH_SURFACES if smooth else EXACT_SURFACES)


@dataclass
class Forces:
    """What :func:`solvation_forces` returns.

    Attributes
    ----------
    forces : array (n, 3)
        F = −∂G/∂r, kJ mol⁻¹ Å⁻¹ (or kcal with ``units="kcal/mol"``), in the problem's array
        library.
    parts : dict of arrays (n, 3)
        The same, term by term: ``"charge"``, ``"dielectric"``, ``"ionic"``, ``"coulomb"``,
        ``"boundary"`` (they sum to ``forces``).
    adjoint : array (nx, ny, nz)
        λ, the adjoint field (kJ mol⁻¹ per unit of the right-hand side; a warm start for the
        next frame's adjoint solve).
    result : SolveResult
        The adjoint solve's report.
    units : str
    """

    forces: object
    parts: dict = field(repr=False)
    adjoint: object = field(repr=False)
    result: object = field(repr=False)
    units: str = "kJ/mol"


def solvation_forces(
    atoms,
    problem,
    phi_rf,
    *,
    physics=None,
    box=None,
    kappa_subsamples=4,
    solver=None,
    units="kJ/mol",
    adjoint_guess=None,
    ses_step=None,
    nbisect=14,
    interpolation="linear",
    fixed_boundary=False,
    system=None,
    **physics_fields,
) -> Forces:
    """F_i = −∂G/∂r_i of G = ½ Σ q_i φ_rf(r_i), the exact gradient of the discrete energy.

    Parameters
    ----------
    atoms : Atoms
        The atoms the problem was built from (same positions, charges, radii).
    problem : Problem
        Built by :func:`pbsolver.molecule.maps.build_maps` (or
        :meth:`pbsolver.Problem.from_atoms`) for ``atoms`` with ``physics``: face maps from the
        geometry, ε_c = ε_in, Dirichlet values of ``physics.boundary_kind`` (or other values
        with ``fixed_boundary``: focusing's ``dirichlet_values``, whose dependence on the atoms
        goes through a coarser solve).
    phi_rf : array (nx, ny, nz)
        Its solution (rtol well below the accuracy wanted of the forces).
    physics : PhysicsOptions, optional
        The physics the maps were built with (fields may be given as keywords).
    box : 3 floats, optional
        The periodic box of a periodic problem.
    kappa_subsamples : int
        The maps' lines per cell side of the ion-accessible fraction.
    solver : Solver, optional
        Solves the adjoint equation (default: ``Solver(rtol=1e-8, dtype=float64)`` where the
        problem's arrays are); give the forward solve's solver for its method and precision.
    units : {"kJ/mol", "kcal/mol"}
    adjoint_guess : array, optional
        Initial guess of λ (the previous frame's :attr:`Forces.adjoint`).
    ses_step, nbisect
        The SES sampling the maps used ("mol" and "smol" with a probe;
        :func:`pbsolver.molecule.maps.face_fractions`).
    interpolation : {"linear", "cubic"}
        How the energy samples φ_rf at the atoms (:func:`pbsolver.molecule.energy.sample_field`):
        the charge term and the adjoint source use the same weights.
    fixed_boundary : bool
        Hold the Dirichlet values fixed: the "boundary" term is zero. For a problem whose values
        do not come from ``physics.boundary_kind`` (focusing's values from a coarser grid), this
        gives the gradient at fixed boundary values, which is how APBS takes forces on its
        finest grid.
    system : LinearSystem, optional
        The forward solve's system (``solver.solve(problem, keep_system=True).system``, the
        same ``solver``): the adjoint solve reuses its stencils and hierarchy.
    **physics_fields
        Fields of :class:`~pbsolver.PhysicsOptions`.

    Returns
    -------
    Forces

    Raises
    ------
    InputError
        A surface without exact forces (:data:`EXACT_SURFACES`), a node-map problem, or a
        problem that does not match ``atoms``, ``physics`` or ``box``.
    """
    from pbsolver.solving.solver import Solver

    ph = PhysicsOptions.build(physics, **physics_fields)
    unit_factor(units)  # unknown units are refused before any solve
    periodic = problem.boundary == "periodic"
    _check(atoms, problem, ph, box, periodic)
    if solver is None:
        solver = Solver(rtol=1e-8, dtype=np.float64, backend="cpu" if problem.xp is np else "cuda")
    source = adjoint_source(atoms, problem.grid, periodic=periodic, interpolation=interpolation,
                            xp=problem.xp)  # fmt: skip
    lam, result = adjoint_solve(problem, source, solver, adjoint_guess, system)
    return forces_from_adjoint(atoms, problem, phi_rf, lam, source, physics=ph, box=box,
                               kappa_subsamples=kappa_subsamples, units=units, ses_step=ses_step,
                               nbisect=nbisect, interpolation=interpolation,
                               fixed_boundary=fixed_boundary, result=result)  # fmt: skip


def adjoint_source(atoms, grid, *, periodic=False, interpolation="linear", xp=np, offsets=None,
                   size=None):  # fmt: skip
    """½ Iᵀq: the adjoint equation's right-hand side on ``grid`` (float64, in ``xp``).

    The charges spread onto the nodes with the weights the energy samples φ_rf with
    (:func:`pbsolver.forces.interpolation.interpolation_transpose`). ``offsets`` and ``size``:
    the atoms of B frames (frame-major), each spread into its frame's block of a stack
    (:func:`pbsolver.forces.interpolation.stack_offsets`; the result is then flat).
    """
    half_q = 0.5 * np.asarray(atoms.charges, dtype=np.float64)
    return interpolation_transpose(grid, half_q, atoms.positions, xp=xp, periodic=periodic,
                                   interpolation=interpolation, offsets=offsets,
                                   size=size)  # fmt: skip


def forces_from_adjoint(atoms, problem, phi_rf, lam, source, *, physics, box=None,
                        kappa_subsamples=4, units="kJ/mol", ses_step=None, nbisect=14,
                        interpolation="linear", fixed_boundary=False, result=None,
                        ses_ends=None, ion_ends=None, field_gradient=None) -> Forces:  # fmt: skip
    """Every term of F = −∂G/∂r from the solution φ_rf and the adjoint field λ.

    What :func:`solvation_forces` does after its adjoint solve, for a caller that solved the
    adjoint equation A λ = ``source`` itself. The arguments are :func:`solvation_forces`'
    (``physics`` a :class:`PhysicsOptions`), plus ``lam`` (λ, on the unknowns), ``source``
    (:func:`adjoint_source` of the same atoms and grid), ``result`` (the adjoint solve's
    report, kept in :attr:`Forces.result`) and ``ses_ends`` ("mol", "smol": the SES interval
    ends, if the caller recorded them; see :func:`pbsolver.forces.ses.ses_gradient`),
    ``ion_ends`` (the ion-accessible lines' chord ends, likewise:
    :func:`pbsolver.forces.ionic.ionic_gradient`) and ``field_gradient`` (the slope of the
    interpolant of φ_rf at the atoms, (n, 3), if the caller computed it:
    :func:`pbsolver.forces.interpolation.interpolation_gradient`). One frame of
    :func:`frames_forces_from_adjoint`; nothing is checked here that :func:`solvation_forces`
    checks.
    """
    out = frames_forces_from_adjoint(
        atoms, atoms.positions[None], problem.grid, problem, phi_rf, lam, source,
        stride=problem.grid.shape[0], physics=physics, box=box,
        kappa_subsamples=kappa_subsamples, units=units, ses_step=ses_step, nbisect=nbisect,
        interpolation=interpolation, fixed_boundary=fixed_boundary, result=result,
        ses_ends=ses_ends, ion_ends=ion_ends,
        field_gradient=None if field_gradient is None else field_gradient[None],
    )  # fmt: skip
    out.forces = out.forces[0]
    out.parts = {k: v[0] for k, v in out.parts.items()}
    return out


def frames_forces_from_adjoint(atoms, positions, grid, problem, phi_rf, lam, source, *, stride,
                               physics, box=None, kappa_subsamples=4, units="kJ/mol",
                               ses_step=None, nbisect=14, interpolation="linear",
                               fixed_boundary=False, result=None, ses_ends=None,
                               ion_ends=None, field_gradient=None) -> Forces:  # fmt: skip
    """:func:`forces_from_adjoint` of B frames of one grid held in a stack, every term at once.

    The stacked engine's layout (:mod:`pbsolver.backends.stacking`): frame k's node (i, j, l)
    is node (k·``stride`` + i, j, l) of the stack; the planes nx … stride − 1 of a block are
    padding. λ is zero on every frame's outer layer and on the padding, so no face couples two
    frames: the per-node sensitivities are formed over the whole stack, the recorded line ends
    of every frame are gathered in one pass, and the φ_c and Debye–Hückel sums run every frame
    over its own nodes in one call.

    Parameters
    ----------
    atoms : Atoms
        The molecule (charges, radii); its positions are not read.
    positions : array (B, n, 3)
        Each frame's positions, Å (host).
    grid : Grid
        One frame's grid (every frame's: one origin).
    problem : Problem
        The stack's maps: faces from the edge fractions, φ_c, κ̄² and boundary values on a grid
        of B·stride planes (one frame: the frame's problem, ``stride`` = nx).
    phi_rf, lam, source : arrays (B·stride, ny, nz)
        The stack's φ_rf, λ and ½ Iᵀq.
    ses_ends, ion_ends : optional
        Every frame's recorded line ends as one set on the stack (per axis for the SES), as
        :meth:`pbsolver.md.engine.StackedFrames.ses_interval_ends` gives them: x indices moved
        by k·stride, atoms rows of the B frames' atoms (frame-major); ``ion_ends`` may also be
        a function that sums the ends itself
        (:meth:`~pbsolver.md.engine.StackedFrames.ion_end_sums`, see
        :func:`pbsolver.forces.ionic.ionic_gradient`). None: recorded here, frame by frame.
    field_gradient : array (B, n, 3), optional
        The slope of φ_rf's interpolant at each frame's atoms.
    stride, physics, box, kappa_subsamples, units, ses_step, nbisect, interpolation
        As :func:`forces_from_adjoint` (``stride``: planes a frame); a box (periodic) and the
        "sdh" boundary take one frame.
    fixed_boundary, result
        As :func:`forces_from_adjoint`.

    Returns
    -------
    Forces
        With ``forces`` and ``parts`` of shape (B, n, 3), ``adjoint`` the stack's λ.
    """
    factor = unit_factor(units)
    ph = physics
    xp = problem.xp
    positions = np.asarray(positions, dtype=np.float64)
    nf, n = positions.shape[:2]
    frames = _FrameRows(nf, int(stride), grid.shape)
    periodic = problem.boundary == "periodic"
    if nf > 1 and (periodic or ph.boundary_kind == "sdh"):
        raise InputError("B frames' forces cover Dirichlet grids with 'mdh' or 'zero' values")
    phi = xp.asarray(phi_rf, dtype=xp.float64)
    lam = xp.asarray(lam, dtype=xp.float64)
    half_q = 0.5 * np.asarray(atoms.charges, dtype=np.float64)
    if field_gradient is None:
        field_gradient = interpolation_gradient(
            grid, phi, positions.reshape(-1, 3), periodic=periodic, interpolation=interpolation,
            offsets=None if nf == 1 else stack_offsets(grid, nf, n, stride, xp),
        )  # fmt: skip
    field_gradient = xp.asarray(field_gradient, dtype=xp.float64).reshape(nf, n, 3)
    grads = {"charge": xp.asarray(half_q)[None, :, None] * field_gradient}
    # one frame's own grid reads ∂G/∂f where its ends lie; a stack slices whole arrays per frame
    sens = face_sensitivities(problem, phi, lam, ph, at_reads=frames.single)
    stacked = None if frames.single else stacked_atoms(atoms, positions)  # the ends' owners
    grads["dielectric"] = _frames_term(
        lambda a, s, e: surface_gradient(a, grid, s, ph, box=box, ses_step=ses_step,
                                         nbisect=nbisect, ses_ends=e),
        atoms, positions, frames, sens, ses_ends, stacked,
    )  # fmt: skip
    grads["ionic"] = xp.zeros((nf, n, 3))
    if problem.kappa2 is not None:
        grads["ionic"] = _frames_term(
            lambda a, s, e: ionic_gradient(a, grid, s, ph.kappa2, ph.ion_radius,
                                           subsamples=kappa_subsamples, box=box, ends=e),
            atoms, positions, frames, kappa_sensitivity(problem, phi, lam), ion_ends, stacked,
        )  # fmt: skip
    mu = coulomb_sensitivity(problem, lam)
    frames.clear_padding(mu)
    grads["coulomb"] = frames_coulomb_gradient(atoms.charges, positions, grid, stride, mu,
                                               problem.eps_cavity, box=box)  # fmt: skip
    grads["boundary"] = xp.zeros((nf, n, 3))
    if not periodic and not fixed_boundary:
        faces = tuple(frames.blocks(f) for f in face_maps(problem, xp))
        nu = boundary_weights(faces, frames.blocks(lam), frames.blocks(source), grid.spacing)
        if ph.boundary_kind == "sdh":
            grads["boundary"] = boundary_gradient(_frame(atoms, positions, 0), grid, nu[0], ph,
                                                  "sdh")[None]  # fmt: skip
        else:
            grads["boundary"] = frames_boundary_gradient(
                atoms.charges, atoms.radii, positions, grid, nu, ph, ph.boundary_kind
            )
    parts = {k: -factor * v for k, v in grads.items()}
    total = sum(parts.values())
    return Forces(forces=total, parts=parts, adjoint=lam, result=result, units=units)


class _FrameRows:
    """B frames of ``shape`` in a stack of ``stride`` planes a frame: views and offsets."""

    def __init__(self, frames, stride, shape):
        self.frames, self.stride, self.shape = int(frames), int(stride), tuple(shape)
        #: one frame's own grid, not a stack (whose blocks may have padding planes)
        self.single = self.frames == 1 and self.stride == self.shape[0]

    def rows(self, k):
        """Frame k's planes of the stack."""
        return slice(k * self.stride, k * self.stride + self.shape[0])

    def blocks(self, a):
        """(B, nx, ny, nz) view of a stacked array (one frame's own grid: ``a[None]``)."""
        if self.single:
            return a[None]
        return a.reshape(self.frames, self.stride, *a.shape[1:])[:, : self.shape[0]]

    def frame(self, a, k):
        """Frame k's block of a stacked array, or of a tuple of them.

        One frame's own grid: the array as it is.
        """
        if isinstance(a, tuple):
            return tuple(self.frame(x, k) for x in a)
        return a if self.single else a[self.rows(k)]

    def clear_padding(self, a):
        """Zero the padding planes of a stacked array (in place)."""
        if self.frames > 1 and self.stride > self.shape[0]:
            a.reshape(self.frames, self.stride, *a.shape[1:])[:, self.shape[0] :] = 0.0


def _frames_term(term, atoms, positions, frames, sens, ends, stacked):
    """A line-end term of B frames, ``term(atoms, sens, ends)`` → (n, 3): (B, n, 3).

    Recorded ends (one set on the stack) are gathered once, for the B frames' atoms as one set
    (``stacked``); without them each frame records its own lines on its block of ``sens``.
    """
    nf, n = positions.shape[:2]
    if frames.single:
        return term(_frame(atoms, positions, 0), sens, ends)[None]
    if ends is not None:
        return term(stacked, sens, ends).reshape(nf, n, 3)
    return _stack([term(_frame(atoms, positions, k), frames.frame(sens, k), None)
                   for k in range(nf)])  # fmt: skip


def _frame(atoms, positions, k):
    """Frame k's atoms (``atoms`` itself where they are at that frame's positions)."""
    if np.array_equal(positions[k], atoms.positions):
        return atoms
    return atoms.with_positions(positions[k])


def stacked_atoms(atoms, positions):
    """B frames' atoms as one set (frame-major), ``positions`` (B, n, 3): a stack's atoms.

    The rows the stacked engine's ends name, and the charges ½ Iᵀq spreads into its blocks.
    """
    nf = positions.shape[0]
    return Atoms(positions.reshape(-1, 3), np.tile(atoms.charges, nf), np.tile(atoms.radii, nf))


def _stack(grads):
    xp = array_module(grads[0])
    return xp.stack([xp.asarray(g) for g in grads])


def _check(atoms, problem, ph, box, periodic):
    if getattr(problem, "nonlinear", False) and problem.kappa2 is not None:
        raise InputError("exact forces cover the linearised equation; this problem is nonlinear")
    if not supports(ph):
        raise InputError(
            f"exact forces cover the linearised equation on the surfaces {EXACT_SURFACES}; got "
            f"surface={ph.surface!r}, nonlinear={ph.nonlinear}"
        )
    if problem.epsilon_faces is None:
        raise InputError("exact forces need a problem with face maps built from the atoms")
    if problem.eps_cavity != ph.eps_in:
        raise InputError(
            f"the problem's eps_cavity {problem.eps_cavity:g} is not physics.eps_in {ph.eps_in:g}"
        )
    if periodic and box is None:
        raise InputError("a periodic problem's forces need its box=(Lx, Ly, Lz)")
    if not periodic and box is not None:
        raise InputError("box is only used with a periodic problem")
    if (problem.kappa2 is not None) != ph.has_salt:
        raise InputError("the problem's κ̄² map does not match physics.ionic_strength")
    if array_module(atoms.positions) is not np:
        raise InputError("atoms must hold host (NumPy) positions")


__all__ = [
    "EXACT_SURFACES",
    "SMOOTH_SURFACES",
    "Forces",
    "adjoint_source",
    "forces_from_adjoint",
    "frames_forces_from_adjoint",
    "solvation_forces",
    "stacked_atoms",
    "supports",
]
