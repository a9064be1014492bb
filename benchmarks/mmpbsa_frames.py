r"""MM/PBSA frames per second where MDAnalysis is missing (the GPU machine): issue 22.

``pbsolver mmpbsa`` reads trajectories through MDAnalysis, which has compiled extensions and
so cannot travel to a machine without a network as a pure wheel. This benchmark splits the
run in two:

* ``export`` (where MDAnalysis is installed) reads the shipped FKBP–DSS trajectory as
  ``pbsolver mmpbsa`` does (:func:`pbsolver.jobs.mmpbsa.load`), and writes the complex's
  charges and radii, every frame's positions, the selections and the grid shape that
  ``benchmarks/mmpbsa_apbs.py`` gives both programs into one ``.npz`` file.
* ``run`` reads that file and times what ``pbsolver mmpbsa`` does per batch after the
  reading: :func:`pbsolver.binding_energies` with the job's own keywords
  (:meth:`pbsolver.jobs.mmpbsa.MMPBSAOptions.binding_kwargs`; SES, 0.5 Å, ε 2 / 78.54, no
  salt, rtol 1e-6), batch after batch (one warm-up batch first, which compiles). It leaves out
  the trajectory reading and the HDF5 part files, which ``mmpbsa_apbs.py`` times with the rest.

Both print and store ΔG_polar of the first frames, to compare with ``mmpbsa_apbs.py``'s
figures of the same frames.

    python benchmarks/mmpbsa_frames.py export .gpu/fkbp_frames.npz
    python3 benchmarks/mmpbsa_frames.py run .gpu/fkbp_frames.npz --backend cuda \
        --copies 8 --batch 32 --json gpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

import pbsolver as pb

HERE = Path(__file__).resolve().parent
TOPOLOGY = HERE.parent / "data" / "fkbp_dss.pqr"
TRAJECTORY = HERE.parent / "data" / "fkbp_dss.dcd"
LIGAND = "resname DSS"


def export(path: Path, spacing: float, margin: float) -> None:
    """Write the complex, the frames, the selections and the grid shape to ``path``."""
    from pbsolver.jobs import mmpbsa as job

    sys.path.insert(0, str(HERE))
    from apbs import apbs_dime

    system = job.load(job.Inputs(str(TOPOLOGY), (str(TRAJECTORY),), ligand=LIGAND))
    frames = list(range(system.n_frames))
    positions = system.positions(frames)
    shape = job.frames_shape(system.atoms, positions, system.union, spacing, margin)
    shape = tuple(apbs_dime(s) for s in shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        path, charges=system.atoms.charges, radii=system.atoms.radii, positions=positions,
        ligand=system.ligand, receptor=system.receptor, shape=np.asarray(shape),
        spacing=spacing, margin=margin,
    )  # fmt: skip
    print(f"{path}: {len(frames)} frames of {positions.shape[1]} atoms, grid {shape}")


def run(args) -> dict:
    """Time :func:`pbsolver.binding_energies` over the exported frames; the report."""
    from pbsolver.jobs.mmpbsa import MMPBSAOptions
    from pbsolver.molecule.binding import binding_energies

    data = np.load(args.npz)
    positions = np.concatenate([data["positions"][: args.frames]] * args.copies)
    atoms = pb.Atoms(positions[0], data["charges"], data["radii"])
    shape = tuple(int(s) for s in data["shape"])
    opts = MMPBSAOptions(
        spacing=float(data["spacing"]), margin=float(data["margin"]), backend=args.backend,
        maps_backend=args.maps_backend or args.backend, surface="mol",
    )  # fmt: skip
    kwargs = opts.binding_kwargs()

    def batch(frames):
        return binding_energies(atoms, frames, data["ligand"], data["receptor"], shape=shape,
                                chunk=len(frames), **kwargs)  # fmt: skip

    t0 = time.perf_counter()
    batch(positions[: args.batch])  # compiles; on CUDA builds the engines' graphs
    warm = time.perf_counter() - t0
    n = len(positions)
    results = []
    t0 = time.perf_counter()
    for s in range(0, n, args.batch):
        results += batch(positions[s : s + args.batch])
    seconds = time.perf_counter() - t0
    if args.profile:  # one more batch under cProfile: where a batch's time goes
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(batch, positions[: args.batch])
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
    if args.cuda_profile:  # one more batch between cudaProfilerStart/Stop, for ncu
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.runtime.profilerStart()
        t1 = time.perf_counter()
        batch(positions[: args.batch])
        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.runtime.profilerStop()
        print(f"profiled batch: {time.perf_counter() - t1:.3f} s wall")
    polar = [r.delta_polar for r in results]
    solves = results[0].solves
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "pbsolver_version": pb.__version__,
        "command": "python benchmarks/mmpbsa_frames.py " + " ".join(sys.argv[1:]),
        "backend": args.backend,
        "maps_backend": args.maps_backend or args.backend,
        "engine": solves[0]["engine"],
        "solves_first_frame": [dict(v) for v in solves],
        "shape": list(shape),
        "atoms": int(len(atoms)),
        "frames": n,
        "batch": args.batch,
        "warmup_seconds": warm,
        "seconds": seconds,
        "frames_per_second": n / seconds,
        "seconds_per_frame": seconds / n,
        "delta_polar_first": polar[: min(8, n)],
        "delta_polar_spread_of_copies": float(
            np.max(np.abs(np.asarray(polar).reshape(args.copies, -1) - polar[: n // args.copies]))
        ),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    ex = sub.add_parser("export", help="frames → .npz (needs MDAnalysis)")
    ex.add_argument("out", type=Path)
    ex.add_argument("--spacing", type=float, default=0.5, help="Å")
    ex.add_argument("--margin", type=float, default=8.0, help="Å")
    rn = sub.add_parser("run", help="time binding_energies over an exported .npz")
    rn.add_argument("npz", type=Path)
    rn.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    rn.add_argument("--maps-backend", default=None, choices=("cpu", "cuda", "auto"))
    rn.add_argument("--frames", type=int, default=None, help="the first N frames (default: all)")
    rn.add_argument("--copies", type=int, default=1, help="repeat the frames K times")
    rn.add_argument("--batch", type=int, default=16, help="frames per binding_energies call")
    rn.add_argument("--json", type=Path, default=None)
    rn.add_argument("--profile", type=int, default=0,
                    help="then profile one batch; print this many functions")  # fmt: skip
    rn.add_argument("--cuda-profile", action="store_true",
                    help="then run one batch between cudaProfilerStart and cudaProfilerStop "
                    "(ncu --profile-from-start off times its kernels)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.what == "run" and args.cuda_profile and args.backend == "cpu":
        ap.error("--cuda-profile profiles CUDA kernels: it needs --backend cuda")
    if args.what == "export":
        export(args.out, args.spacing, args.margin)
        return 0
    report = run(args)
    print(json.dumps({k: v for k, v in report.items() if k != "delta_polar_first"}, indent=1))
    print(
        "ΔG_polar of the first frames:", ", ".join(f"{v:.4f}" for v in report["delta_polar_first"])
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
