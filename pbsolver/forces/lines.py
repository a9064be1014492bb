"""Derivative of sphere-union coverage along grid lines with respect to the sphere centres.

The map kernels (:func:`pbsolver.backends.cpu.maps.sphere_union_lines` and the bodies of
:mod:`pbsolver.backends.bodies.maps`) cover each line along axis ``a`` through (u, v) with the
chords [t − w, t + w] of the spheres that reach it (w = √(r² − du² − dv²), du = c_{a1} − u,
dv = c_{a2} − v, t = c_a), merge them (touching chords merge), and add to each bin k (the edge
or cell [t0 + k h, t0 + (k+1) h)) the covered length over h.

The covered fraction of a bin moves only through the ends of the merged intervals that lie
inside it: an end e of atom i's chord adds +∂e/h, a start s adds −∂s/h, with
∂(t ± w)/∂c_a = 1 and ∂(t ± w)/∂c_{a1} = ∓du/w (∂c_{a2} alike). Both give
∂f/∂c_{a1} = −du/(w h), ∂f/∂c_a = ±1/h. The derivative is exact where the union is smooth:
everywhere except where an end crosses a node (the fraction has a kink: one-sided slopes
differ by the sensitivities of the two bins) and where a line grazes a sphere (w → 0, the
slope ∝ 1/w is integrable but unbounded); both are sets of measure zero in the positions, but
near them the energy is rough on a scale of 10⁻³ Å (see :mod:`pbsolver.molecule.smooth_surface`,
whose "svdw" surface is smooth). Chords of half-length below :data:`GRAZE` · r (a line tangent to
a sphere up to rounding) are left out.

:func:`union_gradient` does it in array code (NumPy or CuPy): every (line, sphere) chord of a
plane of lines is enumerated, the chord ends are sorted per line, and a running count of open
chords tells which ends bound the union (a start with nothing open before it, an end that
closes the last one; at equal positions starts sort first, which is the kernels' merging of
touching chords).
"""

from __future__ import annotations

import numpy as np

#: Chords shorter than this fraction of the radius on each side of the centre's projection are
#: left out of the derivative (tangency up to rounding: their share of an edge is < 1e-6).
GRAZE = 1e-6


def _candidate_range(c, reach, start, step, count, xp):
    """Lowest index and count of the coordinates start + k·step within ``reach`` of c."""
    lo = xp.floor((c - reach - start) / step).astype(xp.int64)
    hi = xp.floor((c + reach - start) / step).astype(xp.int64) + 1
    lo = xp.clip(lo, 0, count)
    hi = xp.clip(hi, -1, count - 1)
    return lo, xp.maximum(hi - lo + 1, 0)


