"""The CUDA backend on a real GPU (marker ``gpu``: skipped where no device is usable).

CPU and GPU agree to float32 round-off on 64³–129³ high-contrast problems (ε 1:80 spheres,
non-cubic shapes that are not multiples of any block, Dirichlet with salt and boundary values,
periodic), reruns are bitwise identical, CuPy in gives CuPy out without a host copy, NumPy in
gives NumPy out, and a solver is reused across problems. The measurement-only kernel shapes and
launch modes of ``benchmarks/sweep_variants.py`` give the package kernel's bits. The kernels
themselves are also checked in CI under the simulator (test_cuda_sim.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb
from pbsolver.operator import relative_residual

pytestmark = pytest.mark.gpu

DIRICHLET_SHAPE = (67, 45, 83)  # no axis a multiple of 2, 4, 8, 14, 16 or 30
PERIODIC_SHAPE = (66, 70, 98)  # even (red–black), still no multiple of the tile


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def problems():
    rng = np.random.default_rng(3)
    return {
        "dirichlet": random_problem(
            rng, shape=DIRICHLET_SHAPE, boundary="dirichlet", salt=True, boundary_values=True
        ),
        "periodic": random_problem(rng, shape=PERIODIC_SHAPE, boundary="periodic", faces=True),
    }


def backend(**kw):
    from pbsolver.backends.cuda import CUDABackend

    return CUDABackend(**kw)


def variant(**kw):
    """The benchmarks' backend with a measurement-only kernel shape or launch mode."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.sweep_variants import VariantBackend

    return VariantBackend(**kw)


@pytest.fixture(scope="module")
def stencils(problems):
    from pbsolver.backends.cpu.backend import CPUBackend

    cpu, gpu = CPUBackend(), backend()
    out = {}
    for name, p in problems.items():
        out[name] = (cpu, cpu.stencil(p, np.float32), gpu, gpu.stencil(p, np.float32))
    return out


@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_stencil_matches_cpu(stencils, boundary):
    _, sc, gpu, sg = stencils[boundary]
    for name in ("cx", "cy", "cz", "diag", "b"):
        assert rel(gpu.dev.to_numpy(getattr(sg, name)), getattr(sc, name)) < 1e-6, name


@pytest.mark.parametrize("kernel", ["tile", "point", "march", "pair", "pair32"])
@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_sor_kernels_match_cpu(stencils, kernel, boundary):
    cpu, sc, gpu, sg = stencils[boundary]
    rng = np.random.default_rng(11)
    x0 = rng.normal(0.0, 100.0, sc.shape).astype(np.float32)
    if kernel != "point":
        gpu = variant(kernel=kernel)
    xc, xg = x0.copy(), gpu.asarray(x0, np.float32)
    for count in (3, 4, 4, 4):  # odd, then eager, captured and replayed graphs
        cpu.sor_sweeps(sc, xc, 1.7, count)
        gpu.sor_sweeps(sg, xg, 1.7, count)
    assert rel(gpu.dev.to_numpy(xg), xc) < 2e-5
    assert rel(xc, x0) > 1e-3


