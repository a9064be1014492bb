"""``pbsolver mmpbsa`` and BindingEnergyAnalysis on the shipped peptide trajectory.

The "complex" is the shipped peptide (149 atoms, 200 frames): residue 10 is the ligand, residues
1–9 the receptor. Coarse grids (1 Å, 3 Å margin, rtol 1e-4) and four frames keep the file fast;
the numbers are checked against direct :func:`pbsolver.binding_energy` calls and numpy, not
against stored values.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from click.testing import CliRunner

import pbsolver as pb
from pbsolver.cli import main
from pbsolver.jobs import mmpbsa as job
from pbsolver.molecule.binding import binding_energy
from pbsolver.molecule.maps import grid_for_atoms

pytest.importorskip("MDAnalysis")

PQR = str(pb.data.path("peptide.pqr"))
PDB = str(pb.data.path("peptide.pdb"))
DCD = str(pb.data.path("peptide.dcd"))
LIGAND = "resid 10"
FRAMES = 4
OPTS = ["--spacing", "1.0", "--margin", "3", "--rtol", "1e-4", "--backend", "cpu"]
OPTS += ["--stop", str(FRAMES)]


def _run(args, expect=0):
    result = CliRunner().invoke(main, ["-q", "mmpbsa", *args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run: its records and its CSV (2 blocks of 2 frames)."""
    d = tmp_path_factory.mktemp("mmpbsa")
    out, table = d / "ref.h5", d / "ref.csv"
    _run([PQR, DCD, "--ligand", LIGAND, *OPTS, "--batch", "2", "--per-residue",
          "-o", str(out), "--csv", str(table), "--blocks", "2"])  # fmt: skip
    rec, attrs = job.read_results(out)
    return rec, attrs, table


def test_cli_matches_direct_binding_energies(reference):
    rec, attrs, _ = reference
    assert rec["frame"].tolist() == list(range(FRAMES))
    terms = rec["delta_polar"] + rec["delta_coulomb"] + rec["delta_nonpolar"]
    np.testing.assert_allclose(rec["delta_total"], terms, rtol=1e-12)
    np.testing.assert_allclose(rec["per_residue"].sum(axis=1), rec["delta_total"], atol=1e-8)
    assert rec["per_residue"].shape[1] == 10  # nine receptor residues and the ligand
    # the same frames through the library, on grids of the shape the run recorded
    import MDAnalysis as mda

    u = mda.Universe(PQR, DCD)
    atoms = pb.read_pqr(PQR)
    lig = u.select_atoms(LIGAND).indices
    for f in (0, 3):
        u.trajectory[f]
        grid = grid_for_atoms(
            atoms.with_positions(u.atoms.positions.astype(float)), 1.0, shape=attrs["grid_shape"]
        )
        direct = binding_energy(
            atoms.with_positions(u.atoms.positions.astype(float)),
            lig,
            grid=grid,
            backend="cpu",
            solver={"rtol": 1e-4},
        )
        assert rec["delta_total"][f] == pytest.approx(direct.total, rel=1e-6, abs=1e-6)
        assert rec["polar_complex"][f] == pytest.approx(direct.polar["complex"], rel=1e-6)
        assert rec["time"][f] == pytest.approx(u.trajectory[f].time)


def test_csv_is_block_average_of_the_frames(reference):
    rec, _, table = reference
    with open(table) as fh:
        rows = list(csv.DictReader(fh))
    by_term = {r["quantity"]: r for r in rows if r["quantity"] != "residue"}
    for name in job.ENERGY_TERMS:
        x = rec[name]
        blocks = x.reshape(2, 2).mean(axis=1)  # 4 frames, 2 blocks of 2, in frame order
        sem = blocks.std(ddof=1) / np.sqrt(2)
        assert float(by_term[name]["mean"]) == pytest.approx(x.mean(), abs=2e-6)
        assert float(by_term[name]["sem"]) == pytest.approx(sem, abs=2e-6)
        assert int(by_term[name]["n_blocks"]) == 2
    residues = [r for r in rows if r["quantity"] == "residue"]
    assert [int(r["resid"]) for r in residues] == list(range(1, 11))
    assert residues[-1]["part"] == "ligand"
    means = np.array([float(r["mean"]) for r in residues])
    np.testing.assert_allclose(means, rec["per_residue"].mean(axis=0), atol=2e-6)
    assert means.sum() == pytest.approx(rec["delta_total"].mean(), abs=1e-4)


def test_block_average_edge_cases():
    mean, sem, b = job.block_average([1.0, 2.0, 4.0], blocks=10)
    assert (mean, b) == (pytest.approx(7 / 3), 3)  # fewer frames than blocks: one frame each
    assert sem == pytest.approx(np.std([1, 2, 4], ddof=1) / np.sqrt(3))
    assert np.isnan(job.block_average([1.0])[1])
    with pytest.raises(pb.InputError):
        job.block_average([1.0, 2.0], blocks=1)


