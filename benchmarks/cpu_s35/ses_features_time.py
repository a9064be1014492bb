"""The SES features (free arcs of every circle) of colipase on the CPU: time and a digest.

``ses_features`` on the accessible spheres (radii + 1.4 Å) of ``data/1lpb_chainA.pqr``, the
median of ten calls after one untimed one, and a SHA-1 of every output array (two trees that
compute the same features print the same digest).

    PYTHONPATH=<tree> python benchmarks/cpu_s35/ses_features_time.py
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

import pbsolver as pb
from pbsolver.backends.cpu import maps as K

DATA = Path(__file__).resolve().parents[2] / "data"


def main() -> int:
    atoms = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    pos = np.ascontiguousarray(atoms.positions)
    rad = np.ascontiguousarray(atoms.radii + 1.4)
    nb = K.neighbour_lists(pos, rad)
    out = K.ses_features(pos, rad, *nb)
    seconds = []
    for _ in range(10):
        start = time.perf_counter()
        out = K.ses_features(pos, rad, *nb)
        seconds.append(time.perf_counter() - start)
    digest = hashlib.sha1(b"".join(np.ascontiguousarray(a).tobytes() for a in out)).hexdigest()
    print(f"{pb.__file__}: ses_features {np.median(seconds) * 1e3:.2f} ms, digest {digest[:12]}, "
          f"{len(out[2])} circles with free arcs, {len(out[5])} arcs")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
