"""Bytes a grid node a frame that the stacked engine's batches allocate (CPU or GPU).

For each surface and kind of forces, a fresh :class:`pbsolver.ReactionFieldCalculator`
(``engine="stacked"``, the shipped peptide or ``--pqr`` at ``--spacing``, 0.15 M) runs two
batches of B frames (its kernels compiled first, by another calculator). On the CPU the peak
of NumPy's traced allocations (tracemalloc: the engine's buffers, the forces' arrays; not
numba's own inside kernels) is printed per grid node and frame; on the GPU
(``--backend cuda``) the bytes CuPy's memory pool holds afterwards (emptied before: the pool
keeps what it freed, so this is the batches' high-water mark, in the pool's rounded blocks)
plus what the driver lost outside the pool. Beside each,
:meth:`pbsolver.md.engine.StackedFrames.batch_bytes`'s estimate of the same batch. The
constants of ``pbsolver/md/engine.py`` come from these rows.

    python benchmarks/stacked_memory.py --spacing 0.8 --batches 1 2 4 8
    python benchmarks/stacked_memory.py --backend cuda --pqr data/1lpb_chainA.pqr \
        --spacing 0.5 --batches 1 8 32 --surfaces mol smol
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spacing", type=float, default=0.8)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--surfaces", nargs="+", default=["vdw", "mol", "smol"])
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--kinds",
        nargs="+",
        choices=["field", "exact"],
        default=["field", "exact"],
        help="the kinds of forces, in this order",
    )
    p.add_argument("--pqr", help="a PQR file (default: the shipped peptide)")
    args = p.parse_args(argv)
    atoms = pb.read_pqr(args.pqr or pb.data.path("peptide.pqr"))
    peak_of = gpu_peak if args.backend == "cuda" else host_peak
    frames = frames_of(atoms, 2 * max(args.batches), drift=0.005, wiggle=0.01)
    print(f"{args.backend}: {len(atoms)} atoms, h {args.spacing} Å")
    print("surface forces B  measured peak MB  measured B/node/frame  estimate B/node/frame")
    for forces in args.kinds:
        for surface in args.surfaces:
            kw = {"forces": forces, "engine": "stacked", "spacing": args.spacing,
                  "surface": surface, "ionic_strength": 0.15, "backend": args.backend,
                  "margin": 6.0, "skin": 1.0}  # fmt: skip
            warm = pb.ReactionFieldCalculator(atoms, **kw)
            for b in args.batches:  # every batch size's kernels compiled untraced
                warm.compute_batch(frames[:b])
            del warm
            for b in args.batches:
                calc, peak = peak_of(lambda b=b, kw=kw: run_two(atoms, kw, frames, b))
                engine = calc._stacked
                size = engine.grid.size
                estimate = engine.batch_bytes(b, exact=forces == "exact")
                print(f"{surface:7s} {forces:6s} {b:2d} {peak / 1e6:16.1f} "
                      f"{peak / size / b:22.0f} {estimate / size / b:22.0f}")  # fmt: skip
                del calc, engine


def run_two(atoms, kw, frames, b):
    """A fresh calculator's two batches of ``b`` frames; the calculator."""
    calc = pb.ReactionFieldCalculator(atoms, **kw)
    calc.compute_batch(frames[:b])
    calc.compute_batch(frames[b : 2 * b])
    return calc


def host_peak(work):
    """``work()``'s result and the peak of NumPy's allocations while it ran (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        out = work()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def gpu_peak(work):
    """``work()``'s result and the device bytes it took.

    CuPy's pool's held blocks afterwards (the pool emptied before; it reuses but keeps what is
    freed), less those in use before, plus the driver's free memory lost outside the pool.
    The three parts are printed too.
    """
    import cupy as cp

    gc.collect()
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    before = pool.used_bytes()
    free0 = cp.cuda.runtime.memGetInfo()[0]
    out = work()
    cp.cuda.Device().synchronize()
    held = pool.total_bytes()
    outside = free0 - cp.cuda.runtime.memGetInfo()[0] - (held - before)
    print(
        f"  (pool: {before / 1e6:.1f} MB in use before, {held / 1e6:.1f} MB held after, "
        f"{pool.used_bytes() / 1e6:.1f} MB of it in use; {outside / 1e6:.1f} MB outside)"
    )
    return out, held - before + max(0, outside)


if __name__ == "__main__":
    main()
