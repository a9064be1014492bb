"""The stacked frame engine on the SES ("mol") and smoothed SES ("smol") surfaces.

Its batched SES (pbsolver.md.ses) against the general map builder (face_fractions) and the
brute-force classifier of tests/refgeom.py, its energies against the general path on the same
grid, its CUDA kernels against its CPU ones under the simulator, and on a GPU.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import refgeom as R

import pbsolver as pb
from pbsolver.md.engine import StackedFrames
from pbsolver.molecule import maps
from pbsolver.molecule.build import build_problem
from pbsolver.molecule.energy import sample_field


def _shell_solute(seed, n_free=10):
    """A closed shell of atoms around a probe-sized cavity, plus loose atoms outside it.

    The shell's spheres overlap so that no probe passes between them; its inside is a buried
    cavity a probe fits in (solvent for the SES: every accessible probe counts).
    """
    rng = np.random.default_rng(seed)
    k = np.arange(40) + 0.5
    theta, phi = np.arccos(1 - 2 * k / 40), np.pi * (1 + 5**0.5) * k
    shell = 5.0 * np.stack([np.cos(phi) * np.sin(theta), np.sin(phi) * np.sin(theta),
                            np.cos(theta)], axis=1)  # fmt: skip
    loose = rng.normal(0.0, 1.0, (n_free, 3))
    loose = loose / np.linalg.norm(loose, axis=1)[:, None] * rng.uniform(6.5, 8.0, (n_free, 1))
    pos = np.concatenate([shell, loose]) + rng.uniform(-0.2, 0.2, 3)
    radii = np.concatenate([np.full(40, 1.8), rng.uniform(1.1, 2.0, n_free)])
    q = rng.uniform(-0.8, 0.8, len(pos))
    return pb.Atoms(pos, q, radii), rng


def _on_nodes(atoms, grid, which, rng):
    """``atoms`` with the atoms ``which`` moved onto the nearest grid node (or 1e-9 Å off it)."""
    pos = atoms.positions.copy()
    o, h = np.asarray(grid.origin), np.asarray(grid.spacing)
    node = o + np.rint((pos[which] - o) / h) * h
    pos[which] = node + rng.choice([0.0, 1e-9], (len(which), 3))
    return pb.Atoms(pos, atoms.charges, atoms.radii)


def _engine_fractions(eng, nf):
    """Each frame's (fx, fy, fz) from the engine's buffers after a run of ``nf`` frames."""
    buf, nx = eng._buffers[nf], eng.grid.shape[0]
    return [
        [a[f * eng.stride : f * eng.stride + nx] for a in (buf.fx, buf.fy, buf.fz)]
        for f in range(nf)
    ]


@pytest.mark.parametrize("surface", ["mol", "smol"])
def test_engine_fractions_equal_face_fractions_and_brute_force(surface):
    atoms, rng = _shell_solute(1)
    grid = maps.grid_for_atoms(atoms, 0.7, margin=2.5, nice=False)
    frames = [_on_nodes(atoms, grid, [3, 17, 41], rng)]
    frames.append(pb.Atoms(atoms.positions + rng.normal(0.0, 0.15, atoms.positions.shape),
                           atoms.charges, atoms.radii))  # fmt: skip
    solver = pb.Solver(backend="cpu", rtol=1e-6)
    eng = StackedFrames(atoms.charges, atoms.radii, grid.shape, grid.spacing, solver,
                        surface=surface, eps_in=2.0)  # fmt: skip
    origins = np.repeat(np.asarray(grid.origin)[None], 2, axis=0)
    eng.run(np.stack([a.positions for a in frames]), origins)
    got = _engine_fractions(eng, 2)
    for f, a in enumerate(frames):
        ref = maps.face_fractions(a, grid, surface)
        vdw = maps.face_fractions(a, grid, "vdw")
        for axis in range(3):
            np.testing.assert_allclose(got[f][axis], ref[axis], rtol=0, atol=1e-6)
            assert np.any(got[f][axis] > vdw[axis] + 0.1)  # reentrant solute exists
    # the buried cavity is solvent: its centre's edges are all outside the solute
    c = np.rint((atoms.positions[:40].mean(axis=0) - grid.origin) / grid.spacing).astype(int)
    assert got[1][0][tuple(c)] == 0.0
    if surface == "mol":  # a sample of edges near the surface against the point classifier
        a, mol = frames[1], got[1]
        for axis in range(3):
            zone = np.argwhere((mol[axis] > 0) & (mol[axis] < 1))
            sel = zone[rng.choice(len(zone), size=min(12, len(zone)), replace=False)]
            ref = R.ses_edge_fractions(a.positions, a.radii, 1.4, grid, axis, sel, samples=250)
            assert np.abs(mol[axis][tuple(sel.T)] - ref).max() < 0.01  # midpoint rule: 1/250


def test_lines_cut_into_pieces_write_the_whole_lines_edges():
    """A line classified in pieces of its edges (the GPU's work items) gives the whole line's.

    Every piece samples the whole line's reentrant zones at the same points and writes only
    its own edges; pieces of 1–5 edges cut through zones, runs and bisection intervals.
    """
    from pbsolver.backends import get_backend
    from pbsolver.md.ses import FrameSES

    atoms, rng = _shell_solute(3)
    grid = maps.grid_for_atoms(atoms, 0.7, margin=2.5, nice=False)
    pos = np.stack([atoms.positions, atoms.positions + rng.normal(0.0, 0.15, (len(atoms), 3))])
    origin = np.repeat(np.asarray(grid.origin)[None], 2, axis=0)
    nx, ny, nz = grid.shape
    stride = nx + nx % 2
    be = get_backend("cpu")
    out = {}

    def shuffled(cost, *args):  # a random order of the lines, as CUDA's sorted one
        cost[:] = rng.integers(-1, 50, cost.shape[0])

    for pieces, order in ((1, False), (3, False), (grid.shape[0], False), (1, True), (3, True)):
        ses = FrameSES(be, atoms.radii, 1.4, grid.shape, grid.spacing)
        cut = {"pieces": lambda n, lines, k=pieces: k, "line_costs": shuffled}
        ses.kernels = SimpleNamespace(**{**vars(ses.kernels), **cut})
        ses.order_lines = order
        out[pieces, order] = [np.zeros((2 * stride, ny, nz)) for _ in range(3)]
        ses.run(out[pieces, order], pos, origin, stride)
    whole = out[1, False]
    assert np.any((whole[0] > 0) & (whole[0] < 1))
    for a, b in zip(whole, out[1, True], strict=True):  # the order changes nothing
        np.testing.assert_array_equal(b, a)
    for key in ((3, False), (grid.shape[0], False), (3, True)):
        for a, b in zip(whole, out[key], strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-9)


def _check_part_of(be, atoms, removed, grid, nframes=2, seed=0, **ses_options):
    """FrameSES of ``atoms`` less ``removed`` from the whole's fractions equals its own.

    The whole's fractions are handed over marked (+0.5): a kept line keeps the mark, a
    recomputed one does not. Every line where the part's surface differs from the whole's must
    be recomputed; returns (lines kept, lines recomputed) along x over the frames.
    """
    from pbsolver.md.ses import FrameSES

    rng = np.random.default_rng(seed)
    keep = np.setdiff1d(np.arange(len(atoms)), removed)
    pos = np.stack([atoms.positions + rng.normal(0.0, 0.1, atoms.positions.shape)
                    for _ in range(nframes)])  # fmt: skip
    origin = np.repeat(np.asarray(grid.origin)[None], nframes, axis=0)
    nx, ny, nz = grid.shape
    stride = nx + nx % 2
    big = (nframes * stride, ny, nz)

    def fractions(idx, part_of=None):
        ses = FrameSES(be, atoms.radii[idx], 1.4, grid.shape, grid.spacing, **ses_options)
        out = [np.zeros(big) for _ in range(3)]
        ses.run(out, np.ascontiguousarray(pos[:, idx]), origin, stride, part_of)
        return out

    whole = fractions(np.arange(len(atoms)))
    own = fractions(keep)
    marked = [w + 0.5 for w in whole]
    part = fractions(keep, ([m.copy() for m in marked], pos[:, removed], atoms.radii[removed]))
    changed = 0
    for w, o, m, p in zip(whole, own, marked, part, strict=True):
        recomputed = p == o
        np.testing.assert_array_equal(np.where(recomputed, o, m), p)  # each value one or other
        assert np.all(recomputed[w != o])  # every line the ligand changed was recomputed
        changed += int(np.count_nonzero(w != o))
    assert changed > 0  # the removed atoms changed the surface
    kept = redone = 0
    for f in range(nframes):  # whole lines along x
        rows = slice(f * stride, f * stride + nx)
        kept += int(np.count_nonzero(np.all(part[0][rows] != own[0][rows], axis=0)))
        redone += int(np.count_nonzero(np.all(part[0][rows] == own[0][rows], axis=0)))
    return kept, redone


def test_frame_ses_of_a_part_reuses_the_whole_away_from_the_removed_atoms():
    from pbsolver.backends import get_backend

    atoms, rng = _shell_solute(4, n_free=14)
    removed = np.arange(40, 44)  # four loose atoms on one side
    grid = maps.grid_for_atoms(atoms, 0.6, margin=3.0, nice=False)
    kept, redone = _check_part_of(get_backend("cpu"), atoms, removed, grid)
    assert kept > 0 and redone > 0


def _general(atoms, grid, surface, salt, kind):
    """Energy and potentials of the general path (build_problem + float64 SOR) on ``grid``."""
    p = build_problem(atoms, grid, eps_in=2.0, eps_out=78.54, ionic_strength=salt,
                      surface=surface, boundary_kind=kind)  # fmt: skip
    res = pb.Solver(method="sor", backend="cpu", rtol=1e-9, dtype=np.float64).solve(p)
    v, _ = sample_field(grid, res.phi_rf, atoms.positions)
    return 0.5 * float(np.dot(atoms.charges, v)), v


@pytest.mark.parametrize(("surface", "salt", "kind"), [("mol", 0.1, "mdh"), ("smol", 0.0, "zero")])
def test_calculator_batches_on_the_stacked_engine_equal_the_general_path(surface, salt, kind):
    atoms, rng = _shell_solute(2, n_free=6)
    calc = pb.ReactionFieldCalculator(
        atoms, spacing=0.8, eps_in=2.0, ionic_strength=salt, surface=surface, backend="cpu",
        engine="stacked", margin=2.5, skin=0.5, rtol=1e-9, dtype=np.float64,
        map_options={"boundary_kind": kind},
    )  # fmt: skip
    assert calc.engine == "stacked"
    frames = [atoms.positions + rng.normal(0.0, 0.1, atoms.positions.shape) for _ in range(2)]
    out = calc.compute_batch(frames)
    one = calc.compute(frames[0])  # one by one through the same engine
    for fr, pos in zip([*out, one], [*frames, frames[0]], strict=True):
        assert fr.converged and fr.solve.extra["engine"] == "stacked"
        e, v = _general(pb.Atoms(pos, atoms.charges, atoms.radii), fr.grid, surface, salt, kind)
        assert abs(fr.energy / e - 1) < 1e-6
        np.testing.assert_allclose(fr.potentials, v, rtol=0, atol=1e-5 * np.abs(v).max())


def test_zero_probe_and_refusals():
    atoms, _ = _shell_solute(3, n_free=3)
    grid = maps.grid_for_atoms(atoms, 0.9, margin=2.0, nice=False)
    solver = pb.Solver(backend="cpu", rtol=1e-6)
    eng = StackedFrames(atoms.charges, atoms.radii, grid.shape, grid.spacing, solver,
                        surface="mol", probe_radius=0.0)  # fmt: skip
    assert eng._ses is None  # a point probe: the union of spheres, as the general path
    eng.run(atoms.positions[None], np.asarray(grid.origin)[None])
    ref = maps.face_fractions(atoms, grid, "mol", 0.0)
    for got, want in zip(_engine_fractions(eng, 1)[0], ref, strict=True):
        np.testing.assert_allclose(np.clip(got, 0, 1), want, rtol=0, atol=1e-12)
    assert not eng.sweeps_probe
    assert len(eng.edge_fractions(1)) == 3
    with pytest.raises(pb.InputError, match="not mapped 2 frame"):
        eng.edge_fractions(2)  # no call of two frames: nothing a part could reuse
    with pytest.raises(pb.InputError, match="surfaces"):
        StackedFrames([1.0], [1.0], (9, 9, 9), 0.5, solver, surface="svdw")
    with pytest.raises(pb.InputError, match="ses_step"):
        StackedFrames([1.0], [1.0], (9, 9, 9), 0.5, solver, surface="mol", ses_step=0.0)
    with pytest.raises(pb.InputError, match="surfaces 'vdw', 'mol' and 'smol'"):
        pb.ReactionFieldCalculator(atoms, surface="svdw", backend="cpu", engine="stacked",
                                   forces="field")  # fmt: skip


# ---------------------------------------------------------------------- CUDA kernels
class _SimBackend:
    """The engine's backend verbs on NumPy arrays with the CUDA kernels (the simulator)."""

    flags = True

    def array_module(self):
        return np

    def frame_kernels(self):
        from pbsolver.backends.frame_kernels import cuda_kernels

        return cuda_kernels()

    def launch_items(self, kernel, items, *args, threads=None, groups=None):
        from pbsolver.backends.frame_kernels import THREADS, blocks

        kernel[blocks(items, threads or THREADS), threads or THREADS](*args)

    def to_host(self, a):
        return a

    def stream_context(self):
        return contextlib.nullcontext()


@pytest.mark.cudasim
def test_cuda_ses_kernels_equal_the_cpu_ones_under_the_simulator():
    pytest.importorskip("numba.cuda")
    name = "test_cuda_ses_kernels_equal_the_cpu_ones_under_the_simulator"
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        # numba reads the switch once, at import: run this test again in a simulator process
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{name}"],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-3000:]
        return
    from pbsolver.backends import get_backend
    from pbsolver.md.line_ends import GROWTH_SLACK, record_capacity
    from pbsolver.md.ses import FrameSES

    rng = np.random.default_rng(5)
    # five atoms in a ring (reentrant zones, circles with free arcs, a three-atom probe spot)
    ang = np.linspace(0.0, 2 * np.pi, 5, endpoint=False)
    base = np.stack([2.2 * np.cos(ang), 2.2 * np.sin(ang), 0.3 * np.sin(2 * ang)], axis=1)
    radii = rng.uniform(1.3, 1.7, 5)
    grid = pb.Grid((12, 11, 9), spacing=(0.8, 0.85, 0.9), origin=(-4.4, -4.2, -3.6))
    pos = np.stack([base, base + rng.normal(0.0, 0.2, base.shape)])
    origin = np.repeat(np.asarray(grid.origin)[None], 2, axis=0)
    nx, ny, nz = grid.shape
    stride = nx + nx % 2
    big = (2 * stride, ny, nz)
    out = {}
    for name, be in (("cpu", get_backend("cpu")), ("cuda", _SimBackend())):
        ses = FrameSES(be, radii, 1.4, grid.shape, grid.spacing, ses_step=0.3, nbisect=10)
        raw = [np.zeros(big) for _ in range(3)]
        ses.run(raw, pos, origin, stride)
        smooth = [np.zeros(big) for _ in range(3)]
        be.launch_items(be.frame_kernels().ses.smooth, 2 * stride * ny * nz, *raw, *smooth, 2,
                        nx, ny, nz, stride)  # fmt: skip
        out[name] = raw + smooth
    for a, b in zip(out["cpu"], out["cuda"], strict=True):
        np.testing.assert_array_equal(b, a)
    assert FrameSES(_SimBackend(), radii, 1.4, grid.shape, grid.spacing).order_lines
    # the CUDA kernels' lines in their natural order give the same (the run above sorted them)
    ses = FrameSES(_SimBackend(), radii, 1.4, grid.shape, grid.spacing, ses_step=0.3, nbisect=10,
                   order_lines=False)  # fmt: skip
    raw = [np.zeros(big) for _ in range(3)]
    ses.run(raw, pos, origin, stride)
    for a, b in zip(out["cuda"][:3], raw, strict=True):
        np.testing.assert_array_equal(b, a)
    # lines cut into pieces (one thread each, as on a GPU for long lines) write the same edges
    ses = FrameSES(_SimBackend(), radii, 1.4, grid.shape, grid.spacing, ses_step=0.3, nbisect=10)
    ses.kernels = SimpleNamespace(**{**vars(ses.kernels), "pieces": lambda nbins, lines: 4})
    raw = [np.zeros(big) for _ in range(3)]
    ses.run(raw, pos, origin, stride)
    for a, b in zip(out["cpu"][:3], raw, strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-9)
    # a part of the ring from the whole's fractions (the kernels' line flags)
    ring = pb.Atoms(np.vstack([base, base[:2] * 1.6]), np.zeros(7), np.r_[radii, 1.2, 1.5])
    _check_part_of(_SimBackend(), ring, np.array([5, 6]), grid, ses_step=0.3, nbisect=10)
    # and both are the general builder's (same sampling step and bisections)
    for f in range(2):
        atoms = pb.Atoms(pos[f], np.zeros(5), radii)
        for k, surface in ((0, "mol"), (3, "smol")):
            ref = maps.face_fractions(atoms, grid, surface, ses_step=0.3, nbisect=10)
            for axis in range(3):
                got = out["cuda"][k + axis][f * stride : f * stride + nx]
                np.testing.assert_allclose(got, ref[axis], rtol=0, atol=1e-6)
                assert got.max() == 1.0
    # the forces' interval ends of both frames, recorded by the frame kernels in one launch an
    # axis (whole lines, and lines in four pieces joined), against each frame's own CPU ends
    cpu_ses = FrameSES(get_backend("cpu"), radii, 1.4, grid.shape, grid.spacing)
    assert cpu_ses.interval_ends() is None  # no recorder: the forces record each frame
    # (the map's own pass records them as it cuts them with ``record``: the same fractions and
    # ends, and no second pass, unless a line outgrew the record's room: room −16 leaves none)
    for pieces, record, room in ((None, False, None), (4, False, None), (None, True, None),
                                 (4, True, None), (4, True, -16)):  # fmt: skip
        ses = FrameSES(_SimBackend(), radii, 1.4, grid.shape, grid.spacing, ses_step=0.3,
                       nbisect=10)  # fmt: skip
        recorder = _CountedKernel(ses.kernels.record_ends.record)
        R = SimpleNamespace(**{**vars(ses.kernels.record_ends), "record": recorder})
        ses.kernels = SimpleNamespace(**{**vars(ses.kernels), "record_ends": R})
        if pieces:
            ses.kernels.pieces = lambda n, lines, p=pieces: p
        if room is not None:
            ses._room = [room] * 3
        fractions = [np.zeros(big) for _ in range(3)]
        ses.run(fractions, pos, origin, stride, record=record)
        for a, b in zip(out["cpu"][:3], fractions, strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-9 if pieces else 0)
        ends = ses.interval_ends()
        assert recorder.launches == (0 if record and room is None else 3)
        if room is not None:  # the lines outgrew the room: recorded again with room for the
            # most any piece had and GROWTH_SLACK more, which the next maps' records keep
            for axis, rec in enumerate(recorder.firsts):
                fullest = int(np.asarray(rec)[:, :, :, 0, 0].max())
                assert rec.shape[3] - 1 == fullest + GROWTH_SLACK
                assert record_capacity(ses._room[axis], pieces) == rec.shape[3] - 1
        if record and room is None:  # the map's record is used once; asked again, recorded again
            again = ses.interval_ends()
            assert recorder.launches == 3
            for axis in range(3):
                for a, b in zip(ends[axis][:4], again[axis][:4], strict=True):
                    np.testing.assert_array_equal(b, a)
        crossings = 0
        for axis in range(3):
            refs = [_cpu_interval_ends(pos[f], radii, 1.4, grid, axis, 0.3, 10) for f in range(2)]
            assert ends[axis][4] == refs[0][4] + refs[1][4]  # unmatched
        for f in range(2):
            for axis in range(3):
                ref = _cpu_interval_ends(pos[f], radii, 1.4, grid, axis, 0.3, 10)
                got = _frame_ends(ends[axis], f, axis, stride, nx, 5)
                a, b = _canonical(ref), _canonical(got)
                for x, y in zip(a[:3], b[:3], strict=True):
                    np.testing.assert_array_equal(y, x)
                np.testing.assert_allclose(b[3], a[3], rtol=0, atol=1e-12)
                crossings += int((got[2][:, 1] >= 0).sum())
        assert crossings > 3  # reentrant crossings among the ends, not only vdW chord ends
        # the SES force term from these ends is each frame's own
        from pbsolver.forces.ses import ses_gradient

        for f in range(2):
            sens = [rng.normal(size=grid.shape) for _ in range(3)]
            args = (pos[f], radii, np.arange(5), 1.4, grid, sens, 5)
            want = ses_gradient(*args, ses_step=0.3, nbisect=10)
            mine = [(*_frame_ends(ends[axis], f, axis, stride, nx, 5), 0) for axis in range(3)]
            got = ses_gradient(*args, ses_step=0.3, nbisect=10, ends=mine)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
            assert np.abs(want).max() > 0
    # the ion-accessible lines' chord ends of both frames (κ̄²'s force term), summed by the
    # engine's column kernel in one launch, against each frame's own recorded CPU ends
    from pbsolver.backends.frame_kernels import LINE_THREADS
    from pbsolver.forces.gradient import stacked_atoms
    from pbsolver.forces.ionic import ionic_gradient

    ion = radii + 2.0
    sens = rng.normal(size=big)
    grad, bad = np.zeros((10, 3)), np.zeros(1, dtype=np.int64)

    def sums(sensitivity):
        _SimBackend().launch_items(_SimBackend().frame_kernels().ion_end_sums, 2 * nx * ny, grad,
                                   sensitivity, pos, ion, nx, ny, nz, stride, origin,
                                   np.asarray(grid.spacing), 2, bad,
                                   threads=LINE_THREADS)  # fmt: skip
        return grad

    both = stacked_atoms(pb.Atoms(pos[0], np.zeros(5), radii), pos)
    got = ionic_gradient(both, grid, sens, 0.8, 2.0, subsamples=2, ends=sums)
    assert bad[0] == 0
    for f in range(2):
        atoms = pb.Atoms(pos[f], np.zeros(5), radii)
        want = ionic_gradient(atoms, grid, sens[f * stride : f * stride + nx], 0.8, 2.0,
                              subsamples=2)  # fmt: skip
        assert np.abs(want).max() > 0
        np.testing.assert_allclose(got[5 * f : 5 * f + 5], want, rtol=1e-12,
                                   atol=1e-12 * np.abs(want).max())  # fmt: skip


class _CountedKernel:
    """A kernel whose launches (``kernel[blocks, threads](…)``) are counted."""

    def __init__(self, kernel):
        self.kernel, self.launches, self.firsts = kernel, 0, []

    def __getitem__(self, config):
        self.launches += 1
        launch = self.kernel[config]

        def call(*args):
            self.firsts.append(args[0])  # the launch's first array (a recorder's: its record)
            return launch(*args)

        return call


def _frame_ends(stacked, f, axis, stride, nx, n):
    """Frame f's own ends (its grid's indices, its atoms) from a set of ends on a stack.

    The engine's ends move frame f's x indices (the bins along x, else the lines' first index)
    by f·stride and its atoms by f·n.
    """
    lines, bins, atoms, slopes = (np.array(a) for a in stacked[:4])
    x = bins if axis == 0 else lines[:, 0]
    keep = (x >= f * stride) & (x < f * stride + nx)
    lines, bins, atoms, slopes = lines[keep], bins[keep], atoms[keep], slopes[keep]
    if axis == 0:
        bins -= f * stride
    else:
        lines[:, 0] -= f * stride
    assert ((atoms < 0) | ((atoms >= f * n) & (atoms < (f + 1) * n))).all()
    return lines, bins, np.where(atoms >= 0, atoms - f * n, -1), slopes


def _canonical(ends):
    """(lines, bins, atoms, slopes) in one order (the GPU records lines in pieces)."""
    lines, bins, atoms, slopes = ends[:4]
    keys = [lines[:, 0], lines[:, 1], bins, *atoms.T, *slopes.reshape(len(bins), -1).T]
    order = np.lexsort(keys[::-1])
    return [a[order] for a in ends[:4]]


def _cpu_interval_ends(positions, radii, probe, grid, axis, ses_step, nbisect):
    """One frame's SES interval ends along ``axis`` from the CPU kernels (as the forces take
    them, :func:`pbsolver.forces.ses.ses_gradient`)."""
    from pbsolver.backends.cpu import line_ends

    pos = np.ascontiguousarray(positions, dtype=np.float64)
    acc = radii + probe
    nb, features, exposed = maps.ses_geometry(maps.map_backend("cpu"), pos, radii, probe)
    axes = grid.axes()
    a1, a2 = [a for a in range(3) if a != axis]
    h = grid.spacing[axis]
    bins = maps.line_bins(pos, acc, axis, axes[a1], axes[a2])
    ebins = maps.line_bins(pos, acc + probe, axis, axes[a1], axes[a2], subset=exposed)
    return line_ends.interval_end_slopes(
        axis, axes[a1], axes[a2], grid.origin[axis], h, grid.shape[axis], pos, radii, acc, probe,
        maps.ses_sampling_step(h, ses_step), maps.ses_bisections(nbisect), bins, ebins,
        features, nb,
    )  # fmt: skip


# ---------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@pytest.mark.parametrize("surface", ["mol", "smol"])
def test_cuda_stacked_ses_calculator_matches_the_cpu_engine(surface):
    cp = pytest.importorskip("cupy")
    atoms, rng = _shell_solute(4)
    kw = dict(spacing=0.6, eps_in=2.0, ionic_strength=0.1, surface=surface, margin=3.0,
              skin=1.0, rtol=1e-6)  # fmt: skip
    gpu = pb.ReactionFieldCalculator(atoms, backend="cuda", **kw)
    assert gpu.engine == "stacked"
    cpu = pb.ReactionFieldCalculator(atoms, backend="cpu", engine="stacked", **kw)
    frames = [atoms.positions + rng.normal(0.0, 0.05, atoms.positions.shape) for _ in range(3)]
    for call in range(3):  # eager, captured, replayed: the SES step runs outside the graph
        moved = [f + 0.01 * call for f in frames]
        out_gpu = gpu.compute_batch([cp.asarray(f) for f in moved])
        out_cpu = cpu.compute_batch(moved)
        for a, b in zip(out_gpu, out_cpu, strict=True):
            assert a.converged and isinstance(a.forces, cp.ndarray)
            assert abs(a.energy / b.energy - 1) < 1e-5
    eng_gpu, eng_cpu = gpu._stacked, cpu._stacked
    for fa, fb in zip(_engine_fractions(eng_gpu, 3), _engine_fractions(eng_cpu, 3), strict=True):
        for x, y in zip(fa, fb, strict=True):
            np.testing.assert_allclose(cp.asnumpy(x), y, rtol=0, atol=1e-6)
    one = gpu.compute(frames[0])
    assert one.converged and one.solve.extra["engine"] == "stacked"


def test_lines_are_cut_into_pieces_only_while_work_items_are_few():
    """One grid's lines are cut into pieces of SES_PIECE_EDGES edges; a batch of frames whose
    lines alone give SES_ITEMS_WANTED work items is not cut (each piece gathers its line's
    spheres again)."""
    from pbsolver.backends.bodies import maps as B

    assert B.line_pieces(161, 129 * 129) == 11  # one frame: ceil(161 / 16)
    assert B.line_pieces(161, 32 * 129 * 129) == 2  # 32 frames: two pieces make 1.06 M items
    assert B.line_pieces(161, B.SES_ITEMS_WANTED) == 1
    assert B.line_pieces(5, 1) == 1  # no piece shorter than SES_PIECE_EDGES edges
    for lines in (1, 1000, 50_000, 10**6):
        for nbins in (1, 16, 17, 161, 513):
            p = B.line_pieces(nbins, lines)
            assert 1 <= p <= max(1, -(-nbins // B.SES_PIECE_EDGES))
            assert p == 1 or (p - 1) * lines < B.SES_ITEMS_WANTED
