"""The CUDA backend's kernels under numba's CUDA simulator (runs in CI, no GPU, no CuPy).

Each check runs a CUDA kernel through :class:`CUDABackend` on numba device arrays and compares it
with the CPU backend's kernel on the same random, high-contrast input (grids of at most 7×9×11,
shapes not multiples of the blocks, small blocks so that several tiles, chunks and halos occur).
The measurement-only kernel shapes of ``benchmarks/sweep_variants.py`` are checked the same way.

numba reads ``NUMBA_ENABLE_CUDASIM`` once, when ``numba.cuda`` is first imported, and other tests
import it for real; so the checks run together in one subprocess with the variable set (or
in-process when the whole session already runs under the simulator), and each check is reported
as its own test. The simulator runs about 1 ms per simulated thread: keep the grids tiny.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.cudasim

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
ROOT = Path(__file__).resolve().parents[1]


class Skip(Exception):
    """A check that cannot run in this checkout (e.g. a CPU twin not there yet)."""


# ---------------------------------------------------------------------- shared context
class _Ctx:
    """Backends, problems and stencils built once per simulator process."""

    def __init__(self):
        import pbsolver  # noqa: F401  (fails loudly if the package is missing)
        from pbsolver.backends.cpu.backend import CPUBackend
        from pbsolver.backends.cuda import CUDABackend, KernelConfig

        self.rng = np.random.default_rng(20261129)
        self.shapes = {
            "point_block": (4, 4, 2),
            "jacobi_block": (8, 4, 2),
            "reduce_block": (8, 4),
            "reduce_chunk": 3,
            "flat_threads": 32,
        }
        self.cpu = CPUBackend()
        self.gpu = CUDABackend(device="numba", config=KernelConfig(**self.shapes))
        self._cache = {}
        self._variants = {}

    def variant(self, kernel, **options):
        """The benchmarks' backend with SOR kernel shape ``kernel`` (small blocks, chunks)."""
        key = (kernel, *sorted(options.items()))
        if key not in self._variants:
            if str(ROOT) not in sys.path:
                sys.path.insert(0, str(ROOT))
            from benchmarks.sweep_variants import VariantBackend, VariantConfig

            cfg = VariantConfig(
                **self.shapes,
                march_block=(4, 4),
                march_chunk=3,
                tile_block=(8, 6),
                tile_chunk=3,
                pair_block=(3, 4),
                pair_chunk=3,
                **options,
            )
            self._variants[key] = VariantBackend(kernel=kernel, device="numba", config=cfg)
        return self._variants[key]

    def problem(self, name):
        if name not in self._cache:
            from conftest import random_problem

            if name == "dirichlet":
                # node map, harmonic faces, salt, boundary values: every term of b is exercised
                p = random_problem(
                    self.rng,
                    shape=(6, 7, 9),
                    boundary="dirichlet",
                    salt=True,
                    boundary_values=True,
                    face_rule="harmonic",
                )
            else:
                # face maps, periodic without salt: singular, b's mean removed on the device
                p = random_problem(self.rng, shape=(6, 6, 8), boundary="periodic", faces=True)
            self._cache[name] = p
        return self._cache[name]

    def another_problem(self, name):
        """A second problem of :meth:`problem`'s grid, boundary and salt (other maps)."""
        from conftest import random_problem

        if name == "dirichlet":
            return random_problem(self.rng, shape=(6, 7, 9), boundary="dirichlet", salt=True,
                                  boundary_values=True, face_rule="harmonic")  # fmt: skip
        return random_problem(self.rng, shape=(6, 6, 8), boundary="periodic", faces=True)

    def stencils(self, name, dtype=np.float32):
        key = (name, np.dtype(dtype))
        if key not in self._cache:
            p = self.problem(name)
            self._cache[key] = (self.cpu.stencil(p, dtype), self.gpu.stencil(p, dtype))
        return self._cache[key]

    def host(self, a):
        return self.gpu.dev.to_numpy(a)

    def dev(self, a, dtype=None):
        return self.gpu.asarray(a, a.dtype if dtype is None else dtype)


_CTX = None


def ctx() -> _Ctx:
    global _CTX
    if _CTX is None:
        _CTX = _Ctx()
    return _CTX


def close(got, want, rtol, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.abs(want).max()), 1e-300)
    err = float(np.abs(got - want).max()) / scale
    assert err <= rtol, f"{what}: max |diff| / max |ref| = {err:.3g} > {rtol:g}"
    assert np.isfinite(got).all(), f"{what}: non-finite values"


# ---------------------------------------------------------------------- the checks
def check_stencil_dirichlet_salt_harmonic():
    c = ctx()
    sc, sg = c.stencils("dirichlet")
    for name in ("cx", "cy", "cz", "diag", "b"):
        close(c.host(getattr(sg, name)), getattr(sc, name), 1e-6, name)
    assert sg.shift is not None and not sg.periodic


