"""Where ``pbsolver apbs FILE.in`` spends its CPU time, from one cProfile run.

The stages of :func:`pbsolver.apbs.run`: maps (surface, κ̄², φ_c, boundary values), solves,
focusing values and energies.

Usage::

    python benchmarks/apbs_profile.py benchmarks/apbs_inputs/ion-protein/apbs-mol-pdiel2.in \
        [--json out.json] [--top 25]

The input runs in a temporary copy of its folder (``write`` files are dropped). Each stage is
the cumulative time of the function that does it (a function called inside another stage's is
counted in both only where the two nest, which none of the rows below do); "other" is the rest
of the run. Numba's compiled kernels come from its disk cache (run the input once before), so
compilation is not in the numbers. On a shared machine the seconds are rough; the shares are
what to read.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: (row, module file suffix, function name): the stages of a run, none inside another.
STAGES = (
    ("surface (ε faces)", "molecule/maps.py", "face_fractions"),
    ("ion accessibility (κ̄²)", "molecule/maps.py", "kappa2_map"),
    ("φ_c (Coulomb map)", "molecule/maps.py", "coulomb_potential"),
    ("boundary values (mdh/sdh)", "molecule/maps.py", "boundary_values"),
    ("focusing values", "molecule/focusing.py", "focus_values"),
    ("focusing values in the salt", "molecule/focusing.py", "screened_values"),
    ("solves (linear or Newton)", "solving/solver.py", "solve"),
    ("Coulomb pairs", "apbs/energy.py", "pair_terms"),
    ("energies at atoms (φ_rf)", "apbs/energy.py", "level_rf_terms"),
    ("ion terms (npbe)", "apbs/energy.py", "level_ion_terms"),
)


def profile_input(path: Path, backend: str = "cpu") -> tuple:
    """Run ``path`` under cProfile; returns (stats, wall seconds, ApbsRun)."""
    import pbsolver as pb

    with tempfile.TemporaryDirectory(prefix="apbs-profile-") as tmp:
        work = Path(tmp) / path.parent.name
        shutil.copytree(path.parent, work, ignore=shutil.ignore_patterns("*.dx", "*.gz"))
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        result = pb.apbs.run(work / path.name, backend=backend, output_dir=Path(tmp) / "out")
        prof.disable()
        wall = time.perf_counter() - t0
    return pstats.Stats(prof), wall, result


def stage_seconds(stats) -> dict:
    """Cumulative seconds of each of :data:`STAGES` in ``stats``."""
    out = {}
    for row, suffix, name in STAGES:
        total = 0.0
        for (file, _, func), (_, _, _, cum, _) in stats.stats.items():
            if func == name and file.replace("\\", "/").endswith(suffix):
                total += cum
        out[row] = total
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", type=Path, nargs="+")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--top", type=int, default=0, help="also print the top N functions")
    args = ap.parse_args(argv)
    rows = []
    for path in args.inputs:
        stats, wall, result = profile_input(path, args.backend)
        stages = stage_seconds(stats)
        stages["other (parsing, reading, checks, output)"] = wall - sum(stages.values())
        solves = [s for c in result.calculations for s in c.solves]
        rows.append(
            {
                "input": str(path),
                "wall_s": round(wall, 2),
                "stages_s": {k: round(v, 2) for k, v in stages.items()},
                "solves": [
                    {
                        "shape": list(s.phi_rf.shape),
                        "method": s.method,
                        "iterations": s.iterations,
                        "newton_steps": s.newton_steps,
                        "seconds": round(s.seconds, 2),
                    }
                    for s in solves
                ],  # fmt: skip
                "prints": [p.value for p in result.prints],
            }
        )
        print(f"{path}: {wall:.1f} s")
        for k, v in stages.items():
            print(f"  {k:45s} {v:8.2f} s {100 * v / wall:5.1f} %")
        nodes = sum(int(np.prod(s.phi_rf.shape)) for s in solves)
        print(f"  {len(solves)} solves, {nodes / 1e6:.1f} M nodes in all")
        if args.top:
            stats.sort_stats("cumulative").print_stats(args.top)
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
