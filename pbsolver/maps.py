"""From atoms to maps: grid placement, ε face maps, κ̄², φ_c and Dirichlet boundary values.

Conventions are those of DESIGN §1 and :mod:`pbsolver.grid`: lengths Å, charges e, φ in
kJ mol⁻¹ e⁻¹; ``ex[i, j, k]`` is the face between nodes (i, j, k) and (i+1, j, k).

Surfaces (what is "solute", permittivity ε_in; the rest is solvent, ε_out):

``"vdw"``
    The union of the atomic spheres.
``"mol"``
    The solvent-excluded (molecular) surface of APBS' ``srfm mol``: everything a probe sphere
    of radius ``probe_radius`` rolling over the atoms cannot reach. Computed exactly up to the
    sampling of the reentrant zone (see :mod:`pbsolver.backends.cpu_maps`): convex, toroidal
    and concave (three-atom) probe positions are enumerated analytically; along each grid line
    the zone between the vdW and the accessible spheres is sampled every ``ses_step`` Å and
    each change of side is found by bisection. Features thinner than ``ses_step`` that touch
    no vdW sphere can be missed.
``"smol"``
    ``"mol"`` followed by APBS' 9-point harmonic smoothing: each face's 1/ε (equivalently its
    edge fraction) averaged with the 8 nearest faces of the other two orientations.

Face permittivities come from the exact fraction f of each grid edge inside the solute:
ε_face = 1 / (f/ε_in + (1 − f)/ε_out), exactly ε_in at f = 1 and ε_out at f = 0.
"""

from __future__ import annotations

import math

import numpy as np

from .exceptions import InputError
from .grid import Grid
from .resources import check_memory

SURFACES = ("mol", "smol", "vdw")
BOUNDARY_KINDS = ("mdh", "sdh", "zero")
#: k = N_A e² / (4π ε0), kJ Å mol⁻¹ e⁻².
COULOMB_KJ = 1389.35457

# CODATA 2018 exact SI values
_AVOGADRO = 6.02214076e23
_ELEMENTARY = 1.602176634e-19
_BOLTZMANN = 1.380649e-23
_EPS0 = 8.8541878128e-12


# ---------------------------------------------------------------------- physical helpers
def kappa_from_ionic_strength(ionic_strength, eps_out=78.54, temperature=298.15) -> float:
    """Inverse Debye length κ (Å⁻¹) of a 1:1 electrolyte of ionic strength I (mol/L).

    κ² = 2 N_A e² I·1000 / (ε0 ε_out k_B T); κ⁻¹ ≈ 3.04/√I Å in water at 298 K.
    """
    ionic_strength = float(ionic_strength)
    if not (math.isfinite(ionic_strength) and ionic_strength >= 0):
        raise InputError(f"ionic_strength must be >= 0 mol/L, got {ionic_strength}")
    _positive(eps_out, "eps_out")
    _positive(temperature, "temperature")
    k2 = (2.0 * _AVOGADRO * _ELEMENTARY**2 * ionic_strength * 1000.0) / (
        _EPS0 * eps_out * _BOLTZMANN * temperature
    )
    return math.sqrt(k2) * 1e-10


def debye_length(ionic_strength, eps_out=78.54, temperature=298.15) -> float:
    """Debye length κ⁻¹, Å (inf without salt)."""
    k = kappa_from_ionic_strength(ionic_strength, eps_out, temperature)
    return math.inf if k == 0 else 1.0 / k


# ---------------------------------------------------------------------- grid placement
def nice_size(n_min: int, max_odd: int = 7) -> int:
    """Smallest n ≥ n_min with n − 1 = c·2^L, c ≤ ``max_odd`` (friendly to multigrid).

    Such a grid coarsens by halving down to c + 1 nodes a side: 33, 41, 49, 57, 65, 81, 97,
    113, 129, 161, 193, 225, 257, …

    >>> [nice_size(n) for n in (3, 40, 45, 100, 150)]
    [3, 41, 49, 113, 161]
    """
    n_min = max(3, int(n_min))
    n = n_min
    while True:
        m = n - 1
        while m % 2 == 0 and m > max_odd:
            m //= 2
        if m <= max_odd:
            return n
        n += 1


