"""APBS's APOLAR model (``pbsolver.molecule.apolar``): energies against APBS 3.4.1, forces.

References: ``tests/data/apbs/apolar_reference.json`` (APBS 3.4.1's printout for three inputs,
written by ``benchmarks/apbs_apolar_reference.py``; no APBS needed here), the exact derivative
of two spheres' union volume, and the energy itself: the area force against the central
difference of the total area, the WCA and total forces against energy differences along a
path (the lattice sums jump as lattice points enter and leave spheres, so a short central
difference would measure lattice noise; over a 1 Å path that noise is small against the
change of energy).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.exceptions import InputError
from pbsolver.molecule.apolar import (
    ApolarParameters,
    ApolarResult,
    apbs_sphere_points,
    apolar_terms,
)
from pbsolver.molecule.nonpolar import N_POINTS, sasa, sasa_on_points, sphere_points

REFERENCE = Path(__file__).parent / "data" / "apbs" / "apolar_reference.json"
WATER = {"water_radius": 1.7683, "water_epsilon": 0.6364}


def load_case(name):
    data = json.loads(REFERENCE.read_text())
    case = data["cases"][name]
    pos = np.array([a["position"] for a in case["atoms"]])
    rad = np.array([a["radius"] for a in case["atoms"]])
    eps = np.array([a["epsilon"] for a in case["atoms"]])
    p = dict(case["params"])
    p["grid"] = tuple(p["grid"])
    water = data["water"]
    params = ApolarParameters(**p, water_radius=water["radius"], water_epsilon=water["epsilon"])
    return pos, rad, eps, params, case["apbs"]


def check_against_apbs(name):
    pos, rad, eps, params, apbs = load_case(name)
    res = apolar_terms(pos, rad, eps, params, forces=True)
    # SASA and WCA are sums of exactly the terms APBS adds: agreement to rounding
    np.testing.assert_allclose(res.sasa, apbs["sasa"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(res.wca, apbs["wca"], rtol=1e-9, atol=1e-12)
    assert res.energy == pytest.approx(apbs["energy"], rel=1e-10)
    assert res.sav == pytest.approx(apbs["sav"], rel=1e-10, abs=1e-8)
    np.testing.assert_allclose(res.forces["wca_apbs"], apbs["wca_force"], rtol=1e-9, atol=1e-12)
    if params.press:
        # APBS's printed "sav" line is dV/dr (Vacc_atomdSAV); ours is the force −p·dV/dr
        np.testing.assert_allclose(
            -res.forces["sav"] / params.press, apbs["dsav"], rtol=1e-9, atol=1e-9
        )
    npts = math.ceil(4 * math.pi * (rad.max() + params.srad + 2 * params.dpos) ** 2 * params.sdens)
    assert len(apbs_sphere_points(npts)) == apbs["sphere_points"]
    return res


@pytest.mark.parametrize("name", ["mini-press", "mini-aniso"])
def test_energies_match_apbs(name):
    res = check_against_apbs(name)
    # the case has a zero-radius atom (no area, no WCA with ε = 0) and a buried one
    assert res.sasa[2] == 0.0 and res.sasa[3] == 0.0
    assert res.sav > 0


def test_ion_pmf_matches_apbs():
    # APBS's example at its own 0.1 Å lattice (2 × 281³ points): ~1 s
    check_against_apbs("ion-pmf")


def test_reference_sphere():
    pts = apbs_sphere_points(1845)
    assert len(pts) == 1844  # APBS's count for this request (io.mc of the mini-press case)
    np.testing.assert_allclose(np.linalg.norm(pts, axis=1), 1.0, atol=1e-15)
    assert pts[:, 2].max() < 1.0  # the ring at θ = 0 has rint(0) = 0 points: no pole
    # the mean of the points is near 0 (a nearly uniform set)
    assert np.abs(pts.mean(axis=0)).max() < 0.01
    with pytest.raises(InputError, match="integer >= 1"):
        apbs_sphere_points(0)


def test_sasa_on_points_keeps_nonpolar_results():
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 8, (30, 3))
    rad = rng.uniform(0.0, 2.0, 30)
    atoms = pb.Atoms(pos, np.zeros(30), rad)
    # the existing function and the new entry point agree exactly on the same point set
    np.testing.assert_array_equal(
        sasa(atoms), sasa_on_points(pos, rad, sphere_points(N_POINTS), probe=1.4)
    )


# ---------------------------------------------------------------------- forces
def small_system():
    """Four overlapping atoms away from the lattice's integer box edges."""
    rng = np.random.default_rng(11)
    sites = np.array([[20, 20, 20], [22, 21, 20], [21, 23, 21], [19, 21, 22]], float)
    pos = sites + 0.5 + rng.uniform(-0.15, 0.15, (4, 3))
    rad = np.array([1.9, 1.7, 2.0, 1.5])
    eps = np.array([0.45, 0.88, 1.0, 0.7])
    return pos, rad, eps


