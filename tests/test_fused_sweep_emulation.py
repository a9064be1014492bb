"""The CUDA C red–black sweep kernels on a CPU: ``pbsolver.backends.cuda.fused_sweep``'s two
(the general one and the Dirichlet one compiled for a grid's shape) and the measurement-only
two-sweep kernel of ``benchmarks/double_sweep.py``.

numba's simulator cannot run CUDA C, so without a GPU each kernel's source is compiled as C++
(``benchmarks/sweep_pair_c.py``: each block's threads as ``std::thread``s at a
``std::barrier``) and compared with plain two-pass red–black sweeps, bit for bit; mutations of
each kernel must fail. Needs a C++20 compiler (``g++`` ≥ 11); skipped without one. On a GPU the
package's kernels are compared with the two-pass CUDA kernel by ``tests/test_cuda_backend.py``.
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


def kernels(emulation):
    """Each kernel checked: its source, its function's name, the sweeps a launch does, whether
    the case's shape is compiled in, and its cases (prefetch flag included)."""
    from benchmarks import double_sweep, double_sweep_variants
    from pbsolver.backends.cuda import fused_sweep

    both = (False, True)
    return {
        "one sweep": (fused_sweep.SOURCE, "rb_fused", 1, False,
                      [(*c, pf) for pf in both for c in emulation.CASES]),
        "one sweep, Dirichlet, shape constants": (
            fused_sweep.SOURCE_DIRICHLET, "rb_fused_dirichlet", 1, True,
            [(*c, pf) for pf in both for c in emulation.CASES if not c[3]]),
        "one sweep, Dirichlet, registers and shuffles (benchmarks)": (
            double_sweep_variants.reuse_source(), "rb_fused_reuse", 1, True,
            [(*c, pf) for pf in both for c in emulation.CASES if not c[3]]),
        "two sweeps (benchmarks.double_sweep)": (double_sweep.SOURCE, "rb_fused_twice", 2, False,
                                                 [(*c, False) for c in emulation.DOUBLE_CASES]),
    }  # fmt: skip


def run(emulation, name, source=None, cases=None):
    default, kernel_name, sweeps, constants, all_cases = kernels(emulation)[name]
    return emulation.emulate(all_cases if cases is None else cases,
                             source=default if source is None else source,
                             kernel_name=kernel_name, sweeps=sweeps,
                             shape_constants=constants)  # fmt: skip


@pytest.mark.parametrize("name", ["one sweep", "one sweep, Dirichlet, shape constants",
                                  "one sweep, Dirichlet, registers and shuffles (benchmarks)",
                                  "two sweeps (benchmarks.double_sweep)"])  # fmt: skip
def test_kernel_equals_the_reference_sweeps(emulation, name):
    """Every checked case of each kernel (float32/float64, Dirichlet/periodic where it applies,
    the three diagonal forms, several blocks and chunks — of 2 planes, and longer than the grid
    —, prefetch on and off, both first colours) against plain two-pass sweeps: 0 difference."""
    lines = run(emulation, name)
    assert len(lines) == 2 * len(kernels(emulation)[name][4])
    assert all("= 0, 0 nodes unwritten" in line for line in lines)


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        # one wrong ring neighbour (the one-sweep kernels' shared second colour)
        ("one sweep", "ring[at - 1], s1a", "ring[at], s1a"),
        # column 1 relaxed on the grid's first z-plane (a fixed node)
        ("one sweep, Dirichlet, shape constants", "t.in1 = jin && t.k >= 0 &&",
         "t.in1 = jin &&"),
        # a face read from the wrong side
        ("one sweep, Dirichlet, shape constants", "p - SX, p - SY, p - 1",
         "p - SX, p + SY, p - 1"),
        # the plane above taken from the registers of the plane itself
        ("one sweep, Dirichlet, registers and shuffles (benchmarks)", "first0 ? f0 : f1, x[p - SY]",
         "first0 ? p0 : p1, x[p - SY]"),
        # the next thread's column shuffled the wrong way
        ("one sweep, Dirichlet, registers and shuffles (benchmarks)", "first0 ? SHFL_UP(p1)",
         "first0 ? SHFL_DOWN(p1)"),
        # a stage reads its x-neighbour from its own plane's slot
        ("two sweeps (benchmarks.double_sweep)", "slot_of(ts), slot_of(ts + 1)",
         "slot_of(ts), slot_of(ts)"),
        # the pipeline stops each stage at the chunk's end
        ("two sweeps (benchmarks.double_sweep)", "qs > i1 - 1 + (4 - s)", "qs > i1 - 1"),
        # the output taken two planes early
        ("two sweeps (benchmarks.double_sweep)", "const int here = slot_of(t - 6);",
         "const int here = slot_of(t - 4);"),
    ],
)  # fmt: skip
def test_emulation_fails_on_a_broken_kernel(emulation, name, good, bad):
    source = kernels(emulation)[name][0]
    broken = source.replace(good, bad)
    assert broken != source
    case = (np.float64, 4, 8, False, 0, (13, 11, 15), 3, True)
    with pytest.raises(AssertionError):
        run(emulation, name, broken, [case])