def grid_for_atoms(atoms, spacing=0.5, margin=8.0, *, shape=None, center=None, nice=True):
    """A grid around ``atoms``.

    Parameters
    ----------
    atoms : Atoms
    spacing : float or 3 floats
        Node spacing, Å (kept exactly).
    margin : float
        Least distance from any atomic sphere to the grid's outer layer, Å (ignored when
        ``shape`` is given).
    shape : 3 ints, optional
        Explicit node counts (used as given).
    center : 3 floats, optional
        Centre of the grid, Å. Default: the middle of the atoms' bounding box.
    nice : bool
        Round node counts up with :func:`nice_size` (multigrid-friendly).
    """
    spacing = np.broadcast_to(np.asarray(spacing, dtype=float), (3,)).copy()
    if not np.all(np.isfinite(spacing) & (spacing > 0)):
        raise InputError(f"spacing must be > 0 Å, got {spacing.tolist()}")
    lo, hi = atoms.bounds()
    if center is None:
        center = 0.5 * (lo + hi)
    center = np.asarray(center, dtype=float).reshape(3)
    if shape is None:
        margin = float(margin)
        if not (math.isfinite(margin) and margin >= 0):
            raise InputError(f"margin must be >= 0 Å, got {margin}")
        half = np.maximum(hi - center, center - lo) + margin
        counts = [int(math.ceil(2.0 * half[a] / spacing[a] - 1e-9)) + 1 for a in range(3)]
        shape = tuple(nice_size(c) if nice else max(3, c) for c in counts)
    shape = tuple(int(n) for n in shape)
    origin = center - 0.5 * (np.asarray(shape) - 1) * spacing
    return Grid(shape, spacing=tuple(spacing), origin=tuple(origin))


def grid_for_box(box, spacing=0.5, origin=(0.0, 0.0, 0.0), *, even=True):
    """A periodic grid filling an orthorhombic box: n nodes a side, spacing = L/n exactly.

    n is the smallest count ≥ L/spacing of the form c·2^L (c ≤ 7), even (red–black needs it).
    """
    box = _box(box)
    spacing = np.broadcast_to(np.asarray(spacing, dtype=float), (3,))
    shape = []
    for a in range(3):
        n = max(4, int(math.ceil(box[a] / spacing[a] - 1e-9)))
        while True:
            m = n
            while m % 2 == 0 and m > 7:
                m //= 2
            if m <= 7 and (n % 2 == 0 or not even):
                break
            n += 1
        shape.append(n)
    return Grid(tuple(shape), spacing=tuple(box / np.asarray(shape)), origin=origin)


