"""A receptor's SES fractions from its complex's equal those computed from scratch."""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule import maps
from pbsolver.molecule.part_surface import (
    LINE_SLACK,
    changed_atoms,
    lines_near,
    part_face_fractions,
    part_reach,
    part_windows,
)


def _complex(rng, n_receptor=60, n_ligand=6):
    """A random receptor (a blob of spheres) with a small ligand touching one side of it."""
    rec = rng.normal(0.0, 4.0, (n_receptor, 3))
    side = rec[np.argmax(rec[:, 0])] + np.array([2.5, 0.0, 0.0])
    lig = side + rng.normal(0.0, 1.2, (n_ligand, 3))
    pos = np.vstack([rec, lig])
    radii = rng.uniform(1.0, 2.0, len(pos))
    radii[3] = 0.0  # a bare charge (a hydrogen without radius)
    atoms = pb.Atoms(pos, rng.normal(0.0, 0.5, len(pos)), radii)
    ligand = np.arange(n_receptor, n_receptor + n_ligand)
    return atoms, np.arange(n_receptor), ligand


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_part_fractions_equal_the_parts_own(seed):
    rng = np.random.default_rng(seed)
    atoms, rec, lig = _complex(rng)
    spacing = (0.45, 0.5, 0.55)
    grid = maps.grid_for_atoms(atoms, spacing=0.5, margin=4.0, nice=False)
    grid = pb.Grid(grid.shape, spacing=spacing, origin=grid.origin)
    whole = maps.face_fractions(atoms, grid, "mol", 1.4)
    own = maps.face_fractions(atoms[rec], grid, "mol", 1.4)
    part = part_face_fractions(atoms[rec], whole, atoms[lig], grid, 1.4)
    for axis in range(3):
        # the same lines computed by the same kernel, the rest taken from the whole: equal to
        # the last bit
        np.testing.assert_array_equal(part[axis], own[axis])
    # the ligand changed the surface, and only near it: some kept lines are not trivially equal
    assert any(np.any(w != o) for w, o in zip(whole, own, strict=True))
    windows = part_windows(grid, atoms.positions[lig], part_reach(atoms.radii, 1.4))
    assert all(
        w1.stop - w1.start < grid.shape[a1] or w2.stop - w2.start < grid.shape[a2]
        for (w1, w2), (a1, a2) in zip(windows, ((1, 2), (0, 2), (0, 1)), strict=True)
    )
    # the lines recomputed are fewer than the window's: the kept ones in it were kept right
    centres, acc = changed_atoms(atoms[rec], atoms[lig], 1.4)
    reach = acc + 1.4 + LINE_SLACK
    changed_windows = part_windows(grid, centres, float(reach.max()))
    kept_in_window = [
        np.count_nonzero(~lines_near(grid, axis, window, centres, reach))
        for axis, window in enumerate(changed_windows)
    ]
    assert min(kept_in_window) > 0


def test_changed_atoms_are_the_ligand_and_the_atoms_meeting_it():
    rng = np.random.default_rng(7)
    atoms, rec, lig = _complex(rng)
    centres, acc = changed_atoms(atoms[rec], atoms[lig], 1.4)
    R = atoms.radii + 1.4
    d = np.linalg.norm(atoms.positions[rec][:, None] - atoms.positions[lig][None], axis=2)
    meets = (d < R[rec][:, None] + R[lig][None]).any(axis=1)
    assert 0 < meets.sum() < len(rec)
    np.testing.assert_array_equal(centres, np.vstack([atoms.positions[rec][meets],
                                                      atoms.positions[lig]]))  # fmt: skip
    np.testing.assert_array_equal(acc, np.concatenate([R[rec][meets], R[lig]]))


def test_smoothed_part_fractions_equal_smol():
    rng = np.random.default_rng(5)
    atoms, rec, lig = _complex(rng, 40, 5)
    grid = maps.grid_for_atoms(atoms, spacing=0.6, margin=4.0)
    whole = maps.face_fractions(atoms, grid, "mol", 1.4)
    part = maps.smooth_fractions(*part_face_fractions(atoms[rec], whole, atoms[lig], grid, 1.4))
    own = maps.face_fractions(atoms[rec], grid, "smol", 1.4)
    for axis in range(3):
        np.testing.assert_array_equal(part[axis], own[axis])


def test_binding_energy_uses_the_parts_surface_and_agrees():
    """binding_energy (general engine, SES) equals three independent build_maps solves."""
    rng = np.random.default_rng(3)
    atoms, rec, lig = _complex(rng, 30, 4)
    grid = maps.grid_for_atoms(atoms, spacing=0.7, margin=5.0)
    opts = {"eps_in": 2.0, "eps_out": 78.54, "surface": "mol"}
    be = pb.binding_energy(atoms, ligand=lig, grid=grid, nonpolar=False, engine="general",
                           solver={"rtol": 1e-9, "backend": "cpu"}, **opts)  # fmt: skip
    polar = {}
    for name, idx in (("complex", np.arange(len(atoms))), ("receptor", rec), ("ligand", lig)):
        m = maps.build_maps(atoms[idx], grid, **opts)
        res = pb.Solver(rtol=1e-9, backend="cpu").solve(pb.Problem.from_maps(m))
        polar[name] = float(np.sum(pb.molecule.energy.reaction_field_terms(
            atoms[idx], grid, np.asarray(res.phi_rf))))  # fmt: skip
    want = polar["complex"] - polar["receptor"] - polar["ligand"]
    assert be.delta_polar == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_part_fractions_refuse_bad_input():
    rng = np.random.default_rng(4)
    atoms, rec, lig = _complex(rng, 10, 2)
    grid = maps.grid_for_atoms(atoms, spacing=0.8, margin=4.0)
    whole = maps.face_fractions(atoms, grid, "mol", 1.4)
    with pytest.raises(pb.InputError, match="probe radius"):
        part_face_fractions(atoms[rec], whole, atoms[lig], grid, 0.0)
    with pytest.raises(pb.InputError, match="shape"):
        part_face_fractions(atoms[rec], tuple(f[:-1] for f in whole), atoms[lig], grid, 1.4)
