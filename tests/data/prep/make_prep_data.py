"""Write the structure files of tests/test_prepare.py from the shipped colipase PQR.

``colipase.pdb`` and ``colipase.cif`` hold the same atoms: the heavy atoms of
``data/1lpb_chainA.pqr`` (chain A of PDB entry 1LPB, 85 residues, pdb2pqr's atom names), chain
``A``, occupancy 1, B-factor 0. The mmCIF carries the header categories pdb2pqr's own command
line needs to read an mmCIF (``_struct``, ``_entity``, ``_exptl``, ...) so that the test can run
``pdb2pqr`` on both files. ``colipase_gemmi_style.cif`` has only ``_atom_site`` with a
multi-character ``label_asym_id`` (``Axp``), as gemmi's ``make_mmcif_document`` writes after
``setup_entities``: pdb2pqr's command line cannot read it; pbsolver can.

Run from the repository root: ``python tests/data/prep/make_prep_data.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import pbsolver as pb

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[2] / "data" / "1lpb_chainA.pqr"


def heavy_atoms():
    """The colipase atoms without hydrogens."""
    atoms = pb.read_pqr(SOURCE)
    keep = np.array([not n.startswith("H") for n in atoms.names])
    return atoms[keep]


def pdb_text(atoms) -> str:
    """PDB ATOM records in standard columns, element in 77-78."""
    lines = ["REMARK   1 HEAVY ATOMS OF 1LPB CHAIN A (FROM data/1lpb_chainA.pqr)"]
    for i in range(len(atoms)):
        name, element = atoms.names[i], atoms.names[i][0]
        field = f"{name:<4s}" if len(name) == 4 else f" {name:<3s}"
        x, y, z = atoms.positions[i]
        lines.append(
            f"ATOM  {i + 1:5d} {field} {atoms.resnames[i]:>3s} A{int(atoms.resids[i]):4d}    "
            f"{x:8.3f}{y:8.3f}{z:8.3f}{1.0:6.2f}{0.0:6.2f}          {element:>2s}  "
        )
    return "\n".join([*lines, "TER", "END", ""])


HEADER = """data_colipase
_entry.id COLIPASE
_struct.entry_id COLIPASE
_struct.title 'Heavy atoms of 1LPB chain A'
_struct_keywords.entry_id COLIPASE
_struct_keywords.pdbx_keywords HYDROLASE
_struct_keywords.text 'HYDROLASE, LIPASE COFACTOR'
_pdbx_database_status.entry_id COLIPASE
_pdbx_database_status.recvd_initial_deposition_date 1995-01-01
_exptl.entry_id COLIPASE
_exptl.method 'X-RAY DIFFRACTION'
_cell.entry_id COLIPASE
_cell.length_a 1.000
_cell.length_b 1.000
_cell.length_c 1.000
_cell.angle_alpha 90.00
_cell.angle_beta 90.00
_cell.angle_gamma 90.00
_cell.Z_PDB 1
_symmetry.entry_id COLIPASE
_symmetry.space_group_name_H-M 'P 1'
loop_
_entity.id
_entity.type
_entity.pdbx_description
1 polymer COLIPASE
"""

SITE_COLUMNS = (
    "group_PDB id type_symbol label_atom_id label_alt_id label_comp_id label_asym_id "
    "label_entity_id label_seq_id pdbx_PDB_ins_code Cartn_x Cartn_y Cartn_z occupancy "
    "B_iso_or_equiv pdbx_formal_charge auth_seq_id auth_comp_id auth_asym_id auth_atom_id "
    "pdbx_PDB_model_num"
).split()


def cif_text(atoms, header: str, label_asym: str) -> str:
    """An mmCIF with one ``_atom_site`` loop (label and auth identifiers both given)."""
    lines = [header.rstrip("\n"), "loop_"] + [f"_atom_site.{c}" for c in SITE_COLUMNS]
    first = int(atoms.resids[0])
    for i in range(len(atoms)):
        name, res, resid = atoms.names[i], atoms.resnames[i], int(atoms.resids[i])
        x, y, z = atoms.positions[i]
        lines.append(
            f"ATOM {i + 1} {name[0]} {name} . {res} {label_asym} 1 {resid - first + 1} ? "
            f"{x:.3f} {y:.3f} {z:.3f} 1.00 0.00 ? {resid} {res} A {name} 1"
        )
    return "\n".join([*lines, "#", ""])


def main():
    """Write the three files next to this script."""
    atoms = heavy_atoms()
    (HERE / "colipase.pdb").write_text(pdb_text(atoms))
    (HERE / "colipase.cif").write_text(cif_text(atoms, HEADER, "A"))
    (HERE / "colipase_gemmi_style.cif").write_text(
        cif_text(atoms, "data_colipase\n_entry.id COLIPASE\n", "Axp")
    )
    print(f"{len(atoms)} heavy atoms written to colipase.pdb / .cif / _gemmi_style.cif")


if __name__ == "__main__":
    main()
