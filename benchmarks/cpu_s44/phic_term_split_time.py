"""The φ_c term split (``phic_term_split.py``) as numba loops, timed against the CPU's direct sum.

A prototype beside the package, not in it: the near part (μ in a sphere of radius R around
each atom, its surface faces, the other atoms' spread charges outside it) in one ``prange``
over the atoms in float64, and the outer layer's faces through the package's own float32
radial sums (:func:`pbsolver.backends.cpu.forces.coulomb_sums`), against
:func:`pbsolver.backends.cpu.forces.coulomb_grid_sums` (what the exact forces call today). The
peptide on the grid ``Problem.from_atoms`` places (``margin=8.0``: 65×97×65 at 0.5 Å); λ from
an adjoint solve to 1e-10. The near loop here is plain float64 with a neighbour test at every
sphere node; the direct sum is the package's vectorised float32 kernel. Printed:
the median seconds of ``--repeats`` calls of each and the split's error against the direct sum.

    python benchmarks/cpu_s44/phic_term_split_time.py --radii 8 10
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

HERE = Path(__file__).resolve()
sys.path.append(str(HERE.parents[2]))  # an installed or PYTHONPATH tree first

import pbsolver as pb  # noqa: E402
from pbsolver.backends.cpu import forces as cpu  # noqa: E402
from pbsolver.forces import adjoint_source  # noqa: E402
from pbsolver.forces.adjoint import adjoint_solve  # noqa: E402
from pbsolver.forces.coulomb import coulomb_sensitivity, face_maps  # noqa: E402


@njit(inline="always")
def _slope(x, y, z):
    r2 = x * x + y * y + z * z
    f = 1.0 / (r2 * math.sqrt(r2))
    return f * x, f * y, f * z


@njit(inline="always")
def _box(cx, cy, radius, org, h, nx, ny):
    """The interior (i, j) index ranges of the sphere's bounding box: (i0, i1, j0, j1)."""
    i0 = max(1, int(math.ceil((cx - radius - org[0]) / h[0])))
    i1 = min(nx - 2, int(math.floor((cx + radius - org[0]) / h[0])))
    j0 = max(1, int(math.ceil((cy - radius - org[1]) / h[1])))
    j1 = min(ny - 2, int(math.floor((cy + radius - org[1]) / h[1])))
    return i0, i1, j0, j1


@njit(inline="always")
def _spread_outside(spread_xyz, spread_w, cx, cy, cz, r2max):
    """Σ s G over the spread charges farther than √r2max from (cx, cy, cz)."""
    gx, gy, gz = 0.0, 0.0, 0.0
    for p in range(spread_w.shape[0]):
        ex = spread_xyz[p, 0] - cx
        ey = spread_xyz[p, 1] - cy
        ez = spread_xyz[p, 2] - cz
        if ex * ex + ey * ey + ez * ez > r2max:
            vx, vy, vz = _slope(ex, ey, ez)
            gx += spread_w[p] * vx
            gy += spread_w[p] * vy
            gz += spread_w[p] * vz
    return gx, gy, gz


@njit(parallel=True, cache=True)
def near_sums(mu, lam, org, h, centres, radius, eps_c, spread_xyz, spread_w, out):
    """out[a] = Σ_S μ G − Σ_{spread ∉ S} s G − ε_c Σ_{faces n∈S, m∉S} (λ_n G_m − λ_m G_n)/h²."""
    nx, ny, nz = mu.shape
    r2max = radius * radius
    c = (1.0 / (h[0] * h[0]), 1.0 / (h[1] * h[1]), 1.0 / (h[2] * h[2]))
    for a in prange(centres.shape[0]):
        cx, cy, cz = centres[a, 0], centres[a, 1], centres[a, 2]
        i0, i1, j0, j1 = _box(cx, cy, radius, org, h, nx, ny)
        gx, gy, gz = 0.0, 0.0, 0.0
        sx, sy, sz = 0.0, 0.0, 0.0
        for i in range(i0, i1 + 1):
            dx = org[0] + i * h[0] - cx
            for j in range(j0, j1 + 1):
                dy = org[1] + j * h[1] - cy
                rem = r2max - dx * dx - dy * dy
                if rem < 0.0:
                    continue
                half = math.sqrt(rem)
                k0 = max(1, int(math.ceil((cz - half - org[2]) / h[2])))
                k1 = min(nz - 2, int(math.floor((cz + half - org[2]) / h[2])))
                for k in range(k0, k1 + 1):
                    dz = org[2] + k * h[2] - cz
                    r2 = dx * dx + dy * dy + dz * dz
                    if r2 == 0.0:
                        continue  # a node on the atom: μ is 0 there, and it is no surface node
                    ux, uy, uz = _slope(dx, dy, dz)
                    w = mu[i, j, k]
                    gx += w * ux
                    gy += w * uy
                    gz += w * uz
                    ln = lam[i, j, k]
                    for axis in range(3):
                        for step in (-1, 1):
                            mi, mj, mk = i, j, k
                            ex, ey, ez = dx, dy, dz
                            if axis == 0:
                                mi += step
                                ex += step * h[0]
                            elif axis == 1:
                                mj += step
                                ey += step * h[1]
                            else:
                                mk += step
                                ez += step * h[2]
                            inner = 0 < mi < nx - 1 and 0 < mj < ny - 1 and 0 < mk < nz - 1
                            if inner and ex * ex + ey * ey + ez * ez <= r2max:
                                continue  # m is in S: no surface face
                            vx, vy, vz = _slope(ex, ey, ez)
                            lm = lam[mi, mj, mk]
                            sx += c[axis] * (ln * vx - lm * ux)
                            sy += c[axis] * (ln * vy - lm * uy)
                            sz += c[axis] * (ln * vz - lm * uz)
        ox, oy, oz = _spread_outside(spread_xyz, spread_w, cx, cy, cz, r2max)
        out[a, 0] = gx - ox - eps_c * sx
        out[a, 1] = gy - oy - eps_c * sy
        out[a, 2] = gz - oz - eps_c * sz


