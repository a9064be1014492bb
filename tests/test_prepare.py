"""Preparation: Atoms.from_structure (pdb2pqr, in process) and the ligand readers.

The reference of from_structure is pdb2pqr's own command line run on the same file
(``python -m pdb2pqr``); the structure is the shipped colipase (tests/data/prep, made by
make_prep_data.py). Those tests skip where pdb2pqr is not installed; the ligand tests do not
need it.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule.atoms import parse_pqr
from pbsolver.molecule.prepare import PreparationWarning, prepare_structure

DATA = Path(__file__).resolve().parent / "data" / "prep"
PDB = DATA / "colipase.pdb"
CIF = DATA / "colipase.cif"
GEMMI_CIF = DATA / "colipase_gemmi_style.cif"


def cli(path, tmp_path, *options):
    """Atoms from pdb2pqr's command line (a separate process, as a user would run it)."""
    out = tmp_path / f"{Path(path).name}.cli.pqr"
    proc = subprocess.run(
        [sys.executable, "-m", "pdb2pqr", *options, str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return pb.read_pqr(out)


def assert_same_atoms(a, b):
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.charges, b.charges)
    np.testing.assert_array_equal(a.radii, b.radii)
    assert list(a.names) == list(b.names)
    assert list(a.resnames) == list(b.resnames)
    assert list(a.resids) == list(b.resids)


def pdb_atoms():
    return [ln for ln in PDB.read_text().splitlines() if ln.startswith("ATOM")]


def write_pdb(path, records):
    path.write_text("\n".join([*records, "TER", "END", ""]))
    return path


def from_structure_quiet(path, **kw):
    """from_structure, failing on any warning (a clean structure needs no repair)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return pb.Atoms.from_structure(path, **kw)


# ---------------------------------------------------------------------- agreement with pdb2pqr
@pytest.fixture(scope="module")
def pdb2pqr():
    """pdb2pqr, or a skip where it is not installed (``pip install pbsolver[prep]``)."""
    return pytest.importorskip("pdb2pqr")


@pytest.fixture(scope="module")
def clean(pdb2pqr):
    """The shipped structure prepared with the defaults but no PROPKA (AMBER)."""
    return from_structure_quiet(PDB, ph=None)


@pytest.mark.parametrize(
    ("forcefield", "ph"),
    [
        ("AMBER", None),
        ("AMBER", 7.0),
        pytest.param("PARSE", 4.0, marks=pytest.mark.slow),
        pytest.param("CHARMM", None, marks=pytest.mark.slow),
    ],
)
def test_pdb_and_mmcif_match_the_command_line(tmp_path, capfd, forcefield, ph, pdb2pqr):
    options = [f"--ff={forcefield}"]
    if ph is not None:
        options += ["--titration-state-method=propka", f"--with-ph={ph}"]
    ref = cli(PDB, tmp_path, *options)
    capfd.readouterr()
    from_pdb = from_structure_quiet(PDB, forcefield=forcefield.lower(), ph=ph)
    from_cif = from_structure_quiet(CIF, forcefield=forcefield, ph=ph)
    assert capfd.readouterr().err == ""  # pdb2pqr's and PROPKA's logging is collected
    assert_same_atoms(from_pdb, ref)
    assert_same_atoms(from_cif, ref)
    assert len(ref) > 639 + 500  # hydrogens were added to the 639 heavy atoms
    assert ref.total_charge == pytest.approx(round(ref.total_charge), abs=1e-6)


@pytest.mark.slow
def test_mmcif_read_by_the_command_line_too(tmp_path, pdb2pqr):
    assert_same_atoms(cli(CIF, tmp_path, "--ff=AMBER"), cli(PDB, tmp_path, "--ff=AMBER"))


def test_propka_changes_protonation(pdb2pqr):
    """pH matters: at pH 3 the carboxylates take protons, so the net charge rises."""
    neutral = pb.Atoms.from_structure(PDB, ph=7.0)
    acidic = pb.Atoms.from_structure(PDB, ph=3.0)
    assert acidic.total_charge > neutral.total_charge + 2.5
    assert len(acidic) > len(neutral)


def test_mmcif_without_headers_and_long_label_chain(clean):
    """gemmi-style mmCIF (no _struct, label_asym_id 'Axp'): pdb2pqr's reader fails, ours reads."""
    assert_same_atoms(from_structure_quiet(GEMMI_CIF, ph=None), clean)


def test_gzipped_and_first_model_only(tmp_path, clean):
    gz = tmp_path / "colipase.cif.gz"
    text = CIF.read_text()
    # a second model, moved 50 Å: only the first is read
    site = [ln for ln in text.splitlines() if ln.startswith("ATOM ")]
    moved = []
    for ln in site:
        f = ln.split()
        f[10] = f"{float(f[10]) + 50.0:.3f}"
        f[-1] = "2"
        moved.append(" ".join(f))
    body = text.rstrip().rstrip("#").rstrip() + "\n" + "\n".join(moved) + "\n#\n"
    with gzip.open(gz, "wt") as fh:
        fh.write(body)
    assert_same_atoms(pb.Atoms.from_structure(gz, ph=None), clean)


def test_blank_lines_do_not_truncate(tmp_path, clean):
    """pdb2pqr's PDB reader stops at the first blank line; the whole file is read here."""
    records = pdb_atoms()
    path = tmp_path / "blank.pdb"
    path.write_text("\n".join([*records[:300], "", *records[300:], "END", ""]))
    assert_same_atoms(pb.Atoms.from_structure(path, ph=None), clean)


# ---------------------------------------------------------------------- repairs and refusals
def test_missing_heavy_atoms_are_rebuilt_and_reported(tmp_path, clean):
    gone = {("LYS", "24", "NZ"), ("LYS", "24", "CE"), ("GLU", "64", "OE2")}
    records = [
        ln for ln in pdb_atoms() if (ln[17:20], ln[22:26].strip(), ln[12:16].strip()) not in gone
    ]
    path = write_pdb(tmp_path / "missing.pdb", records)
    with pytest.warns(PreparationWarning, match=r"atoms: LYS A24: CE NZ; GLU A64: OE2$"):
        atoms = pb.Atoms.from_structure(path, ph=None)
    ref = cli(path, tmp_path, "--ff=AMBER")  # the command line rebuilds them the same way
    assert_same_atoms(atoms, ref)
    assert len(atoms) == len(clean)
    np.testing.assert_array_equal(atoms.charges, clean.charges)
    moved = np.linalg.norm(atoms.positions - clean.positions, axis=1)
    rebuilt = np.isin(atoms.names, ["NZ", "CE", "OE2"]) & np.isin(atoms.resids, [24, 64])
    assert moved[rebuilt].max() < 3.0  # rebuilt near where they were (side-chain rotamers)


def test_too_many_missing_heavy_atoms(tmp_path, pdb2pqr):
    records = [ln for ln in pdb_atoms() if ln[12:16].strip() not in ("CB", "CG", "OG", "CD")]
    path = write_pdb(tmp_path / "stripped.pdb", records)
    with pytest.raises(pb.InputError, match=r"heavy atoms are missing; pdb2pqr rebuilds at most"):
        pb.Atoms.from_structure(path, ph=None)


LIGAND = [
    "HETATM 9001  C1  LIG B 200      10.000  10.000  10.000  1.00  0.00           C  ",
    "HETATM 9002  O1  LIG B 200      11.200  10.000  10.000  1.00  0.00           O  ",
]


def test_unknown_residues_refused_or_left_out(tmp_path, pdb2pqr):
    path = write_pdb(tmp_path / "ligand.pdb", pdb_atoms() + LIGAND)
    with pytest.raises(pb.InputError, match=r"no AMBER parameters for residue\(s\) LIG B200"):
        pb.Atoms.from_structure(path, ph=None)
    with pytest.warns(PreparationWarning, match="left out"):
        atoms = pb.Atoms.from_structure(path, ph=None, allow_unknown=True)
    assert_same_atoms(atoms, cli(path, tmp_path, "--ff=AMBER"))  # pdb2pqr drops them too
    assert "LIG" not in set(atoms.resnames)


def test_unknown_residue_inside_the_chain(tmp_path, pdb2pqr):
    records = [ln[:17] + "XYZ" + ln[20:] if ln[22:26].strip() == "30" else ln for ln in pdb_atoms()]
    path = write_pdb(tmp_path / "xyz.pdb", records)
    with pytest.raises(pb.InputError, match=r"XYZ A30 \(N CA C O CB"):
        pb.Atoms.from_structure(path, ph=None)


def test_only_unknown_residues(tmp_path, pdb2pqr):
    path = write_pdb(tmp_path / "only_ligand.pdb", LIGAND)
    with pytest.raises(pb.InputError, match="pdb2pqr could not prepare"):
        pb.Atoms.from_structure(path, ph=None)


def test_alternate_locations(tmp_path, clean):
    records = []
    for ln in pdb_atoms():
        if ln[17:20] == "SER" and ln[22:26].strip() == "20" and ln[12:16].strip() in ("CB", "OG"):
            x = float(ln[30:38])
            records.append(ln[:16] + "A" + ln[17:54] + "  0.60" + ln[60:])
            records.append(
                ln[:16] + "B" + ln[17:30] + f"{x + 0.5:8.3f}" + ln[38:54] + "  0.40" + ln[60:]
            )
        else:
            records.append(ln)
    path = write_pdb(tmp_path / "alt.pdb", records)
    side = (clean.resids == 20) & np.isin(clean.names, ["CB", "OG"])
    with pytest.warns(PreparationWarning, match="SER A20: kept A of A B"):
        first = pb.Atoms.from_structure(path, ph=None)
    np.testing.assert_array_equal(first.positions[side], clean.positions[side])
    with pytest.warns(PreparationWarning, match="kept B of A B"):
        second = pb.Atoms.from_structure(path, ph=None, altloc="B")
    np.testing.assert_allclose(second.positions[side, 0], clean.positions[side, 0] + 0.5)
    np.testing.assert_array_equal(second.charges, clean.charges)
    with pytest.raises(
        pb.InputError, match=r"no alternate location 'C' \(the file has \['A', 'B'\]\)"
    ):
        pb.Atoms.from_structure(path, ph=None, altloc="C")


def test_alternate_residues_at_one_position(tmp_path, clean):
    """Microheterogeneity (ASER / BALA at residue 20): one residue survives, not both."""
    records = []
    for ln in pdb_atoms():
        if ln[22:26].strip() == "20":
            records.append(ln[:16] + "A" + ln[17:])
            if ln[12:16].strip() != "OG":
                records.append(ln[:16] + "BALA" + ln[20:])
        else:
            records.append(ln)
    path = write_pdb(tmp_path / "micro.pdb", records)
    with pytest.warns(PreparationWarning, match="SER/ALA A20: kept A of A B"):
        first = pb.Atoms.from_structure(path, ph=None)
    assert_same_atoms(first, clean)
    with pytest.warns(PreparationWarning, match="kept B of A B"):
        second = pb.Atoms.from_structure(path, ph=None, altloc="B")
    assert set(second.resnames[second.resids == 20]) == {"ALA"}
    assert len(second) == len(clean) - 1  # OG and its H gone, the ALA's third HB added


def test_water_dropped_unless_kept(tmp_path, clean):
    water = "HETATM 9001  O   HOH W 301      30.000  30.000  30.000  1.00  0.00           O  "
    path = write_pdb(tmp_path / "water.pdb", [*pdb_atoms(), water])
    dry = prepare_structure(path, ph=None)
    assert dry.waters_dropped == 1
    assert_same_atoms(parse_pqr(dry.pqr_lines), clean)
    wet = pb.Atoms.from_structure(path, ph=None, keep_water=True)
    assert np.sum(np.isin(wet.resnames, ["HOH", "WAT"])) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"forcefield": "OPLS"}, "forcefield must be one of"),
        ({"ph": 15.0}, "ph must be between 0 and 14"),
        ({"ph": "seven"}, "ph must be a number"),
        ({"altloc": "AB"}, "altloc must be 'first' or one letter"),
    ],
)
def test_bad_options(kwargs, message, pdb2pqr):
    with pytest.raises(pb.InputError, match=message):
        pb.Atoms.from_structure(PDB, **kwargs)


