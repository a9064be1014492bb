"""The adjoint solve started from λ's singular part, known in closed form (lattice potential).

The exact forces' adjoint A λ = ½ Iᵀq (:mod:`pbsolver.forces.adjoint`) has the forward solve's
operator. Inside the solute A is ε_in times the 7-point Laplacian, so near each charge λ is,
up to a smooth part, c·ψ with ψ the *lattice* potential of the trilinearly spread charges:
−ε_in L ψ = 4πk Iᵀq / (hx·hy·hz), c = ½ hx·hy·hz / (4πk). With φ_rf solved,

    λ ≈ u = c·(φ_rf + ψ),    ψ = φ_c + Σ_a (k q_a / ε_in)·D_a,

where D_a = (4π/(hx·hy·hz))·Σ_w w·G(n − n_w) − 1/|r_n − r_a| on the nodes within ``--reach``
of atom a's cell (G: the lattice Green's function, −L G = δ, from its heat-kernel integral; w:
the atom's eight trilinear weights). ``benchmarks/adjoint_guess.py`` (thirty-ninth session)
tried u with φ_c in place of ψ: near the charges the 7-point Laplacian of 1/r is far from the
spread charge, and no cycle was saved.

Printed, for the colipase frame ``--lag`` frames along the benchmarks' trajectory (on the
first frame's grid, "mol", 0.15 M, multigrid, the adjoint at ``--rtol``): the cycles and the
distance ‖start − λ‖/‖λ‖ from zero, from c·(φ_rf + φ_c), from u, from the first frame's λ
(what a stacked batch's frames start from) and from that λ plus u's change between the two
frames (a control variate: λ_0 + u_lag − u_0).

    python benchmarks/cpu_s42/adjoint_lattice_guess.py --spacing 0.7 --lag 31
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import integrate, special

HERE = Path(__file__).resolve()
sys.path.append(str(HERE.parents[2]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(HERE.parents[1]))

from adjoint_guess import OPTIONS, frame_pair, zero_outer_layer  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.forces import adjoint_source  # noqa: E402
from pbsolver.forces.adjoint import adjoint_solve  # noqa: E402


def lattice_green(h, reach):
    """G(n) for 0 ≤ n_d ≤ reach: −L G = δ_n0, L = Σ_d (S_d⁺ + S_d⁻ − 2)/h_d².

    G(n) = ∫₀^∞ Π_d e^{−a_d t} I_{n_d}(a_d t) dt with a_d = 2/h_d² (the heat kernel of L),
    integrated to T and the tail from the Bessel functions' large-argument expansion.
    """
    a = 2.0 / np.asarray(h, dtype=float) ** 2
    big_t = 2000.0 * float(np.max(h)) ** 2
    tail = float(np.prod(1.0 / np.sqrt(2.0 * np.pi * a)))
    out = np.empty((reach + 1,) * 3)
    for n in np.ndindex(*out.shape):

        def heat(t, n=n):
            return (
                special.ive(n[0], a[0] * t)
                * special.ive(n[1], a[1] * t)
                * special.ive(n[2], a[2] * t)
            )

        value, _ = integrate.quad(heat, 0.0, big_t, limit=400, epsabs=0.0, epsrel=1e-11)
        b = sum((4 * n[d] ** 2 - 1) / (8.0 * a[d]) for d in range(3))
        out[n] = value + tail * (2.0 / np.sqrt(big_t) - b * (2.0 / 3.0) * big_t**-1.5)
    return out


def lattice_correction(atoms, grid, green, reach, eps_in):
    """Σ_a (k q_a / ε_in)·D_a on the unknowns (ψ − φ_c), D_a on the nodes within ``reach``."""
    h = np.asarray(grid.spacing, dtype=float)
    org = np.asarray(grid.origin, dtype=float)
    shape = np.asarray(grid.shape)
    pos = np.asarray(atoms.positions, dtype=float)
    q = np.asarray(atoms.charges, dtype=float)
    frac = (pos - org) / h
    base = np.floor(frac).astype(int)
    t = frac - base
    off = np.arange(-reach, reach + 2)
    offsets = np.stack(np.meshgrid(off, off, off, indexing="ij"), -1).reshape(-1, 3)
    out = np.zeros(grid.shape)
    k = pb.COULOMB_KJ / eps_in
    for a in np.flatnonzero(q):
        lat = np.zeros(len(offsets))
        for corner in np.ndindex(2, 2, 2):
            w = np.prod([t[a, d] if corner[d] else 1.0 - t[a, d] for d in range(3)])
            d = np.abs(offsets - np.asarray(corner))
            lat += w * green[d[:, 0], d[:, 1], d[:, 2]]
        nodes = base[a] + offsets
        inside = np.all((nodes >= 1) & (nodes < shape - 1), axis=1)
        r = np.linalg.norm(org + nodes * h - pos[a], axis=1)
        diff = 4.0 * np.pi / np.prod(h) * lat - 1.0 / np.maximum(r, 1e-300)
        np.add.at(out, tuple(nodes[inside].T), k * q[a] * diff[inside])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pqr", default=str(HERE.parents[2] / "data" / "1lpb_chainA.pqr"))
    p.add_argument("--spacing", type=float, default=0.7)
    p.add_argument("--lag", type=int, default=31)
    p.add_argument("--rtol", type=float, default=1e-5, help="the adjoint's (forward: 1e-6)")
    p.add_argument("--reach", type=int, default=3, help="D_a's half-width, nodes")
    args = p.parse_args(argv)

    first, last, grid = frame_pair(args.pqr, args.lag, args.spacing)
    eps_in = pb.PhysicsOptions().eps_in
    forward = pb.Solver(method="multigrid", rtol=1e-6)
    solver = pb.Solver(method="multigrid", rtol=args.rtol)
    tight = pb.Solver(method="multigrid", rtol=1e-10)
    c = 0.5 * float(np.prod(grid.spacing)) / (4 * np.pi * pb.COULOMB_KJ)
    t0 = time.perf_counter()
    green = lattice_green(grid.spacing, args.reach + 2)
    print(
        f"{Path(args.pqr).name}: grid {grid.shape}, h {args.spacing} Å, frame {args.lag} of the "
        f"trajectory, adjoint rtol {args.rtol:g}, D_a within {args.reach} nodes; lattice "
        f"Green's function {green.size} values in {time.perf_counter() - t0:.1f} s, "
        f"(4π/h)·G(0) = {4 * np.pi / np.prod(grid.spacing) * green[0, 0, 0]:.6f} Å⁻¹"
    )

    def frame(at):
        problem = pb.Problem.from_atoms(at, grid=grid, **OPTIONS)
        phi_rf = np.asarray(forward.solve(problem).phi_rf)
        phic = np.asarray(problem.phi_coulomb)
        phic = np.where(np.isfinite(phic), phic, 0.0)
        near = lattice_correction(at, grid, green, args.reach, eps_in)
        source = adjoint_source(at, grid)
        lam, _ = adjoint_solve(problem, source, tight)
        return (
            problem,
            source,
            lam,
            zero_outer_layer(c * (phi_rf + phic)),
            zero_outer_layer(c * (phi_rf + phic + near)),
        )

    _, _, lam0, _, u0 = frame(first)
    problem, source, lam, coulomb_start, u = frame(last)
    scale = float(np.linalg.norm(lam))
    starts = (("zero", None), ("c·(φ_rf + φ_c)", coulomb_start), ("u = c·(φ_rf + ψ)", u),
              ("frame 0's λ", lam0), ("frame 0's λ + u − u_0", lam0 + u - u0))  # fmt: skip
    for name, x0 in starts:
        _, result = adjoint_solve(problem, source, solver, x0=x0)
        dist = 1.0 if x0 is None else float(np.linalg.norm(x0 - lam)) / scale
        print(f"  from {name:22s} {result.iterations:3d} cycles; ‖start − λ‖/‖λ‖ = {dist:.3g}")


if __name__ == "__main__":
    main()
