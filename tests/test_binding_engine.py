"""Binding energies through the stacked frame engine (engine="stacked") against the general path.

The reference is the general path itself (build_maps + solve_batch, then reaction_field_terms)
on the same grids: the engine's edge fractions are the same, so with both solves at rtol 1e-9 in
float64 the species' polar energies, ΔG and the per-atom terms agree to ~1e-6 relative.
"""

import numpy as np
import pytest

import pbsolver as pb

TIGHT = {"rtol": 1e-9, "dtype": np.float64}
SHAPE = (37, 41, 33)  # odd, different counts: the stack's padding plane and per-axis strides


def random_complex(seed, n_rec=40, n_lig=8):
    """A random receptor cluster and a ligand cluster beside it (ligand atoms last)."""
    rng = np.random.default_rng(seed)
    rec = rng.normal(0.0, 2.2, (n_rec, 3))
    lig = rng.normal(0.0, 1.0, (n_lig, 3)) + [0.0, 5.0, 0.0]
    q = rng.uniform(-0.9, 0.9, n_rec + n_lig)
    r = rng.uniform(1.2, 2.0, n_rec + n_lig)
    return pb.Atoms(np.vstack([rec, lig]), q, r), np.arange(n_rec, n_rec + n_lig), rng


def frames_of(atoms, rng, n):
    return np.stack([atoms.positions + rng.normal(0.0, 0.3, atoms.positions.shape)
                     for _ in range(n)])  # fmt: skip


@pytest.mark.parametrize(
    ("surface", "salt", "kind"),
    # the SES cases compile the engine's CPU SES kernels in this file's worker too (minutes in
    # a fresh install; test_frames_ses.py checks those kernels): slow
    [("vdw", 0.15, "mdh"), pytest.param("mol", 0.0, "mdh", marks=pytest.mark.slow),
     pytest.param("mol", 0.15, "zero", marks=pytest.mark.slow)],
)  # fmt: skip
def test_stacked_equals_general(surface, salt, kind):
    atoms, lig, rng = random_complex(3)
    frames = frames_of(atoms, rng, 3 if surface == "vdw" else 2)
    common = dict(spacing=0.6, shape=SHAPE, eps_in=2.0, eps_out=80.0, ionic_strength=salt,
                  surface=surface, boundary_kind=kind, backend="cpu", solver=TIGHT,
                  decompose="atom")  # fmt: skip
    # chunks of 2: the engines serve a second chunk (of another size for three frames)
    got = pb.binding_energies(atoms, frames, lig, engine="stacked", chunk=2, **common)
    ref = pb.binding_energies(atoms, frames, lig, engine="general", **common)
    for g, r in zip(got, ref, strict=True):
        assert [s["engine"] for s in g.solves] == ["stacked"] * 3
        assert [s["engine"] for s in r.solves] == ["general"] * 3
        assert all(s["converged"] and s["residual"] <= 1e-9 for s in g.solves)
        assert g.grid.shape == SHAPE and g.grid.origin == r.grid.origin
        for name in ("complex", "receptor", "ligand"):
            assert g.polar[name] == pytest.approx(r.polar[name], rel=1e-6)
        scale = abs(r.polar["complex"])
        assert abs(g.delta_polar - r.delta_polar) < 2e-6 * scale
        assert abs(g.total - r.total) < 2e-6 * scale
        assert g.delta_coulomb == r.delta_coulomb and g.delta_nonpolar == r.delta_nonpolar
        polar = r.per_atom_terms["polar"]
        np.testing.assert_allclose(g.per_atom_terms["polar"], polar, rtol=0,
                                   atol=1e-6 * np.abs(polar).max())  # fmt: skip
        assert g.per_atom.sum() == pytest.approx(g.total, rel=1e-9, abs=1e-9)
    # the per-atom terms against φ_rf sampled by reaction_field_terms on a general solve
    single = pb.binding_energy(atoms.with_positions(frames[0]), lig, grid=ref[0].grid,
                               **{k: v for k, v in common.items() if k != "shape"})  # fmt: skip
    assert single.polar["complex"] == pytest.approx(got[0].polar["complex"], rel=1e-6)


