"""Example data paths, plot helpers (Agg backend) and the Jupyter reprs."""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
from pbsolver import data as pbdata

mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def born():
    """A small Born-ion problem and its SOR solution."""
    from pbsolver.demo import born_problem

    problem = born_problem(spacing=1.0, half_width=8.0)
    result = pb.solve(problem, method="sor", backend="cpu")
    return problem, result


# ---------------------------------------------------------------------- data
def test_data_list_and_path():
    names = pb.data.list()
    assert names, "the data folder ships at least its README"
    assert names == sorted(names)
    for name in names:
        p = pb.data.path(name)
        assert p.is_file() and p.is_absolute()
    assert "README.md" in names


def test_data_unknown_name_lists_available():
    with pytest.raises(pb.InputError, match="available: .*README.md"):
        pb.data.path("no_such_file.pqr")
    with pytest.raises(pb.InputError, match="non-empty string"):
        pb.data.path("")


def test_data_prefers_wheel_layout(tmp_path, monkeypatch):
    """An installed wheel carries the files as pbsolver/_data: that folder is used."""
    wheel_data = tmp_path / "_data"
    (wheel_data / "sub").mkdir(parents=True)
    (wheel_data / "a.pqr").write_text("x")
    (wheel_data / "sub" / "b.h5").write_text("y")
    (wheel_data / ".hidden").write_text("z")
    monkeypatch.setattr(pbdata, "_CANDIDATES", (wheel_data, tmp_path / "missing"))
    assert pbdata.list() == ["a.pqr", "sub/b.h5"]
    assert pbdata.path("sub/b.h5") == wheel_data / "sub" / "b.h5"
    monkeypatch.setattr(pbdata, "_CANDIDATES", (tmp_path / "none1", tmp_path / "none2"))
    with pytest.raises(FileNotFoundError, match="data folder is missing"):
        pbdata.list()


def test_pyproject_ships_data_in_wheel():
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("not a source checkout")
    cfg = tomllib.loads(pyproject.read_text())
    force = cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force["data"] == "pbsolver/_data"
    extras = cfg["project"]["optional-dependencies"]
    assert any(req.startswith("matplotlib") for req in extras["plot"])
    assert any(req.startswith("nbmake") for req in extras["test"])


# ---------------------------------------------------------------------- plot_slice
@pytest.mark.parametrize(
    ("axis", "xlabel", "ylabel"),
    [("z", "x (Å)", "y (Å)"), ("y", "x (Å)", "z (Å)"), (0, "y (Å)", "z (Å)")],
)
def test_plot_slice_labels_and_units(born, axis, xlabel, ylabel):
    problem, result = born
    ax = pb.plot.plot_slice(problem.grid, result.phi_rf, axis=axis, label="φ_rf")
    assert ax.get_xlabel() == xlabel
    assert ax.get_ylabel() == ylabel
    image = ax.images[0]
    assert image.colorbar.ax.get_ylabel() == "φ_rf (kJ mol⁻¹ e⁻¹)"
    # the middle plane, drawn in Å with node centres inside the extent
    g = problem.grid
    x0, x1, y0, y1 = image.get_extent()
    u = [i for i in range(3) if i != pb.plot._axis_number(axis)][0]
    assert x0 == pytest.approx(g.origin[u] - 0.5 * g.spacing[u])
    assert x1 == pytest.approx(g.origin[u] + (g.shape[u] - 0.5) * g.spacing[u])
    k = g.shape[pb.plot._axis_number(axis)] // 2
    np.testing.assert_allclose(
        image.get_array().T, np.take(result.phi_rf, k, axis=pb.plot._axis_number(axis))
    )


def test_plot_slice_outline_atoms_and_position(born):
    problem, result = born
    g = problem.grid
    atoms = (np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 10.0]]), np.array([3.0, 1.0]))
    fig, axes = plt.subplots(1, 2)
    ax = pb.plot.plot_slice(
        g,
        problem.epsilon,
        position=0.0,
        atoms=atoms,
        outline=problem.epsilon,
        ax=axes[1],
        units="",
        label="ε",
        cmap="magma",
    )
    assert ax is axes[1] and ax.figure is fig
    assert ax.images[0].colorbar.ax.get_ylabel() == "ε"
    assert ax.get_title() == "z = 0.00 Å (k = 8)"
    assert ax.collections, "outline contour and atom circles are drawn"
    from matplotlib.collections import EllipseCollection

    circles = [c for c in ax.collections if isinstance(c, EllipseCollection)]
    # the far atom is not cut; each circle is drawn twice (light halo, dark line)
    assert len(circles) == 2 and all(len(c.get_offsets()) == 1 for c in circles)
    # positive-only data: sequential colours, not symmetric about zero
    lo, hi = ax.images[0].get_clim()
    assert lo == pytest.approx(1.0) and hi == pytest.approx(78.54)