def union_gradient(positions, radii, owners, axis, us, vs, t0, h, nbins, sensitivity, n_atoms):
    """∂/∂c of Σ sensitivity[bin] · (covered fraction of the bin), accumulated per owner atom.

    Parameters
    ----------
    positions : array (m, 3)
        Sphere centres, Å (periodic images included).
    radii : array (m,)
        Sphere radii, Å (spheres of radius 0 cover nothing).
    owners : array (m,) of int
        The atom each sphere moves with (an image moves with its atom).
    axis : int
        The lines' direction.
    us, vs : 1-D arrays
        Uniformly spaced coordinates of the lines along the other two axes (in increasing axis
        order), as the map kernels take them.
    t0, h : float
        Start of bin 0 and the bin length along ``axis``, Å.
    nbins : int
    sensitivity : array
        Grid-shaped: ``sensitivity[k, iu, iv]`` (bin index in position ``axis``) is the
        derivative of the quantity with respect to the covered fraction of bin k of line
        (iu, iv). NumPy or CuPy; the result is in the same library.
    n_atoms : int
        Length of the result.

    Returns
    -------
    array (n_atoms, 3)
    """
    from pbsolver.arrays import array_module

    xp = array_module(sensitivity)
    a1, a2 = [a for a in range(3) if a != axis]
    pos = xp.asarray(positions, dtype=xp.float64)
    rad = xp.asarray(radii, dtype=xp.float64)
    own = xp.asarray(owners, dtype=xp.int64)
    us = xp.asarray(us, dtype=xp.float64)
    vs = xp.asarray(vs, dtype=xp.float64)
    grad = xp.zeros((n_atoms, 3))
    keep = rad > 0
    if not bool(keep.any()):
        return grad
    pos, rad, own = pos[keep], rad[keep], own[keep]
    nu, nv = us.shape[0], vs.shape[0]
    du_step = float(us[1] - us[0]) if nu > 1 else 1.0
    dv_step = float(vs[1] - vs[0]) if nv > 1 else 1.0
    iu0, cu = _candidate_range(pos[:, a1], rad, float(us[0]), du_step, nu, xp)
    iv0, cv = _candidate_range(pos[:, a2], rad, float(vs[0]), dv_step, nv, xp)
    # every (sphere, line) pair of the sphere's candidate rectangle of lines
    offsets = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(cu * cv)])
    total = int(offsets[-1])
    if total == 0:
        return grad
    pair = xp.arange(total, dtype=xp.int64)
    sph = xp.searchsorted(offsets, pair, side="right") - 1
    local = pair - offsets[sph]
    iu = iu0[sph] + local // cv[sph]
    iv = iv0[sph] + local % cv[sph]
    # the kernels' chord test and formula (chord_body), bit for bit
    du = pos[sph, a1] - us[iu]
    dv = pos[sph, a2] - vs[iv]
    d2 = du * du + dv * dv
    r = rad[sph]
    hit = d2 < r * r
    sph, iu, iv, du, dv = sph[hit], iu[hit], iv[hit], du[hit], dv[hit]
    if sph.shape[0] == 0:
        return grad
    r = rad[sph]
    w = xp.sqrt(r * r - (du * du + dv * dv))
    # a line tangent to a sphere up to rounding (an atom on a node, a radius a multiple of the
    # spacing) gets a chord of ~1e-8 Å whose slope ∝ 1/w means nothing: it is left out
    keep = w > GRAZE * r
    sph, iu, iv, du, dv, w, r = sph[keep], iu[keep], iv[keep], du[keep], dv[keep], w[keep], r[keep]
    t = pos[sph, axis]
    line = iu * nv + iv
    # chord ends as events: (line, position, kind) with kind 0 = start, 1 = end
    n = sph.shape[0]
    ev_line = xp.concatenate([line, line])
    ev_pos = xp.concatenate([t - w, t + w])
    ev_kind = xp.concatenate([xp.zeros(n, dtype=xp.int64), xp.ones(n, dtype=xp.int64)])
    ev_chord = xp.concatenate([xp.arange(n), xp.arange(n)])
    order = xp.lexsort(xp.stack([ev_kind, ev_pos, ev_line]))
    ev_kind, ev_pos, ev_chord = ev_kind[order], ev_pos[order], ev_chord[order]
    depth = xp.cumsum(1 - 2 * ev_kind)  # open chords after each event (lines sum to zero)
    bounding = ((ev_kind == 0) & (depth == 1)) | ((ev_kind == 1) & (depth == 0))
    k = xp.floor((ev_pos - t0) / h).astype(xp.int64)
    bounding &= (k >= 0) & (k < nbins)
    ev_kind, k, c = ev_kind[bounding], k[bounding], ev_chord[bounding]
    if c.shape[0] == 0:
        return grad
    idx = [None, None, None]
    idx[axis], idx[a1], idx[a2] = k, iu[c], iv[c]
    s = sensitivity[tuple(idx)] / h
    sign = (2 * ev_kind - 1).astype(xp.float64)  # −1 at a start, +1 at an end
    parts = [None, None, None]
    parts[axis] = sign * s
    parts[a1] = -s * du[c] / w[c]
    parts[a2] = -s * dv[c] / w[c]
    owner = own[sph[c]]
    for a in range(3):
        grad[:, a] = xp.bincount(owner, weights=parts[a], minlength=n_atoms)[:n_atoms]
    return grad


def periodic_owners(positions, radii, box, origin, cutoff):
    """Spheres of :func:`pbsolver.molecule.maps.periodic_images` with the atom each one images.

    Returns ``(positions, radii, owners)``: the same images, in the same order, as the maps
    use for the same ``cutoff``.
    """
    from pbsolver.molecule.maps import periodic_images

    n = len(radii)
    pos, tagged = periodic_images(positions, np.column_stack([radii, np.arange(n)]), box, origin,
                                  cutoff)  # fmt: skip
    return pos, tagged[:, 0], tagged[:, 1].astype(np.int64)


__all__ = ["periodic_owners", "union_gradient"]
