"""Multigrid on a stack of independent blocks (``stack_hierarchy``) against the hierarchy of
each block's own problem (``grid_hierarchy``)."""

from __future__ import annotations

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.backends import get_backend
from pbsolver.backends.coarse import PENALTY, fixed_nodes
from pbsolver.backends.stacking import stack_problems
from pbsolver.multigrid.builders import grid_hierarchy, stack_hierarchy
from pbsolver.multigrid.coarsening import stacked_plan


def _problem(seed, shape=(17, 15, 13), spacing=0.7, salt=True):
    """A random high-contrast problem: ε 1 in a few off-centre spheres, 80 outside."""
    rng = np.random.default_rng(seed)
    g = pb.Grid(shape, spacing=spacing)
    coords = g.coordinates()
    eps = np.full(shape, 80.0)
    phic = np.zeros(shape)
    for _ in range(4):
        c = [rng.uniform(0.3, 0.7) * (n - 1) * spacing for n in shape]
        r2 = sum((x - ci) ** 2 for x, ci in zip(coords, c, strict=True))
        eps[r2 < rng.uniform(1.0, 2.5) ** 2] = 1.0
        phic += rng.uniform(-1, 1) * 1389.35 / np.sqrt(r2 + 0.3)
    k2 = rng.uniform(0.0, 0.05, shape) if salt else None
    return pb.Problem(g, eps, phic, 1.0, kappa2=k2)


def _unlifted(problems, system):
    """Every block's faces (to its outer layer included) and κ̄² on the stack's layout."""
    from pbsolver.operator import coefficients

    shape = problems[0].grid.shape
    big = system.b.shape
    faces = [np.zeros(big) for _ in range(3)]
    k2 = np.zeros(big)
    for k, p in enumerate(problems):
        c = coefficients(p, np.float64)
        blk = system.block(k, shape[0])
        for dst, src in zip(faces, (c.cx, c.cy, c.cz), strict=True):
            dst[blk] = src
        faces[0][blk][-1] = 0.0  # the face leaving the block
        faces[1][blk][:, -1] = 0.0  # the wrap-around faces of the last layers
        faces[2][blk][:, :, -1] = 0.0
        k2[blk] = 0.0 if p.kappa2 is None else p.kappa2
    return faces, k2


def _update(mg, faces, kappa2):
    """Write the blocks' unlifted faces and κ̄² into the hierarchy's inputs and rebuild it."""
    for dst, src in zip(mg.inputs, (*faces, kappa2), strict=True):
        dst[...] = src
    mg.rebuild()


def _stack(problems):
    be = get_backend("cpu")
    system = stack_problems(problems)
    st = pb.backends.Stencil(system.cx, system.cy, system.cz, system.diag, system.b, False, False)
    return be, system, st


def test_plan_keeps_every_block_apart():
    plans = stacked_plan((17, 15, 13), (0.7,) * 3, 3, 18)
    assert [(nx, stride) for _, _, nx, stride in plans] == [(9, 10), (5, 6), (3, 4)]
    axis = plans[0][0][0]
    # every block's outer planes and its padding plane are coarse nodes: no midpoint joins blocks
    for k in range(3):
        assert {k * 18, k * 18 + 16, k * 18 + 17} <= set(axis.pos.tolist())
    mid = axis.lo != axis.hi
    assert not mid[np.arange(3) * 18].any() and not mid[np.arange(3) * 18 + 17].any()
    mask = fixed_nodes((30, 8, 7), 9, 10)
    assert mask[0].all() and mask[8].all() and mask[9].all() and mask[10].all()
    assert not mask[1:8, 1:-1, 1:-1].any() and mask[:, 0].all() and mask[:, :, -1].all()


def test_coarse_operators_equal_each_blocks_own_hierarchy():
    problems = [_problem(s) for s in (1, 2, 3)]
    be, system, st = _stack(problems)
    mg = stack_hierarchy(be, st, problems[0].grid.shape, problems[0].grid.spacing, system.stride)
    _update(mg, *_unlifted(problems, system))
    for k, p in enumerate(problems):
        own = grid_hierarchy(be, be.stencil(p, np.float64), p.grid.spacing, p.kappa2,
                             coarsest_nodes=0)  # fmt: skip
        assert len(own.levels) == len(mg.levels)
        for level, (ref, lev) in enumerate(zip(own.levels[1:], mg.levels[1:], strict=True), 1):
            n = ref.stencil.shape[0]
            stride = lev.stencil.shape[0] // 3
            blk = slice(k * stride, k * stride + n)
            inner = (slice(1, -1),) * 3
            for name in ("cx", "cy", "cz", "diag"):
                a = getattr(ref.stencil, name)[inner]
                b = getattr(lev.stencil, name)[blk][inner]
                np.testing.assert_allclose(b, a, rtol=1e-12, err_msg=f"level {level} {name}")
            fixed = fixed_nodes(lev.stencil.shape, n, stride)
            assert np.all(lev.stencil.diag[fixed] == PENALTY)


@pytest.mark.parametrize("cycle", ["V", "F"])
def test_stack_converges_like_each_problem_alone(cycle):
    problems = [_problem(s, salt=s != 5) for s in (4, 5, 6)]
    be, system, st = _stack(problems)
    mg = stack_hierarchy(be, st, problems[0].grid.shape, problems[0].grid.spacing,
                         system.stride, cycle=cycle)  # fmt: skip
    _update(mg, *_unlifted(problems, system))
    x = np.zeros(st.shape)
    run = mg.runner(st, x)
    r = np.zeros(st.shape)
    for _ in range(12):
        run()
    be.residual(st, x, r)
    nx = problems[0].grid.shape[0]
    for k, p in enumerate(problems):
        blk = system.block(k, nx)
        assert np.linalg.norm(r[blk]) <= 1e-7 * system.bnorms[k]
        # each block against its own problem solved tightly by the general solver
        ref = pb.Solver(method="sor", backend="cpu", rtol=1e-11, dtype=np.float64).solve(p)
        inner = (slice(1, -1),) * 3
        scale = np.abs(ref.phi_rf).max()
        np.testing.assert_allclose(x[blk][inner], ref.phi_rf[inner], atol=1e-6 * scale)
    # the fixed nodes keep a (penalty-scale) zero correction: |x| ≤ 1e-30 of the solution's
    assert np.abs(x[fixed_nodes(x.shape, nx, system.stride)]).max() <= 1e-30 * np.abs(x).max()


def test_bad_stacks_are_refused():
    problems = [_problem(1)]
    be, system, st = _stack(problems)
    with pytest.raises(pb.InputError, match="multiple of stride"):
        stack_hierarchy(be, st, (17, 15, 13), (0.7,) * 3, 19)
    with pytest.raises(pb.InputError, match="cycle"):
        stack_hierarchy(be, st, (17, 15, 13), (0.7,) * 3, 18, cycle="X")
    with pytest.raises(pb.InputError, match="omega must be in"):
        stack_hierarchy(be, st, (17, 15, 13), (0.7,) * 3, 18, omega=2.5)
    with pytest.raises(pb.InputError, match="presmooth"):
        pb.solve_batch([_problem(1), _problem(2)], mode="stacked", method="multigrid",
                       backend="cpu", presmooth=-1)  # fmt: skip
    with pytest.raises(pb.InputError, match="stride"):
        stacked_plan((17, 15, 13), (0.7,) * 3, 1, 16)
