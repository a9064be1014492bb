"""Atoms (positions Å, charges e, radii Å), the PQR reader and the constructors of Atoms.

PQR is read in either of its two common forms, decided record by record (files may mix them):

* whitespace-separated fields (``pdb2pqr --whitespace``, MDAnalysis, APBS examples);
* PDB fixed columns, where coordinates of −100 Å or less (or 1000 Å or more) fill their
  8-character field and run into the previous one (``-101.250-100.500  12.000``), as pdb2pqr
  writes by default; charge and radius may touch too.

Only the last five numbers of an ``ATOM``/``HETATM`` record are required (x y z charge radius);
names, residue names and numbers before them are kept when they can be read. Reading stops at
the first ``ENDMDL`` (the first model of a multi-model file).

The MDAnalysis and OpenMM adapters import those packages only when called (install the extras
``pbsolver[mdanalysis]`` or ``pbsolver[openmm]``); so does :meth:`Atoms.from_structure`
(pdb2pqr and PROPKA: ``pbsolver[prep]``, see :mod:`pbsolver.molecule.prepare`).
:meth:`Atoms.from_mol2` and :meth:`Atoms.from_sdf` read ligands with partial charges
(:mod:`pbsolver.molecule.ligand`).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import numpy as np

from pbsolver.arrays import require_real_numbers
from pbsolver.exceptions import InputError

#: Bondi (1964) van der Waals radii, Å, by element, for inputs that carry no radii.
BONDI_RADII = {
    "H": 1.20,
    "C": 1.70,
    "N": 1.55,
    "O": 1.52,
    "F": 1.47,
    "P": 1.80,
    "S": 1.80,
    "CL": 1.75,
    "BR": 1.85,
    "I": 1.98,
    "NA": 2.27,
    "K": 2.75,
    "MG": 1.73,
    "SE": 1.90,
    "ZN": 1.39,
    "CA": 2.31,
    "FE": 2.00,
    "CU": 1.40,
}


@dataclass(init=False)
class Atoms:
    """Point charges with radii: the solute as pbsolver sees it.

    Parameters
    ----------
    positions : array_like (n, 3)
        Coordinates, Å.
    charges : array_like (n,)
        Partial charges, e.
    radii : array_like (n,)
        Atomic radii, Å (≥ 0; 0 is a bare charge with no volume, which must lie inside the
        volume of other atoms to give a finite solvation energy).
    names, resnames : sequence of str, optional
        Atom and residue names (kept for output, never used in the physics).
    resids : array_like of int, optional
        Residue numbers.

    Raises
    ------
    InputError
        Wrong shapes, non-finite values, negative radii, or no atoms.

    Examples
    --------
    >>> ion = Atoms([[0.0, 0.0, 0.0]], [1.0], [3.0])
    >>> len(ion), ion.total_charge
    (1, 1.0)
    """

    positions: np.ndarray
    charges: np.ndarray
    radii: np.ndarray
    names: np.ndarray | None
    resnames: np.ndarray | None
    resids: np.ndarray | None

    def __init__(self, positions, charges, radii, *, names=None, resnames=None, resids=None):
        pos = _float_array(positions, "positions")
        if pos.ndim != 2 or pos.shape[1] != 3:
            raise InputError(f"positions must have shape (n, 3), got {pos.shape}")
        n = pos.shape[0]
        if n == 0:
            raise InputError("Atoms needs at least one atom")
        q = _float_array(charges, "charges").reshape(-1)
        r = _float_array(radii, "radii").reshape(-1)
        for name, a in (("charges", q), ("radii", r)):
            if a.shape != (n,):
                raise InputError(f"{name} must have one value per atom ({n}), got {a.shape[0]}")
        for name, a in (("positions", pos), ("charges", q), ("radii", r)):
            bad = ~np.isfinite(a)
            if bad.any():
                idx = int(np.argwhere(bad)[0][0])
                raise InputError(f"{name} of atom {idx} is not finite")
        if (r < 0).any():
            idx = int(np.argmax(r < 0))
            raise InputError(f"radius of atom {idx} is negative ({r[idx]})")
        self.positions = pos
        self.charges = q
        self.radii = r
        self.names = _labels(names, n, "names")
        self.resnames = _labels(resnames, n, "resnames")
        self.resids = None if resids is None else np.asarray(resids, dtype=np.int64).reshape(-1)
        if self.resids is not None and self.resids.shape != (n,):
            raise InputError(f"resids must have one value per atom ({n})")

    # ------------------------------------------------------------------ basic properties
    def __len__(self) -> int:
        return self.positions.shape[0]

    @property
    def n_atoms(self) -> int:
        """Number of atoms."""
        return len(self)

    @property
    def total_charge(self) -> float:
        """Sum of the charges, e."""
        return float(self.charges.sum())

    def bounds(self, with_radii: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Lowest and highest corner of the atoms' bounding box, Å (spheres included)."""
        pad = self.radii[:, None] if with_radii else 0.0
        return (self.positions - pad).min(axis=0), (self.positions + pad).max(axis=0)

    def center(self) -> np.ndarray:
        """Midpoint of the bounding box of the atomic spheres, Å."""
        lo, hi = self.bounds()
        return 0.5 * (lo + hi)

    def __getitem__(self, index) -> Atoms:
        """A subset of the atoms (index, slice, boolean mask or integer array)."""
        idx = np.arange(len(self))[index]
        idx = np.atleast_1d(idx)
        return Atoms(
            self.positions[idx],
            self.charges[idx],
            self.radii[idx],
            names=None if self.names is None else self.names[idx],
            resnames=None if self.resnames is None else self.resnames[idx],
            resids=None if self.resids is None else self.resids[idx],
        )

    def with_positions(self, positions) -> Atoms:
        """The same atoms (charges, radii, labels shared, not copied) at other positions.

        ``positions`` must be a host float64 array of shape (n, 3) with finite values (not
        checked again: this is for callers that validated a whole trajectory at once).
        """
        out = object.__new__(Atoms)
        out.positions, out.charges, out.radii = positions, self.charges, self.radii
        out.names, out.resnames, out.resids = self.names, self.resnames, self.resids
        return out

    def translated(self, shift) -> Atoms:
        """A copy moved by ``shift`` (3 numbers, Å)."""
        shift = np.asarray(shift, dtype=float).reshape(3)
        out = self[:]
        out.positions = out.positions + shift
        return out

    def __repr__(self) -> str:
        return f"Atoms(n={len(self)}, total_charge={self.total_charge:+.4g} e)"

    # ------------------------------------------------------------------ adapters
    @classmethod
    def from_mdanalysis(cls, atomgroup, *, radii=None, charges=None) -> Atoms:
        """Atoms from an MDAnalysis ``AtomGroup`` (or ``Universe``), at its current frame.

        Parameters
        ----------
        atomgroup : MDAnalysis.AtomGroup or MDAnalysis.Universe
            Positions are read in Å (MDAnalysis' unit).
        radii : array_like or "bondi", optional
            Radii, Å. Default: the topology's ``radii`` (a PQR topology has them), else an
            error; ``"bondi"`` takes Bondi radii from the atoms' elements (or names).
        charges : array_like, optional
            Charges, e. Default: the topology's ``charges``.
        """
        ag = getattr(atomgroup, "atoms", atomgroup)
        positions = np.asarray(ag.positions, dtype=np.float64)
        if charges is None:
            try:
                charges = np.asarray(ag.charges, dtype=np.float64)
            except (AttributeError, Exception) as exc:  # NoDataError is an AttributeError too
                raise InputError(
                    "the AtomGroup has no charges: pass charges=..., or load a topology that "
                    "carries them (PQR, PSF, TPR, PRMTOP)"
                ) from exc
        elements = _attr_or_none(ag, "elements")
        names = _attr_or_none(ag, "names")
        if radii is None:
            try:
                radii = np.asarray(ag.radii, dtype=np.float64)
            except (AttributeError, Exception) as exc:
                raise InputError(
                    "the AtomGroup has no radii: pass radii=array or radii='bondi'"
                ) from exc
        elif isinstance(radii, str):
            radii = element_radii(elements if elements is not None else names, table=radii)
        return cls(
            positions,
            charges,
            radii,
            names=names,
            resnames=_attr_or_none(ag, "resnames"),
            resids=_attr_or_none(ag, "resids"),
        )

    @classmethod
    def from_structure(cls, path, forcefield: str = "AMBER", ph: float | None = 7.0,
                       **options) -> Atoms:  # fmt: skip
        """Atoms of a PDB or mmCIF file, with charges and radii from pdb2pqr (and PROPKA).

        The same records as ``pdb2pqr --ff=FORCEFIELD [--titration-state-method=propka
        --with-ph=PH] path out.pqr``, computed in this process (see
        :mod:`pbsolver.molecule.prepare` for what is repaired and what is refused). Needs
        ``pip install pbsolver[prep]``.

        Parameters
        ----------
        path : str or os.PathLike
            ``.pdb``/``.ent`` or ``.cif``/``.mmcif`` file, optionally ``.gz``.
        forcefield : {"AMBER", "CHARMM", "PARSE", "PEOEPB", "SWANSON", "TYL06"}
            pdb2pqr's force field for charges (e) and radii (Å).
        ph : float or None
            pH for PROPKA's protonation states (0–14); None: pdb2pqr's default states.
        **options
            ``altloc``, ``keep_water``, ``allow_unknown`` of
            :func:`~pbsolver.molecule.prepare.prepare_structure` (alternate locations,
            crystal waters, residues without parameters).

        Returns
        -------
        Atoms
            In pdb2pqr's order, hydrogens included. A
            :class:`~pbsolver.molecule.prepare.PreparationWarning` names rebuilt heavy atoms,
            chosen alternate locations and residues left out.

        Raises
        ------
        InputError
            See :func:`pbsolver.molecule.prepare.prepare_structure`.
        ImportError
            pdb2pqr is not installed.
        """
        from pbsolver.molecule.prepare import prepare_structure, warn_changes

        prep = prepare_structure(path, forcefield, ph, **options)
        atoms = parse_pqr(prep.pqr_lines, source=f"pdb2pqr output for {os.fspath(path)}")
        warn_changes(prep, path)
        return atoms

    @classmethod
    def from_mol2(cls, path, radii="bondi") -> Atoms:
        """Atoms of a ligand in a Tripos mol2 file, with its partial charges.

        Parameters
        ----------
        path : str or os.PathLike
            The first molecule is read; the charges (e) are the 9th field of the ATOM records.
        radii : "bondi" or array_like
            ``"bondi"``: Bondi radii (Å) from the elements of the SYBYL atom types
            (:func:`element_radii`); or one radius per atom, Å.

        Raises
        ------
        InputError
            See :func:`pbsolver.molecule.ligand.read_mol2`; an element without a Bondi radius.
        """
        from pbsolver.molecule.ligand import read_mol2

        return cls._from_ligand(read_mol2(path), radii)

    @classmethod
    def from_sdf(cls, path, radii="bondi", *, charges_field: str | None = None) -> Atoms:
        """Atoms of a ligand in an SDF (V2000) file, with partial charges from a data item.

        Parameters
        ----------
        path : str or os.PathLike
            The first record is read.
        radii : "bondi" or array_like
            ``"bondi"``: Bondi radii (Å) from the elements; or one radius per atom, Å.
        charges_field : str, optional
            The data item with the partial charges (default: the first known one present; see
            :func:`pbsolver.molecule.ligand.read_sdf`).

        Raises
        ------
        InputError
            See :func:`pbsolver.molecule.ligand.read_sdf`; an element without a Bondi radius.
        """
        from pbsolver.molecule.ligand import read_sdf

        return cls._from_ligand(read_sdf(path, charges_field), radii)

    @classmethod
    def _from_ligand(cls, record, radii) -> Atoms:
        if isinstance(radii, str):
            radii = element_radii(record.elements, table=radii)
        return cls(
            record.positions,
            record.charges,
            radii,
            names=record.names,
            resnames=record.resnames,
            resids=record.resids,
        )

    @classmethod
    def from_openmm(cls, system, positions, topology=None, *, radii="sigma") -> Atoms:
        """Atoms from an OpenMM ``System`` (charges of its ``NonbondedForce``) and positions.

        Parameters
        ----------
        system : openmm.System
            Must contain a ``NonbondedForce``; its particle charges are used.
        positions : Quantity or array_like (n, 3)
            Positions; a plain array is taken to be in nm (OpenMM's unit).
        topology : openmm.app.Topology, optional
            Needed for ``radii="bondi"`` (elements) and to keep atom and residue names.
        radii : {"sigma", "bondi"} or array_like
            ``"sigma"``: half the Lennard-Jones minimum distance, 2^(1/6) σ / 2 (atoms with
            ε_LJ = 0 get radius 0); ``"bondi"``: from the topology's elements; or radii in Å.
        """
        force = None
        for f in system.getForces():
            if type(f).__name__ == "NonbondedForce":
                force = f
                break
        if force is None:
            raise InputError("the OpenMM System has no NonbondedForce to read charges from")
        n = system.getNumParticles()
        q = np.empty(n)
        sigma = np.empty(n)
        eps = np.empty(n)
        for i in range(n):
            qi, si, ei = force.getParticleParameters(i)
            q[i] = _quantity(qi, "elementary_charge")
            sigma[i] = _quantity(si, "nanometer") * 10.0
            eps[i] = _quantity(ei, "kilojoule_per_mole")
        pos = _positions_angstrom(positions)
        names = resnames = resids = elements = None
        if topology is not None:
            atoms = list(topology.atoms())
            names = [a.name for a in atoms]
            resnames = [a.residue.name for a in atoms]
            resids = [
                int(a.residue.id) if str(a.residue.id).lstrip("-").isdigit() else 0 for a in atoms
            ]
            elements = [a.element.symbol if a.element is not None else a.name for a in atoms]
        if isinstance(radii, str):
            if radii == "sigma":
                radii = np.where(eps > 0, 2.0 ** (1.0 / 6.0) * sigma / 2.0, 0.0)
            elif radii == "bondi":
                if elements is None:
                    raise InputError("radii='bondi' needs the topology (for the elements)")
                radii = element_radii(elements)
            else:
                raise InputError(f"radii must be 'sigma', 'bondi' or an array, got {radii!r}")
        if pos.shape[0] != n:
            raise InputError(f"{pos.shape[0]} positions for a System of {n} particles")
        return cls(pos, q, radii, names=names, resnames=resnames, resids=resids)


