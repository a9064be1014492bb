"""One tree's time for an SES frame on the CPU, one by one (issue 17's CPU figure).

Colipase chain A (1,252 atoms, ``data/1lpb_chainA.pqr``) on 65³ at 0.8 Å, surface "mol" (or
``--surface``), ε 2/78.54, no salt, rtol 1e-6, the frames of ``benchmarks/trajectory.py``:
``ReactionFieldCalculator.compute`` of each frame (maps + solve + energy + field forces, warm
starts), the calculator's default engine on the CPU. Only the public API that both the commit
before the redesign and today's tree have is used, so the same script times both
(``PYTHONPATH=<tree>``, run alternately); today's calculator is given ``forces="field"``, the
only forces the old one had. Prints the median and each frame's seconds, and the first
frames' energies (the two trees must agree on them).

    PYTHONPATH=<tree> python benchmarks/ses_frame_cpu.py --label new --json new.json
    python benchmarks/ses_frame_cpu.py --table old.json new.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import frames_of  # noqa: E402


def measure(surface: str, frames: int) -> dict:
    """Seconds of each of ``frames`` frames after a first one (placement, compilation)."""
    import pbsolver as pb

    atoms = pb.read_pqr(DATA / "1lpb_chainA.pqr")
    options = dict(spacing=0.8, shape=(65, 65, 65), margin=4.0, surface=surface,
                   backend="cpu", rtol=1e-6)  # fmt: skip
    if "forces" in inspect.signature(pb.ReactionFieldCalculator).parameters:
        options["forces"] = "field"
    calc = pb.ReactionFieldCalculator(atoms, **options)
    todo = frames_of(atoms, frames + 1)
    calc.compute(todo[0])
    seconds, energies = [], []
    for f in todo[1:]:
        start = time.perf_counter()
        res = calc.compute(f)
        seconds.append(time.perf_counter() - start)
        energies.append(float(res.energy))
    return {"pbsolver": str(Path(pb.__file__).parent), "surface": surface,
            "median_s": statistics.median(seconds), "seconds": seconds,
            "energies": energies}  # fmt: skip


def table(paths) -> None:
    """Median seconds of each JSON, and each one's speed over the first."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    base = runs[0]["median_s"]
    print("| run | surface | median s a frame | × the first | first energies (kJ/mol) |")
    print("|---|---|---:|---:|---|")
    for r in runs:
        e = ", ".join(f"{v:.3f}" for v in r["energies"][:3])
        print(f"| {r['label']} | {r['surface']} | {r['median_s']:.3f} | "
              f"{base / r['median_s']:.2f} | {e} |")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="tree")
    ap.add_argument("--surface", default="mol")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--table", nargs="+", default=None, help="print the table of these JSONs")
    args = ap.parse_args(argv)
    if args.table:
        table(args.table)
        return 0
    out = {"label": args.label, **measure(args.surface, args.frames)}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
