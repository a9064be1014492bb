"""Map builders against slow NumPy references on random inputs; grid placement; bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import refgeom as R

import pbsolver as pb
from pbsolver.molecule import maps
from pbsolver.molecule.kept import KeptResults

DATA = Path(__file__).resolve().parents[1] / "data"


def random_cluster(rng, n=7, spread=1.8, zero_radius=1):
    c = rng.normal(0.0, spread, (n, 3))
    r = rng.uniform(1.0, 2.0, n)
    r[:zero_radius] = 0.0
    return pb.Atoms(c, rng.normal(0.0, 0.5, n), r)


def odd_grid(atoms, rng, spacing=(0.45, 0.5, 0.55), shape=(19, 21, 17)):
    jitter = rng.uniform(-0.2, 0.2, 3)
    half = 0.5 * (np.asarray(shape) - 1) * np.asarray(spacing)
    return pb.Grid(shape, spacing=spacing, origin=tuple(atoms.center() - half + jitter))


# ---------------------------------------------------------------------- placement
def test_nice_size():
    for n in range(3, 400):
        m = maps.nice_size(n)
        assert m >= n
        k = m - 1
        while k % 2 == 0 and k > 7:
            k //= 2
        assert k <= 7
    assert [maps.nice_size(n) for n in (60, 100, 150, 160)] == [65, 113, 161, 161]


def test_grid_for_atoms_margin_and_spacing(rng):
    a = random_cluster(rng, n=20, spread=6.0)
    g = maps.grid_for_atoms(a, spacing=(0.4, 0.5, 0.6), margin=5.0)
    assert g.spacing == (0.4, 0.5, 0.6)
    lo, hi = a.bounds()
    glo = np.asarray(g.origin)
    ghi = glo + np.asarray(g.lengths)
    assert np.all(lo - glo >= 5.0 - 1e-9) and np.all(ghi - hi >= 5.0 - 1e-9)
    np.testing.assert_allclose(g.center, a.center(), atol=1e-12)
    assert all(maps.nice_size(n) == n for n in g.shape)
    g2 = maps.grid_for_atoms(a, 0.5, shape=(33, 35, 37), center=(1.0, 2.0, 3.0))
    assert g2.shape == (33, 35, 37)
    np.testing.assert_allclose(g2.center, (1.0, 2.0, 3.0))
    with pytest.raises(pb.InputError, match="margin"):
        maps.grid_for_atoms(a, 0.5, -1.0)
    with pytest.raises(pb.InputError, match="spacing"):
        maps.grid_for_atoms(a, 0.0)


def test_grid_for_box():
    g = maps.grid_for_box((30.0, 31.0, 45.0), spacing=0.5)
    assert all(n % 2 == 0 for n in g.shape)
    np.testing.assert_allclose(np.asarray(g.spacing) * np.asarray(g.shape), (30.0, 31.0, 45.0))
    assert all(h <= 0.5 + 1e-12 for h in g.spacing)


def test_debye_length():
    # κ⁻¹ ≈ 3.04/√I Å for water at 298 K (textbook value 3.04 Å at 1 M)
    for ionic in (0.01, 0.1, 0.15, 1.0):
        assert maps.debye_length(ionic) * math.sqrt(ionic) == pytest.approx(3.04, abs=0.01)
    assert maps.debye_length(0.0) == math.inf
    # κ² ∝ I/(ε T)
    k1 = maps.kappa_from_ionic_strength(0.1, 78.54, 298.15)
    k2 = maps.kappa_from_ionic_strength(0.4, 2 * 78.54, 2 * 298.15)
    assert k2 == pytest.approx(k1)
    with pytest.raises(pb.InputError):
        maps.kappa_from_ionic_strength(-0.1)


# ---------------------------------------------------------------------- faces
def test_vdw_fractions_match_numpy(rng):
    a = random_cluster(rng, n=9, spread=2.5)
    g = odd_grid(a, rng)
    fr = maps.face_fractions(a, g, "vdw")
    for axis in range(3):
        ref = R.vdw_edge_fractions(a.positions, a.radii, g, axis)
        np.testing.assert_allclose(fr[axis], ref, atol=1e-12)
        assert 0 < fr[axis].mean() < 1


@pytest.mark.parametrize("seed", [0, 1])
def test_ses_fractions_match_brute_force(seed):
    """SES edge fractions against a brute-force point classifier (all atoms, pairs, triples)."""
    rng = np.random.default_rng(100 + seed)
    a = random_cluster(rng, n=7)
    g = odd_grid(a, rng)
    probe = 1.4
    mol = maps.face_fractions(a, g, "mol", probe)
    vdw = maps.face_fractions(a, g, "vdw")
    sas = maps.face_fractions(pb.Atoms(a.positions, a.charges, a.radii + probe), g, "vdw")
    for axis in range(3):
        assert np.all(mol[axis] >= vdw[axis] - 1e-12)  # vdW ⊂ SES ⊂ SAS
        assert np.all(mol[axis] <= sas[axis] + 1e-12)
        zone = np.argwhere((mol[axis] != vdw[axis]) | ((vdw[axis] > 0) & (vdw[axis] < 1)))
        assert len(zone) > 50
        sel = zone[rng.choice(len(zone), 120, replace=False)]
        ref = R.ses_edge_fractions(a.positions, a.radii, probe, g, axis, sel, samples=250)
        got = mol[axis][tuple(sel.T)]
        # midpoint rule with 250 samples: ≤ 1/250 per change of side
        assert np.abs(got - ref).max() < 0.01
        assert np.abs(got - ref).mean() < 2e-3
    # the reentrant surface adds volume where the probe cannot reach
    assert sum(f.sum() for f in mol) > 1.05 * sum(f.sum() for f in vdw)


def test_in_arc_equals_the_angle_test(rng):
    """The point test's arc membership (cross products) is θ0 ≤ atan2 mod 2π ≤ θ1."""
    from pbsolver.backends.bodies import maps as B

    two_pi = 2 * math.pi
    starts = rng.uniform(0, two_pi, 400)
    lengths = np.concatenate([rng.uniform(0, two_pi, 300), [1e-7, 0.3, math.pi, two_pi] * 25])
    arcs = np.zeros((len(starts), B.ARC_COLUMNS))
    for a, (t0, length) in enumerate(zip(starts, lengths, strict=True)):
        t0 = 0.0 if length == two_pi else t0
        B.set_arc_body(arcs, a, t0, min(t0 + length, two_pi))  # free arcs lie in [0, 2π]
    checked = 0
    for a in range(len(arcs)):
        for theta in rng.uniform(0, two_pi, 40):
            if min(abs(theta - arcs[a, 0]), abs(theta - arcs[a, 1])) < 1e-9:
                continue  # on an end the ends' own distance test decides
            r = rng.uniform(1e-3, 10.0)
            xu, xv = r * math.cos(theta), r * math.sin(theta)
            want = arcs[a, 0] <= math.atan2(xv, xu) % two_pi <= arcs[a, 1]
            assert B.in_arc_body(arcs, a, xu, xv) == want, (arcs[a, :2], theta)
            checked += 1
    assert checked > 15000
    # the ends' directions are those of the angles
    assert np.allclose(
        arcs[:, 2:],
        np.stack(
            [np.cos(arcs[:, 0]), np.sin(arcs[:, 0]), np.cos(arcs[:, 1]), np.sin(arcs[:, 1])], axis=1
        ),
    )


