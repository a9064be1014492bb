"""Binding free energies on one grid: ΔG = G(complex) − G(receptor) − G(ligand).

**Polar term.** The reaction-field (polar solvation) energy G_rf = ½ Σᵢ qᵢ φ_rf(rᵢ)
(:mod:`pbsolver.molecule.energy`) of the complex, of the receptor alone and of the ligand alone,
each with its own dielectric boundary and ion-accessible region (the single-trajectory MM/PBSA
convention: the parts keep their bound geometry). The three problems share ONE grid, placed
around the complex, so that the discretisation of each atom's neighbourhood is the same in the
three solves and its error largely cancels in ΔG_polar = G_rf(complex) − G_rf(receptor) −
G_rf(ligand); they are solved together by :func:`pbsolver.solve_batch` (stacked on CUDA).

**Engines.** ``engine="general"`` builds every species' maps with
:func:`pbsolver.molecule.maps.build_maps` and solves them with :func:`pbsolver.solve_batch`.
``engine="stacked"`` runs three :class:`pbsolver.md.engine.StackedFrames` (complex, receptor,
ligand: each its own charges and radii, the same grid shape and spacing, each frame's origin
the complex's grid's), which map, assemble and solve all the frames of a chunk with batched
kernels and sample φ_rf at the atoms with the same trilinear interpolation as
:func:`pbsolver.molecule.energy.reaction_field_terms`; the edge fractions are those of the
general path, so the energies agree to the solver's tolerance. It handles the linearised
equation on surfaces "vdw", "mol" and "smol" with boundary kinds "mdh" and "zero", solved by
SOR or multigrid. ``"auto"`` takes it where the backend stacks batches (CUDA) and the set-up is
one it handles, the general path otherwise.

**Coulomb term.** The receptor–ligand interaction in the uniform solute medium ε_in,
Σ_{i∈R, j∈L} k qᵢ qⱼ / (ε_in rᵢⱼ): :func:`pbsolver.molecule.energy.coulomb_interaction` of
the two parts, which equals :func:`~pbsolver.molecule.energy.coulomb_energy` of the complex
minus those of the two parts (each pair split evenly between its two atoms). ΔG_polar +
ΔG_coulomb is the electrostatic binding energy (APBS's ``calcenergy total`` of the three
calculations, subtracted).

**Nonpolar term.** Each species' γ·SASA + b (:mod:`pbsolver.molecule.nonpolar`: Shrake–Rupley
SASA, probe 1.4 Å, and by default γ = 0.00542 kcal mol⁻¹ Å⁻², b = 0.92 kcal/mol of Sitkoff,
Sharp & Honig 1994, the values of :func:`pbsolver.nonpolar_energy`). Subtracted like the other
terms this gives ΔG_nonpolar = γ·ΔSASA − b (b once for the complex, twice removed for the
parts: what Amber's MMPBSA.py and gmx_MMPBSA report for their ``cavity_offset``). APBS's
apolar model has no b: ``offset=0`` with ``gamma`` in kJ mol⁻¹ Å⁻² (APBS ``gamma``) and
``sasa_probe`` (APBS ``srad``) gives its γ·A term; its ``press`` (volume) and ``bconc``
(dispersion) terms are not computed.

**Decomposition** (``decompose="atom"`` or ``"residue"``) splits the total over the atoms
exactly (the sums equal ``total`` to rounding):

* polar: atom i of the complex carries ½ qᵢ (φ_rf,complex(rᵢ) − φ_rf,alone(rᵢ)), φ_rf,alone the
  reaction field of the part (receptor or ligand) it belongs to;
* Coulomb: each receptor–ligand pair's k qᵢ qⱼ / (ε_in rᵢⱼ), half to each of its two atoms;
* nonpolar: γ·(SASAᵢ,complex − SASAᵢ,alone), plus −b/n on each of the n atoms of the complex
  (b belongs to no atom; spread evenly so the sums stay exact; ``offset=0`` leaves it out).

Residues are the (resname, resid) groups of the receptor atoms, then those of the ligand atoms,
each part's residues in order of first appearance: a ligand residue never merges with a
receptor residue of the same label.

Energies in kJ/mol, areas in Å², lengths in Å, charges in e. The linearised equation's energies
decompose; with ``nonlinear=True`` (solved one problem at a time, Newton) the totals include the
mobile ions' terms (:func:`pbsolver.molecule.energy.solvation_terms`), which belong to no atom,
so decomposition is refused there.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from pbsolver.arrays import to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.molecule.energy import coulomb_interaction, reaction_field_terms, solvation_terms
from pbsolver.molecule.maps import build_maps, grid_for_atoms
from pbsolver.molecule.nonpolar import GAMMA, N_POINTS, OFFSET, PROBE, sasa_parts
from pbsolver.options import PhysicsOptions, choice

#: Accepted values of ``decompose``.
DECOMPOSE = (None, "atom", "residue")
#: The three species of a binding energy, in the order they are solved.
SPECIES = ("complex", "receptor", "ligand")
#: Accepted values of ``engine``.
ENGINES = ("auto", "general", "stacked")
#: Default bound on the grid nodes of one :func:`pbsolver.solve_batch` call of
#: :func:`binding_energies` (three problems a frame; about 50 bytes a node of maps on the host).
CHUNK_NODES = 1 << 24
#: Most frames of a stacked chunk by default (each of the three engines stacks that many).
STACKED_CHUNK_FRAMES = 32


@dataclass(frozen=True, eq=False)
class BindingEnergy:
    """A binding free energy and its terms (kJ/mol): what :func:`binding_energy` returns.

    Attributes
    ----------
    polar : dict
        ``{"complex": G_rf, "receptor": G_rf, "ligand": G_rf}``, the polar solvation energies of
        the three species on the shared grid, kJ/mol.
    delta_polar : float
        G_rf(complex) − G_rf(receptor) − G_rf(ligand), kJ/mol.
    delta_coulomb : float
        Receptor–ligand Coulomb energy in ε_in, kJ/mol.
    delta_nonpolar : float
        γ·ΔSASA − b (each species γ·SASA + b, subtracted), kJ/mol; 0 with ``nonpolar=False``.
    total : float
        ``delta_polar + delta_coulomb + delta_nonpolar``, kJ/mol.
    per_atom : ndarray (n,) or None
        Each atom's share of ``total`` (module docstring), kJ/mol, for every atom of
        ``complex_atoms`` (0 for atoms in neither selection); sums to ``total``.
    per_residue : list of (str, int, float) or None
        ``(resname, resid, energy)`` rows, receptor residues then ligand residues; the
        energies sum to ``total``.
    grid : Grid
        The grid of the three solves.
    delta_sasa : float or None
        SASA(complex) − SASA(receptor) − SASA(ligand), Å² (None with ``nonpolar=False``).
    per_atom_terms : dict or None
        With a decomposition: ``{"polar", "coulomb", "nonpolar"}`` arrays (n,), kJ/mol, whose
        sum is ``per_atom``.
    residue_parts : tuple of str or None
        "receptor" or "ligand" for each row of ``per_residue``.
    solves : tuple of dict
        The complex's, receptor's and ligand's solves: ``converged``, ``iterations``,
        ``residual``, ``method``, ``backend``, ``seconds`` (φ_rf is not kept: a trajectory's
        fields would not fit in memory).
    """

    polar: dict
    delta_polar: float
    delta_coulomb: float
    delta_nonpolar: float
    total: float
    per_atom: np.ndarray | None
    per_residue: list | None
    grid: Grid
    delta_sasa: float | None = None
    per_atom_terms: dict | None = None
    residue_parts: tuple | None = None
    solves: tuple = field(default=(), repr=False)

    @property
    def delta_electrostatic(self) -> float:
        """``delta_polar + delta_coulomb``, kJ/mol."""
        return self.delta_polar + self.delta_coulomb

    def as_dict(self) -> dict:
        """Plain Python numbers, lists and dicts (JSON-ready), energies in kJ/mol."""
        out = {
            "units": "kJ/mol",
            "polar": {k: float(v) for k, v in self.polar.items()},
            "delta_polar": float(self.delta_polar),
            "delta_coulomb": float(self.delta_coulomb),
            "delta_nonpolar": float(self.delta_nonpolar),
            "total": float(self.total),
            "delta_sasa": None if self.delta_sasa is None else float(self.delta_sasa),
            "grid": {
                "shape": list(self.grid.shape),
                "spacing": list(self.grid.spacing),
                "origin": list(self.grid.origin),
            },
            "solves": [dict(s) for s in self.solves],
            "per_atom": None if self.per_atom is None else self.per_atom.tolist(),
            "per_residue": None,
        }
        if self.per_residue is not None:
            out["per_residue"] = [
                {"resname": name, "resid": rid, "part": part, "energy": e}
                for (name, rid, e), part in zip(self.per_residue, self.residue_parts, strict=True)
            ]
        return out


def binding_energy(
    complex_atoms,
    ligand,
    receptor=None,
    *,
    spacing=0.5,
    margin=8.0,
    grid=None,
    physics=None,
    nonpolar=True,
    gamma=None,
    offset=None,
    decompose=None,
    solver=None,
    backend="auto",
    sasa_probe=PROBE,
    n_points=N_POINTS,
    maps_backend="cpu",
    engine="auto",
    **physics_fields,
) -> BindingEnergy:
    """Binding free energy of ``ligand`` to ``receptor``: three polar solves on one grid.

    Parameters
    ----------
    complex_atoms : Atoms
        The complex (positions Å, charges e, radii Å; ``resnames``/``resids`` for a
        per-residue decomposition).
    ligand : array_like of bool (n,) or of int
        The ligand's atoms: a mask or indices into ``complex_atoms``.
    receptor : array_like of bool (n,) or of int, optional
        The receptor's atoms; default: every atom not in ``ligand``. Atoms in neither are left
        out of all three species (e.g. waters and ions of a trajectory).
    spacing, margin : float
        Grid spacing and least gap between the complex's atomic spheres and the grid's outer
        layer, Å (ignored with ``grid``).
    grid : Grid, optional
        The grid of the three solves (default: placed around the complex,
        :func:`pbsolver.molecule.maps.grid_for_atoms`).
    physics : PhysicsOptions, optional
        The physics; keywords of its fields (``eps_in``, ``eps_out``, ``ionic_strength``,
        ``surface``, ``probe_radius``, ``ion_radius``, ``temperature``, ``boundary_kind``,
        ``ions``, ``ion_valence``, ``nonlinear``) override it.
    nonpolar : bool
        Add the nonpolar term γ·ΔSASA − b.
    gamma : float, optional
        Surface tension, kJ mol⁻¹ Å⁻² (default :data:`pbsolver.molecule.nonpolar.GAMMA`).
    offset : float, optional
        The constant b of each species' γ·SASA + b, kJ/mol (default
        :data:`pbsolver.molecule.nonpolar.OFFSET`); ΔG_nonpolar carries −b.
    decompose : {None, "atom", "residue"}
        Fill ``per_atom`` ("atom"), or ``per_atom`` and ``per_residue`` ("residue").
    solver : Solver or dict, optional
        The solver (its options go to :func:`pbsolver.solve_batch`), or a dict of Solver
        options. Default: ``Solver(backend=backend, strict=True)`` (rtol 1e-6).
    backend : {"auto", "cpu", "cuda"}
        Where to solve when ``solver`` is not given.
    sasa_probe : float
        Probe radius of the SASA, Å (APBS ``srad``; the dielectric surface uses
        ``probe_radius``).
    n_points : int
        Points per atom sphere of the SASA.
    maps_backend : {"cpu", "cuda", "auto"}
        Where the general engine builds the maps (:func:`pbsolver.molecule.maps.build_maps`;
        the stacked engine maps on the solver's backend).
    engine : {"auto", "general", "stacked"}
        How the three species are mapped and solved (module docstring): ``"stacked"``, the
        batched frame engine (:class:`pbsolver.md.engine.StackedFrames`); ``"general"``,
        :func:`pbsolver.molecule.maps.build_maps` and :func:`pbsolver.solve_batch`;
        ``"auto"``: stacked where the backend stacks batches (CUDA) and the set-up allows it.
    **physics_fields
        Fields of :class:`~pbsolver.PhysicsOptions`.

    Returns
    -------
    BindingEnergy
        kJ/mol.

    Raises
    ------
    InputError
        Bad selections (empty, overlapping, out of range, repeated, not integers or booleans),
        ``decompose`` with ``nonlinear=True``, a residue decomposition without residue
        numbers, bad physics, atoms outside ``grid``, or ``engine="stacked"`` with a set-up it
        does not handle (the message names it).
    ConvergenceError
        A solve did not converge (with the default, strict, solver).

    Examples
    --------
    >>> import pbsolver as pb
    >>> pair = pb.Atoms([[0.0, 0.0, 0.0], [0.0, 0.0, 4.0]], [1.0, -1.0], [1.5, 1.5])
    >>> dg = pb.binding_energy(pair, ligand=[1], spacing=0.5, margin=4.0, backend="cpu",
    ...                        nonpolar=False)
    >>> dg.delta_coulomb < 0 < dg.delta_polar  # desolvation opposes the attraction
    True
    """
    options = _Options.make(
        complex_atoms, ligand, receptor, physics, physics_fields, nonpolar=nonpolar,
        gamma=gamma, offset=offset, decompose=decompose, solver=solver, backend=backend,
        sasa_probe=sasa_probe, n_points=n_points, maps_backend=maps_backend, engine=engine,
    )  # fmt: skip
    if grid is None:
        grid = grid_for_atoms(complex_atoms[options.union], spacing, margin)
    elif not isinstance(grid, Grid):
        raise InputError(f"grid must be a pbsolver.Grid, got {type(grid).__name__}")
    return _Frames(options, complex_atoms, grid).solve([complex_atoms], [grid])[0]


def binding_energies(
    complex_atoms, frames, ligand, receptor=None, *, shape=None, chunk=None, **options
) -> list[BindingEnergy]:
    """:func:`binding_energy` for every frame of a trajectory, on grids of one shape.

    Parameters
    ----------
    complex_atoms : Atoms
        Charges, radii and labels of the complex (its positions are not used).
    frames : array_like (n_frames, n, 3)
        Positions of the same atoms in each frame, Å.
    ligand, receptor
        As in :func:`binding_energy`.
    shape : 3 ints, optional
        Node counts of every frame's grid, each placed around its frame's complex (centre of
        its bounding box). Default: the largest counts that :func:`binding_energy` would
        place for any frame (so every frame keeps at least ``margin``).
    chunk : int, optional
        Frames per :func:`pbsolver.solve_batch` call (three problems each; default: as many
        as keep the chunk's nodes under :data:`CHUNK_NODES`), or per run of the stacked
        engines (default: up to :data:`STACKED_CHUNK_FRAMES`, as many as half the free memory
        holds at :data:`pbsolver.md.engine.STACKED_BYTES_PER_NODE`; a chunk that does not fit
        is refused).
    **options
        Keywords of :func:`binding_energy` (``spacing``, ``margin``, ``physics``, ``grid``, a
        fixed grid for every frame instead of ``shape``, ``nonpolar``, ``gamma``, ``offset``,
        ``decompose``, ``solver``, ``backend``, ``engine``, physics fields, ...). The stacked
        engine's three engines are made once and serve every chunk.

    Returns
    -------
    list of BindingEnergy
        One per frame, in order.

    Raises
    ------
    InputError
        Frames of the wrong shape or not finite, a bad ``shape`` or ``chunk``, ``grid`` with
        ``shape``, and what :func:`binding_energy` raises.
    """
    from pbsolver.molecule.atoms import Atoms

    if not isinstance(complex_atoms, Atoms):
        raise InputError(f"complex_atoms must be a pbsolver.Atoms, got {type(complex_atoms)}")
    n = len(complex_atoms)
    try:
        pos = np.array(frames, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("frames must be an array of shape (n_frames, n_atoms, 3)") from None
    if pos.ndim == 2:
        pos = pos[None]
    if pos.ndim != 3 or pos.shape[1:] != (n, 3) or pos.shape[0] == 0:
        raise InputError(f"frames must have shape (n_frames, {n}, 3), got {pos.shape}")
    if not np.all(np.isfinite(pos)):
        bad = int(np.argmax(~np.isfinite(pos).all(axis=(1, 2))))
        raise InputError(f"frame {bad} has non-finite positions")
    spacing = options.pop("spacing", 0.5)
    margin = options.pop("margin", 8.0)
    grid = options.pop("grid", None)
    own = {name: options.pop(name) for name in list(options) if name in _OWN_DEFAULTS}
    own = {**_OWN_DEFAULTS, **own}
    physics = options.pop("physics", None)
    opts = _Options.make(complex_atoms, ligand, receptor, physics, options, **own)
    atoms = [complex_atoms.with_positions(np.ascontiguousarray(p)) for p in pos]
    parts = [a[opts.union] for a in atoms]
    if grid is not None:
        if shape is not None:
            raise InputError("give grid (one fixed grid) or shape (grids placed per frame)")
        if not isinstance(grid, Grid):
            raise InputError(f"grid must be a pbsolver.Grid, got {type(grid).__name__}")
        grids = [grid] * len(atoms)
    else:
        if shape is None:
            counts = np.array([grid_for_atoms(p, spacing, margin).shape for p in parts])
            shape = tuple(int(c) for c in counts.max(axis=0))
        else:
            shape = check_shape(shape)
        grids = [grid_for_atoms(p, spacing, shape=shape) for p in parts]
    if chunk is not None and (
        isinstance(chunk, bool) or not isinstance(chunk, int | np.integer) or chunk < 1
    ):
        raise InputError(f"chunk must be a positive integer, got {chunk!r}")
    frames_solver = _Frames(opts, complex_atoms, grids[0])
    if chunk is None:
        chunk = frames_solver.default_chunk()
    out = []
    for start in range(0, len(atoms), int(chunk)):
        stop = start + int(chunk)
        out.extend(frames_solver.solve(atoms[start:stop], grids[start:stop]))
    return out


# ---------------------------------------------------------------------- the computation
#: :func:`binding_energy`'s own keywords (beside placement and physics) and their defaults.
_OWN_DEFAULTS = {
    "nonpolar": True,
    "gamma": None,
    "offset": None,
    "decompose": None,
    "solver": None,
    "backend": "auto",
    "sasa_probe": PROBE,
    "n_points": N_POINTS,
    "maps_backend": "cpu",
    "engine": "auto",
}


@dataclass(frozen=True)
class _Options:
    """Checked selections and options shared by every frame."""

    n: int
    ligand: np.ndarray  # indices into the complex's atoms, sorted
    receptor: np.ndarray
    union: np.ndarray  # receptor ∪ ligand, sorted: the complex species' atoms
    physics: PhysicsOptions
    nonpolar: bool
    gamma: float
    offset: float
    decompose: str | None
    solver: dict
    sasa_probe: float
    n_points: int
    maps_backend: str
    engine: str  # "general" or "stacked", resolved

    @classmethod
    def make(cls, atoms, ligand, receptor, physics, fields, *, nonpolar, gamma, offset,
             decompose, solver, backend, sasa_probe, n_points, maps_backend,
             engine="auto"):  # fmt: skip
        from pbsolver.molecule.atoms import Atoms
        from pbsolver.solving.solver import Solver

        if not isinstance(atoms, Atoms):
            raise InputError(f"complex_atoms must be a pbsolver.Atoms, got {type(atoms).__name__}")
        n = len(atoms)
        lig = _selection(ligand, n, "ligand")
        if receptor is None:
            rec = np.setdiff1d(np.arange(n), lig)
            if rec.size == 0:
                raise InputError("the ligand selection holds every atom: the receptor is empty")
        else:
            rec = _selection(receptor, n, "receptor")
            both = np.intersect1d(lig, rec)
            if both.size:
                raise InputError(
                    f"receptor and ligand overlap in {both.size} atom(s), the first {int(both[0])}"
                )
        ph = PhysicsOptions.build(physics, **fields)
        if decompose not in DECOMPOSE:
            raise InputError(f"decompose must be one of {DECOMPOSE}, got {decompose!r}")
        if decompose is not None and ph.nonlinear and ph.has_salt:
            raise InputError(
                "decompose needs the linearised equation: the nonlinear energy's mobile-ion terms "
                "belong to no atom (use nonlinear=False, or decompose=None for the totals)"
            )
        if decompose == "residue" and atoms.resids is None:
            raise InputError(
                "decompose='residue' needs residue numbers (Atoms.resids): use decompose='atom'"
            )
        if not isinstance(nonpolar, bool | np.bool_):
            raise InputError(f"nonpolar must be True or False, got {nonpolar!r}")
        gamma = GAMMA if gamma is None else _finite(gamma, "gamma")
        offset = OFFSET if offset is None else _finite(offset, "offset")
        if solver is None:
            solver = Solver(backend=backend, strict=True)
        elif isinstance(solver, dict):
            solver = Solver(**{"backend": backend, "strict": True, **solver})
        elif not isinstance(solver, Solver):
            raise InputError(f"solver must be a pbsolver.Solver or a dict, got {type(solver)}")
        engine = _resolve_engine(engine, ph, solver)
        return cls(n, lig, rec, np.union1d(lig, rec), ph, bool(nonpolar), gamma, offset,
                   decompose, solver.options(), sasa_probe, n_points, maps_backend,
                   engine)  # fmt: skip

    def species(self, atoms) -> list:
        """The complex, receptor and ligand Atoms of one frame (:data:`SPECIES` order)."""
        return [atoms[i] for i in (self.union, self.receptor, self.ligand)]


def _resolve_engine(engine, physics: PhysicsOptions, solver) -> str:
    """The engine ("general" or "stacked") that ``engine`` means for this set-up.

    Raises InputError naming what the stacked engine does not handle when it is asked for by
    name.
    """
    from pbsolver.backends import get_backend
    from pbsolver.md.engine import STACKED_BOUNDARY_KINDS, STACKED_METHODS, STACKED_SURFACES

    if choice(engine, "engine", ENGINES) == "general":
        return "general"
    unsupported = []
    if physics.nonlinear:
        unsupported.append("nonlinear=True (it solves the linearised equation only)")
    if physics.surface not in STACKED_SURFACES:
        unsupported.append(f"surface={physics.surface!r} (it maps {STACKED_SURFACES})")
    if physics.boundary_kind not in STACKED_BOUNDARY_KINDS:
        unsupported.append(
            f"boundary_kind={physics.boundary_kind!r} (it computes {STACKED_BOUNDARY_KINDS})"
        )
    if solver.method not in STACKED_METHODS:
        unsupported.append(f"method={solver.method!r} (it solves with {STACKED_METHODS})")
    if engine == "stacked":
        if unsupported:
            raise InputError(
                "engine='stacked' cannot compute this binding energy: "
                + "; ".join(unsupported)
                + ". Use engine='general' (or 'auto')"
            )
        return "stacked"
    if unsupported:
        return "general"
    # the stacked engine pays off where batches run as one stack (CUDA); the CPU's general
    # path solves one problem after the other anyway
    return "stacked" if get_backend(solver.backend_name).STACKS_BATCHES else "general"


class _Frames:
    """The three species' solves of chunks of frames on grids of one shape, by either engine.

    The stacked engine's three :class:`~pbsolver.md.engine.StackedFrames` are made on the
    first chunk and kept for the next ones (their buffers too, per chunk size).
    """

    def __init__(self, opts: _Options, complex_atoms, grid: Grid):
        self.opts = opts
        self.size = grid.size
        self.engines = None
        if opts.engine == "stacked":
            self.engines = _stacked_engines(opts, complex_atoms, grid)
            self.device = self.engines[0].memory
            self.checked = set()  # chunk sizes whose buffers were found to fit

    def default_chunk(self) -> int:
        """Frames a chunk by default (see :func:`binding_energies`)."""
        if self.engines is None:
            return max(1, CHUNK_NODES // (3 * self.size))
        from pbsolver.resources import available_bytes

        free, _ = available_bytes(self.device)
        if free is None:
            return max(1, CHUNK_NODES // (3 * self.size))
        return int(min(STACKED_CHUNK_FRAMES, max(1, free // 2 // self.frame_bytes())))

    def frame_bytes(self) -> int:
        """Estimated bytes the three engines keep for one frame (their ``frame_bytes``)."""
        return sum(engine.frame_bytes() for engine in self.engines)

    def solve(self, frames, grids) -> list[BindingEnergy]:
        """The BindingEnergy of each frame (Atoms of the complex) on its grid."""
        if self.engines is None:
            return _solve_general(self.opts, frames, grids)
        nf = len(frames)
        if nf not in self.checked:  # the engines make buffers for each new chunk size
            from pbsolver.md.engine import STACKED_BYTES_PER_NODE
            from pbsolver.resources import check_bytes

            check_bytes(
                nf * self.frame_bytes(), f"binding energies of {nf} frame(s) on the stacked engine",
                device=self.device,
                hint="use a smaller chunk, a coarser spacing or engine='general'",
                detail=f"{STACKED_BYTES_PER_NODE} bytes a node × 3 species × {nf} frame(s) × "
                f"{self.size:,} nodes",
            )  # fmt: skip
            self.checked.add(nf)
        return _solve_stacked(self.opts, self.engines, frames, grids)


def _stacked_engines(opts: _Options, complex_atoms, grid: Grid) -> list:
    """Complex, receptor and ligand StackedFrames on ``grid``'s shape and spacing."""
    from pbsolver.backends import get_backend
    from pbsolver.md.engine import StackedFrames
    from pbsolver.solving.solver import Solver

    solver = Solver(**opts.solver)
    backend = get_backend(solver.backend_name)
    method = solver.method if solver.method in ("sor", "multigrid") else "auto"
    engines = []
    for idx in (opts.union, opts.receptor, opts.ligand):
        engines.append(
            StackedFrames(
                complex_atoms.charges[idx],
                complex_atoms.radii[idx],
                grid.shape,
                grid.spacing,
                solver,
                physics=opts.physics,
                method=method,
                backend=backend,
                surface=opts.physics.surface,
            )
        )
    return engines


def _solve_general(opts: _Options, frames, grids) -> list[BindingEnergy]:
    """Maps of the three species of every frame, one batched solve, then the energies."""
    from pbsolver.problem import Problem
    from pbsolver.solving.batched import solve_batch

    species, problems = [], []
    for atoms, grid in zip(frames, grids, strict=True):
        parts = opts.species(atoms)
        species.append(parts)
        common = {"physics": opts.physics, "maps_backend": opts.maps_backend}
        surfaces = _ses_fractions(opts, parts, grid)
        receptor = build_maps(parts[1], grid, fractions=surfaces[1], **common)
        ligand = build_maps(parts[2], grid, **common)
        # the complex's φ_c is the sum of its two disjoint parts' (linear in the charges): one
        # Coulomb sum over the whole molecule fewer, and the parts' rounding shared with them
        phi_c = receptor.phi_coulomb + ligand.phi_coulomb
        complex_ = build_maps(parts[0], grid, phi_coulomb=phi_c, fractions=surfaces[0], **common)
        problems += [Problem.from_maps(m) for m in (complex_, receptor, ligand)]
    results = solve_batch(problems, **opts.solver)
    out = []
    for f, (parts, grid) in enumerate(zip(species, grids, strict=True)):
        three = results[3 * f : 3 * f + 3]
        nonlinear = three[0].newton_steps is not None
        polar, rf_terms = {}, []
        for name, part, problem, res in zip(SPECIES, parts, problems[3 * f : 3 * f + 3], three,
                                            strict=True):  # fmt: skip
            phi = to_numpy(res.phi_rf)
            if nonlinear:  # fixed charges' term and the mobile ions' terms (no per-atom split)
                polar[name] = float(solvation_terms(part, problem, phi).total)
            else:
                rf_terms.append(reaction_field_terms(part, grid, phi))
                polar[name] = float(np.sum(rf_terms[-1]))
        summaries = [_summary(r, "general") for r in three]
        out.append(_energies(opts, parts, grid, polar, rf_terms, summaries))
    return out


def _ses_fractions(opts: _Options, parts, grid) -> tuple:
    """The complex's and receptor's SES edge fractions, the receptor's from the complex's.

    (None, None) unless the surface is "mol" or "smol" with a probe and two permittivities:
    then :func:`~pbsolver.molecule.part_surface.part_face_fractions` computes again only the
    grid lines near the ligand ("smol" smooths the "mol" fractions, as ``face_fractions``).
    """
    from pbsolver.molecule.maps import face_fractions, smooth_fractions
    from pbsolver.molecule.part_surface import part_face_fractions

    ph = opts.physics
    if ph.surface not in ("mol", "smol") or not ph.probe_radius > 0 or ph.eps_in == ph.eps_out:
        return None, None
    whole = face_fractions(parts[0], grid, "mol", ph.probe_radius, backend=opts.maps_backend)
    part = part_face_fractions(parts[1], whole, parts[2], grid, ph.probe_radius,
                               backend=opts.maps_backend)  # fmt: skip
    if ph.surface == "smol":
        return smooth_fractions(*whole), smooth_fractions(*part)
    return whole, part


def _solve_stacked(opts: _Options, engines, frames, grids) -> list[BindingEnergy]:
    """Each species' frames through its StackedFrames, then the energies."""
    from pbsolver.solving.solver import Solver, SolveResult

    solver = Solver(**opts.solver)
    positions = np.stack([a.positions for a in frames])  # (B, n, 3)
    origins = np.array([g.origin for g in grids], dtype=np.float64)
    _check_inside(positions[:, opts.union], grids)
    nf = len(frames)
    runs = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        # On a GPU the host waits on the kernels: the areas (host code that releases the GIL)
        # are counted meanwhile. On the CPU the cores are busy anyway, and two threads in
        # numba's parallel regions at once are not safe under every threading layer.
        on_gpu = engines[0].backend.array_library == "cupy"
        areas = pool.submit(_areas_of_frames, opts, frames) if on_gpu else None
        species = (opts.union, opts.receptor, opts.ligand)
        for k, (eng, idx) in enumerate(zip(engines, species, strict=True)):
            part_of = None
            if k == 1 and eng.sweeps_probe:  # the receptor: the complex less the ligand
                part_of = (engines[0], positions[:, opts.ligand], frames[0].radii[opts.ligand])
            runs.append(eng.run(np.ascontiguousarray(positions[:, idx]), origins,
                                ses_part_of=part_of))  # fmt: skip
        areas = areas.result() if on_gpu else [None] * nf
    # every species' and frame's solve checked (strict) before any energy is returned
    results = []
    for f in range(nf):
        three = []
        for run in runs:
            three.append(
                SolveResult(
                    phi_rf=run.phi[f],
                    converged=bool(run.converged[f]),
                    iterations=run.iterations,
                    residual_norms=[float(run.initial[f]), float(run.residuals[f])],
                    seconds=run.timings["solve"] / nf,
                    method=run.method,
                    backend=engines[0].backend.name,
                    reason="converged" if run.converged[f] else run.reason,
                    omega=run.omega,
                    extra={"engine": "stacked", "batch_size": nf},
                )
            )
            solver.check(three[-1])
        results.append(three)
    out = []
    for f, (atoms, grid) in enumerate(zip(frames, grids, strict=True)):
        parts = opts.species(atoms)
        # ½ qᵢ φ_rf(rᵢ): the engine samples with the trilinear body of reaction_field_terms
        rf_terms = [0.5 * p.charges * r.values[f] for p, r in zip(parts, runs, strict=True)]
        polar = {name: float(np.sum(t)) for name, t in zip(SPECIES, rf_terms, strict=True)}
        summaries = [_summary(r, "stacked") for r in results[f]]
        out.append(_energies(opts, parts, grid, polar, rf_terms, summaries, areas[f]))
    return out


def _areas_of_frames(opts: _Options, frames) -> list:
    """Each frame's :func:`_areas` (None without the nonpolar term)."""
    return [_areas(opts, opts.species(atoms)[0]) for atoms in frames]


def _areas(opts: _Options, complex_atoms):
    """(whole, alone): each atom's SASA in the complex and in its own part, Å², or None."""
    if not opts.nonpolar:
        return None
    ligand = np.isin(opts.union, opts.ligand)
    return sasa_parts(complex_atoms, ligand.astype(np.int64), probe=opts.sasa_probe,
                      n_points=opts.n_points)  # fmt: skip


def _check_inside(positions, grids) -> None:
    """InputError unless each frame's atoms lie strictly inside its grid (as build_maps asks)."""
    lo = np.array([g.origin for g in grids], dtype=np.float64)
    hi = lo + np.array([g.lengths for g in grids], dtype=np.float64)
    outside = np.any(positions.min(axis=1) <= lo, axis=1) | np.any(
        positions.max(axis=1) >= hi, axis=1
    )
    if outside.any():
        raise InputError(
            f"some atoms lie on or outside the grid's outer layer (frame {int(np.argmax(outside))}"
            " of the chunk)"
        )


def _energies(opts: _Options, parts, grid, polar, rf_terms, solves, areas=None) -> BindingEnergy:
    """The terms of one frame from its three species' polar energies (kJ/mol).

    ``rf_terms``: the three species' per-atom ½ qᵢ φ_rf(rᵢ) (kJ/mol; empty for the nonlinear
    equation, whose mobile-ion terms belong to no atom). ``areas``: the frame's
    :func:`_areas` where already counted.
    """
    idx = (opts.union, opts.receptor, opts.ligand)
    delta_polar = polar["complex"] - polar["receptor"] - polar["ligand"]

    eps_in = opts.physics.eps_in
    # the receptor–ligand pairs: all that differs between the complex's Coulomb energy and
    # its parts' (O(n·m) pairs instead of three O(n²) sums)
    coul_atoms = np.zeros(opts.n)
    coul_atoms[opts.receptor], coul_atoms[opts.ligand] = coulomb_interaction(
        parts[1], parts[2], eps_in, per_atom=True
    )
    delta_coulomb = float(np.sum(coul_atoms))

    delta_sasa = None
    np_atoms = np.zeros(opts.n)
    delta_nonpolar = 0.0
    if opts.nonpolar:
        # the complex's and the parts' areas in one pass (the same as sasa of each species)
        whole, alone = _areas(opts, parts[0]) if areas is None else areas
        ligand = np.isin(opts.union, opts.ligand)
        areas = [whole, alone[~ligand], alone[ligand]]
        sasa_atoms = _delta_per_atom(opts.n, idx, areas)
        delta_sasa = float(np.sum(sasa_atoms))
        np_atoms = opts.gamma * sasa_atoms
        # b once for the complex, removed twice for the parts; it belongs to no atom
        np_atoms[opts.union] -= opts.offset / opts.union.size
        delta_nonpolar = opts.gamma * delta_sasa - opts.offset
    total = delta_polar + delta_coulomb + delta_nonpolar

    per_atom = per_residue = terms = parts_of_rows = None
    if opts.decompose is not None:
        polar_atoms = _delta_per_atom(opts.n, idx, rf_terms)
        terms = {"polar": polar_atoms, "coulomb": coul_atoms, "nonpolar": np_atoms}
        per_atom = polar_atoms + coul_atoms + np_atoms
        if opts.decompose == "residue":
            per_residue, parts_of_rows = _residues(opts, per_atom, parts)
    return BindingEnergy(
        polar=polar,
        delta_polar=float(delta_polar),
        delta_coulomb=delta_coulomb,
        delta_nonpolar=float(delta_nonpolar),
        total=float(total),
        per_atom=per_atom,
        per_residue=per_residue,
        grid=grid,
        delta_sasa=delta_sasa,
        per_atom_terms=terms,
        residue_parts=parts_of_rows,
        solves=tuple(solves),
    )


def _summary(result, engine: str) -> dict:
    """What a BindingEnergy keeps of a SolveResult (plain numbers) and the engine's name."""
    return {
        "engine": engine,
        "converged": bool(result.converged),
        "iterations": int(result.iterations),
        "residual": float(result.residual),
        "method": str(result.method),
        "backend": str(result.backend),
        "seconds": float(result.seconds),
    }


def _delta_per_atom(n, idx, values) -> np.ndarray:
    """Complex's per-atom values minus each part's, on the complex's n atoms."""
    out = np.zeros(n)
    out[idx[0]] += values[0]
    out[idx[1]] -= values[1]
    out[idx[2]] -= values[2]
    return out


def _residues(opts: _Options, per_atom, parts):
    """(resname, resid, energy) rows: receptor residues, then ligand residues."""
    rows, owners = [], []
    for part_name, sel, atoms in (("receptor", opts.receptor, parts[1]),
                                  ("ligand", opts.ligand, parts[2])):  # fmt: skip
        names = atoms.resnames if atoms.resnames is not None else np.full(len(atoms), "")
        keys = {}
        for k, (name, rid) in enumerate(zip(names, atoms.resids, strict=True)):
            key = (str(name), int(rid))
            if key not in keys:
                keys[key] = len(rows)
                rows.append([key[0], key[1], 0.0])
                owners.append(part_name)
            rows[keys[key]][2] += float(per_atom[sel[k]])
    return [tuple(r) for r in rows], tuple(owners)


# ---------------------------------------------------------------------- checks
def _selection(sel, n: int, name: str) -> np.ndarray:
    """Sorted atom indices of a boolean mask (n,) or an integer index array."""
    try:
        a = np.asarray(sel)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a boolean mask or integer indices") from None
    if a.dtype == bool:
        if a.shape != (n,):
            raise InputError(f"{name} as a mask must have shape ({n},), got {a.shape}")
        idx = np.flatnonzero(a)
    elif a.size == 0:
        idx = np.zeros(0, dtype=np.int64)
    elif np.issubdtype(a.dtype, np.integer):
        idx = a.reshape(-1).astype(np.int64)
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            raise InputError(
                f"{name} index {int(idx[np.argmax(bad)])} is out of range for {n} atoms"
            )
        uniq = np.unique(idx)
        if uniq.size != idx.size:
            raise InputError(f"{name} lists some atom indices more than once")
        idx = uniq
    else:
        raise InputError(f"{name} must be a boolean mask or integer indices, got {a.dtype}")
    if idx.size == 0:
        raise InputError(f"the {name} selection is empty")
    return idx


def check_shape(shape) -> tuple:
    """``shape`` as three node counts (each ≥ 3); InputError otherwise."""
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise InputError(f"shape must be 3 integers, got {shape!r}") from None
    if len(out) != 3 or min(out) < 3:
        raise InputError(f"shape must be 3 integers >= 3, got {shape!r}")
    return out


def _finite(value, name) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v):
        raise InputError(f"{name} must be a finite number, got {value!r}")
    return v


__all__ = ["BindingEnergy", "DECOMPOSE", "binding_energies", "binding_energy", "check_shape"]
