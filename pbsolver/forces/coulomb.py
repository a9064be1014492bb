"""Derivatives through φ_c: the right-hand side and the Dirichlet boundary values.

**φ_c in b.** b_s = Σ_n w_sn (φc_n − φc_s) − κ̄²_s φc_s with w = (ε_face − ε_c)/h_a² (rows of the
unknowns only), so μ = ∂G/∂φ_c = (∂b/∂φ_c)ᵀ λ is the same flux formula applied to λ:

    μ_s = Σ_n w_sn (λ_n − λ_s) − κ̄²_s λ_s                                       (1)

on every node (fixed nodes included: their φ_c enters their neighbours' rows; λ = 0 on them).
With φc_s = (k/ε_c) Σ_i q_i / |r_s − r_i| (nearest image when periodic),

    ∂G/∂r_i = (k q_i / ε_c) Σ_s μ_s (r_s − r_i) / |r_s − r_i|³                   (2)

a direct sum over the nodes where μ ≠ 0 (in practice every solvent node: faces there differ
from ε_c), the cost of one φ_c map. A node on a charge (φ_c = ±inf) has μ = 0: every face
around it is ε_c and κ̄² is zero there (the problem refuses anything else).

**Boundary values.** A fixed node n holds g_n, which enters the rows of its unknown neighbours
s as +c_sn g_n (c = ε_face/h_a²) and the energy through the interpolation (½ Iᵀq on n):

    ν_n = ∂G/∂g_n = Σ_s λ_s c_sn + ½ (Iᵀq)_n.                                   (3)

"mdh": g_n = k Σ_i q_i T_i(|r_n − r_i|), T_i(r) = e^{−κ(r−a_i)}/(ε_out (1+κa_i) r) − 1/(ε_c r),
so ∂g_n/∂r_i = −k q_i T_i'(r) (r_n − r_i)/r. "sdh": a screened sphere S(R) of the total charge
Q at the centre c of the atoms' bounding box (centres only), radius a = max_j |r_j − c| + R_j,
minus the exact unscreened sum: c moves with the atoms at the box's extremes (½ each per axis)
and a with the atom of the maximum, through ∂S/∂R = −S (κ + 1/R) and ∂S/∂a = S κ² a/(1 + κa).
Both are exact almost everywhere (they change which atom is extreme only at ties).
"""

from __future__ import annotations

import numpy as np

from pbsolver.arrays import array_module
from pbsolver.exceptions import InputError
from pbsolver.molecule.maps import COULOMB_KJ


def face_maps(problem, xp):
    """The problem's face permittivities: its face maps as stored, or made from its node map.

    Any float dtype: the force loops read them in float64.
    """
    return problem.epsilon_faces or problem.face_permittivities(xp.float64)


def coulomb_sensitivity(problem, lam):
    """μ = ∂G/∂φ_c at every node, equation (1) of the module (``lam`` zero on fixed nodes)."""
    xp = array_module(lam)
    faces = face_maps(problem, xp)
    kappa2 = None if problem.kappa2 is None else xp.asarray(problem.kappa2)
    return force_loops(xp).coulomb_sensitivity(lam, faces, kappa2, problem.eps_cavity,
                                               problem.grid.spacing)  # fmt: skip


def boundary_sensitivity(problem, lam, spread):
    """ν = ∂G/∂g on the outer layer (zero inside), equation (3); ``spread`` is ½ Iᵀq."""
    xp = array_module(lam)
    return boundary_weights(face_maps(problem, xp), lam, spread, problem.grid.spacing)


def boundary_weights(faces, lam, spread, spacing):
    """ν of equation (3) from the face maps: arrays (…, nx, ny, nz), leading axes frames.

    Only the unknown neighbour across the face perpendicular to a fixed node's side couples to
    it (its other neighbours are fixed, λ = 0 there), so ν is formed on the six sides alone.
    """
    xp = array_module(lam)
    nu = xp.zeros(lam.shape)

    def at(axis, node):  # plane ``node`` across ``axis`` of the last three axes
        return (Ellipsis,) + (slice(None),) * axis + (node,) + (slice(None),) * (2 - axis)

    sides = [(axis, node, inner)
             for axis, n in enumerate(lam.shape[-3:])
             for node, inner in ((0, 1), (n - 1, n - 2))]  # fmt: skip
    for axis, node, _ in sides:  # ½ Iᵀq on the outer layer (edges written twice, the same value)
        nu[at(axis, node)] = spread[at(axis, node)]
    for axis, node, inner in sides:
        # the low side's node 0 couples to node 1 through face 0; the high side's node n − 1 to
        # node n − 2 through face n − 2
        h = spacing[axis]
        c = xp.asarray(faces[axis][at(axis, min(node, inner))], dtype=xp.float64) / (h * h)
        nu[at(axis, node)] += c * lam[at(axis, inner)]
    return nu


