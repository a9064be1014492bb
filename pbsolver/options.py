"""Physics options of a reaction-field calculation, and every check of an option's value.

:class:`PhysicsOptions` is the one parameter object that carries the physics (permittivities,
salt, surface, probe and ion radii, temperature, kind of boundary values) from the user's call to
the maps, the calculator, the MD engine, batch jobs and the CLI. Its defaults are pbsolver's
defaults; derived quantities (κ, the Debye length, κ̄² = ε_out κ²) are computed here and nowhere
else. The small checkers below (:func:`positive`, :func:`nonnegative`, :func:`choice`,
:func:`check_box`, :func:`unit_factor`) are what every module uses to validate an option, so
that a bad value gives the same :class:`~pbsolver.InputError` naming the option and the value
wherever it is given.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pbsolver.exceptions import InputError

#: Relative permittivity of water at 298 K: the default solvent.
EPS_WATER = 78.54
#: Dielectric surfaces: solvent-excluded (APBS ``srfm mol``), its smoothed variant, vdW spheres,
#: vdW spheres with a smooth boundary (differentiable: :mod:`pbsolver.molecule.smooth_surface`),
#: and APBS's own point-switched ``mol``/``smol`` maps (:mod:`pbsolver.molecule.apbs_surface`).
SURFACES = ("mol", "smol", "vdw", "svdw", "apbs-mol", "apbs-smol")
#: Surfaces made of the atomic spheres alone (no probe).
SPHERE_SURFACES = ("vdw", "svdw")
#: How a grid field is sampled at the atoms: trilinear, or Keys' cubic convolution (C¹;
#: :mod:`pbsolver.backends.bodies.sampling`).
INTERPOLATIONS = ("linear", "cubic")
#: Dirichlet values of the outer layer: multiple or single Debye–Hückel spheres, or zero.
BOUNDARY_KINDS = ("mdh", "sdh", "zero")
#: kJ per kcal.
KCAL = 4.184
#: Energy units and their factor from kJ/mol.
UNITS = {"kJ/mol": 1.0, "kcal/mol": 1.0 / KCAL}

# CODATA 2018 exact SI values
AVOGADRO = 6.02214076e23
ELEMENTARY_CHARGE = 1.602176634e-19
BOLTZMANN = 1.380649e-23
EPS0 = 8.8541878128e-12


# ---------------------------------------------------------------------- checkers
def number(value, name: str) -> float:
    """``value`` as a float, or :class:`~pbsolver.InputError` naming ``name``."""
    if isinstance(value, bool | str):
        raise InputError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a number, got {value!r}") from exc


def finite(value, name: str) -> float:
    """``value`` as a finite float, or :class:`~pbsolver.InputError` naming ``name``."""
    v = number(value, name)
    if not math.isfinite(v):
        raise InputError(f"{name} must be finite, got {value!r}")
    return v


def positive(value, name: str) -> float:
    """``value`` as a finite float > 0, or :class:`~pbsolver.InputError` naming ``name``."""
    v = number(value, name)
    if not (math.isfinite(v) and v > 0):
        raise InputError(f"{name} must be finite and > 0, got {value!r}")
    return v


def nonnegative(value, name: str) -> float:
    """``value`` as a finite float >= 0, or :class:`~pbsolver.InputError` naming ``name``."""
    v = number(value, name)
    if not (math.isfinite(v) and v >= 0):
        raise InputError(f"{name} must be finite and >= 0, got {value!r}")
    return v


def choice(value, name: str, choices):
    """``value`` if it is one of ``choices``, else :class:`~pbsolver.InputError`."""
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_box(box) -> np.ndarray:
    """A periodic box as three lengths > 0 Å (float array), or :class:`~pbsolver.InputError`."""
    try:
        b = np.asarray(box, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        b = np.zeros(0)
    if b.shape != (3,) or not np.all(np.isfinite(b) & (b > 0)):
        raise InputError(f"box must be three lengths > 0 Å, got {box!r}")
    return b


def valence(value, name: str = "ion_valence") -> int:
    """``value`` as the valence z ≥ 1 of a z:z salt (an integer), or InputError."""
    if isinstance(value, bool | str) or not isinstance(value, int | np.integer | float):
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    z = int(value)
    if z < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return z


def flag(value, name: str) -> bool:
    """``value`` as a bool (True/False, NumPy booleans, 0 or 1), or InputError naming ``name``."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer) and int(value) in (0, 1):
        return bool(value)
    raise InputError(f"{name} must be True or False, got {value!r}")


def unit_factor(units: str) -> float:
    """Factor from kJ/mol to ``units`` ("kJ/mol" or "kcal/mol")."""
    try:
        return UNITS[units]
    except (KeyError, TypeError):
        raise InputError(f"units must be one of {tuple(UNITS)}, got {units!r}") from None