def check_stencil_periodic_faces_singular():
    c = ctx()
    sc, sg = c.stencils("periodic")
    for name in ("cx", "cy", "cz", "diag", "b"):
        close(c.host(getattr(sg, name)), getattr(sc, name), 1e-6, name)
    b = c.host(sg.b).astype(np.float64)
    assert abs(b.mean()) <= 1e-6 * np.abs(b).max(), "b of a singular problem must have zero mean"


def _sor(kernel, name, dtype=np.float32, sweeps=2, rtol=2e-6, **options):
    c = ctx()
    sc, sg = c.stencils(name, dtype)
    x0 = c.rng.normal(0.0, 50.0, sc.shape).astype(dtype)
    xc, xg = x0.copy(), c.dev(x0)
    gpu = c.gpu if kernel == "point" else c.variant(kernel, **options)
    gpu.sor_sweeps(sg, xg, 1.6, sweeps)
    c.cpu.sor_sweeps(sc, xc, 1.6, sweeps)
    close(c.host(xg), xc, rtol, f"{kernel} SOR, {name}")
    assert not np.array_equal(xc, x0), "the sweeps changed nothing"


def check_sor_tile_dirichlet():
    _sor("tile", "dirichlet", sweeps=3)  # odd count: result copied back from the work buffer


def check_sor_tile_periodic():
    _sor("tile", "periodic")


def check_sor_pair_dirichlet():
    _sor("pair", "dirichlet", sweeps=3)  # odd count: result copied back from the work buffer


def check_sor_pair_periodic():
    _sor("pair", "periodic")


def check_sor_pair_float64_bitwise():
    """Both colours in one pass: the CPU's two passes to the bit in float64."""
    _sor("pair", "dirichlet", np.float64, sweeps=2, rtol=0.0)
    _sor("pair", "periodic", np.float64, sweeps=1, rtol=1e-15)


def check_sor_point_dirichlet():
    _sor("point", "dirichlet")


def check_sor_point_periodic():
    _sor("point", "periodic")


def check_sor_march_dirichlet():
    _sor("march", "dirichlet")


def check_sor_march_periodic():
    _sor("march", "periodic")


def check_sor_tile_float64():
    _sor("tile", "dirichlet", np.float64, sweeps=1, rtol=1e-13)


def check_sor_point_float64_bitwise():
    """In float64 the device sweep is the CPU sweep's arithmetic to the bit (the same bodies).

    Periodic: b's mean is removed by differently ordered sums, so to round-off only.
    """
    _sor("point", "dirichlet", np.float64, sweeps=2, rtol=0.0)
    _sor("point", "periodic", np.float64, sweeps=1, rtol=1e-15)


def check_stencil_float64():
    """Faces, diagonal and right-hand side assembled in float64 agree to float64 round-off."""
    c = ctx()
    for name in ("dirichlet", "periodic"):
        sc, sg = c.stencils(name, np.float64)
        for attr in ("cx", "cy", "cz", "diag", "b"):
            close(c.host(getattr(sg, attr)), getattr(sc, attr), 1e-13, f"{name} {attr}")


def check_jacobi_dirichlet():
    c = ctx()
    sc, sg = c.stencils("dirichlet")
    x0 = c.rng.normal(0.0, 50.0, sc.shape).astype(np.float32)
    xc, xg = x0.copy(), c.dev(x0)
    c.gpu.jacobi_sweeps(sg, xg, c.gpu.zeros(sc.shape, np.float32), 0.9, 3)
    c.cpu.jacobi_sweeps(sc, xc, np.zeros_like(xc), 0.9, 3)
    close(c.host(xg), xc, 2e-6, "Jacobi")


def check_residual_float64_x_float32_out():
    c = ctx()
    for name in ("dirichlet", "periodic"):
        sc, sg = c.stencils(name)
        x = c.rng.normal(0.0, 50.0, sc.shape)  # float64 iterate, float32 stencil (refinement)
        rc = np.zeros(sc.shape, np.float32)
        rg = c.gpu.zeros(sc.shape, np.float32)
        c.cpu.residual(sc, x, rc)
        c.gpu.residual(sg, c.dev(x), rg)
        close(c.host(rg), rc, 1e-6, f"residual, {name}")


def check_residual_norm():
    c = ctx()
    for name in ("dirichlet", "periodic"):
        sc, sg = c.stencils(name)
        x = c.rng.normal(0.0, 50.0, sc.shape)
        want = c.cpu.residual_norm(sc, x)
        got = c.gpu.residual_norm(sg, c.dev(x))
        assert abs(got - want) <= 1e-6 * want, f"{name}: {got} vs {want}"


