"""Run an APBS input file through pbsolver: its ELEC and APOLAR calculations, then PRINT.

:func:`run` parses the file (:mod:`~pbsolver.apbs.parser`), reads its molecules
(:mod:`~pbsolver.apbs.files`), maps every ELEC block to a pbsolver calculation and every APOLAR
block to its parameters and checks them (:mod:`~pbsolver.apbs.model`,
:mod:`~pbsolver.apbs.apolar`) — all before the first solve, so that a bad line fails at once —
then runs the sections in the input's order: each ELEC calculation on its grids (one, or APBS'
focusing levels: :func:`pbsolver.molecule.focusing.solve_focused`), with its energies
(:mod:`~pbsolver.apbs.energy`: APBS' total energy without the self energies, whose differences
are APBS' differences) and, with ``calcforce``, its forces (:func:`elec_forces`); each APOLAR
calculation (:mod:`pbsolver.molecule.apolar`). Then it writes the maps asked for and evaluates
the PRINT expressions (energies and forces). The output (:mod:`~pbsolver.apbs.report`) has APBS'
summary lines, one calculation per grid as APBS numbers them. Files asked for by ``write``
appear only when the whole input has run.

Potential maps (``write pot``) hold the total potential φ_c + φ_rf in kT/e at the calculation's
temperature on its finest grid, as APBS writes it; a node on a point charge (where φ_c is
infinite; APBS' spread charge is finite there) gets the mean of its neighbours.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pbsolver.apbs import model, report
from pbsolver.apbs.apolar import FORCE_NOTE, ApolarCalculation, run_apolar
from pbsolver.apbs.energy import level_ion_terms, level_rf_terms, pair_terms
from pbsolver.apbs.files import read_molecule, read_parm
from pbsolver.apbs.parser import parse_file
from pbsolver.arrays import to_numpy
from pbsolver.backends import BACKENDS
from pbsolver.exceptions import InputError
from pbsolver.options import choice


@dataclass
class CalculationResult:
    """One ELEC calculation's outcome.

    Attributes
    ----------
    index, name : int, str or None
        APBS' number of the ELEC block (1-based) and the block's name.
    energy : float or None
        The energy reported as "Total electrostatic energy" on the finest grid, kJ/mol,
        without self energies (None with ``calcenergy no``): ``coulomb + reaction_field``, plus
        ``mobile + osmotic`` for ``npbe``.
    level_energies : list of float
        The same on each grid, coarse to fine (the last is ``energy``; empty with
        ``calcenergy no``).
    reaction_field : float
        ½ Σ q_i φ_rf(r_i), kJ/mol.
    coulomb : float
        Σ_{i<j} k q_i q_j / (pdie r_ij), kJ/mol (0 for ``lrpbe``).
    atom_energies : ndarray
        Per-atom energies, kJ/mol: Coulomb pairs and reaction field, summing to ``energy``
        less the ion terms.
    grid : Grid
        The finest grid.
    solve : SolveResult or None
        The finest grid's solve; None where no solve was needed (φ_rf ≡ 0).
    seconds : float
        Wall time of the calculation (maps, solves, energies, writes).
    notes : list of str
    grids : list of Grid
        Every grid of the calculation, coarse to fine.
    solves : list of SolveResult
        Their solves (empty where φ_rf ≡ 0).
    mobile, osmotic : float
        ``npbe``: the mobile ions' terms of the nonlinear free energy on the finest grid
        (:mod:`pbsolver.nonlinear.energy`), kJ/mol; 0 for the linear equations.
    forces : dict or None
        With ``calcforce``: "qf", "ib", "db" → (n, 3), kJ mol⁻¹ Å⁻¹, on the finest grid
        (:func:`elec_forces`).
    """

    index: int
    name: str | None
    energy: float | None
    reaction_field: float
    coulomb: float
    atom_energies: np.ndarray
    grid: object
    solve: object
    seconds: float
    notes: list
    level_energies: list = field(default_factory=list)
    grids: list = field(default_factory=list)
    solves: list = field(default_factory=list)
    mobile: float = 0.0
    osmotic: float = 0.0
    forces: dict | None = None


@dataclass
class PrintResult:
    """One PRINT statement: APBS' echo of it and its value.

    ``value`` is the energy (kJ/mol) of elecEnergy and apolEnergy; ``forces`` the summed
    force terms of elecForce ("qf", "ib", "db") and apolForce ("sasa", "sav", "wca"), each
    (n, 3) in kJ mol⁻¹ Å⁻¹ (None for energies; ``value`` is then None).
    """

    statement: str
    value: float | None
    line: int
    what: str = "elecEnergy"
    forces: dict | None = None


@dataclass
class ApbsRun:
    """Everything :func:`run` did.

    Attributes
    ----------
    calculations : list of CalculationResult
    apolars : list of ApolarResult
        One per APOLAR section (:class:`pbsolver.molecule.apolar.ApolarResult`).
    prints : list of PrintResult
    written : list of Path
        Files written by ``write`` statements.
    skipped : list of str
        Statements skipped (``skip_unsupported``), with their lines.
    warnings : list of str
        ``file:line: message`` of what runs as APBS runs it but is likely not what was meant
        (a ``dime`` APBS lowers, stretching the spacing).
    text : str
        The output, as printed.
    """

    calculations: list = field(default_factory=list)
    apolars: list = field(default_factory=list)
    prints: list = field(default_factory=list)
    written: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    text: str = ""

    def energy(self, calc) -> float | None:
        """The energy (kJ/mol) of a calculation given by number (1-based) or name."""
        for c in self.calculations:
            if c.index == calc or (
                isinstance(calc, str) and c.name is not None and c.name.lower() == calc.lower()
            ):
                return c.energy
        raise KeyError(calc)


class _Output:
    """Lines to a stream (or nowhere) and kept for :attr:`ApbsRun.text`."""

    def __init__(self, stream):
        self.stream = stream
        self.lines: list[str] = []

    def __call__(self, *lines):
        for line in lines:
            self.lines.append(line)
            if self.stream is not None:
                print(line, file=self.stream, flush=True)


def run(
    path,
    *,
    backend: str = "auto",
    method: str = "auto",
    allow_outside: bool = False,
    output_dir=None,
    skip_unsupported: bool = False,
    out=None,
    dtype=np.float32,
    surfaces: str = "exact",
    maps_backend: str | None = None,
) -> ApbsRun:
    """Run an APBS input file (``.in``) with pbsolver.

    Parameters
    ----------
    path : path-like
        The APBS input file. The files it names are relative to its folder.
    backend, method : str
        :class:`pbsolver.Solver`'s backend ("auto", "cpu", "cuda") and method.
    allow_outside : bool
        Let the input name files outside its folder (absolute paths, ``..``), and ``write``
        files outside ``output_dir``. Off by default: an input file is no way to read or write
        other files.
    output_dir : path-like, optional
        Folder of the files of ``write`` statements (default: the current directory, as APBS).
    skip_unsupported : bool
        Skip what pbsolver cannot produce (some maps, writemat) with a warning instead of
        refusing the input.
    surfaces : {"exact", "apbs"}
        ``srfm mol``/``smol`` as pbsolver's exact edge fractions (default: the smaller
        discretisation error) or as APBS's own point-switched maps (APBS's numbers at the same
        spacing; :mod:`pbsolver.molecule.apbs_surface`).
    maps_backend : {"auto", "cpu", "cuda"}, optional
        Where the maps (surfaces, κ̄², φ_c, boundary values) are built; None or "auto": where
        the solves run (``backend``, resolved). The APBS surfaces are built on the CPU.
    out : text stream, optional
        Where to print APBS-style output as it runs (e.g. ``sys.stdout``); None: print nothing
        (the text is in the result).
    dtype : numpy dtype
        Precision of the solver's sweeps.

    Returns
    -------
    ApbsRun

    Raises
    ------
    InputError
        ``<file>:<line>: …`` for anything in the input that pbsolver refuses, before any solve.
    ConvergenceError
        A solve that does not converge.

    Examples
    --------
    >>> import pbsolver as pb
    >>> result = pb.apbs.run("born.in")                          # doctest: +SKIP
    >>> result.prints[0].value                                  # doctest: +SKIP
    -228.68...
    """
    t_start = time.perf_counter()
    emit = _Output(out)
    inp = parse_file(path)
    if maps_backend is not None:
        choice(maps_backend, "maps_backend", BACKENDS)
    outdir = Path("." if output_dir is None else os.fspath(output_dir))
    emit(f"pbsolver: running APBS input {inp.source}", "Parsed input file.")
    # the parameter file, read once: for the PDB molecules and APOLAR's dispersion term
    table = None
    needed = any(m.format == "pdb" for m in inp.molecules) or any(
        (a.bconc or 0) > 0 for a in inp.apolars
    )
    if inp.parm is not None and needed:
        table = read_parm(inp.parm, inp.folder, source=inp.source, allow_outside=allow_outside)
    molecules = []
    for spec in inp.molecules:
        atoms = read_molecule(spec, inp.folder, inp.parm, source=inp.source,
                              allow_outside=allow_outside, table=table)  # fmt: skip
        molecules.append(atoms)
    plan = model.plan_input(
        inp,
        molecules,
        skip_unsupported=skip_unsupported,
        output_dir=outdir,
        allow_outside=allow_outside,
        surfaces=choice(surfaces, "surfaces", ("exact", "apbs")),
        parm_table=table,
    )
    result = ApbsRun(
        skipped=[f"{inp.source}:{s.line}: {s.message}" for s in plan.skipped],
        warnings=[f"{inp.source}:{w.line}: {w.message}" for w in plan.warnings],
    )
    emit(f"Got paths for {len(inp.molecules)} molecules")
    for spec, atoms in zip(inp.molecules, molecules, strict=True):
        emit(*report.molecule_lines(spec.path, spec.format, atoms))
    for s in result.skipped:
        emit(f"warning: skipped {s}")
    for w in result.warnings:
        emit(f"warning: {w}")
    emit(report.ENERGY_NOTE, report.MODEL_NOTE)
    if any(a.force != "no" for a in plan.apolars):
        emit(f"note: {FORCE_NOTE}")
    emit(f"Preparing to run {plan.solves} PBE calculations.")
    staging = None
    chain = None  # the focusing levels of the calculation before (for bcfl focus)
    number = 0  # APBS numbers every grid's solve as a calculation
    pairs: dict = {}  # Coulomb terms by (molecule, pdie, equation): O(n²) once each
    # ELEC and APOLAR sections run in the input's order, numbered as APBS numbers them
    sections = sorted(plan.calculations + plan.apolars, key=lambda c: c.block.line)
    try:
        for calc in sections:
            if isinstance(calc, ApolarCalculation):
                number += 1
                outcome = run_apolar(calc)
                emit(*report.apolar_lines(calc, number, outcome))
                result.apolars.append(outcome)
                continue
            if calc.writes and staging is None:
                outdir.mkdir(parents=True, exist_ok=True)
                staging = Path(tempfile.mkdtemp(prefix=".pbsolver-apbs-", dir=outdir))
            if calc.focus_from is None:
                chain = None  # nothing focuses from it: free its grids first
            try:
                key = (calc.molecule, calc.physics.eps_in, calc.equation)
                if key not in pairs:
                    pairs[key] = pair_terms(calc.atoms, calc.physics.eps_in, calc.equation)
                res, chain = _run_one(calc, emit, backend, maps_backend, method, dtype, staging,
                                      chain, number, pairs[key])  # fmt: skip
            except InputError as exc:  # e.g. a charge on a node in the solvent: say which block
                label = calc.block.label
                raise InputError(f"{inp.source}:{calc.block.line}: {label}: {exc}") from exc
            number += len(calc.grids)
            result.calculations.append(res)
        emit(report.RULE, "PRINT STATEMENTS")
        for stmt in inp.prints:
            lines, printed = _print(stmt, plan, result)
            emit(*lines)
            result.prints.append(printed)
        if staging is not None:
            result.written = _publish(staging, plan.calculations)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    emit(report.RULE, f"pbsolver: done in {time.perf_counter() - t_start:.2f} s")
    result.text = "\n".join(emit.lines) + "\n"
    return result


def _run_one(calc, emit, backend, maps_backend, method, dtype, staging, chain, number, pairs):
    """Solve one calculation on its grids, print its lines, stage its writes.

    ``chain`` holds the focusing levels of the calculation before (``bcfl focus`` continues
    them), ``pairs`` the atoms' Coulomb terms (:func:`~pbsolver.apbs.energy.pair_terms`);
    returns the result and this calculation's chain of levels (None without solves).
    """
    from pbsolver.molecule.focusing import FocusLevel, solve_focused
    from pbsolver.molecule.maps import coulomb_potential
    from pbsolver.solving.solver import Solver

    t0 = time.perf_counter()
    atoms = calc.atoms
    own = len(calc.grids)
    levels = None
    ion_rows = np.zeros((own, 2))  # npbe: (mobile, osmotic) of each grid
    # a homogeneous medium without salt reads φ_c only on the grids' outer layers
    ph = calc.physics
    coulomb = "outer" if ph.eps_in == ph.eps_out and not ph.has_salt else "full"
    if calc.force != "no":
        coulomb = "full"  # the forces' sensitivities read φ_c at every node
    solver = None
    if calc.homogeneous:
        rf_rows = np.zeros((own, len(atoms)))
    else:
        from pbsolver.backends import get_backend

        solver = Solver(method=method, backend=backend, rtol=calc.rtol, dtype=dtype, strict=True)
        # the maps where the solves run unless told (resolved here: an input without a solve
        # loads no backend)
        solves_on = get_backend(backend).name
        if maps_backend in (None, "auto"):
            maps_backend = solves_on
        # maps built where the solves run stay there (no copy to the host and back); the forces
        # take host maps
        on_device = calc.force == "no" and maps_backend == solves_on
        start = []
        todo = [plan.grid for plan in calc.grids]
        if calc.focus_from is not None:
            start = list(chain)
        elif calc.grids[0].boundary == "zero":  # APBS' zero total potential: not a physics kind
            problem, _ = model.build_problem(calc, calc.grids[0], maps_backend=maps_backend)
            start = [FocusLevel(todo.pop(0), problem, solver.solve(problem))]
        levels = solve_focused(atoms, start + todo, physics=calc.physics, solver=solver,
                               maps_backend=maps_backend, coulomb=coulomb,
                               on_device=on_device)  # fmt: skip
        rf_rows = level_rf_terms(atoms, levels)[-own:]
        if calc.physics.nonlinear and calc.physics.has_salt:
            ion_rows = level_ion_terms(levels)[-own:]
    solves = [] if levels is None else [lv.result for lv in levels[-own:]]
    energies = []
    for k, plan in enumerate(calc.grids):
        emit(*report.calculation_lines(calc, plan, number + k + 1, first=k == 0))
        per_atom = pairs + rf_rows[k]
        energies.append(float(per_atom.sum() + ion_rows[k].sum()))
        if calc.energy != "no":
            emit(*report.energy_lines(calc, energies[-1], per_atom))
        emit(report.solve_line(solves[k] if solves else None))
    forces = None
    if calc.force != "no":
        forces = elec_forces(calc, levels, solver)
        emit(*report.force_lines(calc, forces))
    finest = levels[-1] if levels is not None else None
    grid = calc.grid.grid
    # (copied to the host only for a write of the potential)
    pot_writes = finest is not None and any(w.kind == "pot" for w, _ in calc.writes)
    phi_rf = to_numpy(finest.result.phi_rf) if pot_writes else None
    for w, target in calc.writes:
        if w.kind == "pot":
            phi_c = (
                to_numpy(finest.problem.phi_coulomb)
                if finest is not None and coulomb == "full"
                else coulomb_potential(atoms, grid, calc.physics.eps_in)
            )
            values = _finite_total(phi_c, phi_rf)
        elif w.kind == "kappa":
            values = _accessibility(None if finest is None else finest.problem, calc, grid)
        else:
            axis = "xyz".index(w.kind[-1])
            values = (
                to_numpy(finest.problem.epsilon_faces[axis])
                if finest is not None
                else np.full(grid.shape, calc.physics.eps_in)
            )
        _stage(staging, target, values, grid, w.kind == "pot", calc.physics.temperature)
    seconds = time.perf_counter() - t0
    rf = float(rf_rows[-1].sum())
    emit("  " + report.calculation_time_line(calc, rf, float(pairs.sum()), seconds))
    if calc.physics.nonlinear and calc.physics.has_salt:
        emit("  " + report.ion_terms_line(calc, *ion_rows[-1]))
    result = CalculationResult(
        index=calc.index,
        name=calc.name,
        energy=None if calc.energy == "no" else energies[-1],
        reaction_field=rf,
        coulomb=float(pairs.sum()),
        atom_energies=per_atom,
        grid=grid,
        solve=solves[-1] if solves else None,
        seconds=seconds,
        notes=list(calc.notes),
        level_energies=energies if calc.energy != "no" else [],
        grids=[plan.grid for plan in calc.grids],
        solves=solves,
        mobile=float(ion_rows[-1, 0]),
        osmotic=float(ion_rows[-1, 1]),
        forces=forces,
    )
    return result, levels


def elec_forces(calc, levels, solver) -> dict:
    """APBS' force terms of a calculation on its finest grid, kJ mol⁻¹ Å⁻¹, (n, 3) each.

    "qf": the fixed charges' field (the Coulomb pairs in pdie, none for ``lrpbe``, and the
    reaction-field terms of :func:`pbsolver.forces.solvation_forces`: charge, φ_c and boundary
    values); "db": the dielectric boundary; "ib": the ionic boundary. With ``levels`` None
    (φ_rf ≡ 0, no solve) only the Coulomb pairs. The boundary values of a focusing level or of
    APBS' ``bcfl zero`` are held fixed.
    """
    from pbsolver.forces import solvation_forces
    from pbsolver.molecule.energy import coulomb_forces

    atoms = calc.atoms
    zero = np.zeros((len(atoms), 3))
    qf = zero if calc.equation == "lrpbe" else coulomb_forces(atoms, calc.physics.eps_in)
    out = {"qf": qf, "ib": zero, "db": zero}
    if levels is None:
        return out
    finest = levels[-1]
    problem = finest.problem
    if problem.kappa2 is None and calc.physics.has_salt:
        # no ion-accessible node on this grid (a Problem drops an all-zero κ̄² map): the map is
        # zero for nearby positions too, so its term is zero; the forces want the map itself
        problem = copy.copy(problem)
        problem.kappa2 = problem.xp.zeros(problem.grid.shape)
    f = solvation_forces(atoms, problem, finest.result.phi_rf, physics=calc.physics,
                         solver=solver, fixed_boundary=calc.fixed_boundary)  # fmt: skip
    parts = {k: to_numpy(v) for k, v in f.parts.items()}
    out["qf"] = qf + parts["charge"] + parts["coulomb"] + parts["boundary"]
    out["ib"], out["db"] = parts["ionic"], parts["dielectric"]
    return out


def _print(stmt, plan, result):
    """The lines of one PRINT statement and its :class:`PrintResult`."""
    apolar = stmt.what.startswith("apol")
    calcs = plan.apolars if apolar else plan.calculations
    done = result.apolars if apolar else result.calculations
    if stmt.what.endswith("Energy"):
        value = sum(t.sign * done[t.calc - 1].energy for t in stmt.terms)
        if apolar:
            lines = report.print_apolar_energy_lines(stmt, calcs, value)
        else:
            lines = report.print_lines(stmt, calcs, value)
        return lines, PrintResult(_echo_line(lines), value, stmt.line, stmt.what)
    names = report.APOLAR_TERMS if apolar else report.ELEC_TERMS
    summed = {k: sum(t.sign * done[t.calc - 1].forces[k] for t in stmt.terms) for k in names}
    mode = calcs[stmt.terms[0].calc - 1].force
    lines = report.print_force_lines(stmt, calcs, summed, mode)
    return lines, PrintResult(_echo_line(lines), None, stmt.line, stmt.what, summed)


def _echo_line(lines) -> str:
    """APBS' echo of a PRINT statement (``print energy 1 (solv) - 2 (ref) end``)."""
    return next(line for line in lines if line.startswith("print "))


