"""``pbsolver bench``: kernel, launch and time-to-solution measurements.

What one run measures (GPU rows only where a CUDA device is usable; the CPU rows always):

* the device-to-device copy rate (CuPy ``copyto``, bytes read + written) — the ceiling;
* per full red–black sweep at each size: GPU time (CUDA events around replays of a captured
  graph of 20 sweeps), the bytes the sweep must move, the effective bandwidth, and the multiple
  of the 16-bytes-a-node copy floor (16 B·N / copy rate); Jacobi and the residual norm too;
* wall time against GPU-busy time per sweep at 64³ and 100³, for bare sweeps and for the
  solver's loop (10 sweeps + one residual norm per check);
* time to rtol 1e-6 for SOR and multigrid, and solves a second of ``solve_batch``;
* the memory of each of those solves, bytes a grid node: the estimate that
  :func:`pbsolver.resources.estimate_bytes` refuses by, beside the peak measured in a third
  solve (CuPy's pool growth on the GPU, tracemalloc's peak on the CPU; the problem's own arrays
  are on the host before the solve, so on the CPU they are not counted);
* the seed kernel's 500-launch loop at 100³ as the forum thread ran it (CuPy arrays, one Python
  launch a sweep), and its GPU time per sweep at 100³ and 256³ (imported from ``--seed-dir``);
* the CPU backend's sweep time and time to rtol 1e-6.

Timings are medians of several repeats; compare ratios within one run (shared machines are
noisy). Other kernel shapes and launch modes are measured by ``benchmarks/sweep_variants.py``.
"""

from __future__ import annotations

import datetime
import functools
import importlib.util
import json
import math
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import click
import numpy as np

COPY_FLOOR_BYTES = 16  # read ε, b, φ and write φ: the floor for one sweep
SWEEPS_PER_GRAPH = 20
#: Bytes a node the fused sweep must move without salt: x, b and three faces read, x written.
FUSED_SWEEP_BYTES = 24
#: Bytes a fine node the multigrid transfers must move: restriction reads the fine level and
#: writes the coarse one (an eighth of the nodes); prolongation reads and writes the fine level
#: and reads the coarse one.
RESTRICT_BYTES = 4.5
PROLONG_BYTES = 8.5


# ---------------------------------------------------------------------- problems
def random_problem(n, xp=np, seed=0, boundary="dirichlet", salt=False, shape=None):
    """A high-contrast problem: ε 1 in a few random spheres, 80 outside; random charges."""
    import pbsolver as pb

    shape = shape or (n, n, n)
    rng = np.random.default_rng(seed)
    # the size is the caller's explicit choice (e.g. 1025³, past Grid's default limit)
    grid = pb.Grid(shape, spacing=0.5, max_points=max(pb.grid.MAX_POINTS, math.prod(shape)))
    x, y, z = (xp.asarray(c) for c in grid.coordinates())
    hi = np.array(grid.lengths)
    eps = xp.full(shape, 80.0)
    for _ in range(4):
        c = rng.uniform(0.3 * hi, 0.7 * hi)
        r = rng.uniform(0.1, 0.25) * hi.min()
        eps[(x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 < r * r] = 1.0
    phi = xp.zeros(shape)
    for _ in range(3):
        c = rng.uniform(0.35 * hi, 0.65 * hi)
        q = rng.uniform(-1.0, 1.0)
        phi += (
            pb.COULOMB_KJ * q / xp.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 + 0.09)
        )
    kw = {"boundary": boundary}
    if salt:
        kw["kappa2"] = xp.where(eps > 40, 80.0 * 0.1**2, 0.0)
    return pb.Problem(grid, eps, phi, 1.0, **kw)


def transfer_level(backend, shape, periodic=False):
    """The multigrid transfer from a level of ``shape`` (or n³) to the next coarser one.

    Planned by the package's coarsening (:func:`pbsolver.multigrid.coarsening.plan_coarsening`,
    unit spacing), its maps in ``backend``'s arrays.
    """
    from pbsolver.backends import Transfer
    from pbsolver.multigrid.coarsening import plan_coarsening

    shape = (shape,) * 3 if np.isscalar(shape) else tuple(int(n) for n in shape)
    axes = plan_coarsening(shape, (1.0, 1.0, 1.0), periodic)[0][0]

    def maps(name):
        return tuple(backend.asarray(getattr(a, name).astype(np.int32), np.int32) for a in axes)

    return Transfer(maps("pos"), maps("lo"), maps("hi"), periodic, shape,
                    tuple(a.n_coarse for a in axes))  # fmt: skip


