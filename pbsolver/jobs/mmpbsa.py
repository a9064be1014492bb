"""MM/PBSA along a trajectory: frames → batches → :func:`pbsolver.binding_energies` → records.

The orchestration behind ``pbsolver mmpbsa``. A trajectory is read with MDAnalysis (any format
it reads); charges and radii come from the topology (a PQR carries both) or from a PQR of the
same atoms. The selected frames are cut into batches of ``batch`` frames; each batch is one task:
one :func:`pbsolver.binding_energies` call (on a GPU its 3·batch solves are stacked), run in this
process or in a pool of worker processes (:class:`pbsolver.jobs.batch.ProcessExecutor`, one GPU
each where GPUs exist). Every frame's grid has the same node counts (the largest that any
selected frame needs, :func:`frames_shape`, or the caller's ``shape``), placed around that
frame's complex, so a frame's numbers do not depend on which batch or worker computed it.

Output layout (HDF5, version "1"), one row per frame, sorted by frame index::

    /   @pbsolver_mmpbsa_layout="1" @creator @key @options (JSON) @grid_shape i8[3]
    frame                 i8[n]   trajectory frame index (0-based)
    time                  f8[n]   ps (MDAnalysis' time of the frame)
    delta_total, delta_polar, delta_coulomb, delta_nonpolar,
    polar_complex, polar_receptor, polar_ligand
                          f8[n]   kJ/mol (@units)
    delta_sasa            f8[n]   Å² (NaN without the nonpolar term)
    per_residue           f8[n, r] kJ/mol, with --per-residue (rows sum to delta_total)
    residues/resname, residues/resid, residues/part   (r,) the columns of per_residue

Crash safety and resume follow :mod:`pbsolver.jobs.batch`: an exclusive lock next to the output
(:class:`pbsolver.io.atomic.OutputLock`); each finished batch goes into its own part file
``.NAME.parts/<first frame>_<count>.h5`` written under a temporary name and renamed (the worker
that computed it writes it); when every selected frame is done, the output is assembled under a
temporary name and renamed, and the part files are deleted. Killed at any moment, a run loses no
finished batch; a rerun skips the frames in the output and in part files and computes the rest.
The output records a key (a hash of the inputs' names, sizes and modification times, the
selections and every option that changes the numbers); a rerun whose key differs is refused
with the options that differ (``overwrite=True`` discards the old results). The frame range
(start, stop, stride), the batch size, the backends and the workers are not part of the key:
a rerun with a longer range adds frames to the same output (on the grid shape stored there).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import logging
import shutil
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from pbsolver.exceptions import InputError, PBSolverError
from pbsolver.jobs.options import GridPhysicsOptions
from pbsolver.molecule.binding import ENGINES, check_shape
from pbsolver.options import PhysicsOptions, choice, positive
from pbsolver.progress import progress_bar

log = logging.getLogger("pbsolver")

#: Version of the output layout.
LAYOUT = "1"
#: Root attribute naming the layout.
LAYOUT_ATTR = "pbsolver_mmpbsa_layout"
#: Per-frame energy columns (kJ/mol), in the CSV's order.
ENERGY_TERMS = (
    "delta_total",
    "delta_polar",
    "delta_coulomb",
    "delta_nonpolar",
    "polar_complex",
    "polar_receptor",
    "polar_ligand",
)
#: Every per-frame column of the output (besides ``per_residue``).
COLUMNS = ("frame", "time", *ENERGY_TERMS, "delta_sasa")
#: Default number of blocks of the block-average standard error.
BLOCKS = 10
#: Version of the resume key recipe (bump to invalidate old results).
_KEY_VERSION = 1
#: MMPBSAOptions fields that say where or how, not what, is computed: not in the key (the
#: engines solve the same discrete equations, so they differ only within the solver's rtol).
_UNKEYED = ("backend", "maps_backend", "engine")


# ---------------------------------------------------------------------- options
@dataclass(frozen=True)
class MMPBSAOptions(GridPhysicsOptions):
    """What a frame's binding energy is computed with (picklable; all but ``backend`` keyed).

    Parameters
    ----------
    spacing, margin : float
        Grid spacing and least gap between the complex's atomic spheres and the grid's outer
        layer, Å.
    eps_in, eps_out, ionic_strength, surface, probe_radius, temperature
        The physics (:class:`~pbsolver.PhysicsOptions`; ionic strength mol/L, temperature K).
    nonpolar : bool
        Add γ·ΔSASA − b (:func:`pbsolver.binding_energy`).
    gamma, offset : float or None
        γ in kJ mol⁻¹ Å⁻² and b in kJ/mol (None: pbsolver's defaults).
    per_residue : bool
        Keep each frame's per-residue decomposition.
    rtol : float
        Relative residual of every solve.
    backend : str
        "auto", "cpu" or "cuda" (not part of the key: it changes the numbers only by rounding).
    maps_backend : str
        Where the maps are built: "cpu", "cuda" or "auto"
        (:func:`pbsolver.molecule.maps.build_maps`; not part of the key either).
    engine : str
        "auto", "general" or "stacked": how the three species are mapped and solved
        (:func:`pbsolver.binding_energy`; not part of the key either).
    """

    temperature: float = PhysicsOptions.temperature
    nonpolar: bool = True
    gamma: float | None = None
    offset: float | None = None
    per_residue: bool = False
    rtol: float = 1e-6
    backend: str = "auto"
    maps_backend: str = "cpu"
    engine: str = "auto"

    def __post_init__(self):
        super().__post_init__()
        choice(self.engine, "engine", ENGINES)
        positive(self.rtol, "rtol")

    def key_fields(self) -> dict:
        """The options that change the numbers (all but where they are computed)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _UNKEYED}

    def binding_kwargs(self) -> dict:
        """Keywords of :func:`pbsolver.binding_energies` (besides selections and shape)."""
        return {
            **self.grid_kwargs(),
            "nonpolar": self.nonpolar,
            "gamma": self.gamma,
            "offset": self.offset,
            "decompose": "residue" if self.per_residue else None,
            "solver": {"rtol": self.rtol},
            "backend": self.backend,
            "maps_backend": self.maps_backend,
            "engine": self.engine,
        }


