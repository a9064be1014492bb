"""Potential units at the file boundary: kJ mol⁻¹ e⁻¹ inside pbsolver, kT/e in DX files.

φ[kT/e] = φ[kJ mol⁻¹ e⁻¹] / (R·T), with R = k_B·N_A = 8.31446261815324 J mol⁻¹ K⁻¹ (exact in
the 2019 SI). At 298.15 K, 1 kT/e = 2.478957 kJ mol⁻¹ e⁻¹.
"""

from __future__ import annotations

import math

from pbsolver.exceptions import InputError

#: k_B·N_A in kJ mol⁻¹ K⁻¹ (exact).
GAS_CONSTANT_KJ = 1.380649e-23 * 6.02214076e23 / 1000.0
#: Default temperature of kT/e output, K (APBS' default too).
DEFAULT_TEMPERATURE = 298.15
#: Units string pbsolver writes for potentials in HDF5.
KJ_PER_MOL_E = "kJ/mol/e"
KT_PER_E = "kT/e"

_KJ_ALIASES = {"kj/mol/e", "kj mol-1 e-1", "kj/(mol e)", "kj/(mol*e)", "kj mol^-1 e^-1"}
_KT_ALIASES = {"kt/e", "kt e-1", "kt e^-1"}


def kT_kj_per_mol(temperature: float = DEFAULT_TEMPERATURE) -> float:
    """Return kT per mole, kJ/mol, at ``temperature`` K.

    Raises
    ------
    InputError
        If the temperature is not a finite number > 0.
    """
    t = check_temperature(temperature)
    return GAS_CONSTANT_KJ * t


def check_temperature(temperature) -> float:
    """Return ``temperature`` as a float, refusing values that are not finite and > 0 K."""
    try:
        t = float(temperature)
    except (TypeError, ValueError) as exc:
        raise InputError(f"temperature must be a number in K, got {temperature!r}") from exc
    if not (math.isfinite(t) and t > 0):
        raise InputError(f"temperature must be finite and > 0 K, got {t}")
    return t


def potential_scale(units: str | None, temperature: float = DEFAULT_TEMPERATURE) -> float:
    """Factor that turns a potential given in ``units`` into kJ mol⁻¹ e⁻¹.

    Parameters
    ----------
    units : str or None
        ``"kJ/mol/e"`` (also the default when None) or ``"kT/e"``.
    temperature : float
        Temperature of kT/e values, K.

    Raises
    ------
    InputError
        On units pbsolver does not know.
    """
    if units is None:
        return 1.0
    u = " ".join(str(units).strip().lower().split())
    if u in _KJ_ALIASES:
        return 1.0
    if u in _KT_ALIASES:
        return kT_kj_per_mol(temperature)
    raise InputError(f"unknown potential units {units!r}; use {KJ_PER_MOL_E!r} or {KT_PER_E!r}")
