"""cProfile of pb.apbs.run on given inputs, after two warm-up runs each (one-off, s23).

Run from the project root on the GPU machine (see README.md beside this file). Reformatted for
ruff after the run; the statements are those that ran.
"""

import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import pbsolver as pb

root = Path.cwd()
for rel in sys.argv[1:]:
    path = root / rel
    os.chdir(path.parent)
    tmp = Path(tempfile.mkdtemp())
    for i in range(2):
        t = time.perf_counter()
        pb.apbs.run(path.name, backend="cuda", output_dir=tmp / f"w{i}")
        print(rel, "run", i, round(time.perf_counter() - t, 3))
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    pb.apbs.run(path.name, backend="cuda", output_dir=tmp / "p")
    pr.disable()
    print(rel, "profiled", round(time.perf_counter() - t, 3))
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(25)
    st.sort_stats("cumulative").print_stats(60)
    os.chdir(root)
