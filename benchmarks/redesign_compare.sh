#!/usr/bin/env bash
# One GPU call: the commit before the redesign (a copy of its pbsolver/ in .gpu/old, made with
# `git archive <commit> pbsolver | tar -x -C .gpu/old`) and this tree, alternately, each in its
# own process, with benchmarks/redesign_compare.py; logs and JSON into $RESULTS (default $OUT).
# Usage (carry .whl and .gpu): bash benchmarks/redesign_compare.sh [rounds] [order]
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba-cache
R=${RESULTS:-$OUT}; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
PYTHONPATH=/tmp/site python3 -c "from importlib.metadata import version as v; print(*(f'{p} {v(p)}' for p in ('numba', 'numba-cuda', 'cupy-cuda13x', 'numpy')))" | tee -a "$R/device.txt"
rounds=${1:-1}
order=${2:-"old new"}
for r in $(seq "$rounds"); do
  for t in $order; do
    dir=$PWD; [ "$t" = old ] && dir=$PWD/.gpu/old
    PYTHONPATH=/tmp/site:$dir timeout "${LIMIT:-200}" python3 benchmarks/redesign_compare.py \
      --label "$t" --json "$R/${t}_$r.json" ${PARTS:+--parts $PARTS} 2>&1 | tee -a "$R/compare.log"
  done
done
python3 benchmarks/redesign_compare.py --table "$R"/*_*.json | tee "$R/table.md"
