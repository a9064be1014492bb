"""One contract for every way of solving: method × backend × entry point.

In the spirit of scipy's ``test_iterative.py``: the ``solver`` fixture is parametrised over every
:data:`CASES` entry (a method, a device and an entry point) and each test below holds it to one
promise of the solve layer:

1. it converges on a random, high-contrast (ε 2/80), odd non-cubic Dirichlet problem, and the
   returned φ_rf's float64 relative residual (:func:`pbsolver.operator.relative_residual`)
   meets ``rtol``;
2. ``maxiter`` is honoured exactly (an unconverged result says "maxiter");
3. ``x0`` is never modified, and the solution as ``x0`` returns without iterating;
4. a zero right-hand side returns exactly zero, converged, reason "zero rhs";
5. ``strict=True`` raises :class:`pbsolver.ConvergenceError` carrying the result;
6. NaN input is refused with :class:`pbsolver.InputError`, and a breakdown during the iteration
   is reported as "nan" or "diverged", never as a converged result;
7. bad options are refused with :class:`pbsolver.InputError`;
8. the callback is called with ``(iteration, relative residual)``.

Only public entry points and public result fields are used, so the contract outlives rewrites
of the solve layer. A new method, device or entry point is one line of :data:`METHODS`,
:data:`DEVICES` or :data:`ENTRIES`; a combination an entry point does not run is skipped with
its reason; a contract an implementation breaks is an ``xfail(strict=True)`` in
:data:`KNOWN_BUGS` naming the bug.

Devices: the CPU, numba's CUDA simulator (marker ``cudasim``: the CUDA backend on numba device
arrays, tiny grids, looser ``rtol``) and a real GPU (marker ``gpu``: the same CUDA backend with
CuPy, bigger grids; skipped without one). numba reads ``NUMBA_ENABLE_CUDASIM`` when
``numba.cuda`` is first imported, so, as in ``test_cuda_sim.py``, the simulator cases that were
collected run together in one subprocess with the variable set (in-process when the session
already runs under the simulator) and each is reported as its own test. At about 1 ms a
simulated thread every simulated solve takes seconds, so the simulator runs only the contracts
whose outcome a device path decides (:data:`SIM_SKIPS` names the others, held on the CPU).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb
from pbsolver.arrays import to_numpy
from pbsolver.operator import reference_solve, relative_residual

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

METHODS = ("sor", "jacobi", "multigrid", "mgcg")
#: Most iterations a solve started from a solution may take ("0 or very few").
FEW = 0


# ---------------------------------------------------------------------- devices
@functools.cache
def _sim_backend():
    """The CUDA backend on numba device arrays with small blocks (several tiles on tiny grids)."""
    from pbsolver.backends.cuda import CUDABackend, KernelConfig

    cfg = KernelConfig(
        point_block=(4, 4, 2),
        jacobi_block=(8, 4, 2),
        reduce_block=(8, 4),
        reduce_chunk=3,
        flat_threads=32,
    )
    return CUDABackend(device="numba", config=cfg)


@dataclass(frozen=True)
class Device:
    """Where a case runs: backend, grid of its problems, rtol of the convergence contract."""

    name: str
    shape: tuple
    spacing: float
    rtol: float
    marks: tuple = ()
    #: subprocess under NUMBA_ENABLE_CUDASIM (unless the session already runs there)
    simulated: bool = False

    def backend(self):
        if self.simulated:
            return _sim_backend()
        return "cuda" if self.name == "gpu" else self.name


DEVICES = {
    "cpu": Device("cpu", (11, 9, 13), 0.6, 1e-6),
    "cudasim": Device("cudasim", (5, 4, 6), 0.9, 1e-4, (pytest.mark.cudasim,), simulated=True),
    "gpu": Device("gpu", (33, 29, 37), 0.4, 1e-6, (pytest.mark.gpu,)),
}


# ---------------------------------------------------------------------- entry points
@dataclass
class Case:
    """One (method, device, entry) combination: builds inputs and solves through the entry."""

    method: str
    device: Device
    entry: object

    @property
    def id(self) -> str:
        return f"{self.entry.name}-{self.method}-{self.device.name}"

    def inputs(self, rng, **kw):
        return self.entry.inputs(self.device, rng, **kw)

    def solve(self, inputs, x0=None, **options):
        """List of results (one per problem or frame) with the public SolveResult fields."""
        options.setdefault("method", self.method)
        return self.entry.solve(self.device, inputs, x0, options)


@dataclass
class Inputs:
    """Problems of one call (for the residual checks) and what the entry point is given."""

    problems: list
    #: engine: (charges, radii, positions (B, N, 3), origins (B, 3), ionic strength)
    atoms: object = None


def _problem(device, rng, *, salt=False, zero=False):
    p = random_problem(rng, shape=device.shape, spacing=device.spacing, eps_c=2.0, salt=salt,
                       boundary_values=not zero)  # fmt: skip
    if zero:
        p = pb.Problem(p.grid, p.epsilon, np.zeros(p.grid.shape), p.eps_cavity, kappa2=p.kappa2)
    return p


class SolverEntry:
    """``pb.Solver(...).solve(problem, x0=...)``: one problem a call."""

    name = "solver"
    count = 1
    callback = strict = True

    def unsupported(self, method, device):
        return None

    def inputs(self, device, rng, *, salt=False, zero=(), same=False):
        return Inputs([_problem(device, rng, salt=salt, zero=0 in zero)])

    def solve(self, device, inputs, x0, options):
        x0 = x0[0] if x0 is not None else None
        return [pb.Solver(backend=device.backend(), **options).solve(inputs.problems[0], x0=x0)]


class BatchEntry:
    """``pb.solve_batch(problems, mode="stacked", ...)``: B problems of one grid in one stack."""

    name = "batch"
    count = 2
    callback = strict = True

    def unsupported(self, method, device):
        from pbsolver.solving.batched import STACKABLE_METHODS

        if method not in STACKABLE_METHODS:
            return f"solve_batch(mode='stacked') runs {STACKABLE_METHODS}, not {method!r}"
        return None

    def inputs(self, device, rng, *, salt=False, zero=(), same=False):
        first = _problem(device, rng, salt=salt, zero=0 in zero)
        second = first if same else _problem(device, rng, salt=not salt, zero=1 in zero)
        return Inputs([first, second])

    def solve(self, device, inputs, x0, options):
        return pb.solve_batch(inputs.problems, x0=x0, mode="stacked", backend=device.backend(),
                              **options)  # fmt: skip


@dataclass
class _FrameResult:
    """A frame of :class:`pbsolver.md.engine.StackedSolve` seen through SolveResult's fields."""

    phi_rf: object
    converged: bool
    iterations: int
    residual_norms: list
    reason: str