def test_bad_files(tmp_path, pdb2pqr):
    with pytest.raises(FileNotFoundError):
        pb.Atoms.from_structure(tmp_path / "1abc.pdb")  # never fetched from the network
    records = pdb_atoms()
    records[5] = records[5][:40] + "abc" + records[5][43:]
    with pytest.raises(pb.InputError, match=r"bad\.pdb, line 6: coordinates are not numbers"):
        pb.Atoms.from_structure(write_pdb(tmp_path / "bad.pdb", records), ph=None)
    empty = tmp_path / "empty.cif"
    empty.write_text("data_x\n_entry.id X\n")
    with pytest.raises(pb.InputError, match="no _atom_site loop"):
        pb.Atoms.from_structure(empty, ph=None)
    nothing = write_pdb(tmp_path / "nothing.pdb", ["REMARK nothing"])
    with pytest.raises(pb.InputError, match="no ATOM or HETATM records"):
        pb.Atoms.from_structure(nothing, ph=None)


# ---------------------------------------------------------------------- ligands
MOL2 = DATA / "acetate.mol2"
SDF = DATA / "acetate.sdf"
ACETATE_Q = [-0.1766, 0.7919, -0.8182, -0.8182, 0.0070, 0.0070, 0.0071]
ACETATE_XYZ = [
    [0.0, 0.0, 0.0],
    [1.52, 0.0, 0.0],
    [2.15, 1.08, 0.0],
    [2.15, -1.08, 0.0],
    [-0.36, 1.03, 0.0],
    [-0.36, -0.51, 0.89],
    [-0.36, -0.51, -0.89],
]
BONDI_CCOOHHH = [1.70, 1.70, 1.52, 1.52, 1.20, 1.20, 1.20]  # Bondi (1964): C, O, H


