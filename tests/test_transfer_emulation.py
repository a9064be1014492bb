"""The CUDA C multigrid transfers (``pbsolver.backends.cuda.transfers``) on a CPU.

numba's simulator cannot run CUDA C, so the kernels' source is compiled here as C++: every
block's threads run one after another (the kernels share nothing between threads), through a
launcher called with ctypes, and driven by the package's own launchers (``transfers.restrict``,
``transfers.prolong_add``), whose argument lists are checked with them. Their results must
equal the CPU backend's kernels bit for bit, on levels planned by the package's own coarsening
(odd shapes, single-interval gaps, Dirichlet and periodic axes, float32 and float64) and on
chunks that do not divide the coarse planes. Skipped
without ``g++``. On a GPU ``tests/test_cuda_backend.py`` compares the compiled kernels with the
CPU's.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
from unittest import mock

import numpy as np
import pytest

from pbsolver.backends.cpu.backend import CPUBackend
from pbsolver.backends.cuda import transfers
from pbsolver.bench import transfer_level

_PRELUDE = r"""
#define __global__
#define __device__
#define __forceinline__ inline
struct dim3e { int x, y, z; };
static dim3e threadIdx, blockIdx, blockDim;
"""

# each kernel run over a whole grid of blocks, one thread after another
_LAUNCHERS = r"""
#define EACH_THREAD(grid, block, call)                                                     \
    blockDim = {block[0], block[1], block[2]};                                             \
    for (int bz = 0; bz < grid[2]; ++bz) for (int by = 0; by < grid[1]; ++by)              \
    for (int bx = 0; bx < grid[0]; ++bx) for (int tz = 0; tz < block[2]; ++tz)             \
    for (int ty = 0; ty < block[1]; ++ty) for (int tx = 0; tx < block[0]; ++tx) {         \
        blockIdx = {bx, by, bz}; threadIdx = {tx, ty, tz}; call;                           \
    }

extern "C" void run_restrict(const int *grid, const int *block, const REAL *fine, REAL *coarse,
                             const int *const *maps, const int *sizes) {
    EACH_THREAD(grid, block, restrict_march(fine, coarse, maps[0], maps[1], maps[2], maps[3],
        maps[4], maps[5], maps[6], maps[7], maps[8], sizes[0], sizes[1], sizes[2], sizes[3],
        sizes[4], sizes[5], sizes[6]))
}

extern "C" void run_prolong(const int *grid, const int *block, const REAL *coarse, REAL *fine,
                            const int *const *maps, const int *sizes) {
    EACH_THREAD(grid, block, prolong_add(coarse, fine, maps[0], maps[1], maps[2], maps[3],
        maps[4], maps[5], sizes[0], sizes[1], sizes[2], sizes[3], sizes[4]))
}
"""

# (fine shape, periodic): odd and even counts, axes that are not coarsened (semi-coarsening
# waits for none here, but 3-node axes stay), a periodic axis whose half is odd
LEVELS = [((13, 10, 9), False), ((12, 14, 8), True), ((6, 7, 11), False), ((10, 3, 18), True),
          ((33, 17, 20), False)]  # fmt: skip


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """``(dtype, periodic) -> ctypes library`` of the kernels compiled as C++."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ to compile the kernels as C++")
    folder = tmp_path_factory.mktemp("transfers")
    libraries = {}

    def build(dtype, periodic, source=transfers.SOURCE):
        key = (np.dtype(dtype), periodic, source)
        if key not in libraries:
            name = f"t{len(libraries)}"
            cpp = folder / f"{name}.cpp"
            cpp.write_text(transfers.defines(dtype, periodic) + _PRELUDE + source + _LAUNCHERS)
            so = folder / f"{name}.so"
            made = subprocess.run(
                [compiler, "-std=c++17", "-O1", "-shared", "-fPIC", str(cpp), "-o", str(so)],
                capture_output=True,
                text=True,
            )
            assert made.returncode == 0, made.stderr
            libraries[key] = ctypes.CDLL(str(so))
        return libraries[key]

    return build


def _transfer(shape, periodic):
    return transfer_level(CPUBackend(), shape, periodic)


def _pointers(arrays):
    return (ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays))


def _ints(values):
    return np.ascontiguousarray(values, dtype=np.int32)


