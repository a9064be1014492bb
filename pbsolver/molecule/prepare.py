"""Structure preparation: a PDB or mmCIF file → charges and radii, through pdb2pqr's library.

:func:`prepare_structure` runs the same steps as pdb2pqr's command line (``pdb2pqr --ff=AMBER
in.pdb out.pqr``; with ``ph`` also ``--titration-state-method=propka --with-ph=PH``) in this
process, and returns the PQR records that command would write, with what it repaired.
:meth:`pbsolver.Atoms.from_structure` turns them into :class:`~pbsolver.Atoms`.

Why pdb2pqr's functions and not its ``run_pdb2pqr``: ``run_pdb2pqr`` (the only entry point
pdb2pqr exports) writes a file and returns no records, fetches a structure from the RCSB over
the network when the path is not a file, reads a PDB only up to its first blank line, and
crashes on mmCIF files without the header categories pdb2pqr prints (``_struct.title``, ...,
which gemmi or MD packages do not write). So this module calls the steps of pdb2pqr's
``main_driver`` itself (``build_main_parser``, ``setup_molecule``, ``non_trivial``: the
functions of ``pdb2pqr.main``), and reads the input with pdb2pqr's own record parsers
(``pdb.read_pdb``; ``cif.atom_site`` for the atoms of an mmCIF). The charges and radii are the
command line's: ``tests/test_prepare.py`` checks that line by line.

What is repaired and what is refused:

* **missing heavy atoms** are rebuilt by pdb2pqr (from its residue templates) when at most 10 %
  of the heavy atoms are missing; they are listed in :attr:`Preparation.repaired` and in a
  :class:`PreparationWarning`. More missing than that is an :class:`~pbsolver.InputError`.
* **hydrogens** are always added (and their positions optimised), as pdb2pqr does.
* **alternate locations**: one location is kept per residue, ``altloc="first"`` (the default)
  the first letter that appears in the residue, or a given letter; others are dropped and listed
  in :attr:`Preparation.alternate_locations` (pdb2pqr alone would keep the first copy of each
  atom name, mixing locations).
* **residues the force field has no parameters for** (ligands, ions, modified residues) are an
  :class:`~pbsolver.InputError` naming them, unless ``allow_unknown=True`` leaves their atoms
  out (pdb2pqr's behaviour, listed in :attr:`Preparation.unknown`); give a ligand its charges
  with :meth:`pbsolver.Atoms.from_mol2`.
* **waters** are dropped unless ``keep_water=True``.
* only the first model of a multi-model file is used; a non-integer total charge, a file
  pdb2pqr cannot read, or a pH outside 0–14 are :class:`~pbsolver.InputError`.

Atoms come in pdb2pqr's order: chains sorted by their ID, each residue's hydrogens after its
heavy atoms. pdb2pqr and PROPKA are imported only when called (``pip install pbsolver[prep]``).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import math
import os
import warnings
from dataclasses import dataclass

from pbsolver.exceptions import InputError

#: Force fields of pdb2pqr (its ``--ff`` choices).
FORCEFIELDS = ("AMBER", "CHARMM", "PARSE", "PEOEPB", "SWANSON", "TYL06")
#: Largest fraction of missing heavy atoms pdb2pqr rebuilds (its ``REPAIR_LIMIT``).
REPAIR_LIMIT = 0.1
#: Residue names of water, dropped unless ``keep_water=True`` (pdb2pqr's ``--drop-water``).
WATER_NAMES = ("HOH", "WAT")
_CIF_SUFFIXES = (".cif", ".mmcif")


class PreparationWarning(UserWarning):
    """pdb2pqr changed the structure: rebuilt atoms, dropped locations or residues."""


@dataclass(frozen=True)
class Preparation:
    """What :func:`prepare_structure` produced.

    Attributes
    ----------
    pqr_lines : tuple of str
        The ``ATOM``/``HETATM`` records pdb2pqr's command line writes (charges e, radii Å).
    forcefield : str
        The force field of the charges and radii.
    ph : float or None
        pH of the PROPKA protonation states; None: pdb2pqr's default states, no PROPKA.
    repaired : tuple of str
        Heavy atoms pdb2pqr rebuilt, one ``"RES CHAIN NUM: ATOM ATOM"`` entry per residue.
    alternate_locations : tuple of str
        Residues with alternate locations, with the one kept (``"RES CHAIN NUM: kept A of A B"``).
    unknown : tuple of str
        Residues without force-field parameters, left out (only with ``allow_unknown=True``).
    waters_dropped : int
        Water atoms removed.
    pka : tuple of dict or None
        PROPKA's table (residue, pKa, ...) when ``ph`` was given.
    messages : tuple of str
        Warnings pdb2pqr and PROPKA logged.
    """

    pqr_lines: tuple[str, ...]
    forcefield: str
    ph: float | None
    repaired: tuple[str, ...]
    alternate_locations: tuple[str, ...]
    unknown: tuple[str, ...]
    waters_dropped: int
    pka: tuple[dict, ...] | None
    messages: tuple[str, ...]

    def summary(self) -> str:
        """One paragraph naming every change made to the structure ("" when none)."""
        parts = []
        if self.repaired:
            parts.append(f"rebuilt missing heavy atoms: {'; '.join(self.repaired)}")
        if self.alternate_locations:
            parts.append(f"alternate locations: {'; '.join(self.alternate_locations)}")
        if self.unknown:
            parts.append(f"left out (no parameters): {'; '.join(self.unknown)}")
        return ". ".join(parts)


def prepare_structure(
    path,
    forcefield: str = "AMBER",
    ph: float | None = 7.0,
    *,
    altloc: str = "first",
    keep_water: bool = False,
    allow_unknown: bool = False,
) -> Preparation:
    """Assign charges and radii to a PDB or mmCIF file with pdb2pqr (and protonate with PROPKA).

    Parameters
    ----------
    path : str or os.PathLike
        A PDB (``.pdb``, ``.ent``) or mmCIF (``.cif``, ``.mmcif``) file, optionally gzipped
        (``.gz``). Never fetched from the network.
    forcefield : {"AMBER", "CHARMM", "PARSE", "PEOEPB", "SWANSON", "TYL06"}
        pdb2pqr's force field (case-insensitive).
    ph : float or None
        pH (0–14) at which PROPKA's pKa values set the titration states; None keeps pdb2pqr's
        default states (what ``pdb2pqr --ff=...`` does without ``--titration-state-method``).
    altloc : str
        ``"first"``: keep, per residue, the first alternate location that appears; or one
        letter (``"B"``) to keep that location in every residue that has it (the first one in
        the others).
    keep_water : bool
        Keep water molecules (default: drop them).
    allow_unknown : bool
        Leave out residues that have no parameters instead of refusing the structure.

    Returns
    -------
    Preparation

    Raises
    ------
    InputError
        Unknown force field, pH out of range, unreadable file, no atoms, too many missing heavy
        atoms, residues without parameters (unless ``allow_unknown``), an alternate location
        letter the file does not have, a non-integer net charge, or any failure inside pdb2pqr
        (with its message).
    FileNotFoundError
        When the file does not exist.
    ImportError
        When pdb2pqr is not installed (``pip install pbsolver[prep]``).
    """
    ff = _check_forcefield(forcefield)
    ph = _check_ph(ph)
    if not isinstance(altloc, str) or not (altloc == "first" or len(altloc) == 1):
        raise InputError(f"altloc must be 'first' or one letter, got {altloc!r}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such structure file: {path!r}")
    p2p = _import_pdb2pqr()
    with _collect_logs(p2p.logger_names) as messages:
        records, is_cif = _read_records(p2p, path)
        waters = 0
        if not keep_water:
            wet = [_is_atom(p2p, r) and r.res_name in WATER_NAMES for r in records]
            waters = sum(wet)
            records = [r for r, w in zip(records, wet, strict=True) if not w]
        if not any(_is_atom(p2p, r) for r in records):
            raise InputError(f"{path}: no ATOM or HETATM records (after dropping water)")
        records, alt_report = _choose_locations(p2p, records, altloc, path)
        try:
            result = _run(p2p, records, ff, ph, is_cif, path)
        except InputError:
            raise
        except Exception as exc:  # pdb2pqr raises ValueError, RuntimeError, KeyError, ...
            recent = "; ".join(messages[-3:])
            raise InputError(
                f"pdb2pqr could not prepare {path}: {type(exc).__name__}: {exc}"
                + (f" (pdb2pqr said: {recent})" if recent else "")
            ) from exc
    missed, repaired, pka, lines = result
    unknown = _residue_labels(missed)
    if unknown and not allow_unknown:
        shown = "; ".join(unknown[:8]) + (
            f"; ... ({len(unknown)} in all)" if len(unknown) > 8 else ""
        )
        raise InputError(
            f"{path}: no {ff} parameters for residue(s) {shown}. Remove them, give a ligand its "
            "own charges (Atoms.from_mol2 / from_sdf), or pass allow_unknown=True to leave "
            "their atoms out"
        )
    pqr = tuple(ln.rstrip("\n") for ln in lines if ln.startswith(("ATOM", "HETATM")))
    if not pqr:
        raise InputError(f"{path}: pdb2pqr assigned parameters to no atom")
    return Preparation(
        pqr_lines=pqr,
        forcefield=ff,
        ph=ph,
        repaired=tuple(repaired),
        alternate_locations=tuple(alt_report),
        unknown=tuple(unknown),
        waters_dropped=waters,
        pka=None if pka is None else tuple(dict(row) for row in pka),
        messages=tuple(messages),
    )


def warn_changes(preparation: Preparation, path) -> None:
    """Issue one :class:`PreparationWarning` naming what was changed, if anything was."""
    text = preparation.summary()
    if text:
        warnings.warn(f"{os.fspath(path)}: {text}", PreparationWarning, stacklevel=3)


# ---------------------------------------------------------------------- checks
def _check_forcefield(forcefield) -> str:
    ff = str(forcefield).upper() if isinstance(forcefield, str) else None
    if ff not in FORCEFIELDS:
        raise InputError(f"forcefield must be one of {FORCEFIELDS}, got {forcefield!r}")
    return ff


def _check_ph(ph):
    if ph is None:
        return None
    if isinstance(ph, bool):
        raise InputError(f"ph must be a number between 0 and 14 or None, got {ph!r}")
    try:
        value = float(ph)
    except (TypeError, ValueError):
        raise InputError(f"ph must be a number between 0 and 14 or None, got {ph!r}") from None
    if not (math.isfinite(value) and 0.0 <= value <= 14.0):
        raise InputError(f"ph must be between 0 and 14, got {ph!r}")
    return value


# ---------------------------------------------------------------------- pdb2pqr
@dataclass(frozen=True)
class _Pdb2pqr:
    main: object
    io: object
    pdb: object
    cif: object
    pdbx: object
    logger_names: tuple[str, ...]


def _import_pdb2pqr() -> _Pdb2pqr:
    try:
        before = warnings.showwarning
        import pdb2pqr
        import pdbx
        from pdb2pqr import cif, main, pdb
        from pdb2pqr import io as p2p_io
        from pdb2pqr.config import VERSION
    except ImportError as exc:
        raise ImportError(
            "Atoms.from_structure needs pdb2pqr and PROPKA: pip install 'pbsolver[prep]'"
        ) from exc
    if warnings.showwarning is not before:
        # importing pdb2pqr turns on logging.captureWarnings for the whole process, which would
        # send every later Python warning (ours included) to the logging system instead
        logging.captureWarnings(False)
    names = (pdb2pqr.__name__, f"PDB2PQR{VERSION}", "propka")
    return _Pdb2pqr(main, p2p_io, pdb, cif, pdbx, names)


def _is_atom(p2p, record) -> bool:
    return isinstance(record, p2p.pdb.ATOM | p2p.pdb.HETATM)


def _open_text(path):
    if path.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _read_records(p2p, path):
    """pdb2pqr's records of the structure, and whether it was mmCIF."""
    stem = path[:-3] if path.lower().endswith(".gz") else path
    is_cif = stem.lower().endswith(_CIF_SUFFIXES)
    try:
        with _open_text(path) as fh:
            text = fh.read()
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    if is_cif:
        return _read_cif(p2p, text, path), True
    return _read_pdb(p2p, text, path), False


