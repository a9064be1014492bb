"""Grid and Problem: conventions and every class of invalid input."""

import numpy as np
import pytest
from conftest import random_problem

import pbsolver as pb


def test_grid_geometry():
    g = pb.Grid((5, 7, 9), spacing=(0.5, 0.25, 1.0), origin=(1.0, 2.0, 3.0))
    x, y, z = g.axes()
    assert x[0] == 1.0 and y[-1] == pytest.approx(2.0 + 6 * 0.25) and z[-1] == 11.0
    assert g.lengths == (2.0, 1.5, 8.0)
    assert g.center == (2.0, 2.75, 7.0)
    assert g.size == 5 * 7 * 9
    assert "spacing=(0.5, 0.25, 1)" in repr(g)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shape": (2, 5, 5)}, "fewer than 3"),
        ({"shape": (5, 5)}, "3 entries"),
        ({"shape": (5, 5, 5.5)}, "three integers"),
        ({"shape": "abc"}, "three integers"),
        ({"shape": (5, 5, 5), "spacing": 0.0}, "spacing"),
        ({"shape": (5, 5, 5), "spacing": (1.0, -1.0, 1.0)}, "spacing"),
        ({"shape": (5, 5, 5), "spacing": (1.0, 1.0)}, "spacing"),
        ({"shape": (5, 5, 5), "spacing": float("nan")}, "spacing"),
        ({"shape": (5, 5, 5), "origin": (0, 0, float("inf"))}, "origin"),
        ({"shape": (5000, 5000, 5000)}, "limit"),
        ({"shape": (50, 50, 50), "max_points": 1000}, "limit"),
    ],
)
def test_grid_rejects(kwargs, match):
    with pytest.raises(pb.InputError, match=match):
        pb.Grid(**kwargs)


@pytest.fixture
def small():
    g = pb.Grid((6, 7, 8), spacing=0.5)
    return g, np.full(g.shape, 2.0), np.ones(g.shape)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("epsilon", np.ones((6, 7)), "3-D array"),
        ("epsilon", np.ones((7, 6, 8)), r"shape \(7, 6, 8\)"),
        ("epsilon", np.ones((6, 7, 8), dtype=complex), "real floating"),
        ("epsilon", np.ones((6, 7, 8), dtype=bool), "real floating"),
        ("epsilon", "not an array", "real floating"),
        (
            "epsilon",
            np.where(np.arange(336).reshape(6, 7, 8) == 5, 0.0, 2.0),
            "epsilon must be > 0",
        ),
        ("epsilon", np.where(np.arange(336).reshape(6, 7, 8) == 5, -1.0, 2.0), "> 0"),
        ("epsilon", np.where(np.arange(336).reshape(6, 7, 8) == 9, np.nan, 2.0), "finite"),
        ("epsilon", np.where(np.arange(336).reshape(6, 7, 8) == 9, np.inf, 2.0), "finite"),
        ("phi_coulomb", np.full((6, 7, 8), np.nan), "phi_coulomb is NaN"),
        ("phi_coulomb", np.ones((6, 7, 9)), "phi_coulomb has shape"),
        ("kappa2", -np.ones((6, 7, 8)), "kappa2 must be >= 0"),
        ("kappa2", np.full((6, 7, 8), np.nan), "kappa2 must be finite"),
        ("boundary_values", np.full((6, 7, 8), np.inf), "boundary_values must be finite"),
    ],
)
def test_problem_rejects_bad_arrays(small, field, value, match):
    g, eps, phi = small
    kwargs = {"epsilon": eps, "phi_coulomb": phi, "eps_cavity": 2.0, field: value}
    with pytest.raises(pb.InputError, match=match):
        pb.Problem(g, **kwargs)


def test_problem_error_names_the_node(small):
    g, eps, phi = small
    eps = eps.copy()
    eps[2, 3, 4] = -5.0
    with pytest.raises(pb.InputError, match=r"-5.0 at node \(2, 3, 4\)"):
        pb.Problem(g, eps, phi, 2.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"boundary": "neumann"}, "boundary must be one of"),
        ({"face_rule": "geometric"}, "face_rule"),
        ({"eps_cavity": 0.0}, "eps_cavity"),
        ({"eps_cavity": "x"}, "eps_cavity"),
        ({"epsilon_faces": (1, 2)}, "exactly one of"),
        ({"boundary": "periodic", "boundary_values": np.zeros((6, 7, 8))}, "only apply"),
    ],
)
def test_problem_rejects_bad_options(small, kwargs, match):
    g, eps, phi = small
    base = {"epsilon": eps, "phi_coulomb": phi, "eps_cavity": 2.0}
    base.update(kwargs)
    with pytest.raises(pb.InputError, match=match):
        pb.Problem(g, **base)


