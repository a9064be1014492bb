"""Warm starts along a trajectory predicted from the last two solutions (pbsolver.md.prediction).

The rule (α from the atoms' steps, held to [0, 1]), the prediction of a field that is linear in
the positions, the cases that give no prediction, and the calculator's forward and adjoint solves
starting closer to their solutions than from the last frame's alone.
"""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
import pbsolver.forces.gradient as gradient
from pbsolver.md.prediction import FieldHistory, step_ratio

GRID = pb.Grid((5, 6, 7), spacing=0.5)


@pytest.mark.parametrize(
    ("scale", "alpha"),
    [(1.0, 1.0), (0.5, 0.5), (2.0, 1.0), (-1.0, 0.0), (0.0, 0.0)],
)
def test_step_ratio_is_the_new_step_over_the_last(rng, scale, alpha):
    x2 = rng.normal(size=(9, 3))
    step = rng.normal(size=(9, 3))
    x1 = x2 + step
    assert step_ratio(x1 + scale * step, x1, x2) == pytest.approx(alpha, abs=1e-12)


def test_step_ratio_of_atoms_that_did_not_move_is_zero(rng):
    x = rng.normal(size=(4, 3))
    assert step_ratio(x + 1.0, x, x) == 0.0


def test_step_ratio_of_an_unrelated_step_is_its_projection(rng):
    x2 = rng.normal(size=(50, 3))
    x1 = x2 + rng.normal(size=(50, 3))
    x0 = x1 + rng.normal(size=(50, 3))
    last, new = x1 - x2, x0 - x1
    expected = min(max(np.sum(new * last) / np.sum(last * last), 0.0), 1.0)
    assert step_ratio(x0, x1, x2) == pytest.approx(expected, rel=1e-12)
    assert step_ratio(x0, x1, x2) < 0.5  # random steps: little of the last one


def test_prediction_of_a_field_linear_in_the_positions_is_exact(rng):
    # u(x) = M x: the first-order prediction is exact at constant velocity and at half speed
    m = rng.normal(size=(int(np.prod(GRID.shape)), 12))
    field = lambda x: (m @ x.ravel()).reshape(GRID.shape)  # noqa: E731
    x2 = rng.normal(size=(4, 3))
    v = 0.01 * rng.normal(size=(4, 3))
    history = FieldHistory()
    assert history.predict(x2, GRID) is None and history.last == (None, None)
    history.record(x2, GRID, field(x2))
    assert history.predict(x2 + v, GRID) is None  # one frame: nothing to predict from
    history.record(x2 + v, GRID, field(x2 + v))
    for speed in (1.0, 0.5):
        x0 = x2 + (1 + speed) * v
        np.testing.assert_allclose(history.predict(x0, GRID), field(x0), rtol=1e-12,
                                   atol=1e-12 * np.abs(field(x0)).max())  # fmt: skip
    assert history.last[1] == GRID
    np.testing.assert_array_equal(history.last[0], field(x2 + v))


def test_no_prediction_across_grids_or_when_the_atoms_turn_back(rng):
    x = rng.normal(size=(4, 3))
    v = 0.01 * rng.normal(size=(4, 3))
    u = rng.normal(size=GRID.shape)
    history = FieldHistory()
    history.record(x, GRID, u)
    history.record(x + v, GRID, 2 * u)
    moved = pb.Grid(GRID.shape, spacing=0.5, origin=(0.5, 0.0, 0.0))
    assert history.predict(x + 2 * v, moved) is None
    assert history.predict(x, GRID) is None  # back where it was: α = 0
    np.testing.assert_allclose(history.predict(x + 2 * v, GRID), 3 * u)
    history.record(x + 2 * v, moved, 3 * u)  # the last two frames on different grids
    assert history.predict(x + 3 * v, moved) is None
    history.clear()
    assert history.predict(x + 3 * v, moved) is None and history.last == (None, None)


def test_calculator_starts_both_solves_from_the_prediction(monkeypatch):
    """Along a steady drift, frames 2 and 3 start with smaller residuals than the last frame's
    solution gives (forward solve and the forces' adjoint), and end at the same solutions."""
    atoms = pb.read_pqr(pb.data.path("1lpb_chainA.pqr"))[:40]
    calc = pb.ReactionFieldCalculator(atoms, spacing=0.6, surface="svdw", forces="exact",
                                      backend="cpu", margin=2.0, skin=0.5, method="multigrid",
                                      rtol=1e-9, dtype=np.float64, ionic_strength=0.1)  # fmt: skip
    real = gradient.adjoint_solve
    starts = []

    def adjoint(problem, source, solver, x0=None, system=None):
        lam, res = real(problem, source, solver, x0, system)
        if starts and starts[-1]["lam"].shape == lam.shape:
            plain, plain_res = real(problem, source, solver, starts[-1]["lam"], None)
            np.testing.assert_allclose(lam, plain, atol=1e-6 * np.abs(plain).max())
            starts[-1]["adjoint"] = (res.residual_norms[0], plain_res.residual_norms[0])
        starts.append({"lam": lam})
        return lam, res

    monkeypatch.setattr(gradient, "adjoint_solve", adjoint)
    v = np.array([0.02, -0.01, 0.015])
    wiggle = 0.004 * np.sin(np.arange(len(atoms))[:, None] * np.array([1.0, 2.0, 3.0]))
    forward = []
    for k in range(4):
        before = calc.phi_rf
        frame = calc.compute(atoms.positions + k * v + np.sin(0.5 * k) * wiggle)
        assert frame.converged and not (k and frame.regridded)
        if k >= 2:
            plain = calc.solver.solve(calc.problem, x0=before)
            np.testing.assert_allclose(frame.solve.phi_rf, plain.phi_rf,
                                       atol=1e-6 * np.abs(plain.phi_rf).max())  # fmt: skip
            forward.append((frame.solve.residual_norms[0], plain.residual_norms[0]))
    adjoint_starts = [s["adjoint"] for s in starts if "adjoint" in s][1:]  # frames 2 and 3
    assert len(forward) == 2 and len(adjoint_starts) == 2
    for predicted, last_only in forward + adjoint_starts:
        assert predicted < 0.5 * last_only, (forward, adjoint_starts)