def node_points(grid, field, xp):
    """Coordinates (3, m), one row per axis, and values (m,) of the nodes where ``field`` ≠ 0."""
    return force_loops(xp).grid_nodes(field, grid.origin, grid.spacing)


def outer_layer_points(grid, field, xp):
    """:func:`node_points` of a field that is zero off the outer layer (ν), in the same order.

    Searches the outer layer's nodes only (a whole-grid search dominated the boundary term on
    the GPU).
    """
    points, values, _ = frames_outer_layer_points(grid, field[None], xp)
    return points, values


def frames_outer_layer_points(grid, fields, xp):
    """:func:`outer_layer_points` of B fields (B, nx, ny, nz) of ``grid``, frame after frame.

    Returns ``(points (3, m), values (m,), node_start)``: frame f's nodes are
    ``node_start[f] … node_start[f + 1]`` (host ints), in :func:`outer_layer_points`' order.
    """
    idx = _outer_layer_indices(grid.shape, xp)
    frames = fields.shape[0]
    values = fields.reshape(frames, -1)[:, idx].reshape(-1)
    keep = xp.flatnonzero(values)
    frame = keep // len(idx)
    ijk = xp.unravel_index(idx[keep % len(idx)], grid.shape)
    points = xp.stack([grid.origin[a] + ijk[a] * grid.spacing[a] for a in range(3)])
    node_start = xp.searchsorted(frame, xp.arange(frames + 1))
    node_start = np.asarray(node_start.get() if hasattr(node_start, "get") else node_start)
    return points, values[keep].astype(xp.float64), node_start


_OUTER_LAYERS = {}


def _outer_layer_indices(shape, xp):
    """Sorted flat C-order indices of the outer layer of ``shape``, kept per shape and library."""
    key = (tuple(shape), xp.__name__)
    idx = _OUTER_LAYERS.get(key)
    if idx is None:
        inner = np.zeros(shape, dtype=bool)
        inner[1:-1, 1:-1, 1:-1] = True
        idx = xp.asarray(np.flatnonzero(~inner))
        if len(_OUTER_LAYERS) > 8:  # a few shapes at a time (a calculator keeps one)
            _OUTER_LAYERS.clear()
        _OUTER_LAYERS[key] = idx
    return idx


def force_loops(xp):
    """The compiled force loops for arrays of ``xp``: the CPU ones, or the CUDA ones on CuPy.

    Both modules have ``coulomb_sums``, ``coulomb_grid_sums``, ``debye_huckel_sums``,
    ``coulomb_sensitivity``, ``kappa_sensitivity``, ``fraction_sensitivities`` and
    ``grid_nodes`` (the formulas of :mod:`pbsolver.backends.bodies.forces`).
    """
    if xp is np:
        from pbsolver.backends.cpu import forces
    else:
        from pbsolver.backends.cuda import forces
    return forces


def coulomb_gradient(atoms, grid, mu, eps_cavity, *, box=None):
    """∂G/∂r_i through φ_c in b, equation (2): (n, 3) in the library of ``mu``."""
    return frames_coulomb_gradient(atoms.charges, atoms.positions[None], grid, grid.shape[0], mu,
                                   eps_cavity, box=box)[0]  # fmt: skip


def frames_coulomb_gradient(charges, positions, grid, stride, mu, eps_cavity, *, box=None):
    """:func:`coulomb_gradient` of B frames of a stack: (B, n, 3).

    ``positions`` (B, n, 3) host; ``mu`` (B·stride, ny, nz), frame f's μ on its planes
    f·stride … f·stride + nx − 1 of ``grid`` (zero on the padding planes between).
    """
    xp = array_module(mu)
    positions = np.asarray(positions, dtype=np.float64)
    frames, n = positions.shape[:2]
    charged = np.flatnonzero(np.asarray(charges) != 0)
    q = xp.asarray(np.asarray(charges, dtype=np.float64)[charged])
    centres = xp.asarray(positions[:, charged].reshape(-1, 3))
    starts = np.arange(frames + 1) * len(charged)
    g = force_loops(xp).frame_grid_coulomb_sums(mu, grid.origin, grid.spacing, int(stride),
                                                grid.shape[0], centres, starts, box)  # fmt: skip
    out = xp.zeros((frames, n, 3))
    out[:, xp.asarray(charged)] = (
        (COULOMB_KJ / eps_cavity) * q[None, :, None] * g.reshape(frames, len(charged), 3)
    )
    return out