# ---------------------------------------------------------------------- the physics
@dataclasses.dataclass(frozen=True)
class PhysicsOptions:
    """The physics of a reaction-field calculation (frozen; validated on construction).

    Parameters
    ----------
    eps_in, eps_out : float
        Relative permittivities of the solute (also ε_c, the permittivity φ_c is computed in)
        and of the solvent (water, :data:`EPS_WATER`, by default).
    ionic_strength : float
        Ionic strength I of the salt, mol/L (0: none); for a z:z salt of concentration c,
        I = z²c. κ follows from I alone. With ``ions``, derived from them.
    surface : {"mol", "smol", "vdw", "svdw", "apbs-mol", "apbs-smol"}
        Dielectric boundary: the solvent-excluded surface (APBS ``srfm mol``), its smoothed
        variant, the union of the atomic spheres, or that union with a smooth boundary
        ("svdw", whose energy is differentiable in the positions: the surface for forces); all
        four as exact edge fractions. "apbs-mol" and "apbs-smol" are APBS's own maps of
        ``srfm mol``/``smol``, ε switched at points half a step from the nodes, reproduced
        point for point (:mod:`pbsolver.molecule.apbs_surface`; CPU, Dirichlet grids): for
        agreement with APBS at one spacing, at APBS's larger discretisation error.
    probe_radius : float
        Solvent probe radius, Å (unused for "vdw" and "svdw"). 0 (APBS ``srad 0``) makes "mol"
        the vdW surface exactly and "smol" the smoothed vdW surface.
    ion_radius : float
        Ion exclusion added to the atomic radii for the ion-accessible region and the
        Debye–Hückel boundary values, Å. With ``ions``, derived from them.
    temperature : float
        K; sets κ from the ionic strength.
    boundary_kind : {"mdh", "sdh", "zero"}
        Dirichlet values of the outer layer: the Debye–Hückel sum over atoms, over one sphere
        holding the total charge (APBS ``bcfl sdh``), or zero.
    ions : sequence of (charge, concentration, radius), optional
        Mobile ion species as APBS' ``ion charge Z conc C radius R`` lines: valence (e),
        mol/L (>= 0), Å (>= 0); stored as a tuple of float triples (empty: none). They must be
        electroneutral, Σ cᵢ zᵢ = 0 (APBS refuses a "counterion charge imbalance" too). The
        linearised equation sees them only through the ionic strength I = ½ Σ cᵢ zᵢ² and one
        exclusion radius, the largest of the species' radii (APBS' ``Vpbe_getMaxIonRadius``,
        "Using max ion radius for exclusion function"): these become ``ionic_strength`` and
        ``ion_radius``, which are then one source of truth with ``ions``. A value given
        beside ``ions`` must agree with them (``ionic_strength`` 0 and ``ion_radius`` 2, the
        defaults, count as not given); :meth:`replace` with new ``ions`` derives both again.
    ion_valence : int
        z of the symmetric z:z salt (1: NaCl); used by the nonlinear equation only (the
        linearised one depends on the ionic strength alone). With ``ions`` (which must then be
        one symmetric z:z pair for the nonlinear equation), derived from them.
    nonlinear : bool
        Solve the nonlinear Poisson–Boltzmann equation (the salt term κ̄² (kT/z)
        sinh(zφ/kT); APBS ``npbe``) instead of the linearised one (:mod:`pbsolver.nonlinear`).

    Raises
    ------
    InputError
        Naming the field and its bad value.

    Examples
    --------
    >>> import pbsolver as pb
    >>> salty = pb.PhysicsOptions(ionic_strength=0.15)
    >>> round(salty.debye_length, 2)
    7.86
    >>> salty.replace(eps_in=4.0).eps_in
    4.0
    >>> mg_cl2 = pb.PhysicsOptions(ions=[(2, 0.05, 2.0), (-1, 0.1, 1.8)])
    >>> round(mg_cl2.ionic_strength, 12), mg_cl2.ion_radius
    (0.15, 2.0)
    """

    eps_in: float = 2.0
    eps_out: float = EPS_WATER
    ionic_strength: float = 0.0
    surface: str = "mol"
    probe_radius: float = 1.4
    ion_radius: float = 2.0
    temperature: float = 298.15
    boundary_kind: str = "mdh"
    ions: tuple = ()
    # appended after the older fields (not beside ionic_strength) so that positional
    # construction keeps its meaning
    ion_valence: int = 1
    nonlinear: bool = False

    def __post_init__(self):
        checked = {
            "eps_in": positive(self.eps_in, "eps_in"),
            "eps_out": positive(self.eps_out, "eps_out"),
            "ionic_strength": _ionic_strength(self.ionic_strength),
            "surface": choice(self.surface, "surface", SURFACES),
            "probe_radius": nonnegative(self.probe_radius, "probe_radius"),
            "ion_radius": nonnegative(self.ion_radius, "ion_radius"),
            "temperature": positive(self.temperature, "temperature"),
            "boundary_kind": choice(self.boundary_kind, "boundary_kind", BOUNDARY_KINDS),
            "ions": check_ions(self.ions),
            "ion_valence": valence(self.ion_valence),
            "nonlinear": flag(self.nonlinear, "nonlinear"),
        }
        if checked["ions"]:
            checked.update(_derived_from_ions(checked))
        for name, value in checked.items():  # plain floats and strings, whatever came in
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, physics: PhysicsOptions | None = None, **fields) -> PhysicsOptions:
        """Options from ``physics`` (default: the defaults) with the fields given changed.

        Fields given as None are left as they are, so functions can take today's keywords with
        None defaults and a ``physics=`` object at once: the keywords win.

        Raises
        ------
        InputError
            ``physics`` is not a PhysicsOptions, or a field's value is bad.
        TypeError
            A keyword that is not a field.
        """
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise TypeError(f"unknown physics option(s) {unknown}; known: {FIELDS}")
        given = {k: v for k, v in fields.items() if v is not None}
        if physics is None:
            return cls(**given)
        if not isinstance(physics, cls):
            raise InputError(
                f"physics must be a pbsolver.PhysicsOptions, got {type(physics).__name__}"
            )
        return physics.replace(**given) if given else physics

    @classmethod
    def split(cls, *sources, physics: PhysicsOptions | None = None) -> tuple:
        """Take the physics out of keyword arguments: ``(physics, rest)`` for each source.

        ``physics, rest = PhysicsOptions.split(kwargs)`` lets a function take ``physics=None``
        and the fields of :data:`FIELDS` as keywords beside its own: ``physics`` (or a
        ``"physics"`` entry of a source) with the fields given changed, as :meth:`build`
        does (None: not given), and a copy of ``kwargs`` without them.

        Parameters
        ----------
        *sources : dict or None
            Keyword dicts; a field given in an earlier one wins over a later one.
        physics : PhysicsOptions, optional
            The physics the fields change (default: the defaults).

        Returns
        -------
        tuple
            The PhysicsOptions, then each source without its physics entries.

        Raises
        ------
        InputError
            As :meth:`build`.
        """
        fields: dict = {}
        rests = []
        for source in reversed(sources):
            rest = dict(source or {})
            physics = rest.pop("physics", physics)
            for name in FIELDS:
                value = rest.pop(name, None)
                if value is not None:
                    fields[name] = value
            rests.append(rest)
        return (cls.build(physics, **fields), *reversed(rests))

    def replace(self, **changes) -> PhysicsOptions:
        """A copy with ``changes`` (validated again).

        New ``ions`` give a new ionic strength, ion radius and valence (the old derived values
        are not carried over); a new ``ionic_strength`` or ``ion_radius`` alone on options with
        ions must agree with them.
        """
        if "ions" in changes:
            for name in _FROM_IONS:
                changes.setdefault(name, _DEFAULTS[name])
        return dataclasses.replace(self, **changes)

    def asdict(self) -> dict:
        """The fields as a plain dict (in field order)."""
        return {name: getattr(self, name) for name in FIELDS}

    # ------------------------------------------------------------------ derived quantities
    @property
    def kappa(self) -> float:
        """Inverse Debye length κ of the bulk solvent, Å⁻¹ (0 without salt).

        κ² = 2 N_A e² I·1000 / (ε0 ε_out k_B T) for an electrolyte of ionic strength
        I = ½ Σ cᵢ zᵢ² (mol/L; I = c for a 1:1 salt); κ⁻¹ ≈ 3.04/√I Å in water at 298 K.
        """
        k2 = (2.0 * AVOGADRO * ELEMENTARY_CHARGE**2 * self.ionic_strength * 1000.0) / (
            EPS0 * self.eps_out * BOLTZMANN * self.temperature
        )
        return math.sqrt(k2) * 1e-10

    @property
    def debye_length(self) -> float:
        """Debye length κ⁻¹, Å (inf without salt)."""
        k = self.kappa
        return math.inf if k == 0 else 1.0 / k

    @property
    def kappa2(self) -> float:
        """κ̄² = ε_out κ² of the bulk solvent, Å⁻² (the screening term of the equation)."""
        return self.eps_out * self.kappa**2

    @property
    def has_salt(self) -> bool:
        """True when the ionic strength is above zero."""
        return self.ionic_strength > 0

    def require_linear(self, where: str) -> None:
        """Refuse the nonlinear equation where only the linearised one is solved.

        Raises
        ------
        InputError
            When :attr:`nonlinear` is set, naming ``where``.
        """
        if self.nonlinear:
            raise InputError(
                f"{where} solves the linearised Poisson–Boltzmann equation only; "
                "nonlinear=True is not supported there (use pbsolver.solve, Solver.solve or "
                "solvate on one problem at a time)"
            )