@dataclass(frozen=True)
class Inputs:
    """The files and selections of a run (picklable: sent to worker processes).

    Parameters
    ----------
    topology : str
        Topology file MDAnalysis reads (PQR, PDB, PSF, PRMTOP, TPR, GRO, ...).
    trajectories : tuple of str
        Trajectory files, read one after the other (none: the topology's own frames).
    pqr : str or None
        PQR file with the charges and radii of the topology's atoms, in the same order.
    receptor, ligand : str
        MDAnalysis selection strings (receptor default: every atom not in the ligand).
    """

    topology: str
    trajectories: tuple = ()
    pqr: str | None = None
    ligand: str = ""
    receptor: str | None = None

    def files(self) -> list[str]:
        """Every input file, topology first."""
        return [self.topology, *self.trajectories, *([self.pqr] if self.pqr else [])]


# ---------------------------------------------------------------------- reading
_CACHE: dict = {}  # per process: Inputs -> System (workers read their input once)


@dataclass
class System:
    """A loaded run: the Universe, the complex's Atoms and the selections' indices."""

    universe: object
    atoms: object  # pbsolver Atoms of every atom of the topology (positions of frame 0)
    ligand: np.ndarray
    receptor: np.ndarray
    n_frames: int

    @property
    def union(self) -> np.ndarray:
        """Receptor ∪ ligand, sorted."""
        return np.union1d(self.receptor, self.ligand)

    def positions(self, frames) -> np.ndarray:
        """Positions of every atom in ``frames``, (len(frames), n, 3) Å, float64."""
        traj = self.universe.trajectory
        out = np.empty((len(frames), self.universe.atoms.n_atoms, 3))
        for k, f in enumerate(frames):
            traj[int(f)]
            out[k] = self.universe.atoms.positions
        return out

    def times(self, frames) -> np.ndarray:
        """MDAnalysis' time of each frame, ps."""
        traj = self.universe.trajectory
        out = np.empty(len(frames))
        for k, f in enumerate(frames):
            out[k] = traj[int(f)].time
        return out