def test_plot_slice_symmetric_for_signed_data():
    g = pb.Grid((5, 6, 7), spacing=(0.5, 0.6, 0.7))
    values = np.linspace(-3.0, 1.0, g.size).reshape(g.shape)
    ax = pb.plot.plot_slice(g, values, axis="z", index=-1, units="kT/e")
    lo, hi = ax.images[0].get_clim()
    assert lo == -hi and hi > 0
    assert ax.images[0].get_cmap().name == "RdBu_r"
    assert ax.images[0].colorbar.ax.get_ylabel() == "kT/e"
    assert ax.get_title().endswith("(k = 6)")
    ax = pb.plot.plot_slice(g, values, axis="x", index=0, units="kT/e")  # all negative
    assert ax.images[0].get_cmap().name == "viridis"


def test_plot_slice_bad_input(born):
    problem, result = born
    g = problem.grid
    with pytest.raises(pb.InputError, match="axis"):
        pb.plot.plot_slice(g, result.phi_rf, axis="w")
    with pytest.raises(pb.InputError, match="shape"):
        pb.plot.plot_slice(g, np.zeros((3, 3, 3)))
    with pytest.raises(pb.InputError, match="outside the grid"):
        pb.plot.plot_slice(g, result.phi_rf, index=100)
    with pytest.raises(pb.InputError, match="outside the grid"):
        pb.plot.plot_slice(g, result.phi_rf, position=1e3)
    with pytest.raises(pb.InputError, match="not both"):
        pb.plot.plot_slice(g, result.phi_rf, index=1, position=0.0)
    with pytest.raises(pb.InputError, match="radii"):
        pb.plot.plot_slice(g, result.phi_rf, atoms=(np.zeros((2, 3)), np.ones(3)))


# ---------------------------------------------------------------------- plot_convergence
def test_plot_convergence_labels(born):
    problem, result = born
    jac = pb.solve(problem, method="jacobi", backend="cpu", maxiter=120)
    ax = pb.plot.plot_convergence({"SOR": result, "Jacobi": jac}, rtol=1e-6)
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel().startswith("iteration")
    assert "‖b − Aφ‖₂ / ‖b‖₂" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["SOR", "Jacobi", "rtol = 1e-06"]
    sor_line = ax.get_lines()[0]
    np.testing.assert_allclose(sor_line.get_ydata(), result.residual_norms)
    assert sor_line.get_xdata()[-1] == result.iterations
    # Jacobi stopped at maxiter: its last point is marked, and the x data ends at maxiter
    assert not jac.converged
    jac_line = [ln for ln in ax.get_lines() if ln.get_label() == "Jacobi"][0]
    assert jac_line.get_xdata()[-1] == 120


def test_plot_convergence_single_and_defaults(born):
    _, result = born
    ax = pb.plot.plot_convergence(result)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["sor (cpu)"]
    with pytest.raises(pb.InputError):
        pb.plot.plot_convergence([])
    with pytest.raises(pb.InputError, match="labels"):
        pb.plot.plot_convergence([result], labels=["a", "b"])


def test_check_iterations_cadence():
    res = pb.SolveResult(
        phi_rf=np.zeros((3, 3, 3)),
        converged=False,
        iterations=25,
        residual_norms=[1.0, 0.5, 0.2, 0.1],
        seconds=0.0,
        method="sor",
        backend="cpu",
        reason="maxiter",
    )
    np.testing.assert_array_equal(pb.plot.check_iterations(res), [0, 9, 18, 25])
    res.extra["check_iterations"] = [0, 10, 20, 25]
    np.testing.assert_array_equal(pb.plot.check_iterations(res), [0, 10, 20, 25])


# ---------------------------------------------------------------------- reprs
def test_reprs(born):
    problem, result = born
    g = problem.grid
    text = g._repr_html_()
    assert "pbsolver.Grid" in text and "17 × 17 × 17" in text and "1 Å" in text
    assert repr(g).startswith("Grid(shape=(17, 17, 17)")

    text = problem._repr_html_()
    assert "pbsolver.Problem" in text and "harmonic" in text and "1 … 78.54" in text
    assert "1 infinite" in text  # φ_c is +inf on the ion's node
    assert "given values" in text
    assert repr(problem).startswith("Problem(Grid(")

    text = result._repr_html_()
    assert "pbsolver.SolveResult" in text and "converged" in text and "<svg" in text
    assert f"{result.iterations}" in text and "kJ mol⁻¹ e⁻¹" in text
    assert repr(result).startswith("SolveResult(converged=True")


def test_repr_html_faces_salt_periodic_and_escaping():
    g = pb.Grid((4, 4, 4), spacing=0.5)
    ones = np.ones(g.shape)
    p = pb.Problem(
        g,
        phi_coulomb=np.zeros(g.shape),
        eps_cavity=2.0,
        epsilon_faces=(ones, 2 * ones, 3 * ones),
        kappa2=0.1 * ones,
        boundary="periodic",
    )
    text = p._repr_html_()
    assert "ε faces ex" in text and "ε faces ez" in text
    assert "Å⁻²" in text and "periodic" in text
    res = pb.SolveResult(
        phi_rf=np.zeros(g.shape),
        converged=False,
        iterations=3,
        residual_norms=[1.0, float("nan")],
        seconds=0.1,
        method="<b>x</b>",
        backend="cpu",
        reason="nan",
    )
    text = res._repr_html_()
    assert "NOT converged" in text and "&lt;b&gt;x&lt;/b&gt;" in text and "<svg" not in text