class EngineEntry:
    """``StackedFrames(...).run(positions, origins, x0=...)``: the MD engine, B frames a call.

    The engine maps its problems from atoms (vdW surface, Debye–Hückel boundary values); the
    residual checks rebuild each frame's problem with :func:`pbsolver.molecule.maps.build_problem`
    (the same maps computed by the general path).
    """

    name = "engine"
    count = 2
    # StackedFrames takes rtol, atol, maxiter, dtype, refine, check_every and omega from its
    # Solver (its documented list); it has no callback and raises nothing when unconverged
    callback = strict = False
    EPS_IN, EPS_OUT, IONIC = 2.0, 80.0, 0.15

    def unsupported(self, method, device):
        from pbsolver.md.engine import STACKED_METHODS

        if method not in STACKED_METHODS:
            return f"StackedFrames solves with {STACKED_METHODS}, not {method!r}"
        if device.simulated:
            return "StackedFrames on CUDA needs CuPy device arrays (the simulator has none)"
        return None

    def inputs(self, device, rng, *, salt=False, zero=(), same=False):
        from pbsolver.molecule.atoms import Atoms
        from pbsolver.molecule.build import build_problem

        n = 7
        charges = np.zeros(n) if zero else rng.uniform(-1.0, 1.0, n)
        radii = rng.uniform(1.0, 1.6, n)
        origin = -0.5 * (np.asarray(device.shape) - 1) * device.spacing
        inside = 0.6 * np.abs(origin)  # atom centres well inside the outer layer
        base = np.clip(rng.normal(0.0, 0.8, (n, 3)), -inside, inside)
        moved = base if same else np.clip(base + rng.normal(0.0, 0.3, base.shape), -inside, inside)
        positions = np.stack([base, moved])
        origins = np.stack([origin, origin])
        grid = pb.Grid(device.shape, spacing=device.spacing, origin=tuple(origin))
        ionic = self.IONIC if salt else 0.0
        problems = [
            build_problem(Atoms(pos, charges, radii), grid, eps_in=self.EPS_IN,
                          eps_out=self.EPS_OUT, ionic_strength=ionic, surface="vdw")
            for pos in positions
        ]  # fmt: skip
        return Inputs(problems, (charges, radii, positions, origins, ionic))

    def solve(self, device, inputs, x0, options):
        from pbsolver.md.engine import StackedFrames
        from pbsolver.molecule.maps import kappa_from_ionic_strength

        charges, radii, positions, origins, ionic = inputs.atoms
        method = options.pop("method")
        if x0 is not None:  # one guess for every frame
            assert all(g is x0[0] for g in x0), "the engine takes one x0 for all frames"
            x0 = x0[0]
        solver = pb.Solver(backend=device.backend(), **options)
        engine = StackedFrames(
            charges, radii, device.shape, device.spacing, solver, eps_in=self.EPS_IN,
            eps_out=self.EPS_OUT, kappa=kappa_from_ionic_strength(ionic, self.EPS_OUT),
            method=method,
        )  # fmt: skip
        res = engine.run(positions, origins, x0=x0)
        return [
            _FrameResult(
                phi_rf=to_numpy(res.phi[k]),
                converged=bool(res.converged[k]),
                iterations=res.iterations,
                residual_norms=[float(res.initial[k]), float(res.residuals[k])],
                reason=res.reason,
            )
            for k in range(len(res.phi))
        ]