def _read_pdb(p2p, text, path):
    lines = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue  # pdb2pqr's reader stops at the first blank line
        if line.startswith(("ATOM", "HETATM")):
            try:
                [float(line[a:b]) for a, b in ((30, 38), (38, 46), (46, 54))]
            except ValueError:
                raise InputError(
                    f"{path}, line {lineno}: coordinates are not numbers in PDB columns "
                    f"31-54: {line!r}"
                ) from None
        lines.append(line)
    try:
        records, _ = p2p.pdb.read_pdb(io.StringIO("\n".join(lines) + "\n"))
    except (ValueError, KeyError, IndexError) as exc:
        raise InputError(f"pdb2pqr cannot read {path} as PDB: {exc}") from exc
    return records


def _read_cif(p2p, text, path):
    """The first model's atoms of an mmCIF file as pdb2pqr records.

    Laid out as pdb2pqr's ``cif.convert_cif_atom_site_to_pdb_line`` does, with three
    differences: the chain is ``label_asym_id`` (pdb2pqr's choice) only where every one is a
    single character, else ``auth_asym_id``; the insertion code is kept; and a row that does not
    fit PDB columns is an error, not a dropped atom.
    """
    try:
        blocks = p2p.pdbx.load(io.StringIO(text))
    except Exception as exc:  # the mmCIF parser raises plain exceptions of several kinds
        raise InputError(f"cannot read {path} as mmCIF: {exc}") from exc
    site = blocks[0].get_object("atom_site") if blocks else None
    if site is None:
        raise InputError(f"{path}: no _atom_site loop (no atoms)")
    have = set(site.attribute_list)
    need = {"group_PDB", "label_atom_id", "label_comp_id", "Cartn_x", "Cartn_y", "Cartn_z"}
    if need - have or not have & {"auth_seq_id", "label_seq_id"}:
        missing = sorted(need - have) or ["auth_seq_id or label_seq_id"]
        raise InputError(f"{path}: _atom_site lacks {', '.join(missing)}")

    def column(name, fallback=None):
        if name not in have:
            return [fallback] * site.row_count
        return [_cif_value(site.get_value(name, i), fallback) for i in range(site.row_count)]

    models = column("pdbx_PDB_model_num", "1")
    rows = [i for i in range(site.row_count) if models[i] == models[0]]
    chains = None
    for key in ("label_asym_id", "auth_asym_id"):
        values = column(key, "")
        if all(len(values[i]) <= 1 for i in rows):
            chains = values
            break
    if chains is None:
        raise InputError(
            f"{path}: chain IDs longer than one character (label_asym_id and auth_asym_id); "
            "pdb2pqr reads PDB columns, which hold one"
        )
    seq = column("auth_seq_id") if "auth_seq_id" in have else column("label_seq_id")
    group, names, resnames = column("group_PDB"), column("label_atom_id"), column("label_comp_id")
    alts, icodes = column("label_alt_id", ""), column("pdbx_PDB_ins_code", "")
    elements, serials = column("type_symbol", ""), column("id", "0")
    xyz = [column(f"Cartn_{c}") for c in "xyz"]
    occ, bfac = column("occupancy", "1.0"), column("B_iso_or_equiv", "0.0")
    records = []
    for i in rows:
        if group[i] not in ("ATOM", "HETATM"):
            continue
        try:
            x, y, z = (float(v[i]) for v in xyz)
            resseq, serial = int(seq[i]), int(serials[i])
            o, b = float(occ[i]), float(bfac[i])
        except (TypeError, ValueError):
            raise InputError(
                f"{path}: _atom_site row {i + 1} has a coordinate, residue number or serial "
                "that is not a number"
            ) from None
        name = names[i]
        name = f" {name:<3}" if len(elements[i]) < 2 and len(name) < 4 else f"{name:<4}"
        line = (
            f"{group[i]:<6}{serial % 100000:>5} {name}{alts[i]:1}{resnames[i]:>3} "
            f"{chains[i]:1}{resseq:>4}{icodes[i]:1}   {x:8.3f}{y:8.3f}{z:8.3f}{o:6.2f}{b:6.2f}"
            f"{'':10}{elements[i]:>2}  "
        )
        if len(line) != 80:
            raise InputError(
                f"{path}: _atom_site row {i + 1} ({resnames[i]} {resseq} {names[i]}) does not "
                "fit PDB columns (a name of more than 4 or a residue name of more than 3 "
                "characters, or a coordinate beyond -999.999..9999.999 Å); pdb2pqr needs them"
            )
        klass = p2p.pdb.ATOM if group[i] == "ATOM" else p2p.pdb.HETATM
        records.append(klass(line))
    return records


