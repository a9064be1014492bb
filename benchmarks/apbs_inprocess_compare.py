"""Two ``apbs_inprocess.py`` JSONs of the same inputs side by side: before, after, APBS's time.

    python benchmarks/apbs_inprocess_compare.py BEFORE.json AFTER.json \
        [BEFORE2.json AFTER2.json ...] [--apbs-json SUITE.json] [--at-least 20]

For each input: the fastest run after the first of each JSON (the work itself, as
``apbs_inprocess.py`` reports it), their ratio, and with ``--apbs-json`` APBS's CPU time over
each (the speed-up over APBS) and how many inputs reach ``--at-least`` times; the largest
relative difference between the two runs' PRINT values says whether the answers moved.
Several pairs (rounds of ``device_run.sh``'s ``ALT``, one process each): each round's time
before and after, and the ratios and speed-ups of the medians over the rounds; the PRINT
change is the largest of any run against the first "before".
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def fastest(entry):
    """The fastest run after the first (the first pays the compilation), or None."""
    runs = entry.get("seconds") or []
    return min(runs[1:]) if len(runs) > 1 else (runs[0] if runs else None)


def largest_change(a, b):
    """The largest relative difference of two lists of PRINT values (None where absent)."""
    pairs = [(x, y) for x, y in zip(a or [], b or [], strict=False) if None not in (x, y)]
    return max((abs(x - y) / max(abs(x), 1e-300) for x, y in pairs), default=0.0)


def load(path):
    return {e["input"]: e for e in json.loads(path.read_text())["inputs"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsons", type=Path, nargs="+", help="BEFORE AFTER, or pairs of them")
    ap.add_argument("--apbs-json", type=Path, default=None)
    ap.add_argument("--at-least", type=float, default=20.0)
    args = ap.parse_args(argv)
    if len(args.jsons) % 2:
        ap.error("give the JSONs in pairs: BEFORE AFTER [BEFORE AFTER ...]")
    rounds = [(load(b), load(a)) for b, a in zip(args.jsons[::2], args.jsons[1::2], strict=True)]
    apbs = {}
    if args.apbs_json:
        for e in json.loads(args.apbs_json.read_text())["inputs"]:
            if e.get("apbs", {}).get("rc") == 0:
                apbs[e["input"]] = e["apbs"]["seconds"]
    several = len(rounds) > 1
    if several:
        print(
            "| input | before s, each round | after s, each round | median before/after | "
            "APBS s | × APBS before (median) | × APBS after (median) | PRINT change |"
        )
    else:
        print("| input | before s | after s | before/after | APBS s | × APBS before "
              "| × APBS after | PRINT change |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    names = set.intersection(*(set(b) & set(a) for b, a in rounds))
    reached = [0, 0]
    for name in sorted(names):
        tb = [fastest(b[name]) for b, _ in rounds]
        ta = [fastest(a[name]) for _, a in rounds]
        if None in tb or None in ta:
            continue
        mb, ma = statistics.median(tb), statistics.median(ta)
        ref = apbs.get(name)
        ratios = ["–", "–"]
        if ref is not None:
            for k, t in enumerate((mb, ma)):
                ratios[k] = f"{ref / t:.1f}"
                reached[k] += ref / t >= args.at_least
        first = rounds[0][0][name].get("prints")
        change = max(largest_change(first, run[name].get("prints"))
                     for pair in rounds for run in pair)  # fmt: skip
        times = [", ".join(f"{t:.3f}" for t in ts) for ts in (tb, ta)]
        print(f"| {name} | {times[0]} | {times[1]} | {mb / ma:.2f} | "
              f"{'–' if ref is None else f'{ref:.3f}'} | {ratios[0]} | {ratios[1]} | "
              f"{change:.1e} |")  # fmt: skip
    if apbs:
        timed = sum(1 for n in names if n in apbs)
        what = " (medians)" if several else ""
        print(
            f"\n≥ {args.at_least:g}× APBS{what}: {reached[0]} of {timed} before, {reached[1]} after"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
