"""Two red–black sweeps a launch against one: the smoother's sweep kernels side by side.

For each size n³ (the package's random high-contrast problem, float32, no salt), GPU time from
CUDA events around repeated launches on the backend's stream of:

* ``one``: two launches of :mod:`pbsolver.backends.cuda.fused_sweep`'s general kernel
  (x → y → x), and ``one, shape constants``: of its Dirichlet kernel compiled for the shape
  (``…, 4 blocks/SM``: with launch bounds of 4 blocks a multiprocessor; a variant whose plane
  steps went two a turn was measured in s30d, at 5109d97, and was slower);
* ``pair BKxBJ/MIN``: one launch of :mod:`benchmarks.double_sweep` (x → y, two
  sweeps) with that block and ``__launch_bounds__`` minimum of blocks (the package's first);
* ``copy``: a float32 copy of the grid (8 B a node), from which the 16 B/node floor of one
  sweep is ``2 ×`` copy.

Every row is two sweeps; ``per_sweep_us`` is half of it and ``x_floor`` that over the floor.
Each kernel's result is compared with the two-pass sweeps bit for bit (``same_bits``)::

    python benchmarks/double_sweep_variants.py --sizes 256 384 512 --json pairs.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import double_sweep  # noqa: E402
from benchmarks.fused_threshold import gpu_ms  # noqa: E402
from pbsolver.backends.cuda import CUDABackend, fused_sweep  # noqa: E402
from pbsolver.bench import environment, random_problem  # noqa: E402

#: (block, min_blocks) of the pair kernel tried; the package's first.
VARIANTS = [
    (double_sweep.BLOCK, double_sweep.MIN_BLOCKS),
    ((32, 16), 3),
    ((32, 24), 2),
]


def launch(cp, gpu, module, kernel, block, st, src, dst, d, chunk):
    nx, ny, nz = (np.int32(n) for n in st.shape)
    args = (src, dst, st.b, st.cx, st.cy, st.cz, d, nx, ny, nz, np.int32(0), np.float32(1.9),
            np.int32(chunk))  # fmt: skip
    kernel(module.launch_grid(st.shape, chunk, block), (*block, 1), args, stream=gpu.dev.stream)


def rows_at(n):
    import cupy as cp

    gpu = CUDABackend()
    with gpu.dev.stream:  # CuPy's copies on the stream the kernels use
        return _rows(cp, gpu, n)


def _rows(cp, gpu, n):
    sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    st = gpu.stencil(random_problem(n, xp=cp, seed=n), np.float32)
    d, dmode = gpu._diagonal_of(st)
    x0 = cp.random.standard_normal((n, n, n), dtype=cp.float32)
    want = x0.copy()
    gpu.sor_sweeps(st, want, 1.9, 2)  # the two-pass kernels, two sweeps
    a, b = x0.copy(), cp.empty_like(x0)
    stream = gpu.dev.stream

    def copy():
        b[...] = a

    copy_ms = gpu_ms(cp, stream, copy)
    floor_us = 2 * copy_ms * 1e3  # one sweep: 16 B a node
    out = [{"n": n, "kernel": "copy", "two_sweeps_us": copy_ms * 1e3}]

    one = fused_sweep.kernel(np.float32, False, dmode)
    chunk1 = fused_sweep.chunk_for(st.shape, sms)

    def two_single():
        launch(cp, gpu, fused_sweep, one, fused_sweep.BLOCK, st, a, b, d, chunk1)
        launch(cp, gpu, fused_sweep, one, fused_sweep.BLOCK, st, b, a, d, chunk1)

    def reset():
        a[...] = x0

    reset()
    two_single()
    same = bool(cp.array_equal(a, want))
    ms = gpu_ms(cp, stream, two_single)
    out.append({"n": n, "kernel": "one", "two_sweeps_us": ms * 1e3, "same_bits": same})
    fixed = fused_sweep.kernel(np.float32, False, dmode, shape=st.shape)

    fixed4 = fused_sweep.kernel(np.float32, False, dmode, min_blocks=4, shape=st.shape)
    chunk4 = fused_sweep.chunk_for(st.shape, sms, resident=4)
    for label, kern, chunk in (("one, shape constants", fixed, chunk1),
                               ("one, shape constants, 4 blocks/SM", fixed4, chunk4)):  # fmt: skip

        def two(kern=kern, chunk=chunk):
            launch(cp, gpu, fused_sweep, kern, fused_sweep.BLOCK, st, a, b, d, chunk)
            launch(cp, gpu, fused_sweep, kern, fused_sweep.BLOCK, st, b, a, d, chunk)

        reset()
        two()
        same = bool(cp.array_equal(a, want))
        ms = gpu_ms(cp, stream, two)
        out.append({"n": n, "kernel": label, "two_sweeps_us": ms * 1e3, "same_bits": same,
                    "registers": int(kern.attributes["num_regs"])})  # fmt: skip
    for block, min_blocks in VARIANTS:
        kern = double_sweep.kernel(np.float32, False, dmode, block, min_blocks)
        chunk = fused_sweep.chunk_for(st.shape, sms, block, max(min_blocks, 1),
                                      double_sweep.MARGIN, double_sweep.EXTRA_PLANES)  # fmt: skip

        def pair(kern=kern, block=block, chunk=chunk):
            launch(cp, gpu, double_sweep, kern, block, st, a, b, d, chunk)

        reset()
        pair()
        same = bool(cp.array_equal(b, want))
        ms = gpu_ms(cp, stream, pair)
        out.append({"n": n, "kernel": f"pair {block[0]}x{block[1]}/{min_blocks}",
                    "two_sweeps_us": ms * 1e3, "same_bits": same, "chunk": chunk,
                    "registers": int(kern.attributes["num_regs"])})  # fmt: skip
    for row in out[1:]:
        row["per_sweep_us"] = row["two_sweeps_us"] / 2
        row["x_floor"] = row["per_sweep_us"] / floor_us
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[256, 384, 512])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import cupy as cp

    res = {"environment": environment(True), "rows": []}
    for n in args.sizes:
        for row in rows_at(n):
            res["rows"].append(row)
            print(row, flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