def test_sasa_force_is_the_central_difference_of_the_total_area():
    pos, rad, eps = small_system()
    rad[3] = 0.0  # a zero-radius atom still moves the others' areas
    params = ApolarParameters(gamma=0.0105, sdens=10.0, dpos=0.2)
    res = apolar_terms(pos, rad, eps, params, forces=True)
    for i in range(len(pos)):
        for c in range(3):
            moved = []
            for s in (1, -1):
                q = pos.copy()
                q[i, c] += s * params.dpos
                moved.append(apolar_terms(q, rad, eps, params).sasa.sum())
            fd = -params.gamma * (moved[0] - moved[1]) / (2 * params.dpos)
            assert res.forces["sasa"][i, c] == pytest.approx(fd, rel=1e-10, abs=1e-12)
    assert np.abs(res.forces["sasa"][3]).max() > 0  # it moves others' areas
    assert res.sasa[3] == 0.0


def test_sav_force_of_two_spheres_is_the_exact_derivative():
    # V = V1 + V2 − lens(d): dV/dd = π a², a the radius of the circle where the spheres meet
    R1, R2, d, srad = 3.0, 2.5, 3.2, 1.4
    pos = np.array([[0.0, 0.0, 0.0], [d, 0.0, 0.0]])
    x = (d * d + R1 * R1 - R2 * R2) / (2 * d)
    exact = math.pi * (R1 * R1 - x * x)
    params = ApolarParameters(press=0.0226, srad=srad, sdens=100.0, grid=(0.5, 0.5, 0.5))
    res = apolar_terms(pos, np.array([R1 - srad, R2 - srad]), None, params, forces=True)
    f = res.forces["sav"]
    # moving atom 1 out along +x grows V: F = −p·dV/dx < 0 on it, > 0 on atom 0
    assert f[1, 0] == pytest.approx(-params.press * exact, rel=5e-3)
    assert f[0, 0] == pytest.approx(params.press * exact, rel=5e-3)
    np.testing.assert_allclose(f[:, 1:], 0.0, atol=1e-12)


def path_check(pos, rad, eps, params, atom, axis, half=0.5, nodes=5, shifts=None):
    """W(end) − W(start) and −∫F·dr by Simpson's rule, along a straight path of 2·half Å.

    The end energies are averaged over translations of the whole molecule by ``shifts`` (a
    finer sampling of the lattice: their noise falls; forces need no such help).
    """
    shifts = [np.zeros(3)] if shifts is None else shifts
    s = np.linspace(-half, half, nodes)
    forces = []
    for t in s:
        q = pos.copy()
        q[atom, axis] += t
        forces.append(apolar_terms(q, rad, eps, params, forces=True).forces)
    ends = []
    for t in (s[0], s[-1]):
        q = pos.copy()
        q[atom, axis] += t
        ends.append(np.mean([apolar_terms(q + v, rad, eps, params).energy for v in shifts]))
    h = s[1] - s[0]
    weights = np.ones(nodes)
    weights[1:-1:2] = 4
    weights[2:-1:2] = 2
    work = {
        key: -h / 3 * sum(w * f[key][atom, axis] for w, f in zip(weights, forces, strict=True))
        for key in forces[0]
    }
    return ends[1] - ends[0], work


def wca_path_case(h, tol, pairs):
    pos, rad, eps = small_system()
    # sdens 100: the exclusion term's sphere quadrature is then good to ~1e-3 kJ/mol over the
    # path (at sdens 20 its error reaches 6e-3)
    params = ApolarParameters(bconc=0.033, grid=(h, h, h), sdens=100.0, **WATER)
    # eight half-cell translations: the end energies sampled as on a lattice of h/2 (all atoms
    # stay inside their integer WCA boxes)
    shifts = [np.array(v) * h / 2 for v in np.ndindex(2, 2, 2)]
    for atom, axis in pairs:
        dw, work = path_check(pos, rad, eps, params, atom, axis, shifts=shifts)
        assert work["wca"] == pytest.approx(dw, abs=tol)
        # APBS's integrand force alone misses by far more: the moving exclusion matters
        assert abs(work["wca_apbs"] - dw) > 0.05


