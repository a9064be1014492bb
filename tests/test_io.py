"""HDF5 (DESIGN §6 layout), OpenDX and MRC: round trips, layout details, limits, atomicity."""

from __future__ import annotations

import gzip

import h5py
import numpy as np
import pytest
from _pbio import sha256, small_problem

import pbsolver as pb
from pbsolver.io import dx, hdf5, mrc
from pbsolver.io.units import kT_kj_per_mol, potential_scale


def _same_problem(a: pb.Problem, b: pb.Problem):
    assert a.grid == b.grid
    assert a.eps_cavity == b.eps_cavity
    assert a.boundary == b.boundary
    assert a.face_rule == b.face_rule
    if a.epsilon is not None:
        np.testing.assert_array_equal(a.epsilon, b.epsilon)
        assert b.epsilon_faces is None
    else:
        for fa, fb in zip(a.epsilon_faces, b.epsilon_faces, strict=True):
            np.testing.assert_array_equal(fa, fb)
    np.testing.assert_array_equal(a.phi_coulomb, b.phi_coulomb)
    for key in ("kappa2", "boundary_values"):
        va, vb = getattr(a, key), getattr(b, key)
        assert (va is None) == (vb is None)
        if va is not None:
            np.testing.assert_array_equal(va, vb)


# ---------------------------------------------------------------------- HDF5
def test_hdf5_round_trip_every_input_kind(tmp_path):
    bv = np.zeros((7, 8, 9), dtype=np.float32)
    bv[0] = 1.5
    node = small_problem(7)
    problems = {
        "node": node,
        "faces": small_problem(7, seed=1, faces=True),
        "salt_periodic": small_problem(shape=(8, 8, 6), seed=2, salt=True, boundary="periodic"),
        "harmonic": pb.Problem(
            node.grid, node.epsilon, node.phi_coulomb, 2.0, face_rule="harmonic"
        ),
        "bv": pb.Problem(node.grid, node.epsilon, node.phi_coulomb, 2.0, boundary_values=bv),
    }
    path = hdf5.write_hdf5(tmp_path / "in.h5", problems)
    back = pb.read_hdf5(path)
    assert list(back) == list(problems)  # file order = written order
    for name, p in problems.items():
        _same_problem(p, back[name])
    _same_problem(problems["faces"], pb.read_hdf5(path, "faces"))


def test_hdf5_layout_attributes_units_and_compression(tmp_path):
    p = small_problem(7, faces=True, salt=True)
    res = pb.solve(p, method="sor", backend="cpu", rtol=1e-4)
    path = hdf5.write_hdf5(tmp_path / "out.h5", {"a": p}, {"a": res})
    with h5py.File(path, "r") as f:
        assert f.attrs["pbsolver_layout"] == "1"
        assert f.attrs["creator"] == f"pbsolver {pb.__version__}"
        g = f["grids/a"]
        np.testing.assert_array_equal(g.attrs["origin"], p.grid.origin)
        np.testing.assert_array_equal(g.attrs["spacing"], p.grid.spacing)
        assert g.attrs["origin"].dtype == np.float64
        assert g.attrs["axis_order"] == "xyz"
        assert g.attrs["eps_cavity"] == 2.0
        assert g.attrs["boundary"] == "dirichlet"
        assert set(g) == {
            "epsilon_x", "epsilon_y", "epsilon_z", "phi_coulomb", "kappa2", "reaction_field",
            "solver",
        }  # fmt: skip
        for key in ("epsilon_x", "phi_coulomb", "kappa2", "reaction_field"):
            d = g[key]
            assert d.dtype == np.float32
            assert d.compression == "gzip"
            assert d.shuffle
        assert g["phi_coulomb"].attrs["units"] == "kJ/mol/e"
        assert g["reaction_field"].attrs["units"] == "kJ/mol/e"
        s = g["solver"].attrs
        for key in ("method", "backend", "iterations", "residual", "converged", "seconds"):
            assert key in s
        assert s["version"] == pb.__version__
        assert s["method"] == "sor"
        assert s["backend"] == "cpu"
        assert bool(s["converged"])
        np.testing.assert_allclose(g["solver/residual_norms"][()], res.residual_norms)
    rf, grid, solver = hdf5.read_result(path, "a")
    assert grid == p.grid
    np.testing.assert_allclose(rf, res.phi_rf, rtol=1e-6, atol=1e-4)
    assert solver["iterations"] == res.iterations