def load(inputs: Inputs) -> System:
    """Read the topology and trajectory, charges and radii, and resolve the selections.

    Raises
    ------
    InputError
        An unreadable file, no charges or radii (without a PQR), a PQR whose atom count differs
        from the topology's, a selection that is invalid, empty or overlapping.
    """
    cached = _CACHE.get(inputs)
    if cached is not None:
        return cached
    import MDAnalysis as mda

    from pbsolver.molecule.atoms import Atoms

    for path in inputs.files():
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file")
    try:
        with warnings.catch_warnings():  # the DCD reader's notice about MDAnalysis 3.0
            warnings.simplefilter("ignore", DeprecationWarning)
            u = mda.Universe(inputs.topology, *inputs.trajectories)
    except Exception as exc:  # noqa: BLE001 - MDAnalysis raises many kinds for a bad file
        names = " + ".join([inputs.topology, *inputs.trajectories])
        raise InputError(f"MDAnalysis cannot read {names}: {exc}") from None
    charges, radii = charges_and_radii(u, inputs.topology, inputs.pqr)
    atoms = Atoms.from_mdanalysis(u.atoms, charges=charges, radii=radii)
    ligand = _select(u, inputs.ligand, "--ligand")
    if inputs.receptor is None:
        receptor = np.setdiff1d(np.arange(u.atoms.n_atoms), ligand)
        if receptor.size == 0:
            raise InputError(f"--ligand {inputs.ligand!r} selects every atom: no receptor left")
    else:
        receptor = _select(u, inputs.receptor, "--receptor")
        both = np.intersect1d(receptor, ligand)
        if both.size:
            raise InputError(
                f"--receptor and --ligand share {both.size} atom(s) (the first: index "
                f"{int(both[0])}); the selections must not overlap"
            )
    system = System(u, atoms, ligand, receptor, len(u.trajectory))
    _CACHE.clear()  # one system per process at a time
    _CACHE[inputs] = system
    return system


def charges_and_radii(universe, topology, pqr=None) -> tuple:
    """Charges (e) and radii (Å) of every atom of ``universe``, or (None, None): the topology's.

    From ``pqr`` when given; else, when the topology is a PQR file, that file's values read by
    :func:`pbsolver.read_pqr` (MDAnalysis keeps them in float32, which would make a PQR
    topology's numbers differ from the same PQR given as ``pqr``); else (None, None), and the
    topology must carry both.

    Raises
    ------
    InputError
        A PQR whose atom count differs from the Universe's; a topology with neither.
    """
    from pbsolver.molecule.atoms import read_pqr

    n = universe.atoms.n_atoms
    path = pqr
    if path is None and topology is not None and Path(topology).suffix.lower() == ".pqr":
        path = topology
    if path is not None:
        atoms = read_pqr(path)
        if len(atoms) != n:
            raise InputError(
                f"--pqr {path} has {len(atoms)} atoms, the topology {topology} has {n}: give the "
                "PQR of the same atoms in the same order"
            )
        return atoms.charges, atoms.radii
    missing = [a for a in ("charges", "radii") if not hasattr(universe.atoms, a)]
    if missing:
        raise InputError(
            f"the topology {topology} has no {' and no '.join(missing)}: give --pqr FILE with "
            "the charges and radii of its atoms (or use a PQR as topology)"
        )
    return None, None


def _select(u, text: str, what: str) -> np.ndarray:
    if not text or not str(text).strip():
        raise InputError(f"{what}: give an MDAnalysis selection string")
    try:
        ag = u.select_atoms(text)
    except Exception as exc:  # noqa: BLE001 - SelectionError and friends
        raise InputError(f"{what} {text!r}: not a valid MDAnalysis selection ({exc})") from None
    if ag.n_atoms == 0:
        raise InputError(f"{what} {text!r} selects no atom")
    return np.sort(ag.indices)


def frames_shape(atoms, positions, union, spacing: float, margin: float) -> tuple:
    """Node counts that fit every frame: the largest of each frame's own grid.

    Parameters
    ----------
    atoms : Atoms
        The complex (charges, radii).
    positions : iterable of arrays (n, 3)
        Each frame's positions, Å.
    union : array of int
        The atoms of the complex species (receptor ∪ ligand).
    spacing, margin : float
        Å, as :func:`pbsolver.binding_energies`.

    Returns
    -------
    tuple of 3 ints
        What ``binding_energies(shape=None)`` would pick for all these frames at once.
    """
    from pbsolver.molecule.maps import grid_for_atoms

    part = atoms[union]
    best = np.zeros(3, dtype=np.int64)
    for pos in positions:
        shape = grid_for_atoms(part.with_positions(np.asarray(pos)[union]), spacing, margin).shape
        best = np.maximum(best, shape)
    return tuple(int(s) for s in best)


