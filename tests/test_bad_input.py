"""Bad input through the command line: one clear line, the documented exit code, no output left.

Exit codes: 1 for bad file contents and failed grids, 2 for usage errors (options, paths).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
from _pbio import FAST, PYTHON, cli_env, leftovers, visible_files, write_input
from click.testing import CliRunner

from pbsolver import cli
from pbsolver.io.dx import write_dx


def _input(tmp: Path, mutate=None) -> Path:
    """A one-grid input file g0 (7×8×9), changed by ``mutate(group)``."""
    path = tmp / "in.h5"
    write_input(path, n_grids=1, n=7)
    if mutate is not None:
        with h5py.File(path, "a") as f:
            mutate(f["grids/g0"])
    return path


def _replace(group, key, data):
    del group[key]
    group[key] = data


def _set(key, index, value):
    def mutate(g):
        data = g[key][()]
        data[index] = value
        _replace(g, key, data)

    return mutate


def _text_file(content: bytes, name="in.h5"):
    def build(tmp):
        (tmp / name).write_bytes(content)
        return tmp / name

    return build


def _truncated(tmp):
    path = _input(tmp)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _huge(tmp):
    def mutate(g):
        for key in ("epsilon", "phi_coulomb"):
            del g[key]
            g.create_dataset(key, shape=(50000, 50000, 50000), dtype="f4", chunks=(8, 8, 8))

    return _input(tmp, mutate)


def _root(mutate):
    def build(tmp):
        path = _input(tmp)
        with h5py.File(path, "a") as f:
            mutate(f)
        return path

    return build


def _group(mutate):
    return lambda tmp: _input(tmp, mutate)


def _del(key):
    def mutate(g):
        del g[key]

    return mutate


def _del_attr(key):
    def mutate(g):
        del g.attrs[key]

    return mutate


def _attr(key, value):
    def mutate(g):
        g.attrs[key] = value

    return mutate


def _faces_incomplete(g):
    eps = g["epsilon"][()]
    del g["epsilon"]
    g["epsilon_x"] = eps
    g["epsilon_y"] = eps


# (id, builder of the input, extra arguments, exit code, text expected in the error line)
SOLVE_CASES = [
    ("text-file", _text_file(b"hello, not hdf5\n" * 20), [], 1, "not an HDF5 file"),
    ("empty-file", _text_file(b""), [], 1, "not an HDF5 file"),
    ("truncated-hdf5", _truncated, [], 1, "truncated HDF5 file"),
    ("no-grids-group", _root(lambda f: f.move("grids", "stuff")), [], 1, "no /grids group"),
    ("newer-layout", _root(lambda f: f.attrs.__setitem__("pbsolver_layout", "2")), [], 1,
     "pbsolver_layout '2' is not supported"),
    ("missing-phi_coulomb", _group(_del("phi_coulomb")), [], 1, "missing dataset phi_coulomb"),
    ("missing-epsilon", _group(_del("epsilon")), [], 1, "missing dataset epsilon"),
    ("missing-origin", _group(_del_attr("origin")), [], 1, "missing attribute @origin"),
    ("missing-eps_cavity", _group(_del_attr("eps_cavity")), [], 1,
     "missing attribute @eps_cavity"),
    ("origin-2-numbers", _group(_attr("origin", [0.0, 1.0])), [], 1, "@origin must be 3"),
    ("spacing-negative", _group(_attr("spacing", [0.5, -0.5, 0.5])), [], 1,
     "@spacing must be > 0"),
    ("wrong-rank", _group(lambda g: _replace(g, "epsilon", np.ones((7, 8)))), [], 1,
     "epsilon has 2 dimension(s)"),
    ("nan-epsilon", _group(_set("epsilon", (1, 2, 3), np.nan)), [], 1,
     "epsilon must be finite"),
    ("epsilon-zero", _group(_set("epsilon", (3, 3, 3), 0.0)), [], 1, "epsilon must be > 0"),
    ("epsilon-negative", _group(_set("epsilon", (0, 0, 0), -2.0)), [], 1,
     "epsilon must be > 0, got -2.0 at node (0, 0, 0)"),
    ("nan-phi_coulomb", _group(_set("phi_coulomb", (2, 2, 2), np.nan)), [], 1,
     "phi_coulomb is NaN at node (2, 2, 2)"),
    ("mismatched-shapes", _group(lambda g: _replace(g, "phi_coulomb", np.ones((7, 8, 8)))),
     [], 1, "datasets have different shapes"),
    ("huge-declared-shape", _huge, [], 1, "more than the limit"),
    ("string-dataset", _group(lambda g: _replace(g, "epsilon", np.array([[[b"a"]]]))), [], 1,
     "a real number type is needed"),
    ("axis-order-zyx", _group(_attr("axis_order", "zyx")), [], 1, "@axis_order 'zyx'"),
    ("faces-incomplete", _group(_faces_incomplete), [], 1,
     "face maps incomplete, missing epsilon_z"),
    ("kappa2-negative", _group(lambda g: g.create_dataset("kappa2", data=-np.ones((7, 8, 9)))),
     [], 1, "kappa2 must be >= 0"),
    ("bad-boundary", _group(_attr("boundary", "open")), [], 1, "@boundary must be one of"),
    ("unknown-units", _group(lambda g: g["phi_coulomb"].attrs.__setitem__("units", "volt")),
     [], 1, "unknown potential units 'volt'"),
    ("malformed-pqr",
     _text_file(b"ATOM      1  N   ALA     1       0.000   abc   0.000  0.5000\n", "m.pqr"),
     [], 1, "malformed ATOM record"),
    ("pqr-without-atoms", _text_file(b"REMARK nothing here\n", "m.pqr"), [], 1,
     "no ATOM or HETATM records"),
]  # fmt: skip


def _one_error_line(stderr: str, text: str):
    lines = [line for line in stderr.splitlines() if text in line]
    assert len(lines) == 1, stderr
    assert "error" in lines[0]
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("build", "extra", "code", "text"),
    [c[1:] for c in SOLVE_CASES],
    ids=[c[0] for c in SOLVE_CASES],
)
def test_bad_input_file(tmp_path, build, extra, code, text):
    src = build(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(cli.main, ["solve", str(src), "-o", str(out / "o.h5"), *FAST, *extra])
    assert res.exit_code == code, res.output
    _one_error_line(res.stderr, text)
    assert visible_files(out) == [] and leftovers(out) == []


def _dx(tmp, text, name="m.dx"):
    (tmp / name).write_text(text)
    return tmp / name


DX_HEAD = (
    "object 1 class gridpositions counts {c}\norigin 0 0 0\ndelta 1 0 0\ndelta 0 1 0\n"
    "delta 0 0 1\nobject 2 class gridconnections counts {c}\n"
    "object 3 class array type double rank 0 items {n} data follows\n"
)

DX_CASES = [
    ("dx-truncated-data", DX_HEAD.format(c="3 3 3", n=27) + "1 2 3\n4 5 6\n",
     "has 6 data values, the header declares 27"),
    ("dx-not-a-number", DX_HEAD.format(c="2 2 2", n=8) + "1 2 3\n4 x 6\n7 8\n",
     "is not a number: 'x'"),
    ("dx-huge-declared", DX_HEAD.format(c="100000 100000 100000", n=10**15) + "1\n",
     "more than the limit"),
    ("dx-2d", DX_HEAD.format(c="3 3", n=9) + "1 2 3\n", "must be 3-D"),
    ("dx-garbage", "this is not\nan OpenDX file\n", "malformed OpenDX line"),
    ("dx-binary", "\x00\x01\x02\xff\xfe" * 10, "not an OpenDX text file"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "text"), [c[1:] for c in DX_CASES], ids=[c[0] for c in DX_CASES]
)
def test_malformed_dx(tmp_path, content, text):
    path = tmp_path / "m.dx"
    if content.startswith("\x00"):
        path.write_bytes(content.encode("latin-1"))
    else:
        path.write_text(content)
    res = CliRunner().invoke(cli.main, ["info", str(path)])
    assert res.exit_code == 1, res.output
    _one_error_line(res.stderr, text)


def test_valid_dx_is_read(tmp_path):
    import pbsolver as pb

    write_dx(tmp_path / "ok.dx", np.ones((3, 4, 5)), pb.Grid((3, 4, 5)))
    res = CliRunner().invoke(cli.main, ["info", str(tmp_path / "ok.dx")])
    assert res.exit_code == 0 and "[3, 4, 5]" in res.stdout


# ---------------------------------------------------------------------- usage errors (exit 2)
USAGE_CASES = [
    ("missing-input", ["solve", "{tmp}/nope.h5", "-o", "{out}/o.h5"], "does not exist"),
    ("output-dir-missing", ["solve", "{src}", "-o", "{tmp}/no/such/dir/o.h5"],
     "does not exist"),
    ("output-is-input", ["solve", "{src}", "-o", "{src}"], "is the input"),
    ("output-is-a-directory", ["solve", "{src}", "-o", "{out}"], "is a directory"),
    ("out-dir-is-a-file", ["batch", "{src}", "--out-dir", "{src}"], "--out-dir"),
    ("rtol-negative", ["solve", "{src}", "-o", "{out}/o.h5", "--rtol", "-1"], "--rtol"),
    ("rtol-not-a-number", ["solve", "{src}", "-o", "{out}/o.h5", "--rtol", "tiny"], "--rtol"),
    ("method-unknown", ["solve", "{src}", "-o", "{out}/o.h5", "--method", "magic"],
     "method must be"),
    ("maxiter-zero", ["solve", "{src}", "-o", "{out}/o.h5", "--maxiter", "0"], "--maxiter"),
    ("backend-unknown", ["solve", "{src}", "-o", "{out}/o.h5", "--backend", "gpu"],
     "--backend"),
    ("dtype-unknown", ["solve", "{src}", "-o", "{out}/o.h5", "--dtype", "float16"], "--dtype"),
    ("spacing-negative", ["solve", "{src}", "-o", "{out}/o.h5", "--spacing", "-0.5"],
     "--spacing"),
    ("workers-zero", ["batch", "{src}", "--out-dir", "{out}", "--workers", "0"], "--workers"),
    ("scheduler-and-local-cluster",
     ["batch", "{src}", "--out-dir", "{out}", "--scheduler", "tcp://x:1", "--local-cluster",
      "2"], "not both"),
    ("gpus-not-ids", ["batch", "{src}", "--out-dir", "{out}", "--workers", "2", "--gpus", "a,b"],
     "--gpus"),
    ("same-output-twice", ["batch", "{src}", "{tmp}/d/in.h5", "--out-dir", "{out}"],
     "would both write"),
    ("unknown-option", ["solve", "{src}", "-o", "{out}/o.h5", "--colour", "red"], "--colour"),
    ("export-unknown-suffix", ["export", "{src}", "-o", "{out}/x.txt"],
     "cannot tell the format"),
    ("missing-required-output", ["solve", "{src}"], "--output"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "text"), [c[1:] for c in USAGE_CASES], ids=[c[0] for c in USAGE_CASES]
)
def test_usage_error_exit_2(tmp_path, args, text):
    src = _input(tmp_path)
    (tmp_path / "d").mkdir()
    _input(tmp_path / "d")
    out = tmp_path / "out"
    out.mkdir()
    before = src.read_bytes()
    fmt = {"tmp": tmp_path, "src": src, "out": out}
    res = CliRunner().invoke(cli.main, [a.format(**fmt) for a in args])
    assert res.exit_code == 2, res.output
    _one_error_line(res.stderr, text)
    assert "usage error" in res.stderr
    assert visible_files(out) == [] and leftovers(out) == []
    assert src.read_bytes() == before


# ---------------------------------------------------------------------- export errors (exit 1)
@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--grid", "g0", "--dataset", "reaction_field"], "no dataset 'reaction_field'"),
        (["--grid", "nope"], "no grid 'nope'"),
        (["--grid", "g0", "--dataset", "potential"], "no dataset 'reaction_field'"),
    ],
    ids=["unsolved-grid", "unknown-grid", "potential-unsolved"],
)
def test_export_errors_exit_1(tmp_path, args, text):
    src = _input(tmp_path)
    res = CliRunner().invoke(cli.main, ["export", str(src), *args, "-o", str(tmp_path / "x.dx")])
    assert res.exit_code == 1, res.output
    _one_error_line(res.stderr, text)
    assert not (tmp_path / "x.dx").exists()


def test_output_in_the_way_is_a_usage_error(tmp_path):
    src = _input(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "in.h5").mkdir()  # a directory where the output file should go
    res = CliRunner().invoke(cli.main, ["batch", str(src), "--out-dir", str(out), *FAST])
    assert res.exit_code == 2, res.output
    _one_error_line(res.stderr, "is a directory")
    assert visible_files(out) == ["in.h5"] and leftovers(out) == []


def test_unwritable_directory_fails_that_input_only(tmp_path, monkeypatch):
    """run_batch: an output that cannot be written is that input's failure, named."""
    from pbsolver.io import atomic as _atomic
    from pbsolver.jobs.batch import SolveOptions, run_batch

    a = _input(tmp_path)
    (tmp_path / "b").mkdir()
    b = _input(tmp_path / "b")

    def refuse(self):
        if self.path.parent.name == "unwritable":
            raise PermissionError(13, "Permission denied")
        return real(self)

    real = _atomic.OutputLock.acquire
    monkeypatch.setattr(_atomic.OutputLock, "acquire", refuse)
    (tmp_path / "unwritable").mkdir()
    (tmp_path / "ok").mkdir()
    report = run_batch(
        [(a, tmp_path / "unwritable" / "in.h5"), (b, tmp_path / "ok" / "in.h5")],
        solve=SolveOptions(method="sor", backend="cpu", rtol=1e-4),
    )
    assert [s.grid for s in report.failed] == ["*"]
    assert "Permission denied" in report.failed[0].reason
    assert len(report.solved) == 1 and (tmp_path / "ok" / "in.h5").is_file()
    assert visible_files(tmp_path / "unwritable") == []


def test_real_process_bad_input_one_line_no_traceback(tmp_path):
    _truncated(tmp_path)
    proc = subprocess.run(
        [PYTHON, "-m", "pbsolver", "-q", "solve", "in.h5", "-o", "out.h5", *FAST],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0].startswith("pbsolver: error: in.h5: truncated HDF5 file")
    assert not (tmp_path / "out.h5").exists() and leftovers(tmp_path) == []
