"""Batch solves: many grids from many files, in this process, a process pool, or on dask.

Every grid is an independent task. Workers read their input themselves (files opened read-only).
One output file per input.

Who writes what
---------------
Each finished grid goes into its own part file. When the workers run on this machine (in this
process, a process pool, or a local dask cluster) the worker that solved a grid writes its part
file itself and sends back only the solver's attributes: compressing and writing a grid costs
more host time than reading it, and done by the one driver process for several GPU workers it
capped the throughput. On a remote dask scheduler (its workers may not
see this file system) workers return NumPy arrays and the driver writes the part files. Only the
driver writes (assembles) the outputs and deletes part files.

Crash safety and resume
-----------------------
For an output ``DIR/NAME`` the driver

1. takes an exclusive lock on ``DIR/.NAME.lock`` (``flock``: dropped by the OS even on
   ``kill -9``, so it never goes stale) and deletes temporary files a killed run left behind;
2. lists what is already done: grids in an existing ``DIR/NAME`` and part files in
   ``DIR/.NAME.parts/`` whose ``solver/@input_key`` matches the current task (a hash of the input
   file's name, size and mtime, the grid name and the options that change the answer);
3. solves the rest; each finished grid goes into its own part file
   ``DIR/.NAME.parts/<hash>.h5``, written under a temporary name and renamed when complete. A
   part file has a single writer: the one task of its grid (in a worker, or the driver for a
   remote cluster). Pool workers, like local dask workers, end as soon as the driver dies,
   so no worker of a killed run writes on while a rerun holds the lock;
4. when the input's last grid is done, assembles ``DIR/NAME`` from the finished grids
   (HDF5 object copies, no recompression) under a temporary name, renames it onto ``DIR/NAME``
   and deletes the part files.

Killed at any moment, the run leaves ``DIR/NAME`` either absent, or the previous complete
version, or the new complete version; finished grids sit in complete part files or in
``DIR/NAME``; a rerun of the same command skips them and solves only the rest. Temporary files
(names starting with a dot, ending in ``.tmp``) are removed by the rerun. Inputs are only ever
opened read-only.

Grids that fail (invalid input, no convergence, a crash, a part file that cannot be written) are
reported and left out of the output, and a rerun tries them again. Grids of the output that a run
did not select (``grids=``) are carried over unchanged; ``force=True`` solves the selected grids
again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from pbsolver.exceptions import InputError, PBSolverError
from pbsolver.jobs.options import GridPhysicsOptions
from pbsolver.options import PhysicsOptions
from pbsolver.progress import progress_bar

log = logging.getLogger("pbsolver")

#: HDF5 file locking for reads: on where the file system supports it, skipped where not.
_LOCKING = "best-effort"
#: Version of the resume key recipe (bump to invalidate old part files).
_KEY_VERSION = 1


# ---------------------------------------------------------------------- options and tasks
@dataclass(frozen=True)
class SolveOptions:
    """Solver options of a batch (picklable; see :class:`pbsolver.Solver`)."""

    method: str = "auto"
    backend: str = "auto"
    rtol: float = 1e-6
    atol: float = 0.0
    maxiter: int | None = None
    dtype: str = "float32"

    def solver_kwargs(self) -> dict:
        """These options as keyword arguments of :class:`~pbsolver.Solver`."""
        kwargs = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**kwargs, "dtype": np.dtype(self.dtype)}

    def make_solver(self):
        """The :class:`~pbsolver.Solver` these options describe (raises InputError if bad)."""
        from pbsolver.solving.solver import Solver

        return Solver(**self.solver_kwargs())

    def key_fields(self) -> dict:
        """Options that change the answer (the backend does not, beyond rounding)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "backend"}


@dataclass(frozen=True)
class MoleculeOptions(GridPhysicsOptions):
    """How a PQR file becomes a problem: grid placement and the physics (picklable).

    The grid and physics fields are :class:`~pbsolver.jobs.options.GridPhysicsOptions`' with
    ``nonlinear`` and ``ion_valence`` added (the defaults of :class:`~pbsolver.PhysicsOptions`,
    which validates them on construction); the fields themselves form the resume key
    (:meth:`key_fields`), unchanged for linear runs.
    """

    nonlinear: bool = PhysicsOptions.nonlinear
    ion_valence: int = PhysicsOptions.ion_valence

    def key_fields(self) -> dict:
        """The fields that form the resume key: the later ones only where not the default.

        Runs made before ``nonlinear`` and ``ion_valence`` existed keep their keys.
        """
        out = asdict(self)
        for name in _LATER_FIELDS:
            if out[name] == getattr(MoleculeOptions, name):
                del out[name]
        return out

    def problem(self, atoms):
        """Build the :class:`~pbsolver.Problem` of ``atoms``."""
        from pbsolver.problem import Problem

        return Problem.from_atoms(atoms, **self.grid_kwargs())


#: MoleculeOptions fields added after resume keys were first written (in keys only when set).
_LATER_FIELDS = ("nonlinear", "ion_valence")


