"""Hostile HDF5 inputs: data stored outside the file is never read, bad grid names never solved.

Each hostile file is built here: a dataset with external raw storage pointing at a file of known
secret bytes, external links (absolute and ``../``) to another HDF5 file holding a valid grid,
a virtual dataset, dangling soft links, and a grid named ``..``. Every refusal is one line, exit
1, leaves no output and the input unchanged.
"""

from __future__ import annotations

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

SHAPE = (7, 8, 9)
SECRET = b"TOP-SECRET-" * 1000


def _secret(tmp: Path) -> Path:
    path = tmp / "secret.bin"
    path.write_bytes(SECRET[: 4 * int(np.prod(SHAPE))])
    return path


def _other_file(path: Path) -> Path:
    """A valid grid file elsewhere: what an external link points at."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_input(path, n_grids=1, n=7)
    return path


def _replace_with(group, key, make):
    del group[key]
    make(group, key)


def external_storage(tmp):
    secret = _secret(tmp)

    def make(g, key):
        g.create_dataset(
            key, shape=SHAPE, dtype="f4", external=[(str(secret), 0, secret.stat().st_size)]
        )

    return make


def external_link_absolute(tmp):
    other = _other_file(tmp / "elsewhere" / "other.h5")
    return lambda g, key: g.__setitem__(key, h5py.ExternalLink(str(other), f"/grids/g0/{key}"))


def external_link_relative(tmp):
    _other_file(tmp / "other.h5")  # the input lives in tmp/in/, so "../other.h5"
    return lambda g, key: g.__setitem__(key, h5py.ExternalLink("../other.h5", f"/grids/g0/{key}"))


def virtual_dataset(tmp):
    other = _other_file(tmp / "other.h5")

    def make(g, key):
        layout = h5py.VirtualLayout(shape=SHAPE, dtype="f4")
        layout[:] = h5py.VirtualSource(str(other), f"/grids/g0/{key}", shape=SHAPE)
        g.create_virtual_dataset(key, layout)

    return make


def dangling_soft_link(tmp):
    return lambda g, key: g.__setitem__(key, h5py.SoftLink("/nowhere/at/all"))


DATASET_CASES = [
    ("external-raw-storage", external_storage, "stores its data in external file"),
    ("external-link-absolute", external_link_absolute, "is an external link to"),
    ("external-link-relative", external_link_relative, "is an external link to ../other.h5"),
    ("virtual-dataset", virtual_dataset, "is a virtual dataset"),
    ("dangling-soft-link", dangling_soft_link, "dangling soft link"),
]


def _hostile_input(tmp: Path, maker, key="epsilon") -> Path:
    """tmp/in/in.h5: two valid grids g0, g1, then g1's ``key`` replaced by ``maker``."""
    d = tmp / "in"
    d.mkdir()
    path = d / "in.h5"
    write_input(path, n_grids=2, n=7)
    make = maker(tmp)
    with h5py.File(path, "a") as f:
        _replace_with(f["grids/g1"], key, make)
    return path


def _one_line(stderr: str, text: str):
    lines = [ln for ln in stderr.splitlines() if text in ln]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def _output_has_no_secret(directory: Path):
    for p in directory.rglob("*"):
        if p.is_file():
            assert b"TOP-SECRET" not in p.read_bytes(), p


@pytest.mark.parametrize(
    ("maker", "text"), [c[1:] for c in DATASET_CASES], ids=[c[0] for c in DATASET_CASES]
)
def test_python_readers_refuse(tmp_path, maker, text):
    src = _hostile_input(tmp_path, maker)
    before = sha256(src)
    with pytest.raises(InputError, match=text):
        hdf5.read_hdf5(src)
    with pytest.raises(InputError, match=text):
        hdf5.read_problem(src, "g1")
    with pytest.raises(InputError, match=text):
        hdf5.read_dataset(src, "g1", "epsilon")
    # the valid grid of the same file is still read
    assert hdf5.read_problem(src, "g0").grid.shape == SHAPE
    entries = {name: err for name, _, err in hdf5.inspect_hdf5(src)}
    assert entries["g0"] is None and text in entries["g1"]
    assert sha256(src) == before


def test_phi_coulomb_external_storage_is_refused_too(tmp_path):
    src = _hostile_input(tmp_path, external_storage, key="phi_coulomb")
    with pytest.raises(InputError, match="phi_coulomb stores its data in external file"):
        hdf5.read_problem(src, "g1")


@pytest.mark.parametrize(
    ("maker", "text"), [c[1:] for c in DATASET_CASES], ids=[c[0] for c in DATASET_CASES]
)
def test_solve_refuses_the_grid_and_copies_nothing(tmp_path, maker, text):
    src = _hostile_input(tmp_path, maker)
    before = sha256(src)
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(
        cli.main, ["solve", str(src), "-o", str(out / "o.h5"), "--grid", "g1", *FAST]
    )
    assert res.exit_code == 1, res.output
    line = _one_line(res.stderr, text)
    assert "grid 'g1'" in line and line.startswith("pbsolver: error: ")
    assert visible_files(out) == [] and leftovers(out) == []
    assert sha256(src) == before


