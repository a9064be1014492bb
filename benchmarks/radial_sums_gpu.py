"""The forces' φ_c and "mdh" radial sums on a GPU: seconds a call of the installed library's kernel.

``coulomb_sums`` and ``debye_huckel_sums`` of :mod:`pbsolver.backends.cuda.forces` over
``--nodes`` random nodes in a box the size of colipase's grid and ``--centres`` atoms near its
middle, on CuPy arrays; each call ends with a device synchronisation, the median of
``--repeat`` calls after one warm-up counts. Run it with ``PYTHONPATH`` naming each tree to
compare kernels side by side; the JSON records the library's path and the sums themselves'
largest difference from a float64 reference on a subset of the centres.

    python benchmarks/radial_sums_gpu.py --json radial.json
    PYTHONPATH=/tmp/site:$OLD python benchmarks/radial_sums_gpu.py --json radial_old.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from refgeom import radial_sums  # noqa: E402

import pbsolver  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1_500_000)
    p.add_argument("--centres", type=int, default=1252)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--check", type=int, default=16, help="centres checked against float64")
    p.add_argument("--json")
    args = p.parse_args(argv)

    import cupy as cp

    from pbsolver.backends.cuda import forces

    rng = np.random.default_rng(3)
    points = rng.uniform(0.0, 64.0, (3, args.nodes))
    weights = rng.normal(size=args.nodes)
    centres = 32.0 + rng.uniform(-14.0, 14.0, (args.centres, 3))
    radii = rng.uniform(1.0, 2.0, args.centres)
    dev = [cp.asarray(a) for a in (points, weights, centres, radii)]
    calls = {
        "coulomb": lambda: forces.coulomb_sums(dev[0], dev[1], dev[2]),
        "mdh": lambda: forces.debye_huckel_sums(
            dev[0], dev[1], dev[2], dev[3], 0.125, 78.54, 2.0
        ),  # fmt: skip
    }
    out = {"library": str(Path(pbsolver.__file__).parent), "nodes": args.nodes,
           "centres": args.centres, "device": cp.cuda.runtime.getDeviceProperties(0)["name"]
           .decode()}  # fmt: skip
    for name, call in calls.items():
        got = cp.asnumpy(call())
        cp.cuda.Device().synchronize()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            call()
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
        k = slice(0, args.check)
        options = {} if name == "coulomb" else {"radii": radii[k], "kappa": 0.125,
                                                "eps_out": 78.54, "inv_c": 0.5}  # fmt: skip
        want = radial_sums(points, weights, centres[k], **options)
        err = float((np.abs(got[k] - want).max(axis=1) / np.abs(want).max(axis=1)).max())
        out[name] = {"seconds": statistics.median(times), "max_rel_err": err}
        ms = statistics.median(times) * 1e3
        print(f"{name}: {ms:.3f} ms a call (median of {args.repeat}); largest relative error "
              f"of {args.check} centres {err:.2e}")  # fmt: skip
    print(f"library {out['library']}, {out['device']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