ENTRIES = (SolverEntry(), BatchEntry(), EngineEntry())


def _params():
    out = []
    for entry in ENTRIES:
        for device in DEVICES.values():
            for method in METHODS:
                case = Case(method, device, entry)
                marks = list(device.marks)
                reason = entry.unsupported(method, device)
                if reason:
                    marks.append(pytest.mark.skip(reason=reason))
                out.append(pytest.param(case, id=case.id, marks=marks))
    return out


CASES = _params()
CASE_BY_ID = {p.values[0].id: p.values[0] for p in CASES}

#: (test, its parameter id or None, entry, method or None for all) → the bug that breaks it.
KNOWN_BUGS: dict = {}  # none open: the ones this file found are fixed (see git log)


def _known_bug(test, param, case):
    for key in ((test, param, case.entry.name, case.method), (test, param, case.entry.name, None)):
        if key in KNOWN_BUGS:
            return KNOWN_BUGS[key]
    return None


@pytest.fixture(params=CASES)
def solver(request):
    """A (method, device, entry point) case; a known bug of this test and case is an xfail."""
    case = request.param
    param = getattr(request.node, "callspec", None)
    param = param.params.get("bad") if param is not None else None
    bug = _known_bug(request.node.originalname, param, case)
    if bug:
        request.applymarker(pytest.mark.xfail(strict=True, reason=bug))
    return case


# ---------------------------------------------------------------------- helpers
def _rng(test, case, **params):
    """A generator seeded from the test, case and parameters (the same in the subprocess)."""
    key = json.dumps([test, case.id, params], sort_keys=True)
    return np.random.default_rng(zlib.crc32(key.encode()))


def _host(a):
    return np.asarray(to_numpy(a), dtype=np.float64)


_HOST_SIDE = (
    "simulator time: decided on the host before or between device calls, the same for every "
    "backend; held on the CPU cases"
)
#: (test, parameter or None) → why the simulator skips it. Its ~1 ms a simulated thread makes
#: every solve seconds long, so it runs the contracts whose outcome a device path decides.
SIM_SKIPS = {
    ("test_converges", False): "simulator time: the salted problem runs the same kernels and κ²",
    ("test_maxiter_honoured", None): (
        "simulator time: maxiter=2 is held exactly by the x0 test's first solve"
    ),
    ("test_strict_raises", None): _HOST_SIDE,
    ("test_nan_x0_refused", None): _HOST_SIDE,
    ("test_nan_data_refused", None): _HOST_SIDE,
    ("test_bad_options", None): _HOST_SIDE,
    ("test_callback", None): _HOST_SIDE,
    ("test_breakdown_reported", "jacobi omega 1.95"): (
        "simulator time: divergence is judged on the host from the device's norms; the huge-x0 "
        "case runs the device's NaN path"
    ),
}


