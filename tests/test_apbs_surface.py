"""APBS's point-switched surfaces "apbs-mol" and "apbs-smol" (pbsolver.molecule.apbs_surface).

Checked three ways: the marking kernels against a NumPy/SciPy brute force on random molecules
and odd grids, the maps against the dielx/diely/dielz maps APBS 3.4 writes for the same input
(point for point), and the surfaces' place in the options (a periodic box is refused).
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import cKDTree

import pbsolver as pb
from pbsolver.grid import Grid
from pbsolver.io.dx import read_dx
from pbsolver.molecule.apbs_surface import (
    apbs_fractions,
    reference_points,
    reference_sphere,
)
from pbsolver.molecule.maps import face_fractions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from apbs import apbs_executable, run_apbs_text  # noqa: E402

needs_apbs = pytest.mark.skipif(apbs_executable() is None, reason="APBS not installed")


def test_reference_sphere_is_apbs_construction():
    """Unit points on circles of constant θ from the pole (no pole point), about N of them."""
    for n in (300, 613, 2545):
        pts = reference_sphere(n)
        assert np.allclose(np.linalg.norm(pts, axis=1), 1.0)
        ntheta = round(math.sqrt(math.pi * n / 4))
        assert len(np.unique(np.round(pts[:, 2], 12))) == ntheta - 1  # θ = 0 gives no point
        assert abs(len(pts) / n - 1) < 0.05
        assert not np.any(np.isclose(pts[:, 2], 1.0))
    # APBS's count: 4π (r_max + max(ion, probe) + 0.5)² σ, rounded up
    assert reference_points([1.5, 2.0], 1.4, 2.0, 10.0) == math.ceil(4 * math.pi * 4.5**2 * 10)
    assert reference_points([1.5, 2.0], 1.4, 0.0, 10.0) == math.ceil(4 * math.pi * 3.9**2 * 10)


def _random_molecule(rng, n=14):
    pos = rng.normal(scale=2.2, size=(n, 3)) + 1.3
    radii = rng.uniform(1.0, 2.2, n)
    radii[3] = 0.0  # a zero-radius atom: marks nothing, has no probe points, still excludes them
    return pb.Atoms(pos, rng.uniform(-1, 1, n), radii)


def _brute_force(atoms, grid, probe, sdens, ion_radius, smooth):
    """APBS's steps 1–5 (module docstring) with SciPy distance queries instead of the loops."""
    pos, rad = atoms.positions, atoms.radii
    h = np.asarray(grid.spacing)
    lo = np.asarray(grid.origin)
    hi = lo + np.asarray(grid.lengths)
    ref = reference_sphere(reference_points(rad, probe, ion_radius, sdens))
    sas = []
    for i in range(len(rad)):
        if rad[i] < 1e-9:
            continue
        pts = pos[i] + (rad[i] + probe) * ref
        d2 = ((pts[:, None, :] - pos[None, :, :]) ** 2).sum(-1)
        d2[:, i] = np.inf
        sas.append(pts[np.all(d2 >= (rad + probe) ** 2, axis=1)])
    tree = cKDTree(np.concatenate(sas))
    on_mesh = np.all((pos > lo) & (pos < hi), axis=1)
    marking = [m for m in range(len(rad)) if rad[m] > 1e-9 and on_mesh[m]]
    acc = []
    for a in range(3):
        idx = np.indices(grid.shape).reshape(3, -1).T
        pts = lo + np.eye(3)[a] * 0.5 * h + idx * h
        d = np.sqrt(((pts[:, None, :] - pos[None, marking, :]) ** 2).sum(-1))
        inside = np.any(d <= rad[marking] + probe, axis=1)
        near, _ = tree.query(pts, distance_upper_bound=probe * (1 + 1e-12))
        acc.append(np.where(inside & ~(near <= probe), 0.0, 1.0).reshape(grid.shape))
    solute = [1.0 - acc[a] for a in range(3)]
    return _nine_point_loops(solute, grid.shape) if smooth else solute


def _nine_point_loops(f, shape):
    """APBS's smoothing loop as written: the faces h/√2 away that exist, averaged."""
    out = [np.empty(shape) for _ in range(3)]
    for a in range(3):
        others = [b for b in range(3) if b != a]
        for p in np.ndindex(*shape):
            vals = [f[a][p]]
            for b in others:
                for da, db in ((0, 0), (0, -1), (1, 0), (1, -1)):
                    q = list(p)
                    q[a] += da
                    q[b] += db
                    if 0 <= q[a] < shape[a] and 0 <= q[b] < shape[b]:
                        vals.append(f[b][tuple(q)])
            out[a][p] = np.mean(vals)
    return out


