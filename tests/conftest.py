"""Shared fixtures: random high-contrast problems, and the gpu marker's automatic skip."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import pbsolver as pb


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    from pbsolver.backends import cuda_available

    if not cuda_available():
        skip = pytest.mark.skip(reason="needs a usable CUDA device (numba-cuda + CuPy)")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: reproducible, different per test."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


def random_spheres_epsilon(grid, rng, n_spheres=4, eps_in=1.0, eps_out=80.0):
    """Node map: ε_out with a few random overlapping spheres of ε_in (sharp 1:80 contrast)."""
    x, y, z = grid.coordinates()
    lo = np.array(grid.origin)
    hi = lo + np.array(grid.lengths)
    eps = np.full(grid.shape, eps_out)
    for _ in range(n_spheres):
        c = rng.uniform(lo + 0.25 * (hi - lo), hi - 0.25 * (hi - lo))
        r = rng.uniform(0.1, 0.3) * min(hi - lo)
        inside = (x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 < r * r
        eps[inside] = eps_in
    return eps


def coulomb_map(grid, rng, n_charges=3, eps_c=1.0, softening=0.3):
    """φ_c of a few random charges (softened so no node is singular), kJ/mol/e."""
    x, y, z = grid.coordinates()
    lo = np.array(grid.origin)
    hi = lo + np.array(grid.lengths)
    phi = np.zeros(grid.shape)
    for _ in range(n_charges):
        c = rng.uniform(lo + 0.3 * (hi - lo), hi - 0.3 * (hi - lo))
        q = rng.uniform(-1.0, 1.0)
        r = np.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 + softening**2)
        phi += pb.COULOMB_KJ * q / (eps_c * r)
    return phi


def random_problem(
    rng,
    shape=(17, 23, 29),
    spacing=0.6,
    boundary="dirichlet",
    salt=False,
    faces=False,
    boundary_values=False,
    eps_c=1.0,
    face_rule="arithmetic",
):
    """A non-trivial problem: random ε spheres (1:80), random charges, options as asked."""
    grid = pb.Grid(shape, spacing=spacing, origin=(-3.0, -4.0, -5.0))
    eps = random_spheres_epsilon(grid, rng, eps_in=eps_c)
    phi_c = coulomb_map(grid, rng, eps_c=eps_c)
    kwargs = {"boundary": boundary}
    if salt:
        kappa2 = np.where(eps > 40, 80.0 * 0.1**2, 0.0)
        kwargs["kappa2"] = kappa2 * rng.uniform(0.5, 1.5, size=grid.shape)
    if boundary_values:
        kwargs["boundary_values"] = rng.normal(0.0, 5.0, size=grid.shape)
    if faces:
        ex, ey, ez = (
            random_spheres_epsilon(grid, rng, eps_in=eps_c) * rng.uniform(0.9, 1.1, grid.shape)
            for _ in range(3)
        )
        return pb.Problem(
            grid, phi_coulomb=phi_c, eps_cavity=eps_c, epsilon_faces=(ex, ey, ez), **kwargs
        )
    return pb.Problem(grid, eps, phi_c, eps_c, face_rule=face_rule, **kwargs)