def _sim_skip(test, case, params):
    """Why the simulator does not run this contract on ``case`` (None: it does)."""
    if not case.device.simulated:
        return None
    param = next(iter(params.values()), None)
    if (test, param) == ("test_zero_rhs", "all") and case.entry.count > 1:
        return "simulator time: a stack's zero block is held by 'one'"
    return SIM_SKIPS.get((test, param)) or SIM_SKIPS.get((test, None))


def _check(test, case, **params):
    """Run contract ``test`` on ``case``: here, or from the simulator subprocess's outcomes."""
    reason = _sim_skip(test, case, params)
    if reason:
        pytest.skip(reason)
    if case.device.simulated and not SIM:
        outcome = _sim_outcomes()[_key(test, case, params)]
        if outcome.get("skipped"):
            pytest.skip(outcome["skipped"])
        assert outcome["ok"], outcome.get("error")
        return
    CONTRACTS[test](case, _rng(test, case, **params), **params)


# ---------------------------------------------------------------------- the contract
def converges(case, rng, salt):
    inputs = case.inputs(rng, salt=salt)
    rtol = case.device.rtol
    maxiter = 5000
    results = case.solve(inputs, rtol=rtol, maxiter=maxiter)
    assert len(results) == len(inputs.problems)
    for p, r in zip(inputs.problems, results, strict=True):
        assert r.converged and r.reason == "converged", (r.reason, r.residual_norms)
        assert 0 < r.iterations <= maxiter
        true = relative_residual(p, _host(r.phi_rf))
        # the engine's own maps (float32 direct sums; on a GPU with the hardware rsqrt, about
        # 1e-7 relative) differ from the rebuilt float64 problem's: a small multiple of rtol
        slack = 1.0 + 1e-6
        if case.entry.name == "engine":
            slack = 5.0 if case.device.name == "gpu" else 2.0
        assert true <= slack * rtol, f"true residual {true:.3g} > rtol {rtol:g}"
        assert r.residual_norms[-1] <= rtol * (1 + 1e-6)


def maxiter_honoured(case, rng, maxiter):
    inputs = case.inputs(rng)
    for r in case.solve(inputs, rtol=1e-12, maxiter=maxiter):
        assert r.iterations == maxiter, r.iterations
        assert not r.converged and r.reason == "maxiter", r.reason


def x0_untouched(case, rng):
    inputs = case.inputs(rng, same=True)
    guess = rng.normal(0.0, 10.0, case.device.shape)
    kept = guess.copy()
    results = case.solve(inputs, x0=[guess] * case.entry.count, rtol=1e-12, maxiter=2)
    assert np.array_equal(guess, kept), "x0 was modified"
    assert all(r.iterations == 2 and r.reason == "maxiter" for r in results)
    # the solution as the guess: nothing left to do
    if case.entry.name == "engine":  # its own solution (its maps are its own); one guess
        first = case.solve(inputs, rtol=case.device.rtol)
        x0 = [_host(first[0].phi_rf)] * case.entry.count
    else:
        x0 = [reference_solve(p) for p in inputs.problems]
    kept = [a.copy() for a in x0]
    second = case.solve(inputs, x0=x0, rtol=case.device.rtol)
    assert all(np.array_equal(a, b) for a, b in zip(x0, kept, strict=True)), "x0 was modified"
    for r in second:
        assert r.converged and r.iterations <= FEW, (r.iterations, r.residual_norms)


def zero_rhs(case, rng, which):
    if which == "one" and case.entry.count < 2:
        pytest.skip("one problem a call: the whole right-hand side is zero or not")
    if which == "one" and case.entry.name == "engine":
        pytest.skip("the engine's charges are fixed for all frames: no frame alone can be zero")
    zero = (0,) if which == "one" else tuple(range(case.entry.count))
    inputs = case.inputs(rng, zero=zero)
    guess = rng.normal(0.0, 10.0, case.device.shape)
    results = case.solve(inputs, x0=[guess] * case.entry.count, rtol=1e-12, maxiter=2)
    for k in zero:
        r = results[k]
        assert r.converged and r.reason == "zero rhs", r.reason
        assert not np.any(_host(r.phi_rf)), "a zero right-hand side must give exactly zero"
    for k in set(range(case.entry.count)) - set(zero):  # its neighbour in the stack iterates
        assert results[k].reason == "maxiter" and np.any(_host(results[k].phi_rf))