# ---------------------------------------------------------------------- geometry
def face_fractions(
    atoms,
    grid,
    surface="mol",
    probe_radius=1.4,
    *,
    box=None,
    ses_step=None,
    nbisect=14,
    backend="cpu",
):
    """Fraction of each grid edge inside the solute: ``(fx, fy, fz)``, float64 in [0, 1].

    ``fx[i, j, k]`` is the edge from node (i, j, k) to (i+1, j, k); the last layer along each
    axis is the edge leaving the grid (the wrap-around edge of a periodic box).

    Parameters
    ----------
    atoms : Atoms
    grid : Grid
    surface : {"mol", "smol", "vdw"}
    probe_radius : float
        Solvent probe radius, Å (mol and smol).
    box : 3 floats, optional
        Periodic box lengths; atoms near the faces are imaged across them.
    ses_step : float, optional
        Sampling interval of the SES reentrant zone, Å. Default min(h/2, 0.25).
    nbisect : int
        Bisection steps locating each change of side in the reentrant zone.
    backend : {"cpu", "cuda"}
        Where the per-line kernels run (see :func:`map_backend`); results are NumPy arrays.
    """
    from .backends import cpu_maps as K

    backend = map_backend(backend)
    surface = _surface(surface)
    probe = float(probe_radius)
    if surface != "vdw" and not (math.isfinite(probe) and probe > 0):
        raise InputError(f"probe_radius must be > 0 Å, got {probe_radius}")
    pos, rad = atoms.positions, atoms.radii
    reach_extra = 2.0 * probe if surface != "vdw" else 0.0
    if box is not None:
        pos, rad = periodic_images(pos, rad, box, grid.origin, rad.max() + reach_extra + 1.0)
    out = [np.zeros(grid.shape) for _ in range(3)]
    axes = grid.axes()
    if surface == "vdw":
        for axis in range(3):
            a1, a2 = [a for a in range(3) if a != axis]
            bins = _plane_bins(pos, rad, axis, axes[a1], axes[a2])
            _union_lines(
                backend, out[axis], axis, axes[a1], axes[a2], grid.origin[axis],
                grid.spacing[axis], grid.shape[axis], pos, rad, bins,
            )  # fmt: skip
    else:
        acc = rad + probe
        nb_start, nb_index = K.neighbour_lists(pos, acc)
        features = None
        if backend == "cuda":
            from .backends import cuda_maps as C

            try:
                features = C.ses_features(pos, acc, nb_start, nb_index)
            except C.LineCapacityError as exc:
                _log_cpu_fallback("SES features", exc)  # too many neighbours: the CPU does it
                features = None
        if features is None:
            features = K.ses_features(pos, acc, nb_start, nb_index)
        exposed, circ_start, _circ_j, geom, arc_start, arcs = features
        exp_idx = np.flatnonzero(exposed)
        for axis in range(3):
            a1, a2 = [a for a in range(3) if a != axis]
            h = grid.spacing[axis]
            step = float(ses_step) if ses_step is not None else min(0.5 * h, 0.25)
            if not step > 0:
                raise InputError(f"ses_step must be > 0 Å, got {ses_step}")
            bins = _plane_bins(pos, acc, axis, axes[a1], axes[a2])
            ebins = _plane_bins(pos, acc + probe, axis, axes[a1], axes[a2], subset=exp_idx)
            if backend == "cuda":
                from .backends import cuda_maps as C

                try:
                    out[axis] += C.ses_lines(
                        grid.shape, axis, axes[a1], axes[a2], grid.origin[axis], h,
                        grid.shape[axis], pos, rad, acc, probe, step, int(nbisect), bins,
                        ebins, features, (nb_start, nb_index),
                    ).copy_to_host()  # fmt: skip
                    continue
                except C.LineCapacityError as exc:
                    _log_cpu_fallback(f"SES faces along axis {axis}", exc)
            K.ses_lines(
                out[axis], axis, axes[a1], axes[a2], grid.origin[axis], h, grid.shape[axis],
                pos, rad, acc, probe, step, int(nbisect), *bins, *ebins,
                exposed, nb_start, nb_index, circ_start, geom, arc_start, arcs,
            )  # fmt: skip
    for f in out:
        np.clip(f, 0.0, 1.0, out=f)
    if surface == "smol":
        out = list(smooth_fractions(*out))
    return tuple(out)


def smooth_fractions(fx, fy, fz):
    """APBS-style 9-point harmonic smoothing of face values, applied to edge fractions.

    Each face is averaged with the 8 faces of the other two orientations at distance h/√2
    (harmonic averaging of ε is arithmetic averaging of 1/ε, which is linear in f). Wraps
    around at the grid's ends (the outer faces of a Dirichlet grid lie in pure solvent).
    """

    def r(a, shift, axis):
        return np.roll(a, shift, axis=axis)

    sx = (
        fx
        + fy
        + r(fy, 1, 1)
        + r(fy, -1, 0)
        + r(r(fy, -1, 0), 1, 1)
        + fz
        + r(fz, 1, 2)
        + r(fz, -1, 0)
        + r(r(fz, -1, 0), 1, 2)
    ) / 9.0
    sy = (
        fy
        + fx
        + r(fx, 1, 0)
        + r(fx, -1, 1)
        + r(r(fx, -1, 1), 1, 0)
        + fz
        + r(fz, 1, 2)
        + r(fz, -1, 1)
        + r(r(fz, -1, 1), 1, 2)
    ) / 9.0
    sz = (
        fz
        + fx
        + r(fx, 1, 0)
        + r(fx, -1, 2)
        + r(r(fx, -1, 2), 1, 0)
        + fy
        + r(fy, 1, 1)
        + r(fy, -1, 2)
        + r(r(fy, -1, 2), 1, 1)
    ) / 9.0
    return sx, sy, sz


