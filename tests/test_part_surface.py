"""A receptor's SES fractions from its complex's equal those computed from scratch."""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule import maps
from pbsolver.molecule.part_surface import (
    LINE_SLACK,
    changed_atoms,
    changed_lines,
    part_face_fractions,
    part_reach,
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
    # the lines recomputed: within the bound 3·max R + r_p of the ligand, and fewer than the
    # lines of their bounding window (the kept ones in it were kept right, as checked above)
    centres, acc = changed_atoms(atoms[rec], atoms[lig], 1.4)
    origin = np.asarray([grid.origin])
    flags = changed_lines(np, grid.shape, grid.spacing, origin, np.zeros(len(centres), int),
                          centres, acc + 1.4 + LINE_SLACK)  # fmt: skip
    bound = part_reach(atoms.radii, 1.4) + LINE_SLACK
    lig_pos = atoms.positions[lig]
    for axis, flag in enumerate(flags):
        a1, a2 = [a for a in range(3) if a != axis]
        flag = flag.reshape(grid.shape[a1], grid.shape[a2])
        i1, i2 = np.nonzero(flag)
        u = grid.origin[a1] + i1 * grid.spacing[a1]
        v = grid.origin[a2] + i2 * grid.spacing[a2]
        d = np.hypot(u[:, None] - lig_pos[None, :, a1], v[:, None] - lig_pos[None, :, a2])
        assert np.all(d.min(axis=1) < bound)
        box = flag[i1.min() : i1.max() + 1, i2.min() : i2.max() + 1]
        assert 0 < np.count_nonzero(box) < box.size


def test_changed_lines_are_those_within_reach_of_a_centre():
    """The vectorised flags equal a line-by-line distance test (two frames, two origins)."""
    rng = np.random.default_rng(9)
    shape, spacing = (13, 11, 9), (0.5, 0.6, 0.7)
    origins = np.array([[-3.0, -3.3, -2.8], [-2.9, -3.1, -3.0]])
    frame = rng.integers(0, 2, 7)
    centres = rng.uniform(-3.5, 3.5, (7, 3))
    centres[0, 0] = -6.0  # reaches in from beyond the grid
    reach = rng.uniform(0.8, 2.5, 7)
    flags = changed_lines(np, shape, spacing, origins, frame, centres, reach)
    for axis, flag in enumerate(flags):
        a1, a2 = [a for a in range(3) if a != axis]
        want = np.zeros((2, shape[a1], shape[a2]), dtype=bool)
        for f in range(2):
            u = origins[f, a1] + np.arange(shape[a1]) * spacing[a1]
            v = origins[f, a2] + np.arange(shape[a2]) * spacing[a2]
            for c, r in zip(centres[frame == f], reach[frame == f], strict=True):
                want[f] |= np.hypot(u[:, None] - c[a1], v[None, :] - c[a2]) < r
        assert want.any() and not want.all()
        np.testing.assert_array_equal(flag.reshape(want.shape), want)


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
