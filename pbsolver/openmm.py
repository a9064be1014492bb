"""The Poisson–Boltzmann reaction field as an OpenMM force.

:class:`ReactionFieldForce` wraps a :class:`~pbsolver.ReactionFieldCalculator` in an
``openmm.PythonForce`` (in recent OpenMM releases; tested with 8.6.1): at every force
evaluation OpenMM hands it a ``State``; it reads the positions (nm → Å), calls
:meth:`~pbsolver.ReactionFieldCalculator.compute` and returns the polar solvation energy
(kJ/mol) and the forces (kJ mol⁻¹ Å⁻¹ → kJ mol⁻¹ nm⁻¹).
Used as the implicit solvent of an MD run, it replaces a generalized-Born force: add it to a
``System`` that has the force field's bonded and nonbonded (vacuum, ε_in) terms and no other
implicit-solvent force.

    import openmm.app as app
    from pbsolver.openmm import ReactionFieldForce

    system = forcefield.createSystem(topology, nonbondedMethod=app.NoCutoff)
    rf = ReactionFieldForce.from_system(system, topology, positions, spacing=0.5,
                                        eps_in=1.0, surface="svdw", skin=4.0)
    system.addForce(rf.openmm_force())
    simulation = app.Simulation(topology, system, integrator)   # any platform

Where the energy is smooth
--------------------------
The energy is a function of the positions only while the grid holds still: the calculator's
following grid is kept until an atomic sphere comes within ``margin`` Å of its outer layer, and
is then shifted by whole nodes, which changes the discretisation (a small jump of the energy).
The forces are the exact gradient of the energy where the calculator computes them so
(``forces="auto"`` on the smooth vdW surface ``surface="svdw"``, ``forces="exact"`` also on
"vdw", "mol" and "smol", whose energies have kinks; :mod:`pbsolver.forces`); elsewhere they are
−q∇φ_rf, and an MD run with them does not conserve energy. :meth:`ReactionFieldForce.from_system`
samples φ_rf at the atoms by cubic convolution (``interpolation="cubic"``, C¹ in the positions)
unless told otherwise: the trilinear sampling's slope jumps each time an atom crosses a plane of
grid nodes, and the work an integrator does then misses the energy change
(``benchmarks/work_energy_path.py``; BENCHMARKS.md).
Give a ``skin`` that covers the motion of the run (``regrids`` counts the moves), or a periodic
``box``, whose grid never moves. The forces are the calculator's (see its *What a frame returns*).

The force runs on the host between OpenMM's own kernels, so it works with every platform
(Reference, CPU, CUDA, OpenCL); on CUDA the calculator may use the GPU too. The Python function
is not picklable (it holds the calculator): a ``System`` with this force cannot be serialised
with ``XmlSerializer``.
"""

from __future__ import annotations

import numpy as np

from pbsolver.exceptions import ConvergenceError, InputError

#: Å per nm.
ANGSTROM_PER_NM = 10.0


class ReactionFieldForce:
    """The reaction field of a :class:`~pbsolver.ReactionFieldCalculator` for OpenMM.

    Parameters
    ----------
    calculator : ReactionFieldCalculator
        Built for the system's atoms (same order), with ``units="kJ/mol"``.
    strict : bool
        Raise :class:`~pbsolver.ConvergenceError` when a frame's solve does not converge (an
        MD step must not go on with a wrong force).

    Attributes
    ----------
    evaluations, regrids : int
        Force evaluations so far, and how many of them moved the grid.
    last : FrameResult or None
        The latest frame's result.
    """

    def __init__(self, calculator, *, strict: bool = True):
        from pbsolver.md.calculator import ReactionFieldCalculator

        if not isinstance(calculator, ReactionFieldCalculator):
            raise InputError(
                f"calculator must be a pbsolver.ReactionFieldCalculator, got "
                f"{type(calculator).__name__}"
            )
        if calculator.units != "kJ/mol":
            raise InputError("the calculator of an OpenMM force must use units='kJ/mol'")
        self.calculator = calculator
        self.strict = bool(strict)
        self.evaluations = 0
        self.regrids = 0
        self.last = None

    @classmethod
    def from_system(cls, system, topology, positions, *, radii="bondi", strict=True, **options):
        """A force for an OpenMM ``System``: charges from its ``NonbondedForce``.

        Parameters
        ----------
        system : openmm.System
        topology : openmm.app.Topology
            For the elements (``radii="bondi"``) and names.
        positions : Quantity or array (n, 3)
            The starting positions (a plain array is in nm); they place the grid.
        radii : {"bondi", "sigma"} or array_like
            Atomic radii (see :meth:`pbsolver.Atoms.from_openmm`).
        strict : bool
            See the class.
        **options
            Options of :class:`~pbsolver.ReactionFieldCalculator` (``spacing``, ``eps_in``,
            ``eps_out``, ``ionic_strength``, ``surface``, ``margin``, ``skin``, ``box``,
            ``backend``, ``rtol``...); ``interpolation`` defaults to "cubic" here (module
            docstring).
        """
        from pbsolver.md.calculator import ReactionFieldCalculator
        from pbsolver.molecule.atoms import Atoms

        if "units" in options and options["units"] != "kJ/mol":
            raise InputError("an OpenMM force works in kJ/mol: leave units at its default")
        atoms = Atoms.from_openmm(system, positions, topology, radii=radii)
        options = {"interpolation": "cubic", **options}
        return cls(ReactionFieldCalculator(atoms, **options), strict=strict)

    def __call__(self, state):
        """Energy (kJ/mol) and forces ((n, 3) kJ mol⁻¹ nm⁻¹) of an OpenMM ``State``."""
        import openmm.unit as u

        pos = state.getPositions(asNumpy=True).value_in_unit(u.nanometer) * ANGSTROM_PER_NM
        box = None
        if self.calculator.box is not None:
            vectors = state.getPeriodicBoxVectors(asNumpy=True).value_in_unit(u.nanometer)
            vectors = np.asarray(vectors, dtype=np.float64) * ANGSTROM_PER_NM
            if np.any(np.abs(vectors - np.diag(np.diag(vectors))) > 1e-9):
                raise InputError("the reaction-field force needs a rectangular periodic box")
            box = np.diag(vectors)
        frame = self.calculator.compute(np.asarray(pos, dtype=np.float64), box=box)
        self.evaluations += 1
        self.regrids += int(bool(frame.regridded)) if self.evaluations > 1 else 0
        self.last = frame
        if self.strict and not frame.converged:
            raise ConvergenceError(
                f"the reaction-field solve did not converge at force evaluation "
                f"{self.evaluations} ({frame.iterations} iterations)"
            )
        forces = np.asarray(frame.forces, dtype=np.float64) * ANGSTROM_PER_NM  # /Å → /nm
        return float(frame.energy), forces

    def openmm_force(self):
        """The ``openmm.PythonForce`` to add to the ``System`` (periodic with a box)."""
        try:
            from openmm import PythonForce
        except ImportError as exc:  # an OpenMM without it, or none
            raise InputError(
                "openmm.PythonForce is missing: the reaction-field force needs an OpenMM that "
                "has it (8.6.1 does: pip install -U openmm)"
            ) from exc
        force = PythonForce(self)
        force.setName("pbsolver reaction field")
        force.setUsesPeriodicBoundaryConditions(self.calculator.box is not None)
        return force

    def __repr__(self) -> str:
        return (
            f"ReactionFieldForce({len(self.calculator.atoms)} atoms, "
            f"{self.evaluations} evaluations, {self.regrids} regrids)"
        )


__all__ = ["ANGSTROM_PER_NM", "ReactionFieldForce"]
