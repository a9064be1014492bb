"""Outputs checked before any work, requests validated before the first solve, one-line errors.

Every refusal here is a usage error (exit 2) unless said otherwise, leaves no output and the
input unchanged, and happens before anything is solved (``Solver.solve`` is watched).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from _pbio import FAST, leftovers, sha256, small_problem, visible_files, write_input
from click.testing import CliRunner

import pbsolver as pb
from pbsolver import cli
from pbsolver.exceptions import InputError
from pbsolver.io import hdf5


def run(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


@pytest.fixture
def no_solve(monkeypatch):
    """Fail the test if anything is solved."""

    def refuse(self, problem, x0=None):
        raise AssertionError("solved although the request was refused")

    monkeypatch.setattr(pb.Solver, "solve", refuse)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.h5"
    write_input(path, n_grids=2, n=7)
    return path


def _refused(res, text, code=2):
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.stderr.splitlines() if text in ln]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr


# ---------------------------------------------------------------------- same file as an input
def test_export_onto_its_own_input_is_refused(tmp_path):
    src = tmp_path / "r.h5"
    hdf5.write_hdf5(src, {"g": small_problem(7)})
    before = sha256(src)
    res = run("export", src, "--grid", "g", "--dataset", "epsilon", "--format", "dx", "-o", src)
    _refused(res, "r.h5")
    assert sha256(src) == before
    link = tmp_path / "alias.dx"
    os.link(src, link)  # a hard link under a map name: the same inode
    res = run("export", src, "--grid", "g", "--dataset", "epsilon", "-o", link)
    _refused(res, "is the input")
    assert sha256(src) == before


def test_solve_onto_a_hard_link_of_its_input_is_refused(tmp_path, src, no_solve):
    before = sha256(src)
    os.link(src, tmp_path / "same.h5")
    _refused(run("solve", src, "-o", tmp_path / "same.h5", *FAST), "is the input")
    assert sha256(src) == before


# ---------------------------------------------------------------------- format by suffix
@pytest.mark.parametrize("name", ["x.xyz", "x", "x.h5.txt"])
def test_solve_output_suffix_must_name_a_format(tmp_path, src, no_solve, name):
    res = run("solve", src, "-o", tmp_path / name, *FAST)
    _refused(res, "the name must end in .h5, .hdf5")
    assert not (tmp_path / name).exists() and leftovers(tmp_path) == []


def test_export_format_must_match_the_name(tmp_path, src):
    res = run("export", src, "--grid", "g0", "--dataset", "epsilon", "--format", "mrc",
              "-o", tmp_path / "e.dx")  # fmt: skip
    _refused(res, "does not match the output name")
    res = run("export", src, "--grid", "g0", "--dataset", "epsilon", "--format", "dx",
              "-o", tmp_path / "e.txt")  # fmt: skip
    _refused(res, "the name must end in .dx")
    assert visible_files(tmp_path) == ["in.h5"]


# ---------------------------------------------------------------------- special files
def _fifo(path):
    os.mkfifo(path)


def _symlink(path):
    target = path.with_name("target.h5")
    target.write_bytes(b"precious")
    path.symlink_to(target)


def _directory(path):
    path.mkdir()


@pytest.mark.parametrize(
    ("make", "text"),
    [(_fifo, "is a FIFO"), (_symlink, "is a symbolic link"), (_directory, "is a directory")],
    ids=["fifo", "symlink", "directory"],
)
def test_special_output_files_are_refused(tmp_path, src, no_solve, make, text):
    out = tmp_path / "o.h5"
    make(out)
    kind = os.lstat(out).st_mode
    _refused(run("solve", src, "-o", out, *FAST), text)
    assert os.lstat(out).st_mode == kind  # the node is still there, unchanged
    if out.is_symlink():
        assert (tmp_path / "target.h5").read_bytes() == b"precious"
    dx = tmp_path / "m.dx"
    make(dx)
    _refused(run("export", src, "--grid", "g0", "--dataset", "epsilon", "-o", dx), text)


def test_device_and_socket_outputs_are_refused(tmp_path, src, monkeypatch):
    """Device nodes are simulated: a real one (/dev/null) would be replaced by a regression."""
    import stat

    from pbsolver.io import safety

    real_lstat = os.lstat
    fake = {
        str(tmp_path / "chr.dx"): stat.S_IFCHR | 0o666,
        str(tmp_path / "blk.dx"): stat.S_IFBLK | 0o660,
        str(tmp_path / "sock.dx"): stat.S_IFSOCK | 0o666,
    }

    def lstat(path, *a, **kw):
        mode = fake.get(str(path))
        if mode is None:
            return real_lstat(path, *a, **kw)
        return os.stat_result((mode, 1, 1, 1, 0, 0, 0, 0, 0, 0))

    monkeypatch.setattr(safety.os, "lstat", lstat)
    for name, text in [("chr.dx", "character device"), ("blk.dx", "block device"),
                       ("sock.dx", "a socket")]:  # fmt: skip
        res = run("export", src, "--grid", "g0", "--dataset", "epsilon", "-o", tmp_path / name)
        _refused(res, text)
        with pytest.raises(InputError, match=text):
            pb.write_dx(tmp_path / name, np.ones((3, 3, 3)), pb.Grid((3, 3, 3)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5"]


def test_python_writers_refuse_fifos_and_symlinks(tmp_path):
    os.mkfifo(tmp_path / "f.h5")
    with pytest.raises(InputError, match="is a FIFO"):
        hdf5.write_hdf5(tmp_path / "f.h5", small_problem(7))
    _symlink(tmp_path / "l.dx")
    with pytest.raises(InputError, match="is a symbolic link"):
        pb.write_dx(tmp_path / "l.dx", np.ones((3, 3, 3)), pb.Grid((3, 3, 3)))
    assert (tmp_path / "l.dx").is_symlink()
    assert (tmp_path / "target.h5").read_bytes() == b"precious"


# ---------------------------------------------------------------------- results from another input
def test_results_from_another_input_need_overwrite(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        write_input(d / "in.h5", n_grids=1, n=7)
    out = tmp_path / "out.h5"
    assert run("solve", a / "in.h5", "-o", out, *FAST).exit_code == 0
    with h5py.File(out) as f:
        assert f.attrs["source"] == str((a / "in.h5").resolve())
    before = sha256(out)
    res = run("solve", b / "in.h5", "-o", out, *FAST)
    _refused(res, "use --overwrite")
    assert f"was written from {(a / 'in.h5').resolve()}" in res.stderr
    assert sha256(out) == before
    # the same input resumes as before
    res = run("solve", a / "in.h5", "-o", out, *FAST)
    assert res.exit_code == 0 and "1 already done" in res.stderr
    res = run("solve", b / "in.h5", "-o", out, *FAST, "--overwrite")
    assert res.exit_code == 0, res.output
    with h5py.File(out) as f:
        assert f.attrs["source"] == str((b / "in.h5").resolve())


def test_batch_into_a_folder_of_another_inputs_results(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        write_input(d / "in.h5", n_grids=1, n=7)
    out = tmp_path / "out"
    assert run("batch", a / "in.h5", "--out-dir", out, *FAST).exit_code == 0
    before = sha256(out / "in.h5")
    _refused(run("batch", b / "in.h5", "--out-dir", out, *FAST), "use --overwrite")
    assert sha256(out / "in.h5") == before
    assert run("batch", b / "in.h5", "--out-dir", out, *FAST, "--overwrite").exit_code == 0


def test_a_foreign_file_in_the_way_is_not_replaced(tmp_path, src, no_solve):
    out = tmp_path / "notes.h5"
    out.write_text("my notes, not HDF5\n")
    _refused(run("solve", src, "-o", out, *FAST), "records no input")
    assert out.read_text() == "my notes, not HDF5\n"


# ---------------------------------------------------------------------- validation up front
def test_map_output_of_several_grids_refused_before_solving(tmp_path, src, no_solve):
    _refused(run("solve", src, "-o", tmp_path / "rf.dx", *FAST), "a map output holds one grid")
    assert not (tmp_path / "rf.dx").exists()


@pytest.mark.parametrize(
    ("dataset", "text"),
    [("nonexist", "not one of"), ("kappa2", "will have no such dataset")],
)
def test_map_dataset_checked_before_solving(tmp_path, src, no_solve, dataset, text):
    res = run("solve", src, "--grid", "g0", "-o", tmp_path / "x.dx", "--dataset", dataset, *FAST)
    _refused(res, text)
    assert "pbsolver-" not in res.stderr  # no internal scratch file named
    assert not (tmp_path / "x.dx").exists()


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--rtol", "0", "--atol", "0"], "can never be met"),
        (["--dataset", "potential"], "only apply to a map output"),
        (["--temperature", "310"], "only apply to a map output"),
    ],
    ids=["rtol0-atol0", "dataset-with-hdf5", "temperature-with-hdf5"],
)
def test_option_combinations_refused_before_solving(tmp_path, src, no_solve, args, text):
    _refused(run("solve", src, "-o", tmp_path / "o.h5", *FAST, *args), text)
    assert visible_files(tmp_path) == ["in.h5"]


def test_results_only_with_a_map_is_refused(tmp_path, src, no_solve):
    res = run("solve", src, "--grid", "g0", "-o", tmp_path / "x.dx", "--results-only", *FAST)
    _refused(res, "--results-only")


def test_rtol_zero_with_a_positive_atol_is_accepted(tmp_path, src):
    res = run("solve", src, "--grid", "g0", "-o", tmp_path / "o.h5", *FAST[:2], "--backend",
              "cpu", "--rtol", "0", "--atol", "1e-2")  # fmt: skip
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------------- Solver keywords, positions
def test_misspelt_solver_keyword_is_refused_at_construction():
    with pytest.raises(InputError, match=r"unknown keyword 'rtoll'.*valid keywords: .*rtol"):
        pb.Solver(rtoll=1e-6)
    with pytest.raises(InputError, match=r"'cycle' for method 'sor'"):
        pb.Solver(method="sor", cycle="V")
    with pytest.raises(InputError, match=r"'presmoth'.*presmooth"):
        pb.Solver(method="mgcg", presmooth=1, postsmooth=1, presmoth=2)
    pb.Solver(method="multigrid", cycle="V", max_levels=3, coarse_sweeps=4)  # valid ones pass
    pb.Solver(cycle="W")  # auto accepts multigrid options (and then picks multigrid)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((2, 3), dtype=complex),
        np.array([["0", "0", "0"], ["1.5", "0", "0"]]),
        np.array([[b"0", b"0", b"0"], [b"1", b"0", b"0"]]),
        np.array([[0, 0, 0], [1, 0, "x"]], dtype=object),
    ],
    ids=["complex", "str", "bytes", "object-with-str"],
)
def test_positions_must_be_real_numbers(bad):
    with pytest.raises(InputError, match="positions must be real numbers"):
        pb.Atoms(bad, [0.5, -0.5], [1.5, 1.5])
    atoms = pb.Atoms([[0.0, 0.0, 0.0], [1.5, 0.0, 0.0]], [0.5, -0.5], [1.5, 1.5])
    calc = pb.ReactionFieldCalculator(atoms, spacing=0.6, backend="cpu", method="sor")
    with pytest.raises(InputError, match="positions must be real numbers"):
        calc.compute(bad)
    with pytest.raises(InputError, match="positions must be real numbers"):
        calc.compute_batch([atoms.positions, bad])


# ---------------------------------------------------------------------- one-line errors
def test_each_failure_is_one_line_without_repeated_prefix(tmp_path):
    path = tmp_path / "in.h5"
    write_input(path, n_grids=3, n=7)
    with h5py.File(path, "a") as f:
        f["grids/g1"].attrs["eps_cavity"] = -1.0
    res = run("-q", "solve", path, "-o", tmp_path / "o.h5", *FAST, "--maxiter", "1", "--grid",
              "g1", "--grid", "g2")  # fmt: skip
    assert res.exit_code == 1
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("pbsolver: error:")]
    assert len(errors) == 3, res.stderr  # g1 refused, g2 not converged, the summary
    assert errors[0] == (
        f"pbsolver: error: {path}: grid 'g1': @eps_cavity must be finite and > 0, got -1.0"
    )
    assert errors[1].startswith(f"pbsolver: error: {path}: grid 'g2': did not converge")
    assert errors[2] == "pbsolver: error: 2 of 2 grid(s) failed; 0 solved"
    for line in errors[:2]:
        assert line.count(str(path)) == 1


def test_concurrent_batch_refusal_counts_every_grid(tmp_path):
    from pbsolver.io.atomic import OutputLock

    inputs = []
    for i in range(4):
        d = tmp_path / f"in{i}"
        d.mkdir()
        write_input(d / f"f{i}.h5", n_grids=3, n=7)
        inputs.append(d / f"f{i}.h5")
    out = tmp_path / "out"
    out.mkdir()
    locks = [OutputLock(out / p.name).acquire() for p in inputs]  # "another process" writes
    try:
        res = run("batch", *inputs, "--out-dir", out, *FAST)
    finally:
        for lock in locks:
            lock.release()
    assert res.exit_code == 1
    assert "12 of 12 grid(s) failed (4 input(s) not processed)" in res.stderr
    assert res.stderr.count("another pbsolver process is writing") == 4


def test_compilation_note_once(monkeypatch, caplog):
    from pbsolver.backends.cpu import firstrun as _firstrun

    monkeypatch.setattr(_firstrun, "_noted", False)
    monkeypatch.setattr(_firstrun, "kernels_cached", lambda: False)
    with caplog.at_level(logging.INFO, logger="pbsolver"):
        assert _firstrun.note_compilation("cpu") is True
        assert _firstrun.note_compilation("cpu") is False
    notes = [r for r in caplog.records if "compiling the CPU kernels" in r.getMessage()]
    assert len(notes) == 1
    monkeypatch.setattr(_firstrun, "_noted", False)
    monkeypatch.setattr(_firstrun, "kernels_cached", lambda: True)
    assert _firstrun.note_compilation("cpu") is False


def test_kernels_cached_looks_for_index_files(tmp_path, monkeypatch):
    from pbsolver.backends.cpu import firstrun as _firstrun

    monkeypatch.setattr(_firstrun, "kernel_cache_dirs", lambda: [tmp_path / "__pycache__"])
    assert not _firstrun.kernels_cached()
    (tmp_path / "__pycache__").mkdir()
    for module in _firstrun.KERNEL_MODULES:
        Path(tmp_path / "__pycache__" / f"{module}.k-10.py311.nbi").write_bytes(b"")
    assert _firstrun.kernels_cached()
