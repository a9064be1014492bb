"""CUDA map kernels against the CPU kernels under numba's CUDA simulator (tiny grids).

numba reads ``NUMBA_ENABLE_CUDASIM`` when ``numba.cuda`` is first imported, so the comparison
runs in a subprocess with the variable set (in-process when the session already runs under
the simulator). The simulator runs device code as Python, about 1 ms a thread: grids ≤ 10³.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cudasim

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
import pbsolver as pb
from pbsolver.molecule import maps
from pbsolver.backends import get_backend
from pbsolver.backends.cuda import CUDABackend
from pbsolver.backends.cpu import maps as K
from pbsolver.backends.cuda import maps as C

cpu_be, gpu_be = get_backend("cpu"), CUDABackend(device="numba")
assert gpu_be.map_kernels().module.endswith("cuda.maps")
rng = np.random.default_rng(7)
n = 6
c = rng.normal(0.0, 1.6, (n, 3))
r = rng.uniform(1.0, 1.9, n)
r[0] = 0.0
h = np.array([0.8, 0.9, 0.75])
half = 0.5 * (np.array([9, 8, 10]) - 1) * h
origin = np.round((c.mean(axis=0) - half) / h) * h  # nodes at multiples of h
grid = pb.Grid((9, 8, 10), spacing=tuple(h), origin=tuple(origin))
# atoms on nodes: one exactly, one a rounding error off
c[1] = origin + np.array([4, 3, 5]) * h
c[2] = origin + np.array([3, 4, 4]) * h + 1e-12
atoms = pb.Atoms(c, rng.normal(0.0, 0.6, n), r)
out = {{}}
for surface in ("vdw", "mol"):
    cpu = maps.face_fractions(atoms, grid, surface, backend=cpu_be)
    gpu = maps.face_fractions(atoms, grid, surface, backend=gpu_be)
    out[surface] = max(float(np.abs(a - b).max()) for a, b in zip(cpu, gpu))
    out[surface + "_sum"] = float(sum(a.sum() for a in cpu))
cpu = maps.ion_accessibility(atoms, grid, 2.0, subsamples=2, backend=cpu_be)
gpu = maps.ion_accessibility(atoms, grid, 2.0, subsamples=2, backend=gpu_be)
out["ions"] = float(np.abs(cpu - gpu).max())
# the fused line sets in groups of two slots (a map too big for all its sets at once)
C.SLOT_ENTRIES = 2 * grid.size
maps.clear_kept_maps()
grouped = maps.ion_accessibility(atoms, grid, 2.0, subsamples=2, backend=gpu_be)
out["ions_grouped"] = float(np.abs(cpu - grouped).max())
for name, box in (("coulomb", None), ("coulomb_periodic", (9 * 0.8, 8 * 0.9, 10 * 0.75))):
    cpu = maps.coulomb_potential(atoms, grid, 2.0, box=box, backend=cpu_be)
    gpu = maps.coulomb_potential(atoms, grid, 2.0, box=box, backend=gpu_be)
    fin = np.isfinite(cpu)
    out[name] = float(np.abs(cpu[fin] / gpu[fin] - 1).max())
    out[name + "_inf"] = int((~fin).sum())
    out[name + "_same_inf"] = bool(np.array_equal(cpu[~fin], gpu[~fin]))
# the tiled open-boundary φ_c over several tiles of atoms (THREADS is 32 here), a last tile
# part full, and a charge on a node whose opposite charge sits on it too (∞ − ∞)
many = pb.Atoms(rng.uniform(origin - 2.0, origin + half * 2 + 2.0, (45, 3)),
                rng.normal(0.0, 0.6, 45), np.ones(45))  # fmt: skip
cpu = maps.coulomb_potential(many, grid, 2.0, backend=cpu_be)
gpu = maps.coulomb_potential(many, grid, 2.0, backend=gpu_be)
out["coulomb_tiles"] = float(np.abs(gpu - cpu).max() / np.abs(cpu).max())
# φ_c at points (the outer layer's sums): every node, the two atoms on nodes among them
from pbsolver.backends.bodies.maps import on_node_tol2
pts = np.stack([v.reshape(-1) for v in np.broadcast_arrays(*grid.coordinates())], axis=1)
args = (pts, atoms.positions, atoms.charges, 700.0, on_node_tol2(grid.spacing))
cpu = cpu_be.map_kernels().coulomb_points(*args)
gpu = gpu_be.map_kernels().coulomb_points(*args)
fin = np.isfinite(cpu)
out["coulomb_points"] = float(np.abs(gpu[fin] - cpu[fin]).max() / np.abs(cpu[fin]).max())
out["coulomb_points_inf"] = int((~fin).sum()) if np.array_equal(cpu[~fin], gpu[~fin]) else -1
two = pb.Atoms(np.array([c[1], c[1]]), np.array([0.4, -0.4]), np.ones(2))
try:
    maps.coulomb_potential(two, grid, 2.0, backend=gpu_be)
    out["opposite_on_node"] = "no error"
except pb.InputError as exc:
    out["opposite_on_node"] = str(exc)
for kind in ("mdh", "sdh"):
    cpu = maps.boundary_values(atoms, grid, 2.0, 78.54, 0.1, kind=kind, backend=cpu_be)
    gpu = maps.boundary_values(atoms, grid, 2.0, 78.54, 0.1, kind=kind, backend=gpu_be)
    out["boundary_" + kind] = float(np.abs(cpu - gpu).max() / np.abs(cpu).max())
acc = atoms.radii + 1.4
nb = K.neighbour_lists(atoms.positions, acc)
fc = K.ses_features(atoms.positions, acc, *nb)
fg = C.ses_features(atoms.positions, acc, *nb)
out["n_circles"] = int(len(fc[2]))
same = [np.array_equal(a, b) for a, b in zip(fc[:3], fg[:3])]
out["features_int"] = bool(all(same) and np.array_equal(fc[4], fg[4]))
out["features_float"] = max(
    float(np.abs(fc[3] - fg[3]).max()), float(np.abs(fc[5] - fg[5]).max())
)
# the forces' sphere-union line ends (ion-inflated spheres, lines 2x finer than the grid)
from pbsolver.backends.cpu import line_ends as LC
from pbsolver.backends.cuda import line_ends as LG
from pbsolver.backends.bodies import maps as B
LG.FIRST_UNION_CAPACITY = 1  # the redo with room for every interval runs too
pos, rad = atoms.positions, atoms.radii + 2.0
x, y, _ = grid.axes()
us = x[0] + ((np.arange(2 * len(x)) + 0.5) / 2 - 0.5) * h[0]
vs = y[0] + ((np.arange(2 * len(y)) + 0.5) / 2 - 0.5) * h[1]
bins = maps.line_bins(pos, rad, 2, us, vs)
args = (2, us, vs, origin[2] - 0.5 * h[2], h[2], grid.shape[2], pos, rad, bins)
ec, eg = LC.sphere_end_slopes(*args), LG.sphere_end_slopes(*args)
out["ends"] = int(len(ec[1]))
out["ends_same"] = bool(np.array_equal(ec[0], eg[0]) and np.array_equal(ec[1], eg[1])
                        and np.array_equal(ec[2][:, :1], eg[2]))
out["ends_slopes"] = float(np.abs(ec[3][:, :1] - eg[3]).max())
# the forces' SES interval ends (one axis; the recorder's redo with room for all runs too)
LG.FIRST_CAPACITY = 1
axes = grid.axes()
exposed = np.flatnonzero(fc[0])
bins = maps.line_bins(atoms.positions, acc, 1, axes[0], axes[2])
ebins = maps.line_bins(atoms.positions, acc + 1.4, 1, axes[0], axes[2], subset=exposed)
args = (1, axes[0], axes[2], grid.origin[1], h[1], grid.shape[1], atoms.positions, atoms.radii,
        acc, 1.4, maps.ses_sampling_step(h[1], None), 14, bins, ebins, fc, nb)
def canonical(ends):  # the ends (lines, bins, atoms, slopes) in one order (GPU: in pieces)
    lines, bins, atoms, slopes = ends[:4]
    keys = [lines[:, 0], lines[:, 1], bins, *atoms.T, *slopes.reshape(len(bins), -1).T]
    order = np.lexsort(keys[::-1])
    return [a[order] for a in ends[:4]]


sc = LC.interval_end_slopes(*args)
out["ses_ends"] = int(len(sc[1]))
out["ses_crossings"] = int((sc[2][:, 1] >= 0).sum())
# the GPU's lines in as many pieces as their edges allow, and in pieces of two edges
out["ses_pieces"], same, worst = [], True, 0.0
for edges in (LG.RECORD_PIECE_EDGES, 2):
    LG.RECORD_PIECE_EDGES = edges
    out["ses_pieces"].append(B.line_pieces(grid.shape[1], len(axes[0]) * len(axes[2]), edges))
    sg = LG.interval_end_slopes(*args)
    a, b = canonical(sc), canonical(sg)
    same = same and all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3])) and sc[4] == sg[4]
    worst = max(worst, float(np.abs(a[3] - b[3]).max()))
out["ses_ends_same"], out["ses_ends_slopes"] = bool(same), worst
# the kernels that keep the general maps on the device: snapping, faces, smoothing (the CPU's
# bodies), on fractions with values just off 0 and 1 and out of [0, 1]
raw = [rng.uniform(-0.1, 1.1, grid.shape) for _ in range(3)]
for f in raw:
    f[rng.random(grid.shape) < 0.2] = 1.0 - 1e-13
    f[rng.random(grid.shape) < 0.2] = 1e-13
snapped = [f.copy() for f in raw]
for f in snapped:
    K.snap_fractions(f)
dev = [C.device_copy(f) for f in raw]
for f in dev:
    C.device_snap_fractions(f)
out["device_snap_same"] = all(np.array_equal(C.host_copy(d), f) for d, f in zip(dev, snapped))
smoothed = maps.smooth_fractions(*snapped)
out["device_smooth_same"] = all(
    np.array_equal(C.host_copy(d), f) for d, f in zip(C.device_smooth_fractions(*dev), smoothed)
)
faces = maps.faces_from_fractions(smoothed, 2.0, 78.54)
out["device_faces_same"] = all(
    np.array_equal(C.host_copy(C.device_faces_from_fractions(C.device_copy(f), 2.0, 78.54)), e)
    for f, e in zip(smoothed, faces)
)
# the simulator has no CuPy: maps asked for on the device are host maps, the same values
out["device_results_sim"] = repr(gpu_be.map_kernels().device_results())
m0 = maps.build_maps(atoms, grid, maps_backend=gpu_be, surface="smol", ionic_strength=0.1)
m1 = maps.build_maps(atoms, grid, maps_backend=gpu_be, surface="smol", ionic_strength=0.1,
                     on_device=True)  # fmt: skip
out["on_device_sim_same"] = all(
    isinstance(b, np.ndarray) and np.array_equal(a, b)
    for a, b in zip((*m0.epsilon_faces, m0.kappa2, m0.phi_coulomb, m0.boundary_values),
                    (*m1.epsilon_faces, m1.kappa2, m1.phi_coulomb, m1.boundary_values))
)  # fmt: skip
# field sampling on the device (focusing's values, the energies): points, and a tensor grid
from pbsolver.backends.cpu import sampling as SC
from pbsolver.backends.cuda import sampling as SG
field = rng.normal(0.0, 1.0, grid.shape) * np.exp(rng.uniform(-3, 3, grid.shape))
d_field = C.device_copy(field)
where = rng.uniform(-0.7, np.array(grid.shape) - 0.3, (30, 3))  # a few off the grid (clamped)
where[:3] = np.round(where[:3])  # on nodes
worst = 0.0
for periodic in (False, True):
    for cubic in (False, True):
        cpu = SC.sample_points(field, h, where, periodic, cubic)
        gpu = C.host_copy(SG.sample_points(d_field, h, where, periodic, cubic))
        worst = max(worst, float(np.abs(gpu - cpu).max() / np.abs(cpu).max()))
out["sample_points"] = worst
cells = [rng.integers(0, n - 1, m) for n, m in zip(grid.shape, (5, 3, 4))]
cells[0][0] = grid.shape[0] - 1  # the last node: its upper neighbour clamped
weights = [rng.uniform(0.0, 1.0, len(c)) for c in cells]
cpu = SC.tensor_lerp(field, cells, weights)
gpu = C.host_copy(SG.tensor_lerp(d_field, cells, weights))
out["tensor_lerp"] = float(np.abs(gpu - cpu).max() / np.abs(cpu).max())
print("RESULT" + json.dumps(out))
"""