def faces_from_fractions(fractions, eps_in, eps_out, dtype=np.float64):
    """ε_face = 1 / (f/ε_in + (1 − f)/ε_out), exactly ε_in where f = 1 and ε_out where f = 0."""
    eps_in = _positive(eps_in, "eps_in")
    eps_out = _positive(eps_out, "eps_out")
    faces = []
    for f in fractions:
        e = 1.0 / (f / eps_in + (1.0 - f) / eps_out)
        e[f >= 1.0] = eps_in
        e[f <= 0.0] = eps_out
        faces.append(e.astype(dtype, copy=False))
    return tuple(faces)


def epsilon_faces(
    atoms, grid, eps_in=2.0, eps_out=78.54, surface="mol", probe_radius=1.4, **options
):
    """Face permittivities ``(ex, ey, ez)`` from the exact geometry (see :func:`face_fractions`)."""
    fr = face_fractions(atoms, grid, surface, probe_radius, **options)
    return faces_from_fractions(fr, eps_in, eps_out)


def ion_accessibility(atoms, grid, ion_radius=2.0, *, subsamples=4, box=None, backend="cpu"):
    """Ion-accessible fraction of each node's cell (the box of side h around the node).

    A point is accessible when it is farther than R_i + ``ion_radius`` from every atom centre
    (APBS' inflated-vdW ion exclusion; zero-radius atoms exclude a sphere of ``ion_radius``).
    The fraction is exact along z and sampled at ``subsamples``² lines across each cell.
    """
    backend = map_backend(backend)
    ion_radius = float(ion_radius)
    if not (math.isfinite(ion_radius) and ion_radius >= 0):
        raise InputError(f"ion_radius must be >= 0 Å, got {ion_radius}")
    s = int(subsamples)
    if s < 1:
        raise InputError(f"subsamples must be >= 1, got {subsamples}")
    pos, rad = atoms.positions, atoms.radii + ion_radius
    if box is not None:
        pos, rad = periodic_images(pos, rad, box, grid.origin, rad.max() + 1.0)
    x, y, _ = grid.axes()
    hx, hy, hz = grid.spacing
    covered = np.zeros(grid.shape)
    for a in range(s):
        for b in range(s):
            us = x + ((a + 0.5) / s - 0.5) * hx
            vs = y + ((b + 0.5) / s - 0.5) * hy
            bins = _plane_bins(pos, rad, 2, us, vs)
            _union_lines(
                backend, covered, 2, us, vs, grid.origin[2] - 0.5 * hz, hz, grid.shape[2], pos,
                rad, bins,
            )  # fmt: skip
    covered /= s * s
    return np.clip(1.0 - covered, 0.0, 1.0)


def kappa2_map(
    atoms,
    grid,
    ionic_strength,
    eps_out=78.54,
    ion_radius=2.0,
    temperature=298.15,
    *,
    subsamples=4,
    box=None,
    backend="cpu",
):
    """κ̄² = ε_out κ² × (ion-accessible fraction of the node's cell), Å⁻²; None without salt."""
    kappa = kappa_from_ionic_strength(ionic_strength, eps_out, temperature)
    if kappa == 0.0:
        return None
    frac = ion_accessibility(
        atoms, grid, ion_radius, subsamples=subsamples, box=box, backend=backend
    )
    return eps_out * kappa * kappa * frac


