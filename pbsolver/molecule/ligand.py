"""Ligands with partial charges: Tripos mol2 and MDL SDF (V2000) readers.

Both readers return a :class:`LigandRecord` (positions Å, partial charges e, element symbols,
atom and residue names); :meth:`pbsolver.Atoms.from_mol2` and :meth:`pbsolver.Atoms.from_sdf`
add radii (Bondi by element, or the caller's) and make :class:`~pbsolver.Atoms` of it.

* **mol2**: the first ``@<TRIPOS>MOLECULE`` of the file; the charge is the 9th field of each
  ``@<TRIPOS>ATOM`` line, the element the part of the SYBYL atom type before the dot (``C.ar`` →
  C, ``Cl`` → Cl). A molecule whose charge type is ``NO_CHARGES``, an atom line without a
  charge, an atom count that differs from the header's, or an atom type that names no element
  (``Du``, ``LP``, ``Any``, ``Hal``, ...) is an :class:`~pbsolver.InputError`.
* **SDF**: the first record (up to ``$$$$``) of a V2000 file. Partial charges come from a data
  item: ``atom.dprop.PartialCharge`` (RDKit's atom-property list),
  ``PUBCHEM_MMFF94_PARTIAL_CHARGES`` (PubChem: a count, then ``index charge`` lines, unlisted
  atoms 0), ``partial_charges``, ``PartialCharges`` or ``charges`` (one value per atom), or a
  field the caller names. Formal
  charges (``M  CHG``, the atom block's charge column) are not partial charges and are never
  used as such; a file with no charge item is an :class:`~pbsolver.InputError`. V3000 files are
  refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from pbsolver.exceptions import InputError

#: Element symbols (Z = 1-103), capitalised: what an atom type must name.
ELEMENTS = frozenset(
    """H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge
    As Se Br Kr Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu
    Gd Tb Dy Ho Er Tm Yb Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu
    Am Cm Bk Cf Es Fm Md No Lr""".split()
)
#: SDF data items searched for partial charges, in this order (names compared case-blind).
SDF_CHARGE_FIELDS = (
    "atom.dprop.PartialCharge",
    "PUBCHEM_MMFF94_PARTIAL_CHARGES",
    "partial_charges",
    "PartialCharges",
    "charges",
)
_DATA_HEADER = re.compile(r"^>.*<([^>]+)>")


@dataclass(frozen=True)
class LigandRecord:
    """One ligand as read from a file.

    Attributes
    ----------
    positions : ndarray (n, 3)
        Å.
    charges : ndarray (n,)
        Partial charges, e.
    elements : tuple of str
        Element symbols (``"C"``, ``"Cl"``).
    names, resnames : tuple of str
        Atom names and residue (substructure) names.
    resids : ndarray of int (n,)
        Residue numbers.
    """

    positions: np.ndarray
    charges: np.ndarray
    elements: tuple[str, ...]
    names: tuple[str, ...]
    resnames: tuple[str, ...]
    resids: np.ndarray


# ---------------------------------------------------------------------- mol2
def read_mol2(path) -> LigandRecord:
    """Read the first molecule of a Tripos mol2 file, with its partial charges.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    LigandRecord

    Raises
    ------
    InputError
        No molecule or atom section, ``NO_CHARGES``, a malformed atom line (with its line
        number), an atom count that differs from the header's, or an atom type naming no element.
    FileNotFoundError
        When the file does not exist.
    """
    path = os.fspath(path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    section, header, atoms = None, [], []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line.startswith("#"):
            continue
        if line.upper().startswith("@<TRIPOS>"):
            name = line[9:].strip().upper()
            if name == "MOLECULE" and section is not None:
                break  # the next molecule: only the first is read
            section = name
            continue
        if section == "MOLECULE":
            header.append((lineno, line))  # positional lines: the name may be blank
        elif section == "ATOM" and line:
            atoms.append((lineno, line))
    if section is None or len(header) < 2:
        raise InputError(f"{path}: no @<TRIPOS>MOLECULE section with a name and counts line")
    if not atoms:
        raise InputError(f"{path}: no @<TRIPOS>ATOM records")
    counts = header[1][1].split()
    if not counts or not counts[0].isdigit():
        raise InputError(f"{path}, line {header[1][0]}: expected the atom count")
    if len(header) > 3 and header[3][1].upper() == "NO_CHARGES":
        raise InputError(
            f"{path}: charge type NO_CHARGES: the molecule has no partial charges (assign them, "
            "e.g. with antechamber -c bcc, and write the mol2 again)"
        )
    if int(counts[0]) != len(atoms):
        raise InputError(
            f"{path}: the header announces {counts[0]} atoms, the ATOM section has {len(atoms)}"
        )
    pos, q, elements, names, resnames, resids = [], [], [], [], [], []
    for lineno, line in atoms:
        f = line.split()
        if len(f) < 9:
            raise InputError(
                f"{path}, line {lineno}: an ATOM record needs id, name, x, y, z, type, "
                f"substructure id and name, and the charge (9 fields), got {line!r}"
            )
        try:
            xyz = [float(v) for v in f[2:5]]
            charge = float(f[8])
            resid = int(f[6])
        except ValueError:
            raise InputError(
                f"{path}, line {lineno}: x y z, substructure id or charge is not a number: {line!r}"
            ) from None
        if not (np.all(np.isfinite(xyz)) and np.isfinite(charge)):
            raise InputError(f"{path}, line {lineno}: non-finite number in {line!r}")
        element = f[5].split(".")[0]
        element = element[:1].upper() + element[1:].lower()
        if element not in ELEMENTS:
            raise InputError(
                f"{path}, line {lineno}: atom type {f[5]!r} names no element (dummy, lone pair "
                "or wildcard types carry no radius)"
            )
        pos.append(xyz)
        q.append(charge)
        elements.append(element)
        names.append(f[1])
        resnames.append(f[7])
        resids.append(resid)
    return LigandRecord(
        np.array(pos, dtype=np.float64),
        np.array(q, dtype=np.float64),
        tuple(elements),
        tuple(names),
        tuple(resnames),
        np.array(resids, dtype=np.int64),
    )


# ---------------------------------------------------------------------- SDF
def read_sdf(path, charges_field: str | None = None) -> LigandRecord:
    """Read the first record of an MDL SDF (V2000) file, with partial charges from a data item.

    Parameters
    ----------
    path : str or os.PathLike
    charges_field : str, optional
        The data item holding the charges (``> <NAME>``); default: the first of
        :data:`SDF_CHARGE_FIELDS` present.

    Returns
    -------
    LigandRecord
        Atom names are the element and the atom's number (``C1``, ``O2``); the residue name is
        ``LIG``, number 1.

    Raises
    ------
    InputError
        A V3000 or malformed file (with the line number), no charge item (or not the named
        one), or a charge item whose count of values differs from the atom count.
    FileNotFoundError
        When the file does not exist.
    """
    path = os.fspath(path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    if "$$$$" in (ln.strip() for ln in lines):
        lines = lines[: [ln.strip() for ln in lines].index("$$$$")]
    if len(lines) < 4:
        raise InputError(f"{path}: too short for an SDF record (header and counts line)")
    counts = lines[3]
    if "V3000" in counts[33:39].upper():
        raise InputError(f"{path}: V3000 SDF is not supported; write it as V2000")
    try:
        n_atoms = int(counts[0:3])
    except ValueError:
        raise InputError(f"{path}, line 4: counts line without an atom count: {counts!r}") from None
    if n_atoms <= 0 or len(lines) < 4 + n_atoms:
        raise InputError(f"{path}: the counts line announces {n_atoms} atoms, not all present")
    pos, elements = [], []
    for k in range(n_atoms):
        line = lines[4 + k]
        try:
            xyz = [float(line[0:10]), float(line[10:20]), float(line[20:30])]
        except ValueError:
            raise InputError(
                f"{path}, line {5 + k}: x y z are not numbers in columns 1-30: {line!r}"
            ) from None
        symbol = line[31:34].strip()
        symbol = symbol[:1].upper() + symbol[1:].lower()
        if symbol not in ELEMENTS or not np.all(np.isfinite(xyz)):
            raise InputError(f"{path}, line {5 + k}: bad element {symbol!r} or coordinates")
        pos.append(xyz)
        elements.append(symbol)
    items = _sdf_data_items(lines[4 + n_atoms :])
    charges = _sdf_charges(items, n_atoms, charges_field, path)
    return LigandRecord(
        np.array(pos, dtype=np.float64),
        charges,
        tuple(elements),
        tuple(f"{e}{i + 1}" for i, e in enumerate(elements)),
        ("LIG",) * n_atoms,
        np.ones(n_atoms, dtype=np.int64),
    )


def _sdf_data_items(lines) -> dict[str, list[str]]:
    """The ``> <NAME>`` data items after ``M  END``: name → value lines."""
    items: dict[str, list[str]] = {}
    current = None
    for line in lines:
        m = _DATA_HEADER.match(line)
        if m:
            current = m.group(1)
            items[current] = []
        elif current is not None:
            if not line.strip():
                current = None
            else:
                items[current].append(line)
    return items


def _sdf_charges(items, n_atoms, field, path) -> np.ndarray:
    by_name = {k.lower(): k for k in items}
    wanted = (field,) if field is not None else SDF_CHARGE_FIELDS
    for name in wanted:
        key = by_name.get(name.lower())
        if key is not None:
            return _charge_values(items[key], n_atoms, key, path)
    if field is not None:
        raise InputError(f"{path}: no data item <{field}> (items: {sorted(items)})")
    raise InputError(
        f"{path}: no partial charges: expected a data item {' / '.join(SDF_CHARGE_FIELDS)} "
        "(formal charges are not partial charges); name another with charges_field="
    )


def _charge_values(values, n_atoms, key, path) -> np.ndarray:
    tokens = [ln.split() for ln in values]
    # PubChem's sparse form: a count, then "index charge" lines (1-based; others are 0)
    sparse = len(tokens) > 1 and len(tokens[0]) == 1 and all(len(t) == 2 for t in tokens[1:])
    try:
        if sparse:
            count = int(tokens[0][0])
            pairs = [(int(i), float(v)) for i, v in tokens[1:]]
        else:
            flat = np.array([float(v) for t in tokens for v in t])
    except ValueError:
        raise InputError(f"{path}: <{key}> holds something that is not a number") from None
    if sparse:
        if count != len(pairs):
            raise InputError(f"{path}: <{key}> announces {count} charges, lists {len(pairs)}")
        flat = np.zeros(n_atoms)
        for i, v in pairs:
            if not 1 <= i <= n_atoms:
                raise InputError(f"{path}: <{key}> names atom {i} of {n_atoms}")
            flat[i - 1] = v
    if flat.shape != (n_atoms,):
        raise InputError(f"{path}: <{key}> has {flat.size} values for {n_atoms} atoms")
    if not np.all(np.isfinite(flat)):
        raise InputError(f"{path}: <{key}> has a non-finite charge")
    return flat