@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_jacobi_residual_and_norm_match_cpu(stencils, boundary):
    cpu, sc, gpu, sg = stencils[boundary]
    rng = np.random.default_rng(12)
    x0 = rng.normal(0.0, 100.0, sc.shape).astype(np.float32)
    xc, xg = x0.copy(), gpu.asarray(x0, np.float32)
    cpu.jacobi_sweeps(sc, xc, np.empty_like(xc), 0.9, 5)
    gpu.jacobi_sweeps(sg, xg, gpu.zeros(sc.shape, np.float32), 0.9, 5)
    assert rel(gpu.dev.to_numpy(xg), xc) < 2e-5
    x64 = rng.normal(0.0, 100.0, sc.shape)
    rc = np.empty(sc.shape, np.float32)
    rg = gpu.zeros(sc.shape, np.float32)
    cpu.residual(sc, x64, rc)
    gpu.residual(sg, gpu.asarray(x64, np.float64), rg)
    assert rel(gpu.dev.to_numpy(rg), rc) < 1e-6
    want = cpu.residual_norm(sc, x64)
    for _ in range(3):  # eager, captured, replayed; diag recomputed in float32 on the GPU
        assert abs(gpu.residual_norm(sg, gpu.asarray(x64, np.float64)) - want) < 1e-6 * want


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_fused_sweeps_equal_the_two_pass_sweeps(stencils, boundary, count, monkeypatch):
    """The smoother's fused sweep (through a work buffer) gives the two-pass sweep's bits, with
    a stored κ̄² shift (Dirichlet), plain faces (periodic) and a stored diagonal (a Stencil);
    an odd count ends in ``x`` too."""
    from pbsolver.backends import Stencil
    from pbsolver.backends.cuda import fused_sweep

    _, sc, gpu, sg = stencils[boundary]
    monkeypatch.setattr(fused_sweep, "FUSED_MIN_NODES", 0)
    stored = Stencil(*(gpu.asarray(getattr(sc, n), np.float32) for n in ("cx", "cy", "cz")),
                     gpu.asarray(sc.diag, np.float32), gpu.asarray(sc.b, np.float32),
                     sc.periodic, sc.singular)  # fmt: skip
    rng = np.random.default_rng(15)
    x0 = rng.normal(0.0, 100.0, sc.shape).astype(np.float32)
    used = fused_sweep.kernel.cache_info()
    for st in (sg, stored):
        for first in (0, 1):
            want, got = gpu.asarray(x0, np.float32), gpu.asarray(x0, np.float32)
            work = gpu.zeros(sc.shape, np.float32)
            for _ in range(3):  # eager, captured, replayed
                gpu.rb_sor_sweeps(st, want, first, 1.3, count)
                gpu.rb_sor_sweeps(st, got, first, 1.3, count, work=work)
            w, g = gpu.dev.to_numpy(want), gpu.dev.to_numpy(got)
            assert rel(w, x0) > 1e-3
            assert np.array_equal(g, w), (type(st).__name__, first, rel(g, w))
    now = fused_sweep.kernel.cache_info()
    assert now.hits + now.misses > used.hits + used.misses  # the fused kernel ran


@pytest.mark.parametrize("method", ["multigrid", "mgcg"])
def test_solves_with_the_fused_smoother(method, monkeypatch):
    """A multigrid solve whose levels all sweep fused: the two-pass smoother's iterations and
    solution bit for bit (a salt problem, so that the finest level has the κ̄² shift)."""
    from pbsolver.backends.cuda import fused_sweep

    rng = np.random.default_rng(16)
    p = random_problem(rng, shape=(41, 38, 45), boundary="dirichlet", salt=True,
                       boundary_values=True)  # fmt: skip
    out = {}
    for threshold in (fused_sweep.MAX_NODES + 1, 0):
        monkeypatch.setattr(fused_sweep, "FUSED_MIN_NODES", threshold)
        used = fused_sweep.kernel.cache_info()
        res = pb.Solver(method=method, backend=backend(), rtol=1e-8).solve(p)
        assert res.converged
        now = fused_sweep.kernel.cache_info()
        assert (now.hits + now.misses > used.hits + used.misses) == (threshold == 0)
        out[threshold] = (res.iterations, np.asarray(res.phi_rf))
    (it_a, a), (it_b, b) = out.values()
    assert it_a == it_b
    np.testing.assert_array_equal(b, a)


# (fine shape, periodic) of transfer levels planned by the package's coarsening: odd counts,
# single-interval gaps, a 3-node axis, a periodic axis whose half is odd, and one level large
# enough that restriction walks many chunks
TRANSFER_LEVELS = [((67, 45, 83), False), ((66, 70, 98), True), ((10, 3, 18), True),
                   ((129, 97, 161), False)]  # fmt: skip