def _median(xs):
    return statistics.median(xs)


# ---------------------------------------------------------------------- environment
def environment(gpu: bool) -> dict:
    """Date, machine, device, driver and package versions."""
    import numba

    import pbsolver

    env = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": __import__("os").cpu_count(),
        "versions": {"pbsolver": pbsolver.__version__, "numpy": np.__version__},
    }
    env["versions"]["numba"] = numba.__version__
    for mod in ("numba_cuda", "cupy", "cuda.core"):
        try:
            m = importlib.import_module(mod)
            env["versions"][mod] = getattr(m, "__version__", "?")
        except Exception:
            env["versions"][mod] = None
    if gpu:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        env["device"] = (
            props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        )
        env["multiprocessors"] = props["multiProcessorCount"]
        env["cuda_driver_api"] = cp.cuda.runtime.driverGetVersion()
        env["cuda_runtime_api"] = cp.cuda.runtime.runtimeGetVersion()
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            env["driver"] = out.stdout.strip().split(",")[-1].strip()
        except Exception:
            env["driver"] = None
    return env


# ---------------------------------------------------------------------- GPU timing helpers
class _Timer:
    def __init__(self, stream):
        import cupy as cp

        self.cp, self.stream = cp, stream
        self.e0, self.e1 = cp.cuda.Event(), cp.cuda.Event()

    def gpu(self, fn, reps, trials=5):
        """Median GPU milliseconds per call of ``fn`` (events on the stream)."""
        fn()
        self.stream.synchronize()
        out = []
        for _ in range(trials):
            self.e0.record(self.stream)
            for _ in range(reps):
                fn()
            self.e1.record(self.stream)
            self.e1.synchronize()
            out.append(self.cp.cuda.get_elapsed_time(self.e0, self.e1) / reps)
        return _median(out)


def copy_rate(quick: bool) -> float:
    """Device-to-device copy rate, bytes read + written per second (median)."""
    import cupy as cp

    n = (1 << 26) if quick else (1 << 28)
    a = cp.random.random(n, dtype=cp.float32)
    b = cp.empty_like(a)
    s = cp.cuda.Stream(non_blocking=True)
    t = _Timer(s)
    with s:
        ms = t.gpu(lambda a=a, b=b: cp.copyto(b, a), reps=10)
    del a, b
    return 2 * n * 4 / (ms * 1e-3)


def rate_row(n, label, ms, bytes_per_node, floor_s):
    """A row of GPU milliseconds a sweep, with the bandwidth and the copy floor's multiple."""
    return {
        "n": n,
        "kernel": label,
        "us_per_sweep": ms * 1e3,
        "bytes_per_node": bytes_per_node,
        "effective_GBps": bytes_per_node * n**3 / (ms * 1e-3) / 1e9,
        "x_copy_floor": ms * 1e-3 / floor_s,
    }


def sweep_row(gpu, st, x0, n, label, bytes_per_node, floor_s, work=None):
    """GPU time a red–black sweep of ``gpu`` (replays of a graph of 20 sweeps, CUDA events).

    ``work``: the multigrid smoother's sweeps through that buffer (``rb_sor_sweeps``), the
    fused sweep on a large grid, instead of the SOR method's ``sor_sweeps``.
    """
    x = x0.copy()

    def sweeps():
        if work is None:
            gpu.sor_sweeps(st, x, 1.9, SWEEPS_PER_GRAPH)
        else:
            gpu.rb_sor_sweeps(st, x, 0, 1.9, SWEEPS_PER_GRAPH, work=work)

    sweeps()  # eager (compiles); the timer's warm-up call captures the graph
    ms = _Timer(gpu.stream).gpu(sweeps, reps=2 if n >= 300 else 5) / SWEEPS_PER_GRAPH
    return rate_row(n, label, ms, bytes_per_node, floor_s)


