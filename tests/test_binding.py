"""Binding energies on one grid (pbsolver.molecule.binding) against independent references.

References: three separate ``pb.solvate`` calls on the same grid, a float64 pair loop for the
receptor–ligand Coulomb energy, ``pb.sasa`` of the three species, the symmetry of ΔG under
swapping the roles, and the screened limit of a far ligand.
"""

import json

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule.maps import COULOMB_KJ

EPS_IN, EPS_OUT = 2.0, 78.5
FAST = {"spacing": 0.7, "margin": 4.0, "backend": "cpu", "eps_in": EPS_IN, "eps_out": EPS_OUT}


def random_complex(seed, n_rec=14, n_lig=7, gap=5.0, neutral=False):
    """Two clusters of random atoms (random charges and radii); ligand atoms last."""
    rng = np.random.default_rng(seed)
    rec = rng.normal(0.0, 2.0, (n_rec, 3))
    lig = rng.normal(0.0, 1.1, (n_lig, 3)) + [0.0, 0.0, gap]
    q = rng.uniform(-0.9, 0.9, n_rec + n_lig)
    if neutral:
        q[:n_rec] -= q[:n_rec].mean()
        q[n_rec:] -= q[n_rec:].mean()
    r = rng.uniform(1.2, 2.0, n_rec + n_lig)
    resnames = [f"R{i // 4}" for i in range(n_rec)] + ["LIG"] * n_lig
    resids = [i // 4 + 1 for i in range(n_rec)] + [1] * n_lig
    atoms = pb.Atoms(np.vstack([rec, lig]), q, r, resnames=resnames, resids=resids)
    return atoms, np.arange(n_rec, n_rec + n_lig)


@pytest.fixture(scope="module")
def system():
    atoms, lig = random_complex(7)
    result = pb.binding_energy(atoms, lig, decompose="residue", ionic_strength=0.1, **FAST)
    return atoms, lig, result


def three_solvate(atoms, lig, grid, **physics):
    rec = np.setdiff1d(np.arange(len(atoms)), lig)
    opts = {k: v for k, v in FAST.items() if k not in ("spacing", "margin")}
    return [
        pb.solvate(a, problem_options={"grid": grid}, **opts, **physics)
        for a in (atoms, atoms[rec], atoms[lig])
    ]


def test_polar_terms_match_three_solvate_calls_on_the_same_grid(system):
    atoms, lig, b = system
    c, r, l_ = three_solvate(atoms, lig, b.grid, ionic_strength=0.1)
    assert b.polar["complex"] == pytest.approx(c.energy, rel=1e-6)
    assert b.polar["receptor"] == pytest.approx(r.energy, rel=1e-6)
    assert b.polar["ligand"] == pytest.approx(l_.energy, rel=1e-6)
    assert b.delta_polar == pytest.approx(c.energy - r.energy - l_.energy, rel=1e-6)
    # the electrostatic binding energy is the difference of solvate's totals (APBS convention)
    assert b.delta_electrostatic == pytest.approx(c.total - r.total - l_.total, rel=1e-6)
    # per atom: ½ qᵢ (φ_rf,complex − φ_rf,alone) from solvate's own potentials
    rec = np.setdiff1d(np.arange(len(atoms)), lig)
    alone = np.empty(len(atoms))
    alone[rec], alone[lig] = r.potentials, l_.potentials
    expect = 0.5 * atoms.charges * (c.potentials - alone)
    np.testing.assert_allclose(b.per_atom_terms["polar"], expect, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("surface", ["smol", "vdw"])
def test_other_surfaces_match_solvate(surface):
    atoms, lig = random_complex(11, n_rec=10, n_lig=5)
    b = pb.binding_energy(atoms, lig, surface=surface, nonpolar=False, **FAST)
    c, r, l_ = three_solvate(atoms, lig, b.grid, surface=surface)
    assert b.delta_polar == pytest.approx(c.energy - r.energy - l_.energy, rel=1e-6)
    assert b.delta_nonpolar == 0.0 and b.delta_sasa is None
    assert b.total == pytest.approx(b.delta_polar + b.delta_coulomb, rel=1e-12)


def test_decomposition_sums_to_the_total(system):
    atoms, lig, b = system
    assert b.total == pytest.approx(b.delta_polar + b.delta_coulomb + b.delta_nonpolar)
    assert b.per_atom.shape == (len(atoms),)
    assert b.per_atom.sum() == pytest.approx(b.total, rel=1e-10, abs=1e-9)
    assert sum(e for *_, e in b.per_residue) == pytest.approx(b.total, rel=1e-10, abs=1e-9)
    terms = b.per_atom_terms
    assert terms["polar"].sum() == pytest.approx(b.delta_polar, rel=1e-10, abs=1e-9)
    assert terms["coulomb"].sum() == pytest.approx(b.delta_coulomb, rel=1e-10, abs=1e-9)
    assert terms["nonpolar"].sum() == pytest.approx(b.delta_nonpolar, rel=1e-10, abs=1e-9)
    # rows: the receptor's residues R0..R3, then the ligand as its own residue
    assert [(n, i) for n, i, _ in b.per_residue] == [("R0", 1), ("R1", 2), ("R2", 3),
                                                     ("R3", 4), ("LIG", 1)]  # fmt: skip
    assert b.residue_parts == ("receptor",) * 4 + ("ligand",)
    rows = zip(b.per_residue, b.residue_parts, strict=True)
    lig_rows = [e for (_, _, e), part in rows if part == "ligand"]
    assert lig_rows[0] == pytest.approx(b.per_atom[lig].sum())
    d = json.loads(json.dumps(b.as_dict()))
    assert d["total"] == b.total and len(d["per_residue"]) == 5
    assert [s["converged"] for s in d["solves"]] == [True] * 3


def test_nonpolar_term_is_gamma_delta_sasa_minus_offset(system):
    atoms, lig, b = system
    rec = np.setdiff1d(np.arange(len(atoms)), lig)
    d_sasa = pb.sasa(atoms).sum() - pb.sasa(atoms[rec]).sum() - pb.sasa(atoms[lig]).sum()
    assert d_sasa < 0  # burial
    assert b.delta_sasa == pytest.approx(d_sasa, rel=1e-12)
    # each species' nonpolar_energy (γ·SASA + b), subtracted
    g = [pb.nonpolar_energy(a) for a in (atoms, atoms[rec], atoms[lig])]
    assert b.delta_nonpolar == pytest.approx(g[0] - g[1] - g[2], rel=1e-12)


def test_swapping_receptor_and_ligand_leaves_delta_g_unchanged(system):
    atoms, lig, b = system
    rec = np.setdiff1d(np.arange(len(atoms)), lig)
    s = pb.binding_energy(atoms, ligand=rec, receptor=lig, grid=b.grid, ionic_strength=0.1,
                          decompose="atom", **FAST)  # fmt: skip
    assert s.total == pytest.approx(b.total, rel=1e-9)
    assert s.delta_polar == pytest.approx(b.delta_polar, rel=1e-9)
    np.testing.assert_allclose(s.per_atom, b.per_atom, rtol=1e-9, atol=1e-9)


def test_coulomb_term_against_a_float64_pair_loop(system):
    atoms, lig, b = system
    rec = np.setdiff1d(np.arange(len(atoms)), lig)
    e = 0.0
    for i in rec:
        for j in lig:
            d = float(np.linalg.norm(atoms.positions[i] - atoms.positions[j]))
            e += COULOMB_KJ * atoms.charges[i] * atoms.charges[j] / (EPS_IN * d)
    assert b.delta_coulomb == pytest.approx(e, rel=1e-12)
    # half of every pair to each partner: atom i carries ½ qᵢ Σ_j k qⱼ / (ε_in rᵢⱼ)
    i = int(lig[0])
    half = sum(
        0.5 * COULOMB_KJ * atoms.charges[i] * atoms.charges[j]
        / (EPS_IN * np.linalg.norm(atoms.positions[i] - atoms.positions[j]))
        for j in rec
    )  # fmt: skip
    assert b.per_atom_terms["coulomb"][i] == pytest.approx(half, rel=1e-12)


def test_a_far_ligand_has_no_binding_energy():
    # neutral parts 30 Å apart on one large grid: the desolvation and the Coulomb term vanish
    atoms, lig = random_complex(3, n_rec=10, n_lig=5, gap=30.0, neutral=True)
    b = pb.binding_energy(atoms, lig, spacing=0.8, margin=4.0, backend="cpu", eps_in=EPS_IN,
                          eps_out=EPS_OUT, nonpolar=False)  # fmt: skip
    near, _ = random_complex(3, n_rec=10, n_lig=5, gap=5.0, neutral=True)
    bn = pb.binding_energy(near, lig, spacing=0.8, margin=4.0, backend="cpu", eps_in=EPS_IN,
                           eps_out=EPS_OUT, nonpolar=False)  # fmt: skip
    assert abs(b.delta_polar) < 0.01 * abs(b.polar["ligand"])
    assert abs(b.delta_polar) < 0.05 * abs(bn.delta_polar)
    assert abs(b.delta_electrostatic) < 0.05 * abs(bn.delta_electrostatic)


def test_binding_energies_equal_binding_energy_frame_by_frame(monkeypatch):
    import pbsolver.solving.batched as batched

    atoms, lig = random_complex(5, n_rec=10, n_lig=5)
    rng = np.random.default_rng(2)
    frames = atoms.positions[None] + rng.normal(0.0, 0.3, (3, len(atoms), 3))
    calls = []
    solve_batch = batched.solve_batch

    def counting(problems, **kw):
        calls.append(len(problems))
        return solve_batch(problems, **kw)

    monkeypatch.setattr(batched, "solve_batch", counting)
    out = pb.binding_energies(atoms, frames, lig, decompose="atom", chunk=2, **FAST)
    monkeypatch.undo()
    assert calls == [6, 3]  # one solve_batch call per chunk of frames, three problems a frame
    assert len(out) == 3
    assert len({o.grid.shape for o in out}) == 1
    for f, o in enumerate(out):
        one = pb.binding_energy(atoms.with_positions(frames[f]), lig, grid=o.grid,
                                decompose="atom", **FAST)  # fmt: skip
        assert o.total == pytest.approx(one.total, rel=1e-9)
        assert o.delta_polar == pytest.approx(one.delta_polar, rel=1e-9)
        np.testing.assert_allclose(o.per_atom, one.per_atom, rtol=1e-9, atol=1e-9)
        # every frame's grid is centred on that frame's complex
        lo, hi = atoms.with_positions(frames[f]).bounds()
        np.testing.assert_allclose(o.grid.center, 0.5 * (lo + hi), atol=1e-9)


def test_nonlinear_totals_match_solvate_and_refuse_decomposition():
    atoms, lig = random_complex(9, n_rec=8, n_lig=4)
    phys = {"ionic_strength": 0.15, "nonlinear": True}
    b = pb.binding_energy(atoms, lig, nonpolar=False, **phys, **FAST)
    c, r, l_ = three_solvate(atoms, lig, b.grid, **phys)
    assert c.terms is not None  # the nonlinear equation was solved
    assert b.delta_polar == pytest.approx(c.energy - r.energy - l_.energy, rel=1e-6)
    with pytest.raises(pb.InputError, match="decompose"):
        pb.binding_energy(atoms, lig, decompose="atom", **phys, **FAST)


@pytest.mark.parametrize(
    ("ligand", "receptor", "match"),
    [
        ([], None, "empty"),
        (np.zeros(21, bool), None, "empty"),
        (np.ones(5, bool), None, "shape"),
        ([25], None, "out of range"),
        ([-1], None, "out of range"),
        ([3, 3], None, "more than once"),
        ([0.5], None, "mask or integer"),
        (list(range(21)), None, "receptor is empty"),
        ([14, 15], [15, 16], "overlap"),
        ([14], [], "empty"),
    ],
)
def test_bad_selections_are_refused(ligand, receptor, match):
    atoms, _ = random_complex(1)
    with pytest.raises(pb.InputError, match=match):
        pb.binding_energy(atoms, ligand, receptor, **FAST)


def test_bad_options_are_refused():
    atoms, lig = random_complex(1)
    bare = pb.Atoms(atoms.positions, atoms.charges, atoms.radii)
    with pytest.raises(pb.InputError, match="resids"):
        pb.binding_energy(bare, lig, decompose="residue", **FAST)
    with pytest.raises(pb.InputError, match="decompose"):
        pb.binding_energy(atoms, lig, decompose="chain", **FAST)
    with pytest.raises(pb.InputError, match="frames"):
        pb.binding_energies(atoms, np.zeros((2, 3, 3)), lig, **FAST)
    with pytest.raises(pb.InputError, match="chunk"):
        pb.binding_energies(atoms, atoms.positions[None], lig, chunk=0, **FAST)
    with pytest.raises(pb.InputError, match="solver"):
        pb.binding_energy(atoms, lig, solver="sor", **FAST)
    with pytest.raises(pb.InputError, match="give grid"):
        pb.binding_energies(atoms, atoms.positions[None], lig, shape=(9, 9, 9),
                            grid=pb.Grid((9, 9, 9), 0.5), **FAST)  # fmt: skip
    with pytest.raises(pb.InputError, match="outside"):
        pb.binding_energy(atoms, lig, grid=pb.Grid((9, 9, 9), 0.5), **FAST)