def boundary_gradient(atoms, grid, nu, physics, kind):
    """∂G/∂r_i through the Dirichlet values of kind "mdh", "sdh" or "zero": (n, 3).

    ``physics`` gives ε_in (= ε_c), ε_out, κ and the ion radius, as
    :func:`pbsolver.molecule.maps.boundary_values` used them.
    """
    if kind in ("mdh", "zero"):
        return frames_boundary_gradient(atoms.charges, atoms.radii, atoms.positions[None], grid,
                                        nu[None], physics, kind)[0]  # fmt: skip
    if kind != "sdh":
        raise InputError(f"boundary kind must be 'mdh', 'sdh' or 'zero', got {kind!r}")
    xp = array_module(nu)
    pos = xp.asarray(atoms.positions, dtype=xp.float64)
    q = xp.asarray(atoms.charges, dtype=xp.float64)
    grad = xp.zeros(pos.shape)
    pts, w = outer_layer_points(grid, nu, xp)
    kappa, eps_out, eps_c = physics.kappa, physics.eps_out, physics.eps_in
    sums = force_loops(xp)
    # sdh: the exact unscreened sum ...
    unscreened = -sums.coulomb_sums(pts, w, pos)
    grad += (COULOMB_KJ / eps_c) * q[:, None] * unscreened
    # ... and the screened sphere at c of radius a
    host = np.asarray(atoms.positions, dtype=np.float64)
    lo_i, hi_i = host.argmin(axis=0), host.argmax(axis=0)
    c = 0.5 * (host.min(axis=0) + host.max(axis=0))
    reach = np.linalg.norm(host - c, axis=1) + atoms.radii
    top = int(np.argmax(reach))
    radius = float(reach[top])
    total = float(np.sum(atoms.charges))
    ca = xp.asarray(c)[None, :]
    rel = pts.T - ca
    big_r = xp.sqrt((rel * rel).sum(axis=1))
    s = xp.exp(-kappa * (big_r - radius)) / (eps_out * (1.0 + kappa * radius) * big_r)
    kq = COULOMB_KJ * total
    g_c = kq * ((w * s * (kappa + 1.0 / big_r) / big_r)[:, None] * rel).sum(axis=0)
    g_a = kq * float((w * s).sum()) * kappa * kappa * radius / (1.0 + kappa * radius)
    g_c = np.asarray(g_c.get() if hasattr(g_c, "get") else g_c, dtype=np.float64)
    dist = np.linalg.norm(host[top] - c)
    unit = (host[top] - c) / dist if dist > 0 else np.zeros(3)
    extra = np.zeros(host.shape)
    extra[top] += g_a * unit
    dc = g_c - g_a * unit
    for a in range(3):
        extra[lo_i[a], a] += 0.5 * dc[a]
        extra[hi_i[a], a] += 0.5 * dc[a]
    return grad + xp.asarray(extra)


def frames_boundary_gradient(charges, radii, positions, grid, nu, physics, kind):
    """:func:`boundary_gradient` of B frames, kinds "mdh" and "zero": (B, n, 3).

    ``positions`` (B, n, 3) host; ``nu`` (B, nx, ny, nz), each frame's ν on ``grid``.
    """
    xp = array_module(nu)
    positions = np.asarray(positions, dtype=np.float64)
    frames, n = positions.shape[:2]
    if kind == "zero":
        return xp.zeros((frames, n, 3))
    if kind != "mdh":
        raise InputError(f"the boundary term of B frames covers 'mdh' and 'zero', got {kind!r}")
    pts, w, node_start = frames_outer_layer_points(grid, nu, xp)
    # ∂g/∂r_i = −k q_i T'(r)(r_n − r_i)/r: the sum of −T'(r)/r (r_n − r_i)
    sums = force_loops(xp).frame_radial_sums(
        pts, w, xp.asarray(positions.reshape(-1, 3)), node_start, np.arange(frames + 1) * n,
        None, np.tile(np.asarray(radii, dtype=np.float64) + physics.ion_radius, frames),
        physics.kappa, physics.eps_out, 1.0 / float(physics.eps_in),
    )  # fmt: skip
    q = xp.asarray(np.asarray(charges, dtype=np.float64))
    return COULOMB_KJ * q[None, :, None] * sums.reshape(frames, n, 3)


__all__ = [
    "boundary_gradient",
    "boundary_weights",
    "boundary_sensitivity",
    "coulomb_gradient",
    "coulomb_sensitivity",
    "face_maps",
    "force_loops",
    "frames_boundary_gradient",
    "frames_coulomb_gradient",
    "frames_outer_layer_points",
    "node_points",
    "outer_layer_points",
]