def test_one_fixed_grid_and_auto():
    atoms, lig, rng = random_complex(5, n_rec=20, n_lig=5)
    frames = frames_of(atoms, rng, 2)
    grid = pb.Grid((33, 35, 37), spacing=0.7, origin=(-11.0, -10.0, -12.0))
    common = dict(grid=grid, eps_in=2.0, surface="vdw", backend="cpu", solver=TIGHT)
    got = pb.binding_energies(atoms, frames, lig, engine="stacked", **common)
    ref = pb.binding_energies(atoms, frames, lig, **common)  # "auto" on the CPU: general
    assert [s["engine"] for s in ref[0].solves] == ["general"] * 3
    for g, r in zip(got, ref, strict=True):
        assert g.grid is grid
        assert g.delta_polar == pytest.approx(r.delta_polar, rel=1e-5)
        assert g.polar["complex"] == pytest.approx(r.polar["complex"], rel=1e-6)
    # atoms on or beyond the fixed grid's outer layer, as the general path refuses them
    far = frames.copy()
    far[1, 0] = [30.0, 0.0, 0.0]
    with pytest.raises(pb.InputError, match="outside the grid"):
        pb.binding_energies(atoms, far, lig, engine="stacked", **common)


def test_refusals_and_strict():
    atoms, lig, _ = random_complex(7, n_rec=10, n_lig=3)
    fast = dict(spacing=1.0, margin=2.0, backend="cpu", engine="stacked")
    for bad, match in [({"surface": "svdw"}, "surface='svdw'"),
                       ({"nonlinear": True, "ionic_strength": 0.1}, "nonlinear=True"),
                       ({"boundary_kind": "sdh"}, "boundary_kind='sdh'"),
                       ({"solver": {"method": "mgcg"}}, "method='mgcg'")]:  # fmt: skip
        with pytest.raises(pb.InputError, match=match):
            pb.binding_energy(atoms, lig, **fast, **bad)
    with pytest.raises(pb.InputError, match="engine must be one of"):
        pb.binding_energy(atoms, lig, spacing=0.8, engine="fast")
    # "auto" falls back to the general path where the stacked engine does not apply
    b = pb.binding_energy(atoms, lig, spacing=1.0, margin=2.0, backend="cpu", surface="svdw",
                          nonpolar=False, engine="auto")  # fmt: skip
    assert b.solves[0]["engine"] == "general"
    with pytest.raises(pb.ConvergenceError):
        pb.binding_energy(atoms, lig, **fast, surface="vdw", ionic_strength=0.15,
                          solver={**TIGHT, "maxiter": 1, "rtol": 1e-12})  # fmt: skip


def test_mmpbsa_options_pass_the_engine():
    from pbsolver.jobs.mmpbsa import MMPBSAOptions

    opts = MMPBSAOptions(engine="stacked")
    assert opts.binding_kwargs()["engine"] == "stacked"
    assert opts.key_fields() == MMPBSAOptions().key_fields()  # how, not what: not in the key
    with pytest.raises(pb.InputError, match="engine must be one of"):
        MMPBSAOptions(engine="gpu")


@pytest.mark.slow  # the CLI's float32 solves compile their own kernel variants
def test_mmpbsa_cli_engine_stacked_matches_general(tmp_path):
    pytest.importorskip("MDAnalysis")
    from click.testing import CliRunner

    from pbsolver.cli import main
    from pbsolver.jobs import mmpbsa as job

    args = [str(pb.data.path("peptide.pqr")), str(pb.data.path("peptide.dcd")), "--ligand",
            "resid 10", "--spacing", "1.0", "--margin", "3", "--rtol", "1e-8", "--backend",
            "cpu", "--stop", "2", "--batch", "2"]  # fmt: skip
    rec = {}
    for engine in ("general", "stacked"):
        out = tmp_path / f"{engine}.h5"
        run = CliRunner().invoke(main, ["-q", "mmpbsa", *args, "--engine", engine, "-o", str(out)],
                                 catch_exceptions=False)  # fmt: skip
        assert run.exit_code == 0, run.output
        rec[engine] = job.read_results(out)[0]
    scale = np.abs(rec["general"]["polar_complex"]).max()
    for term in job.ENERGY_TERMS:
        np.testing.assert_allclose(rec["stacked"][term], rec["general"][term], rtol=0,
                                   atol=1e-5 * scale)  # fmt: skip