#: Names of the fields of :class:`PhysicsOptions`, in order.
FIELDS = tuple(f.name for f in dataclasses.fields(PhysicsOptions))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PhysicsOptions)}
#: The fields ``ions`` determine.
_FROM_IONS = ("ionic_strength", "ion_radius", "ion_valence")


def ionic_strength_of(ions) -> float:
    """Ionic strength I = ½ Σ cᵢ zᵢ² of ion species ``(charge, conc, radius)``, mol/L."""
    return 0.5 * math.fsum(c * z * z for z, c, _ in check_ions(ions))


def check_ions(ions) -> tuple:
    """Ion species as a tuple of ``(charge e, concentration mol/L, radius Å)`` float triples.

    None or an empty sequence: no species. Each species is checked (finite charge, finite
    concentration and radius >= 0), and the set must be electroneutral: |Σ cᵢ zᵢ| at most
    1e-9 of Σ cᵢ |zᵢ| (decimal input such as 0.05 M Mg²⁺ with 0.1 M Cl⁻ passes).

    Raises
    ------
    InputError
        Naming the species and the bad value, or the net charge concentration.
    """
    if ions is None:
        return ()
    if isinstance(ions, str | bytes) or not hasattr(ions, "__iter__"):
        raise InputError(f"ions must be a sequence of (charge, conc, radius), got {ions!r}")
    out = []
    for k, species in enumerate(ions):
        if isinstance(species, str | bytes) or not hasattr(species, "__len__") or len(species) != 3:
            raise InputError(
                f"ions[{k}] must be (charge e, concentration mol/L, radius Å), got {species!r}"
            )
        z = number(species[0], f"ions[{k}] charge")
        if not math.isfinite(z):
            raise InputError(f"ions[{k}] charge must be finite, got {species[0]!r}")
        c = number(species[1], f"ions[{k}] concentration")
        if not (math.isfinite(c) and c >= 0):
            raise InputError(f"ions[{k}] concentration must be >= 0 mol/L, got {species[1]!r}")
        r = nonnegative(species[2], f"ions[{k}] radius")
        out.append((z, c, r))
    net = math.fsum(c * z for z, c, _ in out)
    scale = math.fsum(c * abs(z) for z, c, _ in out)
    if abs(net) > 1e-9 * scale:
        raise InputError(
            f"ions must be electroneutral (sum of conc*charge = 0), got a net charge "
            f"concentration of {net:g} M from {tuple(out)}"
        )
    return tuple(out)


