"""Where a batch's exact forces go on the stacked engine: each stage timed with the device idle.

A :class:`pbsolver.ReactionFieldCalculator` (``forces="exact"``, stacked engine) runs
``--warmup`` batches of ``--batch`` frames, then ``--batches`` more with each stage of the exact
forces wrapped: the device is synchronised before and after it, so a stage's time is its own
kernels and host work (cProfile would charge a kernel to whichever later call waits for it).
The stages are the engine's (the adjoint solve, the recorded SES and ion-accessible line ends,
the stack's ``Problem``) and the terms of :func:`pbsolver.forces.frames_forces_from_adjoint`;
the rest of ``compute_batch`` (maps, forward solve, sampling) is the row "energy frame".
Printed as milliseconds a frame; ``--json`` keeps them. Measurement only: the wrappers'
synchronisations make the whole slower than an unwrapped batch.

    python benchmarks/stacked_forces_stages.py --pqr data/1lpb_chainA.pqr --surface mol
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed or PYTHONPATH tree first
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trajectory import warm_exact_batches  # noqa: E402

import pbsolver as pb  # noqa: E402
import pbsolver.forces as forces  # noqa: E402
from pbsolver.forces import gradient  # noqa: E402
from pbsolver.md import ses as frame_ses  # noqa: E402
from pbsolver.md.engine import StackedFrames  # noqa: E402

#: (owner, attribute, stage name): the functions timed, where the callers look them up.
STAGES = (
    (StackedFrames, "solve_adjoint", "adjoint solve"),
    (StackedFrames, "ses_interval_ends", "SES line ends recorded"),
    # inside it (frame_ses.frame_line_ends' callbacks, wrapped in main): the two kernels (the
    # recorder runs only where the map did not record its lines, or a line outgrew the record)
    (None, "record", "  SES recorder kernel (a second pass over the lines)"),
    (None, "slopes", "  SES slope kernel"),
    (StackedFrames, "stack_problem", "stack's Problem"),
    (forces, "frames_forces_from_adjoint", "all force terms"),  # the calculator imports it
    (gradient, "face_sensitivities", "  ∂G/∂f sensitivities"),
    (gradient, "surface_gradient", "  dielectric term (line ends)"),
    (gradient, "kappa_sensitivity", "  ∂G/∂κ̄² sensitivities"),
    (gradient, "ionic_gradient", "  ionic term (the engine's column sums)"),
    (gradient, "coulomb_sensitivity", "  μ sensitivities"),
    (gradient, "frames_coulomb_gradient", "  φ_c term (radial sums)"),
    (gradient, "boundary_weights", "  ν weights"),
    (gradient, "frames_boundary_gradient", "  boundary term (mdh sums)"),
)
#: Parts of the energy frame, timed alike and printed under it (not subtracted from it): the SES
#: map, which on CUDA records its lines' ends as it cuts them for an exact frame.
ENERGY_PARTS = ((frame_ses.FrameSES, "run", "  of which the SES map (and its recording)"),)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pqr", default=str(pb.data.path("peptide.pqr")))
    p.add_argument("--surface", choices=["vdw", "mol", "smol"], default="mol")
    p.add_argument("--spacing", type=float, default=0.5)
    p.add_argument("--salt", type=float, default=0.15)
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args(argv)

    sync = _synchronizer(args.backend)
    atoms, calc, batches = warm_exact_batches(pb, args, args.batches)
    n = args.batch
    spent = defaultdict(float)
    for owner, name, stage in STAGES + ENERGY_PARTS:
        if owner is not None:
            setattr(owner, name, _timed(getattr(owner, name), stage, spent, sync))
    frame_ses.frame_line_ends = _split_line_ends(frame_ses.frame_line_ends, spent, sync)
    sync()
    t0 = time.perf_counter()
    for b in batches:
        calc.compute_batch(b)
    sync()
    whole = time.perf_counter() - t0
    per_frame = 1e3 / (n * args.batches)
    rows = {stage: spent[stage] * per_frame for _, _, stage in STAGES}
    rows["energy frame (maps, forward solve, sampling) and the rest"] = (
        whole - spent["adjoint solve"] - spent["SES line ends recorded"]
        - spent["stack's Problem"] - spent["all force terms"]
    ) * per_frame  # fmt: skip
    rows.update({stage: spent[stage] * per_frame for _, _, stage in ENERGY_PARTS})
    rows["whole exact frame (with the stages' synchronisations)"] = whole * per_frame
    print(f"{Path(args.pqr).name}: {len(atoms)} atoms, surface {args.surface}, backend "
          f"{args.backend}, {args.batches} batches of {n} frames; ms a frame")  # fmt: skip
    for stage, ms in rows.items():
        print(f"{stage:58s} {ms:8.3f}")
    if args.json:
        out = {"ms_a_frame": rows, "args": vars(args), "pbsolver": str(Path(pb.__file__).parent)}
        Path(args.json).write_text(json.dumps(out, indent=1))


def _timed(fn, stage, spent, sync):
    def wrapper(*a, **k):
        sync()
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            sync()
            spent[stage] += time.perf_counter() - t0

    return wrapper


def _split_line_ends(fn, spent, sync):
    """``frame_line_ends`` with its recorder and slope callbacks timed apart."""
    names = {name: stage for owner, name, stage in STAGES if owner is None}

    def wrapper(backend, nf, nu, nv, record, slopes, **kw):
        record = _timed(record, names["record"], spent, sync)
        slopes = _timed(slopes, names["slopes"], spent, sync)
        return fn(backend, nf, nu, nv, record, slopes, **kw)

    return wrapper


def _synchronizer(backend):
    if backend == "cpu":
        return lambda: None
    import cupy

    return cupy.cuda.Device().synchronize


if __name__ == "__main__":
    main()
