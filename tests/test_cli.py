"""The ``pbsolver`` command line: CliRunner and real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from _pbio import FAST, PYTHON, cli_env, leftovers, sha256, small_problem, write_input
from click.testing import CliRunner

import pbsolver as pb
from pbsolver import cli
from pbsolver.io import hdf5
from pbsolver.io.units import kT_kj_per_mol


def run(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """An input of 3 grids and its solved output (shared: solving is the slow part)."""
    d = tmp_path_factory.mktemp("solved")
    problems = write_input(d / "in.h5", n_grids=3)
    res = run("solve", d / "in.h5", "-o", d / "out.h5", *FAST)
    assert res.exit_code == 0, res.output
    return d, problems


def test_solve_writes_results_and_prints_the_path(solved):
    d, problems = solved
    with h5py.File(d / "out.h5", "r") as f:
        assert list(f["grids"]) == ["g0", "g1", "g2"]
        for name, p in problems.items():
            g = f["grids"][name]
            np.testing.assert_array_equal(g["epsilon"][()], p.epsilon)  # inputs copied
            s = g["solver"].attrs
            assert bool(s["converged"]) and s["method"] == "sor" and s["backend"] == "cpu"
            ref = pb.solve(p, method="sor", backend="cpu", rtol=1e-4).phi_rf
            np.testing.assert_allclose(g["reaction_field"][()], ref, rtol=1e-5, atol=1e-3)
    assert leftovers(d) == []


def test_solve_output_path_on_stdout_logs_on_stderr(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=1)
    res = run("solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", *FAST)
    assert res.exit_code == 0
    assert res.stdout.strip() == str(tmp_path / "o.h5")
    assert "solved" in res.stderr
    quiet = run("-q", "solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", *FAST)
    assert quiet.exit_code == 0 and quiet.stderr == ""
    verbose = run("-v", "solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", "--force", *FAST)
    assert verbose.exit_code == 0 and "wrote" in verbose.stderr


def test_rerun_skips_finished_grids_and_force_solves_again(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=2)
    args = ["solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", *FAST]
    assert run(*args).exit_code == 0
    before = sha256(tmp_path / "o.h5")
    res = run(*args)
    assert res.exit_code == 0
    assert "2 already done" in res.stderr
    assert sha256(tmp_path / "o.h5") == before  # untouched
    res = run(*args, "--force")
    assert res.exit_code == 0 and "2 solved" in res.stderr
    res = run(*args, "--rtol", "1e-5")  # another rtol: the old results do not count
    assert res.exit_code == 0 and "2 solved" in res.stderr


def test_some_grids_fail_the_rest_are_written_exit_1(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=3)
    with h5py.File(tmp_path / "in.h5", "a") as f:
        eps = f["grids/g1/epsilon"]
        data = eps[()]
        data[2, 3, 4] = -1.0
        eps[...] = data
    res = run("solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", *FAST)
    assert res.exit_code == 1
    assert "grid 'g1'" in res.stderr and "epsilon must be > 0" in res.stderr
    assert "1 of 3 grid(s) failed" in res.stderr
    assert "Traceback" not in res.output
    assert hdf5.list_grids(tmp_path / "o.h5") == ["g0", "g2"]
    # fixing the input and rerunning solves the missing grid only
    with h5py.File(tmp_path / "in.h5", "a") as f:
        f["grids/g1/epsilon"][2, 3, 4] = 80.0
    res = run("solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", *FAST)
    assert res.exit_code == 0
    assert hdf5.list_grids(tmp_path / "o.h5") == ["g0", "g1", "g2"]


def test_unconverged_grid_is_a_failure_and_not_written(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=1)
    res = run("solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", *FAST, "--maxiter", "2")
    assert res.exit_code == 1
    assert "did not converge" in res.stderr
    assert not (tmp_path / "o.h5").exists()
    assert leftovers(tmp_path) == []


def test_grid_selection(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=3)
    res = run("solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", "--grid", "g2", *FAST)
    assert res.exit_code == 0
    assert hdf5.list_grids(tmp_path / "o.h5") == ["g2"]
    res = run("solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", "--grid", "g0", *FAST)
    assert res.exit_code == 0 and "1 solved" in res.stderr
    assert hdf5.list_grids(tmp_path / "o.h5") == ["g0", "g2"]  # g2 kept
    _, _, before = hdf5.read_result(tmp_path / "o.h5", "g2")
    res = run("solve", tmp_path / "in.h5", "-o", tmp_path / "o.h5", "--grid", "g1", "--grid",
              "g2", "--force", *FAST)  # fmt: skip
    assert res.exit_code == 0 and "2 solved" in res.stderr
    assert hdf5.list_grids(tmp_path / "o.h5") == ["g0", "g1", "g2"]
    _, _, after = hdf5.read_result(tmp_path / "o.h5", "g2")
    assert after["seconds"] != before["seconds"]  # solved again


def test_info_text_and_json(solved):
    d, _ = solved
    res = run("info", d / "in.h5")
    assert res.exit_code == 0
    assert "3 grid(s)" in res.stdout and "g1: 9×10×11" in res.stdout
    res = run("info", d / "out.h5", "--json")
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert [g["name"] for g in data["grids"]] == ["g0", "g1", "g2"]
    assert all(g["solved"] and g["solver"]["converged"] for g in data["grids"])
    res = run("info")
    assert res.exit_code == 0 and "pbsolver" in res.stdout


def test_export_dx_and_mrc(solved, tmp_path):
    import gridData

    d, problems = solved
    res = run("export", d / "out.h5", "--grid", "g1", "-o", tmp_path / "rf.dx")
    assert res.exit_code == 0, res.output
    rf, grid, _ = hdf5.read_result(d / "out.h5", "g1")
    g = gridData.Grid(str(tmp_path / "rf.dx"))
    np.testing.assert_allclose(g.origin, grid.origin, atol=1e-6)
    np.testing.assert_allclose(g.grid, rf / kT_kj_per_mol(298.15), rtol=1e-6, atol=1e-7)
    res = run(
        "export", d / "out.h5", "--grid", "g1", "--dataset", "potential",
        "--format", "dx", "--temperature", "310", "-o", tmp_path / "pot.dx",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    pot, _ = pb.read_dx(tmp_path / "pot.dx")
    np.testing.assert_allclose(pot, rf + problems["g1"].phi_coulomb, rtol=1e-5)
    res = run("export", d / "out.h5", "--grid", "g0", "--dataset", "epsilon",
              "-o", tmp_path / "eps.dx.gz")  # fmt: skip
    assert res.exit_code == 0
    eps, _ = pb.read_dx(tmp_path / "eps.dx.gz")
    np.testing.assert_array_equal(eps, problems["g0"].epsilon)
    res = run("export", d / "out.h5", "--grid", "g0", "-o", tmp_path / "rf.mrc")
    assert res.exit_code == 0
    assert gridData.Grid(str(tmp_path / "rf.mrc")).grid.shape == grid.shape


def test_solve_straight_to_dx(tmp_path):
    hdf5.write_hdf5(tmp_path / "one.h5", {"only": small_problem(7)})
    res = run("solve", tmp_path / "one.h5", "-o", tmp_path / "rf.dx", *FAST)
    assert res.exit_code == 0, res.output
    values, grid = pb.read_dx(tmp_path / "rf.dx")
    assert grid.shape == (7, 8, 9) and np.abs(values).max() > 0


def test_bench_is_registered_lazily(tmp_path, monkeypatch):
    """Listed without being imported; a broken module's import error is not hidden."""
    pkg = tmp_path / "fakebench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(
        "import click\n@click.command()\ndef bench():\n    click.echo('benched')\n"
    )
    (pkg / "broken.py").write_text("import no_such_module_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.LAZY_COMMANDS, "bench", ("fakebench.good", "bench", "Bench it."))
    res = run("--help")
    assert "bench" in res.stdout and "Bench it." in res.stdout
    assert "fakebench.good" not in sys.modules
    assert run("bench").stdout.strip() == "benched"
    monkeypatch.setitem(cli.LAZY_COMMANDS, "bench", ("fakebench.broken", "bench", "x"))
    with pytest.raises(ModuleNotFoundError, match="no_such_module_xyz"):
        CliRunner().invoke(cli.main, ["bench"], catch_exceptions=False)
    monkeypatch.setitem(cli.LAZY_COMMANDS, "bench", ("fakebench.absent", "bench", "x"))
    assert "bench" not in run("--help").stdout


def test_numba_cache_dir_for_read_only_install(tmp_path, monkeypatch):
    import os

    import numba

    pkg = str(cli.Path(cli.__file__).resolve().parent)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if str(p).startswith(pkg) else real_access(p, m)
    )
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(numba.config, "CACHE_DIR", numba.config.CACHE_DIR)
    chosen = cli.numba_cache_dir()
    assert chosen == str(tmp_path / "cache" / "pbsolver" / "numba")
    assert os.environ["NUMBA_CACHE_DIR"] == chosen
    assert (tmp_path / "cache" / "pbsolver" / "numba").is_dir()
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/somewhere/else")  # the user's choice wins
    assert cli.numba_cache_dir() == "/somewhere/else"