def check_problem_operator_matches_the_float64_stencil():
    """The refinement's operator read from the problem's maps (b, residual, norm) on the device
    equals the CPU's float64 stencil (node map with harmonic faces and salt; face maps,
    periodic and singular), for a float64 iterate and a float64 or float32 residual."""
    c = ctx()
    for name in ("dirichlet", "periodic"):
        p = c.problem(name)
        st64 = c.cpu.stencil(p, np.float64)
        og = c.gpu.operator64(p)
        assert og.dtype == np.float64 and og.shape == st64.shape
        close(c.host(og.b), st64.b, 1e-13, f"operator b, {name}")
        x = c.rng.normal(0.0, 50.0, st64.shape)
        want = np.zeros(st64.shape)
        c.cpu.residual(st64, x, want)
        for dtype, rtol in ((np.float64, 1e-13), (np.float32, 1e-6)):
            got = c.gpu.zeros(st64.shape, dtype)
            c.gpu.residual(og, c.dev(x), got)
            close(c.host(got), want, rtol, f"operator residual {np.dtype(dtype).name}, {name}")
        norm = c.gpu.residual_norm(og, c.dev(x))
        ref = c.cpu.residual_norm(st64, x)
        assert abs(norm - ref) <= 1e-13 * ref, f"{name}: {norm} vs {ref}"


def check_operator_residual_and_norm_in_one_pass():
    """The refinement's check (``residual_and_norm`` of a problem's operator, one kernel) gives
    :meth:`residual`'s residual and :meth:`residual_norm`'s norm bit for bit, writes zero on the
    fixed nodes over whatever ``out`` held, and replays (Dirichlet with salt; periodic)."""
    c = ctx()
    for name in ("dirichlet", "periodic"):
        p = c.problem(name)
        og = c.gpu.operator64(p)
        x = c.dev(c.rng.normal(0.0, 50.0, og.shape))
        want = c.gpu.zeros(og.shape, np.float32)
        c.gpu.residual(og, x, want)
        norm = c.gpu.residual_norm(og, x)
        got = c.dev(np.full(og.shape, np.nan, np.float32))
        for _ in range(2):
            value = c.gpu.residual_and_norm(og, x, got)
            assert value == norm, f"{name}: {value!r} vs {norm!r}"
            assert np.array_equal(c.host(got), c.host(want)), name
        assert np.abs(c.host(want)).max() > 0


def check_refined_system_in_one_pass_and_into_a_kept_stencil():
    """refined_system: the sweep stencil equals sweep_stencil's and the operator's b equals
    operator64's, bit for bit; with ``into`` another problem's are written into the given
    arrays, equal to a fresh call's (salt and boundary values; periodic, singular)."""
    c = ctx()
    for name in ("dirichlet", "periodic"):
        p = c.problem(name)
        st, op = c.gpu.refined_system(p, np.float32)
        lean, op64 = c.gpu.sweep_stencil(p, np.float32), c.gpu.operator64(p)
        assert st.diag is None
        for field in ("cx", "cy", "cz", "shift", "b"):
            a, b = getattr(st, field), getattr(lean, field)
            assert (a is None) == (b is None), field
            if a is not None:
                assert np.array_equal(c.host(a), c.host(b)), f"{name}: {field}"
        assert np.array_equal(c.host(op.b), c.host(op64.b)), f"{name}: operator b"
        q = c.another_problem(name)
        fresh, op_fresh = c.gpu.refined_system(q, np.float32)
        again, op2 = c.gpu.refined_system(q, np.float32, into=st)
        assert again.cx is st.cx and again.b is st.b and again.shift is st.shift
        for field in ("cx", "cy", "cz", "shift", "b"):
            if getattr(fresh, field) is not None:
                got, want = c.host(getattr(again, field)), c.host(getattr(fresh, field))
                assert np.array_equal(got, want), f"{name}: {field} into"
        assert np.array_equal(c.host(op2.b), c.host(op_fresh.b)), f"{name}: b into"


def check_sweep_stencil_leaves_the_diagonal_out():
    """The solve's stencil has no diagonal array (None) and sweeps as the full one, bit for bit."""
    c = ctx()
    p = c.problem("dirichlet")
    _, full = c.stencils("dirichlet")
    lean = c.gpu.sweep_stencil(p, np.float32)
    assert lean.diag is None and lean.shift is not None
    for name in ("cx", "cy", "cz", "b", "shift"):
        assert np.array_equal(c.host(getattr(lean, name)), c.host(getattr(full, name))), name
    x0 = c.rng.normal(0.0, 50.0, full.shape).astype(np.float32)
    xa, xb = c.dev(x0), c.dev(x0)
    c.gpu.sor_sweeps(full, xa, 1.6, 1)
    c.gpu.sor_sweeps(lean, xb, 1.6, 1)
    assert np.array_equal(c.host(xa), c.host(xb))