# ---------------------------------------------------------------------- the tasks
@dataclass(frozen=True)
class FrameTask:
    """One batch of frames (picklable)."""

    inputs: Inputs
    frames: tuple
    options: MMPBSAOptions
    shape: tuple
    key: str
    part_path: str

    @property
    def source(self) -> str:
        """The topology (how :mod:`pbsolver.jobs.batch`'s executors name a failed task)."""
        return self.inputs.topology

    @property
    def grid(self) -> str:
        """The frames, as text (the executors' name of the task's unit of work)."""
        return f"frames {self.frames[0]}–{self.frames[-1]}"


@dataclass
class FrameOutcome:
    """What a worker returns for one batch."""

    frames: tuple
    ok: bool
    error: str | None = None
    totals: tuple = ()
    seconds: float = 0.0


def compute_frames(system: System, frames, options: MMPBSAOptions, shape) -> dict:
    """The records of ``frames``: a dict of columns (see the module's layout).

    Raises what :func:`pbsolver.binding_energies` raises.
    """
    from pbsolver.molecule.binding import binding_energies

    positions = system.positions(frames)
    # where the backend stacks batches (CUDA) the batch is one stack (3 problems a frame);
    # elsewhere binding_energies' own chunks bound the host memory of the maps (one problem
    # after the other)
    from pbsolver.backends import get_backend

    stacks = get_backend(options.backend).STACKS_BATCHES
    chunk = len(frames) if stacks else None
    results = binding_energies(
        system.atoms, positions, system.ligand, system.receptor, shape=shape, chunk=chunk,
        **options.binding_kwargs(),
    )  # fmt: skip
    return records(frames, system.times(frames), results)


def records(frames, times, results) -> dict:
    """Columns of the output from :class:`pbsolver.BindingEnergy` results, one per frame."""
    rec = {
        "frame": np.asarray(frames, dtype=np.int64),
        "time": np.asarray(times, dtype=np.float64),
        "delta_total": [r.total for r in results],
        "delta_polar": [r.delta_polar for r in results],
        "delta_coulomb": [r.delta_coulomb for r in results],
        "delta_nonpolar": [r.delta_nonpolar for r in results],
        "polar_complex": [r.polar["complex"] for r in results],
        "polar_receptor": [r.polar["receptor"] for r in results],
        "polar_ligand": [r.polar["ligand"] for r in results],
        "delta_sasa": [np.nan if r.delta_sasa is None else r.delta_sasa for r in results],
    }
    rec = {k: np.asarray(v, dtype=np.float64) if k != "frame" else v for k, v in rec.items()}
    rec["time"] = np.asarray(times, dtype=np.float64)
    if results and results[0].per_residue is not None:
        rec["per_residue"] = np.array([[row[2] for row in r.per_residue] for r in results])
        first = results[0]
        rec["residues"] = {
            "resname": [row[0] for row in first.per_residue],
            "resid": [int(row[1]) for row in first.per_residue],
            "part": list(first.residue_parts),
        }
    return rec


def run_frames(task: FrameTask) -> FrameOutcome:
    """Compute one batch and write its part file; never raises for bad input or a failed solve.

    Runs in worker processes (which read the trajectory themselves, once per process).
    """
    start = time.perf_counter()
    try:
        system = load(task.inputs)
        rec = compute_frames(system, task.frames, task.options, task.shape)
        write_results(task.part_path, rec, _root_attrs(task.key, task.options, task.shape))
    except Exception as exc:  # noqa: BLE001 - a worker reports every failure, the rest go on
        return FrameOutcome(task.frames, False, _reason(exc), seconds=time.perf_counter() - start)
    return FrameOutcome(
        task.frames, True, totals=tuple(rec["delta_total"]), seconds=time.perf_counter() - start
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, PBSolverError):
        return str(exc)
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, OSError):
        return f"{exc.filename or ''} {exc.strerror or exc}".strip()
    return f"unexpected {type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------- files
def _root_attrs(key: str, options: MMPBSAOptions, shape) -> dict:
    from pbsolver._version import __version__

    return {
        LAYOUT_ATTR: LAYOUT,
        "creator": f"pbsolver {__version__}",
        "key": key,
        "options": json.dumps(options.key_fields(), sort_keys=True),
        "grid_shape": np.asarray(shape, dtype=np.int64),
    }