@njit(inline="always")
def _row(i, j, org, h, cx, cy, cz, r2max, nx, ny, nz):
    """The interior k range of row (i, j) inside the sphere: (k0, k1), empty when k0 > k1."""
    if i < 1 or i > nx - 2 or j < 1 or j > ny - 2:
        return 1, 0
    dx = org[0] + i * h[0] - cx
    dy = org[1] + j * h[1] - cy
    rem = r2max - dx * dx - dy * dy
    if rem < 0.0:
        return 1, 0
    half = math.sqrt(rem)
    k0 = max(1, int(math.ceil((cz - half - org[2]) / h[2])))
    k1 = min(nz - 2, int(math.floor((cz + half - org[2]) / h[2])))
    return k0, k1


@njit(inline="always")
def _face(lam, i, j, k, mi, mj, mk, org, h, cx, cy, cz, ca):
    """c_a (λ_n G_m − λ_m G_n) of the face from node n = (i, j, k) in S to m outside it."""
    ux, uy, uz = _slope(org[0] + i * h[0] - cx, org[1] + j * h[1] - cy, org[2] + k * h[2] - cz)
    vx, vy, vz = _slope(org[0] + mi * h[0] - cx, org[1] + mj * h[1] - cy,
                        org[2] + mk * h[2] - cz)  # fmt: skip
    ln, lm = lam[i, j, k], lam[mi, mj, mk]
    return ca * (ln * vx - lm * ux), ca * (ln * vy - lm * uy), ca * (ln * vz - lm * uz)


@njit(parallel=True, fastmath={"reassoc", "contract", "nsz", "arcp"}, cache=True)
def near_sums_lean(mu, lam, org, h, centres, radius, eps_c, spread_xyz, spread_w, out):
    """:func:`near_sums` with the sphere's rows summed without branches.

    The surface faces are found from the neighbouring rows' k ranges: only the sphere's edge
    is visited twice.
    """
    nx, ny, nz = mu.shape
    r2max = radius * radius
    c = (1.0 / (h[0] * h[0]), 1.0 / (h[1] * h[1]), 1.0 / (h[2] * h[2]))
    for a in prange(centres.shape[0]):
        cx, cy, cz = centres[a, 0], centres[a, 1], centres[a, 2]
        i0, i1, j0, j1 = _box(cx, cy, radius, org, h, nx, ny)
        gx, gy, gz = 0.0, 0.0, 0.0
        sx, sy, sz = 0.0, 0.0, 0.0
        for i in range(i0, i1 + 1):
            dx = org[0] + i * h[0] - cx
            for j in range(j0, j1 + 1):
                k0, k1 = _row(i, j, org, h, cx, cy, cz, r2max, nx, ny, nz)
                if k0 > k1:
                    continue
                dy = org[1] + j * h[1] - cy
                d2 = dx * dx + dy * dy
                tx, ty, tz = 0.0, 0.0, 0.0
                for k in range(k0, k1 + 1):
                    dz = org[2] + k * h[2] - cz
                    r2 = max(d2 + dz * dz, 1e-30)  # on the atom μ is 0: 0 · huge, not 0 · inf
                    f = mu[i, j, k] / (r2 * math.sqrt(r2))
                    tx += f
                    ty += f
                    tz += f * dz
                gx += tx * dx
                gy += ty * dy
                gz += tz
                # the surface: the row's two z ends, then the parts of the row past each
                # neighbouring row's range (x and y faces)
                fx_, fy_, fz_ = _face(lam, i, j, k0, i, j, k0 - 1, org, h, cx, cy, cz, c[2])
                sx += fx_
                sy += fy_
                sz += fz_
                fx_, fy_, fz_ = _face(lam, i, j, k1, i, j, k1 + 1, org, h, cx, cy, cz, c[2])
                sx += fx_
                sy += fy_
                sz += fz_
                for nb in range(4):
                    mi = i + (1 if nb == 0 else -1 if nb == 1 else 0)
                    mj = j + (1 if nb == 2 else -1 if nb == 3 else 0)
                    ca = c[0] if nb < 2 else c[1]
                    a0, a1 = _row(mi, mj, org, h, cx, cy, cz, r2max, nx, ny, nz)
                    if a0 > a1:  # the neighbouring row is outside S: every face of the row
                        a0, a1 = k1 + 1, k1
                    # the row's nodes below and above the neighbour's range
                    for lo, hi in ((k0, min(k1, a0 - 1)), (max(k0, a1 + 1), k1)):
                        for k in range(lo, hi + 1):
                            fx_, fy_, fz_ = _face(lam, i, j, k, mi, mj, k, org, h, cx, cy, cz,
                                                  ca)  # fmt: skip
                            sx += fx_
                            sy += fy_
                            sz += fz_
        ox, oy, oz = _spread_outside(spread_xyz, spread_w, cx, cy, cz, r2max)
        out[a, 0] = gx - ox - eps_c * sx
        out[a, 1] = gy - oy - eps_c * sy
        out[a, 2] = gz - oz - eps_c * sz