def test_resume_after_a_kill_recomputes_nothing_finished(reference, tmp_path, monkeypatch):
    from pbsolver.molecule import binding

    rec_ref = reference[0]
    real = binding.binding_energies
    calls = []

    def killed_on_second_batch(atoms, frames, *args, **kwargs):
        calls.append(len(frames))
        if len(calls) == 2:
            raise KeyboardInterrupt  # as a kill: nothing of this batch is written
        return real(atoms, frames, *args, **kwargs)

    monkeypatch.setattr(binding, "binding_energies", killed_on_second_batch)
    out = tmp_path / "run.h5"
    args = [PQR, DCD, "--ligand", LIGAND, *OPTS, "--batch", "2", "--per-residue", "-o", str(out)]
    _run(args, expect=130)  # "interrupted"
    assert not out.exists()
    parts = list((tmp_path / ".run.h5.parts").glob("*.h5"))
    assert len(parts) == 1  # the first batch survived

    def counted(atoms, frames, *args, **kwargs):
        calls.append(len(frames))
        return real(atoms, frames, *args, **kwargs)

    calls.clear()
    monkeypatch.setattr(binding, "binding_energies", counted)
    _run(args)
    assert sum(calls) == FRAMES - 2  # frames 0 and 1 were not computed again
    assert not (tmp_path / ".run.h5.parts").exists()
    rec, _ = job.read_results(out)
    for name in (*job.ENERGY_TERMS, "frame", "per_residue"):
        np.testing.assert_allclose(rec[name], rec_ref[name], rtol=1e-10, atol=1e-10)

    calls.clear()
    _run(args)  # all done: nothing computed
    assert calls == []


def test_changed_options_are_refused(reference, tmp_path):
    out = tmp_path / "run.h5"
    base = [PQR, DCD, "--ligand", LIGAND, "--spacing", "1.0", "--margin", "3", "--backend",
            "cpu", "--stop", "1", "-o", str(out)]  # fmt: skip
    _run(base)
    res = _run([*base[:4], "--spacing", "1.2", *base[6:]], expect=2)
    assert "spacing: 1.0 there, 1.2 now" in res.output
    res = _run([*base, "--ligand", "resid 9"], expect=2)  # another selection
    assert "other input files or selections" in res.output
    res = _run([*base, "--no-nonpolar", "--overwrite"])  # discarded on request
    rec, _ = job.read_results(out)
    assert np.all(rec["delta_nonpolar"] == 0)
    # a longer range with the same options adds frames to the same output
    _run([*base[:10], "--stop", "2", "--no-nonpolar", "-o", str(out)])
    assert job.read_results(out)[0]["frame"].tolist() == [0, 1]


def test_bad_inputs_are_clear(tmp_path):
    out = str(tmp_path / "x.h5")
    res = _run([PDB, DCD, "--ligand", LIGAND, "-o", out], expect=2)
    assert "no radii" in res.output and "--pqr" in res.output
    born = str(pb.data.path("born_ion.pqr"))
    res = _run([PDB, DCD, "--pqr", born, "--ligand", LIGAND, "-o", out], expect=2)
    assert "has 1 atoms" in res.output and "149" in res.output
    res = _run([PQR, DCD, "--ligand", "resname XYZ", "-o", out], expect=2)
    assert "selects no atom" in res.output
    res = _run([PQR, DCD, "--ligand", "resid 10 and", "-o", out], expect=2)
    assert "not a valid MDAnalysis selection" in res.output
    res = _run([PQR, DCD, "--ligand", "resid 10", "--receptor", "resid 9:10", "-o", out], expect=2)
    assert "must not overlap" in res.output
    res = _run([PQR, DCD, "--ligand", LIGAND, "--start", "500", "-o", out], expect=2)
    assert "no frame selected" in res.output


def test_pdb_topology_with_pqr_charges_and_radii(reference, tmp_path):
    ref_rec, ref_attrs, _ = reference
    out = tmp_path / "pdb.h5"
    shape = [str(n) for n in ref_attrs["grid_shape"]]
    _run([PDB, DCD, "--pqr", PQR, "--ligand", LIGAND, *OPTS[:-2], "--stop", "2",
          "--shape", *shape, "-o", str(out)])  # fmt: skip
    rec, _ = job.read_results(out)
    np.testing.assert_allclose(rec["delta_total"], ref_rec["delta_total"][:2], rtol=1e-10)


def test_analysis_class_matches_the_cli(reference):
    import MDAnalysis as mda

    from pbsolver.mdanalysis import BindingEnergyAnalysis

    rec, attrs, _ = reference
    u = mda.Universe(PQR, DCD)
    dg = BindingEnergyAnalysis(u.select_atoms(LIGAND), u.select_atoms("not resid 10"),
                               batch=4, per_residue=True, spacing=1.0, margin=3.0,
                               backend="cpu", solver={"rtol": 1e-4}).run(stop=FRAMES)  # fmt: skip
    assert dg.shape == tuple(attrs["grid_shape"])
    for name in job.ENERGY_TERMS:
        np.testing.assert_allclose(dg.results[name], rec[name], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dg.results.per_residue, rec["per_residue"], atol=1e-10)
    assert dg.results.residues["resid"] == list(range(1, 11))


@pytest.mark.slow
def test_worker_processes_give_the_same_numbers(reference, tmp_path):
    out = tmp_path / "w.h5"
    _run([PQR, DCD, "--ligand", LIGAND, *OPTS, "--batch", "1", "--per-residue", "--workers", "2",
          "-o", str(out)])  # fmt: skip
    rec, _ = job.read_results(out)
    for name in (*job.ENERGY_TERMS, "per_residue"):
        np.testing.assert_allclose(rec[name], reference[0][name], rtol=1e-10, atol=1e-10)