def test_hdf5_results_only_and_float64_results(tmp_path):
    p = small_problem(7)
    res = pb.solve(p, method="sor", backend="cpu", rtol=1e-4, dtype=np.float64)
    path = hdf5.write_hdf5(tmp_path / "r.h5", p, res, results_only=True, result_dtype=np.float64)
    with h5py.File(path, "r") as f:
        assert set(f["grids/grid"]) == {"reaction_field", "solver"}
        assert f["grids/grid/reaction_field"].dtype == np.float64
    entries = hdf5.inspect_hdf5(path)
    ((name, info, err),) = entries
    assert err is None and info.solved and not info.has_inputs
    with pytest.raises(pb.InputError, match="missing dataset phi_coulomb"):
        pb.read_hdf5(path, "grid")


def test_hdf5_reads_files_written_by_other_tools(tmp_path):
    """Plain h5py, no layout tag, scalar spacing, potentials in kT/e at 310 K."""
    p = small_problem(7)
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("grids/frame_000001")
        g.attrs["origin"] = list(p.grid.origin)
        g.attrs["spacing"] = 0.6
        g.attrs["eps_cavity"] = 2
        g["epsilon"] = p.epsilon.astype(np.float64)
        d = g.create_dataset("phi_coulomb", data=p.phi_coulomb / kT_kj_per_mol(310.0))
        d.attrs["units"] = b"kT/e"
        d.attrs["temperature_K"] = 310.0
        g["not_a_layout_dataset"] = np.arange(3)
        f.create_group("grids_extra")
    q = pb.read_hdf5(path, "frame_000001")
    assert q.grid == p.grid
    np.testing.assert_allclose(q.phi_coulomb, p.phi_coulomb, rtol=1e-6)
    assert q.boundary == "dirichlet"


def test_hdf5_declared_size_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("grids/big")
        g.attrs["origin"] = [0.0, 0, 0]
        g.attrs["spacing"] = [1.0, 1, 1]
        g.attrs["eps_cavity"] = 2.0
        for key in ("epsilon", "phi_coulomb"):  # 64 Ti nodes declared, nothing stored
            g.create_dataset(key, shape=(40000, 40000, 40000), dtype="f4", chunks=(8, 8, 8))
    assert path.stat().st_size < 100_000

    def no_reads(self, *args, **kwargs):
        raise AssertionError("data read before the size check")

    monkeypatch.setattr(h5py.Dataset, "__getitem__", no_reads)
    with pytest.raises(pb.InputError, match="more than the limit"):
        pb.read_hdf5(path)
    # the limit is configurable: small grids pass or fail by it
    small = tmp_path / "s.h5"
    monkeypatch.undo()
    hdf5.write_hdf5(small, small_problem(7))
    with pytest.raises(pb.InputError, match="limit of 100"):
        pb.read_hdf5(small, max_points=100)
    monkeypatch.setenv("PBSOLVER_MAX_POINTS", "100")
    with pytest.raises(pb.InputError, match="limit of 100"):
        pb.read_hdf5(small)
    monkeypatch.setenv("PBSOLVER_MAX_POINTS", "10000")
    assert pb.read_hdf5(small, "grid").grid.shape == (7, 8, 9)


