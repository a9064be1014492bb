"""The files an APBS input names: where they may be, and reading its molecules.

An input file is a recipe, not a key to the file system: the paths it names are relative to its
own folder and must stay inside it (no absolute path, no ``..`` or link leading out), unless the
user says otherwise (``allow_outside=True``, ``pbsolver apbs --allow-outside``). The same rule
holds for the files its ``write`` statements create, inside the output folder.

Molecules: ``mol pqr FILE`` (:func:`pbsolver.molecule.atoms.read_pqr`) and ``mol pdb FILE`` with
``parm flat FILE`` (APBS' flat parameter format: ``RESIDUE ATOM CHARGE RADIUS [EPSILON]`` a line,
``#`` comments), which gives each PDB atom its charge (e) and radius (Å) by residue and atom name.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from pbsolver.exceptions import InputError

#: Largest parameter or PDB file read, bytes.
MAX_TEXT_BYTES = 512 * 1024 * 1024


def resolve_path(
    name: str, folder, *, allow_outside: bool = False, what: str = "file", where: str = ""
) -> Path:
    """The path ``name`` of an input file, resolved against ``folder`` and checked.

    Parameters
    ----------
    name : str
        The path as the input file writes it.
    folder : path-like
        The input file's folder (reads) or the output folder (writes).
    allow_outside : bool
        Allow absolute paths and paths leading out of ``folder``.
    what, where : str
        Words for the error message (what the file is; ``file:line`` of the statement).

    Raises
    ------
    InputError
        An empty name, or (without ``allow_outside``) an absolute path or one that leads out of
        ``folder`` (through ``..`` or a symbolic link).
    """
    prefix = f"{where}: " if where else ""
    if not name or "\x00" in name:
        raise InputError(f"{prefix}{what} name {name!r} is not a usable path")
    base = Path(os.fspath(folder))
    path = Path(name)
    if path.is_absolute() or path.drive:
        if not allow_outside:
            raise InputError(
                f"{prefix}{what} {name!r} is an absolute path; an input file may only name "
                f"files inside its folder ({base}); pass --allow-outside "
                "(allow_outside=True) to permit it"
            )
        return path
    full = base / path
    if not allow_outside:
        real_base = Path(os.path.realpath(base))
        real = Path(os.path.realpath(full))
        if real != real_base and real_base not in real.parents:
            raise InputError(
                f"{prefix}{what} {name!r} leads outside the folder {base}; an input file may "
                "only name files inside its folder; pass --allow-outside (allow_outside=True) "
                "to permit it"
            )
    return full


def read_molecule(spec, folder, parm=None, *, source: str = "", allow_outside: bool = False,
                  table=None):  # fmt: skip
    """The :class:`~pbsolver.Atoms` of a READ ``mol`` statement.

    Parameters
    ----------
    spec : MoleculeSpec
    folder : path-like
        The input file's folder.
    parm : ParmSpec, optional
        The READ section's parameter file (needed for ``mol pdb``).
    source : str
        The input file's name, for messages.
    allow_outside : bool
        See :func:`resolve_path`.
    table : dict, optional
        ``parm`` already read (:func:`read_parm`), for an input with several molecules.

    Raises
    ------
    InputError
        A path refused by :func:`resolve_path`, a missing file, a format pbsolver does not read
        (``mol xml``, ``parm xml``), a PDB atom without parameters, or a bad record.
    """
    from pbsolver.molecule.atoms import Atoms, read_pqr

    where = f"{source}:{spec.line}"
    if spec.format == "xml":
        raise InputError(f"{where}: mol xml is not supported: use a PQR file (mol pqr)")
    path = resolve_path(
        spec.path, folder, allow_outside=allow_outside, what="molecule file", where=where
    )
    if not path.is_file():
        raise InputError(f"{where}: molecule file {spec.path!r} does not exist ({path})")
    if spec.format == "pqr":
        return read_pqr(path)
    if parm is None:
        raise InputError(
            f"{where}: mol pdb needs charges and radii from a parameter file: add "
            "'parm flat FILE' to the READ section (or use a PQR file)"
        )
    if table is None:
        table = read_parm(parm, folder, source=source, allow_outside=allow_outside)
    names, resnames, pos = read_pdb_atoms(path)
    q, r = np.empty(len(names)), np.empty(len(names))
    for i, (atom, res) in enumerate(zip(names, resnames, strict=True)):
        entry = table.get((res.upper(), atom.upper()))
        if entry is None:
            raise InputError(
                f"{where}: atom {i + 1} ({res} {atom}) of {spec.path!r} has no entry in the "
                f"parameter file {parm.path!r}"
            )
        q[i], r[i] = entry[:2]
    return Atoms(pos, q, r, names=names, resnames=resnames)


def read_parm(parm, folder, *, source: str = "", allow_outside: bool = False) -> dict:
    """APBS' flat parameter file as ``{(RESIDUE, ATOM): (charge e, radius Å, epsilon kJ/mol)}``.

    The Lennard-Jones well depth ``epsilon`` (the optional fifth column, used by APOLAR's
    dispersion integral) is NaN where the line has none.

    Raises
    ------
    InputError
        ``parm xml``, a missing file, or a line that is not ``RESIDUE ATOM CHARGE RADIUS ...``.
    """
    where = f"{source}:{parm.line}"
    if parm.format != "flat":
        raise InputError(f"{where}: parm {parm.format} is not supported (parm flat is)")
    path = resolve_path(
        parm.path, folder, allow_outside=allow_outside, what="parameter file", where=where
    )
    text = _read_text(path, where, "parameter file", parm.path)
    table = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            charge, radius = float(words[2]), float(words[3])
            epsilon = float(words[4]) if len(words) > 4 else math.nan
        except (IndexError, ValueError):
            charge = radius = epsilon = math.nan
        if not (
            math.isfinite(charge)
            and math.isfinite(radius)
            and radius >= 0
            and (len(words) < 5 or (math.isfinite(epsilon) and epsilon >= 0))
        ):
            raise InputError(
                f"{path}, line {lineno}: expected 'RESIDUE ATOM CHARGE RADIUS [EPSILON]', got "
                f"{line.strip()!r}"
            )
        table[(words[0].upper(), words[1].upper())] = (charge, radius, epsilon)
    return table


def atom_epsilons(atoms, table, where: str) -> np.ndarray:
    """Each atom's Lennard-Jones well depth (kJ/mol) from a :func:`read_parm` table.

    Atoms are looked up by residue and atom name, as APBS does for APOLAR's dispersion term.

    Raises
    ------
    InputError
        Atoms without names (a PQR without them), an atom without an entry, or an entry
        without the EPSILON column.
    """
    if atoms.names is None or atoms.resnames is None:
        raise InputError(f"{where}: the dispersion term needs atom and residue names")
    out = np.empty(len(atoms))
    for i, (atom, res) in enumerate(zip(atoms.names, atoms.resnames, strict=True)):
        entry = table.get((str(res).upper(), str(atom).upper()))
        if entry is None or not math.isfinite(entry[2]):
            what = "no entry" if entry is None else "no EPSILON column"
            raise InputError(
                f"{where}: atom {i + 1} ({res} {atom}) has {what} in the parameter file; the "
                "dispersion term (bconc) needs each atom's Lennard-Jones epsilon"
            )
        out[i] = entry[2]
    return out


def water_parameters(table, where: str) -> tuple:
    """APBS' water for the dispersion term: the radius (Å) and epsilon (kJ/mol) of WAT OW.

    As APBS, ``WAT O`` serves where there is no ``WAT OW``.

    Raises
    ------
    InputError
        Neither entry, or one without the EPSILON column.
    """
    entry = table.get(("WAT", "OW"), table.get(("WAT", "O")))
    if entry is None or not math.isfinite(entry[2]):
        raise InputError(
            f"{where}: the dispersion term (bconc) needs water's Lennard-Jones parameters: a "
            "'WAT OW' (or 'WAT O') line with RADIUS and EPSILON in the parameter file"
        )
    return float(entry[1]), float(entry[2])


def read_pdb_atoms(path):
    """Atom names, residue names and positions (Å) of the ATOM/HETATM records of a PDB file.

    Fields are read by white space, as APBS does (record, serial, name, residue, [chain],
    residue number, x, y, z): the coordinates are the first three numbers with a decimal point
    after the residue name; coordinates that run together are taken from the fixed PDB columns
    31–54. Reading stops at the first ENDMDL.

    Raises
    ------
    InputError
        A record without three coordinates, or no atoms.
    """
    text = _read_text(Path(path), str(path), "PDB file", str(path))
    names, resnames, pos = [], [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        head = line[:6].upper()
        if head.startswith("ENDMDL"):
            break
        if not (head.startswith("ATOM") or head.startswith("HETATM")):
            continue
        words = line.split()
        xyz = _decimal_triple(words[4:])
        if xyz is None:
            try:
                xyz = [float(line[30:38]), float(line[38:46]), float(line[46:54])]
            except ValueError:
                raise InputError(
                    f"{path}, line {lineno}: cannot read the coordinates of {line.rstrip()!r}"
                ) from None
        if not all(math.isfinite(v) for v in xyz):
            raise InputError(f"{path}, line {lineno}: non-finite coordinate in {line.rstrip()!r}")
        names.append(words[2] if len(words) > 2 else "")
        resnames.append(words[3] if len(words) > 3 else "")
        pos.append(xyz)
    if not pos:
        raise InputError(f"{path}: no ATOM or HETATM records found")
    return names, resnames, np.asarray(pos, dtype=float)


def _decimal_triple(words):
    """The first three consecutive words that are numbers with a decimal point, or None."""
    for i in range(len(words) - 2):
        trio = words[i : i + 3]
        if all("." in w for w in trio):
            try:
                return [float(w) for w in trio]
            except ValueError:
                continue
    return None


def _read_text(path: Path, where: str, what: str, name: str) -> str:
    if not path.is_file():
        raise InputError(f"{where}: {what} {name!r} does not exist ({path})")
    if path.stat().st_size > MAX_TEXT_BYTES:
        raise InputError(f"{where}: {what} {name!r} is too large")
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{where}: {what} {name!r} cannot be read: {exc.strerror}") from exc


__all__ = [
    "atom_epsilons",
    "read_molecule",
    "read_parm",
    "read_pdb_atoms",
    "resolve_path",
    "water_parameters",
]
