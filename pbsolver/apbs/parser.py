"""APBS input files (``.in``) as plain dataclasses: tokens with line numbers, then the grammar.

The lexical rules are APBS 3.4's (``NOsh_parseInput``): tokens are separated by white space and
by ``=``, ``,`` and ``;``; ``#`` and ``%`` start a comment that runs to the end of the line;
keywords are case-insensitive; a file name may be quoted (``"my file.pqr"``). The grammar is
that of the sections ``READ … END``, ``ELEC [name N] <method> … END``, ``APOLAR … END``,
``PRINT <what> <id> [+|- <id>] … END`` and ``QUIT``.

This module only reads: it keeps every statement APBS accepts in a multigrid (``mg-*``) ELEC
block with the line it came from, and refuses what is not APBS (an unknown keyword, a missing
END, a bad number) with an :class:`~pbsolver.InputError` naming the file and the line.
Whether pbsolver can *run* a statement (``npbe``, ``mg-para``, ``usemap`` …) is decided later,
by :mod:`pbsolver.apbs.model`, which has the line numbers to say so.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pbsolver.apbs.section import SectionBlock
from pbsolver.exceptions import InputError

#: Characters APBS treats as white space between tokens.
SEPARATORS = frozenset(" =,;\t\r\n\f\v")
#: Characters that start a comment (to the end of the line).
COMMENTS = frozenset("#%")
#: Largest input file read, bytes (APBS inputs are a few kB).
MAX_INPUT_BYTES = 4 * 1024 * 1024

#: ELEC methods of the multigrid family (parsed); other APBS methods are refused at once.
MG_METHODS = ("mg-manual", "mg-auto", "mg-para", "mg-dummy")
OTHER_METHODS = (
    "fe-manual", "bem", "bem-manual", "tabi", "geoflow", "geoflow-auto", "geoflow-manual",
    "geoflow-none", "pbam", "pbam-auto", "pbsam", "pbsam-auto", "pygbe",
)  # fmt: skip
EQUATIONS = ("lpbe", "npbe", "lrpbe", "nrpbe", "smpbe")
BCFL = ("zero", "sdh", "mdh", "focus", "mem", "map")
SRFM = ("mol", "smol", "spl2", "spl3", "spl4")
CHGM = ("spl0", "spl2", "spl4")
CALC = ("no", "total", "comps")
WRITE_TYPES = (
    "pot", "atompot", "charge", "smol", "dielx", "diely", "dielz", "kappa", "sspl", "vdw",
    "ivdw", "lap", "edens", "ndens", "qdens",
)  # fmt: skip
WRITE_FORMATS = ("dx", "dxbin", "uhbd", "avs", "gz", "flat")
PRINT_WHAT = {
    "energy": "elecEnergy",  # APBS' deprecated spelling of elecEnergy
    "elecenergy": "elecEnergy",
    "force": "elecForce",
    "elecforce": "elecForce",
    "apolenergy": "apolEnergy",
    "apolforce": "apolForce",
}
# APBS' deprecated integer forms of some keywords (vhal.h, pbeparm.h enumerations)
_NUMERIC = {
    "bcfl": {0: "zero", 1: "sdh", 2: "mdh", 4: "focus", 5: "mem", 6: "map"},
    "srfm": {0: "mol", 1: "smol", 2: "spl2", 3: "spl3", 4: "spl4"},
    "chgm": {0: "spl0", 1: "spl2", 2: "spl4"},
    "calcenergy": {0: "no", 1: "total", 2: "comps"},
    "calcforce": {0: "no", 1: "total", 2: "comps"},
}


# ---------------------------------------------------------------------- the dataclasses
@dataclass(frozen=True)
class Token:
    """One token of an input file and the line (1-based) it starts on."""

    text: str
    line: int


@dataclass
class MoleculeSpec:
    """``mol <format> <path>`` of the READ section (molecule ``index``, 1-based)."""

    index: int
    format: str
    path: str
    line: int


@dataclass
class ParmSpec:
    """``parm <format> <path>`` of the READ section."""

    format: str
    path: str
    line: int


@dataclass
class MapSpec:
    """``diel``/``kappa``/``pot``/``charge``/``mesh`` maps read by the READ section."""

    kind: str
    format: str
    paths: tuple
    line: int


@dataclass
class Center:
    """A grid centre: ``mol N`` (the centre of molecule N) or a point (Å)."""

    mol: int | None = None
    point: tuple | None = None
    line: int = 0


@dataclass
class IonSpec:
    """``ion charge C conc M radius R``: charge e, concentration mol/L, radius Å."""

    charge: float
    conc: float
    radius: float
    line: int


@dataclass
class WriteSpec:
    """``write <type> <format> <stem>``."""

    kind: str
    format: str
    stem: str
    line: int


@dataclass
class ElecBlock(SectionBlock):
    """One ``ELEC`` section, as written (None: not given; the shared keywords: SectionBlock).

    ``other`` holds keywords of APBS' parallel and membrane options (and ``writemat``,
    ``usemesh``), kept with their lines for the model to refuse.
    """

    KIND: ClassVar[str] = "ELEC"

    method: str | None = None
    dime: tuple | None = None
    glen: tuple | None = None
    gcent: Center | None = None
    cglen: tuple | None = None
    fglen: tuple | None = None
    cgcent: Center | None = None
    fgcent: Center | None = None
    equation: str | None = None
    bcfl: str | None = None
    pdie: float | None = None
    sdie: float | None = None
    ions: list = field(default_factory=list)
    chgm: str | None = None
    etol: float | None = None
    nlev: int | None = None
    writes: list = field(default_factory=list)
    usemaps: list = field(default_factory=list)
    other: dict = field(default_factory=dict)


@dataclass
class ApolarBlock(SectionBlock):
    """One ``APOLAR`` section, as written (None: not given; the shared keywords: SectionBlock).

    ``gamma`` (kJ mol⁻¹ Å⁻²), ``press`` (kJ mol⁻¹ Å⁻³), ``bconc`` (Å⁻³), ``dpos`` (Å); ``srfm``
    is only ``sacc``; ``grid`` is the spacing of the volume and dispersion quadratures.
    """

    KIND: ClassVar[str] = "APOLAR"

    dpos: float | None = None
    bconc: float | None = None
    press: float | None = None
    gamma: float | None = None


@dataclass
class PrintTerm:
    """One operand of a PRINT statement: sign (+1 or −1) and calculation (1-based)."""

    sign: int
    calc: int
    line: int


@dataclass
class PrintStatement:
    """``PRINT <what> <id> [+|- <id>] … END``.

    ``what`` is elecEnergy, elecForce, apolEnergy or apolForce; ``deprecated`` is True for
    APBS' old spellings ``energy``/``force``.
    """

    what: str
    terms: list
    line: int
    deprecated: bool = False


@dataclass
class ApbsInput:
    """A whole APBS input file."""

    source: str
    folder: Path | None
    molecules: list = field(default_factory=list)
    parm: ParmSpec | None = None
    maps: list = field(default_factory=list)
    elecs: list = field(default_factory=list)
    apolars: list = field(default_factory=list)
    prints: list = field(default_factory=list)

    def elec_named(self, name: str):
        """The ELEC block of that name (case-insensitive, as APBS), or None."""
        for e in self.elecs:
            if e.name is not None and e.name.lower() == name.lower():
                return e
        return None


# ---------------------------------------------------------------------- tokens
def tokenize(text: str, source: str = "<string>") -> list[Token]:
    """Split APBS input text into tokens with their line numbers.

    Raises
    ------
    InputError
        On a quoted name that is not closed on its line.
    """
    tokens: list[Token] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if c in COMMENTS:
                break
            if c in SEPARATORS:
                i += 1
                continue
            if c == '"':
                end = line.find('"', i + 1)
                if end < 0:
                    raise InputError(f"{source}:{lineno}: quoted name not closed: {line[i:]!r}")
                tokens.append(Token(line[i + 1 : end], lineno))
                i = end + 1
                continue
            j = i
            while j < n and line[j] not in SEPARATORS and line[j] not in COMMENTS:
                j += 1
            tokens.append(Token(line[i:j], lineno))
            i = j
    return tokens


class _Stream:
    """Tokens read one by one, with errors that name the file and line."""

    def __init__(self, tokens, source):
        self.tokens = tokens
        self.pos = 0
        self.source = source

    def error(self, line: int, message: str) -> InputError:
        return InputError(f"{self.source}:{line}: {message}")

    def more(self) -> bool:
        return self.pos < len(self.tokens)

    def next(self, what: str, after: Token) -> Token:
        """The next token, or an error saying the file ended where ``what`` was expected."""
        if self.pos >= len(self.tokens):
            raise self.error(after.line, f"the file ends where {what} was expected")
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def keywords(self, what: str, start: Token):
        """``(key, token)`` of each token up to and with the END of the section at ``start``.

        ``key`` is the token's text lower-cased; the file ending before END is an error that
        names ``what`` (the END expected).
        """
        while True:
            tok = self.next(what, start)
            key = tok.text.lower()
            yield key, tok
            if key == "end":
                return

    def peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def number(self, keyword: Token, what: str = "a number") -> float:
        tok = self.next(f"{what} after {keyword.text!r}", keyword)
        try:
            v = float(tok.text)
        except ValueError:
            v = math.nan
        if not math.isfinite(v):
            raise self.error(tok.line, f"{keyword.text} needs {what}, got {tok.text!r}")
        return v

    def integer(self, keyword: Token, what: str = "an integer") -> int:
        tok = self.next(f"{what} after {keyword.text!r}", keyword)
        try:
            return int(tok.text)
        except ValueError:
            raise self.error(tok.line, f"{keyword.text} needs {what}, got {tok.text!r}") from None

    def numbers(self, keyword: Token, count: int = 3) -> tuple:
        return tuple(self.number(keyword, f"{count} numbers") for _ in range(count))

    def word(self, keyword: Token, choices, what: str) -> str:
        tok = self.next(what, keyword)
        w = tok.text.lower()
        numeric = _NUMERIC.get(keyword.text.lower())
        if numeric is not None and w.lstrip("-").isdigit() and int(w) in numeric:
            w = numeric[int(w)]  # APBS' deprecated integer form
        if w not in choices:
            raise self.error(
                tok.line, f"{keyword.text} must be one of {', '.join(choices)}; got {tok.text!r}"
            )
        return w


# ---------------------------------------------------------------------- the grammar
def parse_file(path) -> ApbsInput:
    """Read and parse an APBS input file.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    ApbsInput
        Paths in it are as written (relative to the file's folder, ``folder``).

    Raises
    ------
    InputError
        A missing or unreadable file, or anything :func:`parse_text` refuses.
    """
    p = Path(os.fspath(path))
    if not p.is_file():
        raise InputError(f"APBS input file {str(p)!r} does not exist or is not a file")
    size = p.stat().st_size
    if size > MAX_INPUT_BYTES:
        raise InputError(f"{p}: {size} bytes is too large for an APBS input file")
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{p}: cannot be read: {exc.strerror or exc}") from exc
    return parse_text(text, source=str(p), folder=p.resolve().parent)


def parse_text(text: str, source: str = "<string>", folder=None) -> ApbsInput:
    """Parse APBS input text.

    Parameters
    ----------
    text : str
    source : str
        Name used in error messages.
    folder : path-like, optional
        Folder the file's paths are relative to (default: none; reading molecules then needs
        one).

    Raises
    ------
    InputError
        ``<source>:<line>: <what is wrong>`` for an unknown keyword, a missing END, a bad or
        missing value, a PRINT naming a calculation not defined before it.
    """
    stream = _Stream(tokenize(text, source), source)
    inp = ApbsInput(source=source, folder=None if folder is None else Path(folder))
    while stream.more():
        tok = stream.next("a section", Token("", 0))
        key = tok.text.lower()
        if key == "read":
            _parse_read(stream, tok, inp)
        elif key == "elec":
            block = _parse_elec(stream, tok, len(inp.elecs) + 1)
            twin = block.name is not None and inp.elec_named(block.name)
            if twin:
                raise stream.error(
                    block.lines["name"],
                    f"ELEC name {block.name!r} was already given to the calculation on line "
                    f"{twin.line}",
                )
            inp.elecs.append(block)
        elif key == "apolar":
            inp.apolars.append(_parse_apolar(stream, tok, len(inp.apolars) + 1))
        elif key == "print":
            inp.prints.append(_parse_print(stream, tok, inp))
        elif key == "quit":
            break
        else:
            raise stream.error(
                tok.line,
                f"unknown keyword {tok.text!r} (expected READ, ELEC, APOLAR, PRINT or QUIT)",
            )
    return inp


def _parse_read(stream: _Stream, start: Token, inp: ApbsInput) -> None:
    for key, tok in stream.keywords(f"END of the READ section opened on line {start.line}", start):
        if key == "end":
            return
        if key == "mol":
            fmt = stream.word(tok, ("pqr", "pdb", "xml"), "a molecule format")
            path = stream.next("a file name", tok).text
            inp.molecules.append(MoleculeSpec(len(inp.molecules) + 1, fmt, path, tok.line))
        elif key == "parm":
            fmt = stream.word(tok, ("flat", "xml"), "a parameter file format")
            path = stream.next("a file name", tok).text
            if inp.parm is not None:
                raise stream.error(
                    tok.line, f"a parameter file was already given on line {inp.parm.line}"
                )
            inp.parm = ParmSpec(fmt, path, tok.line)
        elif key in ("diel", "kappa", "pot", "charge", "mesh"):
            fmt = stream.next("a map format", tok).text.lower()
            count = 3 if key == "diel" else 1
            paths = tuple(stream.next("a file name", tok).text for _ in range(count))
            inp.maps.append(MapSpec(key, fmt, paths, tok.line))
        else:
            raise stream.error(
                tok.line,
                f"unknown READ keyword {tok.text!r} (expected mol, parm, diel, kappa, pot, "
                "charge, mesh or END)",
            )


def _center(stream: _Stream, tok: Token) -> Center:
    nxt = stream.peek()
    if nxt is not None and nxt.text.lower() == "mol":
        stream.pos += 1
        return Center(mol=stream.integer(tok, "a molecule number after 'mol'"), line=tok.line)
    return Center(point=stream.numbers(tok, 3), line=tok.line)


def _parse_elec(stream: _Stream, start: Token, index: int) -> ElecBlock:
    block = ElecBlock(index=index, line=start.line)
    tok = stream.next("a calculation method or 'name'", start)
    if tok.text.lower() == "name":
        block.name = stream.next("a calculation name", tok).text
        block.lines["name"] = tok.line
        tok = stream.next("a calculation method", tok)
    method = tok.text.lower()
    if method in OTHER_METHODS:
        raise stream.error(
            tok.line,
            f"ELEC method {tok.text!r} is not supported: pbsolver runs the finite-difference "
            "multigrid methods (mg-manual, mg-auto)",
        )
    if method not in MG_METHODS:
        raise stream.error(
            tok.line,
            f"unknown ELEC method {tok.text!r} (expected {', '.join(MG_METHODS)}, after an "
            "optional 'name <name>')",
        )
    block.method = method
    block.lines["method"] = tok.line
    for key, tok in stream.keywords(f"END of the ELEC section opened on line {start.line}", start):
        if key == "end":
            block.end_line = tok.line
            return block
        handler = _ELEC_KEYWORDS.get(key)
        if handler is None:
            raise stream.error(tok.line, f"unknown ELEC keyword {tok.text!r} in {block.label}")
        handler(stream, tok, block)
        block.lines.setdefault(key, tok.line)


def _set(name, reader):
    def handler(stream, tok, block):
        setattr(block, name, reader(stream, tok))
        block.lines[name] = tok.line

    return handler


def _equation(stream, tok, block):
    block.equation = tok.text.lower()
    block.lines["equation"] = tok.line


def _ion(stream: _Stream, tok: Token, block: ElecBlock):
    first = stream.peek()
    if first is None:
        raise stream.error(tok.line, "the file ends inside an ion statement")
    values: dict = {}
    try:
        float(first.text)
        old_style = True
    except ValueError:
        old_style = False
    if old_style:  # APBS' deprecated "ion <charge> <conc> <radius>"
        for key in ("charge", "conc", "radius"):
            values[key] = stream.number(tok, f"ion {key}")
    else:
        for _ in range(3):
            key_tok = stream.next("charge, conc or radius", tok)
            key = key_tok.text.lower()
            if key not in ("charge", "conc", "radius") or key in values:
                raise stream.error(
                    key_tok.line,
                    "ion needs 'charge <e> conc <mol/L> radius <Å>' (each once), got "
                    f"{key_tok.text!r}",
                )
            values[key] = stream.number(key_tok, "a number")
    block.ions.append(IonSpec(values["charge"], values["conc"], values["radius"], tok.line))


def _write(stream: _Stream, tok: Token, block: ElecBlock):
    kind = stream.word(tok, WRITE_TYPES, "a data type to write")
    fmt = stream.word(tok, WRITE_FORMATS, "a file format")
    stem = stream.next("a file name stem", tok).text
    block.writes.append(WriteSpec(kind, fmt, stem, tok.line))


def _usemap(stream: _Stream, tok: Token, block: ElecBlock):
    kind = stream.word(tok, ("diel", "kappa", "pot", "charge"), "a map type")
    block.usemaps.append((kind, stream.integer(tok, "a map number"), tok.line))


def _other(count, kind="number"):
    """Keywords pbsolver keeps only to refuse or ignore (their values and line)."""

    def handler(stream, tok, block):
        if kind == "int":
            value = tuple(stream.integer(tok) for _ in range(count))
        elif kind == "word":
            value = tuple(stream.next("a value", tok).text for _ in range(count))
        else:
            value = tuple(stream.number(tok) for _ in range(count))
        block.other[tok.text.lower()] = (value, tok.line)

    return handler


def _dime(stream: _Stream, tok: Token):
    return tuple(stream.integer(tok, "3 integers") for _ in range(3))


#: The keywords of :class:`~pbsolver.apbs.section.SectionBlock` (``srfm``: each kind's own).
_SECTION_KEYWORDS = {
    "mol": _set("mol", lambda s, t: s.integer(t, "a molecule number")),
    "grid": _set("grid", lambda s, t: s.numbers(t)),
    "srad": _set("srad", lambda s, t: s.number(t)),
    "swin": _set("swin", lambda s, t: s.number(t)),
    "sdens": _set("sdens", lambda s, t: s.number(t)),
    "temp": _set("temp", lambda s, t: s.number(t)),
    "calcenergy": _set("calcenergy", lambda s, t: s.word(t, CALC, "no, total or comps")),
    "calcforce": _set("calcforce", lambda s, t: s.word(t, CALC, "no, total or comps")),
}

_ELEC_KEYWORDS = {
    **_SECTION_KEYWORDS,
    "dime": _set("dime", _dime),
    "glen": _set("glen", lambda s, t: s.numbers(t)),
    "gcent": _set("gcent", _center),
    "cglen": _set("cglen", lambda s, t: s.numbers(t)),
    "fglen": _set("fglen", lambda s, t: s.numbers(t)),
    "cgcent": _set("cgcent", _center),
    "fgcent": _set("fgcent", _center),
    "lpbe": _equation,
    "npbe": _equation,
    "lrpbe": _equation,
    "nrpbe": _equation,
    "smpbe": _equation,
    "bcfl": _set("bcfl", lambda s, t: s.word(t, BCFL, "a boundary condition")),
    "pdie": _set("pdie", lambda s, t: s.number(t)),
    "sdie": _set("sdie", lambda s, t: s.number(t)),
    "ion": _ion,
    "srfm": _set("srfm", lambda s, t: s.word(t, SRFM, "a surface method")),
    "chgm": _set("chgm", lambda s, t: s.word(t, CHGM, "a charge discretisation")),
    "etol": _set("etol", lambda s, t: s.number(t)),
    "nlev": _set("nlev", lambda s, t: s.integer(t)),
    "write": _write,
    "usemap": _usemap,
    "usemesh": _other(1, "int"),
    "writemat": _other(2, "word"),
    "pdime": _other(3, "int"),
    "ofrac": _other(1),
    "async": _other(1, "int"),
    "useaqua": _other(0),
    "zmem": _other(1),
    "lmem": _other(1),
    "mdie": _other(1),
    "memv": _other(1),
}


_APOLAR_KEYWORDS = {
    **_SECTION_KEYWORDS,
    "srfm": _set("srfm", lambda s, t: s.word(t, ("sacc",), "a surface method")),
    "dpos": _set("dpos", lambda s, t: s.number(t)),
    "bconc": _set("bconc", lambda s, t: s.number(t)),
    "press": _set("press", lambda s, t: s.number(t)),
    "gamma": _set("gamma", lambda s, t: s.number(t)),
}
#: APBS' replaced APOLAR keywords, refused with its advice.
_APOLAR_REPLACED = ("dime", "glen")


def _parse_apolar(stream: _Stream, start: Token, index: int) -> ApolarBlock:
    block = ApolarBlock(index=index, line=start.line)
    what = f"END of the APOLAR section opened on line {start.line}"
    first = True
    for key, tok in stream.keywords(what, start):
        if key == "end":
            block.end_line = tok.line
            return block
        if key == "name" and first:
            block.name = stream.next("a calculation name", tok).text
            block.lines["name"] = tok.line
        elif key in _APOLAR_REPLACED:
            raise stream.error(
                tok.line, f"APOLAR keyword {tok.text!r} was replaced by 'grid' in APBS"
            )
        else:
            handler = _APOLAR_KEYWORDS.get(key)
            if handler is None:
                raise stream.error(
                    tok.line, f"unknown APOLAR keyword {tok.text!r} in {block.label}"
                )
            handler(stream, tok, block)
        first = False


def _parse_print(stream: _Stream, start: Token, inp: ApbsInput) -> PrintStatement:
    tok = stream.next("what to print (elecEnergy, elecForce, apolEnergy, apolForce)", start)
    what = PRINT_WHAT.get(tok.text.lower())
    if what is None:
        raise stream.error(
            tok.line,
            f"unknown PRINT quantity {tok.text!r} (expected elecEnergy, elecForce, apolEnergy "
            "or apolForce)",
        )
    stmt = PrintStatement(what, [], start.line, deprecated=tok.text.lower() in ("energy", "force"))
    apolar = what.startswith("apol")
    sign = 1
    expect_id = True
    for key, tok in stream.keywords(f"END of the PRINT statement on line {start.line}", start):
        if key == "end":
            if expect_id:
                raise stream.error(tok.line, "PRINT ends where a calculation was expected")
            return stmt
        if key in ("+", "-"):
            if expect_id:
                raise stream.error(
                    tok.line, f"PRINT: {tok.text!r} where a calculation was expected"
                )
            sign = 1 if key == "+" else -1
            expect_id = True
            continue
        if not expect_id:
            raise stream.error(tok.line, f"PRINT: expected + or - or END, got {tok.text!r}")
        blocks = inp.apolars if apolar else inp.elecs
        section = "APOLAR" if apolar else "ELEC"
        if tok.text.isdigit():
            calc = int(tok.text)
            if not 1 <= calc <= len(blocks):
                raise stream.error(
                    tok.line,
                    f"PRINT refers to {section} calculation {calc}, but only {len(blocks)} "
                    "are defined before it",
                )
        else:
            match = [b for b in blocks if b.name is not None and b.name.lower() == key]
            if not match:
                raise stream.error(
                    tok.line, f"PRINT: no {section} calculation before it is named {tok.text!r}"
                )
            calc = match[0].index
        stmt.terms.append(PrintTerm(sign, calc, tok.line))
        expect_id = False


__all__ = [
    "ApbsInput",
    "ApolarBlock",
    "Center",
    "ElecBlock",
    "IonSpec",
    "MapSpec",
    "MoleculeSpec",
    "ParmSpec",
    "PrintStatement",
    "PrintTerm",
    "Token",
    "WriteSpec",
    "parse_file",
    "parse_text",
    "tokenize",
]
