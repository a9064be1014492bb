"""Helpers shared by the I/O, CLI and batch tests: small problems and files of them."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import h5py
import numpy as np

import pbsolver as pb
from pbsolver.io.hdf5 import write_hdf5

K = 1389.35457
#: Options that make the I/O tests fast: the point is the files, not the solver.
FAST = ["--method", "sor", "--rtol", "1e-4", "--backend", "cpu"]
REPO = Path(__file__).resolve().parent.parent


def small_problem(n=9, seed=0, faces=False, salt=False, boundary="dirichlet", shape=None):
    """A sphere of ε 2 in ε 80 with an off-node charge, on an n³ (or ``shape``) grid."""
    rng = np.random.default_rng(seed)
    shape = shape or (n, n + 1, n + 2)
    grid = pb.Grid(shape, spacing=0.6, origin=tuple(rng.uniform(-5, -3, 3)))
    x, y, z = grid.coordinates()
    c = np.array(grid.center) + rng.uniform(-0.2, 0.2, 3)
    r2 = (x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2
    a = 0.3 * min(grid.lengths)
    eps = np.where(r2 < a * a, 2.0, 80.0).astype(np.float32)
    q = c + np.array([0.13, -0.07, 0.11])
    rq = np.sqrt((x - q[0]) ** 2 + (y - q[1]) ** 2 + (z - q[2]) ** 2)
    phi_c = (K / (2.0 * rq)).astype(np.float32)
    kw = {}
    if salt:
        kw["kappa2"] = np.where(r2 < (a + 1) ** 2, 0.0, 2.0).astype(np.float32)
    if faces:
        fx = 0.5 * (eps + np.roll(eps, -1, 0))
        fy = 0.5 * (eps + np.roll(eps, -1, 1))
        fz = 0.5 * (eps + np.roll(eps, -1, 2))
        return pb.Problem(
            grid, epsilon_faces=(fx, fy, fz), phi_coulomb=phi_c, eps_cavity=2.0,
            boundary=boundary, **kw,
        )  # fmt: skip
    return pb.Problem(grid, eps, phi_c, eps_cavity=2.0, boundary=boundary, **kw)


def write_input(path, n_grids=3, n=9, **kw):
    """An HDF5 input with ``n_grids`` small problems named g0, g1, ..."""
    problems = {f"g{i}": small_problem(n=n, seed=i, **kw) for i in range(n_grids)}
    write_hdf5(path, problems)
    return problems


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def visible_files(directory) -> list[str]:
    """Non-hidden entries of a directory (what a user sees as output)."""
    return sorted(p.name for p in Path(directory).iterdir() if not p.name.startswith("."))


def leftovers(directory) -> list[str]:
    """Temporary files, part folders and lock files left in a directory."""
    out = []
    for p in Path(directory).iterdir():
        if p.name.startswith(".") and (".tmp" in p.name or p.name.endswith((".parts", ".lock"))):
            out.append(p.name)
    return sorted(out)


def assert_readable_output(path, expect=None):
    """The output opens, and every grid in it is complete: result + converged solver group."""
    with h5py.File(path, "r") as f:
        assert f.attrs["pbsolver_layout"] == "1"
        names = list(f["grids"])
        for name in names:
            g = f["grids"][name]
            assert len(g["reaction_field"].shape) == 3
            if "phi_coulomb" in g:  # part files hold only results for HDF5 inputs
                assert g["reaction_field"].shape == g["phi_coulomb"].shape
            assert np.isfinite(g["reaction_field"][()]).all()
            assert bool(g["solver"].attrs["converged"])
    if expect is not None:
        assert set(names) <= set(expect)
    return names


def cli_env(**extra):
    """Environment for running ``python -m pbsolver`` from the checkout in a subprocess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *(p for p in [env.get("PYTHONPATH")] if p)])
    env.update(extra)
    return env


PYTHON = sys.executable
