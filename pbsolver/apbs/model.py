"""One APBS ELEC block as a pbsolver calculation: physics, grid placement, boundary values.

What each APBS statement becomes (``notes`` of a :class:`Calculation` say it in the output
where the models differ):

* ``pdie``/``sdie``/``temp`` → ε_in, ε_out and the temperature of
  :class:`~pbsolver.PhysicsOptions`.
* ``ion charge z conc c radius R`` (any number of species) → for the linear equation only the
  ionic strength I = ½ Σ c z² enters (κ² ∝ Σ c z² = 2I, as in APBS' ``Vpbe``), and the ion
  exclusion radius is the largest R of all species (APBS: "only the largest ionic radius is
  used to determine the ion-accessibility function"). A bulk that is not electroneutral
  (Σ c z ≠ 0) is refused, as APBS refuses it.
* ``srfm mol``/``smol`` with ``srad`` > 0 → pbsolver's "mol"/"smol" surfaces (exact SES; APBS'
  9-point harmonic smoothing). ``srad 0`` is the van der Waals surface: ``mol`` → "vdw",
  ``smol`` → the vdW surface with the same smoothing. ``spl2``/``spl3``/``spl4`` (spline
  surfaces of half-width ``swin``) → the sharp vdW surface at the spline's midpoint (the atomic
  radii). ``sdens`` and ``chgm`` are not used: pbsolver's surface is exact and its charges are
  point charges with an analytic Coulomb potential φ_c (no charge spreading).
* ``lpbe`` → the linear equation; ``lrpbe`` (APBS' regularised equation, whose solution is the
  reaction field) → the same solve, reporting the reaction-field energy alone. ``npbe``,
  ``nrpbe`` and ``smpbe`` are refused (the nonlinear equation is not in this build).
* ``bcfl mdh`` → pbsolver's "mdh" values; ``sdh`` → pbsolver's "sdh" (the total charge on one
  sphere; APBS adds the dipole and quadrupole of the charges); ``zero`` → APBS' meaning, a
  total potential of zero on the outer layer (φ_rf = −φ_c there), not pbsolver's "zero"
  reaction field. ``focus`` (after a coarser ``mg-manual`` calculation) → "mdh" on this grid:
  there is no focusing in this build.
* ``mg-manual``: ``dime`` nodes of spacing ``glen/(dime−1)`` (or ``grid``) centred on ``gcent``
  (a point or ``mol N``: the middle of molecule N's bounding box, as APBS). ``dime`` above 65
  without 4 multigrid levels is reset as APBS resets it (100 → 97).
* ``mg-auto``: APBS focuses from ``cglen`` to ``fglen`` in several solves. Here
  :func:`place_grids` gives one grid of the fine spacing ``fglen/(dime−1)`` around ``fgcent``,
  with "mdh" boundary values standing in for the coarse solves (``bcfl`` applies to APBS'
  coarsest grid only); when ``cglen = fglen`` and the centres agree the grid *is* the coarse
  grid and ``bcfl`` applies as given. Focusing can replace this function later: it returns the
  list of grids, coarse to fine.
* ``mg-para``, ``mg-dummy``, ``usemap``, ``usemesh``, ``bcfl mem``/``map`` are refused.

Outputs pbsolver cannot produce (``calcforce total/comps``, ``write`` of data other than
``pot``, ``dielx/y/z``, ``kappa`` in ``dx``/``gz``, PRINT of forces or apolar terms, APOLAR
sections) are refused with their line, or skipped with a warning when the caller asks for
``skip_unsupported``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.options import PhysicsOptions

#: APBS' wish for at least this many multigrid levels on grids above 65 nodes (vhal.h VMGNLEV).
APBS_MIN_LEVELS = 4
#: Least reduction of the grid spacing per focusing level in APBS (nosh.c VREDFRAC).
APBS_REDFRAC = 0.25
#: Net bulk charge (Σ c z, mol/L) above which the ions are not electroneutral.
NEUTRALITY_TOL = 1e-9
#: Data pbsolver writes, and the formats.
WRITABLE = ("pot", "dielx", "diely", "dielz", "kappa")
WRITE_SUFFIX = {"dx": ".dx", "gz": ".dx.gz"}


@dataclass
class GridPlan:
    """One grid of a calculation and the values on its outer layer.

    Attributes
    ----------
    grid : Grid
    boundary : {"mdh", "sdh", "zero"}
        ``"zero"`` is APBS' zero *total* potential (φ_rf = −φ_c on the outer layer).
    role : str
        ``"manual"``, ``"fine"`` (mg-auto's finest grid) or ``"coarse"``.
    """

    grid: Grid
    boundary: str
    role: str = "manual"


@dataclass
class Calculation:
    """One ELEC block, ready to run.

    Attributes
    ----------
    index, name : int, str or None
        APBS' numbering (1-based, order of ELEC blocks) and the block's name.
    molecule : int
        Molecule number (1-based) of the READ section.
    atoms : Atoms
    grids : list of GridPlan
        Coarse to fine; energies come from the last.
    physics : PhysicsOptions
    smooth_vdw : bool
        ``srfm smol`` with ``srad 0``: the vdW surface with APBS' harmonic smoothing.
    equation : {"lpbe", "lrpbe"}
    energy : {"no", "total", "comps"}
    ions : list of IonSpec
    rtol : float
        Relative residual tolerance (APBS ``etol``; default 1e-6).
    writes : list of (WriteSpec, file name)
    notes : list of str
        What pbsolver does differently from APBS for this block.
    block : ElecBlock
    """

    index: int
    name: str | None
    molecule: int
    atoms: object
    grids: list
    physics: PhysicsOptions
    smooth_vdw: bool
    equation: str
    energy: str
    ions: list
    rtol: float
    writes: list
    notes: list
    block: object

    @property
    def label(self) -> str:
        """``#n (name)`` as APBS numbers calculations."""
        return f"#{self.index}" + (f" ({self.name})" if self.name else "")

    @property
    def grid(self) -> GridPlan:
        """The grid the energies come from (the finest)."""
        return self.grids[-1]

    @property
    def homogeneous(self) -> bool:
        """ε_out = ε_in and no salt: with "mdh" boundary values φ_rf ≡ 0 exactly (no solve)."""
        ph = self.physics
        return ph.eps_out == ph.eps_in and not ph.has_salt and self.grid.boundary == "mdh"


@dataclass
class Unsupported:
    """Something pbsolver cannot do, found at ``line``: refused, or skipped when asked."""

    line: int
    message: str


@dataclass
class Plan:
    """Every calculation of an input, and what pbsolver would skip."""

    calculations: list
    skipped: list = field(default_factory=list)


# ---------------------------------------------------------------------- the whole input
def plan_input(inp, molecules, *, skip_unsupported=False, output_dir=None, allow_outside=False):
    """The :class:`Calculation` of every ELEC block of ``inp``; everything checked first.

    Parameters
    ----------
    inp : ApbsInput
    molecules : list of Atoms
        The READ section's molecules, in order.
    skip_unsupported : bool
        Skip outputs pbsolver cannot produce (forces, some maps, APOLAR) with a warning
        instead of refusing the input.
    output_dir : path-like, optional
        Folder of ``write`` files (checked with :func:`pbsolver.apbs.files.resolve_path`);
        None: the current directory.
    allow_outside : bool
        Let ``write`` file names lead out of ``output_dir``.

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
    for a in inp.apolars:
        unsupported(a.line, "APOLAR: nonpolar energies are not available in pbsolver")
    if not inp.elecs:
        raise InputError(f"{src}: no ELEC calculation to run")
    calcs = [
        calculation(b, inp, molecules, unsupported, output_dir, allow_outside) for b in inp.elecs
    ]
    for stmt in inp.prints:
        if stmt.what != "elecEnergy":
            unsupported(stmt.line, f"PRINT {stmt.what}: only elecEnergy is available in pbsolver")
            continue
        for term in stmt.terms:
            c = calcs[term.calc - 1]
            if c.energy == "no":
                raise InputError(
                    f"{src}:{term.line}: PRINT uses calculation {c.label}, which has no energy "
                    f"(calcenergy no, line {c.block.lines.get('calcenergy', c.block.line)})"
                )
    return Plan(calcs, skipped)


# ---------------------------------------------------------------------- one ELEC block
def calculation(block, inp, molecules, unsupported, output_dir=None, allow_outside=False):
    """The :class:`Calculation` of one ELEC block (see the module docstring for the mapping).

    ``unsupported(line, message)`` is called for outputs pbsolver cannot produce; it raises or
    records them. Everything else pbsolver cannot run raises :class:`~pbsolver.InputError`.
    """
    src = inp.source

    def fail(key, message):
        line = block.lines.get(key, block.line)
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
    if equation in ("npbe", "nrpbe"):
        raise fail("equation", f"{equation}: the nonlinear equation is not available in this build")
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
    physics, smooth_vdw = _physics(block, fail, notes)
    grids = place_grids(block, molecules, fail, notes)
    _check_on_grid(atoms, grids[-1].grid, block, fail)
    kinds = {plan.boundary for plan in grids}
    if "sdh" in kinds:
        notes.append(
            "bcfl sdh: pbsolver's single Debye–Hückel sphere holds the total charge only; APBS' "
            "adds the dipole and quadrupole of the charges"
        )
    if "mdh" in kinds and physics.has_salt:
        notes.append(
            "mdh with salt: pbsolver's Debye–Hückel spheres are the atoms grown by the ion radius "
            "(APBS': the atomic radii)"
        )
    if block.calcforce != "no":
        unsupported(
            block.lines["calcforce"],
            f"{block.label}: calcforce {block.calcforce}: forces are not available in this build",
        )
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
    return Calculation(
        index=block.index,
        name=block.name,
        molecule=molecule,
        atoms=atoms,
        grids=grids,
        physics=physics,
        smooth_vdw=smooth_vdw,
        equation=equation,
        energy=block.calcenergy,
        ions=list(block.ions),
        rtol=1e-6 if block.etol is None else float(block.etol),
        writes=writes,
        notes=notes,
        block=block,
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


# ---------------------------------------------------------------------- physics
def _physics(block, fail, notes):
    """PhysicsOptions of the block, and whether the surface is the smoothed vdW surface."""
    for ion in block.ions:
        if not (ion.conc >= 0 and ion.radius >= 0):
            raise InputError(f"ion on line {ion.line}: conc and radius must be >= 0")
    net = sum(ion.conc * ion.charge for ion in block.ions)
    if abs(net) > NEUTRALITY_TOL:
        raise fail(
            "ion",
            f"the ions are not electroneutral (Σ conc·charge = {net:g} mol/L); APBS refuses "
            "this too",
        )
    ionic_strength = 0.5 * sum(ion.conc * ion.charge**2 for ion in block.ions)
    ion_radius = max((ion.radius for ion in block.ions), default=0.0)
    srad = float(block.srad) if block.srad is not None else 0.0
    if srad < 0:
        raise fail("srad", f"srad must be >= 0 Å, got {srad}")
    smooth_vdw = False
    if block.srfm in ("mol", "smol"):
        if srad > 0:
            surface = block.srfm
        else:
            surface = "vdw"
            smooth_vdw = block.srfm == "smol"
    else:
        surface = "vdw"
        notes.append(
            f"srfm {block.srfm}: the spline surface (window {block.swin} Å) is replaced by the "
            "sharp van der Waals surface at the atomic radii; APBS' spline dielectric (ε "
            "interpolated arithmetically across the window) acts like smaller radii, so its "
            "solvation energies are larger in size"
        )
    if block.equation == "lrpbe":
        notes.append("lrpbe: the energy reported is the reaction-field (solvation) energy")
    physics = PhysicsOptions(
        eps_in=block.pdie,
        eps_out=block.sdie,
        ionic_strength=ionic_strength,
        surface=surface,
        probe_radius=srad if srad > 0 else 1.4,
        ion_radius=ion_radius,
        temperature=block.temp,
        boundary_kind="mdh",  # set per grid by place_grids
    )
    return physics, smooth_vdw


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


def molecule_center(atoms) -> np.ndarray:
    """APBS' centre of a molecule: the middle of the bounding box of the atom centres (Å)."""
    lo, hi = atoms.bounds(with_radii=False)
    return 0.5 * (lo + hi)


def place_grids(block, molecules, fail=None, notes=None) -> list:
    """The grids of an ELEC block, coarse to fine, with each one's boundary values.

    ``mg-manual`` gives its one grid; ``mg-auto`` gives one grid of the fine spacing around
    ``fgcent`` (see the module docstring): this is the one function that places grids, which
    focusing will replace by the coarse-to-fine sequence.

    Parameters
    ----------
    block : ElecBlock
    molecules : list of Atoms
        For centres given as ``mol N``.
    fail : callable, optional
        ``fail(keyword, message)`` → InputError naming the line.
    notes : list, optional
        Receives what differs from APBS.

    Returns
    -------
    list of GridPlan
    """
    if fail is None:

        def fail(key, message):
            return InputError(f"{block.label}: {message}")

    notes = [] if notes is None else notes
    if any(d < 3 for d in block.dime):
        raise fail("dime", f"dime must be at least 3 nodes a side, got {block.dime}")
    dime = tuple(apbs_dime(d) for d in block.dime)
    if dime != tuple(block.dime):
        notes.append(f"dime {block.dime} reset to {dime}, as APBS resets it")
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
        boundary = block.bcfl
        if boundary == "focus":
            boundary = "mdh"
            notes.append(
                "bcfl focus: no focusing in this build; Debye–Hückel (mdh) values stand in for "
                "the previous calculation's potential on this grid's outer layer"
            )
        return [GridPlan(_grid(shape, spacing, center), boundary, "manual")]
    # mg-auto
    cglen = np.asarray(block.cglen, dtype=float)
    fglen = np.asarray(block.fglen, dtype=float)
    _positive_lengths(cglen, fail, "cglen")
    _positive_lengths(fglen, fail, "fglen")
    ccenter = _center(block.cgcent, molecules, fail, "cgcent")
    fcenter = _center(block.fgcent, molecules, fail, "fgcent")
    lo_off = (ccenter - 0.5 * cglen) - (fcenter - 0.5 * fglen)
    hi_off = (fcenter + 0.5 * fglen) - (ccenter + 0.5 * cglen)
    if np.any(lo_off >= 1e-9) or np.any(hi_off >= 1e-9):
        raise fail(
            "fgcent",
            "the fine grid (fglen around fgcent) is not inside the coarse grid (cglen around "
            "cgcent); APBS refuses this too",
        )
    grid = _grid(shape, fglen / (shape - 1), fcenter)
    same = np.allclose(cglen, fglen, rtol=1e-12) and np.allclose(ccenter, fcenter, atol=1e-12)
    if same:
        boundary = "mdh" if block.bcfl == "focus" else block.bcfl
        return [GridPlan(grid, boundary, "fine")]
    levels = apbs_focus_levels(cglen / (shape - 1), fglen / (shape - 1))
    notes.append(
        f"mg-auto: one grid of the fine spacing ({_fmt3(grid.spacing)} Å) around fgcent, with "
        f"Debye–Hückel (mdh) boundary values standing in for APBS' {levels - 1} coarser "
        f"focusing solve(s) (bcfl {block.bcfl} applies to APBS' coarsest grid)"
    )
    return [GridPlan(grid, "mdh", "fine")]


def apbs_focus_levels(coarse_spacing, fine_spacing) -> int:
    """How many grids APBS' mg-auto solves on (nosh.c: at most ×4 finer per level).

    >>> apbs_focus_levels([50 / 64] * 3, [12 / 64] * 3)
    3
    """
    levels = []
    for c, f in zip(coarse_spacing, fine_spacing, strict=True):
        r = f / c
        levels.append(int(math.ceil(math.log(r) / math.log(APBS_REDFRAC))) + 1 if r < APBS_REDFRAC
                      else 2)  # fmt: skip
    return max(levels)


def _positive_lengths(values, fail, key):
    if not np.all(np.isfinite(values) & (values > 0)):
        raise fail(key, f"{key} must be three lengths > 0 Å, got {tuple(values.tolist())}")


def _center(center, molecules, fail, key) -> np.ndarray:
    if center.mol is not None:
        n = _molecule_number(center.mol, molecules, fail, key)
        return molecule_center(molecules[n - 1])
    return np.asarray(center.point, dtype=float)


def _grid(shape, spacing, center) -> Grid:
    origin = center - 0.5 * (shape - 1) * spacing
    return Grid(tuple(int(n) for n in shape), spacing=tuple(spacing), origin=tuple(origin))


def _check_on_grid(atoms, grid, block, fail):
    lo, hi = atoms.bounds(with_radii=False)
    glo = np.asarray(grid.origin)
    ghi = glo + np.asarray(grid.lengths)
    if np.any(lo <= glo) or np.any(hi >= ghi):
        outside = int(np.sum(np.any((atoms.positions <= glo) | (atoms.positions >= ghi), axis=1)))
        why = (
            "APBS takes them from its coarser focusing grids; focusing is not in this build"
            if block.method == "mg-auto" or block.bcfl == "focus"
            else "pbsolver needs the whole molecule inside the grid"
        )
        raise fail(
            "mol",
            f"{outside} of the {len(atoms)} atoms of molecule {block.mol} lie on or outside the "
            f"grid ({_fmt3(glo)} to {_fmt3(ghi)} Å): {why}",
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
    """The :class:`~pbsolver.Problem` of a calculation on one of its grids (default: the finest).

    Returns ``(problem, maps)``: the problem and the :class:`~pbsolver.molecule.maps.Maps` it
    was made of (for ``write``). Applies what :func:`pbsolver.molecule.maps.build_maps` has no
    option for: the smoothed vdW surface (``smol`` with ``srad 0``) and APBS' ``bcfl zero``
    (zero total potential on the outer layer: φ_rf = −φ_c there).
    """
    from pbsolver.molecule import maps as mp
    from pbsolver.problem import Problem

    plan = calc.grid if plan is None else plan
    physics = calc.physics.replace(boundary_kind=plan.boundary)
    m = mp.build_maps(calc.atoms, plan.grid, physics=physics, maps_backend=maps_backend)
    if calc.smooth_vdw:
        fr = mp.face_fractions(calc.atoms, plan.grid, "vdw", backend=maps_backend)
        fr = mp.smooth_fractions(*fr)
        m.epsilon_faces = mp.faces_from_fractions(fr, physics.eps_in, physics.eps_out)
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
    "apbs_focus_levels",
    "build_problem",
    "calculation",
    "molecule_center",
    "outer_layer",
    "place_grids",
    "plan_input",
]