def test_free_arcs_stop_early_with_the_same_arcs(rng, monkeypatch):
    """A circle buried whole stops at the first merge of its intervals that covers it.

    The free-arc body (as plain Python) gives the same count and arcs, bit for bit, with the
    periodic merges as without them (the check moved past every neighbour list), over every
    circle of a dense random cluster with a wide spread of radii.
    """
    from pbsolver.backends.bodies import maps as B
    from pbsolver.backends.bodies.lines import sort_merge_body
    from pbsolver.backends.cpu.maps import neighbour_lists

    free_arcs = B.make_free_arcs(sort_merge_body, B.set_arc_body)
    pos = rng.uniform(-9.0, 9.0, (160, 3))
    rad = rng.uniform(1.2, 3.4, 160) + 1.4
    nb_start, nb_index = neighbour_lists(pos, rad)
    size = 2 * int(np.diff(nb_start).max()) + 2

    def all_arcs():
        out, g = [], np.zeros(13)
        for i in range(len(pos)):
            for s in range(nb_start[i], nb_start[i + 1]):
                j = int(nb_index[s])
                if j < i or not B.circle_body(pos, rad, i, j, g):
                    continue
                arcs = np.zeros((size, B.ARC_COLUMNS))
                bs, be = np.zeros(size), np.zeros(size)
                n = free_arcs(pos, rad, i, j, nb_start, nb_index, g, bs, be, arcs, 0, size)
                out.append((n, arcs[: max(n, 0)].copy()))
        return out

    early = all_arcs()
    monkeypatch.setattr(B, "BURIED_CHECK_FROM", 10**9)
    whole = all_arcs()
    assert len(early) == len(whole) > 500
    buried = sum(n == 0 for n, _ in whole)
    assert 0.2 * len(whole) < buried < len(whole)  # both kinds of circle are exercised
    for (n1, a1), (n2, a2) in zip(early, whole, strict=True):
        assert n1 == n2
        assert np.array_equal(a1, a2)


def test_owned_merge_names_the_first_interval_of_each_merged_end(rng):
    """The ion column sums' merge: the union of sort_merge_body, and each end's owner.

    Intervals on a coarse lattice (so that many share a start or an end) in a nearly sorted
    order, as the column kernel cuts them: the merged intervals equal sort_merge_body's, and
    each merged start (end) is owned by the first interval, in cutting order, that starts
    (ends) there, found here by brute force.
    """
    from pbsolver.backends.bodies.lines import sort_merge_body, sort_merge_owned_body

    ties = 0
    for _ in range(300):
        n = int(rng.integers(0, 40))
        centre = np.sort(rng.integers(0, 60, n)) * 0.25
        half = rng.integers(1, 12, n) * 0.25
        lo, hi = centre - half, centre + half
        starts, ends = lo.copy(), hi.copy()
        own, end_own = np.arange(n, dtype=np.int32), np.full(n, -1, dtype=np.int32)
        m = sort_merge_owned_body(starts, ends, own, end_own, n)
        ref_s, ref_e = lo.copy(), hi.copy()
        assert m == sort_merge_body(ref_s, ref_e, n)
        np.testing.assert_array_equal(starts[:m], ref_s[:m])
        np.testing.assert_array_equal(ends[:m], ref_e[:m])
        for s in range(m):
            assert own[s] == np.flatnonzero(lo == starts[s])[0]
            assert end_own[s] == np.flatnonzero(hi == ends[s])[0]
            ties += int((lo == starts[s]).sum() > 1) + int((hi == ends[s]).sum() > 1)
    assert ties > 50  # shared ends are exercised, not only distinct ones


def test_ses_equals_vdw_for_isolated_spheres(rng):
    """Spheres farther apart than 2 probe radii: the SES is their vdW surface."""
    pos = np.array([[0.0, 0.0, 0.0], [7.5, 0.3, -0.2], [0.4, 7.9, 0.5]])
    a = pb.Atoms(pos, [1.0, -1.0, 0.5], [1.5, 2.0, 1.7])
    g = odd_grid(a, rng, spacing=(0.5, 0.5, 0.5), shape=(29, 29, 17))
    mol = maps.face_fractions(a, g, "mol", 1.4)
    vdw = maps.face_fractions(a, g, "vdw")
    for m, v in zip(mol, vdw, strict=True):
        np.testing.assert_allclose(m, v, atol=1e-6)