def test_wca_force_against_the_energy_along_a_path():
    # measured |work − ΔW| ≤ 5e-3 kJ/mol at h = 0.25 Å, the end energies' lattice noise (the
    # changes are 0.01–0.3 kJ/mol; without the exclusion term the error exceeds 0.05)
    wca_path_case(0.25, 7e-3, [(0, 0), (2, 2)])


@pytest.mark.slow
def test_wca_force_against_the_energy_along_a_path_fine():
    # at h = 0.125 Å (effectively 0.0625 with the shifts) measured ≤ 2.3e-3 kJ/mol
    wca_path_case(0.125, 3e-3, [(0, 0), (1, 0), (2, 2), (3, 1)])


def test_wca_forces_at_the_cutoff_against_a_radial_integral():
    # Atom j (ε = 0) only excludes solvent from atom i's WCA integral, its sphere straddling
    # the 14 Å cutoff. Then W(D) = C − ρ ∫ uᵢ(r) · (area of the sphere |x − rᵢ| = r inside
    # sphere j) dr, a 1-D integral: dW/dD to 1e-8 by quadrature. Fⱼ is the moving-exclusion
    # term alone, Fᵢ the integrand term plus the cutoff term (35 % of it here).
    rho, ri, rj, srad, D = 0.033, 2.0, 2.0, 1.4, 14.0
    Ri, Rj = ri + srad, rj + srad
    sig = ri + WATER["water_radius"]
    ep = math.sqrt(0.5 * WATER["water_epsilon"])

    def energy(d):
        r = np.linspace(max(Ri, d - Rj), 14.0, 200001)
        s6 = (sig / r) ** 6
        u = np.where(r < sig, -ep, ep * (s6 * s6 - 2 * s6))
        c0 = np.clip((r * r + d * d - Rj * Rj) / (2 * r * d), -1, 1)
        return -rho * np.trapezoid(u * 2 * np.pi * r * r * (1 - c0), r)

    dwdd = (energy(D + 1e-3) - energy(D - 1e-3)) / 2e-3
    pos = np.array([[20.0, 20.0, 20.0], [20.0 + D, 20.0, 20.0]])  # integer: no box clipping
    params = ApolarParameters(bconc=rho, srad=srad, grid=(0.2, 0.2, 0.2), sdens=50.0, **WATER)
    f = apolar_terms(pos, [ri, rj], [0.5, 0.0], params, forces=True).forces
    assert f["wca"][1, 0] == pytest.approx(-dwdd, rel=1e-3)
    assert f["wca"][0, 0] == pytest.approx(dwdd, rel=1e-2)
    assert abs(f["wca_apbs"][0, 0] - dwdd) > 0.2 * abs(dwdd)


def test_sav_force_against_the_volume_along_a_path():
    pos, rad, eps = small_system()
    params = ApolarParameters(press=0.0226, grid=(0.1, 0.1, 0.1), sdens=20.0)
    for atom, axis in [(1, 0), (2, 2), (3, 1)]:
        dw, work = path_check(pos, rad, eps, params, atom, axis)
        # the lattice volume's noise at 0.1 Å is ~0.1 Å³ (2e-3 kJ/mol at this p)
        assert work["sav"] == pytest.approx(dw, abs=4e-3 + 0.01 * abs(dw))


def test_total_is_the_sum_of_the_terms():
    pos, rad, eps = small_system()
    params = ApolarParameters(
        gamma=0.0105, press=0.0226, bconc=0.033, grid=(0.5, 0.5, 0.5), sdens=10.0, **WATER
    )
    res = apolar_terms(pos, rad, eps, params, forces=True)
    f = res.forces
    np.testing.assert_allclose(f["total"], f["sasa"] + f["sav"] + f["wca"], rtol=1e-15)
    for key in ("sasa", "sav", "wca"):
        assert np.abs(f[key]).max() > 0.01  # each term takes part
    assert res.energy == pytest.approx(
        params.gamma * res.sasa.sum() + params.press * res.sav + res.wca.sum(), rel=1e-14
    )


