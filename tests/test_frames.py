"""The stacked frame engine (pbsolver.frames) against the general path on the same grid."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.md.calculator import sample_field
from pbsolver.md.engine import StackedFrames
from pbsolver.molecule.build import build_problem


def _solute(seed, n=40, spread=2.5):
    rng = np.random.default_rng(seed)
    pos = rng.normal(0.0, spread, (n, 3))
    q = rng.uniform(-1.0, 1.0, n)
    r = rng.uniform(1.0, 2.2, n)
    return pb.Atoms(pos, q, r), rng


def _reference(atoms, grid, *, eps_in, eps_out, salt, boundary_kind="mdh", rtol=1e-9):
    """Energy, potentials and forces of the general path (maps + float64 SOR) on ``grid``."""
    p = build_problem(
        atoms, grid, eps_in=eps_in, eps_out=eps_out, ionic_strength=salt, surface="vdw",
        boundary_kind=boundary_kind,
    )  # fmt: skip
    res = pb.Solver(method="sor", backend="cpu", rtol=rtol, dtype=np.float64).solve(p)
    v, g = sample_field(grid, res.phi_rf, atoms.positions)
    return 0.5 * float(np.dot(atoms.charges, v)), v, -atoms.charges[:, None] * g, res.phi_rf


@pytest.mark.parametrize("method", ["sor", "multigrid"])
@pytest.mark.parametrize(
    ("eps_in", "eps_out", "salt", "kind"),
    [(2.0, 78.54, 0.0, "mdh"), (1.0, 80.0, 0.15, "mdh"), (4.0, 78.54, 0.5, "zero")],
)
def test_stacked_matches_general_path_on_the_same_grid(eps_in, eps_out, salt, kind, method):
    atoms, _ = _solute(3)
    calc = pb.ReactionFieldCalculator(
        atoms, spacing=0.55, eps_in=eps_in, eps_out=eps_out, ionic_strength=salt,
        surface="vdw", backend="cpu", engine="stacked", margin=3.0, skin=0.5, rtol=1e-9,
        dtype=np.float64, map_options={"boundary_kind": kind}, method=method,
    )  # fmt: skip
    fr = calc.compute()
    assert fr.converged and fr.solve.extra["engine"] == "stacked"
    assert fr.solve.method == method
    e, v, f, phi = _reference(atoms, fr.grid, eps_in=eps_in, eps_out=eps_out, salt=salt,
                              boundary_kind=kind)  # fmt: skip
    assert abs(fr.energy / e - 1) < 1e-6
    np.testing.assert_allclose(fr.potentials, v, rtol=1e-5, atol=1e-5 * np.abs(v).max())
    np.testing.assert_allclose(fr.forces, f, atol=1e-5 * np.abs(f).max())
    np.testing.assert_allclose(fr.solve.phi_rf, phi, atol=1e-6 * np.abs(phi).max())


def test_float32_refined_stacked_meets_rtol_and_matches():
    atoms, _ = _solute(5, n=30)
    calc = pb.ReactionFieldCalculator(
        atoms, spacing=0.6, eps_in=1.0, surface="vdw", backend="cpu", engine="stacked",
        margin=3.0, skin=0.5, rtol=1e-6,
    )  # fmt: skip
    fr = calc.compute()
    e, *_ = _reference(atoms, fr.grid, eps_in=1.0, eps_out=78.54, salt=0.0)
    assert fr.converged
    assert fr.solve.residual_norms[-1] <= 1e-6
    assert abs(fr.energy / e - 1) < 1e-5


def test_batch_equals_frames_solved_alone_on_the_batch_grid():
    atoms, rng = _solute(7, n=35)
    frames = [atoms.positions + rng.normal(0.0, 0.1, atoms.positions.shape) for _ in range(3)]
    kw = dict(spacing=0.6, eps_in=2.0, ionic_strength=0.1, surface="vdw", backend="cpu",
              engine="stacked", margin=3.0, skin=0.5, rtol=1e-8, dtype=np.float64)  # fmt: skip
    calc = pb.ReactionFieldCalculator(atoms, **kw)
    out = calc.compute_batch(frames)
    assert len(out) == 3 and len({fr.grid for fr in out}) == 1
    for fr, pos in zip(out, frames, strict=True):
        frame_atoms = pb.Atoms(pos, atoms.charges, atoms.radii)
        e, _, f, _ = _reference(frame_atoms, fr.grid, eps_in=2.0, eps_out=78.54, salt=0.1)
        assert abs(fr.energy / e - 1) < 1e-6
        np.testing.assert_allclose(fr.forces, f, atol=1e-5 * np.abs(f).max())
    # the next batch of the same size reuses the engine's buffers and starts warm
    engine = calc._stacked
    again = calc.compute_batch(frames)
    assert calc._stacked is engine and len(engine._buffers) == 1
    assert all(fr.warm_start for fr in again)
    assert again[0].iterations < out[0].iterations
    for a, b in zip(out, again, strict=True):
        assert abs(a.energy / b.energy - 1) < 1e-6


def test_warm_start_begins_near_the_answer_and_sweeps_less():
    atoms, rng = _solute(11, n=40)
    calc = pb.ReactionFieldCalculator(
        atoms, spacing=0.6, surface="vdw", backend="cpu", engine="stacked", margin=3.0,
        skin=1.0, rtol=1e-6,
    )  # fmt: skip
    cold = calc.compute().iterations
    warm = calc.compute(atoms.positions + rng.normal(0.0, 0.002, atoms.positions.shape))
    assert warm.warm_start and not warm.regridded
    assert warm.solve.residual_norms[0] < 1e-2  # the old solution is already close
    assert warm.converged and warm.iterations < cold


def test_engine_choice_and_refusals():
    atoms, _ = _solute(1, n=5)
    auto = pb.ReactionFieldCalculator(atoms, surface="vdw", backend="cpu")
    assert auto.engine == "general"  # the CPU keeps multigrid
    with pytest.raises(pb.InputError, match="surfaces 'vdw', 'mol' and 'smol'"):
        pb.ReactionFieldCalculator(atoms, surface="svdw", backend="cpu", engine="stacked")
    with pytest.raises(pb.InputError, match="following"):
        pb.ReactionFieldCalculator(
            atoms, surface="vdw", backend="cpu", engine="stacked", box=(30.0, 30.0, 30.0)
        )
    with pytest.raises(pb.InputError, match="solves with"):
        pb.ReactionFieldCalculator(
            atoms, surface="vdw", backend="cpu", engine="stacked", method="mgcg"
        )
    with pytest.raises(pb.InputError, match="solves with"):
        StackedFrames([1.0], [1.0], (9, 9, 9), 0.5, pb.Solver(backend="cpu"), method="jacobi")
    with pytest.raises(pb.InputError, match="engine must be"):
        pb.ReactionFieldCalculator(atoms, surface="vdw", backend="cpu", engine="fast")
    with pytest.raises(pb.InputError, match="boundary kinds"):
        StackedFrames([1.0], [1.0], (9, 9, 9), 0.5, pb.Solver(backend="cpu"),
                      boundary_kind="sdh")  # fmt: skip


def test_assembly_writes_each_blocks_unlifted_faces_for_multigrid():
    atoms, rng = _solute(17, n=30)
    shape, h, kappa, subs = (19, 18, 17), 0.7, 0.3, 4
    solver = pb.Solver(backend="cpu", rtol=1e-6)
    eng = StackedFrames(atoms.charges, atoms.radii, shape, h, solver, eps_in=2.0, eps_out=80.0,
                        kappa=kappa, kappa_subsamples=subs, method="multigrid")  # fmt: skip
    pos = np.stack([atoms.positions + rng.normal(0.0, 0.1, atoms.positions.shape)
                    for _ in range(2)]) + 6.0  # fmt: skip
    out = eng.run(pos, np.zeros((2, 3)))
    assert out.method == "multigrid" and out.converged.all()
    assert out.iterations <= 15  # coarse operators from wrong faces would need far more cycles
    buf = eng._buffers[2]
    local = np.arange(2 * eng.stride) % eng.stride
    inside = (local < shape[0])[:, None, None]
    for axis, frac in enumerate((buf.fx, buf.fy, buf.fz)):
        f = np.clip(frac, 0.0, 1.0)
        want = 1.0 / (f / 2.0 + (1.0 - f) / 80.0) / h**2 * inside
        if axis == 0:
            want[local >= shape[0] - 1] = 0.0
        elif axis == 1:
            want[:, -1] = 0.0
        else:
            want[:, :, -1] = 0.0
        np.testing.assert_allclose(buf.unl[axis], want, rtol=1e-12, atol=0)
    k2 = 80.0 * kappa**2 * np.clip(1.0 - buf.cov / subs**2, 0.0, 1.0) * inside
    np.testing.assert_allclose(buf.unl[3], k2, rtol=1e-12, atol=0)
    assert buf.unl[3].max() > 0 and (buf.unl[3] == 0).any()


def test_a_line_through_too_many_spheres_is_refused():
    n = 300  # a row of overlapping spheres along x: the central lines meet all of them
    pos = np.zeros((n, 3))
    pos[:, 0] = np.linspace(-15.0, 15.0, n)
    atoms = pb.Atoms(pos, np.zeros(n), np.full(n, 1.5))
    calc = pb.ReactionFieldCalculator(
        atoms, spacing=1.0, surface="vdw", backend="cpu", engine="stacked", margin=3.0, skin=0.0
    )
    with pytest.raises(pb.InputError, match="more than 256 atomic spheres"):
        calc.compute()


def test_wrong_positions_are_refused():
    atoms, _ = _solute(2, n=6)
    calc = pb.ReactionFieldCalculator(atoms, surface="vdw", backend="cpu", engine="stacked")
    with pytest.raises(pb.InputError, match="shape"):
        calc.compute(np.zeros((5, 3)))
    bad = atoms.positions.copy()
    bad[2, 1] = np.nan
    with pytest.raises(pb.InputError, match="not finite"):
        calc.compute_batch([atoms.positions, bad])


# ---------------------------------------------------------------------- CUDA kernels
def _kernel_inputs(seed):
    rng = np.random.default_rng(seed)
    nf, na, shape, h = 2, 7, (7, 8, 6), np.array([0.7, 0.6, 0.8])
    stride = shape[0] + shape[0] % 2
    pos = rng.uniform(1.2, 3.4, (nf, na, 3))
    origin = rng.uniform(-0.3, 0.3, (nf, 3))
    q = rng.uniform(-1, 1, na)
    rad = rng.uniform(0.6, 1.4, na)
    return nf, shape, h, stride, pos, origin, q, rad


@pytest.mark.cudasim
def test_cuda_frame_kernels_equal_the_cpu_ones_under_the_simulator():
    pytest.importorskip("numba.cuda")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        # numba reads the switch once, at import: run this test again in a simulator process
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        test = f"{__file__}::test_cuda_frame_kernels_equal_the_cpu_ones_under_the_simulator"
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", test],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-3000:]
        return
    from pbsolver.backends.frame_kernels import (
        COULOMB_NODES,
        COULOMB_NODES_WIDE,
        THREADS,
        blocks,
        cpu_kernels,
        cuda_kernels,
    )
    from pbsolver.md.engine import _outer_layer

    C, G = cpu_kernels(), cuda_kernels()
    nf, shape, h, stride, pos, origin, q, rad = _kernel_inputs(4)
    nx, ny, nz = shape
    big = (nf * stride, ny, nz)

    def both(name, items, out_index, *args, rtol=1e-12, nodes=COULOMB_NODES):
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        b = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        getattr(C, name)(*a)
        per_block = {"coulomb": nodes * THREADS, "boundary": THREADS}.get(name)
        grid = (blocks(items // nf, per_block), nf) if per_block else blocks(items)
        kernel = G.coulomb_kernel(nodes) if name == "coulomb" else getattr(G, name)
        kernel[grid, THREADS](*b, *([np.zeros(1, np.int64)] if name in
                                    ("edges", "ion") else []))  # fmt: skip
        np.testing.assert_allclose(b[out_index], a[out_index], rtol=rtol, atol=rtol)
        assert np.any(a[out_index] != 0)
        return a[out_index]

    fr = []
    lines = (ny * nz, nx * nz, nx * ny)
    for axis in range(3):
        fr.append(both("edges", nf * lines[axis], 0, np.zeros(big), pos, rad, axis, nx, ny, nz,
                       stride, origin, h))  # fmt: skip
    cov = both("ion", nf * nx * ny, 0, np.zeros(big), pos, rad + 0.5, nx, ny, nz, stride,
               origin, h, 2)  # fmt: skip
    # float32 direct sums (q·rsqrt(r²) on the device, q/√r² here): a few 1e-7 apart a term
    rel = (pos - origin[:, None, :]).astype(np.float32)
    q32, f32 = q.astype(np.float32), np.float32
    phic = both("coulomb", nf * nx * ny * nz, 0, np.zeros(big), rel, q32, 694.0, nx, ny, nz,
                stride, h, rtol=3e-6)  # fmt: skip
    # an atom on a node gives ±inf there; an uncharged atom on a node adds nothing (not NaN)
    on, q_on = rel.copy(), q32.copy()
    on[0, 0] = np.float32(2 * h[0]), np.float32(3 * h[1]), np.float32(1 * h[2])
    on[1, 1] = np.float32(4 * h[0]), np.float32(2 * h[1]), np.float32(3 * h[2])
    q_on[0], q_on[1] = 0.75, 0.0
    phic_on = both("coulomb", nf * nx * ny * nz, 0, np.zeros(big), on, q_on, 694.0, nx, ny, nz,
                   stride, h, rtol=3e-6)  # fmt: skip
    assert phic_on[2, 3, 1] == np.inf and np.isfinite(phic_on[stride + 4, 2, 3])
    wide = both("coulomb", nf * nx * ny * nz, 0, np.zeros(big), on, q_on, 694.0, nx, ny, nz,
                stride, h, rtol=3e-6, nodes=COULOMB_NODES_WIDE)  # fmt: skip
    np.testing.assert_array_equal(wide, phic_on)
    assert np.isfinite(np.delete(phic_on.ravel(), (2 * ny + 3) * nz + 1)).all()
    # atoms an ulp off a node (within ON_NODE of it): ±inf there on the CPU (its pair body) and
    # on the device (φ_c, then the on_nodes kernel); NaN where opposite charges share a node
    near, q_near = on.copy(), q32.copy()
    near[0, 0, 0] = np.nextafter(near[0, 0, 0], np.float32(np.inf))
    near[1, 1] = near[0, 0]  # frame 1: two opposite charges on one node
    near[1, 2] = np.nextafter(near[0, 0], np.float32(-np.inf))
    q_near[0], q_near[1], q_near[2] = -0.75, 0.5, -0.25
    a, b = np.zeros(big), np.zeros(big)
    C.coulomb(a, near, q_near, 694.0, nx, ny, nz, stride, h)
    G.coulomb[(blocks(nx * ny * nz, COULOMB_NODES * THREADS), nf), THREADS](
        b, near, q_near, 694.0, nx, ny, nz, stride, h
    )
    assert np.isfinite(b[2, 3, 1])  # a large finite sum until on_nodes has run
    G.on_nodes[blocks(nf * len(q_near)), THREADS](b, near, q_near, nx, ny, nz, stride, h)
    assert a[2, 3, 1] == b[2, 3, 1] == -np.inf and np.isnan(b[stride + 2, 3, 1])
    # NaNs equal, as everything else (float32 sums: terms of ~10³ cancel to ~0.1 at some nodes)
    np.testing.assert_allclose(b, a, rtol=3e-6, atol=1e-3)
    nodes = _outer_layer(shape)
    g = both("boundary", nf * len(nodes), 0, np.zeros(big), rel, q32, rad.astype(np.float32),
             nodes, f32(0.1), f32(78.5), f32(2.0), 1389.0, stride, h, rtol=1e-6)  # fmt: skip
    params = np.array([h[0] ** 2, h[1] ** 2, h[2] ** 2, 2.0, 78.5, 2.0, 0.6, 0.25, 1.0])
    out64 = tuple(np.zeros(big) for _ in range(5))
    out32 = tuple(np.zeros(big, np.float32) for _ in range(5))
    unl = tuple(np.full(big, np.nan) for _ in range(4))
    a64, a32 = tuple(x.copy() for x in out64), tuple(x.copy() for x in out32)
    a_unl = tuple(x.copy() for x in unl)
    C.assemble(*fr, phic, cov, g, nf, nx, ny, nz, stride, params, a64, a32, a_unl)
    G.assemble[blocks(nf * stride * ny * nz), THREADS](*fr, phic, cov, g, nf, nx, ny, nz, stride,
                                                       params, out64, out32, unl)  # fmt: skip
    for x, y in zip(a64 + a32 + a_unl, out64 + out32 + unl, strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=0)
    assert all(np.isfinite(x).all() for x in a_unl)  # every node written
    phi = np.random.default_rng(0).normal(size=big)
    for cubic in (False, True):
        s_cpu, s_gpu = np.zeros((nf, pos.shape[1], 4)), np.zeros((nf, pos.shape[1], 4))
        C.sample(phi, pos, nx, ny, nz, stride, origin, h, cubic, s_cpu)
        G.sample[blocks(pos.shape[0] * pos.shape[1]), THREADS](phi, pos, nx, ny, nz, stride,
                                                               origin, h, cubic, s_gpu)  # fmt: skip
        np.testing.assert_allclose(s_gpu, s_cpu, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@pytest.mark.parametrize("method", ["sor", "multigrid"])
def test_cuda_stacked_calculator_matches_the_cpu_engine(method):
    cp = pytest.importorskip("cupy")
    atoms, rng = _solute(9, n=60)
    kw = dict(spacing=0.6, eps_in=2.0, ionic_strength=0.1, surface="vdw", margin=3.0, skin=1.0,
              rtol=1e-6, method=method)  # fmt: skip
    gpu = pb.ReactionFieldCalculator(atoms, backend="cuda", **kw)
    assert gpu.engine == "stacked"
    cpu = pb.ReactionFieldCalculator(atoms, backend="cpu", engine="stacked", **kw)
    frames = [atoms.positions + rng.normal(0.0, 0.05, atoms.positions.shape) for _ in range(4)]
    out_cpu = cpu.compute_batch(frames)
    captures = gpu.backend.dev.captures
    # three calls: eager, captured into a CUDA graph, replayed (the maps' graph must hold the
    # current positions, not the first call's)
    for call in range(3):
        moved = [f + 0.01 * call for f in frames]
        out_gpu = gpu.compute_batch([cp.asarray(f) for f in moved])
        out_cpu = cpu.compute_batch(moved)
        for a, b in zip(out_gpu, out_cpu, strict=True):
            assert a.converged and isinstance(a.forces, cp.ndarray)
            assert a.solve.method == method
            assert abs(a.energy / b.energy - 1) < 1e-5
            f = cp.asnumpy(a.forces)
            np.testing.assert_allclose(f, b.forces, atol=1e-4 * np.abs(b.forces).max())
    assert gpu.backend.dev.captures > captures
    one = gpu.compute(frames[-1])  # one by one, NumPy in → NumPy out, warm
    assert isinstance(one.forces, np.ndarray) and one.warm_start and one.converged


def test_a_moved_grid_warm_starts_with_debye_huckel_in_the_new_nodes(monkeypatch):
    atoms, _ = _solute(13, n=30)
    kw = dict(spacing=0.6, surface="vdw", backend="cpu", engine="stacked", margin=3.0,
              skin=0.3, rtol=1e-8, dtype=np.float64)  # fmt: skip
    shifted = atoms.positions + np.array([2.0, -1.5, 1.0])  # beyond the skin: the grid moves

    def second_frame(fill):
        calc = pb.ReactionFieldCalculator(atoms, **kw)
        calc.compute()
        if not fill:
            monkeypatch.setattr(calc._stacked, "_fill_guess", lambda *a: None)
        fr = calc.compute(shifted)
        monkeypatch.undo()
        return fr

    filled, bare = second_frame(True), second_frame(False)
    assert filled.regridded and filled.warm_start and filled.converged
    # the uncovered slabs start from Debye–Hückel instead of zero: a closer guess
    assert filled.solve.residual_norms[0] < 0.5 * bare.solve.residual_norms[0]
    moved = pb.Atoms(shifted, atoms.charges, atoms.radii)
    e, *_ = _reference(moved, filled.grid, eps_in=2.0, eps_out=78.54, salt=0.0)
    assert abs(filled.energy / e - 1) < 1e-6
