"""The Problem: everything that defines one reaction-field solve on one grid.

See the README (*The equation*, *Design and conventions*). The unknown is the reaction-field
potential φ_rf (kJ mol⁻¹ e⁻¹) of

    -∇·(ε ∇φ_rf) + κ̄² φ_rf = ∇·((ε − ε_c) ∇φ_c) − κ̄² φ_c

discretised with the 7-point stencil on face permittivities; with ``nonlinear=True`` the salt
term κ̄² (φ_c + φ_rf) becomes κ̄² (kT/z) sinh(z (φ_c + φ_rf)/kT) (:mod:`pbsolver.nonlinear`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Literal

import numpy as np

from pbsolver import display as _display
from pbsolver.arrays import array_module, as_real_array, first_bad_index, to_numpy
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.options import PhysicsOptions, choice, flag, positive, valence

BOUNDARIES = ("dirichlet", "periodic")
FACE_RULES = ("arithmetic", "harmonic")


class Problem:
    """One linearised Poisson–Boltzmann reaction-field problem on a grid.

    Parameters
    ----------
    grid : Grid
        The grid all maps live on.
    epsilon : array (nx, ny, nz), optional
        Relative permittivity at the nodes. Face values are formed with ``face_rule``.
        Give either this or ``epsilon_faces``.
    phi_coulomb : array (nx, ny, nz)
        Coulomb potential φ_c of the charges in a homogeneous medium of permittivity
        ``eps_cavity``, kJ mol⁻¹ e⁻¹. ±inf is allowed only at nodes whose six faces all equal
        ``eps_cavity`` and where κ̄² is zero (a charge sitting on a node); NaN never.
    eps_cavity : float
        ε_c, the permittivity φ_c was computed in (normally the solute's ε_in).
    epsilon_faces : tuple of 3 arrays (nx, ny, nz), optional
        Face permittivities ``(ex, ey, ez)``; ``ex[i, j, k]`` is the face between nodes
        ``(i, j, k)`` and ``(i+1, j, k)``. The last layer along each axis is read only with
        periodic boundaries.
    kappa2 : array (nx, ny, nz), optional
        κ̄² = ε_out κ² in Å⁻² (zero outside the ion-accessible region). None: no salt.
    boundary : {"dirichlet", "periodic"}
        Dirichlet: the outermost layer of nodes holds fixed φ_rf (``boundary_values``, zero when
        None); periodic: neighbours wrap around and, with no salt, φ_rf has zero mean.
    boundary_values : array (nx, ny, nz), optional
        φ_rf on the outer layer for Dirichlet boundaries (inner values ignored).
    face_rule : {"arithmetic", "harmonic"}
        How a node map becomes face values: ½(ε_s + ε_n) (the seed's rule) or the harmonic mean
        2 ε_s ε_n / (ε_s + ε_n) (about 4× more accurate on a Born ion).
    nonlinear : bool
        The nonlinear Poisson–Boltzmann equation: the salt term κ̄² φ becomes
        κ̄² (kT/z) sinh(zφ/kT) with φ = φ_c + φ_rf (:mod:`pbsolver.nonlinear`). Without salt
        the two equations are one.
    ion_valence : int
        z of the z:z salt (the nonlinear term only).
    temperature : float
        K; sets kT of the nonlinear term (κ̄² itself is given, already made with it).

    Raises
    ------
    InputError
        Naming the field and the bad value: wrong rank or shape, non-real dtype, NaN/inf,
        ε ≤ 0, κ̄² < 0, unknown boundary or face rule, a valence that is not a positive
        integer, a temperature that is not > 0 K.

    Notes
    -----
    Arrays are kept in the caller's array library (NumPy or CuPy); the solver returns φ_rf in the
    same library. Nothing is copied at construction beyond an integer-to-float promotion.
    """

    def __init__(
        self,
        grid: Grid,
        epsilon=None,
        phi_coulomb=None,
        eps_cavity: float = 1.0,
        *,
        epsilon_faces=None,
        kappa2=None,
        boundary: Literal["dirichlet", "periodic"] = "dirichlet",
        boundary_values=None,
        face_rule: Literal["arithmetic", "harmonic"] = "arithmetic",
        nonlinear: bool = False,
        ion_valence: int = 1,
        temperature: float = PhysicsOptions.temperature,
    ):
        if not isinstance(grid, Grid):
            raise InputError(f"grid must be a pbsolver.Grid, got {type(grid).__name__}")
        self.grid = grid
        shape = grid.shape
        self.boundary = choice(boundary, "boundary", BOUNDARIES)
        self.face_rule = choice(face_rule, "face_rule", FACE_RULES)
        self.nonlinear = flag(nonlinear, "nonlinear")
        self.ion_valence = valence(ion_valence)
        self.temperature = positive(temperature, "temperature")
        try:
            self.eps_cavity = float(eps_cavity)
        except (TypeError, ValueError) as exc:
            raise InputError(f"eps_cavity must be a number, got {eps_cavity!r}") from exc
        if not (np.isfinite(self.eps_cavity) and self.eps_cavity > 0):
            raise InputError(f"eps_cavity must be finite and > 0, got {self.eps_cavity}")

        if (epsilon is None) == (epsilon_faces is None):
            raise InputError("give exactly one of epsilon (node map) or epsilon_faces=(ex, ey, ez)")
        if epsilon is not None:
            self.epsilon = as_real_array(epsilon, "epsilon", shape)
            _check_positive(self.epsilon, "epsilon")
            self.epsilon_faces = None
        else:
            if not isinstance(epsilon_faces, tuple | list) or len(epsilon_faces) != 3:
                raise InputError("epsilon_faces must be a tuple of three arrays (ex, ey, ez)")
            faces = []
            for axis, face in zip("xyz", epsilon_faces, strict=True):
                name = f"epsilon_faces[{'xyz'.index(axis)}] (e{axis})"
                faces.append(as_real_array(face, name, shape))
            self.epsilon = None
            self.epsilon_faces = tuple(faces)

        self.phi_coulomb = as_real_array(phi_coulomb, "phi_coulomb", shape)
        if kappa2 is not None:
            kappa2 = as_real_array(kappa2, "kappa2", shape)
        # large host maps: one compiled pass says what holds; the checks below (whose messages
        # name the first bad node) run only for what it finds wrong
        scan = _scan_host_maps(self.epsilon_faces, self.phi_coulomb, kappa2)
        if self.epsilon_faces is not None and (scan is None or scan["bad_face"]):
            for axis, face in enumerate(self.epsilon_faces):
                _check_positive(face, f"epsilon_faces[{axis}] (e{'xyz'[axis]})")
        xp = array_module(self.phi_coulomb)
        if (scan is None or scan["phi_nan"]) and bool(xp.isnan(self.phi_coulomb).any()):
            idx = first_bad_index(xp.isnan(self.phi_coulomb))
            raise InputError(f"phi_coulomb is NaN at node {idx}")

        self.kappa2 = None
        if kappa2 is not None:
            self.kappa2 = kappa2
            if scan is None or scan["bad_kappa"]:
                _check_finite(self.kappa2, "kappa2")
                if bool((self.kappa2 < 0).any()):
                    idx = first_bad_index(self.kappa2 < 0)
                    raise InputError(
                        f"kappa2 must be >= 0, got {float(self.kappa2[idx])} at node {idx}"
                    )
            xk = array_module(self.kappa2)
            if not (bool(scan["some_kappa"]) if scan is not None else bool(xk.any(self.kappa2))):
                self.kappa2 = None  # all zero: no salt

        self.boundary_values = None
        if boundary_values is not None:
            if boundary == "periodic":
                raise InputError("boundary_values only apply to boundary='dirichlet'")
            self.boundary_values = as_real_array(boundary_values, "boundary_values", shape)
            _check_finite_on_boundary(self.boundary_values, "boundary_values")

        if scan is None or scan["phi_inf"]:
            self._check_singular_coulomb()

    # ------------------------------------------------------------------ derived data
    @property
    def xp(self):
        """The array library of the problem's arrays (numpy or cupy)."""
        return array_module(self.phi_coulomb)

    @property
    def has_salt(self) -> bool:
        """True when κ̄² is nonzero somewhere."""
        return self.kappa2 is not None

    @property
    def is_singular(self) -> bool:
        """True for a periodic problem without salt (φ_rf defined up to a constant)."""
        return self.boundary == "periodic" and self.kappa2 is None

    def face_permittivities(self, dtype=np.float64):
        """Face permittivities ``(ex, ey, ez)`` in the problem's array library.

        For a node map, ``ex[i] = rule(ε[i], ε[i+1])`` with wrap-around at the last layer (read
        only with periodic boundaries).
        """
        if self.epsilon_faces is not None:
            return tuple(f.astype(dtype, copy=False) for f in self.epsilon_faces)
        xp = array_module(self.epsilon)
        eps = self.epsilon.astype(dtype, copy=False)
        faces = []
        for axis in range(3):
            nxt = xp.roll(eps, -1, axis=axis)
            if self.face_rule == "arithmetic":
                faces.append(0.5 * (eps + nxt))
            else:
                faces.append(2.0 * eps * nxt / (eps + nxt))
        return tuple(faces)

    def _check_singular_coulomb(self):
        """Allow ±inf in φ_c only where every face around the node equals ε_c and κ̄² = 0."""
        xp = self.xp
        inf = xp.isinf(self.phi_coulomb)
        if not bool(inf.any()):
            return
        ok = xp.ones(self.grid.shape, dtype=bool)
        for axis, face in enumerate(self.face_permittivities()):
            same = face == self.eps_cavity
            ok &= same & xp.roll(same, 1, axis=axis)
        if self.kappa2 is not None:
            ok &= self.kappa2 == 0
        bad = inf & ~ok
        if bool(bad.any()):
            idx = first_bad_index(bad)
            raise InputError(
                f"phi_coulomb is infinite at node {idx}, where a face permittivity differs from "
                f"eps_cavity={self.eps_cavity} or kappa2 > 0; a charge on a node must sit inside "
                "a region of permittivity eps_cavity"
            )

    # ------------------------------------------------------------------ display
    _repr_html_ = _display.problem_html

    def __repr__(self) -> str:
        eps = "faces" if self.epsilon_faces is not None else f"node map ({self.face_rule})"
        salt = "with salt" if self.has_salt else "no salt"
        if self.nonlinear:
            salt += f", nonlinear (z={self.ion_valence}, {self.temperature:g} K)"
        return (
            f"Problem({self.grid!r}, epsilon={eps}, eps_cavity={self.eps_cavity:g}, "
            f"{salt}, boundary={self.boundary!r})"
        )

    # ------------------------------------------------------------------ array libraries
    def to(self, xp) -> Problem:
        """The problem with its arrays in array library ``xp`` (itself when already there).

        Parameters
        ----------
        xp : module or {"numpy", "cupy"}
            ``numpy`` or ``cupy`` (the module or its name).

        Notes
        -----
        Arrays are converted, not validated again (they were at construction); the grid and
        every scalar are shared with this problem.
        """
        xp = _array_library(xp)
        if self.xp is xp:
            return self
        move = to_numpy if xp is np else xp.asarray
        out = copy.copy(self)
        for name in ("epsilon", "phi_coulomb", "kappa2", "boundary_values"):
            value = getattr(self, name)
            setattr(out, name, None if value is None else move(value))
        if self.epsilon_faces is not None:
            out.epsilon_faces = tuple(move(f) for f in self.epsilon_faces)
        return out

    # ------------------------------------------------------------------ from molecules
    @classmethod
    def from_maps(cls, maps) -> Problem:
        """The problem of maps built from atoms (:class:`pbsolver.molecule.maps.Maps`).

        The fields of ``Maps`` are arguments of ``Problem`` by name (its arrays are not copied).
        """
        return cls(**{f.name: getattr(maps, f.name) for f in dataclasses.fields(maps)})

    @classmethod
    def from_atoms(
        cls, atoms, spacing=0.5, margin=8.0, *positional, physics=None, **options
    ) -> Problem:
        """Build the grid and every map for ``atoms`` (ε_c = ε_in); see :func:`build_maps`.

        Parameters
        ----------
        atoms : Atoms
        spacing, margin : float
            Grid spacing and least gap between the atomic spheres and the outer layer, Å.
        *positional
            ``eps_in, eps_out, ionic_strength, surface, probe_radius, boundary`` may follow
            ``margin`` in this order, as keywords or positionally.
        physics : PhysicsOptions, optional
            The physics in one object; physics keywords given beside it override its fields.
        **options
            Fields of :class:`~pbsolver.PhysicsOptions` (``eps_in``, ``eps_out``,
            ``ionic_strength``, ``surface``, ``probe_radius``, ``ion_radius``, ``temperature``,
            ``boundary_kind``, ``ion_valence``, ``nonlinear``; by default ε_in 2, ε_out of
            water, no salt, "mol", 1.4 Å, 2 Å, 298.15 K, "mdh", 1, linear; None: the default
            or ``physics``' value), ``boundary``
            ({"dirichlet", "periodic"}: Debye–Hückel values on the outer layer, or periodic,
            which needs ``box=(Lx, Ly, Lz)``), and ``box``, ``grid``, ``shape``, ``center``,
            ``ses_step``, ``kappa_subsamples``, ``maps_backend``
            (:func:`pbsolver.molecule.maps.build_maps`).
        """
        from pbsolver.molecule.maps import build_maps

        if len(positional) > len(_FROM_ATOMS_POSITIONAL):
            raise TypeError(
                f"from_atoms() takes atoms, spacing, margin and at most "
                f"{len(_FROM_ATOMS_POSITIONAL)} more positional arguments "
                f"({', '.join(_FROM_ATOMS_POSITIONAL)}), got {len(positional)} more"
            )
        for name, value in zip(_FROM_ATOMS_POSITIONAL, positional, strict=False):
            if name in options:
                raise TypeError(f"from_atoms() got multiple values for argument {name!r}")
            options[name] = value
        maps = build_maps(atoms, physics=physics, spacing=spacing, margin=margin, **options)
        return cls.from_maps(maps)


#: What :meth:`Problem.from_atoms` takes positionally after ``margin``, in order.
_FROM_ATOMS_POSITIONAL = (
    "eps_in", "eps_out", "ionic_strength", "surface", "probe_radius", "boundary",
)  # fmt: skip


def _array_library(xp):
    """The array module named or given by ``xp`` (numpy or cupy)."""
    if isinstance(xp, str):
        if xp == "numpy":
            return np
        if xp == "cupy":
            import cupy

            return cupy
        raise InputError(f"array library must be 'numpy' or 'cupy', got {xp!r}")
    if xp is np or getattr(xp, "__name__", None) == "cupy":
        return xp
    raise InputError(f"array library must be the numpy or cupy module, got {xp!r}")


def _check_finite(a, name):
    xp = array_module(a)
    # one reduction, no temporary: a finite sum means every value is finite (a NaN or an
    # infinity makes it NaN or infinite); a sum that overflows is settled node by node below
    with np.errstate(over="ignore", invalid="ignore"):  # those cases go node by node
        total = a.sum()
    if bool(xp.isfinite(total)):
        return
    finite = xp.isfinite(a)
    if not bool(finite.all()):
        idx = first_bad_index(~finite)
        raise InputError(f"{name} must be finite, got {float(a[idx])} at node {idx}")


def _check_positive(a, name):
    _check_finite(a, name)
    if a.size and bool(a.min() <= 0):  # (min of an empty array raises)
        idx = first_bad_index(a <= 0)
        raise InputError(f"{name} must be > 0, got {float(a[idx])} at node {idx}")


#: From this many nodes, host face maps are checked by one compiled pass (see __init__).
SCAN_NODES = 1 << 17


def _scan_host_maps(faces, phi, kappa2):
    """:func:`pbsolver.backends.cpu.validation.scan_maps`'s flags for large host face maps.

    None (the NumPy checks then run in full) for device arrays, node maps and grids below
    :data:`SCAN_NODES`, which need no compiled kernel (nor numba's start-up).
    """
    arrays = [phi] + ([] if faces is None else list(faces)) + ([] if kappa2 is None else [kappa2])
    if faces is None or phi.size < SCAN_NODES or any(array_module(a) is not np for a in arrays):
        return None
    from pbsolver.backends.cpu.validation import scan_maps

    return scan_maps(tuple(np.ascontiguousarray(f) for f in faces), np.ascontiguousarray(phi),
                     None if kappa2 is None else np.ascontiguousarray(kappa2))  # fmt: skip


def _check_finite_on_boundary(a, name):
    xp = array_module(a)
    layers = (a[0], a[-1], a[:, 0], a[:, -1], a[:, :, 0], a[:, :, -1])
    if all(bool(xp.isfinite(layer).all()) for layer in layers):
        return
    bad = ~xp.isfinite(a)
    bad[1:-1, 1:-1, 1:-1] = False
    if bool(bad.any()):
        idx = first_bad_index(bad)
        raise InputError(f"{name} must be finite on the outer layer, got {float(a[idx])} at {idx}")
