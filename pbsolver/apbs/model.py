"""One APBS ELEC block as a pbsolver calculation: physics, grids, boundary values.

What each APBS statement becomes (``notes`` of a :class:`Calculation` say it in the output
where the models differ):

* ``pdie``/``sdie``/``temp`` → ε_in, ε_out and the temperature of
  :class:`~pbsolver.PhysicsOptions`.
* ``ion charge z conc c radius R`` (any number of species) → ``PhysicsOptions(ions=...)``: the
  linear equation sees the ionic strength I = ½ Σ c z² and the largest radius, as APBS; a bulk
  that is not electroneutral is refused, as APBS refuses it.
* ``srfm mol``/``smol`` with ``srad`` → pbsolver's "mol"/"smol" surfaces with that probe radius
  (exact SES; APBS' 9-point harmonic smoothing); ``srad 0`` is the van der Waals surface (the
  smoothed one for ``smol``). ``spl2``/``spl3``/``spl4`` (spline surfaces of half-width
  ``swin``) → the sharp vdW surface at the spline's midpoint (the atomic radii). ``sdens`` and
  ``chgm`` are not used: pbsolver's surface is exact and its charges are point charges with an
  analytic Coulomb potential φ_c (no charge spreading). With ``surfaces="apbs"`` (``pbsolver
  apbs --surfaces apbs``), ``mol``/``smol`` are APBS's own point-switched maps instead
  ("apbs-mol"/"apbs-smol", equal to APBS's ``dielx/y/z``; ``sdens 10`` only).
* ``lpbe`` → the linear equation; ``lrpbe`` (APBS' regularised equation, whose solution is the
  reaction field) → the same solve, reporting the reaction-field energy alone. ``npbe`` → the
  nonlinear equation (``PhysicsOptions(nonlinear=True)``, :mod:`pbsolver.nonlinear`), on one
  grid or through focusing; its ions must be one symmetric z:z salt (species of one |z|:
  pbsolver's nonlinear term), otherwise the block is refused naming the ion's line (APBS solves
  mixed salts; pbsolver's ``lpbe`` takes them). Its energy is APBS' ``npbe`` free energy
  (:mod:`pbsolver.apbs.energy`), which has no per-atom split: ``calcenergy comps`` with salt is
  refused. ``nrpbe`` and ``smpbe`` are refused.
* ``bcfl mdh`` → pbsolver's "mdh" values; ``sdh`` → pbsolver's "sdh" (the total charge on one
  sphere; APBS adds the dipole and quadrupole of the charges); ``zero`` → APBS' meaning, a
  total potential of zero on the outer layer (φ_rf = −φ_c there), not pbsolver's "zero"
  reaction field; ``focus`` → focusing from the calculation before (below).
* ``mg-manual``: ``dime`` nodes of spacing ``glen/(dime−1)`` (or ``grid``) centred on ``gcent``
  (a point or ``mol N``: the middle of molecule N's bounding box, as APBS). ``dime`` above 65
  without 4 multigrid levels is lowered as APBS lowers it (100 → 97, 113 → 97), ``glen`` kept
  — so the spacing grows — with a warning (APBS says nothing; refusing would stop inputs
  that APBS runs): :func:`dime_warning`.
* ``mg-auto``: APBS' focusing (:func:`pbsolver.molecule.focusing.apbs_focus_grids`): from
  ``cglen`` around ``cgcent`` (with ``bcfl``'s boundary values) to ``fglen`` around
  ``fgcent``, at most 4× finer per level, every level of ``dime`` nodes; each finer level
  takes its boundary values from the level before it. As in APBS' output, every level is a
  calculation of its own (numbered, with its energy); the finest gives the block's energy.
* ``bcfl focus`` (``mg-manual``, or the coarsest level of ``mg-auto``): the grid continues the
  focusing of the calculation just before it, as APBS does; pbsolver interpolates the reaction
  field φ_rf (not the total potential), so that calculation must be of the same molecule with
  the same physics, and its finest grid must hold this one.
* Energies come from the finest level that holds each atom; atoms outside it take φ_rf from the
  coarser levels, as APBS' total energy does.
* ``mg-para``, ``mg-dummy``, ``usemap``, ``usemesh``, ``bcfl mem``/``map`` are refused.

* ``calcforce total``/``comps`` → the exact gradient of the calculation's energy on its
  finest grid (:func:`pbsolver.forces.solvation_forces` and the Coulomb pair forces in
  ``pdie``), split as APBS splits it: qf (the fixed charges' field), db (dielectric boundary),
  ib (ionic boundary). On a focusing level, or with ``bcfl zero``, the boundary values are
  held fixed, as APBS takes forces on its finest grid. Refused with ``npbe`` and salt and with
  APBS's point-switched surfaces, which have no exact gradient here.
* ``APOLAR`` sections → :mod:`pbsolver.apbs.apolar`.

Outputs pbsolver cannot produce (``write`` of data other than ``pot``, ``dielx/y/z``,
``kappa`` in ``dx``/``gz``) are refused with their line, or skipped with a warning when the
caller asks for ``skip_unsupported``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pbsolver.apbs.section import Section
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.molecule.apbs_surface import APBS_SDENS
from pbsolver.options import PhysicsOptions

#: APBS' wish for at least this many multigrid levels on grids above 65 nodes (vhal.h VMGNLEV).
APBS_MIN_LEVELS = 4
#: Data pbsolver writes, and the formats.
WRITABLE = ("pot", "dielx", "diely", "dielz", "kappa")
WRITE_SUFFIX = {"dx": ".dx", "gz": ".dx.gz"}


@dataclass
class GridPlan:
    """One grid (focusing level) of a calculation and the values on its outer layer.

    Attributes
    ----------
    grid : Grid
    boundary : {"mdh", "sdh", "zero", "focus"}
        ``"zero"`` is APBS' zero *total* potential (φ_rf = −φ_c on the outer layer);
        ``"focus"`` the coarser level's φ_rf.
    role : str
        ``"manual"`` (mg-manual's grid), ``"coarse"`` (mg-auto's coarsest) or ``"focus"``
        (mg-auto's finer levels).
    """

    grid: Grid
    boundary: str
    role: str = "manual"


@dataclass(kw_only=True)
class Calculation(Section):
    """One ELEC block, ready to run.

    Attributes
    ----------
    index, name, molecule, atoms, energy, block
        :class:`~pbsolver.apbs.section.Section`'s (``block``: the ElecBlock).
    grids : list of GridPlan
        Its levels, coarse to fine; energies come from the last (and the coarser ones for
        atoms outside it).
    physics : PhysicsOptions
        ``boundary_kind`` is that of the first grid of the focusing chain ("mdh" or "sdh";
        APBS' ``zero`` is applied by :func:`build_problem`).
    equation : {"lpbe", "lrpbe", "npbe"}
    ions : list of IonSpec
    rtol : float
        Relative residual tolerance (APBS ``etol``; default 1e-6).
    writes : list of (WriteSpec, file name)
    notes : list of str
        What pbsolver does differently from APBS for this block.
    focus_from : int or None
        With ``bcfl focus``: the number of the calculation whose levels this one continues.
    root_boundary : {"mdh", "sdh", "zero"}
        The boundary values of the coarsest grid of the focusing chain.
    force : {"no", "total", "comps"}
        APBS ``calcforce``: forces on the finest grid (net, or per atom).
    """

    grids: list
    physics: PhysicsOptions
    equation: str
    ions: list
    rtol: float
    writes: list
    notes: list
    focus_from: int | None = None
    root_boundary: str = "mdh"

    @property
    def fixed_boundary(self) -> bool:
        """Whether the forces hold the finest boundary values fixed (see boundary_values_fixed)."""
        return boundary_values_fixed(self.grids, self.focus_from, self.root_boundary)

    @property
    def grid(self) -> GridPlan:
        """The finest grid, whose energy is the calculation's."""
        return self.grids[-1]

    @property
    def homogeneous(self) -> bool:
        """ε_out = ε_in, no salt and "mdh" values at the root: φ_rf ≡ 0 exactly (no solve)."""
        ph = self.physics
        return ph.eps_out == ph.eps_in and not ph.has_salt and self.root_boundary == "mdh"


@dataclass
class Unsupported:
    """Something pbsolver cannot do, found at ``line``: refused, or skipped when asked."""

    line: int
    message: str


@dataclass
class Plan:
    """Every calculation of an input (ELEC, then APOLAR), what pbsolver would skip, warnings."""

    calculations: list
    skipped: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    apolars: list = field(default_factory=list)

    @property
    def solves(self) -> int:
        """How many grids the input solves on (APBS' count of "PBE calculations")."""
        return sum(len(c.grids) for c in self.calculations)


# ---------------------------------------------------------------------- the whole input
def plan_input(inp, molecules, *, skip_unsupported=False, output_dir=None, allow_outside=False,
               surfaces="exact", parm_table=None):  # fmt: skip
    """The :class:`Calculation` of every ELEC block of ``inp``; everything checked first.

    Parameters
    ----------
    inp : ApbsInput
    molecules : list of Atoms
        The READ section's molecules, in order.
    skip_unsupported : bool
        Skip outputs pbsolver cannot produce (some maps, writemat) with a warning
        instead of refusing the input.
    output_dir : path-like, optional
        Folder of ``write`` files (checked with :func:`pbsolver.apbs.files.resolve_path`);
        None: the current directory.
    allow_outside : bool
        Let ``write`` file names lead out of ``output_dir``.
    surfaces : {"exact", "apbs"}
        ``srfm mol``/``smol`` as pbsolver's exact edge fractions ("mol"/"smol") or as APBS's own
        point-switched maps ("apbs-mol"/"apbs-smol", :mod:`pbsolver.molecule.apbs_surface`).
    parm_table : dict, optional
        The READ section's parameter file (:func:`pbsolver.apbs.files.read_parm`): APOLAR's
        dispersion term takes the atoms' and water's Lennard-Jones parameters from it.

    Returns
    -------
    Plan

    Raises
    ------
    InputError
        ``<file>:<line>: …`` for the first thing refused.
    """
    src = inp.source
    skipped: list = []

    def unsupported(line, message):
        item = Unsupported(line, message)
        if not skip_unsupported:
            raise InputError(f"{src}:{line}: {message} (--skip-unsupported skips it)")
        skipped.append(item)

    for m in inp.maps:
        unsupported(m.line, f"READ {m.kind}: pbsolver builds its own maps; reading maps is not "
                    "supported")  # fmt: skip
    from pbsolver.apbs.apolar import plan_apolar

    apolars = [plan_apolar(a, molecules, parm_table, src) for a in inp.apolars]
    if not inp.elecs and not apolars:
        raise InputError(f"{src}: no ELEC or APOLAR calculation to run")
    calcs: list = []
    warnings: list = []
    for b in inp.elecs:
        previous = calcs[-1] if calcs else None
        calcs.append(
            calculation(
                b,
                inp,
                molecules,
                unsupported,
                output_dir,
                allow_outside,
                previous,
                warnings,
                surfaces,
            )
        )
    for stmt in inp.prints:
        _check_print(stmt, apolars if stmt.what.startswith("apol") else calcs, src)
    return Plan(calcs, skipped, warnings, apolars)


def _check_print(stmt, calcs, src):
    """A PRINT statement's calculations computed what it prints, all of one kind (as APBS)."""
    force = stmt.what.endswith("Force")
    key = "calcforce" if force else "calcenergy"
    kinds = set()
    for term in stmt.terms:
        c = calcs[term.calc - 1]
        value = c.force if force else c.energy
        # APBS prints an APOLAR energy only from "calcenergy total"
        missing = value == "no" or (stmt.what == "apolEnergy" and value != "total")
        if missing:
            raise InputError(
                f"{src}:{term.line}: PRINT {stmt.what} uses calculation {c.label}, which has "
                f"{key} {value} (line {c.block.lines.get(key, c.block.line)})"
                + (": APOLAR energies are printed from calcenergy total" if value != "no" else "")
            )
        kinds.add((value, len(c.atoms)) if force else value)
    if force and len(kinds) > 1:
        raise InputError(
            f"{src}:{stmt.line}: PRINT {stmt.what} combines calculations with different "
            "calcforce settings or atom counts; APBS refuses this too"
        )


# ---------------------------------------------------------------------- one ELEC block
def calculation(
    block, inp, molecules, unsupported, output_dir=None, allow_outside=False, previous=None,
    warnings=None, surfaces="exact",
):  # fmt: skip
    """The :class:`Calculation` of one ELEC block (see the module docstring for the mapping).

    ``unsupported(line, message)`` is called for outputs pbsolver cannot produce; it raises or
    records them. Everything else pbsolver cannot run raises :class:`~pbsolver.InputError`.
    ``previous`` is the calculation before this one (for ``bcfl focus``); ``warnings`` (a
    list) receives what runs as APBS runs it but is likely not what was meant (a ``dime``
    APBS lowers). ``surfaces``: see :func:`plan_input`.
    """
    src = inp.source

    def fail(key, message, line=None):
        line = block.lines.get(key, block.line) if line is None else line
        return InputError(f"{src}:{line}: {block.label}: {message}")

    if block.method == "mg-para":
        raise fail(
            "method",
            "mg-para (parallel focusing) is not supported; mg-auto with the same dime, cglen "
            "and fglen sets up the same problem on one process",
        )
    if block.method == "mg-dummy":
        raise fail("method", "mg-dummy (maps without a solve) is not supported")
    _require(block, src)
    equation = block.equation
    if equation == "nrpbe":
        raise fail(
            "equation", "nrpbe (the regularised nonlinear equation) is not supported; npbe is"
        )
    if equation == "smpbe":
        raise fail("equation", "smpbe (size-modified PB) is not supported")
    if block.usemaps:
        kind, _, line = block.usemaps[0]
        raise InputError(f"{src}:{line}: {block.label}: usemap {kind} is not supported")
    if "usemesh" in block.other:
        raise fail("usemesh", "usemesh is not supported")
    if block.bcfl in ("mem", "map"):
        raise fail("bcfl", f"bcfl {block.bcfl} is not supported (zero, sdh, mdh, focus are)")
    notes: list = []
    molecule = _molecule_number(block.mol, molecules, fail, "mol")
    atoms = molecules[molecule - 1]
    for key in ("pdie", "sdie", "temp"):
        if not getattr(block, key) > 0:
            raise fail(key, f"{key} must be > 0, got {getattr(block, key)}")
    if block.etol is not None and not 0 < block.etol < 1:
        raise fail("etol", f"etol must be between 0 and 1, got {block.etol}")
    grids = plan_grids(block, molecules, fail, notes, warnings)
    focus_from = None
    if block.bcfl == "focus":
        root = _check_focus_chain(block, molecule, grids[0].grid, previous, fail)
        focus_from = previous.index
    else:
        root = block.bcfl
        _check_on_grid(atoms, grids[0].grid, block, fail)
    physics = _physics(block, root, fail, notes, surfaces)
    if focus_from is not None and physics != previous.physics:
        raise fail(
            "bcfl",
            f"bcfl focus: calculation {previous.label} has other physics (pdie, sdie, ions, "
            "srfm, srad, temp, lpbe/npbe); pbsolver focuses the reaction field of one molecule "
            "with one physics",
        )
    if physics.nonlinear and physics.has_salt and block.calcenergy == "comps":
        raise fail(
            "calcenergy",
            "calcenergy comps with npbe: the nonlinear free energy's ion terms are integrals "
            "over the solvent with no per-atom split; use calcenergy total",
        )
    if root == "sdh":
        notes.append(
            "bcfl sdh: pbsolver's single Debye–Hückel sphere holds the total charge only; APBS' "
            "adds the dipole and quadrupole of the charges"
        )
    if root == "mdh" and physics.has_salt:
        notes.append(
            "mdh with salt: pbsolver's Debye–Hückel spheres are the atoms grown by the ion radius "
            "(APBS': the atomic radii)"
        )
    if block.calcforce != "no":
        fixed = boundary_values_fixed(grids, focus_from, root)
        _check_forces(block, physics, atoms, grids[-1].grid, fixed, fail, notes)
    if "writemat" in block.other:
        unsupported(block.other["writemat"][1], f"{block.label}: writemat is not supported")
    writes = []
    for w in block.writes:
        if w.kind not in WRITABLE or w.format not in WRITE_SUFFIX:
            unsupported(
                w.line,
                f"{block.label}: write {w.kind} {w.format}: pbsolver writes "
                f"{', '.join(WRITABLE)} as dx or gz",
            )
            continue
        writes.append((w, _write_name(w, src, output_dir, allow_outside)))
    if block.chgm is not None:
        notes.append(
            f"chgm {block.chgm} is not used: charges are points with an analytic Coulomb potential"
        )
    return Calculation.from_block(
        block,
        atoms,
        grids=grids,
        physics=physics,
        equation=equation,
        ions=list(block.ions),
        rtol=1e-6 if block.etol is None else float(block.etol),
        writes=writes,
        notes=notes,
        focus_from=focus_from,
        root_boundary=root,
    )


def boundary_values_fixed(grids, focus_from, root) -> bool:
    """Whether a calculation's finest grid takes boundary values that its forces hold fixed.

    Its values come from a coarser solve (a focusing level, ``bcfl focus``) or are APBS's zero
    total potential (``bcfl zero``): their dependence on the atoms is not differentiated, as
    APBS takes forces on its finest grid. Only one grid with "mdh" or "sdh" values is exact.
    """
    return len(grids) > 1 or focus_from is not None or root == "zero"


def _check_forces(block, physics, atoms, finest, fixed, fail, notes):
    """``calcforce``: what pbsolver's exact forces cover, and the note on how they are split."""
    from pbsolver.forces import supports

    what = f"calcforce {block.calcforce}"
    if physics.surface.startswith("apbs-"):
        raise fail(
            "calcforce",
            f"{what}: forces are the exact gradient on pbsolver's surfaces; APBS's "
            "point-switched maps (--surfaces apbs) have none",
        )
    if not supports(physics):
        raise fail(
            "calcforce",
            f"{what}: pbsolver's forces cover the linearised equation (npbe with salt has none)",
        )
    lo = np.asarray(finest.origin)
    hi = lo + np.asarray(finest.lengths)
    pos = atoms.positions
    if np.any((pos <= lo) | (pos >= hi)):
        raise fail(
            "calcforce",
            f"{what}: the forces are taken on the finest grid ({_fmt3(lo)} to {_fmt3(hi)} Å), "
            "which must hold every atom of the molecule",
        )
    notes.append(
        f"{what}: qf is the force of the fixed charges' field (Coulomb pairs in pdie and the "
        "reaction field), db and ib the dielectric and ionic boundary forces, all the exact "
        "gradient of pbsolver's energy on the finest grid"
        + (
            " with its boundary values held fixed (as APBS takes forces on its finest grid)"
            if fixed
            else ""
        )
    )


def _require(block, src):
    """The keywords APBS requires of an mg-manual/mg-auto block (and pbsolver uses)."""
    need = ["dime", "mol", "equation", "bcfl", "pdie", "sdie", "srfm", "temp"]
    if block.method == "mg-manual":
        need.append("gcent")
        if (block.glen is None) == (block.grid is None):
            raise InputError(
                f"{src}:{block.line}: {block.label}: mg-manual needs exactly one of glen and grid"
            )
    else:
        need += ["cglen", "fglen", "cgcent", "fgcent"]
    if block.srfm in ("mol", "smol"):
        need.append("srad")
    for key in need:
        if getattr(block, key) is None:
            word = "lpbe (or another equation)" if key == "equation" else key
            raise InputError(
                f"{src}:{block.line}: {block.label} (ending on line {block.end_line}) is missing "
                f"{word}, which APBS requires"
            )


def _molecule_number(n, molecules, fail, key):
    if not 1 <= n <= len(molecules):
        raise fail(key, f"mol {n}: the READ section has {len(molecules)} molecule(s)")
    return n


def _check_focus_chain(block, molecule, first, previous, fail) -> str:
    """``bcfl focus``: the calculation before must be of the same molecule and hold ``first``.

    Returns the boundary kind of the chain's coarsest grid.
    """
    from pbsolver.molecule.focusing import check_nested

    if previous is None:
        raise fail("bcfl", "bcfl focus needs a calculation before this one to focus from")
    if previous.molecule != molecule:
        raise fail(
            "bcfl",
            f"bcfl focus: calculation {previous.label} is of molecule {previous.molecule}, this "
            f"one of molecule {molecule}; pbsolver focuses the reaction field of one molecule",
        )
    try:
        check_nested([previous.grid.grid, first])
    except InputError as exc:
        raise fail(
            "bcfl", f"bcfl focus: this grid is not inside the grid of {previous.label} ({exc})"
        ) from None
    return previous.root_boundary


# ---------------------------------------------------------------------- physics
def _physics(block, root, fail, notes, surfaces="exact") -> PhysicsOptions:
    """PhysicsOptions of the block; ``root`` is the boundary of the chain's coarsest grid."""
    srad = float(block.srad) if block.srad is not None else 0.0
    if srad < 0:
        raise fail("srad", f"srad must be >= 0 Å, got {srad}")
    if block.srfm in ("mol", "smol") and surfaces == "apbs":
        sdens = APBS_SDENS if block.sdens is None else float(block.sdens)
        if sdens != APBS_SDENS:
            raise fail(
                "sdens",
                f"sdens {sdens:g}: APBS's own maps are reproduced for sdens {APBS_SDENS:g} "
                "only (use the exact surfaces, which need no sdens)",
            )
        surface, probe = f"apbs-{block.srfm}", srad
        notes.append(f"srfm {block.srfm}: APBS's own point-switched ε map (surface {surface!r})")
    elif block.srfm in ("mol", "smol"):
        surface, probe = block.srfm, srad
    else:
        surface, probe = "vdw", 1.4  # the probe is unused on the vdW surface
        notes.append(
            f"srfm {block.srfm}: the spline surface (window {block.swin} Å) is replaced by the "
            "sharp van der Waals surface at the atomic radii; APBS' spline dielectric (ε "
            "interpolated arithmetically across the window) acts like smaller radii, so its "
            "solvation energies are larger in size"
        )
    if block.equation == "lrpbe":
        notes.append("lrpbe: the energy reported is the reaction-field (solvation) energy")
    try:
        ions = PhysicsOptions(ions=[(i.charge, i.conc, i.radius) for i in block.ions])
    except InputError as exc:
        raise fail("ion", f"{exc}; APBS refuses this too") from None
    nonlinear = block.equation == "npbe"
    if nonlinear:
        _check_symmetric_salt(block, fail)
        ions = ions.replace(nonlinear=True)
        if ions.has_salt:
            notes.append(
                "npbe: the energy is the nonlinear free energy without self energies: Coulomb "
                "pairs + reaction field + the mobile ions' terms (APBS' qf - diel - qm)"
            )
    return ions.replace(
        eps_in=block.pdie,
        eps_out=block.sdie,
        surface=surface,
        probe_radius=probe,
        temperature=block.temp,
        boundary_kind=root if root in ("mdh", "sdh") else "mdh",  # zero: build_problem's
    )


def _check_symmetric_salt(block, fail):
    """``npbe``: the ions must be one symmetric z:z salt (pbsolver's nonlinear term)."""
    present = [i for i in block.ions if i.conc > 0]
    if not present:
        return
    z0 = abs(present[0].charge)
    for ion in present:
        z = abs(ion.charge)
        if z != z0 or z != int(z):
            what = f"mix valences {z0:g} and {z:g}" if z != z0 else f"have valence {z:g}"
            raise fail(
                "ion",
                f"npbe (line {block.lines['equation']}): pbsolver's nonlinear equation takes one "
                f"symmetric z:z salt (one integer |z|), but the ions {what} (ion charge "
                f"{ion.charge:g} conc {ion.conc:g}); APBS solves such salts nonlinearly, "
                "pbsolver only with lpbe",
                line=ion.line,
            )


# ---------------------------------------------------------------------- grids
def apbs_dime(n: int) -> int:
    """APBS' node count for ``dime n``: above 65 without 4 multigrid levels, reset as APBS does.

    APBS wants n = c·2^(l+1) + 1 with l ≥ 4 levels above 65 nodes; otherwise it resets n to
    ⌊n/32⌋·32 + 1 (MGparm_check).

    >>> [apbs_dime(n) for n in (33, 65, 97, 100, 129, 161, 200)]
    [33, 65, 97, 97, 129, 161, 193]
    """
    t = n - 1
    levels = 0
    while t > 0 and t % 2 == 0:
        levels += 1
        t = (t + 1) // 2
    levels -= 1
    if n > 65 and levels < APBS_MIN_LEVELS:
        c = max(1, n // 2 ** (APBS_MIN_LEVELS + 1))
        return c * 2 ** (APBS_MIN_LEVELS + 1) + 1
    return n


def valid_dime(n: int) -> int:
    """The smallest node count ≥ ``n`` that APBS keeps (:func:`apbs_dime` leaves it as it is).

    >>> [valid_dime(n) for n in (33, 81, 97, 113, 129)]
    [33, 97, 97, 129, 129]
    """
    n = max(3, int(n))
    while apbs_dime(n) != n:
        n += 1
    return n


def dime_warning(block, dime) -> str:
    """What a ``dime`` APBS lowers does to the grid, and what to write instead.

    APBS (MGparm_check) lowers a count it cannot coarsen four times without a word and keeps
    ``glen``/``cglen``/``fglen``, so the spacing along that axis grows; pbsolver does the same
    (so that the two programs' energies compare) and says so.
    """
    given = np.asarray(block.dime, dtype=float)
    lowered = np.asarray(dime, dtype=float)
    axes = [a for a in range(3) if dime[a] != block.dime[a]]
    what = "dime {} is not an APBS multigrid size (c·2^(nlev+1)+1 with 4 levels above 65 nodes)"
    text = what.format(" ".join(str(n) for n in block.dime))
    text += f"; APBS lowers it to {' '.join(str(n) for n in dime)} silently, and so does pbsolver"
    lengths = block.glen if block.method == "mg-manual" else block.fglen
    if block.method == "mg-manual" and block.grid is not None:
        grid = np.asarray(block.grid, dtype=float)
        change = ", ".join(
            f"{'xyz'[a]} length {grid[a] * (given[a] - 1):.3f} → {grid[a] * (lowered[a] - 1):.3f} Å"
            for a in axes
        )
    else:
        length = np.asarray(lengths, dtype=float)
        change = ", ".join(
            f"{'xyz'[a]} spacing {length[a] / (given[a] - 1):.3f} → "
            f"{length[a] / (lowered[a] - 1):.3f} Å"
            for a in axes
        )
    better = " ".join(str(valid_dime(n)) for n in block.dime)
    return f"{text} ({change}); dime {better} keeps the spacing"


def molecule_center(atoms) -> np.ndarray:
    """APBS' centre of a molecule: the middle of the bounding box of the atom centres (Å)."""
    lo, hi = atoms.bounds(with_radii=False)
    return 0.5 * (lo + hi)


def plan_grids(block, molecules, fail=None, notes=None, warnings=None) -> list:
    """The grids of an ELEC block, coarse to fine, with each one's boundary values.

    ``mg-manual`` gives its one grid; ``mg-auto`` APBS' focusing levels
    (:func:`pbsolver.molecule.focusing.apbs_focus_grids`): ``bcfl`` on the coarsest, "focus"
    on the others.

    Parameters
    ----------
    block : ElecBlock
    molecules : list of Atoms
        For centres given as ``mol N``.
    fail : callable, optional
        ``fail(keyword, message)`` → InputError naming the line.
    notes : list, optional
        Receives what differs from APBS.
    warnings : list, optional
        Receives an :class:`Unsupported` (line, message) for a ``dime`` that is not an APBS
        multigrid size (:func:`dime_warning`).

    Returns
    -------
    list of GridPlan
    """
    from pbsolver.molecule.focusing import apbs_focus_grids

    if fail is None:

        def fail(key, message):
            return InputError(f"{block.label}: {message}")

    notes = [] if notes is None else notes
    if any(d < 3 for d in block.dime):
        raise fail("dime", f"dime must be at least 3 nodes a side, got {block.dime}")
    dime = tuple(apbs_dime(d) for d in block.dime)
    if dime != tuple(block.dime):
        message = dime_warning(block, dime)
        notes.append(message)
        if warnings is not None:
            warnings.append(Unsupported(block.lines.get("dime", block.line), message))
    shape = np.asarray(dime)
    if block.method == "mg-manual":
        if block.grid is not None:
            spacing = np.asarray(block.grid, dtype=float)
            key = "grid"
        else:
            spacing = np.asarray(block.glen, dtype=float) / (shape - 1)
            key = "glen"
        _positive_lengths(spacing, fail, key)
        center = _center(block.gcent, molecules, fail, "gcent")
        origin = center - 0.5 * (shape - 1) * spacing
        grid = Grid(tuple(int(n) for n in shape), spacing=tuple(spacing), origin=tuple(origin))
        return [GridPlan(grid, block.bcfl, "manual")]
    cglen = np.asarray(block.cglen, dtype=float)
    fglen = np.asarray(block.fglen, dtype=float)
    _positive_lengths(cglen, fail, "cglen")
    _positive_lengths(fglen, fail, "fglen")
    ccenter = _center(block.cgcent, molecules, fail, "cgcent")
    fcenter = _center(block.fgcent, molecules, fail, "fgcent")
    try:
        grids = apbs_focus_grids(dime, cglen, fglen, ccenter, fcenter)
    except InputError as exc:
        raise fail("fglen", f"{exc}; APBS refuses this too") from None
    return [GridPlan(grids[0], block.bcfl, "coarse")] + [
        GridPlan(g, "focus", "focus") for g in grids[1:]
    ]


def _positive_lengths(values, fail, key):
    if not np.all(np.isfinite(values) & (values > 0)):
        raise fail(key, f"{key} must be three lengths > 0 Å, got {tuple(values.tolist())}")


def _center(center, molecules, fail, key) -> np.ndarray:
    if center.mol is not None:
        n = _molecule_number(center.mol, molecules, fail, key)
        return molecule_center(molecules[n - 1])
    return np.asarray(center.point, dtype=float)


def _check_on_grid(atoms, grid, block, fail):
    """The coarsest grid of a chain must hold every atom (its Debye–Hückel values need it)."""
    lo, hi = atoms.bounds(with_radii=False)
    glo = np.asarray(grid.origin)
    ghi = glo + np.asarray(grid.lengths)
    if np.any(lo <= glo) or np.any(hi >= ghi):
        outside = int(np.sum(np.any((atoms.positions <= glo) | (atoms.positions >= ghi), axis=1)))
        which = "coarsest grid" if block.method == "mg-auto" else "grid"
        raise fail(
            "mol",
            f"{outside} of the {len(atoms)} atoms of molecule {block.mol} lie on or outside the "
            f"{which} ({_fmt3(glo)} to {_fmt3(ghi)} Å): pbsolver needs the whole molecule "
            "inside the grid whose boundary values it estimates (enlarge "
            f"{'cglen' if block.method == 'mg-auto' else 'glen'})",
        )


def _write_name(w, src, output_dir, allow_outside):
    from pbsolver.apbs.files import resolve_path

    name = w.stem + WRITE_SUFFIX[w.format]
    return resolve_path(
        name,
        "." if output_dir is None else output_dir,
        allow_outside=allow_outside,
        what="output file",
        where=f"{src}:{w.line}",
    )


def _fmt3(values) -> str:
    return "(" + ", ".join(f"{float(v):.3f}" for v in values) + ")"


# ---------------------------------------------------------------------- the problem
def build_problem(calc, plan=None, *, maps_backend="cpu"):
    """The :class:`~pbsolver.Problem` of a calculation on one grid that needs no coarser one.

    Returns ``(problem, maps)``. ``plan`` (default: the calculation's first grid) must not be a
    focusing level; its boundary values are ``boundary_kind``'s, or APBS' ``bcfl zero`` (zero
    total potential on the outer layer: φ_rf = −φ_c there), which
    :func:`pbsolver.molecule.maps.build_maps` has no option for.
    """
    from pbsolver.molecule import maps as mp
    from pbsolver.problem import Problem

    plan = calc.grids[0] if plan is None else plan
    if plan.boundary == "focus":
        raise InputError(f"{calc.label}: a focusing level is solved from the level before it")
    physics = calc.physics
    if plan.boundary in ("mdh", "sdh"):
        physics = physics.replace(boundary_kind=plan.boundary)
    m = mp.build_maps(calc.atoms, plan.grid, physics=physics, maps_backend=maps_backend)
    if plan.boundary == "zero":
        outer = outer_layer(plan.grid.shape)
        values = np.zeros(plan.grid.shape)
        values[outer] = -m.phi_coulomb[outer]
        m.boundary_values = values
    return Problem.from_maps(m), m


def outer_layer(shape) -> np.ndarray:
    """Boolean mask of a grid's outer layer of nodes."""
    mask = np.zeros(shape, dtype=bool)
    mask[[0, -1], :, :] = True
    mask[:, [0, -1], :] = True
    mask[:, :, [0, -1]] = True
    return mask


__all__ = [
    "Calculation",
    "GridPlan",
    "Plan",
    "Unsupported",
    "apbs_dime",
    "boundary_values_fixed",
    "dime_warning",
    "build_problem",
    "calculation",
    "molecule_center",
    "outer_layer",
    "plan_grids",
    "plan_input",
    "valid_dime",
]