def test_ses_fills_the_gap_between_two_spheres():
    """Two spheres 1 Å apart: the probe cannot enter the gap on the axis."""
    a = pb.Atoms([[-2.5, 0, 0], [2.5, 0, 0]], [0, 0], [2.0, 2.0])
    g = pb.Grid((41, 21, 21), spacing=0.5, origin=(-10.0, -5.0, -5.0))
    mol = maps.face_fractions(a, g, "mol", 1.4)
    vdw = maps.face_fractions(a, g, "vdw")
    # edge along x on the axis between x = 0 and 0.5: outside both vdW spheres
    i0 = 20
    assert vdw[0][i0, 10, 10] == 0.0 and mol[0][i0, 10, 10] == 1.0
    # torus region: the reentrant surface between the spheres passes at
    # r = ρ_probe − sqrt(r_p² − x²) around the axis, with ρ_probe = sqrt(3.4² − 2.5²)
    rho = math.sqrt(3.4**2 - 2.5**2)
    r_surf = rho - 1.4  # at x = 0
    j = 10 + int(r_surf // 0.5)  # the y-edge from (0, j) to (0, j + 1) crosses the surface
    f_expected = (r_surf - (j - 10) * 0.5) / 0.5
    assert mol[1][20, j, 10] == pytest.approx(f_expected, abs=5e-5)  # bisection: step·2⁻¹⁴


def test_bare_charges_have_no_volume(rng):
    a = pb.Atoms(rng.normal(0, 2.0, (5, 3)), rng.normal(0, 1, 5), np.zeros(5))
    g = odd_grid(a, rng, shape=(11, 12, 13))
    for surface in ("vdw", "mol"):
        assert all(np.all(f == 0) for f in maps.face_fractions(a, g, surface))
    np.testing.assert_allclose(maps.ion_accessibility(a, g, 0.0), 1.0)


def test_smol_is_a_conservative_average(rng):
    a = random_cluster(rng)
    g = odd_grid(a, rng)
    mol = maps.face_fractions(a, g, "mol")
    smol = maps.face_fractions(a, g, "smol")
    assert sum(s.sum() for s in smol) == pytest.approx(sum(m.sum() for m in mol))
    assert all(np.all((s >= 0) & (s <= 1)) for s in smol)
    # a uniform field is unchanged; interior x-face = mean of itself and 8 neighbours
    i, j, k = 9, 10, 8
    fx, fy, fz = mol
    expect = (
        fx[i, j, k]
        + fy[i, j, k]
        + fy[i, j - 1, k]
        + fy[i + 1, j, k]
        + fy[i + 1, j - 1, k]
        + fz[i, j, k]
        + fz[i, j, k - 1]
        + fz[i + 1, j, k]
        + fz[i + 1, j, k - 1]
    ) / 9
    assert smol[0][i, j, k] == pytest.approx(expect)


def test_faces_from_fractions_kernel_equals_the_array_rule(rng):
    """The one-pass CPU kernel (C-ordered float64 maps) gives the array code's values bit for
    bit (a Fortran-ordered copy takes the array code), snapped ends included.
    """
    f = rng.uniform(0.0, 1.0, (9, 8, 7))
    f[0] = 1.0
    f[1] = 0.0
    f[2, 0, :3] = (1.0 - 1e-13, 1e-13, 0.5)
    fast = maps.faces_from_fractions((f,), 2.0, 78.54)[0]
    array = maps.faces_from_fractions((np.asfortranarray(f),), 2.0, 78.54)[0]
    assert np.array_equal(fast, array)
    assert fast[0].min() == fast[0].max() == 2.0 and fast[2, 0, 0] == 2.0
    assert fast[1].min() == fast[1].max() == 78.54 and fast[2, 0, 1] == 78.54
    assert 2.0 < fast[2, 0, 2] < 78.54


def test_build_maps_takes_the_callers_phi_coulomb(rng):
    """φ_c is linear in the charges: two disjoint parts' maps sum to the whole's (as
    binding_energies builds the complex's); every other map is the whole's own."""
    a = random_cluster(rng, n=9)
    g = odd_grid(a, rng)
    kw = {"ionic_strength": 0.1, "surface": "mol"}
    whole = maps.build_maps(a, g, **kw)
    parts = [maps.build_maps(a[idx], g, **kw) for idx in (np.arange(5), np.arange(5, 9))]
    given = maps.build_maps(a, g, phi_coulomb=parts[0].phi_coulomb + parts[1].phi_coulomb, **kw)
    np.testing.assert_allclose(given.phi_coulomb, whole.phi_coulomb, rtol=1e-12, atol=0)
    for mine, own in zip(given.epsilon_faces, whole.epsilon_faces, strict=True):
        assert np.array_equal(mine, own)
    assert np.array_equal(given.kappa2, whole.kappa2)
    np.testing.assert_allclose(given.boundary_values, whole.boundary_values, rtol=1e-12)
    with pytest.raises(pb.InputError, match="phi_coulomb has shape"):
        maps.build_maps(a, g, phi_coulomb=np.zeros((3, 3, 3)), **kw)


def test_on_device_must_be_a_flag(rng):
    """Anything but True/False is refused by name before a map is built."""
    a = random_cluster(rng, n=7)
    g = odd_grid(a, rng)
    with pytest.raises(pb.InputError, match="on_device must be True or False"):
        maps.build_maps(a, g, on_device="yes")
    with pytest.raises(pb.InputError, match="on_device must be True or False"):
        maps.face_fractions(a, g, on_device="gpu")


class _HostDevice:
    """A "device" whose arrays are NumPy's: the CPU's kernels behind ``device_results()``'s
    names, so that CI runs the orchestration of ``on_device=True`` (its own branches, keys of
    the kept maps, boundary values) without a GPU."""

    xp = np

    def __init__(self):
        from pbsolver.backends.cpu import maps as K

        self.calls = 0
        self._k = K

    def _count(self):
        self.calls += 1

    def sphere_union_sets(self, *args):
        self._count()
        return self._k.sphere_union_sets(*args)

    def ses_lines(self, *args, **kwargs):
        self._count()
        return self._k.ses_lines(*args, **kwargs)

    def coulomb_sum(self, *args):
        self._count()
        return self._k.coulomb_sum(*args)

    def snap_fractions(self, f):
        return maps.snap_fractions(f)

    def faces_from_fractions(self, f, eps_in, eps_out):
        return maps.faces_from_fractions((f,), eps_in, eps_out)[0]

    def smooth_fractions(self, fx, fy, fz):
        return maps.smooth_fractions(fx, fy, fz)


@pytest.mark.parametrize(("surface", "salt"), [("vdw", 0.1), ("mol", 0.1), ("smol", 0.1),
                                                ("mol", 0.0)])  # fmt: skip
def test_on_device_orchestration_gives_the_host_maps(rng, monkeypatch, surface, salt):
    """The maps built through a device's kernels (here a NumPy stand-in) equal the host maps,
    for each surface, with and without given Dirichlet values (focusing; with salt they are
    screened)."""
    from pbsolver.molecule import focusing

    a = random_cluster(rng, n=8)
    g = odd_grid(a, rng)
    kw = {"ionic_strength": salt, "surface": surface}
    maps.clear_kept_maps()
    host = maps.build_maps(a, g, **kw)
    fake = _HostDevice()
    monkeypatch.setattr(maps, "device_kernels", lambda be, on=True: fake if on else None)
    dev = maps.build_maps(a, g, on_device=True, **kw)
    assert fake.calls > 0  # the device's kernels built them (no kept host map was handed out)
    for x, y in zip((*host.epsilon_faces, host.kappa2, host.phi_coulomb, host.boundary_values),
                    (*dev.epsilon_faces, dev.kappa2, dev.phi_coulomb, dev.boundary_values),
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(y, x)
    grids = focusing.focus_grids(a, 0.6, margin=3.0)
    solver = pb.Solver(backend="cpu", rtol=1e-9)
    levels = [focusing.solve_focused(a, grids, on_device=on, solver=solver, **kw) for on in (0, 1)]
    for h, d in zip(*levels, strict=True):
        np.testing.assert_array_equal(d.problem.boundary_values, h.problem.boundary_values)
        np.testing.assert_allclose(d.result.phi_rf, h.result.phi_rf, rtol=0,
                                   atol=1e-12 * np.abs(h.result.phi_rf).max())  # fmt: skip


def test_faces_from_fractions():
    f = np.array([0.0, 0.25, 0.5, 1.0])
    (e,) = maps.faces_from_fractions((f,), 3.0, 80.0)
    assert e[0] == 80.0 and e[-1] == 3.0
    np.testing.assert_allclose(e[1:3], 1 / (f[1:3] / 3.0 + (1 - f[1:3]) / 80.0))
    with pytest.raises(pb.InputError, match="eps_in"):
        maps.faces_from_fractions((f,), 0.0, 80.0)


def test_bad_surface_and_probe(rng):
    a = random_cluster(rng)
    g = odd_grid(a, rng)
    with pytest.raises(pb.InputError, match="surface"):
        maps.face_fractions(a, g, "ses")
    with pytest.raises(pb.InputError, match="probe_radius"):
        maps.face_fractions(a, g, "mol", probe_radius=-0.5)


def test_zero_probe_makes_mol_the_vdw_surface(rng):
    # APBS' srad 0: a point probe reaches everything outside the spheres
    a = random_cluster(rng, n=12, spread=2.5)
    g = odd_grid(a, rng)
    vdw = maps.face_fractions(a, g, "vdw")
    for got, want in zip(maps.face_fractions(a, g, "mol", probe_radius=0.0), vdw, strict=True):
        np.testing.assert_array_equal(got, want)
    smooth = maps.smooth_fractions(*vdw)
    for got, want in zip(maps.face_fractions(a, g, "smol", 0.0), smooth, strict=True):
        np.testing.assert_array_equal(got, want)
    # the small probe still differs from it (the test can fail)
    assert any(
        not np.array_equal(f, v)
        for f, v in zip(maps.face_fractions(a, g, "mol", 0.3), vdw, strict=True)
    )
    kw = {"spacing": 0.5, "margin": 4.0, "backend": "cpu", "method": "sor"}
    g_mol = pb.solvation_energy(a, surface="mol", probe_radius=0.0, **kw)
    assert g_mol == pb.solvation_energy(a, surface="vdw", **kw)


# ---------------------------------------------------------------------- salt
def test_ion_accessibility_matches_sampling(rng):
    a = random_cluster(rng, n=6)
    g = odd_grid(a, rng, shape=(15, 13, 17))
    ion_r = 2.0
    acc = maps.ion_accessibility(a, g, ion_r, subsamples=4)
    # reference: 4×4 lines across each cell (same as the kernel) × 400 points along z
    idx = np.argwhere((acc > 0) & (acc < 1))
    idx = idx[rng.choice(len(idx), min(60, len(idx)), replace=False)]
    h = np.asarray(g.spacing)
    s = (np.arange(4) + 0.5) / 4 - 0.5
    t = (np.arange(400) + 0.5) / 400 - 0.5
    off = np.stack(np.meshgrid(s, s, t, indexing="ij"), -1).reshape(-1, 3) * h
    for node in idx:
        p = np.asarray(g.origin) + node * h + off
        d = np.linalg.norm(p[:, None, :] - a.positions[None], axis=-1)
        ref = np.all(d >= a.radii + ion_r, axis=1).mean()
        assert acc[tuple(node)] == pytest.approx(ref, abs=4 / 400)
    # far from atoms everything is accessible; at atom centres nothing
    assert acc[0, 0, 0] == 1.0
    assert maps.kappa2_map(a, g, 0.0) is None
    k2 = maps.kappa2_map(a, g, 0.15, eps_out=78.54)
    kappa = maps.kappa_from_ionic_strength(0.15)
    np.testing.assert_allclose(k2, 78.54 * kappa**2 * acc)


# ---------------------------------------------------------------------- φ_c and boundary values
def test_coulomb_matches_numpy(rng):
    a = random_cluster(rng, n=12, spread=4.0)
    g = odd_grid(a, rng, spacing=(0.6, 0.5, 0.7), shape=(13, 15, 11))
    phi = maps.coulomb_potential(a, g, 2.0)
    ref = R.coulomb(g, a.positions, a.charges, 2.0)
    np.testing.assert_allclose(phi, ref, rtol=1e-12, atol=1e-9)


def test_coulomb_node_on_atom_and_periodic(rng):
    g = pb.Grid((16, 14, 12), spacing=0.5, origin=(0.0, 0.0, 0.0))
    pos = np.array([[2.0, 3.0, 1.5], [5.3, 1.1, 4.9], [7.2, 6.0, 0.2]])
    a = pb.Atoms(pos, [1.0, -0.5, 0.7], [1.5, 1.5, 1.5])
    phi = maps.coulomb_potential(a, g, 1.0)
    assert phi[4, 6, 3] == math.inf  # atom 0 sits on node (4, 6, 3)
    finite = np.isfinite(phi)
    assert finite.sum() == phi.size - 1
    box = (8.0, 7.0, 6.0)
    phip = maps.coulomb_potential(a, g, 1.0, box=box)
    ref = R.coulomb(g, pos, a.charges, 1.0, box=box)
    np.testing.assert_allclose(phip[finite], ref[finite], rtol=1e-12)
    two = pb.Atoms([[2.0, 3.0, 1.5], [2.0, 3.0, 1.5]], [1.0, -1.0], [1.5, 1.5])
    with pytest.raises(pb.InputError, match="opposite sign sit exactly on grid node"):
        maps.coulomb_potential(two, g, 1.0)


def test_boundary_values(rng):
    a = random_cluster(rng, n=5)
    g = odd_grid(a, rng, shape=(11, 13, 9))
    kappa = maps.kappa_from_ionic_strength(0.1)
    bv = maps.boundary_values(a, g, 2.0, 78.54, 0.1)
    assert np.all(bv[1:-1, 1:-1, 1:-1] == 0)
    x, y, z = (np.broadcast_to(c, g.shape) for c in g.coordinates())
    ref = np.zeros(g.shape)
    for c, q, r in zip(a.positions, a.charges, a.radii, strict=True):
        d = np.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2)
        ref += (
            pb.COULOMB_KJ
            * q
            * (np.exp(-kappa * (d - r)) / (78.54 * (1 + kappa * r) * d) - 1 / (2.0 * d))
        )
    outer = np.ones(g.shape, bool)
    outer[1:-1, 1:-1, 1:-1] = False
    np.testing.assert_allclose(bv[outer], ref[outer], rtol=1e-12)
    assert np.all(maps.boundary_values(a, g, kind="zero") == 0)
    one = a[[2]]
    np.testing.assert_allclose(
        maps.boundary_values(one, g, kind="sdh"), maps.boundary_values(one, g, kind="mdh")
    )
    with pytest.raises(pb.InputError, match="boundary kind"):
        maps.boundary_values(a, g, kind="focus")


@pytest.mark.parametrize("kind", ["mdh", "sdh"])
@pytest.mark.parametrize("salt", [0.0, 0.1])
def test_boundary_values_from_the_coulomb_map(rng, kind, salt):
    # build_maps hands its φ_c map to boundary_values: the outer layer's exact sum is read from
    # it instead of summed again, to rounding
    a = random_cluster(rng, n=6)
    g = odd_grid(a, rng, shape=(11, 13, 9))
    phi_c = maps.coulomb_potential(a, g, 3.0)
    kw = {"eps_in": 3.0, "eps_out": 78.54, "ionic_strength": salt, "kind": kind,
          "ion_radius": 1.5}  # fmt: skip
    want = maps.boundary_values(a, g, **kw)
    got = maps.boundary_values(a, g, **kw, phi_coulomb=phi_c)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12 * np.abs(want).max())


