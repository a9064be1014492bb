"""APBS 3.4.1's output lines, written for pbsolver's calculations.

Scripts that read APBS output look for a few lines; these keep APBS' exact wording and number
formats (C ``%1.12E`` for energies, ``%4.3f`` for parameters), taken from APBS' ``routines.c``:

* per calculation: ``  Total electrostatic energy = 9.607073836227E+02 kJ/mol``; with
  ``calcenergy comps`` also ``  Fixed charge energy = … kJ/mol``, ``  Per-atom energies:`` and
  ``      Atom 0:  … kJ/mol`` (atoms numbered from 0);
* per PRINT statement: an empty line, ``print energy 1 (solv) - 2 (ref) end``,
  ``  Local net energy (PE 0) = … kJ/mol`` and ``  Global net ELEC energy = … kJ/mol``.

APBS' "Mobile charge energy" and "Dielectric energy" (of the total potential, self energies
included) have no counterpart without self energies and are not printed. Lines that say what
pbsolver did differently start with ``  pbsolver:`` or ``note:``.
"""

from __future__ import annotations

import numpy as np

from pbsolver.apbs.section import numbered

#: The separator APBS prints between calculations.
RULE = "-" * 40

ENERGY_NOTE = (
    "note: pbsolver's energies exclude self energies (Coulomb pairs in pdie plus the reaction "
    "field); differences between calculations match APBS'"
)
MODEL_NOTE = (
    "note: pbsolver discretises with exact edge fractions of the surface and an analytic "
    "Coulomb potential (no charge spreading, chgm unused); APBS spreads charges onto the grid"
)

_EQUATION = {
    "lpbe": "Linearized traditional PBE",
    "lrpbe": "Linearized regularized PBE",
    "npbe": "Nonlinear traditional PBE",
}
_VALUES = {
    "zero": "zero total potential on the boundary (phi_rf = -phi_c)",
    "sdh": "sdh boundary values",
    "mdh": "mdh boundary values",
    "focus": "boundary values from the coarser grid's reaction field",
}
_BOUNDARY = {
    "zero": "Zero boundary conditions",
    "sdh": "Single Debye-Huckel sphere boundary conditions",
    "mdh": "Multiple Debye-Huckel sphere boundary conditions",
    "focus": "Boundary conditions from focusing",
}


def energy(value: float) -> str:
    """An energy as APBS prints it (C ``%1.12E``).

    >>> energy(-229.7735526282)
    '-2.297735526282E+02'
    """
    return f"{value:1.12E}"


def molecule_lines(path: str, fmt: str, atoms) -> list[str]:
    """What APBS prints when it reads a molecule."""
    lo, hi = atoms.bounds(with_radii=False)
    c = 0.5 * (lo + hi)
    kind = "PQR" if fmt == "pqr" else "PDB"
    return [
        f"Reading {kind}-format atom data from {path}.",
        f"  {len(atoms)} atoms",
        "  Centered at ({:4.3e}, {:4.3e}, {:4.3e})".format(*c),
        f"  Net charge {atoms.total_charge:3.2e} e",
    ]


def calculation_lines(calc, plan, number: int, first: bool = True) -> list[str]:
    """The set-up lines of one grid's solve, in APBS' words, then what pbsolver does.

    Parameters
    ----------
    calc : Calculation
    plan : GridPlan
        One of ``calc.grids``.
    number : int
        APBS' number of this solve (1-based, counting every focusing level).
    first : bool
        The calculation's first grid: add the notes on what pbsolver does differently.
    """
    b = calc.block
    g = plan.grid
    ph = calc.physics
    lines = [
        RULE,
        f"CALCULATION {numbered(number, calc.name)}: MULTIGRID",
        "  Setting up problem...",
        f"  Debye length:  {ph.debye_length if ph.has_salt else 0.0:g} A",
        "  Grid dimensions: {} x {} x {}".format(*g.shape),
        "  Grid spacings: {:4.3f} x {:4.3f} x {:4.3f}".format(*g.spacing),
        "  Grid lengths: {:4.3f} x {:4.3f} x {:4.3f}".format(*g.lengths),
        "  Grid center: ({:4.3f}, {:4.3f}, {:4.3f})".format(*g.center),
        f"  Molecule ID: {calc.molecule}",
        "  " + _EQUATION[calc.equation],
        "  " + _BOUNDARY[plan.boundary],
        f"  {len(calc.ions)} ion species ({ph.ionic_strength:4.3f} M ionic strength):",
    ]
    for ion in calc.ions:
        lines.append(
            f"    {ion.radius:4.3f} A-radius, {ion.charge:4.3f} e-charge, "
            f"{ion.conc:4.3f} M concentration"
        )
    lines += [
        f"  Solute dielectric: {ph.eps_in:4.3f}",
        f"  Solvent dielectric: {ph.eps_out:4.3f}",
    ]
    if b.srfm == "mol":
        lines.append('  Using "molecular" surface definition; no smoothing')
        lines.append(f"  Solvent probe radius: {b.srad or 0.0:4.3f} A")
    elif b.srfm == "smol":
        lines.append('  Using "molecular" surface definition;harmonic average smoothing')
        lines.append(f"  Solvent probe radius: {b.srad or 0.0:4.3f} A")
    else:
        lines.append(f"  Using spline-based surface definition;window = {b.swin or 0.0:4.3f}")
    lines.append(f"  Temperature:  {ph.temperature:4.3f} K")
    if calc.energy != "no":
        lines.append("  Electrostatic energies will be calculated")
    if plan is calc.grid:  # APBS writes on the finest grid only
        for w, path in calc.writes:
            what = {"pot": "Potential"}.get(w.kind, f"{w.kind} map")
            lines.append(f"  {what} to be written to {path}")
    lines.append(f"  pbsolver: {surface_words(ph)} surface, {_VALUES[plan.boundary]}")
    if first:
        lines += [f"  pbsolver: {note}" for note in calc.notes]
    return lines


