"""APBS input files through ``pb.apbs.run`` in one process: first and later runs, per input.

Usage::

    python benchmarks/apbs_inprocess.py FOLDER [--only GLOB...] [--skip GLOB...] [--backend cpu]
                                              [--runs 2] [--apbs-json SUITE.json]
                                              [--json out.json] [--markdown out.md]

``benchmarks/apbs_suite.py`` times each program as a user runs it, a new process an input, so
its pbsolver times include Python's start, the imports, loading numba's cached CPU kernels and,
on a GPU, compiling the CUDA kernels (numba-cuda does not cache them here). This script runs
every input ``--runs`` times inside one process (each in a fresh copy of its folder, writes
included): the first run pays what a new process pays for that input's kernels, the fastest
later run is the work itself, as in a notebook or a long-lived pipeline. With ``--apbs-json``
(a suite JSON of the same inputs) the table puts APBS's own times beside them.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from apbs_suite import machine, select_inputs  # noqa: E402


def run_input(path: Path, backend: str, runs: int) -> dict:
    """``runs`` in-process runs of one input, each in its own copy of the folder."""
    import pbsolver as pb

    entry = {"input": str(path), "seconds": [], "prints": None}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="apbs-inprocess-") as tmp:
            work = Path(tmp) / path.parent.name
            shutil.copytree(path.parent, work, ignore=shutil.ignore_patterns("*.dx", "*.gz"))
            here = os.getcwd()
            os.chdir(work)
            try:
                t0 = time.perf_counter()
                result = pb.apbs.run(path.name, backend=backend, output_dir=Path(tmp) / "out",
                                     out=io.StringIO())  # fmt: skip
                entry["seconds"].append(round(time.perf_counter() - t0, 3))
            except Exception as exc:  # a refused input: its one line, as the CLI prints it
                entry["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                return entry
            finally:
                os.chdir(here)
        entry["prints"] = [p.value for p in result.prints]
    return entry


def markdown(entries, apbs: dict) -> str:
    rows = [
        "| input | first run s | fastest later run s | APBS s (own process) | APBS / later run |",
        "|---|---:|---:|---:|---:|",
    ]
    for e in entries:
        if "error" in e:
            rows.append(f"| {e['input']} | refused: {e['error']} | | | |")
            continue
        first = e["seconds"][0]
        later = min(e["seconds"][1:]) if len(e["seconds"]) > 1 else None
        a = apbs.get(e["input"])
        ratio = f"{a / later:.2f}" if a is not None and later else "–"
        later_s = f"{later:.3f}" if later is not None else "–"
        a_s = f"{a:.3f}" if a is not None else "–"
        rows.append(f"| {e['input']} | {first:.3f} | {later_s} | {a_s} | {ratio} |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="folder searched for *.in files")
    ap.add_argument("--only", nargs="+", default=None, help="globs on the input's path")
    ap.add_argument("--skip", nargs="+", default=None, help="globs of inputs left out")
    ap.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--runs", type=int, default=2, help="runs of each input in this process")
    ap.add_argument("--apbs-json", type=Path, default=None,
                    help="apbs_suite.py JSON of the same inputs: APBS's times beside")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    args = ap.parse_args(argv)
    inputs = select_inputs(args.folder, args.only, args.skip)
    if not inputs:
        print(f"no *.in files under {args.folder}", file=sys.stderr)
        return 2
    apbs = {}
    if args.apbs_json:
        for e in json.loads(args.apbs_json.read_text())["inputs"]:
            if e.get("apbs", {}).get("rc") == 0:
                apbs[e["input"]] = e["apbs"]["seconds"]
    entries = []
    for path in inputs:
        entry = run_input(path.resolve(), args.backend, max(1, args.runs))
        entry["input"] = str(path.relative_to(args.folder))
        entries.append(entry)
        print(f"{entry['input']}: {entry.get('seconds')} {entry.get('error', '')}",
              file=sys.stderr, flush=True)  # fmt: skip
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "backend": args.backend,
        "runs": args.runs,
        "inputs": entries,
    }
    table = markdown(entries, apbs)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