def test_mol2_charges_positions_radii():
    lig = pb.Atoms.from_mol2(MOL2)
    np.testing.assert_array_equal(lig.charges, ACETATE_Q)
    np.testing.assert_array_equal(lig.positions, ACETATE_XYZ)
    np.testing.assert_array_equal(lig.radii, BONDI_CCOOHHH)
    assert lig.total_charge == pytest.approx(-1.0, abs=1e-12)
    assert list(lig.names) == ["C1", "C2", "O1", "O2", "H1", "H2", "H3"]
    assert set(lig.resnames) == {"ACT"} and set(lig.resids) == {1}
    radii = np.linspace(1.0, 2.0, 7)
    np.testing.assert_array_equal(pb.Atoms.from_mol2(MOL2, radii=radii).radii, radii)


def test_mol2_first_molecule_blank_name_and_element_types(tmp_path):
    text = MOL2.read_text().replace("@<TRIPOS>MOLECULE\nacetate", "@<TRIPOS>MOLECULE\n")
    ion = "@<TRIPOS>MOLECULE\nion\n1 0 1\nSMALL\nUSER_CHARGES\n@<TRIPOS>ATOM\n"
    ion += "1 CL 9.0 9.0 9.0 Cl 1 CL -1.0\n"
    path = tmp_path / "two.mol2"
    path.write_text(text + ion)
    lig = pb.Atoms.from_mol2(path)
    assert len(lig) == 7
    np.testing.assert_array_equal(lig.charges, ACETATE_Q)
    only_ion = tmp_path / "ion.mol2"
    only_ion.write_text(ion)
    cl = pb.Atoms.from_mol2(only_ion)
    assert cl.radii.tolist() == [1.75] and cl.charges.tolist() == [-1.0]  # Cl, not C


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("USER_CHARGES", "NO_CHARGES"), "NO_CHARGES"),
        (("C.2       1 ACT       0.7919", "C.2       1 ACT"), r"line 10: an ATOM record needs"),
        (
            ("O.co2     1 ACT      -0.8182\n      4", "O.co2     1 ACT      -0.8x82\n      4"),
            "line 11",
        ),
        (("H         1 ACT       0.0071", "Du        1 ACT       0.0071"), "names no element"),
        (("    7     6     1", "    8     6     1"), "announces 8 atoms"),
        (("@<TRIPOS>ATOM", "@<TRIPOS>ATOMS"), "no @<TRIPOS>ATOM records"),
        (("1.5200    0.0000    0.0000", "1.5200    nan    0.0000"), "non-finite"),
    ],
)
def test_mol2_errors(tmp_path, edit, message):
    text = MOL2.read_text()
    assert edit[0] in text
    path = tmp_path / "bad.mol2"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(pb.InputError, match=message):
        pb.Atoms.from_mol2(path)


