"""The exact forces' φ_c term from a near field, a surface and the grid's boundary (research).

The φ_c term of the exact forces (:mod:`pbsolver.forces.coulomb`) is, per atom a,
T_a = Σ_n μ_n G_a(n) with G_a(n) = (r_n − r_a)/|r_n − r_a|³, over every node where μ ≠ 0 (with
salt, the whole solvent): an atoms × nodes sum. On the unknowns, μ = −s − r − ε_c Δ_h λ
(A λ = s + r, A = −∇·(ε∇) + κ̄², Δ_h the 7-point Laplacian with 1/h² a face): summing by parts
outside a sphere S_a of radius R around the atom moves Δ_h onto G_a, whose discrete Laplacian
falls off as h²/r⁵ with no l = 0 part. Dropping Σ_{n∉S} λ_n Δ_h G_a(n) and the residual's terms,

    T_a ≈ Σ_{n∈S} μ_n G_n − Σ_{n∉S} s_n G_n − ε_c Σ_{faces n∈S, m∉S} (λ_n G_m − λ_m G_n)/h²
          + Σ_{faces i interior, b outer layer} ε_f λ_i G_b / h²

(a near sum, the other atoms' spread charges, a surface sum, and one sum over the outer layer
shared by all atoms). Printed: the relative error ‖T − T_direct‖/‖T_direct‖ over the atoms,
and the nodes each part visits, for several R. The peptide (or ``--pqr``), "mol", 0.15 M, a
Dirichlet grid; λ from an adjoint solve at ``--rtol``.

    python benchmarks/cpu_s44/phic_term_split.py --pqr data/peptide.pqr --spacing 0.5
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.append(str(HERE.parents[2]))  # an installed or PYTHONPATH tree first

import pbsolver as pb  # noqa: E402
from pbsolver.forces import adjoint_source  # noqa: E402
from pbsolver.forces.adjoint import adjoint_solve  # noqa: E402
from pbsolver.forces.coulomb import coulomb_sensitivity, face_maps  # noqa: E402


def slopes(points, centre):
    """G(n) = (r_n − c)/|r_n − c|³ for points (m, 3): (m, 3)."""
    d = points - centre
    r2 = np.einsum("ij,ij->i", d, d)
    return d / (r2 * np.sqrt(r2))[:, None]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pqr", default=str(HERE.parents[2] / "data" / "peptide.pqr"))
    p.add_argument("--spacing", type=float, default=0.5)
    p.add_argument("--rtol", type=float, default=1e-10, help="the adjoint solve's")
    p.add_argument("--radii", type=float, nargs="+", default=[3.0, 4.0, 6.0, 8.0, 10.0])
    args = p.parse_args(argv)

    atoms = pb.read_pqr(args.pqr)
    problem = pb.Problem.from_atoms(atoms, spacing=args.spacing, surface="mol",
                                    ionic_strength=0.15)  # fmt: skip
    grid = problem.grid
    solver = pb.Solver(method="multigrid", rtol=args.rtol, dtype=np.float64)
    source = adjoint_source(atoms, grid)
    lam, report = adjoint_solve(problem, source, solver)
    lam = np.asarray(lam, dtype=np.float64)
    mu = np.asarray(coulomb_sensitivity(problem, lam))
    faces = [np.asarray(f, dtype=np.float64) for f in face_maps(problem, np)]
    eps_c = float(problem.eps_cavity)
    h = np.asarray(grid.spacing, dtype=np.float64)
    c = 1.0 / h**2
    shape = np.asarray(grid.shape)
    org = np.asarray(grid.origin, dtype=np.float64)
    pos = np.asarray(atoms.positions, dtype=np.float64)
    coords = [org[a] + np.arange(shape[a]) * h[a] for a in range(3)]
    nodes = np.stack(np.meshgrid(*coords, indexing="ij"), -1).reshape(-1, 3)
    inner = np.zeros(grid.shape, dtype=bool)
    inner[1:-1, 1:-1, 1:-1] = True
    # (the identity holds up to the solve's residual: solved tightly here)
    print(
        f"{Path(args.pqr).name}: {len(pos)} atoms, grid {tuple(grid.shape)}, h {args.spacing} Å; "
        f"adjoint {report.iterations} cycles to {args.rtol:g}"
    )
    # direct: every node with μ ≠ 0
    t0 = time.perf_counter()
    keep = np.flatnonzero(mu.reshape(-1))
    direct = np.array([(mu.reshape(-1)[keep, None] * slopes(nodes[keep], r)).sum(axis=0)
                       for r in pos])  # fmt: skip
    print(f"direct sum over {len(keep)} nodes a atom: {time.perf_counter() - t0:.1f} s")
    # the outer layer's faces (interior i, boundary b), shared by all atoms: weights ε_f λ_i/h²
    bnodes, bweights = [], []
    for a in range(3):
        for end in (0, shape[a] - 1):
            i_plane = 1 if end == 0 else shape[a] - 2
            face_plane = 0 if end == 0 else shape[a] - 2
            sl_b = [slice(1, -1)] * 3
            sl_i = [slice(1, -1)] * 3
            sl_f = [slice(1, -1)] * 3
            sl_b[a], sl_i[a], sl_f[a] = end, i_plane, face_plane
            idx = np.stack(np.meshgrid(*[np.arange(shape[d])[sl_b[d]] if d != a
                                          else np.array([end]) for d in range(3)],
                                        indexing="ij"), -1).reshape(-1, 3)  # fmt: skip
            bnodes.append(org + idx * h)
            bweights.append((faces[a][tuple(sl_f)] * lam[tuple(sl_i)] * c[a]).reshape(-1))
    bnodes, bweights = np.concatenate(bnodes), np.concatenate(bweights)
    src = source.reshape(-1)
    src_nodes = np.flatnonzero(src * inner.reshape(-1))
    flat_lam, flat_mu = lam.reshape(-1), mu.reshape(-1)
    strides = np.array([shape[1] * shape[2], shape[2], 1])
    for radius in args.radii:
        t0 = time.perf_counter()
        out = np.empty_like(direct)
        counts = np.zeros(3)
        boundary = np.array([(bweights[:, None] * slopes(bnodes, r)).sum(axis=0) for r in pos])
        for k, r in enumerate(pos):
            lo = np.maximum(np.ceil((r - radius - org) / h).astype(int), 1)
            hi = np.minimum(np.floor((r + radius - org) / h).astype(int), shape - 2)
            box = np.stack(np.meshgrid(*[np.arange(lo[d], hi[d] + 1) for d in range(3)],
                                       indexing="ij"), -1).reshape(-1, 3)  # fmt: skip
            pts = org + box * h
            inside = np.einsum("ij,ij->i", pts - r, pts - r) <= radius * radius
            box, pts = box[inside], pts[inside]
            flat = box @ strides
            in_s = np.zeros(flat_lam.size, dtype=bool)
            in_s[flat] = True
            total = (flat_mu[flat, None] * slopes(pts, r)).sum(axis=0)
            # the other spread charges outside S
            far = src_nodes[~in_s[src_nodes]]
            total -= (src[far, None] * slopes(nodes[far], r)).sum(axis=0)
            # the surface faces (n in S, m outside S)
            surf = 0.0
            for a in range(3):
                for step in (-1, 1):
                    nb = box.copy()
                    nb[:, a] += step
                    m_flat = nb @ strides
                    out_mask = ~in_s[m_flat]
                    n_f, m_f = flat[out_mask], m_flat[out_mask]
                    g_m = slopes(nodes[m_f], r)
                    g_n = slopes(nodes[n_f], r)
                    surf = surf + c[a] * (flat_lam[n_f, None] * g_m
                                          - flat_lam[m_f, None] * g_n).sum(axis=0)  # fmt: skip
                    counts[1] += out_mask.sum()
            total -= eps_c * surf
            counts[0] += len(flat)
            out[k] = total + boundary[k]
        err = np.linalg.norm(out - direct) / np.linalg.norm(direct)
        worst = np.max(np.linalg.norm(out - direct, axis=1) / np.linalg.norm(direct, axis=1))
        print(
            f"R {radius:5.1f} Å: ‖T − T_direct‖/‖T_direct‖ = {err:.2e}, worst atom {worst:.2e}; "
            f"a atom {counts[0] / len(pos):.0f} sphere nodes, {counts[1] / len(pos):.0f} "
            f"surface faces, {len(bnodes)} outer-layer faces, {len(src_nodes)} spread nodes "
            f"({time.perf_counter() - t0:.1f} s)"
        )


if __name__ == "__main__":
    main()