def coulomb_potential(atoms, grid, eps_cavity=2.0, *, box=None, backend="cpu"):
    """φ_c = Σ_i k q_i / (ε_c |r − r_i|) at every node by exact direct sum (kJ mol⁻¹ e⁻¹).

    A node exactly on a charged atom gets ±inf (allowed by :class:`~pbsolver.Problem` where
    the node is surrounded by ε_c and has no salt). With ``box`` (periodic), each atom
    contributes through its nearest image (minimum image convention).

    Raises
    ------
    InputError
        When charges of opposite sign sit on the same node (∞ − ∞).
    """
    from .backends import cpu_maps as K

    backend = map_backend(backend)
    eps_cavity = _positive(eps_cavity, "eps_cavity")
    keep = atoms.charges != 0
    pos = np.ascontiguousarray(atoms.positions[keep])
    q = np.ascontiguousarray(atoms.charges[keep])
    out = np.empty(grid.shape)
    periodic = box is not None
    boxa = _box(box) if periodic else np.ones(3)
    if q.size == 0:
        out[...] = 0.0
        return out
    if backend == "cuda":
        from .backends import cuda_maps as C

        out = C.coulomb_sum(
            grid.shape, grid.origin, grid.spacing, pos, q, COULOMB_KJ / eps_cavity, periodic, boxa
        ).copy_to_host()
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            K.coulomb_sum(
                out,
                np.asarray(grid.origin),
                np.asarray(grid.spacing),
                pos,
                q,
                COULOMB_KJ / eps_cavity,
                periodic,
                boxa,
            )
    if np.isnan(out).any():
        idx = tuple(int(v) for v in np.argwhere(np.isnan(out))[0])
        raise InputError(
            f"charges of opposite sign sit exactly on grid node {idx}: shift the grid origin"
        )
    return out


def boundary_values(
    atoms,
    grid,
    eps_in=2.0,
    eps_out=78.54,
    ionic_strength=0.0,
    temperature=298.15,
    kind="mdh",
    eps_cavity=None,
    ion_radius=0.0,
    backend="cpu",
):
    """Dirichlet values of φ_rf on the grid's outer layer (inner nodes zero).

    ``"mdh"``: the Debye–Hückel sum of DESIGN §1 over atoms, with a_i the atomic radius plus
    ``ion_radius`` (the distance of closest approach of the ions; exact outside a spherical
    ion with a Stern layer; irrelevant without salt);
    ``"sdh"``: the same for one sphere holding the total charge at the charge centre, radius
    the largest distance of an atomic sphere from it (APBS' ``bcfl sdh``); ``"zero"``.
    """
    if kind not in BOUNDARY_KINDS:
        raise InputError(f"boundary kind must be one of {BOUNDARY_KINDS}, got {kind!r}")
    out = np.zeros(grid.shape)
    if kind == "zero":
        return out
    from .backends import cpu_maps as K

    eps_cavity = _positive(eps_in if eps_cavity is None else eps_cavity, "eps_cavity")
    kappa = kappa_from_ionic_strength(ionic_strength, eps_out, temperature)
    mask = np.zeros(grid.shape, dtype=bool)
    mask[[0, -1], :, :] = True
    mask[:, [0, -1], :] = True
    mask[:, :, [0, -1]] = True
    idx = np.argwhere(mask)
    points = np.asarray(grid.origin) + idx * np.asarray(grid.spacing)
    if kind == "mdh":
        pos, q, a = atoms.positions, atoms.charges, atoms.radii + float(ion_radius)
    else:
        qa = np.abs(atoms.charges)
        w = qa / qa.sum() if qa.sum() > 0 else np.full(len(atoms), 1.0 / len(atoms))
        c = (atoms.positions * w[:, None]).sum(axis=0)
        rmax = float((np.linalg.norm(atoms.positions - c, axis=1) + atoms.radii).max())
        pos, q = c[None, :], np.array([atoms.total_charge])
        a = np.array([rmax + float(ion_radius)])
    backend = map_backend(backend)
    if backend == "cuda":
        from .backends import cuda_maps as C

        kernel = C.debye_huckel_points
    else:
        kernel = K.debye_huckel_points
    vals = kernel(
        np.ascontiguousarray(points),
        np.ascontiguousarray(pos),
        np.ascontiguousarray(q, dtype=float),
        np.ascontiguousarray(a, dtype=float),
        kappa,
        COULOMB_KJ,
        _positive(eps_out, "eps_out"),
        eps_cavity,
    )
    out[mask] = vals
    return out


def periodic_images(positions, radii, box, origin, cutoff):
    """Atoms wrapped into the box at ``origin`` plus their images within ``cutoff`` of it."""
    box = _box(box)
    origin = np.asarray(origin, dtype=float)
    wrapped = origin + np.mod(positions - origin, box)
    pos_list, rad_list = [], []
    for sx in (-1, 0, 1):
        for sy in (-1, 0, 1):
            for sz in (-1, 0, 1):
                p = wrapped + np.array([sx, sy, sz]) * box
                inside = np.all((p > origin - cutoff) & (p < origin + box + cutoff), axis=1)
                pos_list.append(p[inside])
                rad_list.append(radii[inside])
    return np.ascontiguousarray(np.concatenate(pos_list)), np.concatenate(rad_list)