def check_plain_stencil_stored_diagonal_colour_pass():
    """A plain Stencil (multigrid coarse levels) is swept with its stored diagonal (κ̄² in it)."""
    import dataclasses

    from reference_kernels import rb_sor_color

    from pbsolver.backends import Stencil

    c = ctx()
    sc, sg = c.stencils("dirichlet")
    fields = {f.name: getattr(sg, f.name) for f in dataclasses.fields(Stencil)}
    plain = Stencil(**fields)
    x0 = c.rng.normal(0.0, 50.0, sc.shape).astype(np.float32)
    xc, xg = x0.copy(), c.dev(x0)
    for color in (0, 1, 0):
        c.gpu.rb_sor_color(plain, xg, color, 1.0)
        rb_sor_color(xc, sc.b, sc.cx, sc.cy, sc.cz, sc.diag, color, np.float32(1.0), False)
    close(c.host(xg), xc, 2e-6, "colour passes with a stored diagonal")


def check_elementwise_and_reductions():
    c = ctx()
    g = c.gpu
    shape = (5, 6, 7)
    a = c.rng.normal(size=shape)
    b = c.rng.normal(size=shape).astype(np.float32)
    y = c.dev(a)
    g.axpy(y, c.dev(b), -0.75)
    close(c.host(y), a - 0.75 * b.astype(np.float64), 1e-14, "axpy")
    z = c.dev(b)
    g.axpby(z, c.dev(b[::-1].copy()), 2.0, -0.5)
    close(c.host(z), 2.0 * b[::-1] - 0.5 * b, 1e-6, "axpby")
    m = c.dev(a + 3.0)
    g.remove_mean(m)
    close(c.host(m), a + 3.0 - (a + 3.0).mean(), 1e-12, "remove_mean")
    d = g.dot(c.dev(a), c.dev(a[::-1].copy()))
    assert abs(d - float(np.sum(a * a[::-1]))) <= 1e-12 * float(np.sum(a * a)), "dot"
    f = c.dev(a)
    g.fill(f, 2.5)
    assert np.all(c.host(f) == 2.5), "fill"
    cp = g.copy(y)
    assert np.array_equal(c.host(cp), c.host(y)), "copy"
    calls = []
    runner = g.capture(lambda: calls.append(1))
    runner()
    runner()
    assert calls == [1, 1], "capture() runner must run fn on each call without graphs"


def check_dense_solve_is_a_kernel():
    """The coarsest-level solve x = inverse @ b, as a kernel (cuBLAS cannot be graph-captured)."""
    c = ctx()
    n = 5 * 4 * 3
    inverse = c.rng.normal(size=(n, n))
    b = c.rng.normal(size=(5, 4, 3)).astype(np.float32)
    x = c.dev(np.zeros((5, 4, 3), np.float32))
    c.gpu.dense_solve(c.dev(inverse), c.dev(b), x)
    close(c.host(x).ravel(), inverse @ b.ravel().astype(np.float64), 1e-6, "dense_solve")


def check_runner_keeps_its_work_buffer():
    """A capture() runner using the fused sweep keeps that sweep's second buffer alive."""
    c = ctx()
    sc, sg = c.stencils("dirichlet")
    gpu = c.variant("tile")
    x = gpu.zeros(sc.shape, np.float32)
    runner = gpu.capture(lambda: gpu.sor_sweeps(sg, x, 1.5, 1))
    runner()
    held = list(runner.holds.values())
    assert len(held) == 1 and held[0].shape == sc.shape
    others = [gpu.zeros((3, 3, 3), np.float32) for _ in range(5)]
    for other in others:  # push the runner's buffer out of the backend's small cache
        gpu._work_for(other)
    assert all(w is not held[0] for w in gpu._work.values())
    assert list(runner.holds.values())[0] is held[0]


def _transfer_axis(n, periodic):
    """Standard coarsening of one axis: coarse nodes on even fine indices."""
    if periodic:
        m = n // 2
        pos = 2 * np.arange(m)
        i = np.arange(n)
        lo, hi = i // 2, ((i + 1) // 2) % m
    else:
        m = (n + 1) // 2
        pos = 2 * np.arange(m)
        i = np.arange(n)
        lo, hi = i // 2, (i + 1) // 2
    return m, pos.astype(np.int32), lo.astype(np.int32), hi.astype(np.int32)


