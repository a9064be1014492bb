"""The general maps' CUDA φ_c kernel, side by side: one thread a node against the tiled kernel.

:func:`pbsolver.molecule.maps.coulomb_potential` with the CUDA backend sums φ_c directly in
float64 (the CPU's 1e-12 agreement is kept). Until this kernel it ran one thread a node over
every atom read from global memory, with a float64 square root and a divide per pair. The
tiled kernel (:func:`pbsolver.backends.cuda.coulomb_tiles.tiled_coulomb_kernel`, float64)
stages atoms in shared memory and gives each thread several nodes. Variants, timed with CUDA
events in one process over ``--reps`` launches after one warm-up launch each:

* ``node``: the previous kernel (one thread a node, the pair body with its on-node branch);
* ``tiled-divide-N``: tiled, ``1 / sqrt(r2)``, N nodes a thread;
* ``tiled-rsqrt-N``: tiled, libdevice's float64 ``rsqrt`` (the package's choice), N nodes;
* ``tiled-newton-N``: tiled, float32 ``rsqrtf`` refined by one float64 Newton step.

Every variant's map is compared with the ``node`` map (float64, the CPU's arithmetic):
largest difference over the largest |φ_c|. ``package`` is the whole
:func:`~pbsolver.backends.cuda.maps.device_coulomb_sum` (input copies, the tiled kernel and the
on-node pass). Pair terms a second count atoms × nodes.

    python benchmarks/coulomb_map_cuda.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after PYTHONPATH: a library chosen there wins

import pbsolver as pb  # noqa: E402
from pbsolver.molecule import maps  # noqa: E402

_ACTIN = ROOT / "benchmarks" / "apbs_inputs" / "actin-dimer"
CASES = {  # name: (PQR, spacing Å, shape or None: margin 8 Å)
    "colipase": (ROOT / "data" / "1lpb_chainA.pqr", 0.5, None),
    "actin-monomer": (_ACTIN / "mol1.pqr", 0.6, (161, 161, 161)),
    "actin-complex": (_ACTIN / "complex.pqr", 0.6, (161, 161, 161)),
}


def variants(nodes_list):
    """{name: (kernel, nodes)} of every variant but ``node``."""
    from numba import cuda
    from numba.cuda import libdevice

    from pbsolver.backends.cuda.coulomb_tiles import tiled_coulomb_kernel

    @cuda.jit(device=True)
    def divide(r2):
        return 1.0 / math.sqrt(r2)

    @cuda.jit(device=True)
    def newton(r2):
        # float32 estimate, one float64 Newton step: relative error ~1.5 ε32² ≈ 3e-14; the
        # clamp keeps rsqrtf(0) = inf out of the step (0 · inf), the on-node pass does ±inf
        r = max(r2, 1e-30)
        y = np.float64(libdevice.rsqrtf(np.float32(r)))
        return y + 0.5 * y * (1.0 - r * y * y)

    out = {}
    for n in nodes_list:
        out[f"tiled-rsqrt-{n}"] = (tiled_coulomb_kernel(np.float64, n, libdevice.rsqrt), n)
    out["tiled-divide-4"] = (tiled_coulomb_kernel(np.float64, 4, divide), 4)
    out["tiled-newton-4"] = (tiled_coulomb_kernel(np.float64, 4, newton), 4)
    return out


def node_kernel():
    """The previous kernel: one thread a node, the pair body over atoms in global memory."""
    from numba import cuda

    from pbsolver.backends.bodies import maps as B

    P = B.make_point_sums(cuda.jit(device=True), cuda.jit(device=True))
    coulomb_node, grid_point = P["coulomb_node"], P["grid_point"]

    @cuda.jit
    def kernel(out, origin, spacing, rel, q, scale, tol2):
        node = cuda.grid(1)
        nx, ny, nz = out.shape
        if node >= nx * ny * nz:
            return
        i, j, k, x, y, z = grid_point(node, ny, nz, origin, spacing)
        out[i, j, k] = scale * coulomb_node(rel, q, 0, x, y, z, None, tol2)

    return kernel


def timed(launch, reps):
    """Median ms of ``reps`` launches (CUDA events), after one warm-up launch."""
    import cupy as cp

    launch()
    cp.cuda.runtime.deviceSynchronize()
    times = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def run_case(name, reps, nodes_list):
    import cupy as cp

    from pbsolver.backends.bodies.maps import on_node_tol2
    from pbsolver.backends.cuda import maps as CM
    from pbsolver.backends.launch_sizes import THREADS

    pqr, spacing, shape = CASES[name]
    atoms = pb.read_pqr(pqr)
    keep = atoms.charges != 0
    pos, q = atoms.positions[keep], atoms.charges[keep]
    grid = maps.grid_for_atoms(atoms, spacing, shape=shape)
    nn = int(np.prod(grid.shape))
    scale = maps.COULOMB_KJ / 2.0
    origin, h = cp.asarray(grid.origin, float), cp.asarray(grid.spacing, float)
    d_pos, d_q = cp.asarray(pos), cp.asarray(q)
    rel = cp.asarray((pos - np.asarray(grid.origin))[None])
    rows = []

    ref = cp.empty(grid.shape)
    tol2 = on_node_tol2(grid.spacing)
    kern = node_kernel()
    ms = timed(lambda: kern[CM.blocks(nn), THREADS](ref, origin, h, d_pos[None], d_q, scale,
                                                    tol2), reps)  # fmt: skip
    ref_h = cp.asnumpy(ref)
    fin = np.isfinite(ref_h)
    top = float(np.abs(ref_h[fin]).max())
    rows.append({"variant": "node", "ms": ms, "max_diff_rel": 0.0})
    for vname, (k, n) in variants(nodes_list).items():
        out = cp.empty(grid.shape)
        ms = timed(lambda k=k, n=n, out=out: k[(CM.blocks(-(-nn // n)), 1), THREADS](
            out, rel, d_q, scale, *grid.shape, 0, h), reps)  # fmt: skip
        diff = np.abs(cp.asnumpy(out)[fin] - ref_h[fin]).max() / top
        rows.append({"variant": vname, "ms": ms, "max_diff_rel": float(diff)})
    # the package's whole call: input copies, tiled kernel, on-node pass (wall clock)
    CM.device_coulomb_sum(grid.shape, grid.origin, grid.spacing, pos, q, scale)
    cp.cuda.runtime.deviceSynchronize()
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = CM.device_coulomb_sum(grid.shape, grid.origin, grid.spacing, pos, q, scale)
        cp.cuda.runtime.deviceSynchronize()
        walls.append(1e3 * (time.perf_counter() - t0))
    out_h = cp.asnumpy(out)
    same_inf = bool(np.array_equal(np.isfinite(out_h), fin))
    diff = np.abs(out_h[fin] - ref_h[fin]).max() / top
    rows.append({"variant": "package", "ms": float(np.median(walls)),
                 "max_diff_rel": float(diff), "same_infinite_nodes": same_inf})  # fmt: skip
    for r in rows:
        r["gpairs_per_s"] = len(q) * nn / (r["ms"] * 1e-3) / 1e9
    return {"case": name, "atoms": int(len(q)), "shape": list(grid.shape),
            "spacing": spacing, "rows": rows}  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--nodes", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    report = {"device": props["name"].decode(), "cases": []}
    for name in args.cases:
        res = run_case(name, args.reps, args.nodes)
        report["cases"].append(res)
        print(f"\n{name}: {res['atoms']} charged atoms, grid {res['shape']} at {res['spacing']} Å")
        print(f"{'variant':18s} {'ms':>9s} {'Gpairs/s':>9s} {'max|Δ|/max|φ|':>14s}")
        for r in res["rows"]:
            print(f"{r['variant']:18s} {r['ms']:9.2f} {r['gpairs_per_s']:9.1f} "
                  f"{r['max_diff_rel']:14.2e}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