def test_mol2_element_without_bondi_radius(tmp_path):
    path = tmp_path / "boron.mol2"
    path.write_text(MOL2.read_text().replace("C.3      ", "B        "))
    with pytest.raises(pb.InputError, match="no Bondi radius for element 'B'"):
        pb.Atoms.from_mol2(path)


def test_sdf_same_ligand_as_mol2():
    lig = pb.Atoms.from_sdf(SDF)
    ref = pb.Atoms.from_mol2(MOL2)
    np.testing.assert_array_equal(lig.positions, ref.positions)
    np.testing.assert_array_equal(lig.charges, ref.charges)  # not the formal -1 on O4
    np.testing.assert_array_equal(lig.radii, ref.radii)
    sparse = pb.Atoms.from_sdf(SDF, charges_field="pubchem_mmff94_partial_charges")
    np.testing.assert_array_equal(sparse.charges, [-0.5, 0.6, -0.55, -0.55, 0.0, 0.0, 0.0])


def test_sdf_multiline_values_and_second_record(tmp_path):
    text = SDF.read_text()
    text = text.replace(
        "-0.1766 0.7919 -0.8182 -0.8182 0.0070 0.0070 0.0071",
        "-0.1766 0.7919 -0.8182\n-0.8182 0.0070\n0.0070 0.0071",
    )
    path = tmp_path / "two.sdf"
    path.write_text(
        text + text.replace("0.0000    0.0000    0.0000 C", "5.0000    0.0000    0.0000 C")
    )
    lig = pb.Atoms.from_sdf(path)
    np.testing.assert_array_equal(lig.charges, ACETATE_Q)
    np.testing.assert_array_equal(lig.positions, ACETATE_XYZ)


