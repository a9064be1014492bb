"""Plain-Python bodies of the force sums and of the sensitivities they read.

The forces' φ_c and Debye–Hückel terms (:mod:`pbsolver.forces.coulomb`) are sums over grid
nodes p with weights w_p of f(|p − c_i|) (p − c_i) for every atom i. These bodies give f for one
(node, centre) pair; the weights of the φ_c term are μ = ∂G/∂φ_c at a node
(:func:`coulomb_sensitivity_body`); the dielectric term reads ∂G/∂f of every face's edge
fraction (:func:`fraction_sensitivity_body`). The CPU loops of
:mod:`pbsolver.backends.cpu.forces` compile them with ``numba.njit``, the CUDA kernels of
:mod:`pbsolver.backends.cuda.forces` with ``numba.cuda.jit(device=True)``. Importing this module
imports no numba.
"""

from __future__ import annotations

import math


def radial_bodies(real, exp=math.exp, rsqrt=None):
    """The radial sums' three scalar bodies with their constants of type ``real``.

    ``real`` is ``numpy.float32`` for float32 arithmetic (numba types a bare float literal as
    float64, which would promote every operation after it) or ``float`` for float64. ``exp``
    is the exponential the Debye–Hückel slope calls (a compiled function of the target, such
    as :func:`pbsolver.backends.cpu.fast_math.exp32`, which vectorises on the CPU). ``rsqrt``:
    the target's reciprocal square root (e.g. CUDA's ``libdevice.rsqrtf``, one special-function
    instruction where 1/(r²·√r²) takes two), which 1/r³ is then formed from.

    Returns
    -------
    inverse_cube_body, debye_huckel_slope_body, minimum_image_body
    """
    one, half = real(1.0), real(0.5)

    def inverse_cube_body(r2):
        """1/r³: the φ_c term's radial factor (∂(1/|p − c|)/∂c = (p − c)/r³)."""
        return one / (r2 * math.sqrt(r2))

    if rsqrt is not None:

        def inverse_cube_body(r2):  # noqa: F811 - the same 1/r³ through the target's rsqrt
            """1/r³ as (1/√r²)³."""
            inverse = rsqrt(r2)
            return inverse * inverse * inverse

    def debye_huckel_slope_body(r2, radius, kappa, eps_out, inv_c):
        """−T'(r)/r of one atom's "mdh" term T(r) = e^{−κ(r−a)}/(ε_out (1 + κa) r) − 1/(ε_c r)."""
        r = math.sqrt(r2)
        screened = (
            exp(-kappa * (r - radius)) * (one + kappa * r) / (eps_out * (one + kappa * radius))
        )
        return (screened - inv_c) / (r2 * r)

    def minimum_image_body(d, length):
        """``d`` wrapped to the nearest image in a periodic box of side ``length``.

        numba's ``math.floor`` gives an integer: the whole number of boxes goes back to ``real``
        (exact below 2²⁴ boxes in float32).
        """
        return d - length * real(math.floor(d / length + half))

    return inverse_cube_body, debye_huckel_slope_body, minimum_image_body


def make_radial_term(inverse_cube, dh_slope, image):
    """One (node, centre) term of the radial sums, on the compiled bodies above."""

    def radial_term_body(x, y, z, weight, cx, cy, cz, box, periodic, mdh, radius, kappa,
                         eps_out, inv_c):  # fmt: skip
        """w g(|p − c|)(p − c) of node p = (x, y, z), weight w; g Coulomb's or "mdh"'s slope.

        The loops read the nodes from one array per axis (the CPU's: consecutive nodes
        adjacent in memory, so the loop vectorises) or a shared-memory tile (CUDA). The
        arithmetic is in the arguments' type (float32 in both backends' sums) when the scalars
        and the bodies' ``real`` are of that type too.
        """
        dx = x - cx
        dy = y - cy
        dz = z - cz
        if periodic:
            dx = image(dx, box[0])
            dy = image(dy, box[1])
            dz = image(dz, box[2])
        r2 = dx * dx + dy * dy + dz * dz
        if mdh:
            f = weight * dh_slope(r2, radius, kappa, eps_out, inv_c)
        else:
            f = weight * inverse_cube(r2)
        return f * dx, f * dy, f * dz

    return radial_term_body


