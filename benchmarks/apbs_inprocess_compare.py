"""Two ``apbs_inprocess.py`` JSONs of the same inputs side by side: before, after, APBS's time.

    python benchmarks/apbs_inprocess_compare.py BEFORE.json AFTER.json \
        [--apbs-json SUITE.json] [--at-least 20]

For each input: the fastest run after the first of each JSON (the work itself, as
``apbs_inprocess.py`` reports it), their ratio, and with ``--apbs-json`` APBS's CPU time over
each (the speed-up over APBS) and how many inputs reach ``--at-least`` times; the largest
relative difference between the two runs' PRINT values says whether the answers moved.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def fastest(entry):
    """The fastest run after the first (the first pays the compilation), or None."""
    runs = entry.get("seconds") or []
    return min(runs[1:]) if len(runs) > 1 else (runs[0] if runs else None)


def largest_change(a, b):
    """The largest relative difference of two lists of PRINT values (None where absent)."""
    pairs = [(x, y) for x, y in zip(a or [], b or [], strict=False) if None not in (x, y)]
    return max((abs(x - y) / max(abs(x), 1e-300) for x, y in pairs), default=0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--apbs-json", type=Path, default=None)
    ap.add_argument("--at-least", type=float, default=20.0)
    args = ap.parse_args(argv)
    before = {e["input"]: e for e in json.loads(args.before.read_text())["inputs"]}
    after = {e["input"]: e for e in json.loads(args.after.read_text())["inputs"]}
    apbs = {}
    if args.apbs_json:
        for e in json.loads(args.apbs_json.read_text())["inputs"]:
            if e.get("apbs", {}).get("rc") == 0:
                apbs[e["input"]] = e["apbs"]["seconds"]
    print("| input | before s | after s | before/after | APBS s | × APBS before | × APBS after "
          "| PRINT change |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    reached = [0, 0]
    for name in sorted(set(before) & set(after)):
        tb, ta = fastest(before[name]), fastest(after[name])
        if tb is None or ta is None:
            continue
        ref = apbs.get(name)
        ratios = ["–", "–"]
        if ref is not None:
            for k, t in enumerate((tb, ta)):
                ratios[k] = f"{ref / t:.1f}"
                reached[k] += ref / t >= args.at_least
        change = largest_change(before[name].get("prints"), after[name].get("prints"))
        print(f"| {name} | {tb:.3f} | {ta:.3f} | {tb / ta:.2f} | "
              f"{'–' if ref is None else f'{ref:.3f}'} | {ratios[0]} | {ratios[1]} | "
              f"{change:.1e} |")  # fmt: skip
    if apbs:
        timed = sum(1 for n in set(before) & set(after) if n in apbs)
        print(f"\n≥ {args.at_least:g}× APBS: {reached[0]} of {timed} before, {reached[1]} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