@pytest.mark.parametrize(
    ("edit", "kwargs", "message"),
    [
        (
            ("atom.dprop.PartialCharge", "Comment"),
            {"charges_field": "charges"},
            "no data item <charges>",
        ),
        (
            ("atom.dprop.PartialCharge>\n-0.1766 ", "atom.dprop.PartialCharge>\n"),
            {},
            "6 values for 7 atoms",
        ),
        (
            ("4\n1 -0.5", "5\n1 -0.5"),
            {"charges_field": "PUBCHEM_MMFF94_PARTIAL_CHARGES"},
            "announces 5",
        ),
        (
            ("3 -0.55", "9 -0.55"),
            {"charges_field": "PUBCHEM_MMFF94_PARTIAL_CHARGES"},
            "atom 9 of 7",
        ),
        (("0999 V2000", "0999 V3000"), {}, "V3000"),
        (("    2.1500    1.0800", "    2.1500    1.08x0"), {}, "line 7: x y z"),
        (("-0.5100    0.8900 H", "-0.5100    0.8900 Q"), {}, "line 10: bad element"),
    ],
)
def test_sdf_errors(tmp_path, edit, kwargs, message):
    text = SDF.read_text()
    assert edit[0] in text
    path = tmp_path / "bad.sdf"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(pb.InputError, match=message):
        pb.Atoms.from_sdf(path, **kwargs)


def test_sdf_without_partial_charges(tmp_path):
    text = SDF.read_text()
    path = tmp_path / "formal_only.sdf"
    path.write_text(text[: text.index("M  END")] + "M  END\n$$$$\n")
    with pytest.raises(pb.InputError, match="no partial charges.*formal charges are not"):
        pb.Atoms.from_sdf(path)
