"""SOR sweeps of the stacked frame engine against ω and storage precision (CPU, one by one).

The MD case of ``md_pipeline.py`` part 3 (colipase chain A, 65³ at 0.8 Å, vdW, rtol 1e-6):
sweeps of a cold first frame and of warm later frames, for the default ω (optimal for the
constant-coefficient Laplacian) and fixed ones, and for float32 storage with float64
refinement against float64 storage. Sweep counts do not depend on the machine.

    python benchmarks/stacked_sor_sweeps.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

from md_pipeline import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402


def sweeps(atoms, frames, **options):
    calc = pb.ReactionFieldCalculator(
        atoms, spacing=0.8, shape=(65, 65, 65), margin=4.0, surface="vdw", backend="cpu",
        engine="stacked", rtol=1e-6, **options,
    )  # fmt: skip
    return [calc.compute(f).iterations for f in frames]


def main():
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    frames = frames_of(atoms, 4)
    print("case                            sweeps: cold, then warm frames")
    for omega in (None, 1.85, 1.93, 1.95):
        label = "default ω" if omega is None else f"ω = {omega}"
        print(f"  {label:<30} {sweeps(atoms, frames, omega=omega)}", flush=True)
    for dtype in (np.float32, np.float64):
        print(f"  {np.dtype(dtype).name + ' storage':<30} {sweeps(atoms, frames, dtype=dtype)}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
