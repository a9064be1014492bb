"""The CUDA C fused red–black sweep (``pbsolver.backends.cuda.fused_sweep``) on a CPU.

numba's simulator cannot run CUDA C, so without a GPU the kernel's source is compiled as C++
(``benchmarks/sweep_pair_c.py``: each block's threads as ``std::thread``s at a
``std::barrier``) and compared with a plain two-pass red–black sweep, bit for bit. Needs a
C++20 compiler (``g++`` ≥ 11); skipped without one. On a GPU the same kernel is compared with
the two-pass CUDA kernel by ``tests/test_cuda_backend.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def emulation(tmp_path_factory):
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ to compile the kernel as C++")
    probe = tmp_path_factory.mktemp("probe") / "barrier.cpp"
    probe.write_text(
        "#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n"
    )
    made = subprocess.run([compiler, "-std=c++20", "-pthread", str(probe), "-o",
                           str(probe.with_suffix(""))], capture_output=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip("g++ has no C++20 <barrier>")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import sweep_pair_c

    return sweep_pair_c


def test_fused_kernel_equals_the_two_pass_sweep(emulation):
    """Every checked case (float32/float64, Dirichlet/periodic, the three diagonal forms,
    several blocks and chunks, both first colours, prefetch on and off): 0 difference."""
    cases = [(*case, prefetch) for prefetch in (False, True) for case in emulation.CASES]
    lines = emulation.emulate(cases)
    assert len(lines) == 2 * len(cases)
    assert all("= 0, 0 nodes unwritten" in line for line in lines)


def test_emulation_fails_on_a_broken_kernel(emulation):
    """A kernel that reads one wrong ring neighbour is caught."""
    from pbsolver.backends.cuda import fused_sweep

    broken = fused_sweep.SOURCE.replace("ring[at - 1], s1a", "ring[at], s1a")
    assert broken != fused_sweep.SOURCE
    with pytest.raises(AssertionError):
        emulation.emulate([(np.float64, 4, 4, False, 1, (11, 9, 13), 3, True)], source=broken)


def dirichlet_emulate(emulation, cases, source=None):
    from pbsolver.backends.cuda import fused_sweep

    source = fused_sweep.SOURCE_DIRICHLET if source is None else source
    return emulation.emulate(cases, source=source, kernel_name="rb_fused_dirichlet",
                             shape_constants=True)  # fmt: skip


def test_dirichlet_kernel_equals_the_two_pass_sweep(emulation):
    """The shape-specialised Dirichlet kernel, every Dirichlet case, prefetch on and off, both
    first colours: 0 difference."""
    cases = [(*c, pf) for pf in (False, True) for c in emulation.CASES if not c[3]]
    lines = dirichlet_emulate(emulation, cases)
    assert len(lines) == 2 * len(cases)
    assert all("= 0, 0 nodes unwritten" in line for line in lines)


@pytest.mark.parametrize(
    ("good", "bad"),
    [
        # column 1 relaxed on the grid's first z-plane (a fixed node)
        ("in1 = jin && k >= 0 && k + 1", "in1 = jin && k + 1"),
        # a face read from the wrong side
        ("p - SX, p - SY, p - 1", "p - SX, p + SY, p - 1"),
    ],
)
def test_dirichlet_emulation_fails_on_a_broken_kernel(emulation, good, bad):
    from pbsolver.backends.cuda import fused_sweep

    broken = fused_sweep.SOURCE_DIRICHLET.replace(good, bad)
    assert broken != fused_sweep.SOURCE_DIRICHLET
    with pytest.raises(AssertionError):
        dirichlet_emulate(emulation, [(np.float64, 4, 4, False, 0, (11, 9, 13), 3, True)], broken)


def double_emulate(emulation, cases, source=None):
    from benchmarks import double_sweep

    return emulation.emulate(cases, source=double_sweep.SOURCE if source is None else source,
                             kernel_name="rb_fused_twice", sweeps=2)  # fmt: skip


def test_double_sweep_kernel_equals_two_reference_sweeps(emulation):
    """``double_sweep``'s two sweeps in one pass against two plain two-pass sweeps, over
    float32/float64, Dirichlet/periodic, the three diagonal forms, several blocks and chunks
    (a chunk of 2 and one longer than the grid), both first colours: 0 difference."""
    cases = [(*case, False) for case in emulation.DOUBLE_CASES]
    lines = double_emulate(emulation, cases)
    assert len(lines) == 2 * len(cases)
    assert all("= 0, 0 nodes unwritten" in line for line in lines)


@pytest.mark.parametrize(
    ("good", "bad"),
    [
        # a stage reads its x-neighbour from its own plane's slot
        ("slot_of(ts), slot_of(ts + 1)", "slot_of(ts), slot_of(ts)"),
        # the pipeline stops each stage at the chunk's end
        ("qs > i1 - 1 + (4 - s)", "qs > i1 - 1"),
        # the output taken two planes early
        ("const int here = slot_of(t - 6);", "const int here = slot_of(t - 4);"),
    ],
)
def test_double_sweep_emulation_fails_on_a_broken_kernel(emulation, good, bad):
    from benchmarks import double_sweep

    broken = double_sweep.SOURCE.replace(good, bad)
    assert broken != double_sweep.SOURCE
    with pytest.raises(AssertionError):
        double_emulate(emulation, [(np.float64, 4, 8, False, 0, (13, 11, 15), 3, False)], broken)
