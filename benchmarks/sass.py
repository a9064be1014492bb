"""A numba-cuda kernel's registers and SASS opcodes for sm_90, compiled without a device.

:func:`sass_of` compiles a kernel's Python function to PTX with numba-cuda (its argument types
from example arrays, as ``tests/test_cuda_ptx.py`` types them), assembles it with ``ptxas -v``
(``PTXAS``: the ``nvidia-cuda-nvcc`` wheel's) and disassembles it with ``nvdisasm``
(``NVDISASM``: the ``nvidia-cuda-nvdisasm`` wheel's). Used by ``ion_sums_sass.py`` and
``radial_sums_sass.py``.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numba.cuda.dispatcher as dispatcher
from numba import cuda

# device functions are compiled for "the current device": there is none here, so name one
dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_cuda_ptx import _types  # noqa: E402


def sass_of(function, args, fastmath=False):
    """``(info, opcodes)`` of the kernel ``function`` compiled for ``args``' types.

    ``info``: ptxas's lines on registers and stack frame; ``opcodes``: a Counter of the SASS
    opcodes with their suffixes (``LDS.128``, ``MUFU.RSQ``). ``fastmath`` as the kernel's
    ``cuda.jit`` flag.
    """
    ptx, _ = cuda.compile_ptx(function, _types(args), cc=(9, 0), fastmath=fastmath)
    # a ptxas older than libnvvm reads the PTX (the kernels use nothing newer)
    ptx = re.sub(r"^\.version \d+\.\d+", ".version 8.5", ptx, flags=re.M)
    folder = tempfile.mkdtemp()
    src, cubin = os.path.join(folder, "k.ptx"), os.path.join(folder, "k.cubin")
    with open(src, "w") as f:
        f.write(ptx)
    out = subprocess.run([os.environ["PTXAS"], "-v", "-arch=sm_90", src, "-o", cubin],
                         capture_output=True, text=True, check=True)  # fmt: skip
    info = [line.split(":", 1)[-1].strip() for line in out.stderr.splitlines()
            if "registers" in line or "stack frame" in line]  # fmt: skip
    sass = subprocess.run([os.environ["NVDISASM"], "-c", cubin], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    opcodes = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m:
            opcodes[m.group(1)] += 1
    return info, opcodes