# ---------------------------------------------------------------------- the problem
def test_problem_from_atoms(rng):
    a = random_cluster(rng, n=8)
    p = pb.Problem.from_atoms(a, spacing=0.6, margin=3.0, eps_in=4.0, ionic_strength=0.1)
    assert p.eps_cavity == 4.0 and p.epsilon_faces is not None and p.has_salt
    assert p.boundary == "dirichlet" and p.boundary_values is not None
    ex = p.epsilon_faces[0]
    assert ex.min() == 4.0 and ex.max() == 78.54
    pv = pb.Problem.from_atoms(a, spacing=0.6, margin=3.0, surface="vdw")
    assert (pv.epsilon_faces[0] == 2.0).sum() < (p.epsilon_faces[0] == 4.0).sum()
    with pytest.raises(pb.InputError, match="box"):
        pb.Problem.from_atoms(a, boundary="periodic")
    with pytest.raises(pb.InputError, match="box"):
        pb.Problem.from_atoms(a, box=(20, 20, 20))
    with pytest.raises(pb.InputError, match="outside the grid"):
        pb.Problem.from_atoms(a, grid=pb.Grid((9, 9, 9), spacing=0.5))
    with pytest.raises(pb.InputError, match="atoms must be"):
        pb.Problem.from_atoms(np.zeros((3, 3)))