def _cif_value(value, fallback):
    """An mmCIF value, with its unknown (``?``) and inapplicable (``.``) markers → fallback."""
    if value is None or value in ("?", "."):
        return fallback
    return str(value)


def _choose_locations(p2p, records, altloc, path):
    """Keep one alternate location per residue position; report what was chosen.

    A position (chain, number, insertion code) may hold different residues in its locations
    (``ASER``/``BTHR``): the choice is per position, so one residue survives.
    """
    letters: dict[tuple, list[str]] = {}
    names: dict[tuple, list[str]] = {}
    for r in records:
        if _is_atom(p2p, r) and r.alt_loc:
            key = _position(r)
            seen = letters.setdefault(key, [])
            if r.alt_loc not in seen:
                seen.append(r.alt_loc)
            if r.res_name not in names.setdefault(key, []):
                names[key].append(r.res_name)
    if not letters:
        return records, []
    if altloc != "first" and not any(altloc in seen for seen in letters.values()):
        found = sorted({c for seen in letters.values() for c in seen})
        raise InputError(f"{path}: no alternate location {altloc!r} (the file has {found})")
    # the asked letter where the position has it, else its first ("first" is never a letter)
    keep = {key: altloc if altloc in seen else seen[0] for key, seen in letters.items()}
    out = []
    for r in records:
        if _is_atom(p2p, r) and r.alt_loc:
            if r.alt_loc != keep[_position(r)]:
                continue
            r.alt_loc = ""  # one location left: pdb2pqr need not warn about occupancies
        out.append(r)
    report = [
        f"{'/'.join(names[key])} {key[0]}{key[1]}{key[2]}: kept {keep[key]} of {' '.join(seen)}"
        for key, seen in letters.items()
    ]
    return out, report