# ---------------------------------------------------------------------- the whole problem
def build_problem(
    atoms,
    grid=None,
    *,
    spacing=0.5,
    margin=8.0,
    eps_in=2.0,
    eps_out=78.54,
    ionic_strength=0.0,
    surface="mol",
    probe_radius=1.4,
    ion_radius=2.0,
    temperature=298.15,
    boundary="dirichlet",
    boundary_kind="mdh",
    box=None,
    shape=None,
    center=None,
    ses_step=None,
    kappa_subsamples=4,
    maps_backend="cpu",
):
    """Grid and every map for ``atoms``; returns a :class:`~pbsolver.Problem` (ε_c = ε_in).

    See :meth:`pbsolver.Problem.from_atoms` for the parameters. With ``boundary="periodic"``
    the grid fills ``box`` (required) and geometry and φ_c use periodic images.
    """
    from .molecule import Atoms
    from .problem import Problem

    if not isinstance(atoms, Atoms):
        raise InputError(f"atoms must be a pbsolver.Atoms, got {type(atoms).__name__}")
    eps_in = _positive(eps_in, "eps_in")
    eps_out = _positive(eps_out, "eps_out")
    if boundary not in ("dirichlet", "periodic"):
        raise InputError(f"boundary must be 'dirichlet' or 'periodic', got {boundary!r}")
    if boundary == "periodic":
        if box is None:
            raise InputError("boundary='periodic' needs box=(Lx, Ly, Lz) in Å")
        if grid is None:
            grid = grid_for_box(box, spacing)
    else:
        if box is not None:
            raise InputError("box is only used with boundary='periodic'")
        if grid is None:
            grid = grid_for_atoms(atoms, spacing, margin, shape=shape, center=center)
        lo, hi = atoms.bounds(with_radii=False)
        glo = np.asarray(grid.origin)
        ghi = glo + np.asarray(grid.lengths)
        if np.any(lo <= glo) or np.any(hi >= ghi):
            raise InputError("some atoms lie on or outside the grid's outer layer")
    # maps and a solve on this grid must fit in memory: refuse before allocating any map
    check_memory(grid.shape, molecule=True, n_atoms=len(atoms), what="the molecule's grid")
    be = map_backend(maps_backend)
    fr = face_fractions(atoms, grid, surface, probe_radius, box=box, ses_step=ses_step, backend=be)
    faces = faces_from_fractions(fr, eps_in, eps_out)
    kappa2 = kappa2_map(
        atoms,
        grid,
        ionic_strength,
        eps_out,
        ion_radius,
        temperature,
        subsamples=kappa_subsamples,
        box=box,
        backend=be,
    )
    phi_c = coulomb_potential(atoms, grid, eps_in, box=box, backend=be)
    bvals = None
    if boundary == "dirichlet":
        bvals = boundary_values(
            atoms,
            grid,
            eps_in,
            eps_out,
            ionic_strength,
            temperature,
            kind=boundary_kind,
            ion_radius=ion_radius,
            backend=be,
        )
    _check_charges_on_nodes(atoms, grid, phi_c, faces, kappa2, eps_in)
    return Problem(
        grid,
        phi_coulomb=phi_c,
        eps_cavity=eps_in,
        epsilon_faces=faces,
        kappa2=kappa2,
        boundary=boundary,
        boundary_values=bvals,
    )


def _check_charges_on_nodes(atoms, grid, phi_c, faces, kappa2, eps_in):
    inf = np.isinf(phi_c)
    if not inf.any():
        return
    for idx in np.argwhere(inf):
        i, j, k = (int(v) for v in idx)
        around = [
            faces[0][i, j, k],
            faces[0][i - 1, j, k],
            faces[1][i, j, k],
            faces[1][i, j - 1, k],
            faces[2][i, j, k],
            faces[2][i, j, k - 1],
        ]
        salty = kappa2 is not None and kappa2[i, j, k] > 0
        if salty or any(f != eps_in for f in around):
            point = np.asarray(grid.origin) + idx * np.asarray(grid.spacing)
            which = int(np.argmin(np.linalg.norm(atoms.positions - point, axis=1)))
            raise InputError(
                f"atom {which} (charge {atoms.charges[which]:+g} e) sits exactly on grid node "
                f"{(i, j, k)}, which is not surrounded by solute of permittivity eps_in: its "
                "Coulomb potential is infinite there; move the grid (center=...) slightly"
            )