@pytest.mark.parametrize("surface", ["mol", "smol", "vdw"])
def test_uniform_permittivity_maps_equal_the_surface_built_ones(rng, surface):
    """pdie = sdie (APBS's reference runs): the maps, built without the surface, are ε on every
    face, as the surface's own fractions give up to rounding; κ̄² keeps its surface."""
    a = random_cluster(rng, n=8)
    grid = maps.grid_for_atoms(a, spacing=0.6, margin=3.0)
    m = maps.build_maps(a, grid, surface=surface, eps_in=3.0, eps_out=3.0, ionic_strength=0.1)
    fr = maps.face_fractions(a, grid, surface, 1.4, ion_radius=2.0)
    assert any(((f > 0) & (f < 1)).any() for f in fr)  # the surface crosses faces
    for built, by_surface in zip(m.epsilon_faces, maps.faces_from_fractions(fr, 3.0, 3.0),
                                 strict=True):  # fmt: skip
        assert (built == 3.0).all()
        np.testing.assert_allclose(built, by_surface, rtol=1e-15)
        assert built.dtype == by_surface.dtype and built.shape == grid.shape
    salty = maps.build_maps(a, grid, surface=surface, eps_in=3.0, eps_out=78.54,
                            ionic_strength=0.1)  # fmt: skip
    np.testing.assert_array_equal(m.kappa2 > 0, salty.kappa2 > 0)  # κ̄² still has its surface
    assert m.boundary_values is not None


def test_problem_from_atoms_periodic(rng):
    a = random_cluster(rng, n=6)
    a = a.translated([-a.center()[0] + 0.2, 0.0, 0.0])  # straddles x = 0: imaged across
    box = (16.0, 14.0, 12.0)
    p = pb.Problem.from_atoms(a, spacing=0.5, boundary="periodic", box=box, surface="vdw")
    assert p.boundary == "periodic" and p.grid.shape == (32, 28, 24)
    # the wrapped copy covers the far end of the box as much as the near end
    fx = p.epsilon_faces[0]
    assert (fx[-3:] < 78.54).any() and (fx[:3] < 78.54).any()
    shifted = a.translated([box[0], 0.0, 0.0])
    q = pb.Problem.from_atoms(shifted, spacing=0.5, boundary="periodic", box=box, surface="vdw")
    np.testing.assert_allclose(q.epsilon_faces[0], fx, atol=1e-9)
    finite = np.isfinite(p.phi_coulomb)
    np.testing.assert_allclose(q.phi_coulomb[finite], p.phi_coulomb[finite], rtol=1e-9)


