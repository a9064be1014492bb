#!/usr/bin/env bash
# Issue 19's CPU ratio with the adjoint at 10 × rtol (the default) and at rtol, alternating,
# two rounds each ("mol", the peptide at 0.5 Å, one frame a call, 12 frames after 2 of warm-up).
# Run from the checkout's root: bash benchmarks/cpu_s40/forces/run.sh
set -eu
D=benchmarks/cpu_s40/forces
for r in 1 2; do
  python benchmarks/forces_cost.py --backend cpu --surface mol --frames 12 --adjoint-rtol 1e-6 \
    --json $D/adj6_mol_$r.json > $D/adj6_mol_$r.log 2>&1
  python benchmarks/forces_cost.py --backend cpu --surface mol --frames 12 \
    --json $D/adj5_mol_$r.json > $D/adj5_mol_$r.log 2>&1
done
