#!/usr/bin/env bash
# Issue 19's CPU ratio (exact forces / energies only; "mol", the peptide at 0.5 Å, 0.15 M, one
# frame a call, 12 frames after 2 of warm-up, the harness's default), this tree against the
# fortieth session's head (2620fea, exported to .gpu/base_cpu), alternating, two rounds; then
# issue 17's SES frame (ses_frame_cpu.py) of this tree once.
# Run from the checkout's root: bash benchmarks/cpu_s42/forces/run.sh
set -eu
D=benchmarks/cpu_s42/forces
BASE=$PWD/.gpu/base_cpu
rm -rf "$BASE" && mkdir -p "$BASE" && git archive 2620fea pbsolver | tar x -C "$BASE"
ln -s "$PWD/data" "$BASE/data"  # the example data the harness names
for r in 1 2; do
  PYTHONPATH=$BASE python benchmarks/forces_cost.py --backend cpu --surface mol --frames 12 \
    --pqr data/peptide.pqr --json $D/base_$r.json > $D/base_$r.log 2>&1
  python benchmarks/forces_cost.py --backend cpu --surface mol --frames 12 \
    --pqr data/peptide.pqr --json $D/new_$r.json > $D/new_$r.log 2>&1
done
python benchmarks/ses_frame_cpu.py --label head --json $D/ses_frame.json > $D/ses_frame.log 2>&1
sed -i "s#$PWD/##g" $D/*.json $D/*.log  # the trees' paths relative to the checkout
grep -H "exact / energy-only\|median of the frames\|force terms" $D/*.log
grep -H "median_s" $D/ses_frame.json | head -c 300