def _derived_from_ions(checked: dict) -> dict:
    """``ionic_strength`` and ``ion_radius`` from checked ``ions``; a given value must agree."""
    ions = checked["ions"]
    derived = {
        "ionic_strength": ionic_strength_of(ions),
        "ion_radius": max(r for _, _, r in ions),
    }
    for name, value in derived.items():
        given = checked[name]
        if given != _DEFAULTS[name] and not math.isclose(given, value, rel_tol=1e-9, abs_tol=0):
            unit = "mol/L" if name == "ionic_strength" else "Å"
            raise InputError(
                f"{name}={given:g} conflicts with ions, which give {value:g} {unit}; give "
                f"ions or {name}, not both"
            )
    valences = {abs(z) for z, c, _ in ions if c > 0}
    if checked["nonlinear"] and valences:
        # the nonlinear term (pbsolver.nonlinear) is that of one symmetric z:z salt
        if len(valences) != 1 or int(max(valences)) != max(valences):
            raise InputError(
                f"the nonlinear equation takes one symmetric z:z salt; ions {list(ions)} mix "
                "valences (use the linearised equation, or one salt)"
            )
        z = int(max(valences))
        if checked["ion_valence"] not in (_DEFAULTS["ion_valence"], z):
            raise InputError(f"ion_valence={checked['ion_valence']} conflicts with ions (z = {z})")
        derived["ion_valence"] = z
    return derived


def _ionic_strength(value) -> float:
    v = number(value, "ionic_strength")
    if not (math.isfinite(v) and v >= 0):
        raise InputError(f"ionic_strength must be >= 0 mol/L, got {v}")
    return v


__all__ = [
    "BOUNDARY_KINDS",
    "EPS_WATER",
    "FIELDS",
    "SPHERE_SURFACES",
    "SURFACES",
    "UNITS",
    "PhysicsOptions",
    "check_box",
    "check_ions",
    "choice",
    "flag",
    "ionic_strength_of",
    "nonnegative",
    "number",
    "positive",
    "unit_factor",
    "valence",
]