def strict_raises(case, rng):
    if not case.entry.strict:
        pytest.skip(f"{case.entry.name} has no strict= (it never raises when unconverged)")
    inputs = case.inputs(rng)
    with pytest.raises(pb.ConvergenceError) as info:
        case.solve(inputs, rtol=1e-12, maxiter=1, strict=True)
    res = info.value.result
    assert res is not None and not res.converged and res.reason == "maxiter"
    assert res.iterations == 1


def nan_x0_refused(case, rng):
    inputs = case.inputs(rng)
    guess = np.zeros(case.device.shape)
    guess[2, 2, 2] = np.nan
    with pytest.raises(pb.InputError):
        case.solve(inputs, x0=[guess] * case.entry.count)


def nan_data_refused(case, rng):
    inputs = case.inputs(rng)
    if case.entry.name == "engine":
        inputs.atoms[2][0, 0, 1] = np.nan  # a frame's position
        with pytest.raises(pb.InputError):
            case.solve(inputs)
        return
    p = inputs.problems[0]
    phi_c = p.phi_coulomb.copy()
    phi_c[1, 2, 3] = np.nan
    with pytest.raises(pb.InputError):
        pb.Problem(p.grid, p.epsilon, phi_c, p.eps_cavity)


def breakdown_reported(case, rng, injection):
    inputs = case.inputs(rng, same=True)
    if injection == "huge x0":
        # finite in float64, but its residual overflows the float32 correction phases
        guess = np.full(case.device.shape, 1e37)
        results = case.solve(inputs, x0=[guess] * case.entry.count, check_every=1)
    else:
        if case.method != "jacobi":
            pytest.skip(f"{case.method} converges for every ω in (0, 2) on an SPD operator")
        # weighted Jacobi with ω = 1.95 amplifies the highest modes (|1 − ωλ| > 1 for λ ≈ 2)
        results = case.solve(inputs, omega=1.95, maxiter=2000)
    for r in results:
        assert not r.converged
        assert r.reason in ("nan", "diverged"), r.reason


BAD_OPTIONS = {
    "negative rtol": {"rtol": -1e-6},
    "maxiter -1": {"maxiter": -1},
    "unknown method": {"method": "gauss-seidel"},
    "omega 2": {"omega": 2.0},
    "omega 0": {"omega": 0.0},
    "omega -0.5": {"omega": -0.5},
    "unknown keyword": {"tolerance": 1e-6},
}


def bad_options(case, rng, bad):
    inputs = case.inputs(rng)
    with pytest.raises(pb.InputError):
        case.solve(inputs, **BAD_OPTIONS[bad])


def callback_called(case, rng):
    if not case.entry.callback:
        pytest.skip(f"{case.entry.name} takes no callback")
    inputs = case.inputs(rng)
    calls = []
    maxiter = 3
    results = case.solve(inputs, rtol=1e-12, maxiter=maxiter,
                         callback=lambda it, rel: calls.append((it, rel)))  # fmt: skip
    assert calls, "the callback was never called"
    its = [c[0] for c in calls]
    assert all(isinstance(i, int | np.integer) for i in its)
    assert its[0] == 0 and its == sorted(its) and its[-1] == results[0].iterations == maxiter
    rels = [c[1] for c in calls]
    assert all(isinstance(x, float) and np.isfinite(x) and x >= 0 for x in rels)
    assert rels[0] == pytest.approx(1.0)  # from the boundary values: b itself
    # the values are the loop's history (its last entry is recomputed after the last
    # refinement step; SOR's residual may grow over its first sweeps, so no monotony here)
    r0 = results[0]
    history = r0.extra.get("stack_residual_norms", r0.residual_norms)
    assert len(rels) == len(history) and rels[:-1] == pytest.approx(history[:-1])


CONTRACTS = {
    "test_converges": converges,
    "test_maxiter_honoured": maxiter_honoured,
    "test_x0_untouched_and_a_solution_returns_at_once": x0_untouched,
    "test_zero_rhs": zero_rhs,
    "test_strict_raises": strict_raises,
    "test_nan_x0_refused": nan_x0_refused,
    "test_nan_data_refused": nan_data_refused,
    "test_breakdown_reported": breakdown_reported,
    "test_bad_options": bad_options,
    "test_callback": callback_called,
}