def surface_words(physics) -> str:
    """pbsolver's dielectric surface of ``physics``, in words.

    >>> from pbsolver import PhysicsOptions
    >>> surface_words(PhysicsOptions(surface="smol", probe_radius=0.0))
    'smoothed van der Waals'
    """
    if physics.surface.startswith("apbs-"):
        kind = "solvent-excluded" if physics.probe_radius > 0 else "van der Waals"
        smooth = "smoothed " if physics.surface == "apbs-smol" else ""
        return f"APBS's point-switched {smooth}{kind}"
    if physics.surface in ("vdw", "svdw") or physics.probe_radius == 0:
        return "smoothed van der Waals" if physics.surface in ("smol", "svdw") else "van der Waals"
    return {"mol": "solvent-excluded", "smol": "smoothed solvent-excluded"}[physics.surface]


def solve_line(result) -> str:
    """One line on a grid's solve (method, backend, iterations, residual, time)."""
    if result is None:
        return "  pbsolver: pdie = sdie, no salt, mdh values: the reaction field is zero (no solve)"
    return (
        f"  pbsolver: {result.method} on {result.backend}, {result.iterations} iterations, "
        f"relative residual {result.residual:.1e}, {result.seconds:.2f} s"
    )


def calculation_time_line(calc, reaction_field: float, coulomb: float, seconds: float) -> str:
    """A whole ELEC block: its energy's two parts on the finest grid (kJ/mol) and wall time.

    >>> from types import SimpleNamespace
    >>> calculation_time_line(SimpleNamespace(label="#1 (solv)"), -228.6, 0.0, 1.5)[:60]
    'pbsolver: ELEC #1 (solv): reaction field -2.286000000000E+02'
    """
    return (
        f"pbsolver: ELEC {calc.label}: reaction field {energy(reaction_field)} kJ/mol, "
        f"Coulomb pairs {energy(coulomb)} kJ/mol, {seconds:.2f} s"
    )


def ion_terms_line(calc, mobile: float, osmotic: float) -> str:
    """``npbe``: the mobile ions' terms of the finest grid's free energy (kJ/mol).

    >>> from types import SimpleNamespace
    >>> ion_terms_line(SimpleNamespace(label="#2"), 1.5, -2.0)[:56]
    'pbsolver: ELEC #2: mobile ions 1.500000000000E+00 kJ/mol'
    """
    return (
        f"pbsolver: ELEC {calc.label}: mobile ions {energy(mobile)} kJ/mol, osmotic "
        f"{energy(osmotic)} kJ/mol (in the total energy beside the Coulomb pairs and the "
        "reaction field)"
    )


def energy_lines(calc, total: float, atom_energies=None) -> list[str]:
    """APBS' energy lines of one calculation (``calcenergy total`` or ``comps``)."""
    lines = [f"  Total electrostatic energy = {energy(total)} kJ/mol"]
    if calc.energy == "comps":
        lines.append(f"  Fixed charge energy = {total:g} kJ/mol")
        lines.append("  Per-atom energies:")
        lines += [f"      Atom {i}:  {energy(e)} kJ/mol" for i, e in enumerate(atom_energies)]
    return lines


def _echo(stmt, calcs) -> str:
    """The calculations of a PRINT statement as APBS echoes them: ``1 (solv) - 2 (ref)``."""
    words = []
    for k, term in enumerate(stmt.terms):
        if k:
            words.append("+" if term.sign > 0 else "-")
        c = calcs[term.calc - 1]
        words.append(f"{c.index} ({c.name})" if c.name else f"{c.index}")
    return " ".join(words)


