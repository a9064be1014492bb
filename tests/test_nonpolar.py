"""Solvent-accessible surface area (Shrake–Rupley) and the nonpolar term γ·SASA + b.

References: the exact area of one sphere and of two overlapping spheres (sphere minus the cap
inside the other), a brute-force NumPy count over all atom pairs with its own dense point set,
and APBS 3.4.1's ``APOLAR`` calculation (``srfm sacc``) where APBS is installed.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule.nonpolar import (
    GAMMA,
    OFFSET,
    nonpolar_energy,
    nonpolar_terms,
    sasa,
    sasa_parts,
    sphere_points,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from apbs import apbs_executable  # noqa: E402

PROBE = 1.4


def exposed_cap_area(R1, R2, d):
    """Exact area of sphere 1 (radius R1) outside sphere 2 (radius R2, centres d apart)."""
    if d >= R1 + R2:
        return 4 * math.pi * R1**2
    if d + R1 <= R2:
        return 0.0
    if d + R2 <= R1:
        return 4 * math.pi * R1**2  # sphere 2 inside sphere 1: no contact with its surface
    h = R1 - (d * d + R1 * R1 - R2 * R2) / (2 * d)  # height of the cap of sphere 1 inside 2
    return 4 * math.pi * R1**2 - 2 * math.pi * R1 * h


def random_rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.diag(r))


def brute_force_sasa(pos, radii, probe, points):
    """Every point of every atom against every other atom (no cell list), float64."""
    R = radii + probe
    out = np.empty(len(pos))
    for i in range(len(pos)):
        p = pos[i] + R[i] * points
        d2 = ((p[:, None, :] - pos[None, :, :]) ** 2).sum(-1)
        d2[:, i] = np.inf
        buried = (d2 < R[None, :] ** 2).any(axis=1)
        out[i] = 4 * math.pi * R[i] ** 2 * (1.0 - buried.mean())
    return out


def dense_reference_sasa(pos, radii, probe, points):
    """As brute_force_sasa, with squared distances by a matrix product (fast for many points)."""
    R = radii + probe
    out = np.empty(len(pos))
    for i in range(len(pos)):
        p = pos[i] + R[i] * points
        d2 = (p * p).sum(1)[:, None] - 2.0 * p @ pos.T + (pos * pos).sum(1)[None, :]
        d2[:, i] = np.inf
        buried = (d2 < R[None, :] ** 2).any(axis=1)
        out[i] = 4 * math.pi * R[i] ** 2 * (1.0 - buried.mean())
    return out


def random_molecule(rng, n, box):
    """Random overlapping atoms at about protein density (radii 0-2.2 Å, some 0)."""
    pos = rng.uniform(0.0, box, (n, 3))
    radii = rng.uniform(1.0, 2.2, n)
    radii[rng.random(n) < 0.15] = 0.0
    return pb.Atoms(pos, rng.normal(0, 0.3, n), radii)


# ---------------------------------------------------------------------- exact answers
@pytest.mark.parametrize("n_points", [1, 7, 960])
def test_single_sphere_exact(rng, n_points):
    r = rng.uniform(0.5, 3.0)
    ion = pb.Atoms([rng.normal(size=3) * 10], [1.0], [r])
    assert sasa(ion, n_points=n_points)[0] == pytest.approx(4 * math.pi * (r + PROBE) ** 2, 1e-14)
    assert sasa(ion, probe=0.0)[0] == pytest.approx(4 * math.pi * r**2, rel=1e-14)


def test_separate_buried_and_zero_size_spheres(rng):
    far = pb.Atoms(
        [[0, 0, 0], [20, 0, 0], [0.3, 0, 0], [50, 0, 0]], [0, 0, 0, 0], [2.0, 1.5, 0.5, 0]
    )
    s = sasa(far)
    assert s[0] == pytest.approx(exposed_cap_area(3.4, 1.9, 0.3), rel=1e-14)  # nothing buried
    assert s[1] == pytest.approx(4 * math.pi * 2.9**2, rel=1e-14)
    assert s[2] == 0.0  # wholly inside atom 0's sphere
    assert s[3] == pytest.approx(4 * math.pi * PROBE**2, rel=1e-14)  # radius 0: a probe sphere
    assert sasa(far, probe=0.0)[3] == 0.0


def test_two_overlapping_spheres_cap_formula(rng):
    """Random pairs: within 0.5 % of the sphere's area at the default 960 points."""
    errors = []
    for _ in range(30):
        r1, r2 = rng.uniform(0.5, 2.5, 2)
        R1, R2 = r1 + PROBE, r2 + PROBE
        d = rng.uniform(abs(R1 - R2) + 0.05, R1 + R2 - 0.05)
        c = rng.normal(size=3) * 30
        axis = random_rotation(rng)[0]
        s = sasa(pb.Atoms([c, c + d * axis], [0, 0], [r1, r2]))
        errors.append(abs(s[0] - exposed_cap_area(R1, R2, d)) / (4 * math.pi * R1**2))
        errors.append(abs(s[1] - exposed_cap_area(R2, R1, d)) / (4 * math.pi * R2**2))
    assert max(errors) < 5e-3
    assert np.mean(errors) < 2e-3