def test_problem_rejects_bad_faces(small):
    g, _, phi = small
    ones = np.ones(g.shape)
    with pytest.raises(pb.InputError, match="tuple of three"):
        pb.Problem(g, phi_coulomb=phi, epsilon_faces=(ones, ones))
    with pytest.raises(pb.InputError, match=r"epsilon_faces\[1\] \(ey\) must be > 0"):
        pb.Problem(g, phi_coulomb=phi, epsilon_faces=(ones, 0 * ones, ones))
    with pytest.raises(pb.InputError, match="grid must be a pbsolver.Grid"):
        pb.Problem((6, 7, 8), ones, phi)


def test_infinite_coulomb_only_inside_cavity(small):
    g, _, phi = small
    eps = np.full(g.shape, 2.0)
    phi = phi.copy()
    phi[3, 3, 3] = np.inf
    pb.Problem(g, eps, phi, 2.0)  # all faces around the node equal ε_c: allowed
    eps[3, 3, 4] = 80.0
    with pytest.raises(pb.InputError, match=r"infinite at node \(3, 3, 3\)"):
        pb.Problem(g, eps, phi, 2.0)


def test_integer_input_is_promoted(small):
    g, _, _ = small
    p = pb.Problem(g, np.full(g.shape, 2), np.ones(g.shape, dtype=np.int32), 2)
    assert p.epsilon.dtype == np.float64 and p.phi_coulomb.dtype == np.float64


def test_repr_mentions_the_essentials(rng):
    p = random_problem(rng, salt=True, boundary="periodic", shape=(8, 10, 12))
    text = repr(p)
    assert "with salt" in text and "periodic" in text and "(8, 10, 12)" in text


def test_to_moves_between_array_libraries(rng):
    p = random_problem(rng, salt=True, shape=(8, 10, 12))
    assert p.to(np) is p and p.to("numpy") is p
    with pytest.raises(pb.InputError, match="array library"):
        p.to("torch")
    with pytest.raises(pb.InputError, match="array library"):
        p.to(pytest)


@pytest.mark.gpu
def test_to_cupy_and_back(rng):
    import cupy as cp

    p = random_problem(rng, salt=True, shape=(8, 10, 12))
    d = p.to(cp)
    assert d is not p and d.xp is cp and d.to("cupy") is d
    assert d.grid is p.grid and d.boundary == p.boundary and d.eps_cavity == p.eps_cavity
    back = d.to("numpy")
    for name in ("epsilon", "phi_coulomb", "kappa2", "boundary_values"):
        a, b = getattr(p, name), getattr(back, name)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)


def test_map_checks_settle_overflowing_sums_node_by_node():
    """The one-sum shortcut of the finite check: huge finite maps pass, ±inf pairs are caught."""
    import warnings

    from pbsolver.problem import _check_finite, _check_positive

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning escapes
        _check_positive(np.full((2, 2, 2), 1e308), "epsilon")
    with pytest.raises(pb.InputError, match=r"epsilon must be finite, got inf at node \(0, 0, 0\)"):
        _check_finite(np.array([[[np.inf, -np.inf]]]), "epsilon")
    with pytest.raises(pb.InputError, match=r"must be > 0, got -2.0 at node \(0, 1, 0\)"):
        _check_positive(np.array([[[1.0], [-2.0]]]), "epsilon")