def _position(record):
    return (record.chain_id, record.res_seq, record.ins_code)


def _run(p2p, records, ff, ph, is_cif, path):
    """pdb2pqr's main_driver without its file input and output."""
    main = p2p.main
    argv = [f"--ff={ff}"]
    if ph is not None:
        argv += ["--titration-state-method=propka", f"--with-ph={ph!r}"]
    args = main.build_main_parser().parse_args([*argv, path, os.devnull])
    args = main.transform_arguments(args)
    main.check_options(args)
    definition = p2p.io.get_definitions()
    biomolecule, definition, _ = main.setup_molecule(records, definition, None)
    biomolecule.set_termini(neutraln=args.neutraln, neutralc=args.neutralc)
    biomolecule.update_bonds()
    heavy = biomolecule.num_heavy
    missing = biomolecule.num_missing_heavy  # also fills residue.missing
    if heavy and missing / heavy > REPAIR_LIMIT:
        raise InputError(
            f"{path}: {missing} of {heavy} heavy atoms are missing; pdb2pqr rebuilds at most "
            f"{REPAIR_LIMIT:.0%}"
        )
    repaired = [
        f"{_residue_label(res)}: {' '.join(res.missing)}"
        for res in biomolecule.residues
        if getattr(res, "missing", None)
    ]
    results = main.non_trivial(
        args=args, biomolecule=biomolecule, ligand=None, definition=definition, is_cif=is_cif
    )
    return results["missed_residues"], repaired, results["pka_df"], results["lines"]


def _residue_label(residue) -> str:
    chain = getattr(residue, "chain_id", "") or ""
    return f"{residue.name} {chain}{residue.res_seq}{getattr(residue, 'ins_code', '') or ''}"


def _residue_labels(atoms) -> list[str]:
    seen: dict[str, list[str]] = {}
    for atom in atoms or ():
        label = _residue_label(atom.residue) if getattr(atom, "residue", None) else atom.res_name
        seen.setdefault(label, []).append(atom.name)
    return [f"{label} ({' '.join(names)})" for label, names in seen.items()]


class _LogCollector(logging.Handler):
    """Collects the warnings pdb2pqr and PROPKA log while they run.

    Attached to their loggers, it also keeps those messages off stderr where the program has
    configured no logging (Python prints to stderr only when no handler exists).
    """

    def __init__(self, messages):
        super().__init__(level=logging.WARNING)
        self.messages = messages

    def emit(self, record):
        self.messages.append(record.getMessage().strip())


@contextlib.contextmanager
def _collect_logs(names):
    """A list that receives the WARNING-and-above messages of the named loggers meanwhile."""
    messages: list[str] = []
    handler = _LogCollector(messages)
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield messages
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