def sweep_rows(sizes, copy_bps, quick):
    """Per-sweep GPU time of the SOR and Jacobi sweeps and of the residual norm."""
    import cupy as cp

    rows = []
    for n in sizes:
        rows += _sweep_rows_at(n, copy_bps)
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def _sweep_rows_at(n, copy_bps):
    import cupy as cp

    from pbsolver.backends.cuda import SWEEP_BYTES, CUDABackend, fused_sweep

    gpu = CUDABackend()
    st = gpu.stencil(random_problem(n, xp=cp, seed=n), np.float32)
    x0 = cp.random.standard_normal((n, n, n), dtype=cp.float32)
    floor_s = COPY_FLOOR_BYTES * n**3 / copy_bps
    rows = [sweep_row(gpu, st, x0, n, "rb-sor", SWEEP_BYTES, floor_s)]
    _progress(rows[-1])
    if fused_sweep.applies(st.shape, np.float32):  # the multigrid smoother's sweep at this size
        work = cp.empty_like(x0)
        rows.append(sweep_row(gpu, st, x0, n, "rb-sor fused (smoother)", FUSED_SWEEP_BYTES,
                              floor_s, work=work))  # fmt: skip
        _progress(rows[-1])
    t = _Timer(gpu.stream)
    # the multigrid transfers between this level and the next coarser one
    tr = transfer_level(gpu, n)
    coarse, fine = cp.zeros(tr.coarse_shape, cp.float32), x0.copy()
    ms = t.gpu(lambda: gpu.restrict(tr, x0, coarse), reps=10)
    rows.append(rate_row(n, "multigrid restrict", ms, RESTRICT_BYTES, floor_s))
    _progress(rows[-1])
    ms = t.gpu(lambda: gpu.prolong_add(tr, coarse, fine), reps=10)
    rows.append(rate_row(n, "multigrid prolong", ms, PROLONG_BYTES, floor_s))
    _progress(rows[-1])
    # Jacobi (two buffers) and the residual norm, for scale
    x, w = x0.copy(), cp.zeros_like(x0)
    ms = t.gpu(lambda: gpu.jacobi_sweeps(st, x, w, 0.9, 20), reps=3) / 20
    rows.append(rate_row(n, "jacobi (2 buffers)", ms, 24, floor_s))
    _progress(rows[-1])
    # partial sums, the fixed-order final sum and the 8-byte copy, as one graph
    runner = gpu.capture(lambda: gpu.enqueue_residual_sumsq(st, x))
    runner()
    ms = t.gpu(runner, reps=10)
    rows.append(rate_row(n, "residual norm (reduction)", ms, 20, floor_s))
    _progress(rows[-1])
    return rows


