#!/usr/bin/env bash
# Issue 19's CPU cost, before (BASE: a worktree of be0c9fe) and after (this tree), alternated:
#   git worktree add ../pbsolver-base be0c9fe; BASE=$PWD/../pbsolver-base bash benchmarks/forces_cpu_s31/run.sh
set -eu
OUT=benchmarks/forces_cpu_s31
HERE=$PWD
for round in 1 2; do
  for surface in mol svdw; do
    for tree in base new; do
      dir=$HERE; [ "$tree" = base ] && dir=$BASE
      (cd "$dir" && PYTHONPATH=$dir python benchmarks/forces_cost.py --backend cpu --surface "$surface" \
        --frames 8 --json "$HERE/$OUT/${tree}_${surface}_$round.json") > "$OUT/${tree}_${surface}_$round.log" 2>&1
      tail -n 4 "$OUT/${tree}_${surface}_$round.log"
    done
  done
done