def test_batch_solves_the_valid_grid_never_the_hostile_one(tmp_path):
    src = _hostile_input(tmp_path, external_storage)
    before = sha256(src)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli.main, ["batch", str(src), "--out-dir", str(out), *FAST])
    assert res.exit_code == 1, res.output
    _one_line(res.stderr, "stores its data in external file")
    assert hdf5.list_grids(out / "in.h5") == ["g0"]
    _output_has_no_secret(out)
    assert sha256(src) == before


@pytest.mark.parametrize(
    ("maker", "text"), [c[1:] for c in DATASET_CASES], ids=[c[0] for c in DATASET_CASES]
)
def test_info_reports_the_grid_refused_and_exits_1(tmp_path, maker, text):
    src = _hostile_input(tmp_path, maker)
    res = CliRunner().invoke(cli.main, ["info", str(src)])
    assert res.exit_code == 1, res.output
    assert "g1: INVALID" in res.stdout and text in res.stdout
    assert "g0: 7×8×9" in res.stdout


def _linked_group(tmp: Path, where: str) -> Path:
    """An input whose grid group (``where="grid"``) or /grids (``"grids"``) is an external link."""
    other = _other_file(tmp / "elsewhere.h5")
    path = tmp / "in.h5"
    with h5py.File(path, "w") as f:
        f.attrs["pbsolver_layout"] = "1"
        if where == "grids":
            f["grids"] = h5py.ExternalLink(str(other), "/grids")
        else:
            f.create_group("grids")
            f["grids/g0"] = h5py.ExternalLink(str(other), "/grids/g0")
    return path


@pytest.mark.parametrize("where", ["grid", "grids"])
def test_linked_groups_are_refused_everywhere(tmp_path, where):
    src = _linked_group(tmp_path, where)
    before = sha256(src)
    with pytest.raises(InputError, match="is an external link to"):
        hdf5.read_hdf5(src)
    with pytest.raises(InputError, match="is an external link to"):
        hdf5.list_grids(src)
    out = tmp_path / "out"
    for args in (
        ["solve", str(src), "-o", str(out / "o.h5"), *FAST],
        ["batch", str(src), "--out-dir", str(out), *FAST],
        ["info", str(src)],
    ):
        out.mkdir(exist_ok=True)
        res = CliRunner().invoke(cli.main, args)
        assert res.exit_code == 1, (args, res.output)
        _one_line(res.stderr, "is an external link to")
        assert visible_files(out) == [] and leftovers(out) == []
    assert sha256(src) == before


def test_soft_link_inside_the_file_is_read(tmp_path):
    """A soft link to another grid's dataset of the same file stores nothing elsewhere: read."""
    path = tmp_path / "in.h5"
    problems = write_input(path, n_grids=2, n=7)
    with h5py.File(path, "a") as f:
        del f["grids/g1/epsilon"]
        f["grids/g1/epsilon"] = h5py.SoftLink("/grids/g0/epsilon")
    p = hdf5.read_problem(path, "g1")
    np.testing.assert_array_equal(p.epsilon, problems["g0"].epsilon)


def test_soft_link_through_an_external_link_is_refused(tmp_path):
    other = _other_file(tmp_path / "other.h5")
    path = tmp_path / "in.h5"
    write_input(path, n_grids=1, n=7)
    with h5py.File(path, "a") as f:
        f["elsewhere"] = h5py.ExternalLink(str(other), "/grids")
        del f["grids/g0/epsilon"]
        f["grids/g0/epsilon"] = h5py.SoftLink("/elsewhere/g0/epsilon")
    with pytest.raises(InputError, match="leads to another file"):
        hdf5.read_problem(path, "g0")


# ---------------------------------------------------------------------- grid names
def test_grid_named_dotdot_is_refused_before_any_solve(tmp_path, monkeypatch):
    path = tmp_path / "in.h5"
    write_input(path, n_grids=1, n=7)
    with h5py.File(path, "a") as f:
        f.copy(f["grids/g0"], f["grids"], name="..")
    assert ".." in hdf5.list_grids(path)
    with pytest.raises(InputError, match=r"grid name '\.\.' is not usable"):
        hdf5.read_problem(path, "..")
    solved = []
    real = pb.Solver.solve
    monkeypatch.setattr(
        pb.Solver, "solve", lambda self, p, **kw: solved.append(p) or real(self, p, **kw)
    )
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(
        cli.main, ["solve", str(path), "-o", str(out / "o.h5"), "--grid", "..", *FAST]
    )
    assert res.exit_code == 1, res.output
    _one_line(res.stderr, "is not usable")
    assert solved == []
    assert visible_files(out) == [] and leftovers(out) == []


def test_write_hdf5_refuses_unusable_names(tmp_path):
    with pytest.raises(InputError, match="grid name"):
        hdf5.write_hdf5(tmp_path / "o.h5", {"..": small_problem(7)})
    assert not (tmp_path / "o.h5").exists()