def launch_row(gpu, st, n, loop, busy_us, quick):
    """Wall time a sweep of batches of 10 sweeps (``loop="solver loop"``: + a residual norm)."""
    import cupy as cp

    total = 100 if quick else 200
    x = cp.zeros((n, n, n), cp.float32)

    def batch():
        gpu.sor_sweeps(st, x, 1.9, 10)
        if loop == "solver loop":
            gpu.residual_norm(st, x)

    for _ in range(3):  # eager, captured, replayed
        batch()
    gpu.synchronize()
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(total // 10):
            batch()
        gpu.synchronize()
        walls.append((time.perf_counter() - t0) / total)
    wall_us = _median(walls) * 1e6
    return {
        "n": n,
        "mode": "graph",
        "loop": loop,
        "wall_us_per_sweep": wall_us,
        "gpu_busy_us_per_sweep": busy_us,
        "wall_over_busy": wall_us / busy_us,
    }


def launch_rows(quick):
    """Wall vs GPU-busy time a sweep, for bare sweeps and for the solver's loop."""
    import cupy as cp

    from pbsolver.backends.cuda import CUDABackend

    rows = []
    for n in (64, 100):
        gpu = CUDABackend()
        st = gpu.stencil(random_problem(n, xp=cp, seed=7 + n), np.float32)
        busy_us = busy_us_per_sweep(gpu, st, n)
        for loop in ("sweeps", "solver loop"):
            rows.append(launch_row(gpu, st, n, loop, busy_us, quick))
            _progress(rows[-1])
    return rows


def busy_us_per_sweep(gpu, st, n):
    """GPU-busy microseconds a sweep from x = 0 (graph replays of 20 sweeps)."""
    import cupy as cp

    x = cp.zeros((n, n, n), cp.float32)
    return _Timer(gpu.stream).gpu(lambda: gpu.sor_sweeps(st, x, 1.9, 20), reps=5) / 20 * 1e3


def _measured_memory(backend: str, call, nodes: int) -> dict:
    """``measured_B_per_node`` of ``call`` (NaN, with ``memory_error`` saying why, if it fails)."""
    from pbsolver.backends import get_backend

    try:
        return {"measured_B_per_node": get_backend(backend).peak_bytes(call) / nodes}
    except Exception as exc:  # the row keeps its timings; the failure is reported with it
        return {"measured_B_per_node": float("nan"), "memory_error": repr(exc)}


def _fresh_solve(solver, problem):
    """``solver.solve(problem)`` without a kept workspace (so that all its arrays are made)."""
    import pbsolver as pb

    pb.clear_workspaces()
    return solver.solve(problem)


def solve_rows(sizes, gpu: bool):
    """Time to rtol 1e-6 (second of two identical solves, so compilation is excluded).

    "new_seconds": a solve of another problem of the same grid after those two (on a GPU it
    reuses the kept workspace, see :meth:`pbsolver.Solver.solve`). A solve without a kept
    workspace measures the peak memory (:meth:`pbsolver.backends.Backend.peak_bytes`), beside
    the estimate.
    """
    import pbsolver as pb
    from pbsolver.operator import relative_residual
    from pbsolver.resources import estimate_bytes
    from pbsolver.solving.methods import METHODS

    rows = []
    # SOR, and the multigrid methods "auto" picks on larger grids (MG-CG is the GPU's)
    methods = ["sor"] + [m for m in ("multigrid", "mgcg") if m in METHODS]
    for n in sizes:
        prob = random_problem(n, seed=100 + n, salt=True)
        backends = (["cuda"] if gpu else []) + (["cpu"] if not gpu or n <= 65 else [])
        for backend in backends:
            for method in methods:
                try:
                    solver = pb.Solver(method=method, backend=backend, rtol=1e-6)
                    solver.solve(prob)
                    res = solver.solve(prob)
                    # a new problem of the grid: what a GPU's kept workspace saves (Solver.solve)
                    new = solver.solve(random_problem(n, seed=200 + n, salt=True))
                    nodes = prob.grid.size
                    again = functools.partial(_fresh_solve, solver, prob)
                    rows.append(
                        {
                            "n": n,
                            "method": method,
                            "backend": backend,
                            "seconds": res.seconds,
                            "new_seconds": new.seconds,
                            "iterations": res.iterations,
                            "converged": res.converged,
                            "relative_residual_f64": relative_residual(prob, res.phi_rf),
                            "estimated_B_per_node": estimate_bytes(
                                prob.grid.shape, res.method, backend
                            )
                            / nodes,
                            **_measured_memory(backend, again, nodes),
                        }
                    )
                except Exception as exc:
                    rows.append({"n": n, "method": method, "backend": backend, "error": repr(exc)})
                _progress(rows[-1])
    return rows


def batch_rows(gpu: bool, quick: bool):
    """Solves a second of :func:`pbsolver.solve_batch` (the second of two identical calls)."""
    import pbsolver as pb

    cases = [(33, 4)] if not gpu else [(65, 16)] if quick else [(65, 16), (97, 16)]
    rows = []
    for n, count in cases:
        problems = [random_problem(n, seed=200 + k, salt=True) for k in range(count)]
        for backend in (["cuda"] if gpu else []) + (["cpu"] if n <= 65 else []):
            try:
                pb.solve_batch(problems, backend=backend, rtol=1e-6)
                t0 = time.perf_counter()
                results = pb.solve_batch(problems, backend=backend, rtol=1e-6)
                wall = time.perf_counter() - t0
                rows.append(
                    {
                        "n": n,
                        "problems": count,
                        "backend": backend,
                        "seconds": wall,
                        "solves_per_s": count / wall,
                        "converged": all(r.converged for r in results),
                    }
                )
            except Exception as exc:
                rows.append({"n": n, "problems": count, "backend": backend, "error": repr(exc)})
            _progress(rows[-1])
    return rows


def seed_rows(seed_dir):
    """The seed kernel as the forum thread ran it, and its GPU time per sweep."""
    import cupy as cp
    from numba import cuda

    path = Path(seed_dir) / "seed_kernel.py"
    if not path.exists():
        return {"skipped": f"no seed kernel at {path}"}
    spec = importlib.util.spec_from_file_location("seed_kernel", path)
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    out = {}
    for n in (100, 256):
        prob = random_problem(n, xp=cp, seed=3)
        eps = cp.ascontiguousarray(prob.epsilon, dtype=cp.float32)
        phic = cp.ascontiguousarray(prob.phi_coulomb, dtype=cp.float32)
        phirf = cp.zeros((n, n, n), cp.float32)
        cav = cp.asarray([1.0], cp.float32)
        size = cp.asarray([n, n, n], cp.int32)
        blk = (seed.GRID_POINTS_PER_BLOCK,) * 3
        grd = (math.ceil(n / blk[0]),) * 3
        kern = seed.solve_equation
        kern[grd, blk](eps, phic, cav, size, phirf)
        cp.cuda.runtime.deviceSynchronize()
        if n == 100:
            walls = []
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(500):
                    kern[grd, blk](eps, phic, cav, size, phirf)
                cp.cuda.runtime.deviceSynchronize()
                walls.append(time.perf_counter() - t0)
            out["loop_500_ms"] = _median(walls) * 1e3
            out["loop_500_us_per_sweep"] = _median(walls) / 500 * 1e6
        # GPU time per sweep: 20 launches captured as a graph, replayed, timed with events
        s = cp.cuda.Stream(non_blocking=True)
        views = [cuda.as_cuda_array(a, sync=False) for a in (eps, phic, cav, size, phirf)]
        nbs = cuda.external_stream(s.ptr)
        with s:
            s.begin_capture()
            for _ in range(20):
                kern[grd, blk, nbs](*views)
            g = s.end_capture()
            ms = _Timer(s).gpu(lambda g=g, s=s: g.launch(s), reps=5) / 20
        out[f"gpu_us_per_sweep_{n}"] = ms * 1e3
        _progress({"seed": n, **out})
        del eps, phic, phirf
    return out


def cpu_rows(quick):
    """The CPU backend: one red–black sweep (median of 5 batches of 5 sweeps)."""
    from pbsolver.backends.cpu.backend import CPUBackend

    rows = []
    cpu = CPUBackend()
    for n in (64,) if quick else (64, 100):
        st = cpu.stencil(random_problem(n, seed=n), np.float32)
        x = np.zeros((n, n, n), np.float32)
        cpu.sor_sweeps(st, x, 1.9, 1)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            cpu.sor_sweeps(st, x, 1.9, 5)
            ts.append((time.perf_counter() - t0) / 5)
        rows.append({"n": n, "kernel": "cpu rb-sor", "us_per_sweep": _median(ts) * 1e6})
        _progress(rows[-1])
    return rows


def _progress(row):
    print("  ", json.dumps(row, default=float), flush=True)


# ---------------------------------------------------------------------- table
#: The tables of a result dict, in print order: (key, title, header, row, row of an error), the
#: rows as ``str.format`` templates of a row's fields.
_TABLES = (
    (
        "sweeps",
        "per full red–black sweep, or per multigrid transfer from n³ (GPU time, graph replays; "
        "×floor: of the 16 B/node copy floor)",
        f"{'n':>5} {'kernel':<28} {'µs/sweep':>10} {'B/node':>7} {'GB/s':>7} {'×floor':>7}",
        "{n:>5} {kernel:<28} {us_per_sweep:>10.1f} "
        "{bytes_per_node:>7} {effective_GBps:>7.0f} {x_copy_floor:>7.2f}",
        None,
    ),
    (
        "launch",
        "wall vs GPU-busy time per sweep",
        f"{'n':>5} {'mode':<10} {'loop':<14} {'wall µs':>9} {'busy µs':>9} {'ratio':>6}",
        "{n:>5} {mode:<10} {loop:<14} {wall_us_per_sweep:>9.1f} "
        "{gpu_busy_us_per_sweep:>9.1f} {wall_over_busy:>6.2f}",
        "{n:>5} {mode:<7} error: {error}",
    ),
    (
        "solve",
        "time to rtol 1e-6 (second solve; set-up and transfers included; 'new s': another "
        "problem of the grid next) and memory (bytes a node: estimate, measured peak of a solve "
        "without a kept workspace)",
        f"{'n':>5} {'method':<10} {'backend':<7} {'s':>8} {'new s':>8} {'iters':>6} conv  "
        f"rel.res(f64) {'est B':>6} {'peak B':>6}",
        "{n:>5} {method:<10} {backend:<7} "
        "{seconds:>8.3f} {new_seconds:>8.3f} {iterations:>6} {converged!s:<5} "
        "{relative_residual_f64:.2e}     {estimated_B_per_node:>6.0f} {measured_B_per_node:>6.0f}",
        "{n:>5} {method:<10} {backend:<7} error: {error}",
    ),
    (
        "batch",
        "solve_batch to rtol 1e-6 (second call; method auto)",
        f"{'n':>5} {'problems':>8} {'backend':<7} {'s':>8} {'solves/s':>9} conv",
        "{n:>5} {problems:>8} {backend:<7} {seconds:>8.3f} {solves_per_s:>9.1f} {converged!s}",
        "{n:>5} {problems:>8} {backend:<7} error: {error}",
    ),
)
_CPU_TABLE = (
    "cpu",
    "CPU backend",
    None,
    "{n:>5} {kernel:<28} {us_per_sweep:>10.1f} µs/sweep",
    None,
)


def _table(lines, res, key, title, header, row, error):
    """Append one table of ``res[key]`` (nothing when it is empty or missing)."""
    if not res.get(key):
        return
    lines.append(f"\n{title}")
    if header is not None:
        lines.append(header)
    for r in res[key]:
        lines.append((error if error is not None and "error" in r else row).format(**r))


def format_tables(res: dict) -> str:
    """The human-readable tables of a result dict."""
    lines = []
    env = res["environment"]
    lines.append(
        f"pbsolver bench — {env['date']} — {env.get('device', 'no GPU')} "
        f"(driver {env.get('driver', '-')}), {env['versions']}"
    )
    if "copy_GBps" in res:
        lines.append(f"device-to-device copy: {res['copy_GBps']:.0f} GB/s (read + write)")
    for table in _TABLES:
        _table(lines, res, *table)
    if res.get("seed"):
        lines.append(f"\nseed kernel: {res['seed']}")
    _table(lines, res, *_CPU_TABLE)
    for line in res.get("skipped", []):
        lines.append(f"skipped: {line}")
    for r in res.get("solve", []):
        if "memory_error" in r:
            lines.append(f"memory not measured (n {r['n']}, {r['method']}, {r['backend']}): "
                         f"{r['memory_error']}")  # fmt: skip
    for err in res.get("errors", []):
        lines.append(f"ERROR in {err['section']}: {err['error'].splitlines()[-1]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- command
@click.command("bench")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write results here.")
@click.option(
    "--sizes", default="100,256,384", show_default=True, help="Grid sizes n (n³) for sweeps."
)
@click.option("--quick", is_flag=True, help="Fewer sizes and repeats (a smoke test).")
@click.option(
    "--seed-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder holding seed_kernel.py (the seed thread's kernel) to time alongside.",
)
@click.option(
    "--solve-sizes", default="65,129,193", show_default=True, help="n for time-to-rtol rows."
)
def bench(json_path, sizes, quick, seed_dir, solve_sizes):
    """Measure sweep kernels, launch overhead and time to solution; print a table."""
    from pbsolver.backends import cuda_available

    gpu = cuda_available()
    sizes = [int(s) for s in sizes.split(",") if s.strip()]
    solve_sizes = [int(s) for s in solve_sizes.split(",") if s.strip()]
    if quick:
        sizes, solve_sizes = [n for n in sizes if n <= 256][:2] or [64], solve_sizes[:1]
    res = {"environment": environment(gpu), "errors": [], "skipped": []}

    def section(name, fn, *args):
        print(f"== {name}", flush=True)
        try:
            res[name] = fn(*args)
        except Exception:
            res["errors"].append({"section": name, "error": traceback.format_exc()})
            print(res["errors"][-1]["error"], file=sys.stderr, flush=True)

    if gpu:
        section("copy_GBps", lambda: copy_rate(quick) / 1e9)
        copy_bps = res.get("copy_GBps", 4000.0) * 1e9
        section("sweeps", sweep_rows, sizes, copy_bps, quick)
        section("launch", launch_rows, quick)
        if seed_dir:
            section("seed", seed_rows, seed_dir)
        else:
            res["skipped"].append("seed kernel (no --seed-dir)")
    else:
        res["skipped"].append("GPU rows: no usable CUDA device (numba-cuda + CuPy + driver)")
    section("solve", solve_rows, solve_sizes if gpu else [33 if quick else 65], gpu)
    section("batch", batch_rows, gpu, quick)
    section("cpu", cpu_rows, quick)
    text = format_tables(res)
    print("\n" + text)
    if json_path:
        Path(json_path).write_text(json.dumps(res, indent=1, default=float))
        print(f"\nwrote {json_path}")


if __name__ == "__main__":
    bench()