def test_hdf5_write_is_atomic(tmp_path):
    path = tmp_path / "x.h5"
    hdf5.write_hdf5(path, small_problem(7))
    before = sha256(path)
    with pytest.raises(pb.InputError, match="not a Problem"):
        hdf5.write_hdf5(path, {"ok": small_problem(7), "bad": "nope"})
    assert sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"]


def test_hdf5_grid_names_and_metadata_listing(tmp_path):
    path = tmp_path / "m.h5"
    hdf5.write_hdf5(path, {f"n{i}": small_problem(7, seed=i) for i in (3, 1, 2)})
    assert hdf5.list_grids(path) == ["n3", "n1", "n2"]
    with pytest.raises(pb.InputError, match="without '/'"):
        hdf5.write_hdf5(tmp_path / "bad.h5", {"a/b": small_problem(7)})


# ---------------------------------------------------------------------- units
def test_kT_conversion_constant():
    assert kT_kj_per_mol(298.15) == pytest.approx(2.478957, abs=1e-6)
    assert potential_scale("kJ/mol/e") == 1.0
    assert potential_scale(None) == 1.0
    assert potential_scale("kT/e", 300.0) == pytest.approx(8.314462618e-3 * 300.0)
    with pytest.raises(pb.InputError, match="unknown potential units"):
        potential_scale("volt")
    with pytest.raises(pb.InputError, match="temperature"):
        kT_kj_per_mol(-1)


# ---------------------------------------------------------------------- OpenDX
@pytest.mark.parametrize("suffix", [".dx", ".dx.gz"])
def test_dx_round_trip_through_griddata(tmp_path, suffix):
    import gridData

    grid = pb.Grid((5, 6, 7), spacing=(0.5, 0.6, 0.7), origin=(1.23, -4.56, 7.0))
    values = np.random.default_rng(1).normal(size=grid.shape) * 10
    path = dx.write_dx(tmp_path / f"phi{suffix}", values, grid)
    g = gridData.Grid(str(path))
    assert g.grid.shape == grid.shape
    np.testing.assert_allclose(g.origin, grid.origin)
    np.testing.assert_allclose(g.delta, grid.spacing)
    np.testing.assert_allclose(g.grid * kT_kj_per_mol(298.15), values, rtol=1e-12, atol=1e-12)
    back, grid2 = pb.read_dx(path)  # header says kT/e: converted back to kJ/mol/e
    assert grid2 == grid
    np.testing.assert_allclose(back, values, rtol=1e-12, atol=1e-12)
    opener = gzip.open if suffix.endswith(".gz") else open
    with opener(path, "rt") as fh:
        head = fh.read(600)
    assert "POTENTIAL (kT/e)" in head
    assert "298.15 K" in head
    assert 'type "double"' in head


@pytest.mark.parametrize("dx_type", ["double", "float"])
@pytest.mark.parametrize("shape", [(3, 3, 3), (5, 4, 7), (5, 5, 4), (97, 31, 70)])
def test_dx_bytes_equal_griddataformats_writer(tmp_path, shape, dx_type, monkeypatch):
    """The block-of-rows writer writes GridDataFormats' own bytes (n % 3 = 0, 1, 2 and more
    values than one block), values over 16 decades; gzip holds the same text."""
    from gridData import OpenDX

    monkeypatch.setattr(dx, "_CHUNK", 3 * 1024)  # several blocks on the larger shape
    rng = np.random.default_rng(sum(shape))
    grid = pb.Grid(shape, spacing=(0.37, 0.5, 1.1), origin=(-1.5, 2.25, 0.1))
    values = rng.normal(0, 5, shape) * 10.0 ** rng.integers(-8, 8, shape)
    ours = dx.write_dx(tmp_path / "ours.dx", values, grid, potential=False, dx_type=dx_type)
    comments = ["MAP", f"written by pbsolver {pb.__version__}; origin = centre of node [0,0,0], "
                "z fastest"]  # fmt: skip
    field = OpenDX.field(
        "density",
        components={
            "positions": OpenDX.gridpositions(1, grid.shape, grid.origin, grid.spacing),
            "connections": OpenDX.gridconnections(2, grid.shape),
            "data": OpenDX.array(3, values, type=dx_type),
        },
        comments=comments,
    )
    field.write(str(tmp_path / "theirs.dx"))
    assert ours.read_bytes() == (tmp_path / "theirs.dx").read_bytes()
    packed = dx.write_dx(tmp_path / "ours.dx.gz", values, grid, potential=False, dx_type=dx_type)
    assert gzip.decompress(packed.read_bytes()) == ours.read_bytes()


