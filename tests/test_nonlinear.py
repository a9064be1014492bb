"""The nonlinear Poisson–Boltzmann equation: Newton against references, limits and bad input.

References: a float64 Newton iteration of our own on the assembled sparse system (SciPy), the
exact planar Gouy–Chapman double layer, and the linearised equation at low potential.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from conftest import random_problem
from scipy.sparse.linalg import spsolve

import pbsolver as pb
from pbsolver.io.hdf5 import read_problem, write_hdf5
from pbsolver.io.units import kT_kj_per_mol
from pbsolver.molecule.energy import (
    interpolate,
    reaction_field_energy,
    solvate,
    solvation_terms,
)
from pbsolver.nonlinear import boltzmann
from pbsolver.nonlinear.energy import ion_terms
from pbsolver.operator import assemble_matrix, fixed_values


# ---------------------------------------------------------------------- references
def reference_system(problem):
    """(F, J, unknowns, ‖b‖) of the nonlinear problem over its unknowns, float64 SciPy."""
    A, b, unknowns = assemble_matrix(problem)
    u = unknowns.ravel()
    k2 = problem.kappa2.ravel()[u]
    phic = np.where(problem.kappa2 > 0, problem.phi_coulomb, 0.0).ravel()[u]
    A_eps = A - sp.diags(k2)
    b_eps = b + k2 * phic
    kT = kT_kj_per_mol(problem.temperature)
    z = problem.ion_valence

    salty = k2 > 0  # elsewhere φ_rf alone may be hundreds of kT: no sinh taken there

    def F(v):
        x = np.where(salty, z * (phic + v) / kT, 0.0)
        return A_eps @ v + k2 * (kT / z) * np.sinh(x) - b_eps

    def J(v):
        x = np.where(salty, z * (phic + v) / kT, 0.0)
        return (A_eps + sp.diags(k2 * np.cosh(x))).tocsc()

    return F, J, unknowns, np.linalg.norm(b), A, b


def reference_newton(problem, tol=1e-13):
    """Plain Newton from the linearised solution, halving steps until ‖F‖ decreases."""
    F, J, unknowns, _, A, b = reference_system(problem)
    v = spsolve(A.tocsc(), b)
    for _ in range(100):
        f = F(v)
        if np.linalg.norm(f) <= tol * np.linalg.norm(b):
            break
        d = spsolve(J(v), -f)
        a = 1.0
        while np.linalg.norm(F(v + a * d)) > (1 - 1e-4 * a) * np.linalg.norm(f) and a > 1e-8:
            a *= 0.5
        v = v + a * d
    else:
        raise AssertionError("the reference Newton iteration did not converge")
    phi = fixed_values(problem)
    phi[unknowns] = v
    return phi


def nonlinear_residual(problem, phi):
    """‖F(φ)‖/‖b‖ recomputed in float64 on the assembled system."""
    F, _, unknowns, bnorm, _, _ = reference_system(problem)
    return np.linalg.norm(F(np.asarray(phi, dtype=np.float64)[unknowns])) / bnorm


def as_nonlinear(problem, scale=0.02, **kw):
    """The same maps, φ_c times ``scale``, with nonlinear=True (``kw``: valence, temperature).

    The random charges' φ_c in ε_c = 1 reaches hundreds of kT in the salt: scaled down, the
    potential stays where a plain Newton iteration (the reference) converges.
    """
    return pb.Problem(
        problem.grid, problem.epsilon, scale * problem.phi_coulomb, problem.eps_cavity,
        epsilon_faces=problem.epsilon_faces, kappa2=problem.kappa2, boundary=problem.boundary,
        boundary_values=problem.boundary_values, face_rule=problem.face_rule, nonlinear=True,
        **kw,
    )  # fmt: skip


def ion(q, radius=3.0, **kw):
    atoms = pb.Atoms([[0.1, 0.05, -0.02]], [q], [radius])
    options = {"spacing": 0.6, "margin": 5.0, "surface": "vdw", "eps_in": 2.0, **kw}
    return atoms, pb.Problem.from_atoms(atoms, **options)


# ---------------------------------------------------------------------- (a) float64 reference
@pytest.mark.parametrize(
    ("method", "dtype"),
    [("multigrid", np.float32), ("mgcg", np.float64), ("sor", np.float32)],
)
def test_matches_a_float64_newton_on_the_assembled_system(rng, method, dtype):
    base = random_problem(rng, shape=(11, 14, 9), spacing=0.55, salt=True,
                          boundary_values=True, face_rule="harmonic")  # fmt: skip
    problem = as_nonlinear(base, ion_valence=2, temperature=310.0)
    ref = reference_newton(problem)
    x = 2 * np.where(problem.kappa2 > 0, problem.phi_coulomb + ref, 0.0) / kT_kj_per_mol(310.0)
    assert np.abs(x).max() > 5  # truly nonlinear: sinh far from its linearisation
    res = pb.solve(problem, method=method, backend="cpu", rtol=1e-10, dtype=dtype)
    assert res.converged and res.reason == "converged" and res.newton_steps >= 2
    assert res.residual <= 1e-10 and nonlinear_residual(problem, res.phi_rf) <= 2e-10
    np.testing.assert_allclose(res.phi_rf, ref, rtol=0, atol=1e-7 * np.abs(ref).max())
    assert res.phi_rf.dtype == np.float64 or dtype == np.float32
    assert len(res.residual_norms) == res.newton_steps + 1
    assert sum(s["iterations"] for s in res.extra["newton"]) <= res.iterations


@pytest.mark.parametrize(("method", "dtype"), [("multigrid", np.float32), ("sor", np.float64)])
def test_a_stack_of_nonlinear_problems_matches_each_reference(rng, method, dtype):
    """solve_batch stacks nonlinear problems: each block converges to its own reference.

    Four problems of one odd shape, different charges, salts and boundary values, one with its
    charges scaled to a tenth (nearly linear) and one with no charges in the salt (zero
    right-hand side except its boundary values): one Newton iteration, per-block thresholds.
    """
    problems = []
    for k, scale in enumerate((0.02, 0.03, 0.002, 0.0)):
        base = random_problem(rng, shape=(11, 14, 9), spacing=0.55, salt=True,
                              boundary_values=k != 3, face_rule="harmonic")  # fmt: skip
        problems.append(as_nonlinear(base, scale=scale, ion_valence=2, temperature=310.0))
    refs = [reference_newton(p) if k < 3 else np.zeros(p.grid.shape)
            for k, p in enumerate(problems)]  # fmt: skip
    results = pb.solve_batch(problems, mode="stacked", method=method, backend="cpu", rtol=1e-10,
                             dtype=dtype)  # fmt: skip
    for k, (p, r, ref) in enumerate(zip(problems, results, refs, strict=True)):
        assert r.converged and r.reason == "converged", (k, r.reason)
        assert r.extra["batch"] == "stacked" and r.extra["batch_size"] == 4
        assert r.newton_steps == results[0].newton_steps >= 2
        scale = max(np.abs(ref).max(), 1.0)
        np.testing.assert_allclose(r.phi_rf, ref, rtol=0, atol=1e-7 * scale, err_msg=str(k))
        if k < 3:
            assert nonlinear_residual(p, r.phi_rf) <= 2e-10
    # one at a time, the same problems give the same potentials
    alone = [
        pb.solve(p, method=method, backend="cpu", rtol=1e-10, dtype=dtype) for p in problems[:2]
    ]
    for a, r in zip(alone, results, strict=False):
        np.testing.assert_allclose(r.phi_rf, a.phi_rf, rtol=0, atol=1e-7 * np.abs(a.phi_rf).max())
    # warm-started from the answers, the stack is converged at once
    again = pb.solve_batch(problems, [r.phi_rf for r in results], mode="stacked", method=method,
                           backend="cpu", rtol=1e-8, dtype=dtype)  # fmt: skip
    assert all(r.converged and r.newton_steps == 0 for r in again)


def test_a_batch_stacks_nonlinear_and_linear_problems_apart(rng):
    base = random_problem(rng, shape=(9, 10, 11), spacing=0.6, salt=True, boundary_values=True)
    nonlinear = as_nonlinear(base)
    other = as_nonlinear(base, scale=0.01, temperature=280.0)  # another scale: not stacked with it
    problems = [base, nonlinear, base, nonlinear, other]
    results = pb.solve_batch(problems, mode="stacked", method="sor", backend="cpu", rtol=1e-9)
    assert [r.newton_steps is None for r in results] == [True, False, True, False, False]
    assert [r.extra.get("batch_size") for r in results] == [2, 2, 2, 2, None]
    np.testing.assert_allclose(results[1].phi_rf, results[3].phi_rf, rtol=0, atol=1e-12)
    alone = pb.solve(other, method="sor", backend="cpu", rtol=1e-9)
    np.testing.assert_allclose(results[4].phi_rf, alone.phi_rf, rtol=0, atol=1e-12)


def test_periodic_with_salt_matches_the_reference(rng):
    base = random_problem(rng, shape=(10, 8, 12), spacing=0.6, boundary="periodic", salt=True)
    problem = as_nonlinear(base)
    ref = reference_newton(problem)
    for method in ("sor", "mgcg"):
        res = pb.solve(problem, method=method, backend="cpu", rtol=1e-9, dtype=np.float64)
        assert res.converged, (method, res.reason)
        np.testing.assert_allclose(res.phi_rf, ref, rtol=0, atol=1e-6 * np.abs(ref).max())


def test_a_warm_start_converges_at_once_and_x0_is_kept(rng):
    base = random_problem(rng, shape=(9, 10, 11), spacing=0.6, salt=True, boundary_values=True)
    problem = as_nonlinear(base)
    first = pb.solve(problem, backend="cpu", method="multigrid", rtol=1e-8)
    x0 = first.phi_rf.copy()
    again = pb.solve(problem, x0=x0, backend="cpu", method="multigrid", rtol=1e-8)
    assert again.converged and again.newton_steps == 0 and again.iterations == 0
    np.testing.assert_array_equal(x0, first.phi_rf)
    # a poor guess (zero) is corrected, and the caller's array is untouched
    zero = np.zeros(problem.grid.shape)
    res = pb.solve(problem, x0=zero, backend="cpu", method="multigrid", rtol=1e-8)
    assert res.converged and not zero.any()
    np.testing.assert_allclose(res.phi_rf, first.phi_rf, atol=1e-6 * np.abs(x0).max())


@pytest.mark.parametrize("minimiser", [1e-3, 0.3, 0.95, 1.0, 7.0, 300.0])
def test_line_search_finds_the_minimiser_of_a_steep_convex_function(minimiser):
    """Δ(α) = cosh(c(α − α*)) − cosh(cα*): exponential walls on both sides, as sinh makes."""
    from pbsolver.nonlinear.newton import FULL_STEP, WOLFE, line_search

    c = 12.0 / max(minimiser, 1.0)

    def slope(a):
        return c * np.sinh(c * (a - minimiser))

    def value(a):
        return np.cosh(c * (a - minimiser)) - np.cosh(c * minimiser)

    d0 = slope(0.0)
    alpha, evals = line_search(slope, value, d0)
    assert alpha is not None and evals <= 40 and value(alpha) < 0
    if alpha == 1.0:
        assert abs(slope(1.0)) <= FULL_STEP * abs(d0)
    else:
        assert abs(slope(alpha)) <= WOLFE * abs(d0)


# ---------------------------------------------------------------------- (b) Gouy–Chapman
def gouy_chapman_error(n, phi0_kT, length=30.0, ionic_strength=0.1):
    """Max error / φ0 of the planar double layer on an n-node line.

    The potential of a charged wall at x = 0 in 1:1 salt is φ(x) = 2kT ln((1 + γ e^{−κx}) /
    (1 − γ e^{−κx})), γ = tanh(φ0/4kT): a function of x alone, so on a grid periodic in y and z
    nothing flows across the y and z faces. The same holds in a Dirichlet box whose side faces
    carry φ(x) and whose y and z faces are (numerically) closed: the discrete solution is then
    the 1-D one, whose error must fall as h².
    """
    T, eps = 298.15, 78.54
    kT = kT_kj_per_mol(T)
    kappa = pb.PhysicsOptions(ionic_strength=ionic_strength, temperature=T).kappa
    h = length / (n - 1)
    grid = pb.Grid((n, 3, 3), spacing=h)
    x = np.broadcast_to((np.arange(n) * h)[:, None, None], grid.shape)
    gamma = np.tanh(phi0_kT / 4.0)
    e = gamma * np.exp(-kappa * x)
    exact = 2.0 * kT * np.log((1.0 + e) / (1.0 - e))
    one = np.ones(grid.shape)
    problem = pb.Problem(grid, phi_coulomb=0 * one, eps_cavity=eps,
                         epsilon_faces=(eps * one, 1e-9 * one, 1e-9 * one),
                         kappa2=eps * kappa**2 * one, boundary_values=exact, nonlinear=True,
                         temperature=T)  # fmt: skip
    res = pb.solve(problem, method="sor", backend="cpu", rtol=1e-12, dtype=np.float64)
    assert res.converged
    return np.abs(res.phi_rf - exact).max() / (phi0_kT * kT)


def test_gouy_chapman_double_layer_converges_as_h_squared():
    errors = [gouy_chapman_error(n, 2.0) for n in (17, 33, 65, 129)]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 3.8) & (ratios < 4.2)), (errors, ratios)
    assert errors[-1] < 5e-5
    # a strongly nonlinear layer (φ0 = 8 kT, most of it within a Debye length of the wall),
    # whose steep start reaches the h² regime only on finer grids
    strong = [gouy_chapman_error(n, 8.0) for n in (65, 129)]
    assert strong[1] < 4e-3 and 2.8 < strong[0] / strong[1] < 4.2


# ---------------------------------------------------------------------- (c) low potential
def test_low_potential_tends_to_the_linear_solution_and_energy():
    rel = []
    for q in (0.25, 0.5):
        atoms, problem = ion(q, ionic_strength=0.15, nonlinear=True)
        nl = pb.solve(problem, backend="cpu", method="multigrid", rtol=1e-10, dtype=np.float64)
        lin = pb.solve(problem, backend="cpu", method="multigrid", rtol=1e-10,
                       dtype=np.float64, nonlinear=False)  # fmt: skip
        assert nl.newton_steps is not None and lin.newton_steps is None
        terms = solvation_terms(atoms, problem, nl.phi_rf)
        g_lin = reaction_field_energy(atoms, problem.grid, lin.phi_rf)
        assert terms.mobile > 0 > terms.osmotic and terms.total < 0
        rel.append(abs(terms.total / g_lin - 1.0))
        scale = np.abs(lin.phi_rf).max()
        assert np.abs(nl.phi_rf - lin.phi_rf).max() < 1e-2 * scale
    # φ_nl − φ_lin ∝ q³ and the ion terms ∝ q⁴: the relative energy difference ∝ q²
    assert rel[0] < 1e-3 and 3.0 < rel[1] / rel[0] < 5.0, rel
    # the ion terms of the linearised equation's solution cancel to fourth order
    mobile, osmotic = ion_terms(problem, lin.phi_rf)
    assert abs(mobile + osmotic) < 1e-2 * mobile


def test_energy_equals_the_charging_free_energy():
    """ΔG against ∫₀¹ Σ q_i φ_rf(r_i; λq) dλ, the thermodynamic charging route (no formula).

    The two agree up to the box's cut of the ion integrals; the test asks for a tenth of the
    nonlinear correction ΔG − ½ Σ q φ_rf(linear), whose sign a wrong ion term would flip.
    """
    atoms, problem = ion(-10.0, spacing=0.8, margin=10.0, ionic_strength=0.1, nonlinear=True)
    solver = pb.Solver(backend="cpu", method="multigrid", rtol=1e-8)
    terms = solvation_terms(atoms, problem, solver.solve(problem).phi_rf)
    lin = solver.solve(problem, nonlinear=False)
    g_lin = reaction_field_energy(atoms, problem.grid, lin.phi_rf)
    nodes, weights = np.polynomial.legendre.leggauss(5)
    charging = 0.0
    for t, w in zip(0.5 * (nodes + 1.0), 0.5 * weights, strict=True):
        # charges t·q: φ_c and the (linear Debye–Hückel) boundary values scale with them
        scaled = pb.Problem(problem.grid, phi_coulomb=t * problem.phi_coulomb,
                            eps_cavity=problem.eps_cavity, epsilon_faces=problem.epsilon_faces,
                            kappa2=problem.kappa2, boundary_values=t * problem.boundary_values,
                            nonlinear=True)  # fmt: skip
        phi = solver.solve(scaled).phi_rf
        charging += w * float(atoms.charges @ interpolate(problem.grid, phi, atoms.positions))
    correction = terms.total - g_lin
    assert correction < -10.0  # kJ/mol: a clearly nonlinear case
    assert abs(terms.total - charging) < 0.1 * abs(correction), (terms, charging, g_lin)


def test_solvation_energy_and_solvate_use_the_nonlinear_energy():
    atoms = pb.Atoms([[0.1, 0.05, -0.02], [1.6, -0.4, 0.3]], [-3.0, -2.0], [2.0, 1.8])
    common = {"spacing": 0.6, "margin": 4.0, "surface": "vdw", "backend": "cpu",
              "method": "multigrid", "ionic_strength": 0.05}  # fmt: skip
    s = solvate(atoms, nonlinear=True, **common)
    lin = solvate(atoms, **common)
    assert s.result.newton_steps is not None and s.terms is not None and lin.terms is None
    assert s.energy == pytest.approx(s.terms.total) and s.problem.nonlinear
    fixed = 0.5 * float(np.dot(atoms.charges, s.potentials))
    assert s.terms.fixed == pytest.approx(fixed, rel=1e-12)
    # sinh(x) > x: the nonlinear ion cloud screens more strongly than the linearised one
    # (the fixed term); the ions' own terms partly pay for it
    assert s.terms.fixed < lin.energy < 0 and s.terms.mobile > -s.terms.osmotic > 0
    assert s.energy != lin.energy and abs(s.energy / lin.energy - 1) < 0.01
    assert pb.solvation_energy(atoms, nonlinear=True, **common) == pytest.approx(s.energy)
    kcal = solvate(atoms, nonlinear=True, units="kcal/mol", **common)
    assert kcal.energy == pytest.approx(s.energy / 4.184, rel=1e-9)
    # without salt the two equations are one
    plain = solvate(atoms, nonlinear=True, **{**common, "ionic_strength": 0.0})
    assert plain.terms is None and plain.result.newton_steps is None


# ---------------------------------------------------------------------- (d) high potential
def test_highly_charged_case_converges_beyond_20_kT():
    _, problem = ion(200.0, ionic_strength=0.01, nonlinear=True, spacing=0.7, margin=4.0)
    res = pb.solve(problem, backend="cpu", method="multigrid", rtol=1e-8)
    assert res.converged and res.reason == "converged"
    inner = np.zeros(problem.grid.shape, dtype=bool)
    inner[1:-1, 1:-1, 1:-1] = True
    salty = (problem.kappa2 > 0) & inner
    x = np.abs(problem.phi_coulomb + res.phi_rf)[salty] / kT_kj_per_mol(problem.temperature)
    assert 20.0 < x.max() < boltzmann.CAP
    assert nonlinear_residual(problem, res.phi_rf) <= 1e-8
    assert all(np.isfinite(res.residual_norms))
    assert all(s["alpha"] is not None and s["alpha"] > 0 for s in res.extra["newton"])
    # the linearised equation overshoots far beyond: the nonlinear solution is no linear one
    lin = pb.solve(problem, backend="cpu", method="multigrid", nonlinear=False)
    xl = np.abs(problem.phi_coulomb + lin.phi_rf)[salty] / kT_kj_per_mol(problem.temperature)
    assert xl.max() > 3 * x.max()


def test_a_potential_beyond_the_cap_is_reported():
    """κ̄² so small that nothing screens: the sinh is continued past the cap and said so."""
    grid = pb.Grid((9, 9, 9), spacing=0.5)
    one = np.ones(grid.shape)
    bv = np.full(grid.shape, 200.0 * kT_kj_per_mol(298.15))
    problem = pb.Problem(grid, 80 * one, 0 * one, 80.0, kappa2=1e-30 * one, boundary_values=bv,
                         nonlinear=True)  # fmt: skip
    res = pb.solve(problem, backend="cpu", method="sor")
    assert not res.converged and res.reason == "capped" and res.extra["capped"] > 0
    with pytest.raises(pb.ConvergenceError, match="capped"):
        pb.solve(problem, backend="cpu", method="sor", strict=True)


def test_newton_step_limit_is_reported(rng):
    base = random_problem(rng, shape=(9, 9, 9), spacing=0.6, salt=True)
    problem = as_nonlinear(base, ion_valence=3)
    res = pb.solve(problem, backend="cpu", method="sor", newton_maxiter=1, rtol=1e-12)
    assert not res.converged and res.reason == "maxiter" and res.newton_steps == 1
    res = pb.solve(problem, backend="cpu", method="sor", maxiter=7, rtol=1e-12)
    assert res.reason == "maxiter" and res.iterations <= 7
    with pytest.raises(pb.ConvergenceError, match="maxiter"):
        pb.solve(problem, backend="cpu", method="sor", newton_maxiter=1, strict=True)


# ---------------------------------------------------------------------- (e) the keyword's paths
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_memory_estimate_covers_what_a_newton_solve_allocates(dtype, monkeypatch):
    """Traced peak of NumPy arrays during a nonlinear solve against the estimate per node."""
    import tracemalloc

    from pbsolver import resources

    atoms = pb.Atoms([[0.1, 0.05, -0.02], [2.0, 0.3, 0.2]], [-8.0, -6.0], [2.0, 1.8])
    common = {"surface": "vdw", "ionic_strength": 0.1, "nonlinear": True}
    # 33³: the coarsest level's dense inverse is a negligible share (not so at 25³)
    problem = pb.Problem.from_atoms(atoms, spacing=0.4, shape=(33, 33, 33), **common)
    small = pb.Problem.from_atoms(atoms, spacing=0.8, shape=(17, 17, 17), **common)
    nodes = 33**3
    for method in ("sor", "multigrid", "mgcg"):
        linear = resources.bytes_per_node(method, "cpu", dtype)
        estimate = resources.bytes_per_node(method, "cpu", dtype, nonlinear=True)
        assert estimate > linear
        pb.solve(small, backend="cpu", method=method, dtype=dtype)  # compiled: not traced
        tracemalloc.start()
        try:
            res = pb.solve(problem, backend="cpu", method=method, dtype=dtype)
            peak = tracemalloc.get_traced_memory()[1] / nodes
        finally:
            tracemalloc.stop()
        assert res.converged and res.newton_steps >= 3
        assert 0.8 * estimate <= peak <= estimate, (method, peak, estimate)
    # a memory limit between the two estimates refuses the nonlinear solve only
    need = resources.estimate_bytes(problem.grid.shape, "sor", "cpu", dtype, nonlinear=True)
    monkeypatch.setenv(resources.ENV, str(need - 1))
    assert pb.solve(problem, backend="cpu", method="sor", dtype=dtype, nonlinear=False).converged
    with pytest.raises(pb.InputError, match="needs about"):
        pb.solve(problem, backend="cpu", method="sor", dtype=dtype)


@pytest.mark.slow  # CI time; the same check runs on a GPU (marker gpu)
def test_calculator_warm_starts_newton_from_the_previous_frame(rng):
    """A nonlinear frame warm-started from the last φ_rf: fewer Newton steps, the same ΔG."""
    positions = np.array([[0.0, 0.0, 0.0], [2.6, 0.4, -0.3], [-0.5, 2.4, 0.8]])
    atoms = pb.Atoms(positions, [-6.0, -5.0, -5.0], [2.0, 1.9, 1.8])
    common = {"spacing": 0.6, "margin": 4.0, "skin": 1.0, "surface": "vdw", "backend": "cpu",
              "method": "multigrid", "ionic_strength": 0.05, "nonlinear": True, "rtol": 1e-8,
              "dtype": np.float64}  # fmt: skip
    warm = pb.ReactionFieldCalculator(atoms, **common)
    cold = pb.ReactionFieldCalculator(atoms, warm_start=False, **common)
    assert warm.engine == cold.engine == "general"
    first = warm.compute()
    assert cold.compute().energy == pytest.approx(first.energy, rel=1e-12)
    assert not first.warm_start and first.solve.newton_steps >= 3
    assert first.terms.total == first.energy and first.terms.mobile > 0 > first.terms.osmotic
    frames = [positions + rng.normal(scale=0.03, size=positions.shape) for _ in range(2)]
    # one frame, then a batch (of one: the batch path) started from it
    w, c = warm.compute(frames[0]), cold.compute(frames[0])
    assert w.warm_start and not w.regridded and not c.warm_start and w.grid == c.grid
    assert w.solve.newton_steps < c.solve.newton_steps
    assert w.energy == pytest.approx(c.energy, rel=1e-6)
    batch = warm.compute_batch(frames[1:])
    for k, fr in enumerate(batch, start=1):
        ref = cold.compute(frames[k])
        assert fr.warm_start and fr.converged and fr.grid == ref.grid
        assert fr.solve.newton_steps < ref.solve.newton_steps
        assert fr.energy == pytest.approx(ref.energy, rel=1e-6)
        assert fr.terms.fixed == pytest.approx(ref.terms.fixed, rel=1e-6)
    # the nonlinear frame is no linear one (the ion terms and the stronger screening)
    linear = pb.ReactionFieldCalculator(atoms, **{**common, "nonlinear": False}).compute()
    assert linear.terms is None and abs(linear.energy - first.energy) > 10.0  # kJ/mol


def test_from_atoms_hdf5_and_batch_carry_the_keyword(tmp_path):
    atoms, problem = ion(-4.0, ionic_strength=0.1, nonlinear=True, ion_valence=2,
                         temperature=300.0)  # fmt: skip
    assert (problem.nonlinear, problem.ion_valence, problem.temperature) == (True, 2, 300.0)
    assert "nonlinear (z=2, 300 K)" in repr(problem)
    path = tmp_path / "nl.h5"
    write_hdf5(path, {"ion": problem, "linear": ion(-4.0, ionic_strength=0.1)[1]})
    back = read_problem(path, "ion")
    assert (back.nonlinear, back.ion_valence, back.temperature) == (True, 2, 300.0)
    assert not read_problem(path, "linear").nonlinear
    with h5py.File(path, "r") as f:
        assert "nonlinear" not in f["grids/linear"].attrs  # linear files stay as they were
    # a stacked batch solves them by one Newton iteration on the stack, as one solve does
    opts = {"backend": "cpu", "method": "multigrid", "rtol": 1e-9}
    results = pb.solve_batch([back, back], mode="stacked", **opts)
    single = pb.solve(back, **opts)
    for r in results:
        assert r.newton_steps is not None and r.converged and r.extra["batch"] == "stacked"
        scale = np.abs(single.phi_rf).max()
        np.testing.assert_allclose(r.phi_rf, single.phi_rf, rtol=0, atol=1e-7 * scale)


@pytest.mark.parametrize(
    ("attr", "value", "match"),
    [
        ("nonlinear", 5, "@nonlinear must be 0 or 1"),
        ("nonlinear", "yes", "@nonlinear must be 0 or 1"),
        ("ion_valence", 0, "@ion_valence must be an integer >= 1"),
        ("ion_valence", 1.5, "@ion_valence must be an integer >= 1"),
        ("temperature_K", -3.0, "@temperature_K must be finite and > 0 K"),
    ],
)
def test_hostile_nonlinear_attributes_are_refused(tmp_path, attr, value, match):
    path = tmp_path / "bad.h5"
    write_hdf5(path, {"g": ion(1.0, ionic_strength=0.1, nonlinear=True)[1]})
    with h5py.File(path, "r+") as f:
        f["grids/g"].attrs[attr] = value
    with pytest.raises(pb.InputError, match=match):
        read_problem(path, "g")


def test_cli_solves_a_molecule_nonlinearly(tmp_path):
    from click.testing import CliRunner

    from pbsolver import cli

    pqr = tmp_path / "ion.pqr"
    pqr.write_text("ATOM      1  NA  ION     1       0.100   0.050  -0.020 -3.0000 2.0000\nEND\n")
    out = tmp_path / "o.h5"
    args = ["solve", str(pqr), "-o", str(out), "--spacing", "0.7", "--margin", "4",
            "--surface", "vdw", "--ionic-strength", "0.1", "--backend", "cpu"]  # fmt: skip
    run = CliRunner().invoke(cli.main, [*args, "--nonlinear", "--ion-valence", "2"])
    assert run.exit_code == 0, run.output
    with h5py.File(out, "r") as f:
        g = f["grids/ion"]
        assert g.attrs["nonlinear"] == 1 and g.attrs["ion_valence"] == 2
        assert g["solver"].attrs["newton_steps"] >= 1 and g["solver"].attrs["converged"]
        e_nl = g["solver"].attrs["solvation_energy_kj_mol"]
    lin = tmp_path / "lin.h5"
    run = CliRunner().invoke(cli.main, [*args[:3], str(lin), *args[4:]])
    assert run.exit_code == 0, run.output
    with h5py.File(lin, "r") as f:
        assert "nonlinear" not in f["grids/ion"].attrs
        assert "newton_steps" not in f["grids/ion/solver"].attrs
        e_lin = f["grids/ion/solver"].attrs["solvation_energy_kj_mol"]
    assert e_nl != e_lin and abs(e_nl / e_lin - 1) < 0.05 and e_nl < 0
    info = CliRunner().invoke(cli.main, ["info", str(out)])
    assert info.exit_code == 0 and "nonlinear (z=2, 298.15 K)" in info.output
    bad = CliRunner().invoke(cli.main, [*args, "--nonlinear", "--ion-valence", "0"])
    assert bad.exit_code == 2


def test_no_charges_give_a_zero_potential():
    grid = pb.Grid((7, 8, 9), spacing=0.5)
    one = np.ones(grid.shape)
    problem = pb.Problem(grid, 80 * one, 0 * one, 80.0, kappa2=one, nonlinear=True)
    res = pb.solve(problem, backend="cpu", method="multigrid")
    assert res.converged and res.newton_steps == 0 and not res.phi_rf.any()


def test_bad_input_is_refused():
    grid = pb.Grid((5, 5, 5), spacing=0.5)
    one = np.ones(grid.shape)
    for kw, match in (
        ({"nonlinear": "yes"}, "nonlinear must be True or False"),
        ({"ion_valence": 0}, "ion_valence must be a positive integer"),
        ({"ion_valence": 2.5}, "ion_valence must be a positive integer"),
        ({"ion_valence": "2"}, "ion_valence must be a positive integer"),
        ({"temperature": 0.0}, "temperature must be finite and > 0"),
        ({"temperature": float("nan")}, "temperature"),
    ):
        with pytest.raises(pb.InputError, match=match):
            pb.Problem(grid, one, 0 * one, 1.0, kappa2=one, **kw)
    problem = pb.Problem(grid, one, 0 * one, 1.0, kappa2=one, nonlinear=True)
    with pytest.raises(pb.InputError, match="newton_maxiter"):
        pb.Solver(newton_maxiter=-1)
    with pytest.raises(pb.InputError, match="nonlinear must be True or False"):
        pb.solve(problem, backend="cpu", nonlinear="maybe")
    with pytest.raises(pb.InputError, match="x0 must be finite"):
        pb.solve(problem, backend="cpu", x0=np.full(grid.shape, np.nan))
    with pytest.raises(pb.InputError, match="x0 has shape"):
        pb.solve(problem, backend="cpu", x0=np.zeros((4, 4, 4)))
    atoms = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [2.0])
    with pytest.raises(pb.InputError, match="engine='stacked' solves the linearised"):
        pb.ReactionFieldCalculator(atoms, backend="cpu", nonlinear=True, ionic_strength=0.1,
                                   surface="vdw", engine="stacked")  # fmt: skip
    from pbsolver.md.engine import StackedFrames

    with pytest.raises(pb.InputError, match="stacked MD engine"):
        StackedFrames([1.0], [2.0], (9, 9, 9), 0.5, pb.Solver(backend="cpu"), nonlinear=True)


# ---------------------------------------------------------------------- (f) CUDA (marker gpu)
@pytest.mark.gpu
@pytest.mark.parametrize("method", ["sor", "multigrid", "mgcg"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_matches_the_float64_reference(rng, method, dtype):
    """The Newton method on the GPU: the float64 reference, NumPy in/out and CuPy in/out."""
    cp = pytest.importorskip("cupy")
    base = random_problem(rng, shape=(11, 14, 9), spacing=0.55, salt=True,
                          boundary_values=True, face_rule="harmonic")  # fmt: skip
    problem = as_nonlinear(base, ion_valence=2, temperature=310.0)
    ref = reference_newton(problem)
    tol = 1e-7 * np.abs(ref).max()
    res = pb.solve(problem, method=method, backend="cuda", rtol=1e-10, dtype=dtype)
    assert res.converged and res.backend == "cuda" and res.newton_steps >= 2
    assert isinstance(res.phi_rf, np.ndarray)
    assert nonlinear_residual(problem, res.phi_rf) <= 2e-10
    np.testing.assert_allclose(res.phi_rf, ref, rtol=0, atol=tol)
    cpu = pb.solve(problem, method=method, backend="cpu", rtol=1e-10, dtype=dtype)
    np.testing.assert_allclose(res.phi_rf, cpu.phi_rf, rtol=0, atol=tol)
    dev = pb.solve(problem.to("cupy"), method=method, backend="cuda", rtol=1e-10, dtype=dtype)
    assert isinstance(dev.phi_rf, cp.ndarray) and dev.converged
    np.testing.assert_allclose(cp.asnumpy(dev.phi_rf), ref, rtol=0, atol=tol)
    # a warm start from the device solution: nothing left to do
    again = pb.solve(problem.to("cupy"), x0=dev.phi_rf, method=method, backend="cuda",
                     rtol=1e-10, dtype=dtype)  # fmt: skip
    assert again.converged and again.newton_steps == 0


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["multigrid", "sor"])
def test_cuda_stack_of_nonlinear_problems_matches_the_references(rng, method):
    """solve_batch on CUDA ("auto": stacked) of three nonlinear problems, NumPy and CuPy."""
    cp = pytest.importorskip("cupy")
    problems = [as_nonlinear(random_problem(rng, shape=(11, 14, 9), spacing=0.55, salt=True,
                                            boundary_values=True), scale=scale)
                for scale in (0.02, 0.03, 0.005)]  # fmt: skip
    refs = [reference_newton(p) for p in problems]
    results = pb.solve_batch(problems, method=method, backend="cuda", rtol=1e-10)
    for r, ref in zip(results, refs, strict=True):
        assert r.converged and r.extra["batch"] == "stacked" and r.newton_steps >= 2
        assert isinstance(r.phi_rf, np.ndarray)
        np.testing.assert_allclose(r.phi_rf, ref, rtol=0, atol=1e-7 * np.abs(ref).max())
    dev = pb.solve_batch([p.to("cupy") for p in problems], method=method, backend="cuda",
                         rtol=1e-10)  # fmt: skip
    for r, ref in zip(dev, refs, strict=True):
        assert isinstance(r.phi_rf, cp.ndarray) and r.converged
        np.testing.assert_allclose(cp.asnumpy(r.phi_rf), ref, rtol=0, atol=1e-7 * np.abs(ref).max())


@pytest.mark.gpu
def test_cuda_periodic_matches_the_float64_reference(rng):
    pytest.importorskip("cupy")
    base = random_problem(rng, shape=(10, 8, 12), spacing=0.6, boundary="periodic", salt=True)
    problem = as_nonlinear(base)
    ref = reference_newton(problem)
    for method in ("sor", "mgcg"):
        res = pb.solve(problem, method=method, backend="cuda", rtol=1e-9, dtype=np.float64)
        assert res.converged, (method, res.reason)
        np.testing.assert_allclose(res.phi_rf, ref, rtol=0, atol=1e-6 * np.abs(ref).max())


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["sor", "multigrid", "mgcg"])
def test_cuda_protein_equals_the_cpu(method):
    """Colipase (−2 e) in 0.05 M salt on a 65³-class grid: φ_rf and ΔG as on the CPU."""
    cp = pytest.importorskip("cupy")
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    problem = pb.Problem.from_atoms(atoms, spacing=0.9, margin=6.0, ionic_strength=0.05,
                                    nonlinear=True)  # fmt: skip
    cpu = pb.solve(problem, backend="cpu", method=method, rtol=1e-8)
    gpu = pb.solve(problem, backend="cuda", method=method, rtol=1e-8)
    assert cpu.converged and gpu.converged and gpu.backend == "cuda"
    assert abs(gpu.newton_steps - cpu.newton_steps) <= 1
    scale = np.abs(cpu.phi_rf).max()
    np.testing.assert_allclose(gpu.phi_rf, cpu.phi_rf, rtol=0, atol=1e-5 * scale)
    e_cpu = solvation_terms(atoms, problem, cpu.phi_rf)
    e_gpu = solvation_terms(atoms, problem, gpu.phi_rf)
    assert e_gpu.total == pytest.approx(e_cpu.total, rel=1e-6)
    assert e_gpu.mobile == pytest.approx(e_cpu.mobile, rel=1e-4)
    # the ion terms summed on the device, from a device problem and a device φ_rf, or a host one
    on_device = problem.to("cupy")
    dev = pb.solve(on_device, backend="cuda", method=method, rtol=1e-8)
    assert isinstance(dev.phi_rf, cp.ndarray)
    for phi in (dev.phi_rf, cp.asnumpy(dev.phi_rf)):
        mobile, osmotic = ion_terms(on_device, phi)
        assert mobile == pytest.approx(e_cpu.mobile, rel=1e-4)
        assert osmotic == pytest.approx(e_cpu.osmotic, rel=1e-4)


@pytest.mark.gpu
def test_cuda_calculator_warm_starts_newton():
    pytest.importorskip("cupy")
    positions = np.array([[0.0, 0.0, 0.0], [2.6, 0.4, -0.3], [-0.5, 2.4, 0.8]])
    atoms = pb.Atoms(positions, [-6.0, -5.0, -5.0], [2.0, 1.9, 1.8])
    common = {"spacing": 0.5, "margin": 4.0, "skin": 1.0, "surface": "vdw",
              "ionic_strength": 0.05, "nonlinear": True, "rtol": 1e-8}  # fmt: skip
    gpu = pb.ReactionFieldCalculator(atoms, backend="cuda", **common)
    cpu = pb.ReactionFieldCalculator(atoms, backend="cpu", **common)
    assert gpu.engine == "general"
    moved = positions + np.array([0.04, -0.02, 0.03])
    frames = [gpu.compute(), gpu.compute(moved), *gpu.compute_batch([positions, moved])]
    refs = [cpu.compute(), cpu.compute(moved), *cpu.compute_batch([positions, moved])]
    # the warm start saves linear work; on the device "auto" picks SOR, whose inexact Newton
    # steps each cut the residual by a fixed factor, so the step count need not drop
    assert frames[1].warm_start and frames[1].iterations < frames[0].iterations
    for fr, ref in zip(frames, refs, strict=True):
        assert fr.converged and fr.terms is not None
        assert fr.energy == pytest.approx(ref.energy, rel=1e-6)
        np.testing.assert_allclose(fr.forces, ref.forces, rtol=0,
                                   atol=1e-4 * np.abs(ref.forces).max())  # fmt: skip