def test_charge_on_node_outside_solute():
    """A bare charge on a node in solvent is an error that names the atom, not a silent NaN."""
    a = pb.Atoms([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0]], [0.0, 1.0], [2.0, 0.0])
    with pytest.raises(pb.InputError, match="atom 1"):
        pb.Problem.from_atoms(a, spacing=0.5, margin=2.0, center=(0.0, 0.0, 0.0), surface="vdw")


def test_protein_maps_are_consistent():
    prot = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    g = maps.grid_for_atoms(prot, spacing=1.0, margin=4.0)
    vdw = maps.face_fractions(prot, g, "vdw")
    mol = maps.face_fractions(prot, g, "mol")
    vol_vdw = vdw[0].sum() * np.prod(g.spacing)
    vol_mol = mol[0].sum() * np.prod(g.spacing)
    # vdW volume from x-edges equals that from y-edges (both integrate the same solid)
    assert vdw[1].sum() == pytest.approx(vdw[0].sum(), rel=1e-2)
    assert mol[2].sum() == pytest.approx(mol[0].sum(), rel=1e-2)
    assert 1.1 * vol_vdw < vol_mol < 1.5 * vol_vdw


@pytest.mark.parametrize("shape", [(2, 2, 2), (3, 3, 3), (5, 4, 7), (9, 2, 6)])
def test_outer_layer_is_the_masked_outer_nodes_in_c_order(shape):
    from pbsolver.molecule.maps import outer_layer

    mask = np.zeros(shape, dtype=bool)
    mask[[0, -1]] = True
    mask[:, [0, -1]] = True
    mask[:, :, [0, -1]] = True
    layer = outer_layer(shape)
    np.testing.assert_array_equal(layer, np.flatnonzero(mask))
    assert not layer.flags.writeable  # shared by every call on this shape


def test_snap_fractions_kernel_equals_the_array_code():
    """The NumPy one-pass kernel and the array code (other arrays, e.g. CuPy's) agree bitwise."""
    from pbsolver.molecule.maps import snap_fractions

    gen = np.random.default_rng(3)
    f = gen.uniform(-0.5, 1.5, (9, 8, 7))
    f.flat[::5] = 1.0 - 1e-13
    f.flat[::7] = 1e-13
    f.flat[::11] = 1.0 - 1e-11  # not snapped
    kernel = snap_fractions(f.copy())
    array_code = snap_fractions(np.asfortranarray(f))  # not C-ordered: the array code
    np.testing.assert_array_equal(kernel, array_code)
    assert kernel.min() == 0.0 and kernel.max() == 1.0
    assert np.all((kernel == 0) | (kernel == 1) | ((kernel > 1e-12) & (kernel < 1 - 1e-12)))


def test_ses_geometry_is_kept_for_the_same_atoms_only(rng):
    """Focusing maps one molecule on several grids: its SES geometry (atoms only) is computed
    once; other positions, radii or probe compute it again, and the fractions are those of a
    fresh computation."""
    a = random_cluster(rng, n=9)
    be = maps.map_backend("cpu")
    maps.clear_kept_maps()
    first = maps.ses_geometry(be, a.positions, a.radii, 1.4)
    assert maps.ses_geometry(be, a.positions.copy(), a.radii.copy(), 1.4) is first
    moved = a.positions.copy()
    moved[3, 1] += 1e-9
    assert maps.ses_geometry(be, moved, a.radii, 1.4) is not first
    assert maps.ses_geometry(be, a.positions, a.radii, 1.3) is not first
    assert maps.ses_geometry(be, a.positions, a.radii + 0.1, 1.4) is not first
    g1, g2 = odd_grid(a, rng), odd_grid(a, rng, spacing=(0.37, 0.41, 0.33))
    kept = [maps.face_fractions(a, g, "mol") for g in (g1, g2)]
    for g, got in zip((g1, g2), kept, strict=True):
        maps.clear_kept_maps()
        fresh = maps.face_fractions(a, g, "mol")
        for x, y in zip(got, fresh, strict=True):
            np.testing.assert_array_equal(x, y)
    first = maps.ses_geometry(be, a.positions, a.radii, 1.4)
    for k in range(1, maps.GEOMETRY_KEPT + 1):  # an MD run: only the last few are kept
        maps.ses_geometry(be, a.positions + 0.01 * k, a.radii, 1.4)
    assert maps.ses_geometry(be, a.positions, a.radii, 1.4) is not first


def test_coulomb_and_accessibility_maps_are_kept_as_copies(rng):
    """A solvated and a reference calculation of APBS map the same charges on the same grid:
    the second call gets a copy of the first's map (changing it changes nothing kept); other
    charges, grids, ε_c, ion radius or summation method compute the map again."""
    from pbsolver.backends.cpu.backend import CPUBackend

    a = random_cluster(rng, n=9)
    g = odd_grid(a, rng)
    maps.clear_kept_maps()
    phi = maps.coulomb_potential(a, g, 2.0)
    again = maps.coulomb_potential(a, g, 2.0)
    np.testing.assert_array_equal(again, phi)
    assert again is not phi
    again[3, 4, 5] = 1e9  # the caller's copy
    np.testing.assert_array_equal(maps.coulomb_potential(a, g, 2.0), phi)
    np.testing.assert_allclose(maps.coulomb_potential(a, g, 4.0), 0.5 * phi, rtol=1e-14)
    direct = maps.coulomb_potential(a, g, 2.0, backend=CPUBackend(coulomb="direct"))
    maps.clear_kept_maps()
    np.testing.assert_array_equal(
        direct, maps.coulomb_potential(a, g, 2.0, backend=CPUBackend(coulomb="direct"))
    )
    other = pb.Atoms(a.positions, -a.charges, a.radii)
    np.testing.assert_allclose(maps.coulomb_potential(other, g, 2.0), -phi, rtol=1e-12)
    acc = maps.ion_accessibility(a, g, 2.0)
    assert maps.ion_accessibility(a, g, 2.0) is not acc
    np.testing.assert_array_equal(maps.ion_accessibility(a, g, 2.0), acc)
    wider = maps.ion_accessibility(a, g, 2.5)
    assert wider.sum() < acc.sum()
    maps.clear_kept_maps()
    np.testing.assert_array_equal(maps.ion_accessibility(a, g, 2.5), wider)
    shifted = pb.Grid(g.shape, spacing=g.spacing, origin=tuple(np.asarray(g.origin) + 0.1))
    assert not np.array_equal(maps.ion_accessibility(a, shifted, 2.0), acc)


