"""Cost of exact forces: a calculator frame with forces (−∂G/∂r) against one with energies only.

Two :class:`pbsolver.ReactionFieldCalculator` run the same trajectory (``trajectory.frames_of``:
a slow drift plus a per-atom wiggle) on ``--surface`` (default the smooth vdW surface "svdw";
general engine unless ``--energy-engine``/``--exact-engine`` say otherwise, warm starts): one
with ``forces="exact"`` (maps, solve, adjoint solve, the force terms), one with
``forces="field"`` (maps, solve, −q ∇φ_rf: what an energy-only frame costs). The first
``--warmup`` frames (compilation, cold starts) are left out of the medians. One frame a call,
the two calculators take turns frame by frame (a slow spell of the machine falls on both), and
the median of each frame's own exact / energy-only ratio is printed beside the ratio of the
medians; with ``--batch`` each runs its batches in turn. Each frame's result is kept without
its solve (φ_rf), as an MD pipeline keeps energies and forces only; ``--keep-results`` keeps it
whole.
Also times each force term once on the last frame (:func:`pbsolver.forces.solvation_forces`
parts), and checks that the two calculators report the same energies.

    python benchmarks/forces_cost.py --backend cpu
    python benchmarks/forces_cost.py --backend cuda --pqr data/1lpb_chainA.pqr --spacing 0.5 \
        --json benchmarks/forces_cost_h200.json
    python benchmarks/forces_cost.py --backend cuda --batch 32 --frames 64   # compute_batch
    python benchmarks/forces_cost.py --backend cuda --surface mol --batch 32 --frames 32 \
        --energy-engine auto --exact-engine auto   # both through the stacked engine
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from md_pipeline import device_info  # noqa: E402
from trajectory import frames_of  # noqa: E402

import pbsolver as pb  # noqa: E402
from pbsolver.molecule.maps import clear_kept_maps  # noqa: E402


def kept(fr, keep_results):
    """``fr`` as the harness keeps it: whole with ``keep_results``, else without its solve.

    A frame's :attr:`FrameResult.solve` holds its φ_rf (the whole grid). An MD pipeline (the
    OpenMM force, :class:`pbsolver.mdanalysis.ReactionField`) keeps energies and forces and
    lets the rest go; a harness that kept every frame's grid would make each later frame take
    fresh memory (page faults) that such a pipeline never pays.
    """
    return fr if keep_results else dataclasses.replace(fr, solve=None)


def run(calc, frames, warmup, batch=0, keep_results=False):
    """Per-frame wall times and timings of ``calc`` over ``frames`` (after ``warmup`` frames).

    ``batch`` > 0: the frames after the warm-up go through ``compute_batch`` in batches of that
    many; each frame's time is its batch's wall time over the batch size. The first batch is a
    warm-up too (left out): a stacked solve's first call of a batch size compiles and allocates
    what later calls of that size reuse (s12c's single timed batch carried it).
    """
    out = []
    if batch:
        calc.compute_batch(frames[:batch])
    for k, pos in enumerate(frames[:warmup] if batch else frames):
        start = time.perf_counter()
        fr = calc.compute(pos)
        seconds = time.perf_counter() - start
        if k >= warmup:
            out.append((seconds, kept(fr, keep_results)))
    if batch:
        rest = frames[warmup:]
        for k in range(0, len(rest) - batch + 1, batch):
            start = time.perf_counter()
            frs = calc.compute_batch(rest[k : k + batch])
            seconds = (time.perf_counter() - start) / batch
            out.extend((seconds, kept(fr, keep_results)) for fr in frs)
    return out


def run_alternating(calcs, frames, warmup, keep_results=False):
    """:func:`run` of each calculator in ``calcs`` one frame at a time, taking turns.

    Frame k of every calculator runs before frame k + 1 of any, so that a slow spell of the
    machine falls on all of them alike; returns one list of (seconds, frame) a calculator. The
    maps kept by their inputs' contents (SES geometry, φ_c, ion accessibility) are forgotten
    before each frame (untimed): the next calculator would otherwise get the same positions'
    maps from the one before it, which a calculator running alone never does.
    """
    out = [[] for _ in calcs]
    for k, pos in enumerate(frames):
        for rows, calc in zip(out, calcs, strict=True):
            clear_kept_maps()
            start = time.perf_counter()
            fr = calc.compute(pos)
            seconds = time.perf_counter() - start
            if k >= warmup:
                rows.append((seconds, kept(fr, keep_results)))
    return out


def term_times(calc, positions):
    """Seconds of each force term on one frame (the calculator's last problem and solution).

    On the GPU each term's time ends with a device synchronisation: its kernels run
    asynchronously, and without it a term's kernel time shows up in the next term's first wait.
    """
    from pbsolver.forces import adjoint, coulomb, dielectric, interpolation, ionic

    atoms = calc.atoms_at(positions)
    problem, phi = calc.problem, calc.phi_rf
    xp = problem.xp

    def now():
        if xp is not np:
            xp.cuda.Device().synchronize()
        return time.perf_counter()

    phi = xp.asarray(phi, dtype=xp.float64)
    times = {}
    t = now()
    spread = interpolation.interpolation_transpose(
        problem.grid, 0.5 * atoms.charges, atoms.positions, xp=xp
    )
    lam, res = adjoint.adjoint_solve(problem, spread, calc.solver)
    lam = xp.asarray(lam, dtype=xp.float64)
    times["adjoint solve (cold)"] = now() - t
    t = now()
    dielectric.dielectric_gradient(atoms, problem, phi, lam, calc.physics, box=calc.box)
    times["dielectric"] = now() - t
    if problem.kappa2 is not None:
        t = now()
        sens = ionic.kappa_sensitivity(problem, phi, lam)
        ionic.ionic_gradient(atoms, problem.grid, sens, calc.physics.kappa2,
                             calc.physics.ion_radius)  # fmt: skip
        times["ionic"] = now() - t
    t = now()
    mu = coulomb.coulomb_sensitivity(problem, lam)
    coulomb.coulomb_gradient(atoms, problem.grid, mu, problem.eps_cavity)
    times["coulomb"] = now() - t
    t = now()
    nu = coulomb.boundary_sensitivity(problem, lam, spread)
    coulomb.boundary_gradient(atoms, problem.grid, nu, calc.physics, calc.physics.boundary_kind)
    times["boundary"] = now() - t
    return times, res.iterations


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--pqr", default=str(pb.data.path("peptide.pqr")))
    p.add_argument("--spacing", type=float, default=0.5)
    p.add_argument("--salt", type=float, default=0.15)
    p.add_argument("--surface", choices=["svdw", "vdw", "mol", "smol"], default="svdw")
    p.add_argument("--maps-backend", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--batch",
        type=int,
        default=0,
        help="frames per compute_batch call (0: compute, one frame at a time)",
    )
    p.add_argument(
        "--energy-engine",
        choices=["general", "auto"],
        default="general",
        help="engine of the energy-only calculator (auto: the stacked engine where "
        "it applies, e.g. mol/smol/vdw on CUDA)",
    )
    p.add_argument(
        "--exact-engine",
        choices=["general", "auto", "stacked"],
        default="general",
        help="engine of the exact-forces calculator (auto: the stacked engine where it "
        "applies, e.g. mol/smol/vdw on CUDA; its force terms are then timed on a general "
        "calculator's problem of the last frame)",
    )
    p.add_argument("--rtol", type=float, default=1e-6)
    p.add_argument(
        "--adjoint-rtol",
        type=float,
        default=None,
        help="the exact calculator's adjoint_rtol (default: its own, 10 × rtol)",
    )
    p.add_argument(
        "--keep-results",
        action="store_true",
        help="keep every frame's whole FrameResult, φ_rf included (the harness of sessions "
        "≤ 40): later frames then take fresh memory",
    )
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    atoms = pb.read_pqr(args.pqr)
    frames = frames_of(atoms, args.frames + args.warmup, drift=0.005, wiggle=0.01)
    common = {
        "spacing": args.spacing, "surface": args.surface, "ionic_strength": args.salt,
        "backend": args.backend, "rtol": args.rtol, "margin": 8.0,
        "skin": 2.0, "map_options": {"maps_backend": args.maps_backend},
    }  # fmt: skip
    results = {}
    kinds = ("field", "exact")
    exact_only = {} if args.adjoint_rtol is None else {"adjoint_rtol": args.adjoint_rtol}
    calcs = [
        pb.ReactionFieldCalculator(atoms, forces=kind, engine=engine,
                                   **common, **(exact_only if kind == "exact" else {}))
        for kind, engine in zip(kinds, (args.energy_engine, args.exact_engine), strict=True)
    ]  # fmt: skip
    if args.batch:
        runs = [run(calc, frames, args.warmup, args.batch, args.keep_results) for calc in calcs]
    else:  # one frame a call: the two calculators take turns, frame by frame
        runs = run_alternating(calcs, frames, args.warmup, args.keep_results)
    for kind, calc, rows in zip(kinds, calcs, runs, strict=True):
        results[kind] = {
            "seconds": float(np.median([s for s, _ in rows])),
            "solve": float(np.median([fr.timings["solve"] for _, fr in rows])),
            "maps": float(np.median([fr.timings["maps"] for _, fr in rows])),
            "forces": float(np.median([fr.timings.get("forces", 0.0) for _, fr in rows])),
            "adjoint": float(np.median([fr.timings.get("adjoint", 0.0) for _, fr in rows])),
            "iterations": float(np.median([fr.iterations for _, fr in rows])),
            "energies": [fr.energy for _, fr in rows],
            "grid": list(rows[-1][1].grid.shape),
            "engine": calc.engine,
            "adjoint_rtol": calc.adjoint_rtol if kind == "exact" else None,
        }
        if kind == "exact":
            if calc.problem is None:  # the stacked engine keeps no problem: a general one's
                calc = pb.ReactionFieldCalculator(atoms, forces=kind, engine="general", **common,
                                                  **exact_only)  # fmt: skip
                calc.compute(frames[-1])
            results["terms"], results["adjoint_cold_iterations"] = term_times(calc, frames[-1])
    e_field, e_exact = (np.array(results[k]["energies"]) for k in ("field", "exact"))
    ratio = results["exact"]["seconds"] / results["field"]["seconds"]
    # one frame a call: also the median of each frame's own ratio (the two ran back to back)
    frame_ratio = None
    if not args.batch:
        frame_ratio = float(np.median([e[0] / f[0] for f, e in zip(*runs, strict=True)]))
    where = (f"surface {args.surface}, h {args.spacing} Å, {args.salt} M, backend "
             f"{args.backend} (maps {args.maps_backend}), rtol {args.rtol:g} (adjoint "
             f"{calcs[1].adjoint_rtol:g}), "
             f"{f'batches of {args.batch}' if args.batch else 'one frame a call'}, "
             f"{'results kept' if args.keep_results else 'results without φ_rf'}")  # fmt: skip
    print(f"{Path(args.pqr).name}: {len(atoms)} atoms, grid {results['exact']['grid']}, {where}")
    print("| frame | engine | seconds | maps | solve | forces | of which adjoint |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("field", "exact"):
        r = results[kind]
        print(f"| {kind} | {r['engine']} | {r['seconds']:.4f} | {r['maps']:.4f} | "
              f"{r['solve']:.4f} | {r['forces']:.4f} | {r['adjoint']:.4f} |")  # fmt: skip
    print(f"exact / energy-only: {ratio:.2f}x; energies agree to "
          f"{np.abs(e_exact / e_field - 1).max():.1e}")  # fmt: skip
    if frame_ratio is not None:
        print(f"median of the frames' own ratios (the calculators alternating): "
              f"{frame_ratio:.2f}x")  # fmt: skip
    print("force terms on one frame (s):",
          ", ".join(f"{k} {v:.3f}" for k, v in results["terms"].items()))  # fmt: skip
    if args.json:
        results["ratio"] = ratio
        results["pbsolver"] = str(Path(pb.__file__).parent)  # which tree ran
        results["frame_ratio"] = frame_ratio
        results["args"] = vars(args)
        results["device"] = device_info(args.backend)
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
