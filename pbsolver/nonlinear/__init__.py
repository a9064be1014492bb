"""The nonlinear Poisson–Boltzmann equation (APBS ``npbe``) in the reaction-field split.

For a z:z salt the salt term κ̄² φ of the linearised equation becomes κ̄² (kT/z) sinh(zφ/kT)
in the ion-accessible region, φ = φ_c + φ_rf the total potential (κ̄² is zero wherever φ_c is
singular). A :class:`~pbsolver.Problem` made with ``nonlinear=True`` (and its
``ion_valence`` and ``temperature``) is solved by :func:`pbsolver.solve` /
:meth:`pbsolver.Solver.solve` with:

:mod:`~pbsolver.nonlinear.boltzmann`
    the term, its derivative and its energy density, continued beyond a cap so that nothing
    overflows;
:mod:`~pbsolver.nonlinear.newton`
    the globalised inexact Newton method whose linear steps are the linear solver's methods;
:mod:`~pbsolver.nonlinear.energy`
    the free energy's ion terms and the polar solvation energy (derivation in its docstring).
"""