def test_convergence_with_point_count(rng):
    """The mean error of the cap areas falls about as n^-3/4 (40x from 60 to 15,360 points)."""
    cases = []
    for _ in range(20):
        r1, r2 = rng.uniform(0.5, 2.5, 2)
        R1, R2 = r1 + PROBE, r2 + PROBE
        d = rng.uniform(abs(R1 - R2) + 0.05, R1 + R2 - 0.05)
        c = rng.normal(size=3)
        atoms = pb.Atoms([c, c + d * random_rotation(rng)[0]], [0, 0], [r1, r2])
        exact = np.array([exposed_cap_area(R1, R2, d), exposed_cap_area(R2, R1, d)])
        cases.append((atoms, exact, 4 * math.pi * np.array([R1, R2]) ** 2))
    mean_error = {}
    for n in (60, 240, 960, 3840, 15360):
        mean_error[n] = np.mean(
            [np.abs(sasa(a, n_points=n) - exact) / area for a, exact, area in cases]
        )
    errs = [mean_error[n] for n in sorted(mean_error)]
    assert all(b < a for a, b in zip(errs, errs[1:], strict=False))  # every step improves
    assert mean_error[15360] < mean_error[60] / 40
    assert mean_error[15360] < 3e-4


# ---------------------------------------------------------------------- brute force
def test_cell_list_counts_equal_brute_force(rng):
    """Same points, all pairs in NumPy: the same exposed counts, including a far outlier (the
    cell grid then grows its cells instead of allocating millions)."""
    mol = random_molecule(rng, 300, 22.0)
    pos = np.vstack([mol.positions, [[4.0e4, -3.0e4, 1.0e4]]])
    atoms = pb.Atoms(pos, np.zeros(len(pos)), np.r_[mol.radii, 1.7])
    n_points = 92
    ref = brute_force_sasa(atoms.positions, atoms.radii, PROBE, sphere_points(n_points))
    np.testing.assert_allclose(sasa(atoms, n_points=n_points), ref, rtol=1e-12, atol=1e-12)


def test_random_molecules_against_dense_reference(rng):
    """Default 960 points against 20,000 randomly rotated golden-spiral points per atom."""
    for _ in range(3):
        mol = random_molecule(rng, 40, 10.0)
        dense = sphere_points(20000) @ random_rotation(rng).T
        ref = dense_reference_sasa(mol.positions, mol.radii, PROBE, dense)
        got = sasa(mol)
        area = 4 * math.pi * (mol.radii + PROBE) ** 2
        assert np.max(np.abs(got - ref) / area) < 6e-3
        assert abs(got.sum() - ref.sum()) < 2e-3 * ref.sum()
        assert ref.sum() > 0.2 * area.sum()  # the molecule is neither buried nor a gas


def test_invariant_to_translation_and_atom_order(rng):
    mol = random_molecule(rng, 200, 18.0)
    base = sasa(mol)
    perm = rng.permutation(len(mol))
    moved = pb.Atoms(mol.positions[perm] + [1e3, -2e3, 5e2], mol.charges[perm], mol.radii[perm])
    np.testing.assert_allclose(sasa(moved)[np.argsort(perm)], base, rtol=1e-9, atol=1e-9)


