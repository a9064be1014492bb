"""The PQR reader's two forms: whitespace fields and PDB fixed columns whose fields run together."""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule.atoms import parse_pqr

RESNAMES = ["ALA", "GLY", "LYS", "ASP", "HIS", "WAT"]
NAMES = ["N", "CA", "C", "O", "HD21", "OXT", "HB2"]


def pdb2pqr_line(serial, name, resname, chain, resid, xyz, q, r, record="ATOM"):
    """A record laid out as pdb2pqr writes it (structures.Atom.get_pqr_string, fixed columns).

    Columns 1-6 record, 7-11 serial, 13-16 name, 18-20 residue, 22 chain, 23-26 residue number,
    31-54 x y z as %8.3f, then the charge right-aligned in 8 and the radius in 7 columns: fields
    touch when a number fills its width.
    """
    name_field = f"{name:<4s}" if len(name) == 4 else f" {name:<3s}"
    head = f"{record:<6s}{serial:5d} {name_field} {resname:<3s} {chain:1s}{resid:4d}    "
    assert len(head) == 30
    return (
        head
        + f"{xyz[0]:8.3f}{xyz[1]:8.3f}{xyz[2]:8.3f}"
        + f"{q:.4f}".rjust(8)
        + (f"{r:.4f}".rjust(7))
    )


def whitespace_line(rng, serial, name, resname, resid, values):
    """A whitespace-separated record with random spacing and number formats, and its numbers."""
    sep = lambda: " " * int(rng.integers(1, 4))  # noqa: E731
    fmt = rng.choice(["{:.3f}", "{:.6f}", "{:.5e}", "{:.8g}"])
    fields = [fmt.format(v) for v in values]
    chain = rng.choice(["", " A"])
    line = f"ATOM{sep()}{serial}{sep()}{name}{sep()}{resname}{chain}{sep()}{resid}{sep()}"
    return line + sep().join(fields), [float(f) for f in fields]


def random_values(rng, n):
    """Coordinates spanning -999..9999 Å (run together below -99.999 and from 1000 up)."""
    xyz = rng.choice([-1.0, 1.0], (n, 3)) * 10.0 ** rng.uniform(-1, 3, (n, 3))
    xyz[rng.random((n, 3)) < 0.3] = rng.uniform(-999.0, -100.0)  # the common run-together case
    xyz[rng.random((n, 3)) < 0.1] = rng.uniform(1000.0, 9999.0)  # positive, 8 characters
    xyz = np.clip(xyz, -999.0, 9999.0).round(3)
    q = rng.normal(0.0, 0.5, n).round(4)
    q[rng.random(n) < 0.2] = rng.uniform(-99.0, -10.0)  # "-10.1234" fills the 8 charge columns
    r = rng.uniform(0.0, 2.5, n).round(4)
    r[rng.random(n) < 0.2] = rng.uniform(10.0, 99.0)  # a 7-character radius touches the charge
    return xyz, q.round(4), r.round(4)


def test_issue_example_line():
    line = "ATOM      1  N   ALA A   1    -100.123-200.456-300.789  0.1414 1.8240"
    a = parse_pqr(line)
    np.testing.assert_array_equal(a.positions, [[-100.123, -200.456, -300.789]])
    assert a.charges.tolist() == [0.1414] and a.radii.tolist() == [1.824]
    assert (a.names[0], a.resnames[0], int(a.resids[0])) == ("N", "ALA", 1)


def test_fixed_columns_every_field_touching(rng):
    n = 400
    xyz, q, r = random_values(rng, n)
    lines = []
    for i in range(n):
        rec = "HETATM" if i % 7 == 0 else "ATOM"
        lines.append(
            pdb2pqr_line(
                i + 1,
                NAMES[i % len(NAMES)],
                RESNAMES[i % len(RESNAMES)],
                "AB"[i % 2],
                int(rng.integers(-999, 9999)),
                xyz[i],
                q[i],
                r[i],
                record=rec,
            )
        )
    text = "\n".join(lines)
    # the layout really produces every kind of contact the reader has to undo
    assert any("-" in ln[31:38] and ln[38] == "-" for ln in lines)  # x touches y
    assert any(ln[38] not in " -" for ln in lines)  # positive x >= 1000 touches y
    assert any(ln[54] != " " for ln in lines)  # z touches the charge
    assert any(ln[62] != " " for ln in lines)  # charge touches the radius
    a = parse_pqr(text)
    np.testing.assert_array_equal(a.positions, xyz)
    np.testing.assert_array_equal(a.charges, q)
    np.testing.assert_array_equal(a.radii, r)
    assert list(a.names) == [NAMES[i % len(NAMES)] for i in range(n)]
    assert list(a.resnames) == [RESNAMES[i % len(RESNAMES)] for i in range(n)]