def check_restrict_and_prolong():
    from pbsolver.backends import Transfer
    from pbsolver.backends.cpu.backend import CPUBackend

    if not hasattr(CPUBackend, "restrict"):
        raise Skip("the CPU backend has no multigrid transfers in this checkout")
    c = ctx()
    for fine_shape, periodic in (((7, 9, 5), False), ((6, 8, 4), True)):
        axes = [_transfer_axis(n, periodic) for n in fine_shape]
        coarse_shape = tuple(a[0] for a in axes)

        def transfer(
            backend, axes=axes, fine_shape=fine_shape, coarse_shape=coarse_shape, periodic=periodic
        ):
            return Transfer(
                pos=tuple(backend.asarray(a[1], np.int32) for a in axes),
                lo=tuple(backend.asarray(a[2], np.int32) for a in axes),
                hi=tuple(backend.asarray(a[3], np.int32) for a in axes),
                periodic=periodic,
                fine_shape=fine_shape,
                coarse_shape=coarse_shape,
            )

        tc, tg = transfer(c.cpu), transfer(c.gpu)
        for dtype in (np.float32, np.float64):
            # values over twelve orders of magnitude: float64 sums round, so in float64 the
            # order of the terms shows in the last bits
            scale = 10.0 ** c.rng.uniform(-6, 6, fine_shape)
            fine = (c.rng.normal(size=fine_shape) * scale).astype(dtype)
            coarse_c = np.zeros(coarse_shape, dtype)
            coarse_g = c.gpu.zeros(coarse_shape, dtype)
            c.cpu.restrict(tc, fine, coarse_c)
            c.gpu.restrict(tg, c.dev(fine), coarse_g)
            what = f"periodic={periodic}, {np.dtype(dtype).name}"
            close(c.host(coarse_g), coarse_c, 1e-6, f"restrict, {what}")
            assert np.array_equal(c.host(coarse_g), coarse_c), f"restrict: not the CPU's, {what}"
            e = c.rng.normal(size=coarse_shape).astype(dtype)
            fc, fg = fine.copy(), c.dev(fine)
            c.cpu.prolong_add(tc, e, fc)
            c.gpu.prolong_add(tg, c.dev(e), fg)
            close(c.host(fg), fc, 1e-6, f"prolong_add, {what}")
            assert np.array_equal(c.host(fg), fc), f"prolong_add: not the CPU's, {what}"


def check_stacked_coarse_operator_kernels():
    """The device rebuild of a stack's coarse operators equals the array code's."""
    from pbsolver.backends import Stencil
    from pbsolver.backends.coarse import PENALTY
    from pbsolver.multigrid.builders import stack_hierarchy

    c = ctx()
    block, stride, blocks = (7, 6, 5), 8, 2
    shape = (blocks * stride, 6, 5)
    inputs = [c.rng.uniform(0.5, 80.0, shape) for _ in range(3)] + [c.rng.uniform(0.0, 0.1, shape)]
    local = np.arange(shape[0]) % stride
    inputs[0][local >= block[0] - 1] = 0.0  # faces leaving a block
    inputs[1][:, 2, 1] = 0.0  # a zero face inside a block: its series must stay zero
    made = {}
    for name, be in (("cpu", c.cpu), ("gpu", c.gpu)):
        st = Stencil(*(be.zeros(shape, np.float32) for _ in range(5)), periodic=False,
                     singular=False)  # fmt: skip
        mg = stack_hierarchy(be, st, block, (0.6, 0.7, 0.8), stride)
        for dst, src in zip(mg.inputs, inputs, strict=True):
            if name == "cpu":
                dst[...] = src
            else:
                dst.copy_to_device(src)
        mg.rebuild()
        made[name] = mg
    assert len(made["cpu"].levels) == len(made["gpu"].levels) >= 3
    for i, (a, b) in enumerate(zip(made["cpu"].levels[1:], made["gpu"].levels[1:], strict=True)):
        for attr in ("cx", "cy", "cz"):
            close(c.host(getattr(b.stencil, attr)), getattr(a.stencil, attr), 1e-6,
                  f"level {i + 1} {attr}")  # fmt: skip
        want, got = a.stencil.diag, c.host(b.stencil.diag)
        fixed = want == np.float32(PENALTY)
        assert fixed.any() and (~fixed).any()
        assert np.all(got[fixed] == want[fixed]), f"level {i + 1}: penalty nodes"
        close(got[~fixed], want[~fixed], 1e-6, f"level {i + 1} diag")


def check_grid_coarse_operator_kernels():
    """One grid's hierarchy built by the device and the CPU kernels equals the array code's.

    Dirichlet with salt and periodic without (singular): every coarse level's faces and
    diagonal, and the coarsest level's dense inverse. The kernels build each level from the
    level above's float32 faces, the array code in float64: float32 rounding apart.
    """
    from pbsolver.backends.cpu.backend import CPUBackend
    from pbsolver.multigrid.builders import grid_hierarchy

    class ArrayCodeCPU(CPUBackend):
        COARSE_KERNELS = False  # the levels get no work arrays: the array code builds them

    c = ctx()
    for name in ("dirichlet", "periodic"):
        p = c.problem(name)
        st_c, st_g = c.stencils(name)
        made = {}
        for which, be, st in (("array", ArrayCodeCPU(), st_c), ("cpu", c.cpu, st_c),
                              ("gpu", c.gpu, st_g)):  # fmt: skip
            made[which] = grid_hierarchy(be, st, p.grid.spacing, p.kappa2, coarsest_nodes=40)
        ref = made["array"]
        assert ref.coarse[0].work is None
        for which in ("cpu", "gpu"):
            h = made[which]
            host = c.host if which == "gpu" else np.asarray
            assert h.coarse[0].work is not None, which
            assert len(ref.levels) == len(h.levels) >= 3, name
            for i, (a, b) in enumerate(zip(ref.levels[1:], h.levels[1:], strict=True)):
                for attr in ("cx", "cy", "cz", "diag"):
                    close(host(getattr(b.stencil, attr)), getattr(a.stencil, attr), 2e-6,
                          f"{which} {name} level {i + 1} {attr}")  # fmt: skip
            assert h.coarse_inverse is not None and ref.coarse_inverse is not None
            close(host(h.coarse_inverse), ref.coarse_inverse, 1e-5,
                  f"{which} {name} dense inverse")  # fmt: skip