def _finite_total(phi_c, phi_rf) -> np.ndarray:
    """φ_c + φ_rf with nodes on a point charge (infinite φ_c) set to their neighbours' mean."""
    total = np.array(phi_c, dtype=np.float64)
    if phi_rf is not None:
        total += phi_rf
    bad = ~np.isfinite(total)
    if bad.any():
        padded = np.pad(np.where(bad, 0.0, total), 1)
        ok = np.pad((~bad).astype(float), 1)
        s = np.zeros_like(total)
        c = np.zeros_like(total)
        for axis in range(3):
            for shift in (-1, 1):
                s += np.roll(padded, shift, axis)[1:-1, 1:-1, 1:-1]
                c += np.roll(ok, shift, axis)[1:-1, 1:-1, 1:-1]
        if np.any(c[bad] == 0):
            raise InputError("write pot: point charges on neighbouring nodes; move the grid")
        total[bad] = s[bad] / c[bad]
    return total


def _accessibility(maps, calc, grid) -> np.ndarray:
    """APBS' kappa map: the ion-accessible fraction (0 everywhere without salt)."""
    if maps is None or maps.kappa2 is None:
        return np.zeros(grid.shape)
    return to_numpy(maps.kappa2) / calc.physics.kappa2


def _stage(staging, target, values, grid, potential, temperature):
    """Write one map under ``staging`` (published by :func:`_publish` when all has run)."""
    from pbsolver.io.dx import write_dx

    staged = staging / f"{len(list(staging.iterdir())):04d}-{target.name}"
    write_dx(staged, values, grid, potential=potential, temperature=temperature)


def _publish(staging, calcs) -> list:
    """Move the staged files to their names (in the order written)."""
    targets = [t for c in calcs for _, t in c.writes]
    staged = sorted(staging.iterdir())
    written = []
    for src, target in zip(staged, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(src, target)
        written.append(target)
    return written


__all__ = ["ApbsRun", "CalculationResult", "PrintResult", "elec_forces", "run"]