def print_lines(stmt, calcs, value: float) -> list[str]:
    """APBS' lines for one PRINT elecEnergy statement and its value (kJ/mol)."""
    head = [] if stmt.deprecated else [""]
    return head + [
        f"print energy {_echo(stmt, calcs)} end",
        f"  Local net energy (PE 0) = {energy(value)} kJ/mol",
        f"  Global net ELEC energy = {energy(value)} kJ/mol",
    ]


def _vec(fmt, v, sep="  ") -> str:
    """Three numbers in C format ``fmt``, separated as APBS separates them in that line."""
    return sep.join(format(float(x), fmt) for x in v)


#: APBS' names of the ELEC force terms, in its order of printing.
ELEC_TERMS = ("qf", "ib", "db")
#: APBS' names of the APOLAR force terms.
APOLAR_TERMS = ("sasa", "sav", "wca")


def force_lines(calc, parts) -> list[str]:
    """APBS' ``calcforce`` lines of an ELEC calculation (kJ mol⁻¹ Å⁻¹).

    ``parts`` maps "qf", "ib", "db" to (n, 3) arrays; ``calc.force`` is "comps" (per atom,
    ``mgF`` lines) or "total" (the sums).
    """
    lines = ["  Calculating forces..."]
    if calc.force == "total":
        lines += [
            f"  Printing net forces for molecule {calc.molecule} (kJ/mol/A)",
            "  Legend:",
            "    qf  -- fixed charge force",
            "    db  -- dielectric boundary force",
            "    ib  -- ionic boundary force",
        ]
        lines += [f"  {k:<3} {_vec('4.3e', parts[k].sum(axis=0))}" for k in ELEC_TERMS]
        return lines
    lines += [
        f"  Printing per-atom forces for molecule {calc.molecule} (kJ/mol/A)",
        "  Legend:",
        "    tot n -- total force for atom n",
        "    qf  n -- fixed charge force for atom n",
        "    db  n -- dielectric boundary force for atom n",
        "    ib  n -- ionic boundary force for atom n",
    ]
    total = sum(parts[k] for k in ELEC_TERMS)
    for i in range(len(total)):
        lines.append(f"mgF  tot {i}  {_vec('4.3e', total[i])}")
        lines += [f"mgF  {k:<3} {i}  {_vec('4.3e', parts[k][i])}" for k in ELEC_TERMS]
    return lines


#: What APBS prints for PRINT elecForce and apolForce (routines.c printElecForce and
#: printApolForce): the echo, the term names, the net and per-atom legends, how wide it pads
#: the names of the net and per-atom lines, and how the system's total line starts.
_PRINT_FORCES = {
    "elecForce": (
        "print force", ELEC_TERMS,
        ["  Printing net forces (kJ/mol/A).", "  Legend:", "    tot -- Total force",
         "    qf  -- Fixed charge force", "    db  -- Dielectric boundary force",
         "    ib  -- Ionic boundary force"],
        ["  Printing per-atom forces (kJ/mol/A).", "  Legend:",
         "    tot n -- Total force for atom n", "    qf  n -- Fixed charge force for atom n",
         "    db  n -- Dielectric boundary force for atom n",
         "    ib  n -- Ionic boundary force for atom n"],
        3, 3, "  tot all ",
    ),
    "apolForce": (
        "print APOL force", APOLAR_TERMS,
        ["  Printing net forces (kJ/mol/A)", "  Legend:", "    tot   -- Total force",
         "    sasa  -- SASA force", "    sav   -- SAV force", "    wca   -- WCA force", ""],
        ["  Printing per atom forces (kJ/mol/A)", "  Legend:",
         "    tot   n -- Total force for atom n", "    sasa  n -- SASA force for atom n",
         "    sav   n -- SAV force for atom n", "    wca   n -- WCA force for atom n"],
        4, 5, "  tot all  ",
    ),
}  # fmt: skip


def print_force_lines(stmt, calcs, parts, mode: str) -> list[str]:
    """APBS' lines for PRINT elecForce or apolForce (``stmt.what``).

    ``parts`` maps the terms ("qf", "ib", "db"; or "sasa", "sav", "wca") to (n, 3) arrays,
    summed over the statement's calculations; ``mode`` is their ``calcforce`` ("total": the net
    forces; "comps": per atom).
    """
    echo, names, net, per_atom, net_width, atom_width, last = _PRINT_FORCES[stmt.what]
    lines = ["", f"{echo} {_echo(stmt, calcs)} end"]
    if mode == "total":
        total = sum(parts[k] for k in names)
        lines += [*net, f"  tot {_vec('1.12E', total.sum(axis=0))}"]
        return lines + [f"  {k:<{net_width}} {_vec('1.12E', parts[k].sum(axis=0))}" for k in names]
    return lines + per_atom + _per_atom_sums(parts, names, atom_width, last)


