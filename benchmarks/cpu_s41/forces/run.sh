#!/usr/bin/env bash
# Issue 19's CPU ratio (exact forces / energies only; "mol", the peptide at 0.5 Å, 0.15 M, one
# frame a call, 12 frames after 2 of warm-up), this tree against the fortieth session's head
# (2620fea, exported to .gpu/base_cpu), alternating, three rounds each; both with the harness's
# default (each FrameResult kept without its φ_rf) and with --keep-results (every FrameResult
# kept whole, as the harness of sessions ≤ 40 did).
# Run from the checkout's root: bash benchmarks/cpu_s41/forces/run.sh
set -eu
D=benchmarks/cpu_s41/forces
BASE=$PWD/.gpu/base_cpu
rm -rf "$BASE" && mkdir -p "$BASE" && git archive 2620fea pbsolver | tar x -C "$BASE"
ln -s "$PWD/data" "$BASE/data"  # the example data the harness names
(cd / && PYTHONPATH=$BASE python -c "import pbsolver; assert pbsolver.__file__.startswith('$BASE')")
for r in 1 2 3; do
  for keep in "" "--keep-results"; do
    tag=${keep:+_keep}
    PYTHONPATH=$BASE python benchmarks/forces_cost.py --backend cpu --surface mol --frames 12 --pqr data/peptide.pqr \
      $keep --json $D/base${tag}_$r.json > $D/base${tag}_$r.log 2>&1
    python benchmarks/forces_cost.py --backend cpu --surface mol --frames 12 --pqr data/peptide.pqr \
      $keep --json $D/new${tag}_$r.json > $D/new${tag}_$r.log 2>&1
  done
done
sed -i "s#$PWD/##g" $D/*.json  # the trees' paths relative to the checkout
grep -H "exact / energy-only\|median of the frames" $D/*.log
