#!/usr/bin/env bash
# Issue 19's CPU cost, before (BASE: a worktree of 1f85541, the thirty-first session's head) and after (this tree), alternated:
#   git worktree add ../pbsolver-base 1f85541; BASE=$PWD/../pbsolver-base [ROUNDS=3] bash benchmarks/forces_cpu_s32/run.sh
set -eu
OUT=benchmarks/forces_cpu_s32
HERE=$PWD
for round in $(seq 1 "${ROUNDS:-2}"); do
  for surface in mol svdw; do
    for tree in base new; do
      dir=$HERE; [ "$tree" = base ] && dir=$BASE
      (cd "$dir" && PYTHONPATH=$dir python benchmarks/forces_cost.py --backend cpu --surface "$surface" \
        --frames 8 --json "$HERE/$OUT/${tree}_${surface}_$round.json") > "$OUT/${tree}_${surface}_$round.log" 2>&1
      tail -n 4 "$OUT/${tree}_${surface}_$round.log"
    done
  done
done