def test_dx_temperature_and_raw_maps(tmp_path):
    grid = pb.Grid((4, 4, 4), spacing=1.0)
    values = np.arange(64.0).reshape(4, 4, 4) + 1
    path = dx.write_dx(tmp_path / "t.dx", values, grid, temperature=310.0)
    raw, _ = pb.read_dx(path, potential=False)
    np.testing.assert_allclose(raw, values / kT_kj_per_mol(310.0))
    back, _ = pb.read_dx(path)  # the header's temperature is used
    np.testing.assert_allclose(back, values)
    path = dx.write_dx(tmp_path / "eps.dx", values, grid, potential=False)
    back, _ = pb.read_dx(path)
    np.testing.assert_allclose(back, values)
    with pytest.raises(pb.InputError, match="not finite"):
        dx.write_dx(tmp_path / "inf.dx", np.full((4, 4, 4), np.inf), grid)
    assert not (tmp_path / "inf.dx").exists()


def test_dx_reads_apbs_style_file(tmp_path):
    grid_vals = np.linspace(-1, 1, 27).reshape(3, 3, 3)
    text = ["# Data from APBS 3.4.1", "#", "# POTENTIAL (kT/e)", "#"]
    text += [
        "object 1 class gridpositions counts 3 3 3",
        "origin -1.000000e+00 -1.000000e+00 -1.000000e+00",
        "delta 1.000000e+00 0.000000e+00 0.000000e+00",
        "delta 0.000000e+00 1.000000e+00 0.000000e+00",
        "delta 0.000000e+00 0.000000e+00 1.000000e+00",
        "object 2 class gridconnections counts 3 3 3",
        "object 3 class array type double rank 0 items 27 data follows",
    ]
    flat = grid_vals.ravel()
    text += [" ".join(f"{v:e}" for v in flat[i : i + 3]) for i in range(0, 27, 3)]
    text += ["attribute \"dep\" string \"positions\"",
             "object \"regular positions regular connections\" class field",
             "component \"positions\" value 1", "component \"connections\" value 2",
             "component \"data\" value 3"]  # fmt: skip
    path = tmp_path / "pot.dx"
    path.write_text("\n".join(text) + "\n")
    values, grid = pb.read_dx(path)
    assert grid == pb.Grid((3, 3, 3), spacing=1.0, origin=(-1, -1, -1))
    np.testing.assert_allclose(values, grid_vals * kT_kj_per_mol(298.15), rtol=1e-6)


# ---------------------------------------------------------------------- MRC
def test_mrc_round_trip_keeps_exact_origin(tmp_path):
    import gridData

    grid = pb.Grid((5, 6, 7), spacing=(0.5, 0.6, 0.7), origin=(1.23, -4.56, 7.0))
    values = np.random.default_rng(2).normal(size=grid.shape)
    path = mrc.write_mrc(tmp_path / "phi.mrc", values, grid)
    back, g2 = mrc.read_mrc(path, potential=True)
    np.testing.assert_allclose(g2.origin, grid.origin, atol=1e-5)
    np.testing.assert_allclose(g2.spacing, grid.spacing, atol=1e-6)
    np.testing.assert_allclose(back, values, rtol=1e-6, atol=1e-6)
    g = gridData.Grid(str(path))
    assert g.grid.shape == grid.shape
    np.testing.assert_allclose(g.origin, grid.origin, atol=1e-5)
