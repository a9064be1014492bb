"""Plain-Python bodies of the SES boundary slopes: how a line's solute interval ends move.

The SES lines (:func:`pbsolver.backends.bodies.maps.make_ses`) bound each solute interval of
a grid line by one of two things:

* a vdW sphere (the chord end t ± w of atom i): ∂(t ± w)/∂c_axis = 1, ∂(t ± w)/∂c_a1 = ∓du/w,
  with du = c_a1 − u (as for the union of spheres, :mod:`pbsolver.forces.lines`);
* a reentrant crossing, where the distance D(x) from the point x(t) to the nearest accessible
  probe centre c equals the probe radius p. That centre lies on the accessible spheres (radius
  R_k = r_k + p) of a set K of one, two or three atoms: the radial projection on sphere i
  (K = {i}), the nearest point of a free arc of the circle of spheres i and j (a torus,
  K = {i, j}) or an end of such an arc, where a third sphere k cuts the circle (K = {i, j, k}).

For the second kind, D(x; c_K) = min over the set {c : |c − c_k| = R_k, k ∈ K} of |x − c|.
Its stationarity, n = (x − c)/D = Σ_k α_k (c − c_k), gives the multipliers α, and the envelope
theorem the slope ∂D/∂c_k = −α_k (c − c_k). The crossing t solves D(x(t)) = p, so

    ∂t/∂c_k = α_k (c − c_k) / (n · e_axis).

A radial projection is the K = {i} case (α = −1/R_i) and gives the vdW formula above, which
checks the sign. The point on the circle is also where the map's point test
(``probe_reaches``) looks, so both see the same features. Importing this module imports no
numba.
"""

from __future__ import annotations

import math

from pbsolver.backends.bodies.maps import TWO_PI

#: What bounds a solute interval's end (:func:`make_nearest_probe`).
NO_FEATURE, SPHERE, TORUS, TRIPLE = 0, 1, 2, 3


def make_nearest_probe(sphere_probe, circle_local):
    """The nearest-accessible-probe body on the compiled SES bodies of the same names."""

    def nearest_probe_body(
        x, y, z, cand, first, last, limit, pos, rad, probe, nb_start, nb_index, circ_start,
        geom, arc_start, arcs, feat,
    ):  # fmt: skip
        """Distance from (x, y, z) to the nearest accessible probe centre; its feature in feat.

        ``cand[first:last]`` are the exposed atoms that may hold it (every exposed atom within
        rad + probe of the point among them), ``rad`` the accessible radii. Writes feat =
        (kind, atom i, circle c, angle θ) with kind :data:`SPHERE` (radial projection on sphere
        i), :data:`TORUS` (angle θ of a free arc of circle c) or :data:`TRIPLE` (θ an end of a
        free arc); returns inf (kind :data:`NO_FEATURE`) when none is nearer than ``limit``.
        The search starts from ``limit`` as its best distance: the features at ``limit`` or
        farther are skipped before their angles are computed, and the nearest one below it
        (the first in ``cand`` order among equals) is the one a search from inf finds.
        """
        best = limit
        feat[0] = NO_FEATURE
        for s in range(first, last):
            i = cand[s]
            r, d, _px, _py, _pz = sphere_probe(x, y, z, pos, rad, i, probe, best, nb_start,
                                               nb_index)  # fmt: skip
            if r < 0.0:
                continue
            if d < best:
                best = d
                feat[0] = SPHERE
                feat[1] = i
            for c in range(circ_start[i], circ_start[i + 1]):
                zz, xu, xv, rx, rho = circle_local(geom, c, x, y, z)
                if (rx - rho) * (rx - rho) + zz * zz >= best * best:
                    continue
                theta = math.atan2(xv, xu) % TWO_PI
                base = rx * rx + rho * rho + zz * zz
                for a in range(arc_start[c], arc_start[c + 1]):
                    if arcs[a, 0] <= theta <= arcs[a, 1]:
                        best = math.sqrt((rx - rho) * (rx - rho) + zz * zz)
                        feat[0] = TORUS
                        feat[1] = i
                        feat[2] = c
                        feat[3] = theta
                        break
                    for e in range(2):
                        d = math.sqrt(max(base - 2.0 * rho * rx * math.cos(theta - arcs[a, e]),
                                          0.0))  # fmt: skip
                        if d < best:
                            best = d
                            feat[0] = TRIPLE
                            feat[1] = i
                            feat[2] = c
                            feat[3] = arcs[a, e]
        return best if feat[0] != NO_FEATURE else math.inf

    return nearest_probe_body


