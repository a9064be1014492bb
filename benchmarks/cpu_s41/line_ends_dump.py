"""Dump the CPU line-end slopes of a few exact-force frames, or compare two dumps.

Shows that a change to the line-end bodies keeps every end, atom and slope bit for bit: run
``dump`` with each tree (``PYTHONPATH=<tree>``), then ``compare``. The frames are the peptide's,
"mol" and "vdw", h 0.45 Å, 0.15 M, two frames each; every call of
:func:`pbsolver.backends.cpu.line_ends.interval_end_slopes` (the SES ends) and
:func:`~pbsolver.backends.cpu.line_ends.sphere_end_slopes` (the ion-accessible map's) is kept.

    PYTHONPATH=.gpu/base_cpu python benchmarks/cpu_s41/line_ends_dump.py dump old.pkl
    python benchmarks/cpu_s41/line_ends_dump.py dump new.pkl
    python benchmarks/cpu_s41/line_ends_dump.py compare old.pkl new.pkl
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trajectory import frames_of  # noqa: E402

NAMES = ("sphere_end_slopes", "interval_end_slopes")


def dump(path):
    import pbsolver as pb
    from pbsolver.backends.cpu import line_ends

    calls = []

    def recording(name, slopes):
        def recorded(*args, **kwargs):
            out = slopes(*args, **kwargs)
            calls.append((name, [np.array(a) for a in out]))
            return out

        return recorded

    for name in NAMES:  # the forces look these up on the module at each call
        setattr(line_ends, name, recording(name, getattr(line_ends, name)))
    atoms = pb.read_pqr(Path(__file__).resolve().parents[2] / "data" / "peptide.pqr")
    for surface in ("mol", "vdw"):
        calc = pb.ReactionFieldCalculator(atoms, forces="exact", spacing=0.45, surface=surface,
                                          ionic_strength=0.15, backend="cpu",
                                          margin=6.0)  # fmt: skip
        for positions in frames_of(atoms, 2, drift=0.005, wiggle=0.01):
            calc.compute(positions)
    Path(path).write_bytes(pickle.dumps(calls))
    print(f"{len(calls)} calls:", ", ".join(f"{n} ({len(r[0])} ends)" for n, r in calls))


def compare(old, new):
    a, b = (pickle.loads(Path(p).read_bytes()) for p in (old, new))
    if len(a) != len(b):
        print(f"different numbers of calls: {len(a)} and {len(b)}")
        return 1
    differ = 0
    for k, ((name, first), (_, second)) in enumerate(zip(a, b, strict=True)):
        for x, y in zip(first, second, strict=True):
            if x.shape != y.shape or not np.array_equal(x, y):
                differ += 1
                print(f"call {k} ({name}): an output differs ({x.shape} against {y.shape})")
    print(f"{len(a)} calls compared: {'identical' if not differ else f'{differ} outputs differ'}")
    return 1 if differ else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"] and len(sys.argv) == 3:
        dump(sys.argv[2])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        raise SystemExit(compare(sys.argv[2], sys.argv[3]))
    else:
        raise SystemExit(__doc__)
