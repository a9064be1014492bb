"""Slow NumPy references for the map builders (brute force over all atoms, no cell lists)."""

from __future__ import annotations

import itertools

import numpy as np

K = 1389.35457


def edge_points(grid, axis, idx, t):
    """Points at fractions t (m,) along the edges ``idx`` (n, 3) of ``axis``: (n, m, 3)."""
    origin = np.asarray(grid.origin)
    h = np.asarray(grid.spacing)
    start = origin + idx * h
    step = np.zeros(3)
    step[axis] = h[axis]
    return start[:, None, :] + t[None, :, None] * step


def vdw_edge_fractions(centers, radii, grid, axis):
    """Exact fraction of every edge along ``axis`` inside the union of spheres (all edges)."""
    idx = np.indices(grid.shape).reshape(3, -1).T
    origin = np.asarray(grid.origin)
    h = np.asarray(grid.spacing)
    a1, a2 = [a for a in range(3) if a != axis]
    p0 = origin + idx * h
    out = np.zeros(len(idx))
    for e in range(len(idx)):
        iv = []
        for c, r in zip(centers, radii, strict=True):
            d2 = (p0[e, a1] - c[a1]) ** 2 + (p0[e, a2] - c[a2]) ** 2
            if d2 < r * r:
                w = np.sqrt(r * r - d2)
                iv.append((c[axis] - w, c[axis] + w))
        iv.sort()
        lo, hi = p0[e, axis], p0[e, axis] + h[axis]
        total, cur = 0.0, -np.inf
        for s, t in iv:
            s, t = max(s, lo, cur), min(t, hi)
            if t > s:
                total += t - s
                cur = t
        out[e] = total / h[axis]
    return out.reshape(grid.shape)


def _accessible(p, centers, acc, tol=1e-9):
    """Probe centres p (..., 3) touching no atom: |p − c_k| ≥ R_k + r_p for every k."""
    d2 = ((p[..., None, :] - centers) ** 2).sum(-1)
    return np.all(d2 >= acc**2 * (1 - tol), axis=-1)


def _triple_points(c1, c2, c3, r1, r2, r3):
    """Intersection points of three spheres (0 or 2 points)."""
    ex = c2 - c1
    d = np.linalg.norm(ex)
    ex = ex / d
    i = ex @ (c3 - c1)
    ey = c3 - c1 - i * ex
    ny = np.linalg.norm(ey)
    if ny < 1e-12 or d == 0:
        return []
    ey /= ny
    ez = np.cross(ex, ey)
    j = ey @ (c3 - c1)
    x = (r1**2 - r2**2 + d**2) / (2 * d)
    y = (r1**2 - r3**2 + i**2 + j**2) / (2 * j) - i * x / j
    z2 = r1**2 - x**2 - y**2
    if z2 < 0:
        return []
    z = np.sqrt(z2)
    base = c1 + x * ex + y * ey
    return [base + z * ez, base - z * ez]


def ses_solvent(points, centers, radii, probe):
    """Boolean (n,): is each point in the solvent of the SES (reachable by a probe sphere)?

    d(x, A) for the accessible set A is minimised over: radial projections on every accessible
    sphere, nearest points on every pairwise intersection circle, and every triple point;
    candidates inside any accessible sphere are discarded (all atoms checked).
    """
    x = np.asarray(points, dtype=float)
    c = np.asarray(centers, dtype=float)
    acc = np.asarray(radii, dtype=float) + probe
    n = len(c)
    d_vdw = np.linalg.norm(x[:, None, :] - c[None], axis=-1)
    in_vdw = np.any(d_vdw < np.asarray(radii)[None], axis=1)
    solvent = np.all(d_vdw >= acc[None], axis=1)  # x itself accessible
    # spheres
    for i in range(n):
        v = x - c[i]
        r = np.linalg.norm(v, axis=1)
        ok = r > 0
        p = c[i] + acc[i] * v / np.where(ok, r, 1)[:, None]
        near = ok & (np.abs(acc[i] - r) < probe)
        solvent |= near & _accessible(p, c, acc)
    # circles
    for i, j in itertools.combinations(range(n), 2):
        dvec = c[j] - c[i]
        d = np.linalg.norm(dvec)
        if d >= acc[i] + acc[j] or d <= abs(acc[i] - acc[j]):
            continue
        nrm = dvec / d
        a = (d * d + acc[i] ** 2 - acc[j] ** 2) / (2 * d)
        rho = np.sqrt(acc[i] ** 2 - a * a)
        m = c[i] + a * nrm
        w = x - m
        wp = w - (w @ nrm)[:, None] * nrm
        lw = np.linalg.norm(wp, axis=1)
        ok = lw > 1e-12
        q = m + rho * wp / np.where(ok, lw, 1)[:, None]
        near = ok & (np.linalg.norm(x - q, axis=1) < probe)
        solvent |= near & _accessible(q, c, acc)
    # triple points
    for i, j, k in itertools.combinations(range(n), 3):
        for p in _triple_points(c[i], c[j], c[k], acc[i], acc[j], acc[k]):
            if _accessible(p[None], c, acc)[0]:
                solvent |= np.linalg.norm(x - p, axis=1) < probe
    return solvent & ~in_vdw


def ses_edge_fractions(centers, radii, probe, grid, axis, idx, samples=200):
    """Fraction of the edges ``idx`` (n, 3) inside the SES, midpoint rule with ``samples``."""
    t = (np.arange(samples) + 0.5) / samples
    pts = edge_points(grid, axis, idx, t)
    solv = ses_solvent(pts.reshape(-1, 3), centers, radii, probe).reshape(len(idx), samples)
    return 1.0 - solv.mean(axis=1)


def coulomb(grid, centers, charges, eps, box=None):
    """Direct-sum φ_c on the grid, NumPy (minimum image with ``box``)."""
    x, y, z = grid.coordinates()
    out = np.zeros(grid.shape)
    for c, q in zip(centers, charges, strict=True):
        d = [x - c[0], y - c[1], z - c[2]]
        if box is not None:
            d = [di - b * np.rint(di / b) for di, b in zip(d, box, strict=True)]
        with np.errstate(divide="ignore"):
            out = out + K * q / (eps * np.sqrt(d[0] ** 2 + d[1] ** 2 + d[2] ** 2))
    return out


def radial_sums(points, weights, centres, box=None, radii=None, kappa=0.0, eps_out=1.0,
                inv_c=1.0):  # fmt: skip
    """Σ_p w_p g(|p − c_i|)(p − c_i) in float64 (the forces' φ_c and "mdh" sums): (n, 3).

    g is 1/r³, or with ``radii`` the Debye–Hückel slope −T'(r)/r; ``box``: nearest image.
    ``points`` is (3, m).
    """
    d = np.asarray(points, dtype=np.float64).T[None] - np.asarray(centres)[:, None]
    if box is not None:
        d -= np.asarray(box) * np.floor(d / np.asarray(box) + 0.5)
    r2 = (d * d).sum(axis=-1)
    r = np.sqrt(r2)
    if radii is None:
        g = 1.0 / (r2 * r)
    else:
        a = np.asarray(radii)[:, None]
        screened = np.exp(-kappa * (r - a)) * (1.0 + kappa * r) / (eps_out * (1.0 + kappa * a))
        g = (screened - inv_c) / (r2 * r)
    return ((np.asarray(weights) * g)[..., None] * d).sum(axis=1)