def test_buried_atom_has_no_area_and_no_area_force():
    pos = np.array([[0.0, 0.0, 0.0], [0.36, 0.0, 0.0], [4.0, 0.5, 0.0]])
    rad = np.array([2.0, 0.6, 1.8])
    res = apolar_terms(pos, rad, None, ApolarParameters(gamma=0.02, press=0.03), forces=True)
    assert res.sasa[1] == 0.0
    np.testing.assert_array_equal(res.forces["sasa"][1], 0.0)
    np.testing.assert_array_equal(res.forces["sav"][1], 0.0)
    assert res.sasa[0] > 0 and res.sasa[2] > 0


def test_zero_radius_atom():
    srad = 1.4
    lone = apolar_terms([[0.0, 0.0, 0.0]], [0.0], None, ApolarParameters(press=1.0, srad=srad,
                        grid=(0.1, 0.1, 0.1)))  # fmt: skip
    assert lone.sasa[0] == 0.0  # APBS: no surface
    assert lone.sav == pytest.approx(4 / 3 * math.pi * srad**3, rel=0.01)  # but a volume
    # next to a real atom it buries part of that atom's surface
    pos = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    params = ApolarParameters(gamma=0.01)
    alone = apolar_terms(pos[:1], [1.5], None, params).sasa[0]
    pair = apolar_terms(pos, [1.5, 0.0], None, params).sasa
    assert pair[1] == 0.0 and pair[0] < alone - 1.0


def test_skipped_terms_are_zero():
    pos, rad, eps = small_system()
    res = apolar_terms(pos, rad, eps, ApolarParameters(gamma=0.01), forces=True)
    assert isinstance(res, ApolarResult)
    assert res.sav == 0.0 and not res.wca.any()
    assert res.energy == pytest.approx(0.01 * res.sasa.sum(), rel=1e-14)
    assert not res.forces["sav"].any() and not res.forces["wca"].any()
    np.testing.assert_array_equal(res.forces["total"], res.forces["sasa"])
    assert apolar_terms(pos, rad, eps, ApolarParameters()).forces is None
    empty = apolar_terms(np.zeros((0, 3)), np.zeros(0), None, ApolarParameters(), forces=True)
    assert empty.energy == 0.0 and empty.forces["total"].shape == (0, 3)


@pytest.mark.parametrize(
    ("kwargs", "params", "message"),
    [
        ({}, {"bconc": 0.033}, "water_radius and water_epsilon must be > 0"),
        ({}, {"bconc": 0.033, "water_radius": 1.7}, "water_radius and water_epsilon"),
        ({"epsilons": None}, {"bconc": 0.033, **WATER}, "epsilons"),
        ({"epsilons": [0.1, -1.0]}, {"bconc": 0.033, **WATER}, "epsilons must be finite"),
        ({"radii": [1.0, -1.0]}, {}, "radii must be finite and >= 0"),
        ({"radii": [1.0]}, {}, r"radii must have shape \(2,\)"),
        ({"positions": [[0, 0, np.nan], [1, 0, 0]]}, {}, "positions must be finite"),
        ({"positions": [0.0, 1.0]}, {}, r"positions must be an \(n, 3\) array"),
        ({}, {"grid": (0.1, 0.0, 0.1)}, "grid must be 3 finite spacings > 0"),
        ({}, {"grid": (0.1, 0.1)}, "grid must be 3"),
        ({}, {"sdens": 0.0}, "sdens must be > 0"),
        ({}, {"dpos": -0.1}, "dpos must be > 0"),
        ({}, {"srad": -1.0}, "srad must be >= 0"),
        ({}, {"gamma": math.inf}, "gamma must be finite"),
        ({}, {"bconc": -0.01}, "bconc must be >= 0"),
    ],
)
def test_refusals(kwargs, params, message):
    args = {"positions": [[0, 0, 0], [3, 0, 0]], "radii": [1.0, 1.5], "epsilons": [0.1, 0.2]}
    args.update(kwargs)
    with pytest.raises(InputError, match=message):
        apolar_terms(args["positions"], args["radii"], args["epsilons"], ApolarParameters(**params))


def test_params_must_be_apolar_parameters():
    with pytest.raises(InputError, match="ApolarParameters"):
        apolar_terms([[0, 0, 0]], [1.0], None, {"gamma": 0.1})