@pytest.mark.parametrize(("shape", "periodic"), TRANSFER_LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_transfers_equal_the_cpu_kernels(shape, periodic, dtype):
    """The CUDA C restriction and prolongation give the CPU kernels' bits (values over twelve
    orders of magnitude, so that float64 sums round), eager and replayed, and they ran."""
    from pbsolver.backends.cpu.backend import CPUBackend
    from pbsolver.backends.cuda import transfers
    from pbsolver.bench import transfer_level

    cpu, gpu = CPUBackend(), backend()
    tg = transfer_level(gpu, shape, periodic)
    tc = type(tg)(*(tuple(gpu.dev.to_numpy(a) for a in m) for m in (tg.pos, tg.lo, tg.hi)),
                  periodic, tg.fine_shape, tg.coarse_shape)  # fmt: skip
    rng = np.random.default_rng(17)

    def values(n):
        return (rng.normal(size=n) * 10.0 ** rng.uniform(-6, 6, size=n)).astype(dtype)

    fine, coarse = values(shape), values(tg.coarse_shape)
    want_r = np.full(tg.coarse_shape, np.nan, dtype)
    cpu.restrict(tc, fine, want_r)
    want_p = fine.copy()
    cpu.prolong_add(tc, coarse, want_p)
    used = transfers.kernel.cache_info()
    fine_g, coarse_g = gpu.asarray(fine, dtype), gpu.asarray(coarse, dtype)
    got_r, got_p = gpu.zeros(tg.coarse_shape, dtype), gpu.zeros(shape, dtype)
    for _ in range(3):  # eager, captured, replayed (the same buffers)
        gpu.fill(got_p, 0.0)
        gpu.axpy(got_p, fine_g, 1.0)
        gpu.restrict(tg, fine_g, got_r)
        gpu.prolong_add(tg, coarse_g, got_p)
        np.testing.assert_array_equal(gpu.dev.to_numpy(got_r), want_r)
        np.testing.assert_array_equal(gpu.dev.to_numpy(got_p), want_p)
    now = transfers.kernel.cache_info()
    assert now.hits + now.misses > used.hits + used.misses  # the CUDA C kernels ran


def test_fill_zero_and_other_values(cp):
    """``fill`` with +0 (a memset) and with other values (the kernel), eager and replayed, on
    float32 and float64 arrays that held NaN; −0.0 keeps its sign."""
    gpu = backend()
    for dtype in (np.float32, np.float64):
        x = cp.full((37, 21, 19), np.nan, dtype=dtype)
        for value in (0.0, 2.5, -0.0, 0.0):
            for _ in range(3):  # eager, captured, replayed
                x[...] = np.nan
                gpu.fill(x, value)
                got = gpu.dev.to_numpy(x)
                assert np.array_equal(got, np.full(x.shape, value, dtype)), (dtype, value)
                assert np.array_equal(np.signbit(got), np.full(x.shape, np.signbit(value)))


def test_vector_updates_tell_negative_zero_from_zero(cp):
    """``axpy`` and ``axpby`` with a = +0.0 and −0.0 in turn, eager and replayed: each call's
    graph is its own (a key of ``float(a)`` would replay +0.0's graph for −0.0, and the sign of
    a zero result would be wrong)."""
    gpu = backend()
    x = cp.ones((23, 17, 9), dtype=cp.float32)
    y = cp.empty_like(x)
    for a in (0.0, -0.0, 0.0, -0.0):
        for _ in range(3):  # eager, captured, replayed
            gpu.fill(y, -0.0)  # (CuPy's own fill writes +0.0 for −0.0: a memset)
            gpu.axpy(y, x, a)  # −0 + a·1
            assert np.array_equal(np.signbit(gpu.dev.to_numpy(y)), np.full(x.shape, np.signbit(a)))
            y[...] = 0.0
            gpu.axpby(y, x, a, -0.0)  # a·1 + (−0)·(+0)
            assert np.array_equal(np.signbit(gpu.dev.to_numpy(y)), np.full(x.shape, np.signbit(a)))


@pytest.mark.parametrize("kernel", ["tile", "point"])
def test_bitwise_identical_reruns(stencils, kernel):
    _, sc, _, _ = stencils["dirichlet"]
    gpu = backend() if kernel == "point" else variant(kernel=kernel)
    rng = np.random.default_rng(13)
    x0 = rng.normal(0.0, 100.0, sc.shape).astype(np.float32)
    _, _, _, sg = stencils["dirichlet"]
    runs = []
    for _ in range(2):
        x = gpu.asarray(x0, np.float32)
        for _ in range(5):
            gpu.sor_sweeps(sg, x, 1.8, 10)
        runs.append(gpu.dev.to_numpy(x))
    assert np.array_equal(runs[0], runs[1])


def test_launch_modes_give_identical_bits(stencils):
    _, sc, _, sg = stencils["periodic"]
    rng = np.random.default_rng(14)
    x0 = rng.normal(0.0, 100.0, sc.shape).astype(np.float32)
    out = {}
    for mode in ("naive", "stream", "graph"):
        gpu = variant(launch=mode)
        x = gpu.asarray(x0, np.float32)
        for _ in range(3):
            gpu.sor_sweeps(sg, x, 1.5, 4)
        out[mode] = (gpu.dev.to_numpy(x), gpu.residual_norm(sg, x))
    assert np.array_equal(out["naive"][0], out["graph"][0])
    assert np.array_equal(out["stream"][0], out["graph"][0])
    assert out["naive"][1] == out["graph"][1]


@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_solve_matches_cpu(problems, boundary):
    p = problems[boundary]
    rg = pb.Solver(method="sor", backend="cuda", rtol=1e-6).solve(p)
    rc = pb.Solver(method="sor", backend="cpu", rtol=1e-6).solve(p)
    assert rg.converged and rc.converged
    assert isinstance(rg.phi_rf, np.ndarray)
    assert relative_residual(p, rg.phi_rf) <= 1.5e-6
    assert rel(rg.phi_rf, rc.phi_rf) < 1e-3
    # and bitwise reproducible, history included
    again = pb.Solver(method="sor", backend="cuda", rtol=1e-6).solve(p)
    assert np.array_equal(again.phi_rf, rg.phi_rf)
    assert again.residual_norms == rg.residual_norms


def test_cupy_in_cupy_out_without_host_copies(cp, problems, monkeypatch):
    p = problems["dirichlet"]
    ref = pb.Solver(method="sor", backend="cuda", maxiter=200).solve(p).phi_rf
    kw = {"boundary": "dirichlet", "kappa2": cp.asarray(p.kappa2)}
    kw["boundary_values"] = cp.asarray(p.boundary_values)
    pd = pb.Problem(p.grid, cp.asarray(p.epsilon), cp.asarray(p.phi_coulomb), p.eps_cavity, **kw)

    from pbsolver.backends.cuda.device import CuPyDevice

    def refuse(*a, **k):
        raise AssertionError("a device array was copied to the host during the solve")

    monkeypatch.setattr(CuPyDevice, "to_numpy", refuse)
    monkeypatch.setattr(cp, "asnumpy", refuse)
    res = pb.Solver(method="sor", backend="auto", maxiter=200).solve(pd)
    monkeypatch.undo()
    assert res.backend == "cuda"
    assert isinstance(res.phi_rf, cp.ndarray)
    assert np.array_equal(cp.asnumpy(res.phi_rf), ref)


def test_numba_device_arrays_accepted(cp, problems):
    from numba import cuda

    p = problems["periodic"]
    faces = tuple(cuda.to_device(np.ascontiguousarray(f)) for f in p.epsilon_faces)
    pn = pb.Problem(
        p.grid,
        phi_coulomb=cuda.to_device(p.phi_coulomb),
        eps_cavity=p.eps_cavity,
        epsilon_faces=faces,
        boundary="periodic",
    )
    res = pb.Solver(method="sor", backend="cuda", maxiter=100).solve(pn)
    ref = pb.Solver(method="sor", backend="cuda", maxiter=100).solve(p)
    assert np.array_equal(cp.asnumpy(res.phi_rf), ref.phi_rf)


def test_solver_reused_across_problems(problems):
    from pbsolver.backends.cuda import CUDABackend

    shared = CUDABackend()
    solver = pb.Solver(method="sor", backend=shared, rtol=1e-5)
    rng = np.random.default_rng(15)
    others = [random_problem(rng, shape=DIRICHLET_SHAPE, salt=True) for _ in range(2)]
    first = [solver.solve(q).phi_rf for q in others]
    again = [solver.solve(q).phi_rf for q in reversed(others)][::-1]
    for q, a, b in zip(others, first, again, strict=True):
        fresh = pb.Solver(method="sor", backend=CUDABackend(), rtol=1e-5).solve(q).phi_rf
        assert np.array_equal(a, fresh) and np.array_equal(b, fresh)
    assert shared.dev.replays > 0, "graphs were never replayed"


def test_float64_solve(problems):
    p = problems["dirichlet"]
    r = pb.Solver(method="sor", backend="cuda", dtype=np.float64, rtol=1e-9).solve(p)
    assert r.converged and relative_residual(p, r.phi_rf) <= 1.5e-9


def test_capture_runner_replays_one_graph(cp):
    gpu = backend()
    y = gpu.zeros((40, 30, 20), np.float32)
    one = gpu.asarray(np.ones((40, 30, 20)), np.float32)
    runner = gpu.capture(lambda: (gpu.axpy(y, one, 2.0), gpu.axpy(y, one, 1.0)))
    for _ in range(4):  # eager, captured + launched, replayed, replayed
        runner()
    gpu.synchronize()
    assert gpu.dev.captures == 1
    assert np.all(gpu.dev.to_numpy(y) == 12.0)


def test_multigrid_runs_on_cuda(problems):
    from pbsolver.solving.methods import METHODS

    if "multigrid" not in METHODS:
        pytest.skip("no multigrid method in this checkout")
    p = problems["dirichlet"]
    rg = pb.Solver(method="multigrid", backend="cuda", rtol=1e-6).solve(p)
    rc = pb.Solver(method="multigrid", backend="cpu", rtol=1e-6).solve(p)
    assert rg.converged and rc.converged
    assert relative_residual(p, rg.phi_rf) <= 1.5e-6
    assert rel(rg.phi_rf, rc.phi_rf) < 1e-3


def test_sor_until_while_node_matches_host_loop(stencils):
    _, sc, _, sg = stencils["dirichlet"]
    host, dev = variant(), variant()
    bnorm = host.residual_norm(sg, host.zeros(sc.shape, np.float32))
    out = {}
    for name, be, on_device in (("host", host, False), ("device", dev, True)):
        x = be.zeros(sc.shape, np.float32)
        sweeps, r = be.sor_until(sg, x, 1.9, 1e-4 * bnorm, 5000, 10, on_device=on_device)
        again = be.zeros(sc.shape, np.float32)  # a second launch of the cached graph
        assert (
            be.sor_until(sg, again, 1.9, 1e-4 * bnorm, 5000, 10, on_device=on_device)[0] == sweeps
        )
        out[name] = (sweeps, r, be.dev.to_numpy(x))
    assert out["host"][0] == out["device"][0] < 5000
    assert out["device"][1] <= 1e-4 * bnorm
    assert np.array_equal(out["host"][2], out["device"][2])


def test_tile_runner_survives_work_buffer_eviction(stencils):
    """A captured runner replays into the work buffer it captured, even once the backend's
    small cache has dropped it (the runner keeps it alive)."""
    _, sc, _, sg = stencils["periodic"]
    gpu, ref = variant(kernel="tile"), variant(kernel="tile", launch="stream")
    x0 = np.random.default_rng(16).normal(0.0, 100.0, sc.shape).astype(np.float32)
    x, xr = gpu.asarray(x0, np.float32), ref.asarray(x0, np.float32)
    runner = gpu.capture(lambda: gpu.sor_sweeps(sg, x, 1.5, 3))
    for _ in range(4):  # eager, captured, replayed, replayed
        runner()
        ref.sor_sweeps(sg, xr, 1.5, 3)
        others = [gpu.zeros((8, 8, 8), np.float32) for _ in range(5)]
        for other in others:
            gpu._work_for(other)
    assert gpu.dev.captures >= 1 and gpu.dev.replays >= 2
    assert np.array_equal(gpu.dev.to_numpy(x), ref.dev.to_numpy(xr))


_SPIN_WRITE = r"""
extern "C" __global__ void spin_then_write(double* a, long long cycles, double value) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    a[0] = value;
}
"""


def test_stream_context_orders_the_backend_stream_with_the_callers(cp):
    """Work the caller queued before the context is done before the backend's, and vice versa.

    A kernel that spins about 50 ms and then writes is queued on one side; the other side
    copies the written value without any host synchronisation in between. The backend's
    stream is non-blocking, so without the context's waits the copy reads the old value.
    """
    be = backend()
    spin = cp.RawKernel(_SPIN_WRITE, "spin_then_write")
    cycles = np.int64(100_000_000)  # ≈ 50 ms at 2 GHz
    for value in (1.0, 2.0):  # caller → backend
        a, b = cp.zeros(1), cp.zeros(1)
        cp.cuda.Device().synchronize()
        spin((1,), (1,), (a, cycles, np.float64(value)))  # on the caller's (legacy) stream
        with be.stream_context():
            assert cp.cuda.get_current_stream().ptr == be.stream.ptr
            b[...] = a
        assert float(b.get()[0]) == value
    for value in (3.0, 4.0):  # backend → caller
        a, b = cp.zeros(1), cp.zeros(1)
        cp.cuda.Device().synchronize()
        with be.stream_context():
            spin((1,), (1,), (a, cycles, np.float64(value)))  # on the backend's stream
        b[...] = a  # on the caller's stream, after the context
        assert float(b.get()[0]) == value