def _values(rng, shape, dtype):
    """Random values over twelve orders of magnitude, both signs: float64 sums round."""
    v = rng.normal(size=shape) * 10.0 ** rng.uniform(-6, 6, size=shape)
    return v.astype(dtype)


def _pointer(a):
    """A pointer to ``a``'s data that keeps the array alive (``a`` is contiguous: written ones
    must not be copied)."""
    return np.ascontiguousarray(a).ctypes.data_as(ctypes.c_void_p)


@contextlib.contextmanager
def emulated_launches(compiled, source=transfers.SOURCE):
    """The package's launchers (``transfers.restrict``/``prolong_add``) on the C++ kernels.

    ``transfers.kernel`` is replaced by one whose launch unpacks the arguments the launchers
    pass (NumPy arrays standing in for CuPy's) and runs the compiled kernel over the grid.
    """
    runs = {"restrict_march": ("run_restrict", 9), "prolong_add": ("run_prolong", 6)}

    def kernel(name, dtype, periodic):
        run, n_maps = runs[name]
        library = compiled(dtype, periodic, source)

        def launch(grid, block, args, stream=None):
            src, dst, *rest = args
            maps, sizes = rest[:n_maps], rest[n_maps:]
            ints = [_pointer(_ints(v)) for v in (grid, block, sizes)]
            getattr(library, run)(ints[0], ints[1], _pointer(src), _pointer(dst),
                                  _pointers(maps), ints[2])  # fmt: skip

        return launch

    with mock.patch.object(transfers, "kernel", kernel):
        yield


def emulated_restrict(compiled, tr, fine, chunk, source=transfers.SOURCE):
    coarse = np.full(tr.coarse_shape, np.nan, dtype=fine.dtype)
    with emulated_launches(compiled, source):
        transfers.restrict(tr, fine, coarse, stream=None, chunk=chunk)
    return coarse


def emulated_prolong(compiled, tr, coarse, fine, source=transfers.SOURCE):
    out = fine.copy()
    with emulated_launches(compiled, source):
        transfers.prolong_add(tr, coarse, out, stream=None)
    return out


@pytest.mark.parametrize(("shape", "periodic"), LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_restriction_equals_the_cpu_kernel(compiled, rng, shape, periodic, dtype):
    tr = _transfer(shape, periodic)
    fine = _values(rng, shape, dtype)
    want = np.full(tr.coarse_shape, np.nan, dtype=dtype)
    CPUBackend().restrict(tr, fine, want)
    for chunk in (1, 3, transfers.RESTRICT_CHUNK, 8, 64):  # carried sums across 0, 2, … planes
        got = emulated_restrict(compiled, tr, fine, chunk)
        np.testing.assert_array_equal(got, want, err_msg=f"chunk {chunk}")


@pytest.mark.parametrize(("shape", "periodic"), LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prolongation_equals_the_cpu_kernel(compiled, rng, shape, periodic, dtype):
    tr = _transfer(shape, periodic)
    coarse = _values(rng, tr.coarse_shape, dtype)
    fine = _values(rng, shape, dtype)
    want = fine.copy()
    CPUBackend().prolong_add(tr, coarse, want)
    got = emulated_prolong(compiled, tr, coarse, fine)
    np.testing.assert_array_equal(got, want)


def test_emulation_fails_on_broken_kernels(compiled, rng):
    """Kernels that carry the wrong plane's sum, or take a wrong corner, are caught."""
    tr = _transfer((13, 10, 9), False)
    fine = _values(rng, tr.fine_shape, np.float64)
    coarse = _values(rng, tr.coarse_shape, np.float64)
    want_r = np.empty(tr.coarse_shape)
    CPUBackend().restrict(tr, fine, want_r)
    want_p = fine.copy()
    CPUBackend().prolong_add(tr, coarse, want_p)
    broken = transfers.SOURCE.replace("held = sp;", "held = sc;")
    assert broken != transfers.SOURCE
    got = emulated_restrict(compiled, tr, fine, 4, source=broken)
    assert not np.array_equal(got, want_r)
    corner = "coarse[(a1 + b1) * umz + c0]"
    broken = transfers.SOURCE.replace(corner, corner.replace("b1", "b0"))
    assert broken != transfers.SOURCE
    got = emulated_prolong(compiled, tr, coarse, fine, source=broken)
    assert not np.array_equal(got, want_p)