def test_a_complex_after_its_parts_gets_the_sum_of_their_coulomb_maps(rng):
    """φ_c is linear in the charges: once both parts are mapped on a grid, their complex (its
    atoms in any order, uncharged ones added) gets the parts' sum, equal to its own map."""
    a = random_cluster(rng, n=12)
    g = odd_grid(a, rng)
    order = rng.permutation(len(a.charges))
    first, second = a[np.sort(order[:5])], a[np.sort(order[5:])]
    extra = pb.Atoms(rng.normal(0, 2, (3, 3)), np.zeros(3), np.ones(3))
    complex_ = pb.Atoms(np.vstack([a.positions[order], extra.positions]),
                        np.concatenate([a.charges[order], extra.charges]),
                        np.concatenate([a.radii[order], extra.radii]))  # fmt: skip
    maps.clear_kept_maps()
    own = maps.coulomb_potential(complex_, g, 2.0)
    maps.clear_kept_maps()
    parts = maps.coulomb_potential(first, g, 2.0) + maps.coulomb_potential(second, g, 2.0)
    summed = maps.coulomb_potential(complex_, g, 2.0)
    np.testing.assert_array_equal(summed, parts)  # the sum, not a new map
    np.testing.assert_allclose(summed, own, rtol=1e-12, atol=1e-12 * np.abs(own).max())
    # a charge changed, another ε_c or another grid: the complex's own map, not the parts' sum
    changed = pb.Atoms(complex_.positions, complex_.charges * 1.001, complex_.radii)
    np.testing.assert_allclose(maps.coulomb_potential(changed, g, 2.0), 1.001 * own,
                               rtol=1e-12, atol=1e-12 * np.abs(own).max())  # fmt: skip
    np.testing.assert_allclose(maps.coulomb_potential(complex_, g, 4.0), 0.5 * own, rtol=1e-12)
    shifted = pb.Grid(g.shape, spacing=g.spacing, origin=tuple(np.asarray(g.origin) + 0.1))
    moved = maps.coulomb_potential(complex_, shifted, 2.0)
    maps.clear_kept_maps()
    np.testing.assert_array_equal(moved, maps.coulomb_potential(complex_, shifted, 2.0))
    maps.clear_kept_maps()


