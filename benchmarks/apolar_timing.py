"""Time APBS's APOLAR terms (``pbsolver.molecule.apolar.apolar_terms``) on two molecules.

ion-pmf's two ions as the APBS example sets them (grid 0.1 Å, sdens 100, bconc 0.033), the
shipped colipase (1,252 atoms; grid 0.5 Å, sdens 10, ε 0.4 kJ/mol for every atom), and colipase
with the volume term alone (press 0.0226): energy alone, then energy and forces; the best of
``--repeat`` calls after one warm-up call.

    python benchmarks/apolar_timing.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import pbsolver as pb
from pbsolver.molecule.apolar import ApolarParameters, apolar_terms

WATER = {"water_radius": 1.7683, "water_epsilon": 0.6364}


def cases():
    ions = (np.array([[-3.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), np.array([2.0, 2.0]), np.full(2, 0.5),
            ApolarParameters(gamma=0.00072, bconc=0.033, srad=1.4, sdens=100.0, dpos=0.2,
                             grid=(0.1,) * 3, **WATER))  # fmt: skip
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))
    protein = (atoms.positions, atoms.radii, np.full(len(atoms), 0.4),
               ApolarParameters(gamma=0.0226, bconc=0.033, srad=1.4, sdens=10.0, dpos=0.2,
                                grid=(0.5,) * 3, **WATER))  # fmt: skip
    volume = (
        atoms.positions,
        atoms.radii,
        None,
        ApolarParameters(press=0.0226, srad=1.4, sdens=10.0, dpos=0.2, grid=(0.5,) * 3),
    )
    return {"ion-pmf": ions, "colipase": protein, "colipase press only": volume}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    out = {}
    for name, (pos, rad, eps, params) in cases().items():
        for forces in (False, True):
            apolar_terms(pos, rad, eps, params, forces=forces)
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                res = apolar_terms(pos, rad, eps, params, forces=forces)
                times.append(time.perf_counter() - t0)
            key = f"{name} {'energy+forces' if forces else 'energy'}"
            out[key] = {"seconds": min(times), "energy": res.energy, "wca": res.wca[:2].tolist()}
            print(f"{key}: {min(times):.3f} s, W = {res.energy:.12g} kJ/mol", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