# ---------------------------------------------------------------------- small helpers
MAP_BACKENDS = ("cpu", "cuda")


def map_backend(backend) -> str:
    """Resolve where map kernels run: "cpu" (numba) or "cuda" (numba-cuda twins).

    ``"auto"`` means "cpu" for now: the CUDA map kernels are checked against the CPU ones
    under the simulator but not yet measured on a GPU. ``"cuda"`` needs numba-cuda and a
    device (or ``NUMBA_ENABLE_CUDASIM=1``).
    """
    if backend == "auto":
        return "cpu"
    if backend not in MAP_BACKENDS:
        raise InputError(f"map backend must be one of {MAP_BACKENDS} or 'auto', got {backend!r}")
    if backend == "cuda":
        try:
            from numba import cuda
        except ImportError as exc:
            from .exceptions import BackendUnavailableError

            raise BackendUnavailableError("CUDA map kernels need numba-cuda") from exc
        if not cuda.is_available():
            from .exceptions import BackendUnavailableError

            raise BackendUnavailableError("CUDA map kernels need a usable CUDA device")
    return backend


def _union_lines(backend, out, axis, us, vs, t0, h, nbins, pos, rad, bins):
    """Add the sphere-union coverage of the lines to ``out`` on the chosen backend."""
    if backend == "cuda":
        from .backends import cuda_maps as C

        try:
            out += C.sphere_union_lines(
                out.shape, axis, us, vs, t0, h, nbins, pos, rad, bins
            ).copy_to_host()
            return
        except C.LineCapacityError as exc:
            _log_cpu_fallback(f"sphere-union faces along axis {axis}", exc)
    from .backends import cpu_maps as K

    K.sphere_union_lines(out, axis, us, vs, t0, h, nbins, pos, rad, *bins)


def _plane_bins(pos, reach, axis, us, vs, subset=None):
    """2D bins of the atoms (or of ``subset``, global indices kept) across ``axis``."""
    from .backends.cpu_maps import plane_bins

    a1, a2 = [a for a in range(3) if a != axis]
    maxreach = float(reach.max()) if reach.size else 0.0
    size = max(0.5 * maxreach, 0.25)  # Å; never tiny (bare charges have zero reach)
    u0 = us[0] - maxreach - size
    v0 = vs[0] - maxreach - size
    nbu = int((us[-1] + maxreach - u0) / size) + 2
    nbv = int((vs[-1] + maxreach - v0) / size) + 2
    if subset is None:
        start, order = plane_bins(pos[:, a1], pos[:, a2], u0, v0, size, nbu, nbv)
    else:
        sub = np.asarray(subset, dtype=np.int64)
        start, order = plane_bins(pos[sub, a1], pos[sub, a2], u0, v0, size, nbu, nbv)
        order = sub[order]
    return u0, v0, size, nbu, nbv, start, order


def _surface(surface):
    if surface not in SURFACES:
        raise InputError(f"surface must be one of {SURFACES}, got {surface!r}")
    return surface


def _positive(value, name) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a number, got {value!r}") from exc
    if not (math.isfinite(v) and v > 0):
        raise InputError(f"{name} must be finite and > 0, got {value!r}")
    return v


def _box(box):
    b = np.asarray(box, dtype=float).reshape(-1)
    if b.shape != (3,) or not np.all(np.isfinite(b) & (b > 0)):
        raise InputError(f"box must be three lengths > 0 Å, got {box!r}")
    return b


def _log_cpu_fallback(what, exc):
    """Say (once per map) that a CUDA map kernel ran out of local capacity and the CPU took over.

    The result is the same either way (the kernels are exact twins); only the time differs.
    """
    import logging

    logging.getLogger("pbsolver").warning("%s built on the CPU instead of the GPU: %s", what, exc)
