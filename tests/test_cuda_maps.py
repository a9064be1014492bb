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
from pbsolver import maps

rng = np.random.default_rng(7)
n = 6
c = rng.normal(0.0, 1.6, (n, 3))
r = rng.uniform(1.0, 1.9, n)
r[0] = 0.0
atoms = pb.Atoms(c, rng.normal(0.0, 0.6, n), r)
half = 0.5 * (np.array([9, 8, 10]) - 1) * np.array([0.8, 0.9, 0.75])
grid = pb.Grid((9, 8, 10), spacing=(0.8, 0.9, 0.75), origin=tuple(atoms.center() - half + 0.07))
out = {{}}
for surface in ("vdw", "mol"):
    cpu = maps.face_fractions(atoms, grid, surface, backend="cpu")
    gpu = maps.face_fractions(atoms, grid, surface, backend="cuda")
    out[surface] = max(float(np.abs(a - b).max()) for a, b in zip(cpu, gpu))
    out[surface + "_sum"] = float(sum(a.sum() for a in cpu))
cpu = maps.ion_accessibility(atoms, grid, 2.0, subsamples=2, backend="cpu")
gpu = maps.ion_accessibility(atoms, grid, 2.0, subsamples=2, backend="cuda")
out["ions"] = float(np.abs(cpu - gpu).max())
cpu = maps.coulomb_potential(atoms, grid, 2.0, backend="cpu")
gpu = maps.coulomb_potential(atoms, grid, 2.0, backend="cuda")
out["coulomb"] = float(np.abs(cpu / gpu - 1).max())
box = (9 * 0.8, 8 * 0.9, 10 * 0.75)
cpu = maps.coulomb_potential(atoms, grid, 2.0, box=box, backend="cpu")
gpu = maps.coulomb_potential(atoms, grid, 2.0, box=box, backend="cuda")
out["coulomb_periodic"] = float(np.abs(cpu / gpu - 1).max())
cpu = maps.boundary_values(atoms, grid, 2.0, 78.54, 0.1, backend="cpu")
gpu = maps.boundary_values(atoms, grid, 2.0, 78.54, 0.1, backend="cuda")
out["boundary"] = float(np.abs(cpu - gpu).max() / np.abs(cpu).max())
from pbsolver.backends import cpu_maps as K, cuda_maps as C
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


def test_cuda_faces_match_cpu(results):
    assert results["vdw_sum"] > 10 and results["mol_sum"] > results["vdw_sum"]
    assert results["vdw"] < 1e-12
    assert results["mol"] < 1e-9


def test_cuda_ses_features_match_cpu(results):
    assert results["n_circles"] > 3
    assert results["features_int"]
    assert results["features_float"] < 1e-12


def test_cuda_salt_coulomb_boundary_match_cpu(results):
    assert results["ions"] < 1e-12
    assert results["coulomb"] < 1e-12
    assert results["coulomb_periodic"] < 1e-12
    assert results["boundary"] < 1e-12


@pytest.mark.gpu
def test_gpu_maps_match_cpu_on_a_protein():
    """On a real device: every map of the shipped protein from the CUDA kernels equals the CPU's."""
    import numpy as np

    import pbsolver as pb
    from pbsolver.molecule import maps

    atoms = pb.read_pqr(ROOT / "data" / "1lpb_chainA.pqr")
    grid = maps.grid_for_atoms(atoms, 0.7, 4.0)
    for surface in ("vdw", "mol"):
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
        ref = fn("cpu")
        # different summation orders: compare against the field's scale
        np.testing.assert_allclose(fn("cuda"), ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