def write_results(path, rec: dict, attrs: dict) -> None:
    """Write records (columns) to ``path`` under a temporary name, then rename."""
    import h5py

    from pbsolver.io.atomic import atomic_path

    path = Path(path)
    path.parent.mkdir(exist_ok=True)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for k, v in attrs.items():
            f.attrs[k] = v
        for name in COLUMNS:
            dset = f.create_dataset(name, data=rec[name])
            if name in ENERGY_TERMS:
                dset.attrs["units"] = "kJ/mol"
            elif name == "time":
                dset.attrs["units"] = "ps"
            elif name == "delta_sasa":
                dset.attrs["units"] = "Å²"
        if "per_residue" in rec:
            f.create_dataset("per_residue", data=rec["per_residue"]).attrs["units"] = "kJ/mol"
            g = f.create_group("residues")
            res = rec["residues"]
            g.create_dataset("resname", data=np.array(res["resname"], dtype="S"))
            g.create_dataset("resid", data=np.asarray(res["resid"], dtype=np.int64))
            g.create_dataset("part", data=np.array(res["part"], dtype="S"))


def read_results(path) -> tuple[dict, dict]:
    """(records, root attributes) of an output or part file (see the module's layout).

    Raises
    ------
    InputError
        Not a pbsolver MM/PBSA file.
    """
    import h5py

    try:
        with h5py.File(path, "r", locking="best-effort") as f:
            attrs = {k: _decode(v) for k, v in f.attrs.items()}
            if attrs.get(LAYOUT_ATTR) != LAYOUT:
                raise InputError(f"{path} is not a pbsolver MM/PBSA results file")
            rec = {name: f[name][()] for name in COLUMNS}
            if "per_residue" in f:
                rec["per_residue"] = f["per_residue"][()]
                g = f["residues"]
                rec["residues"] = {
                    "resname": [_decode(x) for x in g["resname"][()]],
                    "resid": [int(x) for x in g["resid"][()]],
                    "part": [_decode(x) for x in g["part"][()]],
                }
    except (OSError, KeyError) as exc:
        raise InputError(f"{path}: not a readable MM/PBSA results file ({exc})") from None
    return rec, attrs


def _decode(value):
    return value.decode() if isinstance(value, bytes) else value


def merge(records_list) -> dict:
    """One set of columns from several, sorted by frame (the first record of a frame wins)."""
    records_list = [r for r in records_list if len(r["frame"])]
    if not records_list:
        raise InputError("no frames to merge")
    rec = {name: np.concatenate([np.asarray(r[name]) for r in records_list]) for name in COLUMNS}
    _, first = np.unique(rec["frame"], return_index=True)
    order = first[np.argsort(rec["frame"][first])]
    out = {name: rec[name][order] for name in COLUMNS}
    if all("per_residue" in r for r in records_list):
        out["per_residue"] = np.concatenate([r["per_residue"] for r in records_list])[order]
        out["residues"] = records_list[0]["residues"]
    return out


# ---------------------------------------------------------------------- statistics
def block_average(values, blocks: int = BLOCKS) -> tuple[float, float, int]:
    """Mean and its standard error from block averages.

    The series (in frame order) is cut into ``blocks`` contiguous blocks whose lengths differ
    by at most one frame (:func:`numpy.array_split`); the standard error is the standard
    deviation of the block means (``ddof=1``) over √blocks. Consecutive MD frames are
    correlated, so the plain standard error of the frames underestimates the uncertainty;
    means of blocks longer than the correlation time are nearly independent. Ten blocks is the
    usual compromise: blocks as long as possible while the spread of their means, with nine
    degrees of freedom, still estimates the variance to within about ±25 %. Fewer frames than
    blocks: one frame a block. The mean is that of all frames.

    Parameters
    ----------
    values : array_like (n,)
        The series, in frame order.
    blocks : int
        Number of blocks (≥ 2).

    Returns
    -------
    (mean, sem, blocks used)
        ``sem`` is NaN for fewer than two frames.
    """
    x = np.asarray(values, dtype=np.float64)
    if blocks < 2:
        raise InputError(f"blocks must be >= 2, got {blocks}")
    if x.size == 0:
        return float("nan"), float("nan"), 0
    b = min(int(blocks), x.size)
    if b < 2:
        return float(x.mean()), float("nan"), b
    means = np.array([chunk.mean() for chunk in np.array_split(x, b)])
    return float(x.mean()), float(means.std(ddof=1) / np.sqrt(b)), b


