"""The ``pbsolver`` command line (click): solve, batch, mmpbsa, info, export, bench.

Exit codes: 0 everything solved; 1 something failed (each failure is named with its reason on
stderr; the rest is still solved and written); 2 usage errors (unknown or bad options, a
missing input path, an output that cannot be written or that is an input). Logs and the
progress bar go to stderr, results (paths written, ``info`` tables) to stdout.

Start-up: numba compiles the CPU kernels once and caches them on disk. This module points
``NUMBA_CACHE_DIR`` at a user cache directory when the installed package directory is not
writable (a system or read-only install), before anything imports numba.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def numba_cache_dir() -> str | None:
    """Make sure numba's kernel cache is writable; return the directory chosen (or None).

    numba caches next to the source (``pbsolver/backends/__pycache__``). When that is not
    writable and ``$NUMBA_CACHE_DIR`` is unset, use ``$XDG_CACHE_HOME/pbsolver/numba`` (default
    ``~/.cache/pbsolver/numba``), or a per-user temporary directory when HOME is read-only too.
    Must run before numba is imported to take effect through the environment; when numba is
    already imported its config is updated as well.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return os.environ["NUMBA_CACHE_DIR"]
    kernels = Path(__file__).resolve().parent / "backends"
    pycache = kernels / "__pycache__"
    in_tree = pycache if pycache.is_dir() else kernels
    if os.access(in_tree, os.W_OK | os.X_OK):
        return None  # numba's default (in-tree __pycache__) works
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    import tempfile

    candidates = [
        Path(base) / "pbsolver" / "numba",
        Path(tempfile.gettempdir()) / f"pbsolver-numba-{os.getuid()}",
    ]
    for cand in candidates:
        if _writable_dir(cand):
            os.environ["NUMBA_CACHE_DIR"] = str(cand)
            if "numba" in sys.modules:
                import numba

                numba.config.CACHE_DIR = str(cand)
            return str(cand)
    return None


numba_cache_dir()

import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402

import click  # noqa: E402

from pbsolver._version import __version__  # noqa: E402
from pbsolver.backends.cpu.firstrun import note_compilation  # noqa: E402
from pbsolver.exceptions import PBSolverError  # noqa: E402
from pbsolver.options import SURFACES, PhysicsOptions  # noqa: E402

log = logging.getLogger("pbsolver")

METHODS = ("auto", "sor", "jacobi", "multigrid", "mgcg")
BACKENDS = ("auto", "cpu", "cuda")
MAP_SUFFIXES = (".dx", ".dx.gz", ".mrc", ".map", ".ccp4")
#: Commands that live in other modules, imported only when run: name -> (module, attribute,
#: short help shown in ``pbsolver --help`` without importing the module).
LAZY_COMMANDS = {
    "bench": ("pbsolver.bench", "bench", "Benchmark kernels and solvers (table + JSON)."),
    "apbs": ("pbsolver.apbs.cli", "apbs", "Run an APBS input file (.in) with pbsolver."),
}


# ---------------------------------------------------------------------- click plumbing
class _PBGroup(click.Group):
    """Click group with lazily imported commands and one-line errors, no tracebacks."""

    def list_commands(self, ctx):
        names = set(super().list_commands(ctx))
        names.update(n for n in LAZY_COMMANDS if _lazy_available(n))
        return sorted(names)

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is not None or name not in LAZY_COMMANDS or not _lazy_available(name):
            return cmd
        import importlib

        module, attr, _ = LAZY_COMMANDS[name]
        # Import errors from inside the module propagate: they are bugs, not absence.
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS and name not in self.commands:
                rows.append((name, LAZY_COMMANDS[name][2]))  # no import just for --help
                continue
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, cmd.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        prog = prog_name or "pbsolver"
        try:
            rv = super().main(
                args, prog_name=prog, complete_var=complete_var, standalone_mode=False, **extra
            )
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else prog
            click.echo(
                f"{where}: usage error: {_one_line(exc.format_message())} (see '{where} --help')",
                err=True,
            )
            code = 2
        except click.ClickException as exc:
            click.echo(f"{prog}: error: {_one_line(exc.format_message())}", err=True)
            code = exc.exit_code
        except (click.Abort, KeyboardInterrupt):
            click.echo(f"{prog}: interrupted", err=True)
            code = 130
        except (PBSolverError, MemoryError, OSError) as exc:
            click.echo(f"{prog}: error: {_error_text(exc)}", err=True)
            code = 1
        else:
            code = rv if isinstance(rv, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)


def _lazy_available(name) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(LAZY_COMMANDS[name][0]) is not None
    except ImportError:
        return False


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _error_text(exc: BaseException) -> str:
    """One line for a failure the command reports with exit code 1."""
    if isinstance(exc, PBSolverError):
        return _one_line(str(exc))
    if isinstance(exc, MemoryError):
        return "out of memory"
    return _os_error(exc)


def _os_error(exc: OSError) -> str:
    parts = [exc.strerror or str(exc)]
    if exc.filename:
        parts.insert(0, f"{exc.filename}:")
    return _one_line(" ".join(parts))


class _Formatter(logging.Formatter):
    def format(self, record):
        msg = record.getMessage()
        if record.exc_info and record.levelno <= logging.DEBUG:
            msg += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.ERROR:
            return f"pbsolver: error: {msg}"
        if record.levelno >= logging.WARNING:
            return f"pbsolver: warning: {msg}"
        return f"pbsolver: {msg}"