@pytest.mark.parametrize("smooth", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_marking_matches_brute_force(seed, smooth):
    rng = np.random.default_rng(seed)
    atoms = _random_molecule(rng)
    grid = Grid((17, 15, 19), (0.55, 0.62, 0.51), origin=(-3.1, -2.9, -3.7))  # atoms stick out
    fr = apbs_fractions(atoms, grid, 1.4, smooth=smooth, ion_radius=2.0, sdens=3.0)
    ref = _brute_force(atoms, grid, 1.4, 3.0, 2.0, smooth)
    for a in range(3):
        differ = ~np.isclose(fr[a], ref[a], rtol=0, atol=1e-12)
        assert not differ.any(), f"axis {a}: {differ.sum()} faces differ"
    assert 0 < np.mean(fr[0]) < 1


def test_zero_probe_is_the_spheres_at_the_face_points():
    rng = np.random.default_rng(4)
    atoms = _random_molecule(rng)
    grid = Grid((21, 21, 21), 0.5, origin=(-4.0, -4.0, -4.0))
    fr = apbs_fractions(atoms, grid, 0.0)
    pts = np.asarray(grid.origin) + np.indices(grid.shape).reshape(3, -1).T * 0.5
    pts[:, 1] += 0.25  # the y-faces
    # atoms on or outside the grid's bounding box mark nothing (as in APBS)
    lo, hi = np.asarray(grid.origin), np.asarray(grid.origin) + np.asarray(grid.lengths)
    on = np.all((atoms.positions > lo) & (atoms.positions < hi), axis=1)
    assert 0 < on.sum() < len(on)
    d = np.linalg.norm(pts[:, None] - atoms.positions[None, on], axis=-1)
    inside = np.any(d <= atoms.radii[on], axis=1)
    assert np.array_equal(fr[1].ravel(), inside.astype(float))


def test_apbs_surfaces_refuse_a_periodic_box():
    atoms = pb.Atoms([[0.0, 0, 0]], [1.0], [1.5])
    grid = Grid((16, 16, 16), 0.5, origin=(-4.0, -4.0, -4.0))
    with pytest.raises(pb.InputError, match="no periodic box"):
        face_fractions(atoms, grid, "apbs-mol", box=(8.0, 8.0, 8.0))
    with pytest.raises(pb.InputError, match="surface"):
        face_fractions(atoms, grid, "apbs-spl2")


def _apbs_maps(pqr, grid, srfm, ionic_strength, tmp_path):
    """APBS 3.4's dielx, diely, dielz of ``pqr`` on ``grid`` (mg-manual), as arrays."""
    ions = "".join(f"    ion charge {z} conc {ionic_strength} radius 2.0\n" for z in (1, -1))
    if not ionic_strength:
        ions = ""
    text = (
        f"read\n    mol pqr mol.pqr\nend\nelec\n    mg-manual\n"
        f"    dime {' '.join(map(str, grid.shape))}\n"
        f"    glen {' '.join(f'{x:.6f}' for x in grid.lengths)}\n"
        f"    gcent {' '.join(f'{x:.6f}' for x in grid.center)}\n"
        f"    mol 1\n    lpbe\n    bcfl mdh\n    pdie 2.0\n    sdie 78.54\n{ions}"
        f"    srfm {srfm}\n    chgm spl2\n    sdens 10.0\n    srad 1.4\n    swin 0.3\n"
        f"    temp 298.15\n    calcenergy no\n    calcforce no\n"
        f"    write dielx dx {tmp_path}/dielx\n    write diely dx {tmp_path}/diely\n"
        f"    write dielz dx {tmp_path}/dielz\nend\nquit\n"
    )
    proc, _, _ = run_apbs_text(apbs_executable(), text, {"mol.pqr": pqr}, prefix="apbs-surf-")
    assert proc.returncode == 0, proc.stdout[-2000:]
    dims = re.search(r"Grid dimensions: (\d+) x (\d+) x (\d+)", proc.stdout)
    assert dims and tuple(map(int, dims.groups())) == grid.shape
    return [read_dx(tmp_path / f"diel{a}.dx", potential=False)[0] for a in "xyz"]


@needs_apbs
@pytest.mark.parametrize(("srfm", "salt"), [("mol", 0.15), ("smol", 0.0)])
def test_maps_equal_apbs_point_for_point(srfm, salt, tmp_path):
    """The peptide (149 atoms) on a 33×33×41 grid: every face value equals APBS's."""
    pqr = ROOT / "data" / "peptide.pqr"
    atoms = pb.read_pqr(pqr)
    grid = pb.molecule.maps.grid_for_atoms(atoms, 0.6, 4.0, shape=(33, 33, 41))
    apbs = _apbs_maps(pqr, grid, srfm, salt, tmp_path)
    fr = face_fractions(atoms, grid, f"apbs-{srfm}", 1.4, ion_radius=2.0 if salt else 0.0)
    faces = pb.molecule.maps.faces_from_fractions(fr, 2.0, 78.54)
    for a in range(3):
        differ = ~np.isclose(faces[a], apbs[a], rtol=1e-6, atol=0)
        assert not differ.any(), f"axis {a}: {differ.sum()} of {differ.size} faces differ"
    assert 0.01 < np.mean(apbs[0] < 78.0) < 0.9  # a real interface on this grid