def _stack_case(c):
    """Four problems of one odd shape (a padding plane), every input kind mixed in one stack."""
    from conftest import random_problem

    shape, h = (5, 6, 7), 0.55
    problems = [
        random_problem(c.rng, shape, h, salt=True, boundary_values=True, face_rule="harmonic"),
        random_problem(c.rng, shape, h, faces=True, boundary_values=True),
        random_problem(c.rng, shape, h, face_rule="arithmetic", eps_c=2.0),
        random_problem(c.rng, shape, h, salt=True, faces=True, eps_c=4.0),
    ]
    x0 = [c.rng.normal(0.0, 30.0, shape), None, None, c.rng.normal(0.0, 30.0, shape)]
    return problems, x0, shape, shape[0] + 1


def _assembled(be, problems, x0, stride, sweep_dtype):
    """(checked, sweep, unlifted, fixed, x) arrays of ``be.assemble_stack``."""
    shape = (len(problems) * stride, *problems[0].grid.shape[1:])
    checked = [be.zeros(shape, np.float64) for _ in range(5)]
    sweep = [be.zeros(shape, sweep_dtype) for _ in range(5)]
    unlifted = [be.zeros(shape, np.float64) for _ in range(4)]
    fixed, x = be.zeros(shape, np.float64), be.zeros(shape, np.float64)
    for a in (*checked, *sweep, *unlifted, fixed, x):  # stale values the kernel must overwrite
        be.fill(a, 7.0)
    be.assemble_stack(problems, x0, stride, checked, sweep, unlifted, fixed, x)
    return checked, sweep, unlifted, fixed, x


def check_stack_assembly_kernel():
    """The device stack (one kernel a problem) equals the array reference, padding included."""
    c = ctx()
    problems, x0, shape, stride = _stack_case(c)
    want = _assembled(c.cpu, problems, x0, stride, np.float32)
    got = _assembled(c.gpu, problems, x0, stride, np.float32)
    names = ("checked", "sweep", "unlifted", "fixed", "x")
    for name, w, g in zip(names, want, got, strict=True):
        for i, (wa, ga) in enumerate(zip(*((w, g) if name not in ("fixed", "x") else ([w], [g])),
                                         strict=True)):  # fmt: skip
            rtol = 1e-6 if name == "sweep" else 1e-13
            close(c.host(ga), wa, rtol, f"{name}[{i}]")
    # without a hierarchy (SOR, Jacobi) nothing is written to the unlifted arrays' stand-ins
    shape_s = (len(problems) * stride, *shape[1:])
    alone = [c.gpu.zeros(shape_s, np.float64) for _ in range(5)]
    fixed, x = c.gpu.zeros(shape_s, np.float64), c.gpu.zeros(shape_s, np.float64)
    c.gpu.assemble_stack(problems, x0, stride, alone, alone, None, fixed, x)
    for i, (wa, ga) in enumerate(zip(want[0], alone, strict=True)):
        close(c.host(ga), wa, 1e-13, f"checked[{i}] without unlifted arrays")
    # the reference's lifted b is not trivially zero, and the fixed layer holds values
    assert np.abs(want[0][4]).max() > 0 and np.abs(want[3]).max() > 0
    # unstack: each block's interior inside its boundary values
    sol = c.rng.normal(0.0, 1.0, want[4].shape)
    ref = c.cpu.unstack(sol, want[3], shape, stride, len(problems))
    out = c.gpu.unstack(c.dev(sol), got[3], shape, stride, len(problems))
    assert tuple(out.shape) == (len(problems), *shape)
    close(c.host(out), ref, 1e-15, "unstack")
    assert np.array_equal(ref[1][0], problems[1].boundary_values[0])
    assert np.array_equal(ref[0][1:-1, 1:-1, 1:-1], sol[1:4, 1:-1, 1:-1])


def check_stack_assembly_rejects_bad_guesses():
    """A guess with a NaN or of the wrong shape is named, on the device path too."""
    from pbsolver.exceptions import InputError

    c = ctx()
    problems, x0, shape, stride = _stack_case(c)
    bad = list(x0)
    bad[3] = x0[3].copy()
    bad[3][2, 3, 4] = np.nan
    wrong_shape = [None, np.zeros((5, 6, 6)), None, None]
    for guesses, message in ((bad, "x0[3] must be finite"), (wrong_shape, "x0[1] has shape")):
        with pytest.raises(InputError, match=re.escape(message)):
            _assembled(c.gpu, problems, guesses, stride, np.float32)