def node_body(p, shape):
    """Node (i, j, k) of flat index ``p`` of a C-ordered grid of ``shape``."""
    ny, nz = shape[1], shape[2]
    return p // (ny * nz), (p // nz) % ny, p % nz


def kappa_sensitivity_body(lam, phic, phi, i, j, k):
    """∂G/∂κ̄² at node (i, j, k): −λ (φ_c + φ), zero where that is not finite.

    Not finite where a charge sits on the node. ``phic`` of any float dtype, read as float64.
    """
    s = -lam[i, j, k] * (float(phic[i, j, k]) + phi[i, j, k])
    return s if math.isfinite(s) else 0.0


def coulomb_sensitivity_body(lam, fx, fy, fz, kappa2, salt, i, j, k, im, ip, jm, jp, km, kp,
                             eps_c, cx, cy, cz):  # fmt: skip
    """μ at node (i, j, k): Σ_axes [w_s (λ_{s+1} − λ_s) − w_{s−1} (λ_s − λ_{s−1})] − κ̄²_s λ_s.

    ``fx, fy, fz``: face permittivities, face ``s`` between nodes ``s`` and ``s + 1`` (wrapping
    at the last layer); w = (face − ``eps_c``)·c with c = 1/h² of the axis (``cx, cy, cz``).
    ``im, ip, jm, jp, km, kp``: the neighbours' indices, wrapped by the caller (λ is zero on a
    Dirichlet grid's outer layer, so the wrapped terms vanish there); given, not computed here,
    so that a CPU row loop passes k ± 1 and vectorises. ``salt``: whether ``kappa2`` is read.
    Float32 maps are read as float64 (as numba types the mixed arithmetic; ``float()`` makes
    the simulator do the same).
    """
    here = lam[i, j, k]
    mu = (float(fx[i, j, k]) - eps_c) * cx * (lam[ip, j, k] - here)
    mu -= (float(fx[im, j, k]) - eps_c) * cx * (here - lam[im, j, k])
    mu += (float(fy[i, j, k]) - eps_c) * cy * (lam[i, jp, k] - here)
    mu -= (float(fy[i, jm, k]) - eps_c) * cy * (here - lam[i, jm, k])
    mu += (float(fz[i, j, k]) - eps_c) * cz * (lam[i, j, kp] - here)
    mu -= (float(fz[i, j, km]) - eps_c) * cz * (here - lam[i, j, km])
    if salt:
        mu -= float(kappa2[i, j, k]) * here
    return mu


def fraction_sensitivity_body(lam, phic, phi, face, axis, i, j, k, c, slope):
    """∂G/∂f of the face along ``axis`` at node (i, j, k) (to node + 1, wrapping at the end).

    (λ_s − λ_s')(Φ_s' − Φ_s)·c · ε²·``slope`` with Φ = φ_c + φ, c = 1/h² and ``slope`` =
    1/ε_out − 1/ε_in (:mod:`pbsolver.forces.dielectric`, equations (1) and (2)); zero where it
    is not finite (a charge on a node).
    """
    nx, ny, nz = lam.shape
    ip, jp, kp = i, j, k
    if axis == 0:
        ip = (i + 1) % nx
    elif axis == 1:
        jp = (j + 1) % ny
    else:
        kp = (k + 1) % nz
    d_lam = lam[i, j, k] - lam[ip, jp, kp]
    d_phi = (float(phic[ip, jp, kp]) + phi[ip, jp, kp]) - (float(phic[i, j, k]) + phi[i, j, k])
    s = d_lam * d_phi * c
    if not math.isfinite(s):
        return 0.0
    f = float(face[i, j, k])
    return s * f * f * slope