def test_a_part_after_its_complex_gets_the_complex_less_the_other_part(rng):
    """A part mapped after its complex and the complex's other part gets the difference of
    their maps, equal to its own map; not where a charge sits on a node (∞ − ∞)."""
    a = random_cluster(rng, n=12)
    g = odd_grid(a, rng)
    order = rng.permutation(len(a.charges))
    first, second = a[np.sort(order[:5])], a[np.sort(order[5:])]
    maps.clear_kept_maps()
    own = maps.coulomb_potential(second, g, 2.0)
    maps.clear_kept_maps()
    whole = maps.coulomb_potential(a, g, 2.0)
    other = maps.coulomb_potential(first, g, 2.0)
    got = maps.coulomb_potential(second, g, 2.0)
    np.testing.assert_array_equal(got, whole - other)  # the difference, not a new map
    np.testing.assert_allclose(got, own, rtol=1e-12, atol=1e-11 * np.abs(whole).max())
    # one of the other part's charges on a node: the part's own map, finite there
    node = np.asarray(g.origin) + np.asarray(g.spacing) * (np.asarray(g.shape) // 2)
    pos = a.positions.copy()
    pos[order[0]] = node
    on_node = pb.Atoms(pos, a.charges, a.radii)
    first, second = on_node[np.sort(order[:5])], on_node[np.sort(order[5:])]
    maps.clear_kept_maps()
    own = maps.coulomb_potential(second, g, 2.0)
    maps.clear_kept_maps()
    assert np.isinf(maps.coulomb_potential(on_node, g, 2.0)).any()
    maps.coulomb_potential(first, g, 2.0)
    np.testing.assert_array_equal(maps.coulomb_potential(second, g, 2.0), own)
    maps.clear_kept_maps()


def test_kept_maps_hold_at_most_their_count_and_bytes():
    kept = KeptResults(3, most_bytes=10, total_bytes=15)
    kept.put("a", 1, 8)
    kept.put("b", 2, 6)
    kept.put("big", 0, 11)  # over most_bytes: not kept
    assert kept.values() == [1, 2]
    assert kept.get("a") == 1  # renewed: b is now the oldest
    kept.put("c", 3, 5)  # 19 bytes: the oldest (b) goes
    assert kept.values() == [1, 3]
    kept.put("d", 4, 1)
    kept.put("e", 5, 1)  # four items: the oldest (a) goes
    assert kept.values() == [3, 4, 5]
    assert kept.get("b") is None


# ---------------------------------------------------------------------- φ_c on the outer layer
def _homogeneous_atoms(rng, n=6):
    pos = rng.uniform(-3.0, 3.0, (n, 3))
    return pb.Atoms(pos, rng.uniform(-1.0, 1.0, n), rng.uniform(1.0, 2.0, n))


def test_coulomb_points_is_the_maps_sum_at_any_point(rng):
    # the outer layer's φ_c (coulomb="outer", the "sdh" and salt-free "mdh" values) is summed at
    # points with the φ_c map's pair body: the map's values at the nodes, ±inf on (or within the
    # on-node distance of) a charge, NaN for opposite charges there
    from pbsolver.backends import get_backend
    from pbsolver.backends.bodies.maps import on_node_tol2
    from pbsolver.backends.cpu.backend import CPUBackend

    a = random_cluster(rng, n=9)
    g = odd_grid(a, rng, shape=(9, 11, 10))
    node = np.asarray(g.origin) + np.array([4, 5, 3]) * np.asarray(g.spacing)
    pos = a.positions.copy()
    pos[1] = node + 1e-9 * min(g.spacing)  # within the on-node distance of a node
    a = pb.Atoms(pos, a.charges, a.radii)
    phi = maps.coulomb_potential(a, g, 2.0, backend=CPUBackend(coulomb="direct"))
    pts = np.stack([c.reshape(-1) for c in np.broadcast_arrays(*g.coordinates())], axis=1)
    points = get_backend("cpu").map_kernels().coulomb_points
    tol2 = on_node_tol2(g.spacing)
    got = points(pts, a.positions, a.charges, pb.COULOMB_KJ / 2.0, tol2).reshape(g.shape)
    fin = np.isfinite(phi)
    assert (~fin).sum() == 1 and np.array_equal(got[~fin], phi[~fin])
    # the same pair terms, each point's in atom order (the map's kernel may add them in
    # another): equal to rounding, relative to the largest value where terms cancel
    np.testing.assert_allclose(got[fin], phi[fin], rtol=1e-13, atol=1e-13 * np.abs(phi[fin]).max())
    two = pb.Atoms(np.array([node, node]), np.array([0.3, -0.3]), np.ones(2))
    assert np.isnan(points(node[None], two.positions, two.charges, 1.0, tol2)[0])


def test_coulomb_outer_layer_is_the_direct_sum_there_and_zero_inside(rng):
    atoms = _homogeneous_atoms(rng)
    grid = pb.Grid((17, 14, 19), spacing=0.7, origin=(-6.0, -5.0, -6.5))
    got = maps.coulomb_on_outer_layer(atoms, grid, 4.0)
    x, y, z = grid.coordinates()
    want = np.zeros(grid.shape)
    for p, q in zip(atoms.positions, atoms.charges, strict=True):
        want += (
            pb.COULOMB_KJ * q / (4.0 * np.sqrt((x - p[0]) ** 2 + (y - p[1]) ** 2 + (z - p[2]) ** 2))
        )
    inner = (slice(1, -1),) * 3
    assert np.all(got[inner] == 0.0)
    outer = np.ones(grid.shape, dtype=bool)
    outer[inner] = False
    np.testing.assert_allclose(got[outer], want[outer], rtol=1e-12)


def test_the_outer_layer_of_a_complex_and_its_parts_reuses_the_kept_values(rng):
    # as the φ_c maps: a complex after its two parts gets their sum, a part after its complex
    # and the other part the difference; each equals its own sum to rounding
    a = _homogeneous_atoms(rng, n=11)
    grid = pb.Grid((13, 12, 14), spacing=0.8, origin=(-5.0, -4.5, -5.5))
    order = rng.permutation(len(a.charges))
    first, second = a[np.sort(order[:4])], a[np.sort(order[4:])]
    own = {}
    for name, atoms in (("complex", a), ("first", first), ("second", second)):
        maps.clear_kept_maps()
        own[name] = maps.coulomb_on_outer_layer(atoms, grid, 2.0)
    maps.clear_kept_maps()
    parts = maps.coulomb_on_outer_layer(first, grid, 2.0) + maps.coulomb_on_outer_layer(
        second, grid, 2.0
    )
    summed = maps.coulomb_on_outer_layer(a, grid, 2.0)
    np.testing.assert_array_equal(summed, parts)  # the sum, not a new one
    scale = np.abs(own["complex"]).max()
    np.testing.assert_allclose(summed, own["complex"], rtol=1e-12, atol=1e-13 * scale)
    maps.clear_kept_maps()
    whole = maps.coulomb_on_outer_layer(a, grid, 2.0)
    other = maps.coulomb_on_outer_layer(first, grid, 2.0)
    got = maps.coulomb_on_outer_layer(second, grid, 2.0)
    np.testing.assert_array_equal(got, whole - other)
    np.testing.assert_allclose(got, own["second"], rtol=1e-12, atol=1e-12 * scale)
    # the same charges again: the kept values; another ε_c: its own sum
    np.testing.assert_array_equal(maps.coulomb_on_outer_layer(second, grid, 2.0), got)
    np.testing.assert_allclose(maps.coulomb_on_outer_layer(second, grid, 4.0),
                               0.5 * own["second"], rtol=1e-12)  # fmt: skip
    maps.clear_kept_maps()


def test_a_homogeneous_medium_solves_the_same_with_phi_c_on_the_outer_layer(rng):
    """ε_in = ε_out = ε_c and no salt: b never reads φ_c inside, so φ_rf is the same.

    "sdh" values (one screened sphere less the exact sum) leave a φ_rf to solve for; "mdh"
    ones would make it zero.
    """
    kind = "sdh"
    atoms = _homogeneous_atoms(rng)
    grid = pb.Grid((21, 19, 23), spacing=0.6, origin=(-6.0, -5.4, -6.6))
    kw = {"eps_in": 4.0, "eps_out": 4.0, "boundary_kind": kind, "maps_backend": "cpu"}
    full = maps.build_maps(atoms, grid, **kw)
    outer = maps.build_maps(atoms, grid, coulomb="outer", **kw)
    assert np.all(outer.phi_coulomb[1:-1, 1:-1, 1:-1] == 0.0)
    results = [pb.solve(pb.Problem.from_maps(m), rtol=1e-10) for m in (full, outer)]
    scale = np.abs(results[0].phi_rf).max()
    assert scale > 0  # the boundary is not φ_c's own: φ_rf is not trivially zero
    # the full map is the multilevel sum (within 1e-6 of its largest value), the outer the direct
    assert np.abs(results[0].phi_rf - results[1].phi_rf).max() <= 1e-5 * scale
    given = maps.build_maps(atoms, grid, coulomb="outer", dirichlet_values=full.boundary_values,
                            **kw)  # fmt: skip
    assert np.all(given.phi_coulomb == 0.0)  # given Dirichlet values: φ_c is not read at all


def test_coulomb_outer_is_refused_where_phi_c_enters_the_right_hand_side(rng):
    atoms = _homogeneous_atoms(rng)
    grid = pb.Grid((15, 15, 15), spacing=0.8, origin=(-5.6, -5.6, -5.6))
    for bad in ({"eps_in": 2.0, "eps_out": 78.5}, {"eps_in": 4.0, "eps_out": 4.0,
                                                  "ionic_strength": 0.1}):  # fmt: skip
        with pytest.raises(pb.InputError, match="homogeneous medium without salt"):
            maps.build_maps(atoms, grid, coulomb="outer", maps_backend="cpu", **bad)
    with pytest.raises(pb.InputError, match="'full' or 'outer'"):
        maps.build_maps(atoms, grid, coulomb="inner", eps_in=4.0, eps_out=4.0)
