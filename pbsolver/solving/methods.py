"""The methods the loop drives, by name: SOR, Jacobi, multigrid, MG-CG and the direct "spectral".

A method is a small object: ``setup(system)`` once a solve (it reads what it needs from the
:class:`~pbsolver.solving.system.LinearSystem`: backend, stencil, geometry, hierarchy),
``start(st, x)`` at the beginning of each refinement phase, ``step(count)``, and
``default_maxiter(shape)``; ``name``, ``check_every`` and ``omega`` describe it. The loop
(:class:`~pbsolver.solving.loop.IterationLoop`) never knows which one it runs.
"""

from __future__ import annotations

import math

from pbsolver.exceptions import InputError
from pbsolver.multigrid.methods import MGCG, Multigrid
from pbsolver.solving.spectral import Spectral


class StationaryMethod:
    """Shared set-up of the sweep methods (SOR, Jacobi)."""

    name = "abstract"
    check_every = 10
    #: the keyword options the method takes
    options = ("omega",)

    def __init__(self, omega=None):
        if omega is not None:
            omega = float(omega)
            if not 0.0 < omega < 2.0:
                raise InputError(f"omega must be in (0, 2), got {omega}")
        self.omega = omega

    def setup(self, system) -> None:
        self.backend = system.backend

    def start(self, st, x) -> None:
        self.st, self.x = st, x

    def default_maxiter(self, shape) -> int:
        raise NotImplementedError


class SOR(StationaryMethod):
    """Red–black successive over-relaxation.

    ω defaults to 2 / (1 + √(1 − ρ²)), the optimum for the constant-coefficient operator, with ρ
    the Jacobi spectral radius of the grid's Laplacian (DelPhi's estimate; see
    :func:`optimal_sor_omega`).
    """

    name = "sor"

    def setup(self, system) -> None:
        super().setup(system)
        system.st.check_red_black(self.name)
        if self.omega is None:
            self.omega = system.sor_omega()

    def step(self, count: int) -> None:
        self.backend.sor_sweeps(self.st, self.x, self.omega, count)

    def default_maxiter(self, shape) -> int:
        return 100 * max(shape) + 1000


class Jacobi(StationaryMethod):
    """Weighted Jacobi with two buffers (the seed kernel's method, without its race)."""

    name = "jacobi"
    check_every = 50

    def setup(self, system) -> None:
        super().setup(system)
        if self.omega is None:
            self.omega = 0.9

    def start(self, st, x) -> None:
        super().start(st, x)
        self.work = self.backend.copy(x)

    def step(self, count: int) -> None:
        self.backend.jacobi_sweeps(self.st, self.x, self.work, self.omega, count)

    def default_maxiter(self, shape) -> int:
        return 20 * max(shape) ** 2 + 1000


#: Methods by name.
METHODS: dict[str, type] = {
    "sor": SOR,
    "jacobi": Jacobi,
    "multigrid": Multigrid,
    "mgcg": MGCG,
    "spectral": Spectral,
}


def method_options(name: str) -> tuple[str, ...]:
    """The keyword options method ``name`` takes."""
    return tuple(METHODS[name].options)


def make_method(name: str, options: dict):
    """A new method object ``name`` with ``options``, refusing unknown ones by name.

    Raises
    ------
    InputError
        Unknown method, or an option the method does not take.
    """
    if name not in METHODS:
        raise InputError(f"method must be one of {sorted(METHODS)}, got {name!r}")
    accepted = method_options(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InputError(
            f"method {name!r} does not take {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(accepted)}"
        )
    return METHODS[name](**options)


def optimal_sor_omega(shape, spacing, periodic: bool, kappa2_sum=0.0, diag_sum=0.0) -> float:
    """Optimal SOR ω for the constant-coefficient Laplacian on a grid.

    ρ_J = Σ_a cos(θ_a)/h_a² / Σ_a 1/h_a², θ_a = π/(n_a − 1) (Dirichlet) or 2π/n_a (periodic);
    ω = 2 / (1 + √(1 − ρ_J²)). A periodic problem with salt also keeps the constant mode, whose
    Jacobi factor is 1 − Σκ̄²/(Σdiag) (its Rayleigh quotient; ``kappa2_sum`` = Σκ̄² and
    ``diag_sum`` = Σ of the faces' part of the diagonal); ρ_J is the larger of the two.
    """
    weights = [1.0 / (h * h) for h in spacing]
    if periodic:
        thetas = [2.0 * math.pi / n for n in shape]
    else:
        thetas = [math.pi / (n - 1) for n in shape]
    rho = sum(w * math.cos(t) for w, t in zip(weights, thetas, strict=True)) / sum(weights)
    if periodic and kappa2_sum > 0.0:
        rho = max(rho, 1.0 - kappa2_sum / (diag_sum + kappa2_sum))
    return 2.0 / (1.0 + math.sqrt(max(0.0, 1.0 - rho * rho)))


__all__ = [
    "METHODS",
    "SOR",
    "Jacobi",
    "StationaryMethod",
    "make_method",
    "method_options",
    "optimal_sor_omega",
]
