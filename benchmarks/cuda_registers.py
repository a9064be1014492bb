"""Registers, stack and shared memory of CUDA kernels (sweeps, the float64 operator) for sm_90.

Compiles each kernel to PTX with numba-cuda (needs libnvvm: ``pip install nvidia-nvvm
nvidia-cuda-nvrtc``) and runs ``ptxas -v`` on it (from the ``nvidia-cuda-nvcc`` wheel; give its
path in ``PTXAS`` or leave it unpacked under /tmp/nvcc). Usage::

    PTXAS=/path/to/ptxas python benchmarks/cuda_registers.py

``PTX_VERSION=9.0`` rewrites the PTX's version line for a ptxas older than libnvvm (the kernels
use nothing newer). ``NVDISASM=/path/to/nvdisasm`` (the ``nvidia-cuda-nvdisasm`` wheel) adds each
kernel's static SASS: the instruction count and the share of integer and floating-point
instructions. Arguments select kernels by name (substrings).
"""

import collections
import glob
import os
import re
import subprocess
import tempfile

import numba.cuda.dispatcher as _dispatcher
import numpy as np
from numba import cuda
from numba import types as T


class _SM90:
    compute_capability = (9, 0)


# device functions are compiled for "the current device": there is none here, so name one
_dispatcher.get_current_device = lambda: _SM90()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_variants import rb_march, rb_pair, rb_tile  # noqa: E402

from pbsolver.backends.cuda import kernels as K  # noqa: E402

f32, f64, i64, b1 = T.float32[::1], T.float64[::1], T.int64, T.boolean
#: (x, b, e0, e1, e2, mode, k2, has_k2, hx2, hy2, hz2, nx, ny, nz, periodic, chunk)
OPERATOR_SIG = (f64, f64, f64, f64, f64, i64, f64, b1, *(T.float64,) * 3, i64, i64, i64, b1, i64)
STENCIL = (f32, f32, f32, f32, f32, i64)
#: the signatures of the fused measurement kernels (sweep_variants.py), one per kind
TILE_SIG = T.void(f32, f32, *STENCIL, i64, i64, i64, T.float32, b1, i64)
PAIR_SIG = T.void(f32, f32, *STENCIL[:-1], i64, i64, i64, i64, T.float32, i64)
KERNELS = {
    "rb_point": (K.rb_point, T.void(f32, *STENCIL, i64, i64, i64, i64, T.float32, b1)),
    "rb_march": (rb_march, T.void(f32, *STENCIL, i64, i64, i64, i64, T.float32, b1, i64)),
    "jacobi_point": (K.jacobi_point, T.void(f32, f32, *STENCIL, i64, i64, i64, T.float32, b1)),
    **{f"rb_tile 32x{bj}": (rb_tile(np.float32, 32, bj), TILE_SIG) for bj in (16, 8)},
    **{
        f"rb_pair 32x{bj}{label}": (rb_pair(np.float32, 32, bj, periodic, dmode), PAIR_SIG)
        for bj, label, periodic, dmode in (
            (8, "", False, K.DIAG_FACES),
            (16, "", False, K.DIAG_FACES),
            (16, " salt", False, K.DIAG_FACES_SHIFT),
            (16, " periodic", True, K.DIAG_FACES),
        )
    },
    # the float64 operator of a refined solve (pbsolver.backends.ProblemOperator)
    "operator_sumsq": (K.operator_reduction(32, 8)[0], T.void(*OPERATOR_SIG, f64)),
    "operator_residual_sumsq": (K.operator_reduction(32, 8)[1], T.void(*OPERATOR_SIG, f32, f64)),
    "operator_residual_point": (
        K.operator_residual_point,
        T.void(f64, f64, f64, f64, f64, i64, f64, b1, *(T.float64,) * 3, i64, i64, i64, f32, b1),
    ),
}


#: SASS opcodes counted as integer (index) arithmetic and as floating point
INTEGER_OPS = ("IADD3", "IMAD", "ISETP", "LEA", "SEL", "LOP3", "SHF", "UIADD3", "UIMAD",
               "UISETP", "USEL", "ULEA", "ULOP3", "USHF", "IABS", "PLOP3", "UPLOP3")  # fmt: skip
FLOAT_OPS = ("FFMA", "FADD", "FMUL", "MUFU", "FSETP", "FSEL", "DFMA", "DADD", "DMUL", "DSETP")


def sass_summary(nvdisasm, cubin):
    """Static SASS of a cubin: (instructions, integer share, floating-point share)."""
    text = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", text)
    count = collections.Counter(ops)
    total = sum(count.values())
    share = (sum(count[o] for o in ops_) / max(total, 1) for ops_ in (INTEGER_OPS, FLOAT_OPS))
    return total, *share


def main():
    ptxas = os.environ.get("PTXAS") or glob.glob("/tmp/nvcc/**/ptxas", recursive=True)[0]
    nvdisasm = os.environ.get("NVDISASM")
    wanted = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kernel, sig) in KERNELS.items():
            if wanted and not any(w in name for w in wanted):
                continue
            bounds = kernel.targetoptions.get("launch_bounds")
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0), launch_bounds=bounds)
            if os.environ.get("PTX_VERSION"):  # an older ptxas than the PTX libnvvm wrote
                ptx = re.sub(r"^\.version \S+", ".version " + os.environ["PTX_VERSION"], ptx,
                             count=1, flags=re.M)  # fmt: skip
            src = os.path.join(tmp, "k.ptx")
            with open(src, "w") as fh:
                fh.write(ptx)
            out = subprocess.run(
                [ptxas, "-arch=sm_90", "-O3", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                capture_output=True,
                text=True,
                check=True,
            )
            info = [s.split(":", 1)[-1].strip() for s in out.stderr.splitlines() if "Used" in s]
            if nvdisasm:
                total, integer, floating = sass_summary(nvdisasm, os.path.join(tmp, "k.cubin"))
                info.append(f"SASS {total} instructions: {integer:.0%} integer, "
                            f"{floating:.0%} floating point")  # fmt: skip
            print(f"{name:14s} {'; '.join(info)}")


if __name__ == "__main__":
    main()
