"""Execute every notebook in notebooks/ on small grids (PBSOLVER_QUICK=1), as CI does.

The notebooks are committed with the outputs of a full run, so a reader sees the pictures
without running anything; here they are re-executed in memory (nothing is written back) through
nbclient, the engine nbmake uses, with the notebook folder as working directory.
``pytest --nbmake notebooks/`` runs them the same way, at full size unless PBSOLVER_QUICK=1 is
set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

#: Each notebook must finish within this; all of them together well under 5 minutes.
CELL_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernel spec running this very interpreter (not whatever "python3" resolves to)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "pbsolver-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "pbsolver tests", "language": "python"})
    )
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(root) + (os.pathsep + old if old else "")
    yield "pbsolver-test"
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def _kernel_env():
    """Environment of the notebook kernels: quick grids, and the pbsolver these tests import.

    The kernels import pbsolver from the same place as this process (the installed package
    under CI, the checkout in a development tree), so they share numba's on-disk cache of
    compiled kernels with the rest of the suite instead of compiling everything again.
    """
    import pbsolver

    env = dict(os.environ)
    env["PBSOLVER_QUICK"] = "1"
    here = str(Path(pbsolver.__file__).resolve().parents[1])
    pythonpath = env.get("PYTHONPATH")
    env["PYTHONPATH"] = here + (os.pathsep + pythonpath if pythonpath else "")
    return env


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, kernel_name, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    for key, value in _kernel_env().items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(path, as_version=4)
    for module in nb.metadata.get("pbsolver", {}).get("requires", []):
        pytest.importorskip(module)  # optional extras a notebook declares (e.g. MDAnalysis)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    elapsed = time.perf_counter() - start
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    print(f"{path.name}: {elapsed:.1f} s")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_committed_with_outputs(path):
    """A reader on GitHub sees results: every code cell ran, and there are pictures."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells
    not_run = [i for i, c in enumerate(code_cells) if c.get("execution_count") is None]
    assert not not_run, f"code cells {not_run} of {path.name} have no outputs: execute and save it"
    images = [
        out
        for c in code_cells
        for out in c.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert images, f"{path.name} has no figures in its saved outputs"
    errors = [
        out for c in code_cells for out in c.get("outputs", []) if out.get("output_type") == "error"
    ]
    assert not errors, f"{path.name} was saved with an error output"


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"
