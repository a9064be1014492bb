"""The CPU frame engine's φ_c and "mdh" boundary values against float64 direct sums.

On the CPU, :class:`~pbsolver.md.engine.StackedFrames` maps each frame's φ_c with the map
builders' sum (the multilevel sum of ``coulomb_fast`` for ``coulomb="fast"``, or where "auto"
picks it) and forms the Debye–Hückel boundary values from it. Random molecules, one atom
exactly on a node, atoms close to (and outside) the grid's faces, two frames with different
origins in one stack.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

import pbsolver as pb
from pbsolver.backends.cpu import coulomb_fast as CF
from pbsolver.backends.cpu import maps as CM
from pbsolver.backends.cpu.backend import CPUBackend
from pbsolver.grid import Grid
from pbsolver.md.engine import StackedFrames
from pbsolver.molecule import maps
from pbsolver.molecule.maps import COULOMB_KJ

#: The accuracy of the multilevel sum on the nodes farther than a spacing from every charged
#: atom, relative to the largest |φ_c| there (that of tests/test_fast_coulomb.py).
FAR_RTOL = 1e-6
EPS_IN, EPS_OUT = 2.0, 78.5


def _frames(rng, shape, h, n):
    """Two frames of n atoms: positions (2, n, 3), origins (2, 3), charges, radii."""
    size = (np.asarray(shape) - 1) * h
    q = rng.normal(0.0, 0.5, n)
    q[rng.random(n) < 0.3] = 0.0  # uncharged atoms, as in proteins
    q[0] = 0.8
    radii = rng.uniform(1.2, 2.0, n)
    origins = np.array([[0.0, 0.0, 0.0], [-3.1, 1.7, 0.4]])
    pos = np.empty((2, n, 3))
    for f in range(2):
        local = rng.uniform(0.2, 0.8, (n, 3)) * size
        # atoms within a fraction of a spacing of a face, and two just outside the grid
        local[1:7, 0] = rng.uniform(0.0, 0.3 * h[0], 6)
        local[7:13, 2] = size[2] - rng.uniform(0.0, 0.3 * h[2], 6)
        local[13, 1] = -0.4 * h[1]
        local[14, 0] = size[0] + 0.3 * h[0]
        pos[f] = origins[f] + local
    node = np.array([7, 5, 9])
    pos[1, 0] = origins[1] + node * h  # frame 1: atom 0 (charged) exactly on a node
    return pos, origins, q, radii, node


def _maps_only(eng, pos, origins):
    """Run the engine's φ_c and boundary steps alone; the stacked buffers."""
    nf = len(pos)
    buf = eng._buffers_for(nf)
    buf.pos[...] = pos
    buf.origin[...] = origins
    steps = dict(eng.map_steps(buf, nf))
    for name in ("relative positions", "coulomb", "boundary"):
        if name in steps:
            steps[name]()
    return buf


def _far(shape, origin, h, charged):
    axes = [o + s * np.arange(n) for n, o, s in zip(shape, origin, h, strict=True)]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    dist, _ = cKDTree(charged).query(pts)
    return dist.reshape(shape) > max(h)


@pytest.mark.parametrize(
    ("method", "shape", "h", "n"),
    [
        ("fast", (65, 63, 61), (0.5, 0.52, 0.48), 260),
        ("auto", (21, 18, 23), (0.5, 0.55, 0.45), 40),
        ("direct", (21, 18, 23), (0.5, 0.55, 0.45), 40),
    ],
)
def test_engine_phi_c_matches_the_float64_direct_sum(method, shape, h, n):
    rng = np.random.default_rng(17 + n)
    h = np.array(h)
    pos, origins, q, radii, node = _frames(rng, shape, h, n)
    if method == "fast":  # the far field really goes through the hierarchy
        assert len(CF.plan_levels(shape, origins[0], h, int((q != 0).sum()))[0]) >= 2
    solver = pb.Solver(backend="cpu", rtol=1e-6)
    eng = StackedFrames(q, radii, shape, h, solver, eps_in=EPS_IN, eps_out=EPS_OUT,
                        backend=CPUBackend(coulomb=method))  # fmt: skip
    buf = _maps_only(eng, pos, origins)
    scale = COULOMB_KJ / EPS_IN
    charged = q != 0
    for f in range(2):
        got = buf.phic[f * eng.stride : f * eng.stride + shape[0]]
        ref = CM.coulomb_sum(shape, origins[f], h, pos[f][charged], q[charged], scale,
                             method="direct")  # fmt: skip
        cond = CM.coulomb_sum(shape, origins[f], h, pos[f][charged], np.abs(q[charged]), scale,
                              method="direct")  # fmt: skip
        far = _far(shape, origins[f], h, pos[f][charged])
        assert far.any() and (~far).any()
        rtol = FAR_RTOL if method != "direct" else 1e-13
        scale_far = np.abs(ref[far]).max()
        err = np.abs(got[far] - ref[far]).max() / scale_far
        assert err <= rtol
        # next to an atom: the far nodes' accuracy (plus the sum's rounding, which grows with
        # Σ|q|/r there), and the direct sum's infinity on the atom's node
        near = ~far
        assert np.array_equal(np.isinf(got[near]), np.isinf(ref[near]))
        assert np.array_equal(got[near & np.isinf(ref)], ref[near & np.isinf(ref)])
        fin = near & np.isfinite(ref)
        assert np.all(np.abs(got[fin] - ref[fin]) <= rtol * scale_far + 1e-13 * cond[fin])
    assert buf.phic[eng.stride + node[0], node[1], node[2]] == np.inf
    assert np.isinf(buf.phic).sum() == 1


@pytest.mark.parametrize("salt", [0.0, 0.15])
def test_engine_boundary_values_match_the_general_path(salt):
    """The "mdh" values of both frames against boundary_values' float64 sums (no φ_c given)."""
    rng = np.random.default_rng(5)
    shape, h = (23, 20, 19), np.array([0.6, 0.5, 0.55])
    pos, origins, q, radii, _ = _frames(rng, shape, h, 50)
    pos[1, 0] += 0.123  # no atom on a boundary node: finite values to compare
    ph = pb.PhysicsOptions(eps_in=EPS_IN, eps_out=EPS_OUT, ionic_strength=salt, ion_radius=1.4)
    solver = pb.Solver(backend="cpu", rtol=1e-6)
    eng = StackedFrames(q, radii, shape, h, solver, physics=ph, backend=CPUBackend("auto"))
    buf = _maps_only(eng, pos, origins)
    for f in range(2):
        atoms = pb.Atoms(pos[f], q, radii)
        grid = Grid(shape, spacing=tuple(h), origin=tuple(origins[f]))
        ref = maps.boundary_values(atoms, grid, EPS_IN, EPS_OUT, salt, ion_radius=1.4)
        got = buf.g[f * eng.stride : f * eng.stride + shape[0]]
        outer = np.ones(shape, dtype=bool)
        outer[1:-1, 1:-1, 1:-1] = False
        assert np.all(got[~outer] == 0.0)
        # float32 screened terms with salt; φ_c's own rounding without
        tol = 2e-6 if salt else 1e-12
        np.testing.assert_allclose(got[outer], ref[outer], rtol=0,
                                   atol=tol * np.abs(ref[outer]).max())  # fmt: skip
