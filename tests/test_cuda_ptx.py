"""CUDA kernels compiled to PTX (sm_90), where no GPU is needed: the forces' and the line maps'.

numba's simulator runs kernels as Python, so it cannot see what numba-cuda refuses to type
(a dict looked up inside a kernel passed it and failed to compile). ``cuda.compile_ptx`` types
and compiles a kernel without a device, given NVRTC and libNVVM (e.g. the wheels
``nvidia-cuda-nvrtc-cu12`` and ``nvidia-cuda-nvcc-cu12``); where they do not load, the test is
skipped and says why. The argument types are those of the engine's calls
(:meth:`pbsolver.md.ses.FrameSES.interval_ends`,
:meth:`pbsolver.md.engine.StackedFrames.ion_end_sums`, the map wrappers of
:mod:`pbsolver.backends.cuda.maps` and the frame engine's SES lines).

The compilers are not in the ``test`` extra: beside the ``cuda13`` extra's own they would put
two CUDA versions' compilers in one environment. To run it on a machine without a GPU::

    python -m venv /tmp/ptx && /tmp/ptx/bin/pip install "numpy<2.5" numba-cuda==0.30.4 scipy \
        h5py pytest nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12
    PYTHONPATH=. /tmp/ptx/bin/python -m pytest -o addopts="" tests/test_cuda_ptx.py
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest


def _compiler():
    """numba.cuda with device functions compiled for sm_90 without a driver, or a skip."""
    cuda = pytest.importorskip("numba.cuda")
    try:
        cuda.compile_ptx(lambda a: None, "void(float64[:])", cc=(9, 0))
    except Exception as exc:  # NVRTC or libNVVM missing
        pytest.skip(f"numba-cuda cannot compile PTX here: {type(exc).__name__}: {exc}"[:300])
    return cuda


def _types(args):
    import numba

    def one(a):
        if isinstance(a, np.ndarray):
            return numba.typeof(a)
        if isinstance(a, bool):
            return numba.boolean
        if isinstance(a, np.generic):
            return numba.typeof(a)
        return numba.int64 if isinstance(a, int) else numba.float64

    return tuple(one(a) for a in args)


@pytest.fixture
def cuda(monkeypatch):
    """numba.cuda compiling device functions for sm_90 (the capability of no device here)."""
    cuda = _compiler()
    import numba.cuda.dispatcher as dispatcher

    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: SimpleNamespace(compute_capability=(9, 0)))  # fmt: skip
    return cuda


def z(*shape, dtype=np.float64):
    return np.zeros(shape, dtype=dtype)


def test_frame_line_end_kernels_compile(cuda):
    from pbsolver.backends.cuda import line_ends as L

    i8, b1 = np.int64, np.bool_
    nf, na = 2, 5
    origin, h = z(nf, 3), z(3)
    pos, vdw, acc = z(nf * na, 3), z(nf * na), z(nf * na)
    bins, bstart, border = z(nf, 5), z(nf, 10, dtype=i8), z(nf * na, dtype=i8)
    per_line = (bins, bstart, border, bins, bstart, border)
    nb = (z(nf * na + 1, dtype=i8), z(4, dtype=i8), z(nf * na + 1, dtype=i8))
    arcs = (z(3, 13), z(4, dtype=i8), z(3, 6))
    bad = z(1, dtype=i8)
    us, vs = z(nf, 4), z(nf, 3)
    whole = z(nf, 4, 3, 9, 2)
    ends = (z(10, dtype=i8), z(10, 3, dtype=i8), z(10, 3, 3))
    cases = {
        "frame_ses_record_kernel": (
            z(nf, 4, 6, 9, 2), 2, 0, 4, 3, 3, origin, h, pos, vdw, acc, 1.4, 0.25, 14, 3.0,
            4.4, *per_line, *nb, *arcs, z(8, dtype=i8), z(0, dtype=b1), bad,
        ),
        "frame_join_pieces_kernel": (z(nf, 4, 6, 9, 2), 2, whole),
        "frame_ses_slopes_kernel": (
            whole, z(25, dtype=i8), z(5, dtype=i8), 0, us, vs, origin, 0.5, 4, pos, vdw, acc,
            1.4, 1e-6, 3.0, 4.4, *per_line, *nb, z(3, dtype=i8), *arcs, *ends, z(24, dtype=i8), bad,
        ),
        # one frame's SES slopes, whose scratch moved into a device function the frame kernel
        # shares
        "_k_ses_slopes": (
            z(4, 3, 9, 2), z(13, dtype=i8), 0, z(4), z(3), 0.0, 0.5, 4, z(na, 3), z(na), z(na),
            1.4, 1e-6, 3.0, 4.4, 0.0, 0.0, 1.0, 3, 3, z(10, dtype=i8), z(na, dtype=i8), 0.0,
            0.0, 1.0, 3, 3, z(10, dtype=i8), z(na, dtype=i8), z(na + 1, dtype=i8),
            z(4, dtype=i8), z(na + 1, dtype=i8), z(3, dtype=i8), *arcs, *ends, z(12, dtype=i8),
            bad,
        ),
    }  # fmt: skip
    for name, args in cases.items():
        ptx, _ = cuda.compile_ptx(getattr(L, name).py_func, _types(args), cc=(9, 0))
        assert ".entry" in ptx, name
    # the recorder as the engine compiles it: its SES map kernel's launch bounds
    from pbsolver.backends.frame_kernels import LINE_MIN_BLOCKS, LINE_THREADS

    args = cases["frame_ses_record_kernel"]
    ptx, _ = cuda.compile_ptx(L.frame_ses_record_kernel.py_func, _types(args), cc=(9, 0),
                              launch_bounds=(LINE_THREADS, LINE_MIN_BLOCKS))  # fmt: skip
    assert ".maxntid" in ptx
    # the forces' radial sums: float32 terms from shared-memory tiles, a node one 16-byte
    # load; a kernel per (periodic, mdh), its 1/r³ (Coulomb) from one rsqrt
    from pbsolver.backends.cuda import forces as F

    f4, i8 = np.float32, np.int64
    for periodic, mdh in ((False, False), (True, False), (False, True)):
        args = (z(70, dtype=f4), z(70, dtype=f4), z(70, dtype=f4), z(70, dtype=f4),
                z(11, 3, dtype=f4), z(3, dtype=f4), z(11, dtype=f4), f4(0.1), f4(78.5),
                f4(0.5), z(2, dtype=i8), z(2, dtype=i8), 70, z(1, 11, 3))  # fmt: skip
        kernel = F.radial_sums_kernel(periodic, mdh)
        ptx, _ = cuda.compile_ptx(kernel.py_func, _types(args), cc=(9, 0),
                                  fastmath=True)  # as the kernel is compiled  # fmt: skip
        assert ".entry" in ptx and ".f64" in ptx and "ld.shared.v4.f32" in ptx, (periodic, mdh)
        assert ("sqrt.approx" if mdh else "rsqrt.approx") in ptx, (periodic, mdh)


def test_line_map_kernels_compile_with_their_scratch_helpers(cuda):
    # the map kernels call their line bodies through a device function with ``*args`` that
    # declares the local scratch (cuda.maps.with_line_scratch / with_union_scratch); the
    # SES features' kernels compile the shared free-arc body
    from pbsolver.backends import frame_kernels
    from pbsolver.backends.cuda import maps as M

    i8 = np.int64
    na, nf = 5, 2
    bins = (0.0, 0.0, 1.0, 3, 3, z(10, dtype=i8), z(na, dtype=i8))
    nb = (z(na + 1, dtype=i8), z(4, dtype=i8), z(na + 1, dtype=i8))
    arcs = (z(3, 13), z(4, dtype=i8), z(3, 6))
    ses = (
        z(4, 3, 9), 0, z(4), z(3), 0.0, 0.5, 4, 2, z(na, 3), z(na), z(na), 1.4, 0.25, 14, 3.0,
        4.4, *bins, *bins, *nb, *arcs, z(1, dtype=i8),
    )  # fmt: skip
    union = (z(1, 4, 3, 9), 0, z(1, 4), z(1, 3), 0.0, 0.5, 4, z(na, 3), z(na), 3.0, *bins,
             z(1, dtype=i8))  # fmt: skip
    fb = (z(nf, 5), z(nf, 10, dtype=i8), z(nf * na, dtype=i8))
    frac = z(nf * 4, 3, 9)
    edges = (
        frac, z(1, 1, 1, 1, 2), 2, 0, 4, 3, 3, 4, z(nf, 3), z(3), z(nf * na, 3), z(nf * na),
        z(nf * na), 1.4, 0.25, 14, 3.0, 4.4, *fb, *fb, z(nf * na + 1, dtype=i8), z(4, dtype=i8),
        z(nf * na + 1, dtype=i8), *arcs, z(0, dtype=np.bool_), z(8, dtype=i8), z(1, dtype=i8),
    )  # fmt: skip
    # the same lines recording their intervals as they go (the exact forces' ends)
    edges_recorded = (frac, z(nf, 3, 9 * 2, 5, 2), *edges[2:])
    # the SES features: a circle's free arcs stop early once its burying intervals cover it
    arcs_count = (z(na, 3), z(na), *nb[:2], z(4, dtype=i8), z(na, dtype=np.bool_),
                  z(na, dtype=i8), z(1, dtype=i8))  # fmt: skip
    arcs_fill = (z(na, 3), z(na), z(3, dtype=i8), z(3, dtype=i8), *nb[:2], z(4, dtype=i8),
                 z(3, 13), z(3, 6))  # fmt: skip
    # the frame engine's ion-accessible columns (the shared column bodies) and the forces' sums
    # of their chord ends (atomic adds into (B·N, 3))
    column = (z(nf, na, 3), z(na), 4, 3, 3, 4, z(nf, 3), z(3), 2, z(1, dtype=i8))
    ion_map = (z(nf * 4, 3, 3), *column)
    ion_sums = (z(nf * na, 3), z(nf * 4, 3, 3), *column)
    kernels = frame_kernels.cuda_kernels()
    for kernel, args in ((M._k_ses_lines, ses), (M._k_sphere_union_lines, union),
                         (kernels.ses.edges, edges),
                         (kernels.ses.record_ends.edges, edges_recorded),
                         (M.count_arcs_kernel, arcs_count),
                         (M.fill_circles_kernel, arcs_fill), (kernels.ion, ion_map),
                         (kernels.ion_end_sums, ion_sums)):  # fmt: skip
        ptx, _ = cuda.compile_ptx(kernel.py_func, _types(args), cc=(9, 0))
        assert ".entry" in ptx


def test_debye_huckel_kernels_compile_with_the_bodys_exp(cuda):
    # the "mdh" term takes its exponential as an argument of make_point_sums (math.exp on CUDA,
    # a vectorising one on the CPU): the general map kernel and the frame engine's tiled one
    from pbsolver.backends import frame_kernels
    from pbsolver.backends.cuda import maps as M

    f4, f8, i4 = np.float32, np.float64, np.int32
    general = (np.zeros(10), np.zeros((10, 3)), np.zeros((1, 5, 3)), np.zeros(5), np.zeros(5),
               0.1, 1.0, 78.5, 2.0)  # fmt: skip
    frames = (np.zeros((8, 4, 4), f8), np.zeros((2, 5, 3), f4), np.zeros(5, f4),
              np.zeros(5, f4), np.zeros((6, 3), i4), f4(0.1), f4(78.5), f4(2.0), 1.0, 4,
              np.zeros(3))  # fmt: skip
    for kernel, args in ((M._k_debye_huckel_points, general),
                         (frame_kernels.cuda_kernels().boundary, frames)):  # fmt: skip
        ptx, _ = cuda.compile_ptx(kernel.py_func, _types(args), cc=(9, 0))
        assert ".entry" in ptx


def test_force_sensitivity_kernels_compile(cuda):
    # μ = ∂G/∂φ_c and ∂G/∂κ̄²: per-node bodies whose neighbours the kernel wraps by branches
    from pbsolver.backends.cuda import forces as F

    grid, f4 = np.zeros((4, 5, 6)), np.zeros((4, 5, 6), np.float32)
    mu = (grid, f4, f4, f4, f4, True, 2.0, 4.0, 4.0, 4.0, grid)
    kappa = (grid, f4, grid, grid)
    for kernel, args in ((F._k_coulomb_sensitivity, mu), (F._k_kappa_sensitivity, kappa)):
        ptx, _ = cuda.compile_ptx(kernel.py_func, _types(args), cc=(9, 0))
        assert ".entry" in ptx


def test_coarse_operator_kernels_compile(cuda):
    # a coarse level's faces (the operator bodies' ``coarse_node`` and ``faces_in_series``, which
    # reads float32 faces into float64) and its diagonals, with the argument types of
    # pbsolver.backends.coarse.build_with_kernels
    import numba

    from pbsolver.backends.cuda import coarse_kernels as K

    f4, f8, i4, i8 = np.float32, np.float64, np.int32, np.int64
    fine, coarse = z(4 * 5 * 6, dtype=f4), z(2 * 3 * 3, dtype=f8)
    axis = (z(3, dtype=i8), z(6, dtype=i8), z(6, dtype=i8), z(3, dtype=i4))
    shape = (4, 5, 6)
    cases = (
        (K.coarse_faces, (fine, fine, fine, fine, 1, (coarse,) * 4,
                          (z(18, dtype=f4),) * 3, *axis, *axis, *axis, shape, (2, 3, 3))),
        (K.coarse_diagonal, (coarse, coarse, coarse, coarse, z(18, dtype=f4), (2, 3, 3), 4, 5,
                             1e30)),
        (K.grid_diagonal, (coarse, coarse, coarse, coarse, z(18, dtype=f4), (2, 3, 3), 0)),
    )  # fmt: skip
    for kernel, args in cases:
        types = tuple(numba.typeof(a) if isinstance(a, tuple) else t
                      for a, t in zip(args, _types(args), strict=True))  # fmt: skip
        ptx, _ = cuda.compile_ptx(kernel.py_func, types, cc=(9, 0))
        assert ".entry" in ptx
        if kernel is K.coarse_faces:  # one float64 division a pair of faces in series
            assert "div.rn.f64" in ptx
