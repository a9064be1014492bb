"""Times of three CPU kernels of the exact forces, on whichever pbsolver tree is imported.

* μ = ∂G/∂φ_c (:func:`pbsolver.backends.cpu.forces.coulomb_sensitivity`) on a random grid of
  the peptide's shape (81×97×81, float64 λ, float32 faces and κ̄²);
* the "mdh" radial sums of the boundary term
  (:func:`pbsolver.backends.cpu.forces.debye_huckel_sums`, 44,000 points, 149 centres) and
  the Coulomb sums over the same points;
* the vectorisable exponentials :func:`pbsolver.backends.cpu.fast_math.exp32` / ``exp64`` in a
  loop over 10⁶ arguments.

Each figure is the median of ``--repeat`` calls after one untimed call (compilation, first
touch of the outputs). Compare trees side by side in one session:

    PYTHONPATH=<old tree> python benchmarks/force_kernels_cpu.py
    python benchmarks/force_kernels_cpu.py
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit

import pbsolver
from pbsolver.backends.cpu import forces
from pbsolver.backends.cpu.fast_math import exp32, exp64


@njit(cache=True)
def _exp32_loop(x, out):
    for i in range(x.shape[0]):
        out[i] = exp32(x[i])


@njit(cache=True)
def _exp64_loop(x, out):
    for i in range(x.shape[0]):
        out[i] = exp64(x[i])


def median_ms(fn, repeat):
    """Median wall time of ``fn()`` in ms over ``repeat`` calls, after one untimed call."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)

    shape = (81, 97, 81)
    lam = rng.normal(size=shape)
    faces = [rng.uniform(2.0, 80.0, shape).astype(np.float32) for _ in range(3)]
    kappa2 = rng.uniform(0.0, 0.1, shape).astype(np.float32)
    spacing = (0.5, 0.5, 0.5)

    points = rng.uniform(-20.0, 20.0, (3, 44_000))
    weights = rng.normal(size=points.shape[1])
    centres = rng.uniform(-5.0, 5.0, (149, 3))
    radii = rng.uniform(1.0, 2.0, len(centres))

    x32 = rng.uniform(-80.0, 80.0, 1_000_000).astype(np.float32)
    x64 = rng.uniform(-700.0, 700.0, 1_000_000)
    out32, out64 = np.empty_like(x32), np.empty_like(x64)

    rows = {
        "coulomb_sensitivity 81x97x81": lambda: forces.coulomb_sensitivity(
            lam, faces, kappa2, 2.0, spacing
        ),
        "mdh radial sums 44k x 149": lambda: forces.debye_huckel_sums(
            points, weights, centres, radii, 0.12, 78.54, 2.0
        ),
        "coulomb radial sums 44k x 149": lambda: forces.coulomb_sums(points, weights, centres),
        "exp32 loop 1e6": lambda: _exp32_loop(x32, out32),
        "exp64 loop 1e6": lambda: _exp64_loop(x64, out64),
    }
    print(f"pbsolver {pbsolver.__version__} from {Path(pbsolver.__file__).parent.parent.name}/; "
          f"numba {numba.__version__}, {numba.get_num_threads()} threads")  # fmt: skip
    for name, fn in rows.items():
        print(f"{name}: {median_ms(fn, args.repeat):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