def write_summary(path, rec: dict, blocks: int = BLOCKS, per_residue: bool = False) -> None:
    """The CSV summary: each term's mean ± block-average standard error (kJ/mol).

    Columns ``quantity, resname, resid, part, mean, sem, std, n_frames, n_blocks``: one row per
    energy term (:data:`ENERGY_TERMS`, then ``delta_sasa`` in Å²), and with ``per_residue`` one
    row per residue (``quantity`` ``residue``). Written under a temporary name, then renamed.
    """
    from pbsolver.io.atomic import atomic_path

    rows = []
    n = len(rec["frame"])
    for name in (*ENERGY_TERMS, "delta_sasa"):
        mean, sem, b = block_average(rec[name], blocks)
        rows.append([name, "", "", "", mean, sem, _std(rec[name]), n, b])
    if per_residue:
        if "per_residue" not in rec:
            raise InputError("no per-residue terms in these results (run with --per-residue)")
        res = rec["residues"]
        for j, (name, rid, part) in enumerate(
            zip(res["resname"], res["resid"], res["part"], strict=True)
        ):
            col = rec["per_residue"][:, j]
            mean, sem, b = block_average(col, blocks)
            rows.append(["residue", name, rid, part, mean, sem, _std(col), n, b])
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["quantity", "resname", "resid", "part", "mean", "sem", "std", "n_frames",
                    "n_blocks"])  # fmt: skip
        for row in rows:
            w.writerow([f"{v:.6f}" if isinstance(v, float) else v for v in row])


def _std(values) -> float:
    x = np.asarray(values, dtype=np.float64)
    return float(x.std(ddof=1)) if x.size > 1 else float("nan")


# ---------------------------------------------------------------------- the driver
@dataclass
class MMPBSAReport:
    """What :func:`run_mmpbsa` did."""

    output: Path
    computed: list = field(default_factory=list)  # frames computed in this run
    skipped: list = field(default_factory=list)  # frames already done
    failed: dict = field(default_factory=dict)  # frame -> reason
    records: dict | None = None  # the selected frames' records (when all are done)

    @property
    def ok(self) -> bool:
        """True when no frame failed."""
        return not self.failed


