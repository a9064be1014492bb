"""cProfile of issue 17's CPU SES frame: seven frames of ``benchmarks/ses_frame_cpu.py``'s case.

Colipase on 65³ at 0.8 Å, "mol", rtol 1e-6, field forces, one frame a call, after two
unprofiled frames; functions by cumulative, then by internal time.

    python benchmarks/cpu_s35/ses_frame_profile.py [--top 30]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    atoms = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    calc = pb.ReactionFieldCalculator(atoms, spacing=0.8, shape=(65, 65, 65), margin=4.0,
                                      surface="mol", backend="cpu", rtol=1e-6,
                                      forces="field")  # fmt: skip
    frames = frames_of(atoms, 9)
    for f in frames[:2]:
        calc.compute(f)
    profile = cProfile.Profile()
    profile.enable()
    for f in frames[2:]:
        calc.compute(f)
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
