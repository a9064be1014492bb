"""One-off: where an in-process `pb.apbs.run` of ion-pmf goes on the device (cProfile).

Run from the repository root: python3 benchmarks/h200_final/s24b/profile_ion_pmf.py OUT_FOLDER
(three warm-up runs, then one profiled run; the top functions by cumulative time).
"""

import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pbsolver as pb

src = Path("benchmarks/apbs_inputs/ion-pmf").resolve()
out = Path(sys.argv[1])


def once():
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "ion-pmf"
        shutil.copytree(src, work)
        here = os.getcwd()
        os.chdir(work)
        try:
            t0 = time.perf_counter()
            pb.apbs.run("ion-pmf.in", backend="cuda", out=io.StringIO())
            return time.perf_counter() - t0
        finally:
            os.chdir(here)


print([round(once(), 3) for _ in range(3)])
prof = cProfile.Profile()
prof.enable()
print(round(once(), 3))
prof.disable()
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
(out / "profile.txt").write_text(s.getvalue())
print(s.getvalue()[:6000])