@dataclass(frozen=True)
class Task:
    """One grid to solve (picklable: sent to worker processes)."""

    source: str
    kind: str  # "hdf5" or "pqr"
    grid: str
    key: str
    solve: SolveOptions
    molecule: MoleculeOptions | None = None
    max_points: int | None = None
    want_inputs: bool = False  # keep the input maps (PQR: they exist only in the worker)
    #: Where the worker writes this grid's part file itself (executors on this machine); None:
    #: it returns the arrays and the driver writes the part.
    part_path: str | None = None


@dataclass(frozen=True)
class TaskGroup:
    """Tasks solved together by one worker (:func:`run_stack`; ``run_batch(stack=N)``)."""

    tasks: tuple


@dataclass
class Outcome:
    """What a worker returns for one task (NumPy arrays, plain values)."""

    source: str
    grid: str
    ok: bool
    error: str | None = None
    reaction_field: np.ndarray | None = None
    attrs: dict = field(default_factory=dict)
    arrays: dict | None = None
    solver: dict = field(default_factory=dict)
    residual_norms: list | None = None
    seconds: float = 0.0
    part: str | None = None  # the part file the worker wrote (then no arrays come back)


def input_kind(path) -> str:
    """``"pqr"`` for ``*.pqr`` files, else ``"hdf5"``."""
    return "pqr" if Path(path).suffix.lower() == ".pqr" else "hdf5"