def outer_layer(lam, faces, org, h, shape):
    """The outer layer's faces (interior i, boundary b): points b (3, m) and ε_f λ_i / h²."""
    pts, ws = [], []
    for a in range(3):
        for end in (0, shape[a] - 1):
            sl_b, sl_i, sl_f = [slice(1, -1)] * 3, [slice(1, -1)] * 3, [slice(1, -1)] * 3
            sl_b[a], sl_i[a] = end, 1 if end == 0 else shape[a] - 2
            sl_f[a] = 0 if end == 0 else shape[a] - 2
            axes = [np.array([end]) if d == a else np.arange(1, shape[d] - 1) for d in range(3)]
            idx = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
            pts.append((org + idx * h).T)
            ws.append((faces[a][tuple(sl_f)] * lam[tuple(sl_i)] / h[a] ** 2).reshape(-1))
    return np.concatenate(pts, axis=1), np.concatenate(ws)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pqr", default=str(HERE.parents[2] / "data" / "peptide.pqr"))
    p.add_argument("--spacing", type=float, default=0.5)
    p.add_argument("--radii", type=float, nargs="+", default=[8.0, 10.0])
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)

    atoms = pb.read_pqr(args.pqr)
    problem = pb.Problem.from_atoms(atoms, spacing=args.spacing, surface="mol",
                                    ionic_strength=0.15, margin=8.0)  # fmt: skip
    grid = problem.grid
    source = adjoint_source(atoms, grid)
    lam, _ = adjoint_solve(problem, source, pb.Solver(method="multigrid", rtol=1e-10,
                                                      dtype=np.float64))  # fmt: skip
    lam = np.ascontiguousarray(lam, dtype=np.float64)
    mu = np.ascontiguousarray(coulomb_sensitivity(problem, lam), dtype=np.float64)
    faces = [np.asarray(f, dtype=np.float64) for f in face_maps(problem, np)]
    org, h = np.asarray(grid.origin, float), np.asarray(grid.spacing, float)
    shape = np.asarray(grid.shape)
    pos = np.ascontiguousarray(atoms.positions, dtype=np.float64)
    inner = np.zeros(grid.shape, dtype=bool)
    inner[1:-1, 1:-1, 1:-1] = True
    spread = np.flatnonzero((source * inner).reshape(-1))
    spread_xyz = org + np.stack(np.unravel_index(spread, grid.shape), -1) * h
    spread_w = source.reshape(-1)[spread].copy()
    eps_c = float(problem.eps_cavity)
    print(
        f"{Path(args.pqr).name}: {len(pos)} atoms, grid {tuple(grid.shape)}, h {args.spacing} Å, "
        f"{numba.get_num_threads()} threads, {int(np.count_nonzero(mu))} nodes with μ ≠ 0"
    )

    def timed(fn):
        fn()
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = fn()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts)), out

    t_direct, direct = timed(lambda: cpu.coulomb_grid_sums(mu, grid.origin, grid.spacing, pos))
    print(f"direct (coulomb_grid_sums, float32 terms): {1e3 * t_direct:.2f} ms")
    for radius in args.radii:

        def split(radius=radius):
            out = np.empty((len(pos), 3))
            near_sums(mu, lam, org, h, pos, radius, eps_c, spread_xyz, spread_w, out)
            pts, ws = outer_layer(lam, faces, org, h, shape)
            return out + cpu.coulomb_sums(pts, ws, pos)

        def lean(radius=radius):
            out = np.empty((len(pos), 3))
            near_sums_lean(mu, lam, org, h, pos, radius, eps_c, spread_xyz, spread_w, out)
            pts, ws = outer_layer(lam, faces, org, h, shape)
            return out + cpu.coulomb_sums(pts, ws, pos)

        for name, fn in (("split", split), ("lean split", lean)):
            t, got = timed(fn)
            err = np.linalg.norm(got - direct) / np.linalg.norm(direct)
            print(
                f"{name}, R {radius:4.1f} Å: {1e3 * t:.2f} ms ({t_direct / t:.1f}× faster), "
                f"‖split − direct‖/‖direct‖ = {err:.2e}"
            )


if __name__ == "__main__":
    main()