def test_mixed_file_both_forms_and_other_records(tmp_path, rng):
    n = 200
    xyz, q, r = random_values(rng, n)
    xyz_ws = rng.normal(0.0, 30.0, (n, 3))  # whitespace lines keep full precision
    q_ws, r_ws = rng.normal(0.0, 0.5, n), rng.uniform(0.0, 2.5, n)
    lines, expect = ["REMARK   1 PQR mixed by hand", "CRYST1    1.000    1.000    1.000"], []
    for i in range(n):
        if rng.random() < 0.5:
            lines.append(pdb2pqr_line(i + 1, "CA", "GLY", "A", i + 1, xyz[i], q[i], r[i]))
            expect.append((*xyz[i], q[i], r[i]))
        else:
            line, values = whitespace_line(
                rng, i + 1, "CB", "ALA", i + 1, (*xyz_ws[i], q_ws[i], r_ws[i])
            )
            lines.append(line)
            expect.append(values)
        if rng.random() < 0.05:
            lines.append("TER")
    lines += ["END", ""]
    path = tmp_path / "mixed.pqr"
    path.write_text("\r\n".join(lines))  # Windows line ends too
    a = pb.read_pqr(path)
    expect = np.array(expect)
    np.testing.assert_array_equal(a.positions, expect[:, :3])
    np.testing.assert_array_equal(a.charges, expect[:, 3])
    np.testing.assert_array_equal(a.radii, expect[:, 4])
    assert list(a.resids) == list(range(1, n + 1))


def test_serial_running_into_record():
    line = pdb2pqr_line(0, "ZN", "ZN", "B", 402, (-150.5, 2.0, 3.0), 2.0, 1.39, record="HETATM")
    line = "HETATM100001" + line[12:]
    a = parse_pqr(line)
    assert (a.names[0], a.resnames[0], int(a.resids[0])) == ("ZN", "ZN", 402)
    np.testing.assert_array_equal(a.positions, [[-150.5, 2.0, 3.0]])


def test_whitespace_writers_not_mistaken_for_columns():
    """MDAnalysis' writer puts x one column right of PDB's: it must read as whitespace fields."""
    line = (
        "ATOM      1  N    GLY A    1     -1.699   -2.145   32.719  0.2943 1.5500\n"
        "ATOM      2  H    GLY A    1   -101.739 -201.416 -302.022  0.1642 1.2000"
    )
    a = parse_pqr(line)
    np.testing.assert_array_equal(
        a.positions, [[-1.699, -2.145, 32.719], [-101.739, -201.416, -302.022]]
    )


GOOD = "ATOM      1  N   GLY A   6      -1.258   3.012  32.603 -0.3200 2.0000"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        # run together and the radius missing: neither form
        ("ATOM      2  N   ALA A   1    -100.123-200.456-300.789  0.1414", "line 3: malformed"),
        # run together, not in PDB columns (one column to the right)
        (
            "ATOM      2  N   ALA A   1     -100.123-200.456-300.789  0.1414 1.8",
            "line 3: malformed",
        ),
        # a letter inside a coordinate field
        ("ATOM      2  N   ALA A   1    -100.123-2x0.456-300.789  0.1414 1.8240", "line 3"),
        # a trailing field after the radius
        ("ATOM      2  N   ALA A   1    -100.123-200.456-300.789  0.1414 1.8240 N", "line 3"),
        # charge and radius touching beyond pdb2pqr's widths
        ("ATOM      2  N   ALA A   1    -100.123-200.456-300.789-100.12341.8240", "line 3"),
        # column-aligned with the radius missing: whitespace fields would shift the residue
        # number into x; the columns say otherwise
        ("ATOM      2  CA  GLY A   6      -1.461   1.603  32.125  0.3300", "reads differently"),
        ("ATOM      2  CA  GLY A   6    -100.461-101.603-132.125  0.3300 nan", "line 3"),
    ],
)
def test_lines_fitting_neither_form(tmp_path, line, message):
    path = tmp_path / "bad.pqr"
    path.write_text(f"REMARK x\n{GOOD}\n{line}\nEND\n")
    with pytest.raises(pb.InputError, match=message) as info:
        pb.read_pqr(path)
    assert "bad.pqr" in str(info.value)


def test_shipped_pqr_reads_identically_in_fixed_columns(rng):
    """The shipped protein, rewritten in pdb2pqr's columns far from the origin, reads back."""
    prot = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    shift = np.array([-250.0, -180.0, 1200.0])
    xyz = (prot.positions + shift).round(3)
    text = "\n".join(
        pdb2pqr_line(
            i + 1,
            prot.names[i],
            prot.resnames[i],
            "A",
            int(prot.resids[i]),
            xyz[i],
            prot.charges[i],
            prot.radii[i],
        )
        for i in range(len(prot))
    )
    back = parse_pqr(text)
    np.testing.assert_allclose(back.positions, xyz, atol=1e-9)
    np.testing.assert_array_equal(back.charges, prot.charges)
    np.testing.assert_array_equal(back.radii, prot.radii)
    assert list(back.names) == list(prot.names)
    assert list(back.resids) == list(prot.resids)