def check_block_residual_norm():
    """The stack's stopping measure max_k w_k ‖r_k‖ on the device equals the array version."""
    from pbsolver.backends import Stencil

    c = ctx()
    problems, x0, shape, stride = _stack_case(c)
    made = {}
    for name, be in (("cpu", c.cpu), ("gpu", c.gpu)):
        checked, _, _, _, _ = _assembled(be, problems, x0, stride, np.float64)
        made[name] = (be, Stencil(*checked, False, False))
    n = len(problems)
    x = c.rng.normal(0.0, 3.0, (n * stride, *shape[1:]))
    weights = np.array([1.0, 0.25, 0.0, 0.6])
    for poison in (False, True):
        if poison:  # a NaN in a block without a threshold of its own still reaches the host
            x[2 * stride + 2, 3, 3] = np.nan
        values = {}
        for name, (be, st) in made.items():
            r = be.zeros(x.shape, np.float64)
            w = be.zeros((n,), np.float64)
            be.set_values(w, weights)
            xb = x.copy() if name == "cpu" else c.dev(x)
            values[name] = be.block_residual_norm(st, xb, r, n, w)
        if poison:
            assert np.isnan(values["cpu"]) and np.isnan(values["gpu"]), values
        else:
            assert values["cpu"] > 0
            close([values["gpu"]], [values["cpu"]], 1e-12, "weighted block maximum")


def check_force_radial_sums():
    """The forces' φ_c and "mdh" sums against float64 NumPy, and B frames in one launch.

    The terms are float32 on both devices (relative coordinates, float64 totals), so the CUDA
    sums are held to the CPU loops' tolerance. 200 nodes in chunks of two shared-memory tiles
    (the last part-full), SUM_CENTRES · SUM_THREADS + 5 centres in two blocks (the last
    part-full, its second centres none); then
    three frames of their own nodes and centres (one frame with none of either) in one launch,
    against each frame summed alone.
    """
    from refgeom import radial_sums

    from pbsolver.backends.cpu.forces import grid_nodes as cpu_nodes
    from pbsolver.backends.cuda import forces as gpu

    rng = ctx().rng
    n = gpu.SUM_CENTRES * gpu.SUM_THREADS + 5
    centres = 40.0 + rng.uniform(-3.0, 3.0, (n, 3))
    radii = rng.uniform(1.0, 2.0, n)
    box = (9.0, 8.5, 10.0)
    # nodes whose nearest image of every centre is clear: one within float32 rounding of half a
    # box from a centre takes either image (the sum jumps there, on either device)
    points = 40.0 + rng.uniform(-4.0, 4.0, (3, 260))
    d = (points.T[None] - centres[:, None]) / np.asarray(box) + 0.5
    clear = (np.abs(d - np.round(d)) > 1e-5).all(axis=(0, 2))
    points = points[:, clear][:, :200]
    weights = rng.normal(size=200)

    def near(got, want, what):
        err = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
        assert err.max() < 2e-5, (what, err.max())

    for args, what in (((), "Coulomb"), ((box,), "Coulomb, nearest image")):
        near(gpu.coulomb_sums(points, weights, centres, *args),
             radial_sums(points, weights, centres, *args), what)  # fmt: skip
    field = np.where(rng.uniform(size=(4, 5, 3)) < 0.7, rng.normal(size=(4, 5, 3)), 0.0)
    origin, spacing = (38.0, 37.5, 39.0), (0.9, 0.8, 1.1)
    want = radial_sums(*cpu_nodes(field, origin, spacing), centres)
    near(gpu.coulomb_grid_sums(field, origin, spacing, centres), want, "Coulomb, grid")
    want = radial_sums(points, weights, centres, None, radii, 0.12, 78.5, 0.5)
    near(gpu.debye_huckel_sums(points, weights, centres, radii, 0.12, 78.5, 2.0), want,
         "Debye-Huckel")  # fmt: skip
    # frames: nodes 0–120 with centres 0–9, none with none, nodes 120–200 with centres 9–n
    node_start, centre_start = [0, 120, 120, 200], [0, 9, 9, n]
    got = gpu.radial_sums(points, weights, centres, None, radii, 0.12, 78.5, 0.5,
                          node_start=node_start, centre_start=centre_start)  # fmt: skip
    for f in (0, 2):
        nodes = slice(node_start[f], node_start[f + 1])
        rows = slice(centre_start[f], centre_start[f + 1])
        alone = gpu.radial_sums(points[:, nodes], weights[nodes], centres[rows], None,
                                radii[rows], 0.12, 78.5, 0.5)  # fmt: skip
        near(got[rows], radial_sums(points[:, nodes], weights[nodes], centres[rows], None,
                                    radii[rows], 0.12, 78.5, 0.5), f"frame {f}")  # fmt: skip
        assert np.abs(got[rows] - alone).max() <= 1e-6 * np.abs(alone).max(), f
    # the φ_c sums of two frames of a stack with a padding plane, against the CPU's frame loop
    from pbsolver.backends.cpu import forces as cpu

    stack = np.where(rng.uniform(size=(10, 5, 3)) < 0.7, rng.normal(size=(10, 5, 3)), 0.0)
    stack[[4, 9]] = 0.0  # padding planes: stride 5, nx 4
    starts = [0, 9, n]
    got = gpu.frame_grid_coulomb_sums(stack, origin, spacing, 5, 4, centres, starts)
    want = cpu.frame_grid_coulomb_sums(stack, origin, spacing, 5, 4, centres, starts)
    near(got, want, "Coulomb, frames of a stack")


