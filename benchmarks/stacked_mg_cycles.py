"""Cycle counts of the frame engine's stacked multigrid against its SOR, on the CPU.

The solute, grid and frames of ``benchmarks/md_pipeline.py`` part 3 (colipase chain A, 1,252
atoms, 65³ at 0.8 Å, vdW surface, rtol 1e-6): one cold frame, then two warm batches of
``--batch`` frames, for SOR and for several multigrid cycles (shape, smoothing sweeps, smoother
ω). Iteration counts (SOR sweeps, multigrid cycles) do not depend on the machine; "fine work"
estimates each solve's cost in fine-grid sweeps: SOR one per sweep; a cycle ``pre + post``
smoothing sweeps plus about one for residual, transfers and the residual check, plus 14 % (V) or
30 % (F) for the coarse levels.

    python benchmarks/stacked_mg_cycles.py > benchmarks/stacked_mg_cycles.log
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import md_pipeline  # noqa: E402

import pbsolver as pb  # noqa: E402

CONFIGS = [  # (cycle, pre = post sweeps, ω)
    ("V", 1, 1.0),
    ("V", 2, 1.0),
    ("V", 2, 1.15),
    ("F", 2, 1.0),
    ("F", 2, 1.15),
    ("V", 3, 1.0),
    ("V", 3, 1.15),
    ("V", 4, 1.15),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    b = args.batch
    frames = md_pipeline.frames_of(atoms, 1 + 2 * b)
    common = dict(spacing=0.8, shape=(65, 65, 65), margin=4.0, surface="vdw", backend="cpu",
                  rtol=1e-6, engine="stacked", warm_start=True)  # fmt: skip
    print(f"colipase {len(atoms)} atoms, 65³ at 0.8 Å, vdW, rtol 1e-6, warm batches of {b}")
    print(f"{'solver':<24} {'cold':>5} {'warm batches':>14} {'fine work (warm)':>17} "
          f"{'max residual':>13} {'energy (last frame)':>20}")  # fmt: skip
    runs = [("sor", {})] + [
        (f"multigrid {c}({n},{n}) ω {w}",
         {"cycle": c, "presmooth": n, "postsmooth": n, "omega": w}) for c, n, w in CONFIGS
    ]  # fmt: skip
    for label, opts in runs:
        method = "sor" if label == "sor" else "multigrid"
        calc = pb.ReactionFieldCalculator(atoms, method=method, **common, **opts)
        first = calc.compute(frames[0])
        out = calc.compute_batch(frames[1 : 1 + b]) + calc.compute_batch(frames[1 + b :])
        warm = [out[0].iterations, out[b].iterations]
        if method == "sor":
            work = float(np.mean(warm))
        else:
            coarse = 1.30 if opts["cycle"] == "F" else 1.14
            work = float(np.mean(warm)) * (2 * opts["presmooth"] * coarse + 1.0)
        resid = max(fr.solve.residual_norms[-1] for fr in out)
        print(f"{label:<24} {first.iterations:>5} {str(warm):>14} {work:>17.1f} "
              f"{resid:>13.2e} {out[-1].energy:>20.6f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