def run_key(inputs: Inputs, system: System, options: MMPBSAOptions, shape) -> str:
    """The resume key: the inputs' identity, the selections and the keyed options."""
    files = []
    for path in inputs.files():
        st = Path(path).stat()
        files.append([Path(path).name, st.st_size, st.st_mtime_ns])
    payload = {
        "v": _KEY_VERSION,
        "files": files,
        "ligand": hashlib.sha1(system.ligand.tobytes()).hexdigest(),
        "receptor": hashlib.sha1(system.receptor.tobytes()).hexdigest(),
        "options": options.key_fields(),
        "shape": list(shape),
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def select_frames(n_frames: int, start=None, stop=None, stride=None) -> list[int]:
    """Trajectory frame indices ``range(n_frames)[start:stop:stride]``."""
    if stride is not None and stride < 1:
        raise InputError(f"stride must be >= 1, got {stride}")
    frames = list(range(n_frames))[start:stop:stride]
    if not frames:
        raise InputError(
            f"no frame selected: the trajectory has {n_frames} frame(s), start={start}, "
            f"stop={stop}, stride={stride}"
        )
    return frames


def run_mmpbsa(
    inputs: Inputs,
    output,
    *,
    options: MMPBSAOptions | None = None,
    start: int | None = None,
    stop: int | None = None,
    stride: int | None = None,
    batch: int = 16,
    executor=None,
    overwrite: bool = False,
    progress: bool | None = None,
    shape=None,
) -> MMPBSAReport:
    """Binding energies of the selected frames into ``output``; resumable (module docstring).

    Parameters
    ----------
    inputs : Inputs
        Files and selections.
    output : path-like
        HDF5 output (``.h5``/``.hdf5``).
    options : MMPBSAOptions
        Grid, physics, nonpolar term, decomposition, backend.
    start, stop, stride : int, optional
        Frames ``range(n_frames)[start:stop:stride]``.
    batch : int
        Frames per :func:`pbsolver.binding_energies` call (one task, one part file).
    executor : LocalExecutor or ProcessExecutor, optional
        Where batches run (:mod:`pbsolver.jobs.batch`; default: in this process).
    overwrite : bool
        Discard an existing output (and part files) made with other inputs or options.
    progress : bool or None
        Progress bar (frames); None: on a terminal (:mod:`pbsolver.progress`).
    shape : 3 ints, optional
        Node counts of every frame's grid (default: the largest any selected frame needs,
        :func:`frames_shape`; a rerun keeps the shape of the results it resumes). Part of the
        key.

    Returns
    -------
    MMPBSAReport
        Frames computed, skipped and failed; ``records`` holds the selected frames' columns
        when all of them are done.

    Raises
    ------
    InputError
        Bad inputs or options, an output locked by another process, or an existing output of
        other inputs or options (without ``overwrite``).
    """
    from pbsolver.io.atomic import OutputLock, remove_stale_temps
    from pbsolver.io.safety import check_output
    from pbsolver.jobs.batch import LocalExecutor

    options = options or MMPBSAOptions()
    executor = executor or LocalExecutor()
    if isinstance(batch, bool) or not isinstance(batch, int | np.integer) or batch < 1:
        raise InputError(f"batch must be a positive number of frames, got {batch!r}")
    output = Path(output)
    check_output(output, inputs.files(), what="--output")
    system = load(inputs)
    frames = select_frames(system.n_frames, start, stop, stride)
    report = MMPBSAReport(output)
    parts_dir = output.with_name(f".{output.name}.parts")
    lock = OutputLock(output)
    try:
        lock.acquire()
    except BlockingIOError:
        raise InputError(f"another pbsolver process is writing {output}") from None
    try:
        remove_stale_temps(output.parent, output.name)
        remove_stale_temps(parts_dir)
        if shape is not None:
            shape = check_shape(shape)
        elif not overwrite:
            shape = _stored_shape(output, parts_dir, options)
        if shape is None:
            shape = frames_shape(
                system.atoms, _iter_positions(system, frames), system.union,
                options.spacing, options.margin,
            )  # fmt: skip
        key = run_key(inputs, system, options, shape)
        done = _find_done(output, parts_dir, key, options, shape, overwrite)
        have = set()
        for rec in done:
            have.update(int(f) for f in rec["frame"])
        todo = [f for f in frames if f not in have]
        report.skipped = [f for f in frames if f in have]
        if report.skipped:
            log.info("%s: %d frame(s) already done, skipped", output, len(report.skipped))
        tasks = [
            FrameTask(inputs, tuple(todo[i : i + batch]), options, shape, key,
                      str(parts_dir / f"{todo[i]:09d}_{len(todo[i : i + batch])}.h5"))
            for i in range(0, len(todo), batch)
        ]  # fmt: skip
        if tasks:
            _run_tasks(tasks, executor, report, progress, shape)
        if report.ok:
            report.records = _finish(output, parts_dir, key, options, shape, frames, overwrite)
    finally:
        lock.release()
    return report


def _iter_positions(system: System, frames):
    traj = system.universe.trajectory
    for f in frames:
        traj[int(f)]
        yield system.universe.atoms.positions.astype(np.float64)


def _run_tasks(tasks, executor, report, progress, shape):
    n = sum(len(t.frames) for t in tasks)
    with contextlib.ExitStack() as stack:
        stack.enter_context(executor)
        log.info(
            "computing %d frame(s) in %d batch(es) on %s grids: %s",
            n, len(tasks), "×".join(map(str, shape)), executor.describe(),
        )  # fmt: skip
        bar = progress_bar(n, progress, unit="frame")
        stack.callback(bar.close)
        if not bar.disable:
            from tqdm.contrib.logging import logging_redirect_tqdm

            stack.enter_context(logging_redirect_tqdm(loggers=[log]))
        for task, outcome in executor.run(run_frames, tasks):
            if isinstance(outcome, FrameOutcome) and outcome.ok:
                report.computed.extend(task.frames)
                log.debug(
                    "frames %d–%d: ΔG %s kJ/mol, %.2f s", task.frames[0], task.frames[-1],
                    ", ".join(f"{v:.2f}" for v in outcome.totals), outcome.seconds,
                )  # fmt: skip
            else:
                # a pool's lost worker reports a pbsolver.jobs.batch.Outcome: same field
                reason = getattr(outcome, "error", None) or "failed"
                log.error("frames %d–%d failed: %s", task.frames[0], task.frames[-1], reason)
                for f in task.frames:
                    report.failed[f] = reason
            bar.update(len(task.frames))


def _stored_shape(output: Path, parts_dir: Path, options: MMPBSAOptions):
    """The grid shape of earlier results made with the same options (None: none there)."""
    candidates = [output] if output.is_file() else []
    if parts_dir.is_dir():
        candidates += sorted(parts_dir.glob("*.h5"))
    mine = json.dumps(options.key_fields(), sort_keys=True)
    for path in candidates:
        try:
            _, attrs = read_results(path)
        except InputError:
            continue
        if attrs.get("options") == mine and "grid_shape" in attrs:
            return tuple(int(s) for s in attrs["grid_shape"])
    return None


def _find_done(output: Path, parts_dir: Path, key: str, options, shape, overwrite: bool) -> list:
    """Records of finished frames (output, then part files); refuse other runs' results."""
    found = []
    if output.is_file():
        try:
            rec, attrs = read_results(output)
        except InputError:
            if not overwrite:
                raise InputError(
                    f"--output {output} exists and is not a pbsolver MM/PBSA results file; "
                    "choose another name or add --overwrite to replace it"
                ) from None
        else:
            if attrs.get("key") == key:
                found.append(rec)
            elif not overwrite:
                raise _mismatch(output, attrs, options, shape)
    if parts_dir.is_dir():
        for part in sorted(parts_dir.glob("*.h5")):
            try:
                rec, attrs = read_results(part)
            except InputError:
                part.unlink(missing_ok=True)  # unreadable: a part is only a cache of work
                continue
            if attrs.get("key") == key:
                found.append(rec)
            elif overwrite:
                part.unlink(missing_ok=True)
            else:
                raise _mismatch(part, attrs, options, shape, parts_of=output)
    return found


def _mismatch(path, attrs, options, shape, parts_of=None) -> InputError:
    """The refusal of results made with other inputs or options, naming the differences."""
    try:
        theirs = json.loads(attrs.get("options", "{}"))
    except (TypeError, ValueError):
        theirs = {}
    mine = options.key_fields()
    diffs = [
        f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} now"
        for k in sorted(set(mine) | set(theirs))
        if theirs.get(k) != mine.get(k)
    ]
    stored = attrs.get("grid_shape")
    if stored is not None and tuple(int(s) for s in stored) != tuple(shape):
        diffs.append(f"grid shape: {tuple(int(s) for s in stored)} there, {tuple(shape)} now")
    what = (
        "other options (" + "; ".join(diffs) + ")"
        if diffs
        else ("other input files or selections (changed, replaced or edited since)")
    )
    where = f"unfinished results of {parts_of} in {path.parent}" if parts_of else f"{path}"
    return InputError(
        f"--output: {where} were made with {what}; rerun with the same inputs and options, "
        "choose another --output, or add --overwrite to discard them"
    )