def _run():
    code = SCRIPT.format(root=str(ROOT))
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        import io
        from contextlib import redirect_stdout

        buf = io.StringIO()
        with redirect_stdout(buf):
            exec(compile(code, "<cuda_maps_check>", "exec"), {})
        text = buf.getvalue()
    else:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        text = proc.stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


@pytest.fixture(scope="module")
def results():
    pytest.importorskip("numba.cuda")
    return _run()


def test_cuda_kernels_of_device_maps_match_cpu(results):
    """Snapping, smoothing and faces on the device give the CPU kernels' values bit for bit."""
    assert results["device_snap_same"]
    assert results["device_smooth_same"]
    assert results["device_faces_same"]
    assert results["device_results_sim"] == "None"
    assert results["on_device_sim_same"]


def test_cuda_sampling_matches_cpu(results):
    """Sampling a device field at points (linear, cubic; clamped, periodic) and at a tensor
    grid's nodes: the CPU loops' values (the same bodies)."""
    assert results["sample_points"] < 1e-14
    assert results["tensor_lerp"] < 1e-14


def test_cuda_faces_match_cpu(results):
    assert results["vdw_sum"] > 10 and results["mol_sum"] > results["vdw_sum"]
    assert results["vdw"] < 1e-12
    assert results["mol"] < 1e-9


