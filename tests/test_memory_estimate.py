"""Memory estimates checked before allocating: file reads, solves and molecule maps.

``$PBSOLVER_MEMORY_LIMIT`` makes the refusals deterministic whatever the test machine has.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from _pbio import FAST, leftovers, sha256, small_problem, visible_files, write_input
from click.testing import CliRunner

import pbsolver as pb
from pbsolver import cli, resources
from pbsolver.exceptions import InputError
from pbsolver.io import hdf5


def test_estimates_follow_the_arrays_each_method_allocates():
    per = resources.bytes_per_node
    # float32 with refinement, at its peak (the system being made): 5 float32 stencil arrays,
    # the checked operator's float64 b (its faces are the problem's maps), φ₀ and its copy
    assert per("sor", "cpu", np.float32) == 5 * 4 + 8 + 2 * 8
    # without refinement the checked operator and the float64 iterate are gone
    assert per("sor", "cpu", np.float32, refine=False) < per("sor", "cpu", np.float32)
    # float64 storage never refines
    assert per("sor", "cpu", np.float64) == per("sor", "cpu", np.float64, refine=False)
    # more work buffers, never less memory; the peak is the larger of a stencil build's
    # temporaries and the iteration's buffers, so MG-CG's four extra vectors show in float64
    for dtype in (np.float32, np.float64):
        assert per("sor", "cpu", dtype) <= per("multigrid", "cpu", dtype)
        assert per("multigrid", "cpu", dtype) <= per("mgcg", "cpu", dtype)
    assert per("sor", "cpu", np.float64) < per("mgcg", "cpu", np.float64)
    assert per("auto", "cuda") == per("mgcg", "cuda")
    assert per("sor", molecule=True) == per("sor") + 96
    n = 65
    assert resources.estimate_bytes((n, n, n), "sor") == n**3 * per("sor")
    assert resources.estimate_bytes((n, n, 2 * n), "sor") == 2 * n**3 * per("sor")
    assert resources.estimate_bytes((9, 9, 9), "sor", molecule=True, n_atoms=10) == (
        9**3 * per("sor", molecule=True) + 640
    )


@pytest.mark.parametrize(
    ("method", "dtype", "refine", "n"),
    [
        ("sor", np.float32, True, 33),
        ("multigrid", np.float32, True, 65),
        ("mgcg", np.float32, True, 65),
        ("multigrid", np.float64, False, 65),
    ],
)
def test_estimate_matches_the_traced_peak(method, dtype, refine, n):
    """The estimate against tracemalloc's peak of a CPU solve (NumPy traces its buffers).

    The sphere map with salt of ``pbsolver bench`` (multigrid on 65³: a coarsest level of 125
    nodes, whose dense inverse is negligible; SOR, which keeps no levels, on 33³ for time),
    solved once untraced first so that no compilation is traced: the solve's own arrays on
    top of the problem's, within 5 % below and 10 % above.
    """
    import tracemalloc

    from pbsolver.bench import random_problem

    problem = random_problem(n, seed=100 + n, salt=True)
    solver = pb.Solver(method=method, backend="cpu", rtol=1e-6, dtype=dtype, refine=refine)
    assert solver.solve(problem).converged
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        res = solver.solve(problem)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert res.converged
    measured = peak / n**3
    estimate = resources.bytes_per_node(method, "cpu", dtype, refine)
    assert 0.95 * measured <= estimate <= 1.10 * measured, (measured, estimate)


def test_default_method_stays_within_the_issue_target():
    """Issue 18: the CPU default (multigrid) ≤ 60 bytes a node, estimated and traced above."""
    assert resources.bytes_per_node("auto", "cpu") <= 60


@pytest.mark.parametrize(
    ("value", "expected"), [("1000", 1000), ("2K", 2048), ("1.5G", 3 << 29), ("3MB", 3 << 20)]
)
def test_memory_limit_env(monkeypatch, value, expected):
    monkeypatch.setenv(resources.ENV, value)
    assert resources.memory_limit() == expected


@pytest.mark.parametrize("value", ["lots", "-1", "0", "5X"])
def test_memory_limit_env_bad(monkeypatch, value):
    monkeypatch.setenv(resources.ENV, value)
    with pytest.raises(InputError, match="PBSOLVER_MEMORY_LIMIT"):
        resources.memory_limit()


def test_check_memory_names_both_numbers_and_a_way_out(monkeypatch):
    monkeypatch.setenv(resources.ENV, "100M")
    need = resources.estimate_bytes((257, 257, 257), "multigrid")
    with pytest.raises(InputError) as info:
        resources.check_memory((257, 257, 257), "multigrid", "cpu", what="grid 'big'")
    msg = str(info.value)
    assert msg.startswith("grid 'big' (multigrid on cpu): needs about ")
    assert resources.format_bytes(need) in msg and "100.0 MiB available" in msg
    # how the estimate was made, and where the limit comes from
    per = resources.bytes_per_node("multigrid")
    assert f"{per:.0f} bytes a node × {257**3:,} nodes" in msg
    assert "limit set by $PBSOLVER_MEMORY_LIMIT" in msg
    assert "coarser spacing" in msg and "method 'sor'" in msg
    assert resources.check_memory((33, 33, 33), "sor") > 0  # small grids pass


def test_available_host_memory_is_positive():
    avail = resources.available_host_bytes()
    assert avail is None or avail > 0


# ---------------------------------------------------------------------- the HDF5 reader
def _declares_1000_cubed(path):
    """A few KB file whose grid declares 1000³ nodes (chunked, nothing written)."""
    write_input(path, n_grids=1, n=7)
    with h5py.File(path, "a") as f:
        g = f["grids/g0"]
        for key in ("epsilon", "phi_coulomb"):
            del g[key]
            g.create_dataset(key, shape=(1000, 1000, 1000), dtype="f4", chunks=(64, 64, 64))
    return path


def test_small_file_declaring_1000_cubed_is_refused_before_reading(tmp_path, monkeypatch):
    src = _declares_1000_cubed(tmp_path / "huge.h5")
    assert src.stat().st_size < 64 * 1024
    monkeypatch.setenv(resources.ENV, "4G")
    read = []
    monkeypatch.setattr(hdf5, "_read_array", lambda *a: read.append(a) or np.zeros(1))
    with pytest.raises(InputError, match=r"reading 2 dataset\(s\) of 1,000,000,000 nodes: needs"):
        hdf5.read_problem(src, "g0")
    assert read == []


def test_cli_refuses_a_grid_too_large_for_memory_before_solving(tmp_path, monkeypatch):
    src = _declares_1000_cubed(tmp_path / "huge.h5")
    before = sha256(src)
    monkeypatch.setenv(resources.ENV, "4G")
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(cli.main, ["solve", str(src), "-o", str(out / "o.h5"), *FAST])
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.stderr.splitlines() if "needs about" in ln]
    assert len(lines) == 1 and "4.0 GiB available" in lines[0] and "grid 'g0'" in lines[0]
    assert visible_files(out) == [] and leftovers(out) == []
    assert sha256(src) == before


# ---------------------------------------------------------------------- the solver
def test_solver_refuses_before_building_the_stencil(monkeypatch):
    from pbsolver.backends.cpu.backend import CPUBackend

    problem = small_problem(9)
    built = []
    # the stencil alone, or with the float64 operator in one pass (a refined solve)
    for verb in ("stencil", "refined_system"):
        real = getattr(CPUBackend, verb)
        monkeypatch.setattr(CPUBackend, verb, lambda *a, real=real: built.append(1) or real(*a))
    monkeypatch.setenv(resources.ENV, "10K")
    with pytest.raises(InputError, match="needs about .* 10.0 KiB available"):
        pb.Solver(method="sor", backend="cpu").solve(problem)
    assert built == []
    monkeypatch.delenv(resources.ENV)
    assert pb.Solver(method="sor", backend="cpu", rtol=1e-4).solve(problem).converged
    assert built


# ---------------------------------------------------------------------- molecule maps
def test_huge_atom_is_refused_before_any_map(monkeypatch):
    from pbsolver.molecule import maps

    called = []
    monkeypatch.setattr(maps, "face_fractions", lambda *a, **k: called.append(1))
    monkeypatch.setenv(resources.ENV, "8G")
    atoms = pb.Atoms([[0.0, 0.0, 0.0]], [1.0], [100.0])
    with pytest.raises(InputError, match=r"the molecule's grid .*needs about .*8.0 GiB available"):
        pb.Problem.from_atoms(atoms, spacing=0.5)
    assert called == []


# ---------------------------------------------------------------------- stacked frames
def _peptide_frames(n):
    """The shipped peptide and ``n`` frames of it, each atom moved by about 0.01 Å."""
    atoms = pb.read_pqr(pb.data.path("peptide.pqr"))
    rng = np.random.default_rng(3)
    frames = [atoms.positions + rng.normal(scale=0.01, size=atoms.positions.shape)
              for _ in range(n)]  # fmt: skip
    return atoms, frames


#: A small stacked calculator's settings (the peptide's grid is 41×57×41 at 0.8 Å).
_STACKED = {"engine": "stacked", "spacing": 0.8, "surface": "mol", "ionic_strength": 0.15,
            "backend": "cpu", "margin": 6.0, "skin": 1.0}  # fmt: skip


def test_stacked_batch_too_big_runs_in_chunks_and_one_that_cannot_fit_is_refused(monkeypatch):
    atoms, frames = _peptide_frames(8)
    calcs = [pb.ReactionFieldCalculator(atoms, **_STACKED) for _ in range(2)]
    for calc in calcs:
        calc.compute_batch(frames[:1])
    engine = calcs[0]._stacked
    # a limit that holds 4.5 frames: half of it 2 frames, so 7 frames run as 2 + 2 + 2 + 1,
    # the same results bit for bit as those chunks run one call after another
    monkeypatch.setenv(resources.ENV, str(int(4.5 * engine.frame_bytes())))
    assert engine.batch_size_for(7) == 2
    got = calcs[0].compute_batch(frames[1:])
    want = [r for k in range(1, 8, 2) for r in calcs[1].compute_batch(frames[k : k + 2])]
    assert [r.energy for r in got] == [r.energy for r in want]
    assert set(engine._buffers) == {1, 2}
    # a limit under one frame: refused before any buffers are made for it
    monkeypatch.setenv(resources.ENV, str(int(0.5 * engine.frame_bytes())))
    with pytest.raises(
        InputError,
        match=r"a batch of 1 frames on the stacked engine \(41×57×41 a frame\): needs about "
        r".* not one frame fits: use a coarser spacing",
    ):
        pb.ReactionFieldCalculator(atoms, **_STACKED).compute_batch(frames[:1])


@pytest.mark.parametrize(("surface", "forces"), [("mol", "field"), ("smol", "exact")])
def test_stacked_estimate_covers_the_traced_peak_of_its_batches(surface, forces):
    """:meth:`StackedFrames.batch_bytes` against tracemalloc's peak of two CPU batches.

    NumPy traces the engine's buffers and the forces' arrays (not numba's own allocations
    inside kernels); the calculator made and its kernels compiled untraced first. The estimate
    must hold the peak, and not by more than half as much again.
    """
    import gc
    import tracemalloc

    atoms, frames = _peptide_frames(4)
    kw = {**_STACKED, "surface": surface, "forces": forces}
    pb.ReactionFieldCalculator(atoms, **kw).compute_batch(frames[:2])
    gc.collect()
    tracemalloc.start()
    try:
        calc = pb.ReactionFieldCalculator(atoms, **kw)
        calc.compute_batch(frames[:2])
        calc.compute_batch(frames[2:])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = calc._stacked.batch_bytes(2, exact=forces == "exact")
    assert peak <= estimate <= 1.5 * peak


@pytest.mark.gpu
@pytest.mark.parametrize(("surface", "forces"), [("mol", "field"), ("smol", "exact")])
def test_stacked_estimate_covers_the_gpu_pool_peak_of_its_batches(surface, forces):
    """:meth:`StackedFrames.batch_bytes` against the device memory two GPU batches take.

    CuPy's pool, emptied before, keeps every block it hands out (freed ones for reuse): what
    it holds afterwards, less what was in use before, is the batches' high-water mark; the
    driver's free memory lost outside the pool is added. The estimate must hold it, and not
    by more than twice.
    """
    import gc

    import cupy as cp

    atoms, frames = _peptide_frames(4)
    kw = {**_STACKED, "surface": surface, "forces": forces, "backend": "cuda",
          "map_options": {"maps_backend": "cuda"}}  # fmt: skip
    pb.ReactionFieldCalculator(atoms, **kw).compute_batch(frames[:2])
    gc.collect()
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    before, free = pool.used_bytes(), cp.cuda.runtime.memGetInfo()[0]
    calc = pb.ReactionFieldCalculator(atoms, **kw)
    calc.compute_batch(frames[:2])
    calc.compute_batch(frames[2:])
    cp.cuda.Device().synchronize()
    held = pool.total_bytes() - before
    outside = max(0, free - cp.cuda.runtime.memGetInfo()[0] - held)
    peak = held + outside
    assert calc._stacked.memory == "gpu"
    estimate = calc._stacked.batch_bytes(2, exact=forces == "exact")
    assert peak <= estimate <= 2 * peak, (peak, estimate)
