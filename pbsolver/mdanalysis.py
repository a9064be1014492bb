"""Reaction-field energies, forces and binding energies along a trajectory, as MDAnalysis analyses.

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

:class:`BindingEnergyAnalysis` is MM/PBSA on every frame (what ``pbsolver mmpbsa`` computes),
``batch`` frames a :func:`pbsolver.binding_energies` call:

    from pbsolver.mdanalysis import BindingEnergyAnalysis

    u = mda.Universe("fkbp_dss.pqr", "fkbp_dss.dcd")
    dg = BindingEnergyAnalysis(u.select_atoms("resname DSS"), spacing=0.5).run()
    dg.results.delta_total     # (n_frames,) kJ/mol
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


class BindingEnergyAnalysis(AnalysisBase):
    """Binding energy (MM/PBSA terms) of a ligand to a receptor on every frame.

    Each frame: the polar solvation energies of complex, receptor and ligand on one grid, the
    receptor–ligand Coulomb energy in ε_in and the nonpolar term
    (:func:`pbsolver.binding_energy`). Every frame's grid has the same node counts, the largest
    that any analysed frame needs (:func:`pbsolver.jobs.mmpbsa.frames_shape`), placed around that
    frame's complex: the numbers are those of ``pbsolver mmpbsa`` on the same frames.

    Parameters
    ----------
    ligand : MDAnalysis.AtomGroup
        The ligand's atoms.
    receptor : MDAnalysis.AtomGroup, optional
        The receptor's atoms (default: every atom of the Universe not in ``ligand``).
    charges, radii : array_like or str, optional
        For every atom of the Universe, as :meth:`pbsolver.Atoms.from_mdanalysis`. Default: the
        topology's; for a PQR topology the file's own values
        (:func:`pbsolver.jobs.mmpbsa.charges_and_radii`).
    batch : int
        Frames a :func:`pbsolver.binding_energies` call.
    per_residue : bool
        Keep each frame's per-residue decomposition.
    shape : 3 ints, optional
        Node counts of every frame's grid (default: as above).
    verbose : bool
        MDAnalysis' progress bar.
    **options
        Keywords of :func:`pbsolver.binding_energies`: ``spacing`` (0.5 Å), ``margin`` (8 Å),
        physics fields (``eps_in``, ``surface``, ``ionic_strength``...), ``nonpolar``, ``gamma``,
        ``offset``, ``solver``, ``backend``.

    Attributes
    ----------
    results.delta_total, results.delta_polar, results.delta_coulomb, results.delta_nonpolar
        ndarray (n_frames,), kJ/mol.
    results.polar_complex, results.polar_receptor, results.polar_ligand
        ndarray (n_frames,): each species' polar solvation energy, kJ/mol.
    results.delta_sasa : ndarray (n_frames,)
        Å² (NaN with ``nonpolar=False``).
    results.per_residue : ndarray (n_frames, n_residues) or None
        kJ/mol; its rows sum to ``delta_total``.
    results.residues : dict or None
        ``resname``, ``resid`` and ``part`` ("receptor"/"ligand") of the columns of
        ``per_residue``.
    shape : tuple of 3 ints
        The grid's node counts, set in ``_prepare``.
    """

    _analysis_algorithm_is_parallelizable = False

    def __init__(self, ligand, receptor=None, *, charges=None, radii=None, batch=16,
                 per_residue=False, shape=None, verbose=False, **options):  # fmt: skip
        super().__init__(ligand.universe.trajectory, verbose=verbose)
        if isinstance(batch, bool) or int(batch) < 1:
            raise InputError(f"batch must be a positive number of frames, got {batch!r}")
        if receptor is not None and receptor.universe is not ligand.universe:
            raise InputError("receptor and ligand must belong to the same Universe")
        self.universe = ligand.universe
        self.ligand_group, self.receptor_group = ligand, receptor
        self._charges, self._radii = charges, radii
        self.batch = int(batch)
        self.options = {**options}
        if per_residue:
            self.options["decompose"] = "residue"
        self.shape = None if shape is None else tuple(int(s) for s in shape)

    def _prepare(self):
        from pbsolver.jobs.mmpbsa import charges_and_radii, frames_shape
        from pbsolver.molecule.atoms import Atoms

        u = self.universe
        charges, radii = self._charges, self._radii
        if charges is None and radii is None:
            charges, radii = charges_and_radii(u, getattr(u, "filename", None))
        self._atoms = Atoms.from_mdanalysis(u.atoms, radii=radii, charges=charges)
        self._ligand = np.sort(self.ligand_group.indices)
        if self.receptor_group is None:
            self._receptor = np.setdiff1d(np.arange(u.atoms.n_atoms), self._ligand)
        else:
            self._receptor = np.sort(self.receptor_group.indices)
        if self.shape is None:
            union = np.union1d(self._ligand, self._receptor)
            positions = (u.atoms.positions.astype(np.float64) for _ in self._sliced_trajectory)
            self.shape = frames_shape(
                self._atoms, positions, union, self.options.get("spacing", 0.5),
                self.options.get("margin", 8.0),
            )  # fmt: skip
        self._pending = []  # (frame index, time ps, positions Å) not yet computed
        self._records = []

    def _single_frame(self):
        self._pending.append(
            (self._ts.frame, self._ts.time, self.universe.atoms.positions.astype(np.float64))
        )
        if len(self._pending) == self.batch:
            self._flush()

    def _conclude(self):
        from pbsolver.jobs.mmpbsa import COLUMNS

        self._flush()
        r = self.results
        names = [c for c in COLUMNS if c not in ("frame", "time")]
        if not self._records:
            for name in names:
                r[name] = np.zeros(0)
            r.per_residue = r.residues = None
            return
        for name in names:  # in the order analysed
            r[name] = np.concatenate([rec[name] for rec in self._records])
        decomposed = "per_residue" in self._records[0]
        r.per_residue = (
            np.concatenate([rec["per_residue"] for rec in self._records]) if decomposed else None
        )
        r.residues = self._records[0]["residues"] if decomposed else None

    def _flush(self):
        from pbsolver.jobs.mmpbsa import records
        from pbsolver.molecule.binding import binding_energies

        if not self._pending:
            return
        frames, times, positions = zip(*self._pending, strict=True)
        self._pending = []
        results = binding_energies(
            self._atoms, np.stack(positions), self._ligand, self._receptor, shape=self.shape,
            **self.options,
        )  # fmt: skip
        self._records.append(records(frames, times, results))


__all__ = ["BindingEnergyAnalysis", "ReactionFieldAnalysis"]