def solve_small_body(g, b, k):
    """Solve the k × k system g α = b (k ≤ 3) in place into b; False when it is singular."""
    for col in range(k):
        piv = col
        for row in range(col + 1, k):
            if abs(g[row, col]) > abs(g[piv, col]):
                piv = row
        if abs(g[piv, col]) < 1e-300:
            return False
        if piv != col:
            for m in range(k):
                g[col, m], g[piv, m] = g[piv, m], g[col, m]
            b[col], b[piv] = b[piv], b[col]
        for row in range(col + 1, k):
            f = g[row, col] / g[col, col]
            for m in range(col, k):
                g[row, m] -= f * g[col, m]
            b[row] -= f * b[col]
    for col in range(k - 1, -1, -1):
        s = b[col]
        for m in range(col + 1, k):
            s -= g[col, m] * b[m]
        b[col] = s / g[col, col]
    # a nearly dependent set (the probe centre in the plane of three atoms) has no slope
    scale = 0.0
    for m in range(k):
        scale = max(scale, abs(b[m]))
    return scale < 1e12


def make_crossing_slopes(solve_small):
    """The reentrant-crossing slope body on the compiled ``solve_small`` body."""

    def crossing_slopes_body(x, y, z, axis, cx, cy, cz, atoms, k, pos, slopes, g, b, tangent):
        """∂t/∂c_m of a crossing at (x, y, z) whose probe centre c lies on spheres ``atoms[:k]``.

        Writes ``slopes[m, :]`` for m < k (the module's formula); returns False where the line
        is tangent to the surface (|n · e_axis| ≤ ``tangent``) or the set is degenerate.
        """
        nx = x - cx
        ny = y - cy
        nz = z - cz
        d = math.sqrt(nx * nx + ny * ny + nz * nz)
        if d == 0.0:
            return False
        nx /= d
        ny /= d
        nz /= d
        along = nx if axis == 0 else (ny if axis == 1 else nz)
        if abs(along) <= tangent:
            return False
        # normal equations of n = Σ α_m (c − c_m): G α = Vᵀ n, G = VᵀV
        for m in range(k):
            am = atoms[m]
            vm0 = cx - pos[am, 0]
            vm1 = cy - pos[am, 1]
            vm2 = cz - pos[am, 2]
            b[m] = vm0 * nx + vm1 * ny + vm2 * nz
            for q in range(k):
                aq = atoms[q]
                g[m, q] = (vm0 * (cx - pos[aq, 0]) + vm1 * (cy - pos[aq, 1])
                           + vm2 * (cz - pos[aq, 2]))  # fmt: skip
        if not solve_small(g, b, k):
            return False
        for m in range(k):
            am = atoms[m]
            f = b[m] / along
            slopes[m, 0] = f * (cx - pos[am, 0])
            slopes[m, 1] = f * (cy - pos[am, 1])
            slopes[m, 2] = f * (cz - pos[am, 2])
        return True

    return crossing_slopes_body


def third_sphere_body(px, py, pz, i, j, pos, rad, nb_start, nb_index):
    """The neighbour k ∉ {i, j} of i whose accessible sphere passes nearest the point p."""
    best = math.inf
    found = -1
    for s in range(nb_start[i], nb_start[i + 1]):
        k = nb_index[s]
        if k == j:
            continue
        dx = px - pos[k, 0]
        dy = py - pos[k, 1]
        dz = pz - pos[k, 2]
        miss = abs(math.sqrt(dx * dx + dy * dy + dz * dz) - rad[k])
        if miss < best:
            best = miss
            found = k
    return found, best