@pytest.mark.parametrize("shape", [(6, 7, 8), (53, 51, 49)])  # NumPy checks; the compiled scan
@pytest.mark.parametrize(
    ("field", "node", "value", "match"),
    [
        ("ex", (3, 4, 5), 0.0, r"epsilon_faces\[0\] \(ex\) must be > 0, got 0.0 at node \(3, 4"),
        ("ez", (5, 1, 2), np.nan, r"epsilon_faces\[2\] \(ez\) must be finite, got nan at node"),
        ("ey", (2, 6, 3), -np.inf, r"epsilon_faces\[1\] \(ey\) must be finite"),
        ("phi", (1, 2, 3), np.nan, r"phi_coulomb is NaN at node \(1, 2, 3\)"),
        ("phi", (4, 3, 2), np.inf, r"phi_coulomb is infinite at node \(4, 3, 2\)"),
        ("kappa2", (2, 2, 2), -1e-3, r"kappa2 must be >= 0, got -0.001 at node \(2, 2, 2\)"),
        ("kappa2", (5, 5, 5), np.inf, "kappa2 must be finite"),
        ("boundary_values", (0, 3, 3), np.nan, "boundary_values must be finite on the outer layer"),
    ],
)  # fmt: skip
def test_problem_checks_are_the_same_on_small_and_large_face_maps(shape, field, node, value,
                                                                 match):  # fmt: skip
    from pbsolver.problem import SCAN_NODES

    assert (np.prod(shape) >= SCAN_NODES) == (shape[0] > 50)
    g = pb.Grid(shape, 0.5)
    rng = np.random.default_rng(3)
    arrays = {name: rng.uniform(2.0, 80.0, shape) for name in ("ex", "ey", "ez")}
    arrays["phi"] = rng.normal(size=shape)
    arrays["kappa2"] = rng.uniform(0.0, 0.1, shape)
    arrays["boundary_values"] = np.zeros(shape)
    arrays[field][node] = value
    with pytest.raises(pb.InputError, match=match):
        pb.Problem(g, None, arrays["phi"], 2.0, kappa2=arrays["kappa2"],
                   epsilon_faces=(arrays["ex"], arrays["ey"], arrays["ez"]),
                   boundary_values=arrays["boundary_values"])  # fmt: skip


@pytest.mark.parametrize("shape", [(6, 7, 8), (53, 51, 49)])
def test_all_zero_kappa_is_no_salt_and_an_allowed_charge_on_a_node_passes(shape):
    g = pb.Grid(shape, 0.5)
    faces = tuple(np.full(shape, 2.0) for _ in range(3))
    phi = np.ones(shape)
    phi[3, 3, 3] = np.inf  # every face around it is ε_c = 2 and κ̄² is zero: allowed
    p = pb.Problem(g, None, phi, 2.0, epsilon_faces=faces, kappa2=np.zeros(shape))
    assert p.kappa2 is None and not p.has_salt
    kappa2 = np.zeros(shape)
    kappa2[1, 1, 1] = 0.5
    assert pb.Problem(g, None, phi, 2.0, epsilon_faces=faces, kappa2=kappa2).has_salt
    kappa2[3, 3, 3] = 0.5  # salt at the charge's node: refused
    with pytest.raises(pb.InputError, match=r"infinite at node \(3, 3, 3\)"):
        pb.Problem(g, None, phi, 2.0, epsilon_faces=faces, kappa2=kappa2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_map_scan_equals_numpy_on_random_corruptions(dtype):
    # the scan or-s each row's tests without branches (so that it vectorises): every flag must
    # still see one bad value anywhere, whatever else the maps hold
    from pbsolver.backends.cpu.validation import scan_maps

    rng = np.random.default_rng(11)
    shape = (9, 11, 13)
    bad_values = (np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0)
    for trial in range(120):
        faces = [rng.uniform(1.0, 80.0, shape).astype(dtype) for _ in range(3)]
        phi = rng.normal(size=shape)
        kappa2 = np.where(rng.random(shape) < 0.5, 0.0, rng.uniform(0.0, 1.0, shape)).astype(dtype)
        if trial % 4 == 0:
            kappa2[:] = 0.0
        maps = [*faces, phi, kappa2]
        for _ in range(int(rng.integers(0, 3))):
            node = tuple(int(rng.integers(0, n)) for n in shape)
            maps[int(rng.integers(0, 5))][node] = bad_values[int(rng.integers(0, 6))]
        k2 = None if trial % 5 == 0 else kappa2
        want = {
            "bad_face": not all(bool(((f > 0) & (f < np.inf)).all()) for f in faces),
            "phi_nan": bool(np.isnan(phi).any()),
            "phi_inf": bool(np.isinf(phi).any()),
            "bad_kappa": k2 is not None and not bool(((k2 >= 0) & (k2 < np.inf)).all()),
            "some_kappa": k2 is not None and bool((k2 > 0).any()),
        }
        assert scan_maps(tuple(faces), phi, k2) == want, trial
