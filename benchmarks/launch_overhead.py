"""Host time of a numba-cuda launch whose array arguments are CuPy arrays, four ways (GPU only).

Usage::

    python benchmarks/launch_overhead.py [--launches 300] [--sizes 4096 4194304] [--profile N]
                                         [--json out.json]

"cupy": the CuPy arrays passed to the kernel as they are, as the map, line-end and force
kernels did before: numba reads each array's ``__cuda_array_interface__``, which names the
current CuPy stream, and synchronises that stream from the host, once per array and launch.
"new views": numba views that name no stream
(:func:`pbsolver.backends.cuda.device.numba_view`), made at each launch. "kept views":
:func:`~pbsolver.backends.cuda.device.launch_on_legacy_stream`, the views made once and looked
up at each launch. "views made once": the same views held by the caller, as the CUDA backend
keeps its own. For each, ``--launches`` launches of a kernel that adds 1 to each of 8 arrays of
each size: the host's time per launch while enqueuing, and the wall time per launch until the
stream is idle. The modes run in one process, alternately, ``--rounds`` rounds; the table
shows each round. ``--profile N``: a cProfile of each mode first (N rows).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=300)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 4194304])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="cProfile: print N rows a mode")
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    import cupy as cp
    from numba import cuda

    from pbsolver.backends.cuda.device import launch_on_legacy_stream, numba_view

    @cuda.jit
    def add_one(a0, a1, a2, a3, a4, a5, a6, a7, n):
        i = cuda.grid(1)
        if i < n:
            a0[i] += 1.0
            a1[i] += 1.0
            a2[i] += 1.0
            a3[i] += 1.0
            a4[i] += 1.0
            a5[i] += 1.0
            a6[i] += 1.0
            a7[i] += 1.0

    threads = 256
    rows = []
    for n in args.sizes:
        arrays = [cp.zeros(n) for _ in range(8)]
        blocks = (n + threads - 1) // threads

        def direct(arrays=arrays, blocks=blocks, n=n):
            add_one[blocks, threads](*arrays, n)

        def new_views(arrays=arrays, blocks=blocks, n=n):
            add_one[blocks, threads, 0](*(numba_view(a, owner=a) for a in arrays), n)

        def kept_views(arrays=arrays, blocks=blocks, n=n):
            launch_on_legacy_stream(add_one, blocks, threads, *arrays, n)

        made = [numba_view(a) for a in arrays]

        def made_once(made=made, blocks=blocks, n=n):
            add_one[blocks, threads, 0](*made, n)

        modes = (("cupy", direct), ("new views", new_views), ("kept views", kept_views),
                 ("views made once", made_once))  # fmt: skip
        for _mode, fn in modes:  # compile, warm
            fn()
        cp.cuda.Device().synchronize()
        if args.profile:
            for mode, fn in modes:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.launches):
                    fn()
                prof.disable()
                cp.cuda.Device().synchronize()
                print(f"--- cProfile of {args.launches} launches, {mode}, size {n}")
                pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
        for r in range(args.rounds):
            for mode, fn in modes:
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                for _ in range(args.launches):
                    fn()
                t1 = time.perf_counter()
                cp.cuda.Device().synchronize()
                t2 = time.perf_counter()
                rows.append({
                    "size": n, "mode": mode, "round": r + 1,
                    "host_us_per_launch": round((t1 - t0) / args.launches * 1e6, 2),
                    "wall_us_per_launch": round((t2 - t0) / args.launches * 1e6, 2),
                })  # fmt: skip
        loops = args.rounds + (1 if args.profile else 0)
        expected = len(modes) * (1 + loops * args.launches)  # each launch adds 1
        got = [float(a[0]) for a in arrays]
        if got != [float(expected)] * 8:
            raise SystemExit(f"wrong sums {got}, expected {expected}")

    print("| size | mode | round | host µs a launch | wall µs a launch |")
    print("|---:|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['size']} | {row['mode']} | {row['round']} | {row['host_us_per_launch']} |"
              f" {row['wall_us_per_launch']} |")  # fmt: skip
    if args.json:
        from importlib.metadata import version

        meta = {p: version(p) for p in ("numba", "numba-cuda", "cupy-cuda13x", "numpy")}
        meta["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "launches": args.launches, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
