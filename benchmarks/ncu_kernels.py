r"""Device time per kernel from an Nsight Compute report: where a GPU run's time goes.

Reads the CSV that ``ncu --import REPORT.ncu-rep --csv --page raw --metrics
gpu__time_duration.sum`` prints (one row per kernel launch, a units row under the header),
groups the launches by kernel (numba's mangled names shortened to their dotted path), and prints
launches, total and mean device time and share of the sum, largest first. ncu runs the kernels
one at a time, so the sum is the device's busy time with no overlap between streams; compare it
with the same region's wall time measured without ncu.

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
        --export prof python3 benchmarks/mmpbsa_frames.py run frames.npz --backend cuda \
        --frames 32 --batch 32 --cuda-profile
    ncu --import prof.ncu-rep --csv --page raw --metrics gpu__time_duration.sum > prof.csv
    python benchmarks/ncu_kernels.py prof.csv --top 40 --json prof.json
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

_UNITS_TO_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
                "s": 1e9, "second": 1e9}  # fmt: skip


def short_name(name: str) -> str:
    """A kernel's name without its argument list and numba's hash."""
    m = re.match(r"_ZN(.*)", name)
    if not m:  # demangled by ncu: numba's "[abi:vN,<hash>]" shortened to its version "[vN]"
        return re.sub(r"\[abi:(v\d+),[^\]]*\]", r"[\1]", name.split("(")[0])
    rest, parts = m.group(1), []
    while rest and rest[0].isdigit():
        digits = re.match(r"\d+", rest).group(0)
        n = int(digits)
        parts.append(rest[len(digits) : len(digits) + n])
        rest = rest[len(digits) + n :]
    # numba: cudapy.<module path>.<function>$<n>; drop the prefix and the specialisation count
    parts = [p for p in parts if p not in ("cudapy",)]
    return ".".join(parts).replace("_3clocals_3e", "<locals>").split("$")[0] or name


def read_rows(path: Path) -> list[tuple[str, float]]:
    """(kernel, nanoseconds) for every launch in ncu's raw CSV page."""
    text = path.read_text(errors="replace").splitlines()
    start = next((i for i, ln in enumerate(text) if ln.startswith('"ID"')), None)
    if start is None:
        raise SystemExit(f'{path}: no ncu CSV header (a line starting with "ID")')
    reader = csv.reader(text[start:])
    header = next(reader)
    units = next(reader)
    k_name = header.index("Kernel Name")
    k_time = header.index("gpu__time_duration.sum")
    scale = _UNITS_TO_NS.get(units[k_time].strip(), None)
    if scale is None:
        raise SystemExit(f"{path}: unknown unit {units[k_time]!r} for gpu__time_duration.sum")
    rows = []
    for row in reader:
        if len(row) <= max(k_name, k_time) or not row[k_time].strip():
            continue
        rows.append((short_name(row[k_name]), float(row[k_time].replace(",", "")) * scale))
    return rows


def summarise(rows) -> list[dict]:
    """Launches, total and mean device time and share per kernel, largest total first."""
    total = sum(t for _, t in rows) or 1.0
    groups = defaultdict(list)
    for name, t in rows:
        groups[name].append(t)
    out = [
        {"kernel": k, "launches": len(v), "total_ms": sum(v) / 1e6,
         "mean_us": sum(v) / len(v) / 1e3, "share": sum(v) / total}
        for k, v in groups.items()
    ]  # fmt: skip
    return sorted(out, key=lambda r: -r["total_ms"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = read_rows(args.csv)
    table = summarise(rows)
    total_ms = sum(r["total_ms"] for r in table)
    print(f"{len(rows)} launches, {len(table)} kernels, {total_ms:.2f} ms of device time")
    print(f"{'kernel':<70} {'launches':>8} {'total ms':>9} {'mean µs':>9} {'share':>6}")
    for r in table[: args.top]:
        print(f"{r['kernel'][:70]:<70} {r['launches']:>8} {r['total_ms']:>9.3f} "
              f"{r['mean_us']:>9.1f} {100 * r['share']:>5.1f}%")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps({"launches": len(rows), "total_ms": total_ms,
                                         "kernels": table}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
