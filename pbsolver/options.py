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
#: Dielectric surfaces: solvent-excluded (APBS ``srfm mol``), its smoothed variant, vdW spheres.
SURFACES = ("mol", "smol", "vdw")
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
        I = z²c. κ follows from I alone.
    surface : {"mol", "smol", "vdw"}
        Dielectric boundary: the solvent-excluded surface (APBS ``srfm mol``), its smoothed
        variant, or the union of the atomic spheres.
    probe_radius : float
        Solvent probe radius, Å (> 0 for "mol" and "smol"; unused for "vdw").
    ion_radius : float
        Ion exclusion added to the atomic radii for the ion-accessible region and the
        Debye–Hückel boundary values, Å.
    temperature : float
        K; sets κ from the ionic strength.
    boundary_kind : {"mdh", "sdh", "zero"}
        Dirichlet values of the outer layer: the Debye–Hückel sum over atoms, over one sphere
        holding the total charge (APBS ``bcfl sdh``), or zero.
    ion_valence : int
        z of the symmetric z:z salt (1: NaCl); used by the nonlinear equation only (the
        linearised one depends on the ionic strength alone).
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
    """

    eps_in: float = 2.0
    eps_out: float = EPS_WATER
    ionic_strength: float = 0.0
    surface: str = "mol"
    probe_radius: float = 1.4
    ion_radius: float = 2.0
    temperature: float = 298.15
    boundary_kind: str = "mdh"
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
            "ion_valence": valence(self.ion_valence),
            "nonlinear": flag(self.nonlinear, "nonlinear"),
        }
        if checked["surface"] != "vdw" and checked["probe_radius"] == 0:
            raise InputError(
                f"probe_radius must be > 0 Å for surface={checked['surface']!r}, got "
                f"{self.probe_radius!r}"
            )
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
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    def asdict(self) -> dict:
        """The fields as a plain dict (in field order)."""
        return {name: getattr(self, name) for name in FIELDS}

    # ------------------------------------------------------------------ derived quantities
    @property
    def kappa(self) -> float:
        """Inverse Debye length κ of the bulk solvent, Å⁻¹ (0 without salt).

        κ² = 2 N_A e² I·1000 / (ε0 ε_out k_B T) for a 1:1 salt of ionic strength I (mol/L);
        κ⁻¹ ≈ 3.04/√I Å in water at 298 K.
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


def _ionic_strength(value) -> float:
    v = number(value, "ionic_strength")
    if not (math.isfinite(v) and v >= 0):
        raise InputError(f"ionic_strength must be >= 0 mol/L, got {v}")
    return v


__all__ = [
    "BOUNDARY_KINDS",
    "EPS_WATER",
    "FIELDS",
    "SURFACES",
    "UNITS",
    "PhysicsOptions",
    "check_box",
    "choice",
    "flag",
    "nonnegative",
    "number",
    "positive",
    "unit_factor",
    "valence",
]