def _finish(output: Path, parts_dir: Path, key, options, shape, frames, overwrite) -> dict:
    """Assemble the output from itself and the part files; return the selected frames' rows.

    With ``overwrite`` an output of another run is left out (and replaced).
    """
    from pbsolver.io.safety import require_free_space

    done = _find_done(output, parts_dir, key, options, shape, overwrite)
    rec = merge(done)
    if parts_dir.is_dir() and any(parts_dir.glob("*.h5")):
        require_free_space(output, sum(p.stat().st_size for p in parts_dir.glob("*.h5")) * 2)
        write_results(output, rec, _root_attrs(key, options, shape))
        shutil.rmtree(parts_dir, ignore_errors=True)
    elif parts_dir.is_dir():
        shutil.rmtree(parts_dir, ignore_errors=True)
    wanted = np.isin(rec["frame"], frames)
    out = {name: rec[name][wanted] for name in COLUMNS}
    if "per_residue" in rec:
        out["per_residue"] = rec["per_residue"][wanted]
        out["residues"] = rec["residues"]
    return out


__all__ = [
    "BLOCKS",
    "COLUMNS",
    "ENERGY_TERMS",
    "FrameTask",
    "Inputs",
    "MMPBSAOptions",
    "MMPBSAReport",
    "System",
    "block_average",
    "charges_and_radii",
    "compute_frames",
    "frames_shape",
    "load",
    "merge",
    "read_results",
    "records",
    "run_frames",
    "run_key",
    "run_mmpbsa",
    "select_frames",
    "write_results",
    "write_summary",
]