# ---------------------------------------------------------------------- subprocesses
def test_subprocess_solve(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=2)
    proc = subprocess.run(
        [PYTHON, "-m", "pbsolver", "solve", "in.h5", "-o", "out.h5", *FAST],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "out.h5"
    assert "2 solved" in proc.stderr
    assert hdf5.list_grids(tmp_path / "out.h5") == ["g0", "g1"]


def test_subprocess_start_up_imports_no_numba_or_cuda(tmp_path):
    code = (
        "import sys\n"
        "from pbsolver.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('numba', 'numba.cuda', 'cupy', 'h5py', 'pbsolver.bench')"
        " if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run(
        [PYTHON, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout
    proc = subprocess.run(
        [PYTHON, "-m", "pbsolver", "--version"], cwd=tmp_path, env=cli_env(),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and pb.__version__ in proc.stdout
    proc = subprocess.run(
        [PYTHON, "-m", "pbsolver", "solve", "missing.h5", "-o", "x.h5"],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------- PQR input
PQR_OPTS = ["--spacing", "0.8", "--margin", "3", "--eps-in", "1", *FAST]


def test_solve_pqr_writes_maps_result_and_energy(tmp_path):
    src = pb.data.path("born_ion.pqr")
    res = run("solve", src, "-o", tmp_path / "born.h5", *PQR_OPTS)
    assert res.exit_code == 0, res.output
    assert "G_solv" in res.stderr
    with h5py.File(tmp_path / "born.h5", "r") as f:
        g = f["grids/born_ion"]
        assert {"epsilon_x", "epsilon_y", "epsilon_z", "phi_coulomb", "reaction_field"} <= set(g)
        assert g.attrs["eps_cavity"] == 1.0
        energy = g["solver"].attrs["solvation_energy_kj_mol"]
    assert energy == pytest.approx(-228.611, rel=0.05)  # Born: -½ k q²/a (1 − 1/78.54)
    res = run("solve", src, "-o", tmp_path / "born.h5", *PQR_OPTS)
    assert res.exit_code == 0 and "1 already done" in res.stderr
    res = run("export", tmp_path / "born.h5", "--dataset", "potential", "-o", tmp_path / "p.dx")
    if res.exit_code == 1:  # a charge exactly on a node: φ_c is infinite there
        assert "infinite" in res.stderr and not (tmp_path / "p.dx").exists()
    else:
        assert res.exit_code == 0
        assert np.isfinite(pb.read_dx(tmp_path / "p.dx")[0]).all()
    res = run("export", tmp_path / "born.h5", "-o", tmp_path / "rf.dx")
    assert res.exit_code == 0


def test_batch_stack_option(tmp_path):
    problems = write_input(tmp_path / "in.h5", n_grids=3, n=7)
    res = run("batch", tmp_path / "in.h5", "--out-dir", tmp_path / "out", "--stack", 2, *FAST)
    assert res.exit_code == 0, res.output
    assert hdf5.list_grids(tmp_path / "out" / "in.h5") == list(problems)
    res = run("batch", tmp_path / "in.h5", "--out-dir", tmp_path / "out", "--stack", 0, *FAST)
    assert res.exit_code == 2 and "--stack" in res.output


def test_batch_of_pqr_files_and_info(tmp_path):
    src = pb.data.path("born_ion.pqr")
    two = tmp_path / "pair.pqr"
    two.write_text(
        "ATOM      1  N   ALA     1       0.000   0.000   0.000  0.5000 1.8240\n"
        "ATOM      2  O   ALA     1       2.000   0.500   0.000 -0.5000 1.6612\n"
    )
    res = run("batch", src, two, "--out-dir", tmp_path / "out", *PQR_OPTS)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["born_ion.h5", "pair.h5"]
    res = run("info", two)
    assert res.exit_code == 0 and "atoms: 2" in res.stdout


def test_backend_auto_without_a_cuda_driver_does_not_import_numba_cuda(tmp_path):
    """With no loadable CUDA driver, backend="auto" answers "cpu" before importing numba.cuda;
    where the driver loads, numba-cuda decides (and the GPU suite has the device)."""
    code = (
        "import sys\n"
        "from pbsolver.backends import _no_cuda_driver, cuda_available, get_backend\n"
        "print('DRIVER', not _no_cuda_driver())\n"
        "print('BACKEND', get_backend('auto').name)\n"
        "print('CUDA', cuda_available(), 'numba.cuda' in sys.modules)\n"
    )
    env = {k: v for k, v in cli_env().items() if k not in ("NUMBA_CUDA_DRIVER",
                                                            "NUMBA_ENABLE_CUDASIM")}  # fmt: skip
    proc = subprocess.run(
        [PYTHON, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    if "DRIVER False" in proc.stdout:
        assert "BACKEND cpu" in proc.stdout
        assert "CUDA False False" in proc.stdout
    else:
        assert "CUDA True True" in proc.stdout or "CUDA False True" in proc.stdout
