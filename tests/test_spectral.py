"""The direct "spectral" solve (discrete sine transform) of constant-coefficient Dirichlet systems.

Held to the float64 sparse direct solve (:func:`pbsolver.operator.reference_solve`) on odd,
non-cubic, anisotropic grids with boundary values, with and without salt; to the multigrid
method's answer; and "auto" must pick it exactly where it applies.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import coulomb_map, random_spheres_epsilon

import pbsolver as pb
from pbsolver.operator import reference_solve, relative_residual
from pbsolver.solving.spectral import applies, dst1, dst1_fft

SHAPE = (13, 10, 17)
SPACING = (0.5, 0.6, 0.7)


def uniform_problem(rng, *, eps=4.0, eps_c=2.0, kappa2=None, faces=False, shape=SHAPE):
    """ε the same everywhere, random φ_c and random Dirichlet values on every face."""
    grid = pb.Grid(shape, spacing=SPACING)
    values = np.zeros(shape)
    outer = np.ones(shape, dtype=bool)
    outer[1:-1, 1:-1, 1:-1] = False
    values[outer] = rng.normal(0.0, 20.0, int(outer.sum()))
    kw = {"boundary_values": values}
    if kappa2 is not None:
        kw["kappa2"] = np.full(shape, kappa2)
    phi_c = coulomb_map(grid, rng, eps_c=eps_c)
    if faces:
        return pb.Problem(grid, None, phi_c, eps_c, epsilon_faces=(np.full(shape, eps),) * 3, **kw)
    return pb.Problem(grid, np.full(shape, eps), phi_c, eps_c, **kw)


@pytest.mark.parametrize("kappa2", [None, 0.08], ids=["no salt", "uniform salt"])
@pytest.mark.parametrize("faces", [False, True], ids=["node map", "face maps"])
def test_spectral_equals_the_direct_float64_solve(rng, kappa2, faces):
    problem = uniform_problem(rng, kappa2=kappa2, faces=faces)
    res = pb.solve(problem, method="spectral", backend="cpu", rtol=1e-12)
    want = reference_solve(problem)
    assert res.converged and res.method == "spectral"
    assert res.iterations <= 3  # one exact solve a refinement phase
    assert relative_residual(problem, res.phi_rf) <= 1e-12
    scale = np.abs(want).max()
    assert np.abs(res.phi_rf - want).max() <= 1e-10 * scale


def test_spectral_equals_multigrid_in_float64_storage(rng):
    problem = uniform_problem(rng, eps=78.5, eps_c=78.5, kappa2=0.02, shape=(21, 16, 19))
    direct = pb.solve(problem, method="spectral", dtype=np.float64, rtol=1e-12)
    iterated = pb.solve(problem, method="multigrid", dtype=np.float64, rtol=1e-12)
    assert direct.iterations == 1  # float64 storage: no refinement, one exact step
    scale = np.abs(iterated.phi_rf).max()
    assert np.abs(direct.phi_rf - iterated.phi_rf).max() <= 1e-9 * scale


def test_auto_picks_spectral_where_it_applies(rng):
    uniform = uniform_problem(rng)
    assert applies(uniform)
    assert pb.solve(uniform, rtol=1e-8).method == "spectral"
    grid = pb.Grid(SHAPE, spacing=SPACING)
    contrast = pb.Problem(grid, random_spheres_epsilon(grid, rng), coulomb_map(grid, rng), 1.0)
    assert not applies(contrast)
    assert pb.solve(contrast, rtol=1e-6).method != "spectral"
    salty = uniform_problem(rng, kappa2=0.1)
    k2 = np.array(salty.kappa2)
    k2[5, 5, 5] = 0.0  # an ion-exclusion node: κ̄² no longer uniform
    uneven = pb.Problem(salty.grid, salty.epsilon, salty.phi_coulomb, salty.eps_cavity,
                        kappa2=k2, boundary_values=salty.boundary_values)  # fmt: skip
    assert not applies(uneven)
    periodic = pb.Problem(pb.Grid((8, 8, 8), spacing=0.5), np.full((8, 8, 8), 4.0),
                          coulomb_map(pb.Grid((8, 8, 8), spacing=0.5), rng), 2.0,
                          boundary="periodic")  # fmt: skip
    assert not applies(periodic)


def test_spectral_refuses_what_it_cannot_solve(rng):
    grid = pb.Grid(SHAPE, spacing=SPACING)
    contrast = pb.Problem(grid, random_spheres_epsilon(grid, rng), coulomb_map(grid, rng), 1.0)
    with pytest.raises(pb.InputError, match="constant-coefficient"):
        pb.solve(contrast, method="spectral")
    box = pb.Grid((8, 8, 8), spacing=0.5)
    periodic = pb.Problem(box, np.full((8, 8, 8), 4.0), coulomb_map(box, rng, eps_c=2.0), 2.0,
                          boundary="periodic")  # fmt: skip
    with pytest.raises(pb.InputError, match="constant-coefficient"):
        pb.solve(periodic, method="spectral")
    with pytest.raises(pb.InputError, match="does not take 'omega'"):
        pb.solve(uniform_problem(rng), method="spectral", omega=1.5)


def test_the_fft_transform_equals_scipys(rng):
    a = rng.normal(size=(6, 9, 11))
    for axis in range(3):
        np.testing.assert_allclose(dst1_fft(a, axis, np), dst1(a, axis, np), atol=1e-12)


@pytest.mark.gpu
def test_spectral_on_the_gpu_equals_the_cpu(rng):
    import cupy as cp

    problem = uniform_problem(rng, kappa2=0.05, shape=(33, 29, 37))
    cpu = pb.solve(problem, method="spectral", backend="cpu", rtol=1e-10)
    gpu = pb.solve(problem.to(cp), backend="cuda", rtol=1e-10)
    assert gpu.method == "spectral" and gpu.converged
    got = cp.asnumpy(gpu.phi_rf)
    assert np.abs(got - cpu.phi_rf).max() <= 1e-8 * np.abs(cpu.phi_rf).max()