def check_force_sensitivities():
    """μ = ∂G/∂φ_c, ∂G/∂κ̄², ∂G/∂f of the faces and the weighted nodes against the CPU loops."""
    from pbsolver.backends.cpu import forces as cpu
    from pbsolver.backends.cuda import forces as gpu

    rng = ctx().rng
    shape, spacing = (5, 4, 3), (0.5, 0.6, 0.7)
    lam, phi = rng.normal(size=shape), rng.normal(size=shape)
    phic = rng.normal(size=shape).astype(np.float32)
    phic[2, 1, 1] = np.inf  # a charge on a node: its faces' sensitivities are zero
    faces = tuple(rng.uniform(2.0, 80.0, shape).astype(np.float32) for _ in range(3))
    kappa2 = rng.uniform(0.0, 0.8, shape).astype(np.float32)
    for k2, what in ((kappa2, "with salt"), (None, "without salt")):
        want = cpu.coulomb_sensitivity(lam, faces, k2, 2.0, spacing)
        close(gpu.coulomb_sensitivity(lam, faces, k2, 2.0, spacing), want, 1e-12, f"mu {what}")
    want = cpu.kappa_sensitivity(lam, phic, phi)
    assert want[2, 1, 1] == 0.0 and np.isfinite(want).all()
    close(gpu.kappa_sensitivity(lam, phic, phi), want, 1e-12, "kappa sensitivity")
    want = cpu.fraction_sensitivities(lam, phic, phi, faces, spacing, 1 / 80.0 - 1 / 2.0)
    got = gpu.fraction_sensitivities(lam, phic, phi, faces, spacing, 1 / 80.0 - 1 / 2.0)
    for a in range(3):
        close(got[a], want[a], 1e-12, f"fraction sensitivity, axis {a}")
    field = np.where(rng.uniform(size=shape) < 0.5, rng.normal(size=shape), 0.0)
    for g, w in zip(gpu.grid_nodes(field, (-1.0, 0.5, 2.0), spacing),
                    cpu.grid_nodes(field, (-1.0, 0.5, 2.0), spacing), strict=True):  # fmt: skip
        close(g, w, 0.0, "weighted nodes")


CHECKS = sorted(name for name in dir() if name.startswith("check_"))


def run_checks(names=CHECKS) -> dict:
    """Run the named checks here (the simulator must be on); return their outcomes."""
    results = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            globals()[name]()
            outcome = {"ok": True}
        except Skip as exc:
            outcome = {"ok": True, "skipped": str(exc)}
        except Exception:
            outcome = {"ok": False, "error": traceback.format_exc()}
        outcome["seconds"] = round(time.perf_counter() - t0, 2)
        results[name] = outcome
    return results


# ---------------------------------------------------------------------- pytest side
@pytest.fixture(scope="module")
def sim_results(tmp_path_factory):
    if SIM:
        return run_checks()
    out = tmp_path_factory.mktemp("cudasim") / "results.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if not out.exists():
        pytest.fail(f"simulator subprocess failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", CHECKS)
def test_cudasim(sim_results, name):
    outcome = sim_results[name]
    assert outcome["ok"], outcome.get("error")
    if "skipped" in outcome:
        pytest.skip(outcome["skipped"])


if __name__ == "__main__":
    if not SIM:
        sys.exit("run with NUMBA_ENABLE_CUDASIM=1")
    if len(sys.argv) < 2 or not sys.argv[1].endswith(".json"):
        # the results go to the first argument: a check's name there would become a file
        sys.exit("usage: test_cuda_sim.py RESULTS.json [CHECK ...]")
    res = run_checks(sys.argv[2:] or CHECKS)
    Path(sys.argv[1]).write_text(json.dumps(res, indent=1))
    for name, outcome in res.items():
        state = "ok" if outcome["ok"] else "FAIL"
        print(f"{state:4s} {outcome['seconds']:6.2f}s {name}")