def input_key(source, grid: str, solve: SolveOptions, molecule=None, extra=None) -> str:
    """The resume key of one grid: a hash of the input file's identity and the options.

    The file is identified by name, size and modification time (not read), so editing or
    replacing an input invalidates its finished grids.
    """
    st = Path(source).stat()
    payload = {
        "v": _KEY_VERSION,
        "file": Path(source).name,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "grid": grid,
        "solve": solve.key_fields(),
        "molecule": molecule.key_fields() if molecule is not None else None,
        "extra": extra,
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _failure(task: Task, reason: str, **fields) -> Outcome:
    """The outcome of a task that failed for ``reason`` (``fields``: more of Outcome's)."""
    return Outcome(source=task.source, grid=task.grid, ok=False, error=reason, **fields)


def _fail(item, reason: str):
    """The failure outcome of a task, or the list of them of a TaskGroup."""
    if isinstance(item, TaskGroup):
        return [_failure(t, reason) for t in item.tasks]
    return _failure(item, reason)


def run_task(task: Task) -> Outcome:
    """Solve one task; never raises for bad input or a failed solve (the outcome says why).

    Runs in worker processes: it reads the input itself (read-only). With ``task.part_path``
    it writes the grid's part file itself and returns an outcome without arrays (``part`` set);
    a part it cannot write makes the outcome a failure ("cannot write ..."). Without, it
    returns the arrays for the driver to write.
    """
    start = time.perf_counter()
    try:
        problem, atoms = _read_task(task)
        result = task.solve.make_solver().solve(problem)
    except Exception as exc:  # noqa: BLE001 - a worker reports every failure, the rest go on
        return _failure(task, _reason(exc))
    return _outcome(task, problem, atoms, result, time.perf_counter() - start)


def run_stack(group: TaskGroup) -> list:
    """Solve a group of tasks with one :func:`pbsolver.solve_batch` call; one outcome each.

    Grids of one shape and spacing are solved together (on a GPU as one stacked system, see
    :mod:`pbsolver.solving.batched`); the others, and every grid on the CPU, one after the other.
    Like :func:`run_task` it never raises: a grid that cannot be read fails alone, a failed
    batch solve fails the grids it held. Each outcome's ``seconds`` is the group's time divided
    among its grids.
    """
    from pbsolver.solving.batched import solve_batch

    start = time.perf_counter()
    tasks = list(group.tasks)
    outcomes: list = [None] * len(tasks)
    read = []  # (index, problem, atoms)
    for i, task in enumerate(tasks):
        try:
            problem, atoms = _read_task(task)
        except Exception as exc:  # noqa: BLE001
            outcomes[i] = _failure(task, _reason(exc))
        else:
            read.append((i, problem, atoms))
    if read:
        try:
            results = solve_batch([p for _, p, _ in read], **tasks[0].solve.solver_kwargs())
        except Exception as exc:  # noqa: BLE001
            results = None
            for i, _, _ in read:
                outcomes[i] = _failure(tasks[i], _reason(exc))
        if results is not None:
            share = (time.perf_counter() - start) / len(tasks)
            for (i, problem, atoms), result in zip(read, results, strict=True):
                outcomes[i] = _outcome(tasks[i], problem, atoms, result, share)
    return outcomes


def _read_task(task: Task):
    """(problem, atoms or None) of a task, read from its input (read-only)."""
    from pbsolver.io.hdf5 import read_problem

    if task.kind == "pqr":
        from pbsolver.molecule.atoms import read_pqr

        atoms = read_pqr(task.source)
        return task.molecule.problem(atoms), atoms
    return read_problem(task.source, task.grid, max_points=task.max_points), None


def failure_line(source: str, grid: str, reason: str | None) -> str:
    """``<file>: grid '<grid>': <reason>`` without repeating a prefix the reason already has."""
    where = str(source) if grid == "*" else f"{source}: grid {grid!r}"
    reason = reason or "failed"
    if reason.startswith(where):
        return reason
    if reason.startswith(f"{source}:"):
        reason = reason[len(source) + 1 :].lstrip()
    return f"{where}: {reason}"


def _reason(exc: BaseException) -> str:
    """A failure's reason as the batch reports it."""
    if isinstance(exc, PBSolverError):
        return str(exc)
    if isinstance(exc, MemoryError):
        return "out of memory"
    return f"unexpected {type(exc).__name__}: {exc}"


def _outcome(task: Task, problem, atoms, result, seconds: float) -> Outcome:
    """A solved task's outcome (part file written when ``task.part_path``); never raises."""
    start = time.perf_counter() - seconds
    try:
        from pbsolver.io.hdf5 import problem_arrays, problem_attrs, solver_attrs

        attrs = problem_attrs(problem)
        arrays = problem_arrays(problem) if task.want_inputs else None
        extra = _energy(atoms, problem, result) if atoms is not None else {}
    except Exception as exc:  # noqa: BLE001
        return _failure(task, _reason(exc))
    from pbsolver.solving.solver import SolveResult

    assert isinstance(result, SolveResult)
    rtol = task.solve.rtol
    solver = solver_attrs(
        result,
        rtol=rtol,
        atol=task.solve.atol,
        dtype=task.solve.dtype,
        input_key=task.key,
        **extra,
    )
    if not result.converged:
        return _failure(
            task,
            f"did not converge ({result.reason}) after {result.iterations} iterations of "
            f"{result.method}: relative residual {result.residual:.3g} > rtol {rtol:g}",
            solver=solver,
            seconds=time.perf_counter() - start,
        )
    from pbsolver.arrays import to_numpy

    rf = to_numpy(result.phi_rf)
    outcome = Outcome(
        source=task.source,
        grid=task.grid,
        ok=True,
        reaction_field=rf.astype(np.float64 if task.solve.dtype == "float64" else np.float32),
        attrs=attrs,
        arrays=arrays,
        solver=solver,
        residual_norms=list(result.residual_norms),
        seconds=time.perf_counter() - start,
    )
    if task.part_path is None:
        return outcome
    del result, rf, arrays  # free the solver's arrays (GPU memory too) before the slow write
    reason = _write_part(task.part_path, task.grid, outcome, task.solve.dtype)
    seconds = time.perf_counter() - start
    if reason is not None:
        return _failure(task, reason, solver=solver, seconds=seconds)
    # The arrays stay here: the driver only registers the part file.
    return Outcome(
        source=task.source,
        grid=task.grid,
        ok=True,
        attrs=attrs,
        solver=solver,
        seconds=seconds,
        part=task.part_path,
    )


def _write_part(path, grid: str, outcome: Outcome, dtype: str) -> str | None:
    """Write one finished grid's part file; return None, or why it could not be written.

    The one writer of part files, used by workers (``Task.part_path``) and by the driver
    (remote workers). Written under a temporary name and renamed when complete, so a part file
    that exists is complete.
    """
    from pbsolver.io.atomic import atomic_path
    from pbsolver.io.hdf5 import create_file, write_grid
    from pbsolver.io.safety import require_free_space

    path = Path(path)
    try:
        path.parent.mkdir(exist_ok=True)  # workers race to create it: exist_ok
        arrays = [outcome.reaction_field, *(outcome.arrays or {}).values()]
        require_free_space(path, sum(a.nbytes for a in arrays if a is not None), path)
        with atomic_path(path) as tmp, create_file(tmp) as f:
            write_grid(
                f,
                grid,
                outcome.attrs,
                outcome.arrays,
                reaction_field=outcome.reaction_field,
                solver=outcome.solver,
                residual_norms=outcome.residual_norms,
                result_dtype=np.float64 if dtype == "float64" else np.float32,
            )
    except (OSError, PBSolverError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC and exc.filename
        where = exc.filename if full else path.parent  # a full disk: name the file
        return f"cannot write {where}: {detail}"
    return None


def _energy(atoms, problem, result) -> dict:
    """Polar solvation energy of a molecule (ε_c = ε_in), kJ/mol.

    ½ Σ q φ_rf(r_i); a nonlinear solve's adds the mobile ions' terms
    (:mod:`pbsolver.nonlinear.energy`).
    """
    from pbsolver.molecule.energy import reaction_field_energy, solvation_terms

    if not result.converged:
        return {}
    try:
        if result.newton_steps is not None:
            value = solvation_terms(atoms, problem, result.phi_rf).total
        else:
            value = reaction_field_energy(
                atoms, problem.grid, result.phi_rf, periodic=problem.boundary == "periodic"
            )
    except PBSolverError as exc:  # the energy is a bonus: never fail a solved grid for it
        log.warning("no solvation energy: %s", exc)
        return {}
    return {"solvation_energy_kj_mol": float(value)}


# ---------------------------------------------------------------------- executors
def detect_gpus() -> list[str]:
    """GPU ids this process may use, without initialising CUDA.

    ``$CUDA_VISIBLE_DEVICES`` when set, else the indices ``nvidia-smi`` lists, else none.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [d.strip() for d in env.split(",") if d.strip()]
        out = []
        for d in ids:
            if d.startswith("-"):
                break  # CUDA stops at the first invalid id
            out.append(d)
        return out
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    return [line.strip() for line in proc.stdout.splitlines() if line.strip().isdigit()]


def _threads_per_worker(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def _init_worker(queue, threads):
    """Process-pool initializer: pin one GPU (before CUDA starts) and size numba's pool."""
    _exit_with_parent()
    try:
        gpu = queue.get(timeout=10)
    except Exception:  # noqa: BLE001 - an empty queue means: no pinning
        gpu = None
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    if threads:
        os.environ["NUMBA_NUM_THREADS"] = str(threads)
        if "numba" in sys.modules:
            import numba

            numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))