def _per_atom_sums(parts, names, width, last) -> list[str]:
    """A PRINT's per-atom force lines: each term, the atom's total, then the system's total.

    ``width`` pads the term names; ``last`` starts the system's line (APBS spaces the ELEC and
    APOLAR forms differently).
    """
    total = sum(parts[k] for k in names)
    lines = ["    tot all -- Total force for system"]
    for i in range(len(total)):
        lines += [f"  {k:<{width}} {i}  {_vec('1.12E', parts[k][i])}" for k in names]
        lines.append(f"  {'tot':<{width}} {i}  {_vec('1.12E', total[i])}")
    return lines + [f"{last}{_vec('1.12E', total.sum(axis=0))}"]


def apolar_lines(calc, number: int, result) -> list[str]:
    """APBS' lines of one APOLAR calculation: forces (if asked), areas, energies.

    ``result`` is :class:`pbsolver.molecule.apolar.ApolarResult`; areas are printed as zero
    where γ = 0, as APBS skips them.
    """
    p = calc.params
    lines = [RULE, f"CALCULATION {numbered(number, calc.name)}: APOLAR"]
    forces = result.forces
    if calc.force == "total":
        lines += [
            "  Printing net forces (kJ/mol/A)",
            "  Legend:",
            "    sasa  -- SASA force",
            "    sav   -- SAV force",
            "    wca   -- WCA force",
            "",
        ]
        lines += [f"  {k:<5} {_vec('4.3e', forces[k].sum(axis=0), ' ')}" for k in APOLAR_TERMS]
    elif calc.force == "comps":
        lines += [
            "  Printing per atom forces (kJ/mol/A)",
            "  Legend:",
            "    tot  n -- Total force for atom n",
            "    sasa n -- SASA force for atom n",
            "    sav  n -- SAV force for atom n",
            "    wca  n -- WCA force for atom n",
            "",
            f"    gamma    {p.gamma:f}",
            f"    pressure {p.press:f}",
            f"    bconc    {p.bconc:f} ",
            "",
        ]
        for i in range(len(calc.atoms)):
            lines.append(f"  tot  {i} {_vec('4.3e', forces['total'][i], ' ')}")
            lines += [f"  {k:<4} {i} {_vec('4.3e', forces[k][i], ' ')}" for k in APOLAR_TERMS]
    if calc.energy == "no":
        return lines
    areas = result.sasa if p.gamma != 0 else np.zeros(len(calc.atoms))
    lines += ["", "Solvent Accessible Surface Area (SASA) for each atom:"]
    lines += [f"  SASA for atom {i}: {energy(a)}" for i, a in enumerate(areas)]
    lines += ["", f"Total solvent accessible surface area: {float(areas.sum()):g} A^2"]
    if calc.energy == "comps":
        return lines + ["energyAPOL: Cannot calculate component energy, skipping."]
    lines += ["", "Surface tension*area energies (gamma * SASA) for each atom:"]
    lines += [
        f"  Surface tension*area energy for atom {i}: {energy(p.gamma * a)}"
        for i, a in enumerate(areas)
    ]
    lines += [
        "",
        f"Total surface tension energy: {p.gamma * float(areas.sum()):g} kJ/mol",
        "",
        f"Total solvent accessible volume: {result.sav:g} A^3",
        "",
        f"Total pressure*volume energy: {p.press * result.sav:g} kJ/mol",
        "",
        "WCA dispersion Energies for each atom:",
    ]
    lines += [f"  WCA energy for atom {i}: {energy(w)}" for i, w in enumerate(result.wca)]
    lines += [
        "",
        f"Total WCA energy: {float(result.wca.sum()):g} kJ/mol",
        "",
        f"Total non-polar energy = {energy(result.energy)} kJ/mol",
    ]
    return lines


def print_apolar_energy_lines(stmt, calcs, value: float) -> list[str]:
    """APBS' lines for PRINT apolEnergy and its value (kJ/mol)."""
    return [
        "",
        f"print APOL energy {_echo(stmt, calcs)} end",
        f"  Global net APOL energy = {energy(value)} kJ/mol",
    ]


__all__ = [
    "APOLAR_TERMS",
    "ELEC_TERMS",
    "ENERGY_NOTE",
    "MODEL_NOTE",
    "RULE",
    "apolar_lines",
    "calculation_lines",
    "calculation_time_line",
    "energy",
    "energy_lines",
    "force_lines",
    "ion_terms_line",
    "molecule_lines",
    "print_apolar_energy_lines",
    "print_force_lines",
    "print_lines",
    "solve_line",
    "surface_words",
]