def test_cuda_sphere_union_line_ends_match_cpu(results):
    """The forces' recorded chord ends (κ̄² and "vdw" terms): same ends, atoms and slopes."""
    assert results["ends"] > 20
    assert results["ends_same"]
    assert results["ends_slopes"] < 1e-12


def test_cuda_ses_line_ends_match_cpu(results):
    """The forces' SES ends (chord ends and reentrant crossings): same ends, atoms and slopes."""
    assert results["ses_ends"] > 20 and results["ses_crossings"] > 3
    assert results["ses_pieces"][1] >= 4  # the pieces' records joined, their ends cancelled
    assert results["ses_ends_same"]
    assert results["ses_ends_slopes"] < 1e-12


def test_cuda_ses_features_match_cpu(results):
    assert results["n_circles"] > 3
    assert results["features_int"]
    assert results["features_float"] < 1e-12


def test_cuda_salt_coulomb_boundary_match_cpu(results):
    assert results["ions"] < 1e-12 and results["ions_grouped"] < 1e-12
    for name in ("coulomb", "coulomb_periodic"):
        assert results[name] < 1e-12
        # the atom on a node and the one a rounding error off it: ±inf on both backends
        assert results[name + "_inf"] == 2 and results[name + "_same_inf"]
    assert results["coulomb_tiles"] < 1e-13
    assert "opposite sign" in results["opposite_on_node"]
    assert results["coulomb_points"] < 1e-13 and results["coulomb_points_inf"] == 2
    assert results["boundary_mdh"] < 1e-12
    assert results["boundary_sdh"] < 1e-12


