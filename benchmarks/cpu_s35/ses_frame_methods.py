"""Issue 17's CPU SES frame with each solver method: the median seconds a frame of eight.

Colipase on 65³ at 0.8 Å, "mol", rtol 1e-6, field forces, one frame a call after one; for each
``method`` given, the median wall time, the iterations of the first four frames and the first
three energies.

    python benchmarks/cpu_s35/ses_frame_methods.py multigrid mgcg sor
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"


def main(methods) -> int:
    atoms = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    frames = frames_of(atoms, 9)
    for method in methods:
        calc = pb.ReactionFieldCalculator(atoms, spacing=0.8, shape=(65, 65, 65), margin=4.0,
                                          surface="mol", backend="cpu", rtol=1e-6,
                                          forces="field", method=method)  # fmt: skip
        calc.compute(frames[0])
        seconds, iterations, energies = [], [], []
        for f in frames[1:]:
            start = time.perf_counter()
            res = calc.compute(f)
            seconds.append(time.perf_counter() - start)
            iterations.append(res.iterations)
            energies.append(res.energy)
        first = ", ".join(f"{e:.4f}" for e in energies[:3])
        print(f"{method}: {statistics.median(seconds) * 1e3:.1f} ms a frame, iterations "
              f"{iterations[:4]}, energies {first}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:] or ["multigrid", "mgcg", "sor"]))