def test_sasa_parts_equal_brute_force_of_whole_and_parts(rng):
    """One pass for the whole and each group alone: the brute-force counts of each, with
    coincident atoms (a zero distance) and a sphere inside another among them."""
    mol = random_molecule(rng, 120, 14.0)
    pos, radii = mol.positions.copy(), mol.radii.copy()
    pos[7] = pos[3]  # coincident centres
    pos[11], radii[11] = pos[12] + 0.2, 0.1  # inside sphere 12
    atoms = pb.Atoms(pos, mol.charges, radii)
    groups = rng.integers(0, 3, len(atoms)) * 5 - 2  # labels -2, 3, 8
    points = sphere_points(92)
    whole, alone = sasa_parts(atoms, groups, n_points=92)
    ref = brute_force_sasa(pos, radii, PROBE, points)
    np.testing.assert_allclose(whole, ref, rtol=1e-12, atol=1e-12)
    for g in np.unique(groups):
        sel = groups == g
        ref = brute_force_sasa(pos[sel], radii[sel], PROBE, points)
        np.testing.assert_allclose(alone[sel], ref, rtol=1e-12, atol=1e-12)
        assert np.array_equal(alone[sel], sasa(atoms[np.flatnonzero(sel)], n_points=92))
    assert np.array_equal(whole, sasa(atoms, n_points=92))
    assert np.all(alone >= whole) and np.any(alone > whole)
    for bad in (groups[:-1], groups.astype(float), "ab"):
        with pytest.raises(pb.InputError, match="groups"):
            sasa_parts(atoms, bad)


# ---------------------------------------------------------------------- energy
def test_nonpolar_energy_and_terms(rng):
    mol = random_molecule(rng, 60, 12.0)
    area = sasa(mol)
    assert GAMMA == pytest.approx(0.00542 * 4.184) and OFFSET == pytest.approx(0.92 * 4.184)
    assert nonpolar_energy(mol) == pytest.approx(GAMMA * area.sum() + OFFSET, rel=1e-12)
    terms = nonpolar_terms(mol, gamma=0.03)
    np.testing.assert_allclose(terms, 0.03 * area, rtol=1e-12)
    e = nonpolar_energy(mol, gamma=0.03, offset=-1.5, probe=1.2, n_points=500)
    assert e == pytest.approx(0.03 * sasa(mol, probe=1.2, n_points=500).sum() - 1.5, rel=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"probe": -1.0}, "probe must be finite and >= 0"),
        ({"probe": float("nan")}, "probe must be finite"),
        ({"n_points": 0}, "n_points must be an integer >= 1"),
        ({"n_points": 2.5}, "n_points must be an integer"),
        ({"gamma": float("inf")}, "gamma must be finite"),
        ({"offset": "x"}, "offset must be a number"),
    ],
)
def test_bad_options(kwargs, message):
    ion = pb.Atoms([[0, 0, 0]], [1], [1.0])
    with pytest.raises(pb.InputError, match=message):
        nonpolar_energy(ion, **kwargs)


# ---------------------------------------------------------------------- APBS
@pytest.mark.skipif(apbs_executable() is None, reason="APBS not installed")
def test_against_apbs_apolar(tmp_path):
    """APBS 3.4.1 APOLAR (srfm sacc, gamma only) on the shipped protein: per-atom SASA too."""
    pqr = tmp_path / "protein.pqr"
    pqr.write_text(pb.data.path("1lpb_chainA.pqr").read_text())
    (tmp_path / "apolar.in").write_text(
        f"""read
  mol pqr {pqr.name}
end
apolar name np
  bconc 0.0
  calcenergy total
  calcforce no
  dpos 0.2
  gamma {GAMMA!r}
  grid 0.5 0.5 0.5
  mol 1
  press 0.0
  sdens 10.0
  srad 1.4
  srfm sacc
  swin 0.3
  temp 298.15
end
print apolEnergy np end
quit
"""
    )
    proc = subprocess.run(
        [apbs_executable(), "apolar.in"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    apbs_atoms = np.array([float(v) for v in re.findall(r"SASA for atom \d+: (\S+)", out)])
    apbs_energy = float(re.search(r"Global net APOL energy = (\S+) kJ/mol", out).group(1))
    atoms = pb.read_pqr(pqr)
    ours = sasa(atoms)
    assert apbs_atoms.shape == ours.shape
    assert abs(ours.sum() - apbs_atoms.sum()) < 1.5e-3 * apbs_atoms.sum()
    assert np.abs(ours - apbs_atoms).max() < 1.5  # Å², of atoms up to ~150 Å²
    assert np.abs(ours - apbs_atoms).mean() < 0.15
    assert nonpolar_energy(atoms, offset=0.0) == pytest.approx(apbs_energy, rel=1.5e-3)