@pytest.mark.gpu
def test_gpu_maps_match_cpu_on_a_protein():
    """On a real device: every map of the shipped protein from the CUDA kernels equals the CPU's."""
    import numpy as np

    import pbsolver as pb
    from pbsolver.backends.cpu.backend import CPUBackend
    from pbsolver.molecule import maps

    atoms = pb.read_pqr(ROOT / "data" / "1lpb_chainA.pqr")
    grid = maps.grid_for_atoms(atoms, 0.7, 4.0)
    for surface in ("vdw", "mol", "svdw"):  # svdw: the same array code on CuPy
        cpu = maps.face_fractions(atoms, grid, surface, backend="cpu")
        gpu = maps.face_fractions(atoms, grid, surface, backend="cuda")
        for a, b in zip(cpu, gpu, strict=True):
            np.testing.assert_allclose(b, a, atol=1e-9)
    np.testing.assert_allclose(
        maps.ion_accessibility(atoms, grid, backend="cuda"),
        maps.ion_accessibility(atoms, grid, backend="cpu"),
        atol=1e-12,
    )
    for fn in (
        lambda be: maps.coulomb_potential(atoms, grid, 2.0, backend=be),
        lambda be: maps.boundary_values(atoms, grid, 2.0, 78.54, 0.15, backend=be),
    ):
        # the CPU's direct sum (its default multilevel φ_c is checked against it in
        # test_fast_coulomb.py); different summation orders: compare against the field's scale
        ref = fn(CPUBackend(coulomb="direct"))
        np.testing.assert_allclose(fn("cuda"), ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


@pytest.mark.gpu
def test_gpu_maps_left_on_the_device_equal_the_host_maps():
    """``build_maps(on_device=True)`` on the GPU: CuPy maps with the host maps' values, for
    every surface the device kernels build (vdW, SES, smoothed SES) with salt."""
    cp = pytest.importorskip("cupy")
    import numpy as np

    import pbsolver as pb
    from pbsolver.molecule import maps

    atoms = pb.read_pqr(ROOT / "data" / "1lpb_chainA.pqr")
    grid = maps.grid_for_atoms(atoms, 0.7, 4.0)
    for surface in ("vdw", "mol", "smol"):
        opts = dict(maps_backend="cuda", surface=surface, ionic_strength=0.15)
        host = maps.build_maps(atoms, grid, **opts)
        dev = maps.build_maps(atoms, grid, **opts, on_device=True)
        for a, b in zip(
            (*host.epsilon_faces, host.kappa2, host.phi_coulomb, host.boundary_values),
            (*dev.epsilon_faces, dev.kappa2, dev.phi_coulomb, dev.boundary_values),
            strict=True,
        ):
            assert isinstance(b, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(b), a)


@pytest.mark.gpu
def test_gpu_kappa_slots_yield_to_free_memory(monkeypatch):
    """The κ̄² map's fused line sets take their slots only from memory that is free: with the
    device reported nearly full they run one launch a set, and the map is the same."""
    cp = pytest.importorskip("cupy")
    import numpy as np

    import pbsolver as pb
    from pbsolver.backends.cuda import maps as C
    from pbsolver.molecule import maps

    atoms = pb.read_pqr(ROOT / "data" / "1lpb_chainA.pqr")
    grid = maps.grid_for_atoms(atoms, 0.7, 4.0)
    maps.clear_kept_maps()
    cp.get_default_memory_pool().free_all_blocks()
    assert C.slot_group(16, grid.size) == 16  # a grid of this size on an idle device
    fused = maps.ion_accessibility(atoms, grid, backend="cuda")
    # three slots' worth free: a quarter of it holds none
    monkeypatch.setattr(C, "free_gpu_bytes", lambda cp: 3 * 8 * grid.size)
    assert C.slot_group(16, grid.size) < 2
    maps.clear_kept_maps()
    one_by_one = maps.ion_accessibility(atoms, grid, backend="cuda")
    np.testing.assert_allclose(one_by_one, fused, rtol=0, atol=1e-12)
    assert np.abs(fused).max() > 0