def test_a_chunk_that_does_not_fit_is_refused(monkeypatch):
    atoms, lig, rng = random_complex(9, n_rec=10, n_lig=3)
    monkeypatch.setenv("PBSOLVER_MEMORY_LIMIT", "1M")
    with pytest.raises(pb.InputError, match="stacked engine.*smaller chunk"):
        pb.binding_energies(atoms, frames_of(atoms, rng, 2), lig, spacing=0.6, backend="cpu",
                            engine="stacked", chunk=2)  # fmt: skip


def test_coulomb_interaction_is_the_complex_minus_its_parts():
    from pbsolver.molecule.energy import coulomb_energy, coulomb_interaction
    from pbsolver.molecule.maps import COULOMB_KJ

    atoms, lig, rng = random_complex(13, n_rec=30, n_lig=6)
    q = atoms.charges.copy()
    q[[2, 31]] = 0.0  # uncharged atoms take no part
    atoms = pb.Atoms(atoms.positions, q, atoms.radii)
    rec = np.setdiff1d(np.arange(len(atoms)), lig)
    a, b = atoms[rec], atoms[lig]
    t_a, t_b = coulomb_interaction(a, b, 4.0, per_atom=True)
    pair = [COULOMB_KJ / 4.0 * a.charges[i] * b.charges[j]
            / np.linalg.norm(a.positions[i] - b.positions[j])
            for i in range(len(a)) for j in range(len(b))]  # fmt: skip
    assert coulomb_interaction(a, b, 4.0) == pytest.approx(sum(pair), rel=1e-12)
    assert t_a.sum() + t_b.sum() == pytest.approx(sum(pair), rel=1e-12)
    assert t_a.sum() == pytest.approx(t_b.sum(), rel=1e-12)  # each pair split evenly
    whole = coulomb_energy(atoms, 4.0, per_atom=True)
    np.testing.assert_allclose(t_a, whole[rec] - coulomb_energy(a, 4.0, per_atom=True),
                               rtol=0, atol=1e-9)  # fmt: skip
    np.testing.assert_allclose(t_b, whole[lig] - coulomb_energy(b, 4.0, per_atom=True),
                               rtol=0, atol=1e-9)  # fmt: skip
    clash = pb.Atoms(np.vstack([b.positions[:1], [[9.0, 9.0, 9.0]]]), [1.0, 0.0], [1.0, 1.0])
    with pytest.raises(pb.InputError, match="same position"):
        coulomb_interaction(b, clash)


@pytest.mark.gpu
def test_stacked_on_the_gpu_equals_the_cpu_general_path():
    """The stacked engine on CUDA (SES, salt, nonpolar areas counted while the GPU works)."""
    atoms, lig, rng = random_complex(11)
    frames = frames_of(atoms, rng, 3)
    common = dict(spacing=0.6, shape=SHAPE, eps_in=2.0, eps_out=80.0, ionic_strength=0.15,
                  surface="mol", solver=TIGHT, decompose="atom")  # fmt: skip
    got = pb.binding_energies(atoms, frames, lig, engine="stacked", backend="cuda", **common)
    ref = pb.binding_energies(atoms, frames, lig, engine="general", backend="cpu", **common)
    for g, r in zip(got, ref, strict=True):
        assert [s["engine"] for s in g.solves] == ["stacked"] * 3
        assert [s["backend"] for s in g.solves] == ["cuda"] * 3
        assert g.delta_sasa is not None and g.delta_sasa == r.delta_sasa
        assert g.delta_nonpolar == r.delta_nonpolar and g.delta_coulomb == r.delta_coulomb
        scale = abs(r.polar["complex"])
        assert abs(g.delta_polar - r.delta_polar) < 2e-6 * scale
        np.testing.assert_array_equal(g.per_atom_terms["nonpolar"], r.per_atom_terms["nonpolar"])
