"""Reaction-field energies and forces along a trajectory, as an MDAnalysis analysis.

:class:`ReactionFieldAnalysis` follows MDAnalysis' ``AnalysisBase`` protocol (``_prepare``,
``_single_frame``, ``_conclude``; ``run(start, stop, step)``), and hands the frames to
:meth:`pbsolver.ReactionFieldCalculator.compute_batch` ``batch`` at a time, so that on a GPU
the stacked engine solves them together.

    import MDAnalysis as mda
    from pbsolver.mdanalysis import ReactionFieldAnalysis

    u = mda.Universe("peptide.pqr", "peptide.dcd")
    rf = ReactionFieldAnalysis(u.atoms, spacing=0.5, surface="vdw").run()
    rf.results.energies        # (n_frames,) kJ/mol
    rf.results.forces          # (n_frames, n_atoms, 3) kJ mol⁻¹ Å⁻¹

Charges and radii come from the topology (a PQR carries both) or from ``charges=`` and
``radii=`` (see :meth:`pbsolver.Atoms.from_mdanalysis`).
"""

from __future__ import annotations

import numpy as np
from MDAnalysis.analysis.base import AnalysisBase

from pbsolver.exceptions import InputError


class ReactionFieldAnalysis(AnalysisBase):
    """Polar solvation energy, forces and potentials of an AtomGroup on every frame.

    Parameters
    ----------
    atomgroup : MDAnalysis.AtomGroup
        The solute (its atoms in this order in the results).
    charges, radii : array_like or str, optional
        As :meth:`pbsolver.Atoms.from_mdanalysis` (default: the topology's).
    batch : int
        Frames a :meth:`~pbsolver.ReactionFieldCalculator.compute_batch` call.
    forces : bool
        Keep each frame's forces (``n_frames × n_atoms × 3`` floats).
    verbose : bool
        MDAnalysis' progress bar.
    **options
        Options of :class:`~pbsolver.ReactionFieldCalculator` (``spacing``, ``eps_in``,
        ``surface``, ``ionic_strength``, ``backend``, ``rtol``, ``box``...).

    Attributes
    ----------
    results.energies : ndarray (n_frames,)
        ½ Σ q φ_rf, kJ/mol (or the calculator's ``units``).
    results.forces : ndarray (n_frames, n_atoms, 3) or None
        The calculator's forces, kJ mol⁻¹ Å⁻¹.
    results.potentials : ndarray (n_frames, n_atoms)
        φ_rf at the atoms, kJ mol⁻¹ e⁻¹.
    results.iterations, results.converged : ndarray (n_frames,)
        Each frame's solve.
    calculator : ReactionFieldCalculator
        The calculator, made in ``_prepare``.
    """

    _analysis_algorithm_is_parallelizable = False

    def __init__(self, atomgroup, *, charges=None, radii=None, batch=32, forces=True,
                 verbose=False, **options):  # fmt: skip
        super().__init__(atomgroup.universe.trajectory, verbose=verbose)
        if int(batch) < 1:
            raise InputError(f"batch must be a positive number of frames, got {batch!r}")
        self.atomgroup = atomgroup
        self._charges, self._radii = charges, radii
        self.batch = int(batch)
        self.keep_forces = bool(forces)
        self.options = options
        self.calculator = None

    def _prepare(self):
        from pbsolver.md.calculator import ReactionFieldCalculator
        from pbsolver.molecule.atoms import Atoms

        atoms = Atoms.from_mdanalysis(self.atomgroup, radii=self._radii, charges=self._charges)
        self.calculator = ReactionFieldCalculator(atoms, **self.options)
        n, m = self.n_frames, len(atoms)
        self.results.energies = np.full(n, np.nan)
        self.results.potentials = np.full((n, m), np.nan)
        self.results.forces = np.full((n, m, 3), np.nan) if self.keep_forces else None
        self.results.iterations = np.zeros(n, dtype=np.int64)
        self.results.converged = np.zeros(n, dtype=bool)
        self._pending = []  # (result row, positions Å) not yet computed

    def _single_frame(self):
        self._pending.append((self._frame_index, self.atomgroup.positions.astype(np.float64)))
        if len(self._pending) == self.batch:
            self._flush()

    def _conclude(self):
        self._flush()

    def _flush(self):
        if not self._pending:
            return
        rows, frames = zip(*self._pending, strict=True)
        self._pending = []
        for row, res in zip(rows, self.calculator.compute_batch(list(frames)), strict=True):
            r = self.results
            r.energies[row] = res.energy
            r.potentials[row] = np.asarray(res.potentials)
            if r.forces is not None:
                r.forces[row] = np.asarray(res.forces)
            r.iterations[row] = res.iterations
            r.converged[row] = res.converged


__all__ = ["ReactionFieldAnalysis"]
