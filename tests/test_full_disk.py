"""Writes that survive a full disk: a clean exit 1 naming the file, parts and inputs intact.

h5py 3.16 crashes the interpreter after an out-of-space error inside a gzip dataset write, so
the writers check the free space first (``pbsolver.io.safety.require_free_space``). The test
machine has no size-limited file system to fill, so the full disk is simulated: the free space
reported by ``shutil.disk_usage`` is patched, and an ``ENOSPC`` is raised from inside the HDF5
writers for the case the check cannot see coming (the disk filling during the write).
"""

from __future__ import annotations

import errno
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from _pbio import FAST, assert_readable_output, leftovers, sha256, small_problem, write_input
from click.testing import CliRunner

from pbsolver import cli
from pbsolver.io import hdf5, safety

Usage = namedtuple("Usage", "total used free")
real_disk_usage = shutil.disk_usage


def run(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


def _full_where(monkeypatch, full):
    """Report 1 KiB free for directories where ``full(directory)`` is true."""

    def fake(directory):
        if full(Path(directory)):
            return Usage(1 << 40, (1 << 40) - 1024, 1024)
        return real_disk_usage(directory)

    monkeypatch.setattr(safety.shutil, "disk_usage", fake)


def _parts(out: Path):
    parts = out.with_name(f".{out.name}.parts")
    return sorted(parts.glob("*.h5")) if parts.is_dir() else []


def _line(stderr, text):
    lines = [ln for ln in stderr.splitlines() if text in ln]
    assert lines, stderr
    assert "Traceback" not in stderr
    return lines


def test_full_disk_before_the_part_files(tmp_path, monkeypatch):
    src = tmp_path / "in.h5"
    write_input(src, n_grids=2, n=7)
    before = sha256(src)
    out = tmp_path / "out" / "o.h5"
    out.parent.mkdir()
    _full_where(monkeypatch, lambda d: True)
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 1, res.output
    lines = _line(res.stderr, "not enough free space")
    assert len(lines) == 2  # one per grid, each naming its part file
    assert all(".o.h5.parts/" in ln and "1.0 KiB free" in ln for ln in lines)
    assert not out.exists() and _parts(out) == []
    assert [p for p in leftovers(out.parent) if ".tmp" in p] == []
    assert sha256(src) == before
    monkeypatch.setattr(safety.shutil, "disk_usage", real_disk_usage)  # space freed
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 0, res.output
    assert assert_readable_output(out) == ["g0", "g1"]


def test_full_disk_before_the_output_keeps_the_parts(tmp_path, monkeypatch):
    src = tmp_path / "in.h5"
    write_input(src, n_grids=2, n=7)
    before = sha256(src)
    out = tmp_path / "out" / "o.h5"
    out.parent.mkdir()
    _full_where(monkeypatch, lambda d: not d.name.endswith(".parts"))
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 1, res.output
    (line,) = _line(res.stderr, "not enough free space")
    assert line.startswith(f"pbsolver: error: cannot write {out}: not enough free space")
    assert not out.exists()
    assert len(_parts(out)) == 2  # the solved grids wait in their part files
    assert sha256(src) == before
    monkeypatch.setattr(safety.shutil, "disk_usage", real_disk_usage)
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 0, res.output
    assert "2 already done" in res.stderr  # nothing solved again
    assert assert_readable_output(out) == ["g0", "g1"]
    assert _parts(out) == []


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_filling_during_a_part_write(tmp_path, monkeypatch):
    """The free-space check passed, then the write itself fails: a clean failure all the same."""
    src = tmp_path / "in.h5"
    write_input(src, n_grids=2, n=7)
    out = tmp_path / "o.h5"
    monkeypatch.setattr(hdf5, "write_array", _enospc)
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 1, res.output
    assert len(_line(res.stderr, "No space left on device")) == 2
    assert not out.exists() and _parts(out) == []
    assert [p for p in leftovers(tmp_path) if ".tmp" in p] == []
    monkeypatch.undo()
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 0, res.output
    assert assert_readable_output(out) == ["g0", "g1"]


def test_disk_filling_during_the_output_write(tmp_path, monkeypatch):
    src = tmp_path / "in.h5"
    write_input(src, n_grids=2, n=7)
    out = tmp_path / "o.h5"
    real_create = hdf5.create_file

    def create(path):
        if Path(path).name.startswith(".o.h5."):  # the output's temporary name, not a part
            _enospc()
        return real_create(path)

    monkeypatch.setattr(hdf5, "create_file", create)
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 1, res.output
    (line,) = _line(res.stderr, "No space left on device")
    assert f"cannot write {out}" in line
    assert not out.exists() and len(_parts(out)) == 2
    monkeypatch.undo()
    res = run("solve", src, "-o", out, *FAST)
    assert res.exit_code == 0 and "2 already done" in res.stderr, res.output


def test_write_hdf5_checks_free_space_first(tmp_path, monkeypatch):
    out = tmp_path / "o.h5"
    out.write_bytes(b"the old file")
    _full_where(monkeypatch, lambda d: True)
    with pytest.raises(OSError, match="not enough free space") as info:
        hdf5.write_hdf5(out, {"g": small_problem(9)})
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(out)
    assert out.read_bytes() == b"the old file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.h5"]


def test_batch_full_disk_exit_1_and_rerun(tmp_path, monkeypatch):
    inputs = []
    for i in range(2):
        write_input(tmp_path / f"f{i}.h5", n_grids=2, n=7)
        inputs.append(tmp_path / f"f{i}.h5")
    out = tmp_path / "out"
    _full_where(monkeypatch, lambda d: d == out)
    res = run("batch", *inputs, "--out-dir", out, *FAST)
    assert res.exit_code == 1, res.output
    assert len(_line(res.stderr, "not enough free space")) == 2  # one per output
    assert not (out / "f0.h5").exists() and not (out / "f1.h5").exists()
    monkeypatch.setattr(safety.shutil, "disk_usage", real_disk_usage)
    res = run("batch", *inputs, "--out-dir", out, *FAST)
    assert res.exit_code == 0 and "4 already done" in res.stderr, res.output