# ---------------------------------------------------------------------- the tests
@pytest.mark.parametrize("salt", [False, True], ids=["no salt", "salt"])
def test_converges(solver, salt):
    _check("test_converges", solver, salt=salt)


@pytest.mark.parametrize("maxiter", [0, 2])
def test_maxiter_honoured(solver, maxiter):
    _check("test_maxiter_honoured", solver, maxiter=maxiter)


def test_x0_untouched_and_a_solution_returns_at_once(solver):
    _check("test_x0_untouched_and_a_solution_returns_at_once", solver)


@pytest.mark.parametrize("which", ["all", "one"])
def test_zero_rhs(solver, which):
    _check("test_zero_rhs", solver, which=which)


def test_strict_raises(solver):
    _check("test_strict_raises", solver)


def test_nan_x0_refused(solver):
    _check("test_nan_x0_refused", solver)


def test_nan_data_refused(solver):
    _check("test_nan_data_refused", solver)


@pytest.mark.parametrize("injection", ["huge x0", "jacobi omega 1.95"])
def test_breakdown_reported(solver, injection):
    _check("test_breakdown_reported", solver, injection=injection)


@pytest.mark.parametrize("bad", list(BAD_OPTIONS))
def test_bad_options(solver, bad):
    _check("test_bad_options", solver, bad=bad)


def test_callback(solver):
    _check("test_callback", solver)


# ---------------------------------------------------------------------- simulator subprocess
def _key(test, case, params) -> str:
    return json.dumps([test, case.id, params], sort_keys=True)


def _run(keys) -> dict:
    """Run the keyed contracts here (the simulator must be on); return their outcomes."""
    out = {}
    for key in keys:
        test, case_id, params = json.loads(key)
        case = CASE_BY_ID[case_id]
        t0 = time.perf_counter()
        try:
            CONTRACTS[test](case, _rng(test, case, **params), **params)
            outcome = {"ok": True}
        except pytest.skip.Exception as exc:
            outcome = {"ok": True, "skipped": str(exc.msg)}
        except Exception:
            outcome = {"ok": False, "error": traceback.format_exc()}
        outcome["seconds"] = round(time.perf_counter() - t0, 2)
        out[key] = outcome
    return out


_SIM_KEYS: list = []
_SIM_OUTCOMES: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _collect_sim_keys(request):
    """Remember the simulator cases this session runs (they go to one subprocess)."""
    keys = []
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        if item.module is not sys.modules[__name__] or spec is None:
            continue
        case = spec.params.get("solver")
        if case is None or not case.device.simulated or item.get_closest_marker("skip"):
            continue
        params = {k: v for k, v in spec.params.items() if k != "solver"}
        if not _sim_skip(item.originalname, case, params):
            keys.append(_key(item.originalname, case, params))
    _SIM_KEYS[:] = keys
    _SIM_OUTCOMES.clear()


def _sim_outcomes() -> dict:
    """The outcomes of every collected simulator case, from one subprocess (run on first use)."""
    if not _SIM_OUTCOMES:
        with tempfile.TemporaryDirectory() as tmp:
            todo, done = Path(tmp) / "keys.json", Path(tmp) / "outcomes.json"
            todo.write_text(json.dumps(_SIM_KEYS))
            env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
            command = [sys.executable, str(Path(__file__)), str(todo), str(done)]
            proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
            if not done.exists():
                pytest.fail(f"simulator subprocess failed:\n{proc.stdout}\n{proc.stderr}")
            _SIM_OUTCOMES.update(json.loads(done.read_text()))
    return _SIM_OUTCOMES


if __name__ == "__main__":
    if not SIM:
        sys.exit("run with NUMBA_ENABLE_CUDASIM=1")
    res = _run(json.loads(Path(sys.argv[1]).read_text()))
    Path(sys.argv[2]).write_text(json.dumps(res, indent=1))
    for key, outcome in res.items():
        state = "skip" if outcome.get("skipped") else ("ok" if outcome["ok"] else "FAIL")
        print(f"{state:4s} {outcome['seconds']:7.2f}s {key}")