def _setup_logging(verbose: int, quiet: int) -> None:
    level = logging.INFO - 10 * verbose + 10 * quiet
    level = min(max(level, logging.DEBUG), logging.CRITICAL)
    logger = logging.getLogger("pbsolver")
    for h in list(logger.handlers):
        if getattr(h, "_pbsolver_cli", False):
            logger.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler._pbsolver_cli = True
    handler.setFormatter(_Formatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


# ---------------------------------------------------------------------- shared options
_POSITIVE = click.FloatRange(min=0.0, min_open=True)
_NONNEGATIVE = click.FloatRange(min=0.0)


def _with_options(f, options):
    """``f`` decorated with ``options`` (click.option decorators), listed in this order."""
    for opt in reversed(options):
        f = opt(f)
    return f


def _dataset_option(text: str):
    """``--dataset``: which map of a grid to write (``solve`` to a map, ``export``)."""
    return click.option("--dataset", default="reaction_field", show_default=True, help=text)


def _temperature_option(text: str):
    """``--temperature`` of the kT/e unit of potentials in a map."""
    return click.option(
        "--temperature",
        type=_POSITIVE,
        default=PhysicsOptions.temperature,
        show_default=True,
        help=text,
    )


def _count_option(*names: str, minimum: int, default: int | None, text: str, **extra):
    """An integer option of at least ``minimum``; a default other than None shown in --help."""
    return click.option(
        *names,
        type=click.IntRange(min=minimum),
        default=default,
        show_default=default is not None,
        help=text,
        **extra,
    )


def _path_option(*names: str, text: str, **extra):
    """A file-path option (a :class:`~pathlib.Path`; None when not given, unless ``extra``)."""
    return click.option(*names, type=click.Path(path_type=Path), help=text, **extra)


def _unset_float_option(name: str, text: str):
    """A float option that is None when not given (the library's default applies then)."""
    return click.option(name, type=float, default=None, help=text)


def _backend_option(name: str, default: str, text: str):
    """A choice of backend (``--backend``, mmpbsa's ``--maps-backend``)."""
    return click.option(
        name, type=click.Choice(BACKENDS), default=default, show_default=True, help=text
    )


def _pool_options(f):
    """``--workers`` and ``--gpus`` of the commands that run a process pool (see _gpu_ids)."""
    opts = [
        _count_option(
            "--workers",
            "-j",
            minimum=1,
            default=1,
            text="Worker processes (one GPU each when GPUs exist).",
        ),
        click.option(
            "--gpus",
            default=None,
            metavar="IDS",
            help="GPU ids for the workers, e.g. 0,1 (default: $CUDA_VISIBLE_DEVICES or all).",
        ),
    ]
    return _with_options(f, opts)


def _gpu_ids(ctx, gpus: str | None) -> list[str] | None:
    """The GPU ids of ``--gpus`` ("0,1" -> ["0", "1"]; None: not given)."""
    if gpus is None:
        return None
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids or not all(g.isdigit() for g in ids):
        raise click.UsageError(f"--gpus must be comma-separated GPU ids, got {gpus!r}", ctx)
    return ids


_AUTO_BACKEND = "auto: CUDA when a GPU is usable, else CPU."


def _solver_options(f):
    opts = [
        click.option(
            "--method",
            default="auto",
            show_default=True,
            help="Iteration: auto (by backend and grid size), sor, jacobi, multigrid, mgcg.",
        ),
        _backend_option("--backend", "auto", _AUTO_BACKEND),
        click.option(
            "--rtol",
            type=click.FloatRange(min=0.0, max=1.0),
            default=1e-6,
            show_default=True,
            help="Stop at relative residual ‖b−Aφ‖/‖b‖ ≤ rtol.",
        ),
        click.option(
            "--atol",
            type=_NONNEGATIVE,
            default=0.0,
            show_default=True,
            help="Absolute residual tolerance.",
        ),
        click.option(
            "--maxiter", type=click.IntRange(min=1), default=None, help="Most iterations/cycles."
        ),
        click.option(
            "--dtype",
            type=click.Choice(["float32", "float64"]),
            default="float32",
            show_default=True,
            help="Precision of the iteration (results stored in this precision).",
        ),
        click.option(
            "--max-points",
            type=click.IntRange(min=27),
            default=None,
            help="Refuse grids with more nodes (default $PBSOLVER_MAX_POINTS or 1024³).",
        ),
        click.option(
            "--grid",
            "grids",
            multiple=True,
            metavar="NAME",
            help="Solve only this grid of an HDF5 input (repeatable).",
        ),
        click.option(
            "--force", is_flag=True, help="Solve again grids that an earlier run finished."
        ),
        click.option(
            "--results-only",
            is_flag=True,
            help="Write only reaction_field and solver/ (not the input maps) to the output.",
        ),
        click.option(
            "--overwrite",
            is_flag=True,
            help="Replace an existing HDF5 output written from another input (refused without).",
        ),
    ]
    return _with_options(f, opts)


#: The options of a PQR input's molecule: parameter -> (click type, default, help). The physics
#: defaults are :class:`PhysicsOptions`'.
_MOLECULE_OPTIONS = {
    "spacing": (_POSITIVE, 0.5, "grid spacing, Å."),
    "margin": (_NONNEGATIVE, 8.0, "space between the molecule and the box, Å."),
    "eps_in": (_POSITIVE, PhysicsOptions.eps_in, "solute ε."),
    "eps_out": (_POSITIVE, PhysicsOptions.eps_out, "solvent ε."),
    "ionic_strength": (_NONNEGATIVE, PhysicsOptions.ionic_strength, "ionic strength, mol/L."),
    "surface": (click.Choice(list(SURFACES)), PhysicsOptions.surface, "dielectric boundary."),
    "probe_radius": (_NONNEGATIVE, PhysicsOptions.probe_radius, "solvent probe radius, Å."),
    "nonlinear": (
        bool,
        PhysicsOptions.nonlinear,
        "solve the nonlinear Poisson–Boltzmann equation (APBS npbe); the energy adds the ions' "
        "terms.",
    ),
    "ion_valence": (
        click.IntRange(min=1),
        PhysicsOptions.ion_valence,
        "z of the z:z salt (--nonlinear; --ionic-strength is I = z²c).",
    ),
}
_MOLECULE_PARAMS = tuple(_MOLECULE_OPTIONS)


def _option_name(param: str) -> str:
    return f"--{param.replace('_', '-')}"


def _table_options(params, prefix=""):
    """A decorator adding the options ``params`` of :data:`_MOLECULE_OPTIONS`, help prefixed."""

    def decorate(f):
        opts = []
        for param in params:
            kind, default, text = _MOLECULE_OPTIONS[param]
            help_text = prefix + (text if prefix else text[:1].upper() + text[1:])
            if kind is bool:
                opts.append(click.option(_option_name(param), is_flag=True, default=default,
                                         help=help_text))  # fmt: skip
            else:
                opts.append(click.option(_option_name(param), type=kind, default=default,
                                         show_default=True, help=help_text))  # fmt: skip
        return _with_options(f, opts)

    return decorate


#: The molecule options of the commands that read a PQR input.
_molecule_options = _table_options(_MOLECULE_PARAMS, "PQR input: ")


def _make_options(ctx, kw):
    """SolveOptions and MoleculeOptions from the parsed options; bad values are usage errors."""
    from pbsolver.exceptions import BackendUnavailableError
    from pbsolver.jobs.batch import MoleculeOptions, SolveOptions

    solve = SolveOptions(
        method=kw["method"],
        backend=kw["backend"],
        rtol=kw["rtol"],
        atol=kw["atol"],
        maxiter=kw["maxiter"],
        dtype=kw["dtype"],
    )
    if kw["rtol"] == 0 and kw["atol"] == 0:
        raise click.UsageError(
            "--rtol 0 with --atol 0 can never be met; give a positive --rtol or --atol", ctx
        )
    try:
        # validates method and backend names without solving; a backend asked for by name
        # must be usable here
        with _usage_errors(ctx):
            solve.make_solver()
    except BackendUnavailableError as exc:
        raise click.UsageError(f"--backend {kw['backend']}: {exc}", ctx) from None
    with _usage_errors(ctx):  # the physics is validated in one place (PhysicsOptions)
        molecule = MoleculeOptions(**{k: kw[k] for k in _MOLECULE_PARAMS})
    return solve, molecule


def _warn_ignored_molecule_options(ctx, inputs):
    from pbsolver.jobs.batch import input_kind

    if any(input_kind(p) == "pqr" for p in inputs):
        return
    given = [
        _option_name(p)
        for p in _MOLECULE_PARAMS
        if ctx.get_parameter_source(p) == click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        log.warning("%s only apply to PQR input; ignored for HDF5 input", ", ".join(given))


def _check_writable_dir(ctx, directory: Path, what: str):
    if not directory.is_dir():
        raise click.UsageError(f"{what}: directory {directory} does not exist", ctx)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise click.UsageError(f"{what}: directory {directory} is not writable", ctx)


def _check_output_dir(ctx, output: Path):
    _check_writable_dir(ctx, output.parent if str(output.parent) else Path("."), "--output")


@contextlib.contextmanager
def _usage_errors(ctx):
    """An InputError raised inside is a usage error of the command (exit code 2)."""
    from pbsolver.exceptions import InputError

    try:
        yield
    except InputError as exc:
        raise click.UsageError(str(exc), ctx) from None


def _check_input_exists(ctx, path: Path, param="INPUT"):
    if not path.exists():
        raise click.UsageError(f"{param}: {path} does not exist", ctx)
    if path.is_dir():
        raise click.UsageError(f"{param}: {path} is a directory, not a file", ctx)


def _summarise(report) -> int:
    """Print the outputs to stdout and one summary line to stderr; return the exit code.

    Each failure has already been logged on its own line (``<file>: grid '<name>': <reason>``).
    An input that failed as a whole (grid ``"*"``: unreadable, refused, locked by another
    process) counts with all of its grids.
    """
    for path in report.outputs:
        click.echo(str(path))
    grid_failures = [st for st in report.failed if st.grid != "*"]
    input_failures = [st for st in report.failed if st.grid == "*"]
    lost = sum(_count_grids(st.source) for st in input_failures)
    n_failed = len(grid_failures) + lost
    total = len(report.solved) + len(report.skipped) + n_failed
    parts = [f"{len(report.solved)} solved"]
    if report.skipped:
        parts.append(f"{len(report.skipped)} already done")
    if not report.failed:
        log.info("%s (%d grid(s) in all)", ", ".join(parts), total)
        return 0
    inputs = f" ({len(input_failures)} input(s) not processed)" if input_failures else ""
    log.error("%d of %d grid(s) failed%s; %s", n_failed, total, inputs, ", ".join(parts))
    return 1


def _count_grids(source) -> int:
    """Grids of an input that failed as a whole (0 when the file cannot be listed)."""
    from pbsolver.jobs.batch import input_kind

    if input_kind(source) == "pqr":
        return 1
    try:
        from pbsolver.io.hdf5 import list_grids

        return len(list_grids(source))
    except (PBSolverError, OSError):
        return 0


def _one_grid_error(ctx, input, count: int) -> click.UsageError:
    return click.UsageError(
        f"a map output holds one grid, {input} has {count}; choose one with --grid NAME or "
        "write HDF5",
        ctx,
    )


def _check_solve_request(ctx, input, output, fmt, dataset, kw):
    """Refuse, before anything is solved, what could only fail after the solve.

    Map output: one grid only, a dataset the grid will have, no --results-only. HDF5 output: no
    map-only options. Bad files raise InputError (exit 1), bad requests are usage errors.
    """
    from pbsolver.io.hdf5 import GRID_DATASETS, RESULT, inspect_hdf5
    from pbsolver.jobs.batch import input_kind

    source = click.core.ParameterSource.COMMANDLINE
    if fmt != "map":
        given = [
            f"--{p}" for p in ("dataset", "temperature") if ctx.get_parameter_source(p) == source
        ]
        if given:
            raise click.UsageError(
                f"{' and '.join(given)} only apply to a map output (.dx, .dx.gz, .mrc); "
                f"{output} is HDF5",
                ctx,
            )
        return
    if kw["results_only"]:
        raise click.UsageError("--results-only is for HDF5 output; a map holds one dataset", ctx)
    known = (*GRID_DATASETS, "potential")
    if dataset not in known:
        raise click.UsageError(f"--dataset {dataset!r}: not one of {', '.join(known)}", ctx)
    if input_kind(input) == "pqr":
        have = {"epsilon_x", "epsilon_y", "epsilon_z", "phi_coulomb", "boundary_values"}
        if kw["ionic_strength"] > 0:
            have.add("kappa2")
        grid = input.stem
    else:
        entries = inspect_hdf5(input, max_points=kw["max_points"])
        names = [n for n, _, _ in entries]
        selected = kw["grids"]
        if selected:
            missing = [n for n in selected if n not in names]
            if missing:
                raise click.UsageError(
                    f"--grid: {input} has no grid {', '.join(map(repr, missing))}", ctx
                )
            entries = [e for e in entries if e[0] in selected]
        if len(entries) != 1:
            raise _one_grid_error(ctx, input, len(entries))
        grid, info, err = entries[0]
        if info is None:
            from pbsolver.exceptions import InputError

            raise InputError(err)
        have = set(info.datasets)
    have |= {RESULT, "potential"}
    if dataset not in have:
        raise click.UsageError(
            f"--dataset {dataset!r}: grid {grid!r} of {input} will have no such dataset (it will "
            f"have {', '.join(sorted(have))})",
            ctx,
        )


# ---------------------------------------------------------------------- commands
@click.group(
    cls=_PBGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="pbsolver")
@click.option("-v", "--verbose", count=True, help="More log output (repeatable).")
@click.option("-q", "--quiet", count=True, help="Less log output (repeatable); no progress bar.")
@click.pass_context
def main(ctx, verbose, quiet):
    """pbsolver: linearised Poisson–Boltzmann reaction fields on 3D grids (GPU and CPU).

    Units: Å, e, kJ/mol; potentials in kJ/mol/e in HDF5 files, kT/e in DX/MRC maps.
    """
    _setup_logging(verbose, quiet)
    ctx.ensure_object(dict)
    ctx.obj["quiet"] = quiet
    if quiet:  # every bar left to its default, also in worker processes (pbsolver.progress)
        from pbsolver.progress import ENV

        os.environ[ENV] = "0"


@main.command()
@click.argument("input", type=click.Path(path_type=Path))
@_path_option(
    "-o",
    "--output",
    text="Output: HDF5 (.h5/.hdf5), or a map of one grid (.dx, .dx.gz, .mrc).",
    required=True,
)
@_solver_options
@_molecule_options
@_dataset_option("Map output: the dataset to write (reaction_field, potential = φ_c + φ_rf, ...).")
@_temperature_option("Map output: temperature of the kT/e unit, K.")
@click.pass_context
def solve(ctx, input, output, dataset, temperature, **kw):
    """Solve every grid of INPUT (an HDF5 grid file, or a PQR molecule) into OUTPUT.

    Resumable: rerunning the same command skips grids already solved.
    """
    from pbsolver.io.safety import check_output
    from pbsolver.jobs.batch import run_batch

    _check_input_exists(ctx, input)
    _check_output_dir(ctx, output)
    with _usage_errors(ctx):  # every check before the first solve
        fmt = check_output(output, [input], formats=("hdf5", "map"), what="--output")
    solve_opts, molecule = _make_options(ctx, kw)
    _check_solve_request(ctx, input, output, fmt, dataset, kw)
    _warn_ignored_molecule_options(ctx, [input])
    progress = False if ctx.obj.get("quiet") else None
    common = {
        "solve": solve_opts,
        "molecule": molecule,
        "grids": kw["grids"] or None,
        "force": kw["force"],
        "max_points": kw["max_points"],
        "progress": progress,
    }
    note_compilation(solve_opts.backend)
    if fmt == "map":
        return _solve_to_map(ctx, input, output, dataset, temperature, common, kw)
    with _usage_errors(ctx):
        report = run_batch(
            [(input, output)],
            results_only=kw["results_only"],
            overwrite=kw["overwrite"],
            **common,
        )
    return _summarise(report)


def _is_map(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(s) for s in MAP_SUFFIXES)


def _solve_to_map(ctx, input, output, dataset, temperature, common, kw):
    """Solve one grid and write one of its maps (DX/MRC), through a scratch HDF5 file."""
    import tempfile

    from pbsolver.jobs.batch import run_batch

    with tempfile.TemporaryDirectory(prefix="pbsolver-") as tmp:
        scratch = Path(tmp) / "result.h5"
        report = run_batch([(input, scratch)], results_only=False, **common)
        code = 0
        if report.failed:
            code = _summarise(report)
        if report.solved or report.skipped:
            from pbsolver.io.hdf5 import list_grids

            names = list_grids(scratch)
            if len(names) != 1:
                raise _one_grid_error(ctx, input, len(names))
            _export(scratch, names[0], dataset, output, None, temperature, "double", kw)
            click.echo(str(output))
        return code


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out-dir",
    "-d",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Directory for the outputs: one per input, same name (PQR: NAME.h5). Created if missing.",
)
@_pool_options
@click.option("--scheduler", default=None, metavar="ADDRESS", help="dask.distributed scheduler.")
@_count_option(
    "--local-cluster",
    minimum=1,
    default=None,
    metavar="N",
    text="Start a local dask cluster of N workers (dask-cuda's when installed and GPUs exist).",
)
@_count_option(
    "--stack",
    minimum=1,
    default=1,
    metavar="N",
    text="Grids a worker solves together: on a GPU, those of one shape as one stacked system "
    "(pb.solve_batch); on the CPU one after the other.",
)
@_solver_options
@_molecule_options
@click.pass_context
def batch(ctx, inputs, out_dir, workers, gpus, scheduler, local_cluster, stack, **kw):
    """Solve many grid files (HDF5 or PQR) into --out-dir; resumable and crash-safe.

    Every finished grid is kept on disk at once; killed at any moment (even kill -9), a rerun of
    the same command skips what is done. Workers on this machine write the part files of the
    grids they solve; only this process writes the outputs.
    """
    from pbsolver.jobs.batch import (
        DaskExecutor,
        LocalExecutor,
        ProcessExecutor,
        default_output_name,
        run_batch,
    )

    for path in inputs:
        _check_input_exists(ctx, path, "INPUTS")
    if scheduler is not None and local_cluster is not None:
        raise click.UsageError("give --scheduler or --local-cluster, not both", ctx)
    if (scheduler is not None or local_cluster is not None) and workers != 1:
        raise click.UsageError("--workers is for the process pool; not with dask options", ctx)
    gpu_list = _gpu_ids(ctx, gpus)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.UsageError(
            f"--out-dir: cannot create {out_dir}: {_os_error(exc)}", ctx
        ) from None
    _check_writable_dir(ctx, out_dir, "--out-dir")
    solve_opts, molecule = _make_options(ctx, kw)
    _warn_ignored_molecule_options(ctx, inputs)
    jobs = [(p, out_dir / default_output_name(p)) for p in inputs]
    note_compilation(solve_opts.backend)
    with _usage_errors(ctx):
        if scheduler is not None or local_cluster is not None:
            executor = DaskExecutor(
                address=scheduler,
                local_workers=local_cluster,
                backend=solve_opts.backend,
                gpus=gpu_list,
            )
        elif workers > 1:
            executor = ProcessExecutor(workers, gpus=gpu_list)
        else:
            executor = LocalExecutor()
        report = run_batch(
            jobs,
            solve=solve_opts,
            molecule=molecule,
            executor=executor,
            grids=kw["grids"] or None,
            force=kw["force"],
            results_only=kw["results_only"],
            max_points=kw["max_points"],
            progress=False if ctx.obj.get("quiet") else None,
            stack=stack,
            overwrite=kw["overwrite"],
        )
    return _summarise(report)


@main.command()
@click.argument("file", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--max-points", type=click.IntRange(min=27), default=None, hidden=True)
@click.pass_context
def info(ctx, file, as_json, max_points):
    """Describe FILE (HDF5 grid file, DX map or PQR), or this installation without FILE.

    Exit status 1 when FILE or one of its grids is invalid.
    """
    if file is None:
        data = _install_info()
        _emit(data, as_json)
        return 0
    _check_input_exists(ctx, file, "FILE")
    name = file.name.lower()
    if name.endswith((".dx", ".dx.gz")):
        from pbsolver.io.dx import read_dx

        values, grid = read_dx(file, potential=False, max_points=max_points)
        data = {
            "file": str(file),
            "format": "OpenDX",
            **_grid_dict(grid),
            "min": float(values.min()),
            "max": float(values.max()),
        }
        _emit(data, as_json)
        return 0
    if name.endswith(".pqr"):
        from pbsolver.molecule.atoms import read_pqr

        atoms = read_pqr(file)
        data = {"file": str(file), "format": "PQR", **_atoms_dict(atoms)}
        _emit(data, as_json)
        return 0
    return _info_hdf5(file, as_json, max_points)


def _install_info():
    import platform

    from pbsolver.backends import cuda_available

    versions = {"pbsolver": __version__, "python": platform.python_version()}
    for mod in ("numpy", "numba", "h5py", "gridData", "click", "tqdm", "cupy", "distributed"):
        try:
            from importlib.metadata import version

            dist = {"gridData": "GridDataFormats", "cupy": None}.get(mod, mod)
            if mod == "cupy":
                m = __import__("cupy")
                versions[mod] = m.__version__
            else:
                versions[mod] = version(dist)
        except Exception:  # noqa: BLE001 - optional packages
            continue
    import numba

    return {
        "versions": versions,
        "numba_cache_dir": numba.config.CACHE_DIR or "(next to the package sources)",
        "cuda_usable": cuda_available(),
        "cpu_threads": numba.config.NUMBA_NUM_THREADS,
    }


def _grid_dict(grid):
    return {
        "shape": list(grid.shape),
        "spacing": list(grid.spacing),
        "origin": list(grid.origin),
    }


def _atoms_dict(atoms):
    import numpy as np

    pos = np.asarray(atoms.positions)
    return {
        "atoms": int(len(pos)),
        "net_charge": float(np.sum(atoms.charges)),
        "extent_min": pos.min(axis=0).tolist() if len(pos) else None,
        "extent_max": pos.max(axis=0).tolist() if len(pos) else None,
    }


def _info_hdf5(file, as_json, max_points):
    from pbsolver.io.hdf5 import inspect_hdf5, open_hdf5

    with open_hdf5(file) as f:
        root = {k: _plain(v) for k, v in f.attrs.items()}
    entries = inspect_hdf5(file, max_points=max_points)
    grids = []
    bad = 0
    for name, gi, err in entries:
        if gi is None:
            bad += 1
            grids.append({"name": name, "error": err})
            continue
        grids.append(
            {
                "name": name,
                **_grid_dict(gi.grid),
                "eps_cavity": gi.eps_cavity,
                "boundary": gi.boundary,
                "datasets": {
                    k: {"shape": list(s), "dtype": d} for k, (s, d) in gi.datasets.items()
                },
                "solved": gi.solved,
                "solver": {k: _plain(v) for k, v in gi.solver.items()},
            }
        )
        if gi.nonlinear:  # linear grids' entries stay as they were
            grids[-1]["nonlinear"] = {"ion_valence": gi.ion_valence,
                                      "temperature_K": gi.temperature}  # fmt: skip
    data = {"file": str(file), "format": "pbsolver HDF5", "attrs": root, "grids": grids}
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        layout = root.get("pbsolver_layout", "?")
        creator = root.get("creator", "?")
        click.echo(f"{file}: pbsolver HDF5 layout {layout}, {creator}, {len(grids)} grid(s)")
        for g in grids:
            if "error" in g:
                click.echo(f"  {g['name']}: INVALID: {g['error']}")
                continue
            shape = "×".join(map(str, g["shape"]))
            h = g["spacing"]
            hs = f"{h[0]:g}" if h[0] == h[1] == h[2] else "/".join(f"{v:g}" for v in h)
            origin = ", ".join(f"{v:g}" for v in g["origin"])
            eps = "faces" if "epsilon_x" in g["datasets"] else "nodes"
            line = (
                f"  {g['name']}: {shape}, h={hs} Å, origin=({origin}), ε {eps}, "
                f"eps_cavity={g['eps_cavity']}, {g['boundary']}"
            )
            if "kappa2" in g["datasets"]:
                line += ", salt"
            if "nonlinear" in g:
                nl = g["nonlinear"]
                line += f", nonlinear (z={nl['ion_valence']}, {nl['temperature_K']:g} K)"
            s = g["solver"]
            if g["solved"]:
                line += (
                    f"; solved: {s.get('method')}/{s.get('backend')}, "
                    f"{s.get('iterations')} it, residual {_fmt(s.get('residual'))}, "
                    f"{'converged' if s.get('converged') else 'NOT converged'}, "
                    f"{_fmt(s.get('seconds'))} s"
                )
                if "solvation_energy_kj_mol" in s:
                    line += f", G_solv {s['solvation_energy_kj_mol']:.3f} kJ/mol"
            click.echo(line)
    if bad:
        log.error("%d of %d grid(s) in %s are invalid", bad, len(grids), file)
        return 1
    return 0


def _fmt(v):
    return f"{v:.3g}" if isinstance(v, float) and math.isfinite(v) else str(v)


def _plain(v):
    import numpy as np

    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def _emit(data, as_json):
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    for key, value in data.items():
        if isinstance(value, dict):
            click.echo(f"{key}:")
            for k, v in value.items():
                click.echo(f"  {k}: {v}")
        else:
            click.echo(f"{key}: {value}")


@main.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--grid", "grid", default=None, metavar="NAME", help="Grid (default: the only one).")
@_dataset_option(
    "reaction_field, potential (φ_c + φ_rf), phi_coulomb, epsilon, epsilon_x, kappa2, ..."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["dx", "dx.gz", "mrc"]),
    default=None,
    help="Map format (default: from the output name).",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
@_temperature_option("Temperature of the kT/e unit of potentials, K.")
@click.option(
    "--dx-type",
    type=click.Choice(["double", "float"]),
    default="double",
    show_default=True,
    help="OpenDX array type (PyMOL needs double).",
)
@click.option("--max-points", type=click.IntRange(min=27), default=None, hidden=True)
@click.pass_context
def export(ctx, file, grid, dataset, fmt, output, temperature, dx_type, max_points):
    """Export one map of an HDF5 grid file as OpenDX (APBS layout, kT/e) or MRC.

    Potentials (reaction_field, potential, phi_coulomb, boundary_values) are written in kT/e at
    --temperature; other maps (ε, κ̄²) unchanged.
    """
    _check_input_exists(ctx, file, "FILE")
    _check_output_dir(ctx, output)
    if fmt is None:
        name = output.name.lower()
        if name.endswith(".dx.gz"):
            fmt = "dx.gz"
        elif name.endswith(".dx"):
            fmt = "dx"
        elif name.endswith((".mrc", ".map", ".ccp4")):
            fmt = "mrc"
        else:
            raise click.UsageError(
                f"cannot tell the format of {output.name}; use --format dx|dx.gz|mrc", ctx
            )
    if fmt == "dx.gz" and not output.name.endswith(".gz"):
        output = output.with_name(output.name + ".gz")
    _check_export_output(ctx, file, output, fmt)
    _export(file, grid, dataset, output, fmt, temperature, dx_type, {"max_points": max_points})
    click.echo(str(output))
    return 0


def _check_export_output(ctx, file, output, fmt):
    """The map output: a map suffix matching ``fmt``, a regular file, not the input."""
    from pbsolver.io.safety import check_output

    with _usage_errors(ctx):
        check_output(output, [file], formats=("map",), what="--output")
    name = output.name.lower()
    named = "dx.gz" if name.endswith(".dx.gz") else "dx" if name.endswith(".dx") else "mrc"
    if named != fmt:
        raise click.UsageError(
            f"--format {fmt} does not match the output name {output.name} ({named})", ctx
        )


# ---------------------------------------------------------------------- mmpbsa
@main.command()
@click.argument("topology", type=click.Path(path_type=Path))
@click.argument("trajectories", nargs=-1, type=click.Path(path_type=Path))
@click.option("--ligand", required=True, metavar="SEL", help="MDAnalysis selection of the ligand.")
@click.option(
    "--receptor",
    default=None,
    metavar="SEL",
    help="MDAnalysis selection of the receptor (default: every atom not in the ligand).",
)
@_path_option(
    "--pqr",
    text="PQR with the charges and radii of TOPOLOGY's atoms, same order (when TOPOLOGY has none).",
)
@_table_options(
    ("spacing", "margin", "surface", "eps_in", "eps_out", "ionic_strength", "probe_radius")
)
@_temperature_option("Temperature, K.")
@click.option(
    "--nonpolar/--no-nonpolar",
    default=True,
    show_default=True,
    help="Add the nonpolar term γ·ΔSASA − b.",
)
@_unset_float_option(
    "--gamma", "γ of the nonpolar term, kJ mol⁻¹ Å⁻² (default: pbsolver's, 0.0227)."
)
@_unset_float_option(
    "--offset", "b of each species' γ·SASA + b, kJ/mol (default: pbsolver's, 3.85)."
)
@click.option(
    "--per-residue",
    is_flag=True,
    help="Decompose every frame by residue (HDF5 per_residue; CSV rows per residue).",
)
@click.option(
    "--rtol",
    type=click.FloatRange(min=0.0, min_open=True, max=1.0),
    default=1e-6,
    show_default=True,
    help="Relative residual of every solve.",
)
@click.option("--start", type=click.IntRange(min=0), default=None, help="First frame (0-based).")
@click.option("--stop", type=click.IntRange(min=0), default=None, help="Stop before this frame.")
@click.option("--stride", type=click.IntRange(min=1), default=None, help="Every N-th frame.")
@click.option(
    "--shape",
    type=(click.IntRange(min=3), click.IntRange(min=3), click.IntRange(min=3)),
    default=None,
    metavar="NX NY NZ",
    help="Node counts of every frame's grid (default: the largest any selected frame needs).",
)
@_count_option(
    "--batch",
    minimum=1,
    default=16,
    text="Frames per binding_energies call (stacked on a GPU), one part file each.",
)
@_backend_option("--backend", "auto", _AUTO_BACKEND)
@_backend_option("--maps-backend", "cpu", "Where the maps (surfaces, φ_c) are built.")
@click.option(
    "--engine",
    # binding.ENGINES, written out: importing it here would import numba before its cache is set
    type=click.Choice(("auto", "general", "stacked")),
    default="auto",
    show_default=True,
    help="stacked: the batched frame engine (surfaces vdw/mol/smol, linear PB); auto: stacked "
    "on a GPU where it applies.",
)
@_pool_options
@_path_option(
    "-o",
    "--output",
    text="HDF5 results, one row per frame (resumable).",
    default=Path("mmpbsa.h5"),
    show_default=True,
)
@_path_option(
    "--csv", "csv_path", text="CSV summary: each term's mean ± block-average standard error."
)
@_count_option(
    "--blocks", minimum=2, default=10, text="Blocks of the standard error in the summary."
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Discard an existing --output made with other inputs or options.",
)
@click.pass_context
def mmpbsa(ctx, topology, trajectories, ligand, receptor, pqr, start, stop, stride, shape, batch,
           workers, gpus, output, csv_path, blocks, overwrite, **kw):  # fmt: skip
    """MM/PBSA binding energies along a trajectory: TOPOLOGY [TRAJECTORY...] → --output.

    Every frame: the polar solvation energies of complex, receptor and ligand on one grid (SES by
    default), the receptor–ligand Coulomb energy in ε_in, and the nonpolar term; energies in
    kJ/mol. Any topology and trajectory format MDAnalysis reads; charges and radii from TOPOLOGY
    (a PQR has both) or --pqr. Killed at any moment, a rerun of the same command skips the
    finished frames; a rerun with other options is refused.
    """
    from pbsolver.jobs.batch import LocalExecutor, ProcessExecutor
    from pbsolver.jobs.mmpbsa import Inputs, MMPBSAOptions, run_mmpbsa, write_summary

    _check_input_exists(ctx, topology, "TOPOLOGY")
    for path in trajectories:
        _check_input_exists(ctx, path, "TRAJECTORY")
    if pqr is not None:
        _check_input_exists(ctx, pqr, "--pqr")
    _check_output_dir(ctx, output)
    if csv_path is not None:
        _check_writable_dir(ctx, csv_path.parent if str(csv_path.parent) else Path("."), "--csv")
    gpu_list = _gpu_ids(ctx, gpus)
    with _usage_errors(ctx):
        options = MMPBSAOptions(**kw)
        inputs = Inputs(
            str(topology), tuple(str(t) for t in trajectories), None if pqr is None else str(pqr),
            ligand=ligand, receptor=receptor,
        )  # fmt: skip
        executor = ProcessExecutor(workers, gpus=gpu_list) if workers > 1 else LocalExecutor()
    note_compilation(options.backend)
    with _usage_errors(ctx):
        report = run_mmpbsa(
            inputs, output, options=options, start=start, stop=stop, stride=stride, batch=batch,
            executor=executor, overwrite=overwrite, shape=shape,
            progress=False if ctx.obj.get("quiet") else None,
        )  # fmt: skip
    n_sel = len(report.computed) + len(report.skipped) + len(report.failed)
    if not report.ok:
        log.error(
            "%d of %d frame(s) failed (kept: %d); rerun the same command to retry them",
            len(report.failed), n_sel, len(report.computed) + len(report.skipped),
        )  # fmt: skip
        return 1
    click.echo(str(output))
    if csv_path is not None:
        write_summary(csv_path, report.records, blocks=blocks, per_residue=kw["per_residue"])
        click.echo(str(csv_path))
    _log_mmpbsa_summary(report, blocks)
    return 0


def _log_mmpbsa_summary(report, blocks):
    from pbsolver.jobs.mmpbsa import ENERGY_TERMS, block_average

    parts = [f"{len(report.computed)} frame(s) computed"]
    if report.skipped:
        parts.append(f"{len(report.skipped)} already done")
    log.info("%s", ", ".join(parts))
    for name in ENERGY_TERMS[:4]:
        mean, sem, _ = block_average(report.records[name], blocks)
        log.info("%-15s %10.3f ± %.3f kJ/mol", name, mean, sem)


def _export(file, grid, dataset, output, fmt, temperature, dx_type, kw):
    from pbsolver.io.hdf5 import POTENTIALS, read_dataset

    max_points = kw.get("max_points")
    if dataset == "potential":
        phi_rf, g, _ = read_dataset(file, grid, "reaction_field", max_points=max_points)
        phi_c, _, _ = read_dataset(file, grid, "phi_coulomb", max_points=max_points)
        values = phi_rf.astype("float64") + phi_c
        import numpy as np

        if not np.isfinite(values).all():
            from pbsolver.exceptions import InputError

            raise InputError(
                "potential = phi_coulomb + reaction_field is infinite where a charge sits on a "
                "node; export reaction_field instead, or use a grid with charges off the nodes"
            )
        is_potential = True
    else:
        values, g, _ = read_dataset(file, grid, dataset, max_points=max_points)
        is_potential = dataset in POTENTIALS
    if fmt is None:
        fmt = "mrc" if output.name.lower().endswith((".mrc", ".map", ".ccp4")) else "dx"
    if fmt == "mrc":
        from pbsolver.io.mrc import write_mrc

        write_mrc(output, values, g, potential=is_potential, temperature=temperature)
    else:
        from pbsolver.io.dx import write_dx

        title = None if is_potential else f"{dataset.upper()} MAP"
        if dataset == "reaction_field":
            title = "REACTION FIELD POTENTIAL (kT/e)"
        write_dx(
            output,
            values,
            g,
            potential=is_potential,
            temperature=temperature,
            dx_type=dx_type,
            title=title,
        )


if __name__ == "__main__":  # pragma: no cover
    main()