def element_radii(elements, table="bondi") -> np.ndarray:
    """Radii (Å) for element symbols (or atom names, whose leading letters are used).

    Raises
    ------
    InputError
        Unknown table or an element not in it.
    """
    if table != "bondi":
        raise InputError(f"unknown radius table {table!r} (known: 'bondi')")
    if elements is None:
        raise InputError("radii='bondi' needs element symbols or atom names")
    out = np.empty(len(elements))
    for i, e in enumerate(elements):
        key = str(e).strip().upper()
        if key not in BONDI_RADII:
            key = key.lstrip("0123456789")[:2]
            if key not in BONDI_RADII:
                key = key[:1]
        if key not in BONDI_RADII:
            raise InputError(f"no Bondi radius for element {e!r} (atom {i}); pass radii=array")
        out[i] = BONDI_RADII[key]
    return out


# ---------------------------------------------------------------------- PQR
def read_pqr(path) -> Atoms:
    """Read atoms from a PQR file (whitespace-separated or fixed-column form, mixed freely).

    Parameters
    ----------
    path : str or os.PathLike
        The file. ``ATOM`` and ``HETATM`` records are read; others are ignored; reading stops
        at the first ``ENDMDL``.

    Returns
    -------
    Atoms
        Read by :func:`parse_pqr`, whose :class:`~pbsolver.InputError` messages start with the
        file name and line number (a record that fits neither form, a non-finite value, a
        negative radius; or a file with no atoms).

    Raises
    ------
    FileNotFoundError
        When the file does not exist.

    Examples
    --------
    >>> import tempfile, os
    >>> text = "ATOM      1  NA  ION     1    -101.000-100.500   0.000  1.0000 1.8000"
    >>> with tempfile.NamedTemporaryFile("w", suffix=".pqr", delete=False) as f:
    ...     _ = f.write(text)
    >>> read_pqr(f.name).positions.tolist()
    [[-101.0, -100.5, 0.0]]
    >>> os.unlink(f.name)
    """
    path = os.fspath(path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        return parse_pqr(fh, source=path)


def parse_pqr(lines, source: str = "<string>") -> Atoms:
    """Parse PQR text (an iterable of lines, or one string).

    Each ``ATOM``/``HETATM`` record is read in one of two forms, decided line by line:

    * **whitespace-separated**: the last five whitespace-separated fields are x y z charge
      radius, each one number, after at least the serial, atom name, residue name and residue
      number;
    * **PDB fixed columns**, for records whose fields run together (coordinates of −100 Å or
      less fill their 8-character field: ``-100.123-200.456-300.789``): x, y, z in columns
      31–38, 39–46, 47–54 written ``%8.3f`` (decimal points in columns 35, 43, 51), then charge
      and radius after column 54, split on whitespace or, where they touch, at pdb2pqr's widths
      (columns 55–62 and 63–69).

    A record that reads in both forms must give the same x, y, z in both (a column-aligned
    record with a field missing would otherwise shift the residue number into x).

    Parameters
    ----------
    lines : iterable of str, or str
        The text.
    source : str
        Name used in error messages (the file name).

    Returns
    -------
    Atoms

    Raises
    ------
    InputError
        ``"<source>, line N: ..."`` for a record that fits neither form, whose two readings
        disagree, with a non-finite number or a negative radius; or text with no atoms.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    pos, q, r, names, resnames, resids = [], [], [], [], [], []
    for lineno, line in enumerate(lines, start=1):
        upper = line[:6].upper()
        if upper.startswith("ENDMDL"):
            break
        if upper.startswith("HETATM"):
            record = "HETATM"
        elif upper.startswith("ATOM"):
            record = "ATOM"
        else:
            continue
        line = line.rstrip("\r\n")
        values, head = _pqr_record(line, record, lineno, source)
        x, y, z, charge, radius = values
        if not all(map(math.isfinite, values)):
            raise InputError(f"{source}, line {lineno}: non-finite number in {line!r}")
        if radius < 0:
            raise InputError(f"{source}, line {lineno}: negative radius {radius} in {line!r}")
        pos.append((x, y, z))
        q.append(charge)
        r.append(radius)
        name, resname, resid = _labels_from_head(head)
        names.append(name)
        resnames.append(resname)
        resids.append(resid)
    if not pos:
        raise InputError(f"{source}: no ATOM or HETATM records found")
    return Atoms(pos, q, r, names=names, resnames=resnames, resids=resids)


#: One number, the whole of a field (what a PQR field must be).
_NUMBER_TEXT = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
_NUMBER = re.compile(_NUMBER_TEXT)
#: Five of them joined by single spaces: the whitespace form's x y z charge radius, one match.
_FIVE_NUMBERS = re.compile(" ".join([_NUMBER_TEXT] * 5))
_THREE_NUMBERS = re.compile(" ".join([_NUMBER_TEXT] * 3))
#: The residue number inside a label field.
_INTEGER = re.compile(r"-?\d+")
#: x, y, z of a PDB record: 0-based [start, end) columns and where ``%8.3f`` puts the point.
_XYZ_COLUMNS = ((30, 38), (38, 46), (46, 54))
_XYZ_POINTS = (34, 42, 50)
#: Charge and radius where they touch: pdb2pqr writes them ``%.4f`` right-aligned in 8 and 7
#: columns, so their decimal points sit in columns 58 and 65.
_QR_COLUMNS = ((54, 62), (62, 69))
_QR_POINTS = (57, 64)


def _pqr_record(line: str, record: str, lineno: int, source: str):
    """x y z charge radius of one record, and the label fields before them."""
    tokens = line.split()
    first = tokens[0]
    # record and serial run together from serial 100000 on ("HETATM100001"): split them
    lead = [first[len(record) :]] if len(first) > len(record) else []
    spaced = _whitespace_fields(tokens, lead)
    if spaced is not None and _columns_agree(line, spaced[0]):
        return spaced  # (the common case, decided without the columns' full check)
    xyz = _fixed_coordinates(line)
    if spaced is not None and xyz is not None and spaced[0][:3] != xyz:
        raise InputError(
            f"{source}, line {lineno}: {record} record reads differently as whitespace "
            f"fields (x y z = {spaced[0][:3]}) and in PDB columns 31-54 (x y z = {xyz}); "
            f"a field missing or misplaced? {line!r}"
        )
    if spaced is not None:
        return spaced
    qr = _fixed_charge_radius(line) if xyz is not None else None
    if qr is not None:
        return xyz + qr, lead + line[len(first) : _XYZ_COLUMNS[0][0]].split()
    raise InputError(
        f"{source}, line {lineno}: malformed {record} record: expected x y z charge radius "
        "either as the last five whitespace-separated fields or in PDB columns (x, y, z in "
        f"31-38, 39-46, 47-54, then charge and radius), got {line!r}"
    )


def _whitespace_fields(tokens, lead):
    """The whitespace form: five whole numbers at the end after at least four label fields."""
    if len(tokens) < 6:
        return None
    tail = tokens[-5:]
    if not _FIVE_NUMBERS.fullmatch(" ".join(tail)):
        return None
    head = lead + tokens[1:-5]
    # serial, atom name, residue name and residue number must precede the numbers
    if len(head) < 4:
        return None
    return [float(t) for t in tail], head


def _columns_agree(line: str, values) -> bool:
    """Whether PDB columns 31-54 read as ``values``' x, y, z, or cannot hold them at all.

    True means :func:`_fixed_coordinates` would give None or the same x, y, z, so the
    whitespace reading stands unchecked; False leaves the decision to that full check.
    """
    if not _column_aligned(line):
        return True  # no second reading
    try:
        return [float(line[a:b]) for a, b in _XYZ_COLUMNS] == values[:3]
    except ValueError:
        return False


def _column_aligned(line: str) -> bool:
    """Whether the line reaches past column 54 with %8.3f's decimal points in x, y and z."""
    return len(line) > _XYZ_COLUMNS[-1][1] and all(line[p] == "." for p in _XYZ_POINTS)


def _fixed_coordinates(line: str):
    """x, y, z from PDB columns 31-54, or None where the line is not column-aligned."""
    if not _column_aligned(line):
        return None
    fields = [line[a:b].strip() for a, b in _XYZ_COLUMNS]
    # each field one whole number: joined by single spaces they match three (a field with a
    # space inside, or an empty one, adds or doubles a space and does not)
    if not _THREE_NUMBERS.fullmatch(" ".join(fields)):
        return None
    return [float(f) for f in fields]


def _fixed_charge_radius(line: str):
    """Charge and radius after column 54 (whitespace-separated or in pdb2pqr's widths)."""
    tail = line[_XYZ_COLUMNS[-1][1] :].split()
    if len(tail) == 1:
        # charge and radius touch ("-10.12342.0000"): pdb2pqr's widths
        if line[_QR_COLUMNS[-1][1] :].strip() or any(line[p : p + 1] != "." for p in _QR_POINTS):
            return None
        tail = [line[a:b].strip() for a, b in _QR_COLUMNS]
    if len(tail) != 2 or not all(_NUMBER.fullmatch(t) for t in tail):
        return None
    return [float(t) for t in tail]


def _labels_from_head(head):
    """Atom name, residue name and residue number from the fields before the coordinates."""
    name = head[1] if len(head) > 1 else ""
    resname = head[2] if len(head) > 2 else ""
    resid = 0
    for tok in reversed(head[3:]):
        m = _INTEGER.search(tok)
        if m:
            resid = int(m.group())
            break
    return name, resname, resid


def write_pqr(atoms: Atoms, path) -> None:
    """Write ``atoms`` as a whitespace-separated PQR file (what :func:`read_pqr` reads)."""
    n = len(atoms)
    names = atoms.names if atoms.names is not None else np.array(["X"] * n)
    resnames = atoms.resnames if atoms.resnames is not None else np.array(["MOL"] * n)
    resids = atoms.resids if atoms.resids is not None else np.ones(n, dtype=int)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            x, y, z = atoms.positions[i]
            fh.write(
                f"ATOM  {i + 1:5d} {names[i]:<4s} {resnames[i]:<3s} {int(resids[i]):5d} "
                f"{x:12.6f} {y:12.6f} {z:12.6f} {atoms.charges[i]:10.6f} {atoms.radii[i]:8.5f}\n"
            )
        fh.write("END\n")


# ---------------------------------------------------------------------- helpers
def _float_array(a, name):
    require_real_numbers(a, name)
    try:
        return np.array(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be numbers: {exc}") from exc


def _labels(values, n, name):
    if values is None:
        return None
    arr = np.asarray([str(v) for v in values], dtype=object)
    if arr.shape != (n,):
        raise InputError(f"{name} must have one entry per atom ({n})")
    return arr


def _attr_or_none(obj, attr):
    try:
        return np.asarray(getattr(obj, attr))
    except Exception:  # MDAnalysis raises NoDataError for missing topology attributes
        return None


def _quantity(value, unit_name):
    if hasattr(value, "value_in_unit"):
        from openmm import unit

        return float(value.value_in_unit(getattr(unit, unit_name)))
    return float(value)


def _positions_angstrom(positions):
    if hasattr(positions, "value_in_unit"):
        from openmm import unit

        return np.asarray(positions.value_in_unit(unit.angstrom), dtype=np.float64)
    return np.asarray(positions, dtype=np.float64) * 10.0