def _exit_with_parent():
    """End this worker process as soon as its parent (the driver) dies, even by ``kill -9``.

    Workers write part files; one orphaned by a killed driver must not write on while a rerun
    holds the output's lock (a part file has a single writer). Without this, a pool worker
    would also finish its task and then wait forever for the next one.
    """
    import multiprocessing as mp
    import threading

    parent = mp.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    if sentinel is None:
        return

    def watch():
        from multiprocessing.connection import wait

        wait([sentinel])  # ready only at the parent's exit (its end of the pipe closes)
        os._exit(1)

    threading.Thread(target=watch, name="pbsolver-parent-watch", daemon=True).start()


class LocalExecutor:
    """Run tasks one after another in this process."""

    name = "local"
    #: Tasks run on this machine: they write their own part files.
    local_files = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self, fn, tasks: Iterable[Task]) -> Iterator[tuple[Task, Outcome]]:
        """Yield ``(task, outcome)`` as tasks finish."""
        for task in tasks:
            yield task, fn(task)

    def describe(self) -> str:
        """One line for the log."""
        return "in this process"


class ProcessExecutor:
    """A pool of ``workers`` spawned processes, each pinned to one GPU when GPUs exist.

    Parameters
    ----------
    workers : int
        Number of processes.
    gpus : list of str, optional
        GPU ids to deal out (worker i gets ``gpus[i % len(gpus)]``, via
        ``CUDA_VISIBLE_DEVICES``); default :func:`detect_gpus`. Empty: no pinning, and the CPU
        cores are split between the workers (numba threads).
    """

    name = "processes"
    #: Workers run on this machine: they write their own part files.
    local_files = True

    def __init__(self, workers: int, gpus: list[str] | None = None):
        if workers < 1:
            raise InputError(f"workers must be >= 1, got {workers}")
        self.workers = int(workers)
        self.gpus = detect_gpus() if gpus is None else list(gpus)
        self.threads = None if self.gpus else _threads_per_worker(self.workers)
        if self.gpus and self.workers > len(self.gpus):
            log.warning(
                "%d workers share %d GPU(s): several workers per GPU", self.workers, len(self.gpus)
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def describe(self) -> str:
        """One line for the log."""
        if self.gpus:
            pins = ", ".join(self.gpus[i % len(self.gpus)] for i in range(self.workers))
            return f"{self.workers} worker processes on GPUs {pins}"
        return f"{self.workers} worker processes, {self.threads} CPU thread(s) each"

    def run(self, fn, tasks):
        """Yield ``(task, outcome)`` as tasks finish (a dead worker fails its tasks)."""
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        for i in range(self.workers):
            queue.put(self.gpus[i % len(self.gpus)] if self.gpus else None)
        pool = ProcessPoolExecutor(
            self.workers, mp_context=ctx, initializer=_init_worker, initargs=(queue, self.threads)
        )
        try:
            futures = {pool.submit(fn, task): task for task in tasks}
            for fut in as_completed(futures):
                task = futures.pop(fut)
                try:
                    outcome = fut.result()
                except BrokenProcessPool:
                    outcome = _fail(task, "worker process died (killed or crashed)")
                except Exception as exc:  # noqa: BLE001
                    outcome = _fail(task, f"worker error {type(exc).__name__}: {exc}")
                yield task, outcome
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Tasks on a dask.distributed cluster.

    Parameters
    ----------
    address : str, optional
        Scheduler address (``tcp://host:8786``) of an existing cluster.
    local_workers : int, optional
        Start a local cluster of this many worker processes on 127.0.0.1 instead:
        ``dask_cuda.LocalCUDACluster`` (one GPU each) where dask-cuda is installed and GPUs
        exist and the backend is not "cpu", else ``distributed.LocalCluster``.
    backend : str
        The solver backend (a "cpu" batch never starts a CUDA cluster).
    """

    name = "dask"

    def __init__(self, address=None, local_workers=None, backend="auto", gpus=None):
        if (address is None) == (local_workers is None):
            raise InputError("give exactly one of a scheduler address or local_workers")
        if local_workers is not None and local_workers < 1:
            raise InputError(f"local cluster needs >= 1 worker, got {local_workers}")
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise InputError(
                "dask.distributed is not installed: pip install 'pbsolver[dask]'"
            ) from None
        self.address, self.local_workers, self.backend = address, local_workers, backend
        self.gpus = gpus
        self.client = self.cluster = None
        self.kind = None

    def __enter__(self):
        from distributed import Client, LocalCluster

        from pbsolver.backends import may_use_gpus

        if self.address is not None:
            try:
                self.client = Client(self.address, timeout="20s")
            except (OSError, TimeoutError) as exc:
                raise PBSolverError(
                    f"cannot connect to the dask scheduler at {self.address}: {exc}"
                ) from None
            self.kind = f"dask scheduler {self.address}"
            return self
        n = self.local_workers
        gpus = detect_gpus() if self.gpus is None else list(self.gpus)
        use_cuda = bool(gpus) and may_use_gpus(self.backend)
        if use_cuda:
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                LocalCUDACluster = None
                log.warning("dask-cuda is not installed: plain LocalCluster, GPUs not pinned")
            if LocalCUDACluster is not None:
                devices = ",".join(gpus[:n]) if len(gpus) >= n else ",".join(gpus)
                self.cluster = LocalCUDACluster(
                    CUDA_VISIBLE_DEVICES=devices, host="127.0.0.1", dashboard_address=None
                )
                self.kind = f"LocalCUDACluster on GPUs {devices}"
        if self.cluster is None:
            threads = _threads_per_worker(n)
            self.cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                env={"NUMBA_NUM_THREADS": str(threads)},
            )
            self.kind = f"dask LocalCluster of {n} processes"
        self.client = Client(self.cluster)
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(Exception):
            if self.client is not None:
                self.client.close()
        with contextlib.suppress(Exception):
            if self.cluster is not None:
                self.cluster.close()
        return False

    def describe(self) -> str:
        """One line for the log."""
        return self.kind or "dask"

    @property
    def local_files(self) -> bool:
        """Whether workers write their own part files.

        True for a local cluster; False for a scheduler address, whose workers may not see this
        file system (the driver writes their part files).
        """
        return self.address is None

    def run(self, fn, tasks):
        """Yield ``(task, outcome)`` as tasks finish (a lost worker fails its tasks)."""
        from distributed import as_completed

        tasks = list(tasks)
        if not tasks:
            return
        futures = self.client.map(fn, tasks, pure=False)
        owner = {fut.key: task for fut, task in zip(futures, tasks, strict=True)}
        for fut, value in as_completed(futures, with_results=True, raise_errors=False):
            task = owner.pop(fut.key)
            if isinstance(value, BaseException):
                value = _fail(task, f"dask task failed: {type(value).__name__}: {value}")
            fut.release()
            yield task, value


# ---------------------------------------------------------------------- driver
@dataclass
class GridStatus:
    """The fate of one grid in a batch."""

    source: str
    grid: str
    status: str  # "solved", "skipped" (already done), "failed"
    reason: str | None = None
    output: str | None = None
    iterations: int | None = None
    residual: float | None = None
    seconds: float | None = None


@dataclass
class BatchReport:
    """What :func:`run_batch` did."""

    statuses: list[GridStatus] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)

    def _with(self, status):
        return [s for s in self.statuses if s.status == status]

    @property
    def solved(self) -> list[GridStatus]:
        """Grids solved in this run."""
        return self._with("solved")

    @property
    def skipped(self) -> list[GridStatus]:
        """Grids already done by an earlier run."""
        return self._with("skipped")

    @property
    def failed(self) -> list[GridStatus]:
        """Grids (or whole inputs, with grid ``"*"``) that failed, with reasons."""
        return self._with("failed")

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.failed


@dataclass
class _Job:
    """One input file and its output file."""

    source: Path
    output: Path
    kind: str
    grids: list[str] = field(default_factory=list)  # the grids this run is about
    all_grids: list[str] = field(default_factory=list)  # every grid of the input, in order
    keys: dict = field(default_factory=dict)
    in_final: set = field(default_factory=set)
    keep: set = field(default_factory=set)  # unselected grids already in the output: kept
    parts: dict = field(default_factory=dict)  # grid -> part path (done, not yet assembled)
    pending: set = field(default_factory=set)
    lock: object = None

    @property
    def parts_dir(self) -> Path:
        return self.output.with_name(f".{self.output.name}.parts")

    def part_path(self, grid: str) -> Path:
        digest = hashlib.sha1(grid.encode("utf-8")).hexdigest()[:20]
        return self.parts_dir / f"{digest}.h5"


def default_output_name(source) -> str:
    """Output file name of an input in ``--out-dir``: the same name (``.h5`` for PQR)."""
    source = Path(source)
    return f"{source.stem}.h5" if input_kind(source) == "pqr" else source.name


def run_batch(
    jobs: Iterable[tuple],
    *,
    solve: SolveOptions | None = None,
    molecule: MoleculeOptions | None = None,
    executor=None,
    grids: Iterable[str] | None = None,
    force: bool = False,
    results_only: bool = False,
    max_points: int | None = None,
    progress: bool | None = None,
    stack: int = 1,
    overwrite: bool = False,
) -> BatchReport:
    """Solve every grid of every input, writing one output per input; resumable.

    Parameters
    ----------
    jobs : iterable of (input, output)
        Input files (pbsolver HDF5, or ``.pqr``) and their output HDF5 files. Outputs must be
        distinct and differ from every input.
    solve : SolveOptions
        Solver options.
    molecule : MoleculeOptions
        How PQR inputs become grids.
    executor : LocalExecutor, ProcessExecutor or DaskExecutor, optional
        Where tasks run (default: in this process). Entered here.
    grids : iterable of str, optional
        Only these grid names (of HDF5 inputs).
    force : bool
        Ignore earlier results and part files; solve everything again.
    results_only : bool
        Leave the input maps out of the outputs (attributes, ``reaction_field``, ``solver/``).
    max_points : int, optional
        Refuse grids with more nodes (checked from metadata before reading).
    progress : bool or None
        tqdm progress bar: None shows it only on a terminal.
    stack : int
        Grids a worker solves together (consecutive grids, in input order): one
        :func:`pbsolver.solve_batch` call, which on a GPU stacks those of one shape and
        spacing into one system (the CPU solves them one after the other). 1: every grid is
        its own task. Each grid still gets its own part file and its own status.
    overwrite : bool
        Replace existing outputs written from another input (or not by pbsolver); without it
        they are refused (:func:`pbsolver.io.safety.check_results_origin`).

    Returns
    -------
    BatchReport
        Every grid's status; failures carry their reason. Nothing is raised for bad inputs.
    """
    from pbsolver.io.atomic import OutputLock

    solve = solve or SolveOptions()
    molecule = molecule or MoleculeOptions()
    executor = executor or LocalExecutor()
    selected = None if grids is None else list(grids)
    if not isinstance(stack, int | np.integer) or stack < 1:
        raise InputError(f"stack must be a positive integer, got {stack!r}")
    group_size = int(stack)  # ("stack" below is the ExitStack)
    report = BatchReport()
    jobs = [_Job(Path(src), Path(out), input_kind(src)) for src, out in jobs]
    _check_jobs(jobs, overwrite)

    with contextlib.ExitStack() as stack:
        tasks = []
        for job in jobs:
            lock = OutputLock(job.output)
            try:
                lock.acquire()
            except BlockingIOError:
                reason = f"another pbsolver process is writing {job.output}"
            except OSError as exc:
                reason = f"cannot write in {job.output.parent}: {exc.strerror or exc}"
            else:
                reason = None
            if reason is not None:
                log.error("%s: %s", job.source, reason)
                report.statuses.append(GridStatus(str(job.source), "*", "failed", reason))
                continue
            stack.callback(lock.release)
            job.lock = lock
            tasks.extend(
                _plan(
                    job,
                    solve,
                    molecule,
                    selected,
                    force,
                    results_only,
                    max_points,
                    report,
                    workers_write=getattr(executor, "local_files", False),
                )
            )
        active = [j for j in jobs if j.lock is not None]
        by_source = {}
        for job in active:
            by_source[str(job.source)] = job
            if not job.pending:
                _finish(job, report, results_only)
        if tasks:
            stack.enter_context(executor)
            log.info("solving %d grid(s): %s", len(tasks), executor.describe())
            bar = progress_bar(len(tasks), progress, unit="grid")
            stack.callback(bar.close)
            if not bar.disable:
                from tqdm.contrib.logging import logging_redirect_tqdm

                stack.enter_context(logging_redirect_tqdm(loggers=[log]))
            if group_size == 1:
                items, fn = tasks, run_task
            else:
                n = group_size
                items = [TaskGroup(tuple(tasks[i : i + n])) for i in range(0, len(tasks), n)]
                fn = run_stack
            for item, result in executor.run(fn, items):
                pairs = (
                    zip(item.tasks, result, strict=True) if fn is run_stack else [(item, result)]
                )
                for task, outcome in pairs:
                    job = by_source[task.source]
                    _record(job, task, outcome, report, solve, results_only)
                    bar.update(1)
                    job.pending.discard(task.grid)
                    if not job.pending:
                        _finish(job, report, results_only)
    return report


def _check_jobs(jobs, overwrite=False):
    """Refuse outputs that clash, are inputs, special files, badly named, or from another input.

    An existing output written from another input is accepted with ``overwrite``.
    """
    from pbsolver.io.safety import check_output, check_results_origin

    outputs = {}
    for job in jobs:
        out = job.output.resolve()
        if out in outputs:
            raise InputError(
                f"inputs {outputs[out]} and {job.source} would both write {job.output}"
            )
        outputs[out] = job.source
    for job in jobs:
        if job.output.is_dir():
            raise InputError(f"output {job.output} is a directory")
    sources = {}
    for job in jobs:
        sources[job.source.resolve()] = job.source
        with contextlib.suppress(OSError):
            st = job.source.stat()
            sources[(st.st_dev, st.st_ino)] = job.source
    for job in jobs:
        hit = sources.get(job.output.resolve())
        with contextlib.suppress(OSError):
            st = job.output.stat()
            hit = hit or sources.get((st.st_dev, st.st_ino))
        if hit is not None:
            raise InputError(f"output {job.output} is the input {hit}; inputs are never modified")
    for job in jobs:
        check_output(job.output, [j.source for j in jobs])
        check_results_origin(job.output, job.source, overwrite=overwrite)


def _plan(
    job, solve, molecule, selected, force, results_only, max_points, report, workers_write=False
):
    """List the job's grids, find finished ones, and return the tasks still to run.

    ``workers_write``: the tasks carry their part file's path, and workers write it.
    """
    from pbsolver.io.atomic import remove_stale_temps

    remove_stale_temps(job.output.parent, job.output.name)
    remove_stale_temps(job.parts_dir)
    src = str(job.source)
    try:
        if not job.source.is_file():
            raise InputError(f"{job.source}: no such file")
        if job.kind == "pqr":
            names = all_names = [job.source.stem]
            checked = {job.source.stem: None}
        else:
            names, all_names, checked = _hdf5_grids(job.source, selected, max_points, solve)
    except InputError as exc:
        log.error("%s", exc)
        report.statuses.append(GridStatus(src, "*", "failed", str(exc)))
        return []
    extra = {"results_only": results_only}
    mol = molecule if job.kind == "pqr" else None
    job.grids, job.all_grids = names, all_names
    job.keys = {n: input_key(job.source, n, solve, mol, extra) for n in names}
    if force:
        shutil.rmtree(job.parts_dir, ignore_errors=True)
    _find_done(job)
    if force:
        job.in_final.clear()
    tasks = []
    for name in names:
        if checked.get(name):
            log.error("%s", failure_line(src, name, checked[name]))
            report.statuses.append(GridStatus(src, name, "failed", checked[name]))
            continue
        if name in job.in_final or name in job.parts:
            report.statuses.append(GridStatus(src, name, "skipped", output=str(job.output)))
            continue
        job.pending.add(name)
        tasks.append(
            Task(
                source=src,
                kind=job.kind,
                grid=name,
                key=job.keys[name],
                solve=solve,
                molecule=mol,
                max_points=max_points,
                want_inputs=job.kind == "pqr" and not results_only,
                part_path=str(job.part_path(name)) if workers_write else None,
            )
        )
    done = len(job.in_final) + len(job.parts)
    if done:
        log.info("%s: %d grid(s) already done, skipped", job.output, done)
    return tasks


def _hdf5_grids(path, selected, max_points, solve=None):
    """Selected and all grid names of an HDF5 input, and per selected grid its metadata error.

    With ``solve``, a solve that would not fit in memory is such an error too.
    """
    from pbsolver.io.hdf5 import GRIDS, inspect_grid, list_grids, open_hdf5
    from pbsolver.resources import check_memory

    with open_hdf5(path) as f:
        names = list_grids(f)
        if not names:
            raise InputError(f"{path}: /grids holds no grid")
        all_names = names
        if selected is not None:
            missing = [n for n in selected if n not in names]
            if missing:
                raise InputError(f"{path}: no grid {', '.join(map(repr, missing))}")
            names = [n for n in names if n in selected]
        checked = {}
        for name in names:
            try:
                info = inspect_grid(f[GRIDS][name], name, max_points=max_points, filename=path)
                if solve is not None:
                    opts = solve.solver_kwargs()
                    check_memory(
                        info.shape, opts["method"], opts["backend"], opts["dtype"],
                        what=f"{path}: grid {name!r}", nonlinear=info.nonlinear,
                    )  # fmt: skip
            except InputError as exc:
                checked[name] = str(exc)
            else:
                checked[name] = None
    return names, all_names, checked


def _stored_key(group):
    solver = group.get("solver")
    if solver is None or "reaction_field" not in group:
        return None
    key = solver.attrs.get("input_key")
    if isinstance(key, bytes):
        key = key.decode()
    converged = bool(solver.attrs.get("converged", False))
    return key if converged else None


def _find_done(job):
    """Fill ``job.in_final`` and ``job.parts`` with finished grids whose key matches."""
    import h5py

    from pbsolver.io.hdf5 import GRIDS

    if job.output.is_file():
        try:
            with h5py.File(job.output, "r", locking=_LOCKING) as f:
                grids = f.get(GRIDS)
                selected = set(job.grids)
                for name in job.all_grids:
                    if grids is None or name not in grids:
                        continue
                    if name not in selected:
                        job.keep.add(name)  # not asked for this time: left as it is
                    elif _stored_key(grids[name]) == job.keys[name]:
                        job.in_final.add(name)
        except (OSError, KeyError) as exc:
            log.warning("%s exists but is not readable (%s); it will be replaced", job.output, exc)
    if job.parts_dir.is_dir():
        wanted = {job.part_path(n): n for n in job.grids}
        for part in job.parts_dir.glob("*.h5"):
            name = wanted.get(part)
            ok = False
            if name is not None:
                try:
                    with h5py.File(part, "r", locking=_LOCKING) as f:
                        group = f[GRIDS].get(name)
                        ok = group is not None and _stored_key(group) == job.keys[name]
                except (OSError, KeyError):
                    ok = False
            if ok and name not in job.in_final:
                job.parts[name] = part
            elif not ok:
                with contextlib.suppress(OSError):
                    part.unlink()


def _record(job, task, outcome, report, solve, results_only):
    """Register a finished grid's part file (writing it if the worker did not), or its failure."""
    src = str(job.source)
    if outcome.ok and outcome.part is None:
        part = job.part_path(task.grid)
        reason = _write_part(part, task.grid, outcome, solve.dtype)
        if reason is None:
            outcome.part = str(part)
        else:
            outcome.ok, outcome.error = False, reason
    if not outcome.ok:
        log.error("%s", failure_line(src, task.grid, outcome.error))
        report.statuses.append(GridStatus(src, task.grid, "failed", outcome.error))
        return
    job.parts[task.grid] = Path(outcome.part)
    s = outcome.solver
    energy = s.get("solvation_energy_kj_mol")
    log.info(
        "%s: grid %r solved: %s on %s, %d iterations, residual %.2g, %.2f s%s",
        src,
        task.grid,
        s.get("method"),
        s.get("backend"),
        s.get("iterations", 0),
        s.get("residual", float("nan")),
        s.get("seconds", 0.0),
        "" if energy is None else f"; G_solv = {energy:.3f} kJ/mol",
    )
    report.statuses.append(
        GridStatus(
            src,
            task.grid,
            "solved",
            output=str(job.output),
            iterations=s.get("iterations"),
            residual=s.get("residual"),
            seconds=s.get("seconds"),
        )
    )


def _finish(job, report, results_only):
    """Assemble the job's output from finished grids, then drop its part files."""
    if not job.parts:
        if job.in_final:
            report.outputs.append(job.output)
        elif job.parts_dir.is_dir():
            shutil.rmtree(job.parts_dir, ignore_errors=True)
        return
    try:
        _assemble(job, results_only)
    except (OSError, PBSolverError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        reason = f"cannot write {job.output}: {detail}"
        log.error("%s", reason)
        for name in job.parts:
            for st in report.statuses:
                if st.source == str(job.source) and st.grid == name and st.status != "failed":
                    st.status, st.reason = "failed", reason
        return
    shutil.rmtree(job.parts_dir, ignore_errors=True)
    report.outputs.append(job.output)
    log.debug("wrote %s", job.output)


def _assemble(job, results_only):
    import h5py

    from pbsolver.io.atomic import atomic_path
    from pbsolver.io.hdf5 import GRIDS, INPUT_DATASETS, create_file
    from pbsolver.io.safety import SOURCE_ATTR, require_free_space

    # objects are copied without recompression: the files they come from bound the size
    sizes = [p.stat().st_size for p in job.parts.values()]
    if job.in_final or job.keep:
        sizes.append(job.output.stat().st_size)
    if job.kind == "hdf5" and not results_only:
        sizes.append(job.source.stat().st_size)
    require_free_space(job.output, sum(sizes))
    with contextlib.ExitStack() as stack:
        old = None
        if job.in_final or job.keep:
            old = stack.enter_context(h5py.File(job.output, "r", locking=_LOCKING))
        source = None
        if job.kind == "hdf5" and not results_only:
            source = stack.enter_context(h5py.File(job.source, "r", locking=_LOCKING))
        tmp = stack.enter_context(atomic_path(job.output))
        out = stack.enter_context(create_file(tmp))
        out.attrs[SOURCE_ATTR] = str(job.source.resolve())  # see safety.check_results_origin
        dst = out[GRIDS]
        for name in job.all_grids:
            if name in job.in_final or name in job.keep:
                old.copy(old[GRIDS][name], dst, name=name)
            elif name in job.parts:
                with h5py.File(job.parts[name], "r", locking=_LOCKING) as part:
                    part.copy(part[GRIDS][name], dst, name=name)
                if source is not None:
                    src_group = source[GRIDS][name]
                    group = dst[name]
                    for key, value in src_group.attrs.items():
                        if key not in group.attrs:
                            group.attrs[key] = value
                    for key in INPUT_DATASETS:
                        if key in src_group and key not in group:
                            source.copy(src_group[key], group, name=key)


__all__ = [
    "BatchReport",
    "DaskExecutor",
    "GridStatus",
    "LocalExecutor",
    "MoleculeOptions",
    "ProcessExecutor",
    "SolveOptions",
    "Task",
    "default_output_name",
    "detect_gpus",
    "input_key",
    "run_batch",
    "run_task",
]
