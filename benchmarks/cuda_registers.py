"""Registers, stack and shared memory of the CUDA sweep kernels for sm_90, without a GPU.

Compiles each kernel to PTX with numba-cuda (needs libnvvm: ``pip install nvidia-nvvm
nvidia-cuda-nvrtc``) and runs ``ptxas -v`` on it (from the ``nvidia-cuda-nvcc`` wheel; give its
path in ``PTXAS`` or leave it unpacked under /tmp/nvcc). Usage::

    PTXAS=/path/to/ptxas python benchmarks/cuda_registers.py
"""

import glob
import os
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

from pbsolver.backends.cuda import kernels as K  # noqa: E402

f32, i64, b1 = T.float32[::1], T.int64, T.boolean
STENCIL = (f32, f32, f32, f32, f32, i64)
KERNELS = {
    "rb_point": (K.rb_point, T.void(f32, *STENCIL, i64, i64, i64, i64, T.float32, b1)),
    "rb_march": (K.rb_march, T.void(f32, *STENCIL, i64, i64, i64, i64, T.float32, b1, i64)),
    "rb_tile 32x16": (
        K.rb_tile(np.float32, 32, 16),
        T.void(f32, f32, *STENCIL, i64, i64, i64, T.float32, b1, i64),
    ),
    "rb_tile 32x8": (
        K.rb_tile(np.float32, 32, 8),
        T.void(f32, f32, *STENCIL, i64, i64, i64, T.float32, b1, i64),
    ),
    "jacobi_point": (K.jacobi_point, T.void(f32, f32, *STENCIL, i64, i64, i64, T.float32, b1)),
}


def main():
    ptxas = os.environ.get("PTXAS") or glob.glob("/tmp/nvcc/**/ptxas", recursive=True)[0]
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kernel, sig) in KERNELS.items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
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
            print(f"{name:14s} {'; '.join(info)}")


if __name__ == "__main__":
    main()
