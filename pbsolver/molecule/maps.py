"""From atoms to maps: grid placement, ε face maps, κ̄², φ_c and Dirichlet boundary values.

Conventions are those of the README and :mod:`pbsolver.grid`: lengths Å, charges e, φ in
kJ mol⁻¹ e⁻¹; ``ex[i, j, k]`` is the face between nodes (i, j, k) and (i+1, j, k).

Surfaces (what is "solute", permittivity ε_in; the rest is solvent, ε_out):

``"vdw"``
    The union of the atomic spheres.
``"mol"``
    The solvent-excluded (molecular) surface of APBS' ``srfm mol``: everything a probe sphere
    of radius ``probe_radius`` rolling over the atoms cannot reach. Computed exactly up to the
    sampling of the reentrant zone (see :mod:`pbsolver.backends.cpu.maps`): convex, toroidal
    and concave (three-atom) probe positions are enumerated analytically; along each grid line
    the zone between the vdW and the accessible spheres is sampled every ``ses_step`` Å and
    each change of side is found by bisection. Features thinner than ``ses_step`` that touch
    no vdW sphere can be missed.
``"smol"``
    ``"mol"`` followed by APBS' 9-point harmonic smoothing: each face's 1/ε (equivalently its
    edge fraction) averaged with the 8 nearest faces of the other two orientations.
``"svdw"``
    The union of the atomic spheres with a smooth boundary of half-width 0.1 Å, its edge
    fractions averaged over Gauss points (:mod:`pbsolver.molecule.smooth_surface`): the energy
    is differentiable in the positions, the surface for forces.

Face permittivities come from the exact fraction f of each grid edge inside the solute:
ε_face = 1 / (f/ε_in + (1 − f)/ε_out), exactly ε_in at f = 1 and ε_out at f = 0 (fractions
within 1e-12 of 0 or 1 are snapped to it, so an edge inside the solute is ε_in bit for bit).

The maps run on a :class:`~pbsolver.backends.Backend` (its :meth:`map_kernels`); every public
builder takes ``backend`` as a Backend or a name ("cpu", "cuda", "auto") and returns NumPy
arrays; :func:`build_maps` with ``on_device=True`` (and the builders it calls) leaves the maps
of a GPU's kernels on that GPU instead, for a solve there (the same values: the same bodies,
and array code only for what is elementwise).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from pbsolver.arrays import array_module, flat_values, to_numpy
from pbsolver.backends.bodies.maps import (
    FRACTION_SNAP,
    LineCapacityError,
    on_node_tol2,
    plane_bins,
)
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.molecule.apbs_surface import APBS_SURFACES, apbs_fractions
from pbsolver.molecule.kept import (
    RECORDS,
    KeptResults,
    content_key,
    grid_key,
    recording,
)
from pbsolver.molecule.smooth_surface import union_fractions
from pbsolver.options import (
    BOUNDARY_KINDS,
    EPS_WATER,
    SPHERE_SURFACES,
    SURFACES,
    PhysicsOptions,
    check_box,
    choice,
    flag,
    nonnegative,
    positive,
    valence,
)
from pbsolver.progress import progress_bar
from pbsolver.resources import check_memory

#: k = N_A e² / (4π ε0), kJ Å mol⁻¹ e⁻².
COULOMB_KJ = 1389.35457


# ---------------------------------------------------------------------- physical helpers
def kappa_from_ionic_strength(ionic_strength, eps_out=None, temperature=None) -> float:
    """Inverse Debye length κ (Å⁻¹) of a 1:1 electrolyte of ionic strength I (mol/L).

    ``eps_out`` and ``temperature`` default to those of :class:`~pbsolver.PhysicsOptions`
    (water, 298.15 K); see :attr:`pbsolver.PhysicsOptions.kappa` for the formula.
    """
    return PhysicsOptions.build(
        ionic_strength=ionic_strength, eps_out=eps_out, temperature=temperature
    ).kappa


def debye_length(ionic_strength, eps_out=None, temperature=None) -> float:
    """Debye length κ⁻¹, Å (inf without salt)."""
    return PhysicsOptions.build(
        ionic_strength=ionic_strength, eps_out=eps_out, temperature=temperature
    ).debye_length


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
        margin = nonnegative(margin, "margin")
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
    box = check_box(box)
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
    ion_radius=0.0,
    on_device=False,
):
    """Fraction of each grid edge inside the solute: ``(fx, fy, fz)``, float64 in [0, 1].

    ``fx[i, j, k]`` is the edge from node (i, j, k) to (i+1, j, k); the last layer along each
    axis is the edge leaving the grid (the wrap-around edge of a periodic box).

    Parameters
    ----------
    atoms : Atoms
    grid : Grid
    surface : {"mol", "smol", "vdw", "svdw", "apbs-mol", "apbs-smol"}
        "apbs-mol" and "apbs-smol" are APBS's point-switched maps (0, 1, or thirds for smol;
        :func:`pbsolver.molecule.apbs_surface.apbs_fractions`), on the CPU, without ``box``.
    probe_radius : float
        Solvent probe radius, Å (mol and smol). 0 (APBS ``srad 0``): a point probe reaches every
        point outside the spheres, so "mol" is the vdW surface (the same fractions as "vdw",
        bit for bit) and "smol" the smoothed vdW surface.
    box : 3 floats, optional
        Periodic box lengths; atoms near the faces are imaged across them.
    ses_step : float, optional
        Sampling interval of the SES reentrant zone, Å. Default min(h/2, 0.25).
    nbisect : int
        Bisection steps locating each change of side in the reentrant zone.
    backend : Backend or {"cpu", "cuda", "auto"}
        Where the per-line kernels run (see :func:`map_backend`); results are NumPy arrays.
    ion_radius : float
        The largest ion radius, Å, 0 without salt (APBS surfaces only: APBS's sphere-point
        density follows it).
    on_device : bool
        Leave the fractions on the GPU of ``backend`` (CuPy arrays) where its kernels run
        there (:meth:`~pbsolver.backends.bodies.maps.MapKernels.device_results`); NumPy arrays
        elsewhere, and for the APBS surfaces.
    """
    backend = map_backend(backend)
    surface = _surface(surface)
    probe = nonnegative(probe_radius, "probe_radius")
    if surface in APBS_SURFACES:
        if box is not None:
            raise InputError(f"surface {surface!r} is APBS's, which has no periodic box")
        return apbs_fractions(atoms, grid, probe, smooth=APBS_SURFACES[surface],
                              ion_radius=ion_radius)  # fmt: skip
    # a zero-radius probe leaves no reentrant zone: the SES is the union of the spheres
    spheres_only = reentrant_probe(surface, probe) == 0
    pos, rad = atoms.positions, atoms.radii
    if box is not None:
        pos, rad = periodic_images(pos, rad, box, grid.origin,
                                   image_cutoff(rad, surface, probe))  # fmt: skip
    device = device_kernels(backend, on_device)
    xp = np if device is None else device.xp
    out = [None] * 3
    axes = grid.axes()
    if surface == "svdw":  # array code: on the backend's array library (CuPy on a GPU)
        fractions = union_fractions(pos, rad, grid, xp=backend.array_module())
        out = [to_numpy(f) if device is None else xp.asarray(f) for f in fractions]
    elif spheres_only:
        for axis in range(3):
            a1, a2 = [a for a in range(3) if a != axis]
            bins = line_bins(pos, rad, axis, axes[a1], axes[a2])
            out[axis] = _run(
                backend, f"sphere-union faces along axis {axis}", "sphere_union_sets",
                grid.shape, axis, [(axes[a1], axes[a2], bins)], grid.origin[axis],
                grid.spacing[axis], grid.shape[axis], pos, rad, device=device,
            )  # fmt: skip
    else:
        geometry = ses_geometry(backend, pos, rad, probe)
        for axis in range(3):
            a1, a2 = [a for a in range(3) if a != axis]
            out[axis] = ses_line_fractions(backend, grid, axis, axes[a1], axes[a2], pos, rad,
                                           probe, geometry, ses_step, nbisect,
                                           device=device)  # fmt: skip
    # each axis' lines come as a new float64 array of the grid's shape, filled in place below
    out = [xp.ascontiguousarray(f, dtype=np.float64) for f in out]
    snap = snap_fractions if device is None else device.snap_fractions
    for f in out:
        snap(f)
    if surface == "smol":
        smooth = smooth_fractions if device is None else device.smooth_fractions
        out = list(smooth(*out))
    return tuple(out)


#: How many molecules' SES geometry :func:`ses_geometry` keeps (APBS inputs and focusing map
#: one molecule on several grids; an MD frame's atoms replace the last frame's).
GEOMETRY_KEPT = 4
#: How many φ_c and ion-accessibility maps are kept, and up to what size (bytes) each: APBS
#: inputs map a molecule with the same charges, radii and grid for a solvated and a reference
#: calculation (which differ in ε_out only).
MAPS_KEPT, MAP_BYTES_KEPT = 2, 1 << 25
#: How many φ_c maps are kept, and how many bytes all of them at most: a binding input maps
#: each part on the grids (one to three focusing levels) that its complex then takes, and the
#: complex's φ_c is the sum of its parts' (see :func:`coulomb_potential`).
COULOMB_MAPS_KEPT, COULOMB_BYTES_KEPT = 6, 3 << 25
_geometry = KeptResults(GEOMETRY_KEPT)
_coulomb_maps = KeptResults(COULOMB_MAPS_KEPT, MAP_BYTES_KEPT, COULOMB_BYTES_KEPT)
_access_maps = KeptResults(MAPS_KEPT, MAP_BYTES_KEPT)


def clear_kept_maps() -> None:
    """Forget the SES geometry and the maps kept for reuse, e.g. to free their memory.

    Those of :func:`ses_geometry`, :func:`coulomb_potential` and :func:`ion_accessibility`, and
    the geometry kept by :func:`~pbsolver.molecule.kept.recording_lines`.
    """
    for kept in (_geometry, _coulomb_maps, _access_maps, RECORDS):
        kept.clear()


def _line_recorders(backend, device):
    """The backend's recording line kernels, or None.

    They map the lines while :func:`~pbsolver.molecule.kept.recording_lines` is on and the maps
    come back to the host, on a backend that has them.
    """
    if not recording() or device is not None:
        return None
    return backend.line_recorders()


def _line_record_key(axis, us, vs, t0, h, nbins, pos, rad, probe, step, nbisect):
    return ("ses", int(axis), float(t0), float(h), int(nbins), float(probe), float(step),
            int(nbisect), *content_key(us, vs, pos, rad))  # fmt: skip


def recorded_ses_lines(axis, us, vs, t0, h, nbins, pos, rad, probe, step, nbisect):
    """The kept intervals of the SES lines along ``axis`` (``kept.recording_lines``), or None.

    The arguments are the lines' and the atoms' as :func:`ses_line_fractions` mapped them
    (``pos``, ``rad``: centres and vdW radii, periodic images included; ``step`` and
    ``nbisect`` resolved by :func:`ses_sampling_step` and :func:`ses_bisections`).
    """
    return RECORDS.get(_line_record_key(axis, us, vs, t0, h, nbins, pos, rad, probe, step,
                                              nbisect))  # fmt: skip


def ses_geometry(backend, pos, rad, probe):
    """What every SES line of a molecule needs: ``(neighbour lists, SES features, exposed)``.

    ``pos``, ``rad``: atom centres and radii (Å), ``probe`` the probe radius; the neighbour
    lists pair overlapping accessible spheres (R + r_p), the features are
    :func:`pbsolver.backends.cpu.maps.ses_features`'s and ``exposed`` the indices of the atoms
    whose accessible sphere is exposed. They depend on the atoms only, not on a grid, so the
    last :data:`GEOMETRY_KEPT` are kept (by the contents of ``pos`` and ``rad``) and handed out
    again to a call with the same atoms; callers only read them.
    """
    key = (backend.name, float(probe), *content_key(pos, rad))
    kept = _geometry.get(key)
    if kept is not None:
        return kept
    acc = rad + probe
    nb = backend.map_kernels().neighbour_lists(pos, acc)
    # too many neighbours for the GPU's buffers: the CPU does it
    features = _run(backend, "SES features", "ses_features", pos, acc, *nb)
    geometry = (nb, features, np.flatnonzero(features[0]))
    _geometry.put(key, geometry)
    return geometry


def ses_line_fractions(backend, grid, axis, us, vs, pos, rad, probe, geometry, ses_step=None,
                       nbisect=14, only=None, device=None):  # fmt: skip
    """SES fractions of the edges of the grid lines along ``axis`` through ``us`` × ``vs``.

    ``us``, ``vs``: coordinates (Å) of the lines along the other two axes in increasing axis
    order (all of ``grid``'s nodes, or a contiguous run of them); ``geometry`` is
    :func:`ses_geometry`'s for the same atoms. Returns an array shaped as the grid with the two
    other axes cut to ``len(us)`` and ``len(vs)``, unsnapped (:func:`snap_fractions`).
    ``only`` (bool, ``(len(us), len(vs))``), when given, names the lines the caller keeps: a
    backend may leave the others out (their fractions are then 0). ``device``
    (:func:`device_kernels`' namespace, or None): the result stays on that GPU.
    """
    a1, a2 = [a for a in range(3) if a != axis]
    nb, features, exposed = geometry
    acc = rad + probe
    shape = list(grid.shape)
    shape[a1], shape[a2] = len(us), len(vs)
    h = grid.spacing[axis]
    bins = line_bins(pos, acc, axis, us, vs)
    ebins = line_bins(pos, acc + probe, axis, us, vs, subset=exposed)
    step, nbisect = ses_sampling_step(h, ses_step), ses_bisections(nbisect)
    recorders = _line_recorders(backend, device) if only is None else None
    if recorders is not None:
        out, recorded = recorders.ses_lines_recorded(
            tuple(shape), axis, us, vs, grid.origin[axis], h, grid.shape[axis], pos, rad, acc,
            probe, step, nbisect, bins, ebins, features, nb,
        )  # fmt: skip
        key = _line_record_key(axis, us, vs, grid.origin[axis], h, grid.shape[axis], pos, rad,
                               probe, step, nbisect)  # fmt: skip
        RECORDS.put(key, recorded, recorded[0].nbytes + recorded[1].nbytes)
        return out
    return _run(
        backend, f"SES faces along axis {axis}", "ses_lines", tuple(shape), axis, us, vs,
        grid.origin[axis], h, grid.shape[axis], pos, rad, acc, probe, step, nbisect, bins,
        ebins, features, nb, only=only, device=device,
    )  # fmt: skip


def reentrant_probe(surface, probe_radius) -> float:
    """The probe radius of ``surface``'s reentrant zone, Å.

    0 for the sphere surfaces ("vdw", "svdw") and for a zero probe (the SES is then the union
    of the spheres).
    """
    return 0.0 if surface in SPHERE_SURFACES else float(probe_radius)


def image_cutoff(radii, surface, probe_radius) -> float:
    """How far beyond a periodic box's faces :func:`face_fractions` images atoms, Å.

    A sphere reaches its radius; the reentrant zone of a probe reaches two probe radii more.
    """
    return float(np.max(radii)) + 2.0 * reentrant_probe(surface, probe_radius) + 1.0


def smooth_fractions(fx, fy, fz):
    """APBS-style 9-point harmonic smoothing of face values, applied to edge fractions.

    Each face is averaged with the 8 faces of the other two orientations at distance h/√2
    (harmonic averaging of ε is arithmetic averaging of 1/ε, which is linear in f). Wraps
    around at the grid's ends (the outer faces of a Dirichlet grid lie in pure solvent).

    The fractions are those of :func:`face_fractions` before smoothing: in [0, 1] and snapped
    (:func:`snap_fractions`). One compiled loop over the nodes does it, the MD engine's per-node
    body (:mod:`pbsolver.backends.bodies.frames`), which reads each fraction through that snap
    (no change to snapped ones); float64 NumPy arrays out.
    """
    from pbsolver.backends.cpu.frame_ses import smooth

    f = [np.ascontiguousarray(a, dtype=np.float64) for a in (fx, fy, fz)]
    if not f[0].shape == f[1].shape == f[2].shape or f[0].ndim != 3:
        raise InputError(f"smooth_fractions needs three 3D arrays of one shape, got "
                         f"{[a.shape for a in f]}")  # fmt: skip
    out = tuple(np.empty_like(f[0]) for _ in range(3))
    nx, ny, nz = f[0].shape
    smooth(*f, *out, 1, nx, ny, nz, nx)  # one block of nx planes
    return out


def snap_fractions(f):
    """Clip edge fractions to [0, 1] in place and snap those within 1e-12 of 0 or 1 to it.

    An edge inside the solute sums its covered pieces to 1 ± a rounding error; snapped, its face
    is ε_in exactly (see :func:`faces_from_fractions`).
    """
    if isinstance(f, np.ndarray) and f.dtype == np.float64 and f.flags.c_contiguous:
        from pbsolver.backends.cpu.maps import snap_fractions as kernel

        kernel(f)  # one pass, the same values
        return f
    np.clip(f, 0.0, 1.0, out=f)
    f[f >= 1.0 - FRACTION_SNAP] = 1.0
    f[f <= FRACTION_SNAP] = 0.0
    return f


def faces_from_fractions(fractions, eps_in, eps_out, dtype=np.float64):
    """ε_face = 1 / (f/ε_in + (1 − f)/ε_out); exactly ε_in where f ≥ 1 − 1e-12, ε_out near 0.

    The same rule as the frame engine's face body
    (:func:`pbsolver.backends.bodies.maps.face_eps_body`): a face inside the solute equals ε_in
    bit for bit, so the discretisation's ε = ε_c rule applies around a charge on a node.
    """
    eps_in = positive(eps_in, "eps_in")
    eps_out = positive(eps_out, "eps_out")
    from pbsolver.backends.cpu.maps import faces_from_fractions as kernel

    faces = []
    for f in fractions:
        if isinstance(f, np.ndarray) and f.dtype == np.float64 and f.flags.c_contiguous:
            e = np.empty(f.shape)
            kernel(f, eps_in, eps_out, e)  # one pass, the same values
            faces.append(e.astype(dtype, copy=False))
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            e = 1.0 / (f / eps_in + (1.0 - f) / eps_out)
        e[f >= 1.0 - FRACTION_SNAP] = eps_in
        e[f <= FRACTION_SNAP] = eps_out
        faces.append(e.astype(dtype, copy=False))
    return tuple(faces)


def epsilon_faces(
    atoms, grid, eps_in=2.0, eps_out=EPS_WATER, surface="mol", probe_radius=1.4, **options
):
    """Face permittivities ``(ex, ey, ez)`` from the exact geometry (see :func:`face_fractions`)."""
    fr = face_fractions(atoms, grid, surface, probe_radius, **options)
    return faces_from_fractions(fr, eps_in, eps_out)


def ion_accessibility(atoms, grid, ion_radius=2.0, *, subsamples=4, box=None, backend="cpu",
                      on_device=False):  # fmt: skip
    """Ion-accessible fraction of each node's cell (the box of side h around the node).

    A point is accessible when it is farther than R_i + ``ion_radius`` from every atom centre
    (APBS' inflated-vdW ion exclusion; zero-radius atoms exclude a sphere of ``ion_radius``).
    The fraction is exact along z and sampled at ``subsamples``² lines across each cell;
    fractions within 1e-12 of 0 or 1 are snapped to it (:func:`snap_fractions`).

    The last few maps are kept (:data:`MAPS_KEPT`) and a call with the same atoms, grid and
    options gets a copy of one. ``on_device``: as :func:`face_fractions`'.
    """
    backend = map_backend(backend)
    device = device_kernels(backend, on_device)
    ion_radius = float(ion_radius)
    if not (math.isfinite(ion_radius) and ion_radius >= 0):
        raise InputError(f"ion_radius must be >= 0 Å, got {ion_radius}")
    s = int(subsamples)
    if s < 1:
        raise InputError(f"subsamples must be >= 1, got {subsamples}")
    key = (backend.name, device is not None, ion_radius, s, grid_key(grid, box),
           *content_key(atoms.positions, atoms.radii))  # fmt: skip
    kept = _access_maps.get(key)
    if kept is not None:
        return kept.copy()
    out = _accessible_fraction(atoms, grid, ion_radius, s, box, backend, device)
    _access_maps.put(key, out.copy(), out.nbytes)
    return out


def ion_lines(grid, s):
    """The ion-accessible map's lines along z: ``(us, vs, t0)``, one plane s times finer.

    Line i·s + a of ``us`` is the a-th of the s lines across cell column i (at x_i + ((a + ½)/s
    − ½) h_x; ``vs`` alike); a cell k along z spans [t0 + k h_z, t0 + (k + 1) h_z). The map
    and its forces (:func:`pbsolver.forces.ionic.ionic_gradient`) take the same coordinates.
    """
    x, y, _ = grid.axes()
    hx, hy, hz = grid.spacing
    offsets = np.array([(a + 0.5) / s - 0.5 for a in range(s)])
    us = (x[:, None] + offsets[None, :] * hx).ravel()
    vs = (y[:, None] + offsets[None, :] * hy).ravel()
    return us, vs, grid.origin[2] - 0.5 * hz


def _ion_record_key(us, vs, t0, h, nbins, pos, rad):
    return ("ions", float(t0), float(h), int(nbins), *content_key(us, vs, pos, rad))


def recorded_ion_lines(us, vs, t0, h, nbins, pos, rad):
    """The kept intervals of the ion-accessible map's lines (``kept.recording_lines``), or None.

    ``us``, ``vs``, ``t0`` from :func:`ion_lines`; ``pos``, ``rad``: the ion-inflated spheres
    as the map took them (periodic images included).
    """
    return RECORDS.get(_ion_record_key(us, vs, t0, h, nbins, pos, rad))


def _accessible_fraction(atoms, grid, ion_radius, s, box, backend, device):
    """:func:`ion_accessibility`'s map, computed."""
    pos, rad = atoms.positions, atoms.radii + ion_radius
    if box is not None:
        pos, rad = periodic_images(pos, rad, box, grid.origin, rad.max() + 1.0)
    fine_us, fine_vs, t0 = ion_lines(grid, s)
    hz = grid.spacing[2]
    recorders = _line_recorders(backend, device)
    if recorders is not None:
        fine_bins = line_bins(pos, rad, 2, fine_us, fine_vs)
        covered, recorded = recorders.union_cells_recorded(
            grid.shape, s, fine_us, fine_vs, t0, hz, grid.shape[2], pos, rad, fine_bins
        )
        key = _ion_record_key(fine_us, fine_vs, t0, hz, grid.shape[2], pos, rad)
        RECORDS.put(key, recorded, recorded[0].nbytes + recorded[1].nbytes)
        covered /= s * s
        return snap_fractions(1.0 - covered)
    us = [fine_us[a::s] for a in range(s)]
    vs = [fine_vs[b::s] for b in range(s)]
    # one set of atom bins serves the s² sets of lines: it spans all of them (a line looks up the
    # bins within its reach, so the candidates are those of bins made for its own set)
    bins = line_bins(pos, rad, 2, np.array([us[0][0], us[-1][-1]]),
                     np.array([vs[0][0], vs[-1][-1]]))  # fmt: skip
    line_sets = [(us[a], vs[b], bins) for a in range(s) for b in range(s)]
    # the s² sets summed by the kernels into one array (on the device where they run)
    covered = _run(
        backend, "the ion-accessible map's sphere-union lines", "sphere_union_sets", grid.shape,
        2, line_sets, t0, hz, grid.shape[2], pos, rad, device=device,
    )  # fmt: skip
    covered /= s * s
    # a covered cell sums its pieces to 1 ± a rounding error: snapped, its κ̄² is exactly zero
    # (the nonlinear equation multiplies κ̄² by sinh of the potential deep inside the solute)
    snap = snap_fractions if device is None else device.snap_fractions
    return snap(1.0 - covered)


def kappa2_map(
    atoms,
    grid,
    ionic_strength,
    eps_out=EPS_WATER,
    ion_radius=2.0,
    temperature=None,
    *,
    subsamples=4,
    box=None,
    backend="cpu",
    on_device=False,
):
    """κ̄² = ε_out κ² × (ion-accessible fraction of the node's cell), Å⁻²; None without salt.

    ``on_device``: as :func:`face_fractions`'.
    """
    kappa = kappa_from_ionic_strength(ionic_strength, eps_out, temperature)
    if kappa == 0.0:
        return None
    frac = ion_accessibility(atoms, grid, ion_radius, subsamples=subsamples, box=box,
                             backend=backend, on_device=on_device)  # fmt: skip
    return eps_out * kappa * kappa * frac


def coulomb_potential(atoms, grid, eps_cavity=2.0, *, box=None, backend="cpu", on_device=False):
    """φ_c = Σ_i k q_i / (ε_c |r − r_i|) at every node (kJ mol⁻¹ e⁻¹).

    The backend's map kernels sum it: directly, or on the CPU for large grids without a
    periodic box by the multilevel sum of :mod:`pbsolver.backends.cpu.coulomb_fast` (within
    1e-6 of the largest value on the nodes farther than a spacing from every charged atom, the
    direct sum on the others; ``CPUBackend(coulomb="direct")`` keeps the direct sum).

    A node on a charged atom gets ±inf (allowed by :class:`~pbsolver.Problem` where the node
    is surrounded by ε_c and has no salt); a node within 1e-6 of the smallest spacing of the
    atom counts as on it, so that a charge one rounding error off a node gives the same
    answer as one exactly on it. With ``box`` (periodic), each atom contributes through its
    nearest image (minimum image convention).

    The last few maps are kept (:data:`COULOMB_MAPS_KEPT`): a call with the same charges, grid
    and options gets a copy of one, and a molecule whose charges are those of two kept maps on
    the same grid together (a complex after its parts, as binding inputs order them) gets their
    sum, since φ_c is linear in the charges. Likewise a part after its complex and the other
    part gets the complex's map less the other part's, where both are finite everywhere. The
    sum or difference equals the molecule's own map within the two sums' accuracy (the direct
    sum's rounding; the multilevel sum's bound of 1e-6 of each kept map's largest value).
    ``on_device``: as :func:`face_fractions`' (the kept maps are then kept there).

    Raises
    ------
    InputError
        When charges of opposite sign sit on the same node (∞ − ∞).
    """
    backend = map_backend(backend)
    device = device_kernels(backend, on_device)
    xp = np if device is None else device.xp
    eps_cavity = positive(eps_cavity, "eps_cavity")
    keep = atoms.charges != 0
    pos = np.ascontiguousarray(atoms.positions[keep])
    q = np.ascontiguousarray(atoms.charges[keep])
    if q.size == 0:
        return xp.zeros(grid.shape)
    box = None if box is None else check_box(box)
    # the sum's method is the backend's (CPUBackend(coulomb=...)) and where the maps are kept:
    # part of the key (a sum or difference of kept maps takes maps of one setting)
    setting = (backend.name, getattr(backend, "coulomb", None), device is not None, eps_cavity,
               grid_key(grid, box))  # fmt: skip
    key = (*setting, *content_key(pos, q))
    kept = _coulomb_maps.get(key)
    if kept is not None:
        return kept[0].copy()
    charges = _charge_rows(pos, q)
    out = _sum_of_kept_parts(setting, charges)
    if out is None:
        out = _kept_whole_less_part(setting, charges)
    if out is None:
        out = (backend.map_kernels() if device is None else device).coulomb_sum(
            grid.shape, grid.origin, grid.spacing, pos, q, COULOMB_KJ / eps_cavity, box
        )
    if bool(xp.isnan(out).any()):
        idx = tuple(int(v) for v in to_numpy(xp.argwhere(xp.isnan(out))[0]))
        raise InputError(
            f"charges of opposite sign sit exactly on grid node {idx}: shift the grid origin"
        )
    _coulomb_maps.put(key, (out.copy(), setting, charges), out.nbytes)
    return out


def _charge_rows(pos, q) -> np.ndarray:
    """The charges as (x, y, z, q) rows in lexicographic order: a set's canonical form."""
    return _canonical(np.column_stack([pos, q]))


def _canonical(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows[np.lexsort(rows.T[::-1])]


def _kept_maps_of(setting) -> list:
    """(map, canonical charge rows) of every kept φ_c map made with ``setting``."""
    return [(m, rows) for m, s, rows in _coulomb_maps.values() if s == setting]


def _sum_of_kept_parts(setting, charges):
    """The sum of two kept φ_c maps of ``setting`` whose charges together are ``charges``.

    None when no two kept maps split them so.
    """
    kept = _kept_maps_of(setting)
    for a in range(len(kept)):
        for b in range(a + 1, len(kept)):
            (map_a, rows_a), (map_b, rows_b) = kept[a], kept[b]
            if len(rows_a) + len(rows_b) != len(charges):
                continue
            if np.array_equal(_canonical(np.vstack([rows_a, rows_b])), charges):
                return map_a + map_b
    return None


def _kept_whole_less_part(setting, charges):
    """A kept φ_c map of ``setting`` less another kept map: a part after its complex.

    The first map's charges must be those of the second and ``charges`` together (the complex,
    and its other part). None when no two kept maps are so, or when either map is infinite
    somewhere (a charge on a node: ∞ − ∞ there).
    """
    kept = _kept_maps_of(setting)
    for whole, rows_w in kept:
        for part, rows_p in kept:
            if part is whole or len(rows_w) != len(rows_p) + len(charges):
                continue
            if not np.array_equal(_canonical(np.vstack([rows_p, charges])), rows_w):
                continue
            xp = array_module(whole)
            if not (bool(xp.isfinite(whole).all()) and bool(xp.isfinite(part).all())):
                return None
            return whole - part
    return None


def boundary_values(
    atoms,
    grid,
    eps_in=2.0,
    eps_out=EPS_WATER,
    ionic_strength=0.0,
    temperature=None,
    kind="mdh",
    eps_cavity=None,
    ion_radius=0.0,
    backend="cpu",
    phi_coulomb=None,
):
    """Dirichlet values of φ_rf = φ − φ_c on the grid's outer layer (inner nodes zero).

    φ_rf is the far-field estimate of the total potential minus the exact φ_c of
    :func:`coulomb_potential` (Σ_i k q_i / (ε_c r_i), the same sum inside), so that the
    boundary and the interior agree on what is subtracted:

    ``"mdh"``
        Σ_i k q_i [e^{−κ(r_i − a_i)} / (ε_out (1 + κ a_i) r_i) − 1/(ε_c r_i)], with a_i the
        atomic radius plus ``ion_radius`` (the distance of closest approach of the ions; exact
        outside a spherical ion with a Stern layer; irrelevant without salt).
    ``"sdh"``
        APBS' single Debye–Hückel sphere for the total potential: the total charge Q at the
        solute's centre (the middle of its bounding box), radius a the largest distance of an
        atomic sphere from that centre, k Q e^{−κ(r − a)} / (ε_out (1 + κ a) r); minus the same
        exact Σ_i k q_i / (ε_c r_i). A neutral solute's multipoles are therefore no longer left
        on the boundary.
    ``"zero"``
        φ_rf = 0.

    ``phi_coulomb``, the grid's φ_c from :func:`coulomb_potential` with the same ε_c when the
    caller has it, gives the exact sum on the outer layer instead of summing it again over
    every atom (without salt the "mdh" values are then (ε_c/ε_out − 1) φ_c, no sum at all).
    The values are then in ``phi_coulomb``'s array library (CuPy on a GPU): only the outer
    layer's φ_c comes to the host.
    """
    if kind not in BOUNDARY_KINDS:
        raise InputError(f"boundary kind must be one of {BOUNDARY_KINDS}, got {kind!r}")
    xp = np if phi_coulomb is None else array_module(phi_coulomb)
    out = xp.zeros(grid.shape)
    if kind == "zero":
        return out
    backend = map_backend(backend)
    eps_cavity = positive(eps_in if eps_cavity is None else eps_cavity, "eps_cavity")
    eps_out = positive(eps_out, "eps_out")
    kappa = kappa_from_ionic_strength(ionic_strength, eps_out, temperature)
    layer, points = outer_layer_points(grid)
    sums = backend.map_kernels().debye_huckel_points
    pos, q = atoms.positions, np.asarray(atoms.charges, dtype=float)
    # Σ k q_i / (ε_c r_i) on the outer layer: from the caller's φ_c map, or summed below
    exact = None
    if phi_coulomb is not None:
        exact = flat_values(phi_coulomb, layer).astype(float, copy=False)
    elif kind == "sdh" or kappa == 0.0:  # the exact sum on the layer, not the screened terms'
        exact = coulomb_on_outer_layer(atoms, grid, eps_cavity, backend=backend).reshape(-1)[layer]
    if kind == "mdh":
        radii = atoms.radii + float(ion_radius)
        if exact is None:
            vals = sums(points, pos, q, radii, kappa, COULOMB_KJ, eps_out, eps_cavity)
        elif kappa == 0.0:  # the unscreened sum in ε_out is the same sum scaled
            vals = (eps_cavity / eps_out - 1.0) * exact
        else:
            vals = sums(points, pos, q, radii, kappa, COULOMB_KJ, eps_out, math.inf) - exact
    else:
        lo, hi = atoms.bounds(with_radii=False)
        c = 0.5 * (lo + hi)
        a = float((np.linalg.norm(pos - c, axis=1) + atoms.radii).max())
        # screened sphere (1/ε_c → 0) plus the unscreened exact sum (1/ε_out → 0)
        vals = sums(points, c[None, :], np.array([q.sum()]), np.array([a]), kappa, COULOMB_KJ,
                    eps_out, math.inf)  # fmt: skip
        vals -= exact
    out.reshape(-1)[xp.asarray(layer)] = xp.asarray(vals)
    return out


def coulomb_on_outer_layer(atoms, grid, eps_cavity=2.0, *, backend="cpu"):
    """φ_c (kJ mol⁻¹ e⁻¹) on the outer layer of ``grid``, zero on the inner nodes.

    The direct sum Σ_i k q_i / (ε_c |r − r_i|) over the outer layer's nodes only (the sum
    :func:`boundary_values` does where it is not given a φ_c map); :func:`build_maps` uses it
    with ``coulomb="outer"``. The layer's values are kept beside :func:`coulomb_potential`'s
    maps, and reused the same ways: again for the same charges, as the sum of two kept parts
    (a complex after its parts), or as a kept complex less its other part.
    """
    backend = map_backend(backend)
    eps_cavity = positive(eps_cavity, "eps_cavity")
    out = np.zeros(grid.shape)
    keep = atoms.charges != 0
    if not keep.any():
        return out
    layer, points = outer_layer_points(grid)
    pos, q = atoms.positions[keep], np.asarray(atoms.charges[keep], dtype=float)
    setting = (backend.name, "outer layer", eps_cavity, grid_key(grid, None))
    key = (*setting, *content_key(pos, q))
    kept = _coulomb_maps.get(key)
    if kept is not None:
        values = kept[0].copy()
    else:
        charges = _charge_rows(pos, q)
        values = _sum_of_kept_parts(setting, charges)
        if values is None:
            values = _kept_whole_less_part(setting, charges)
        if values is None:
            values = backend.map_kernels().coulomb_points(
                points, pos, q, COULOMB_KJ / eps_cavity, on_node_tol2(grid.spacing)
            )
        _coulomb_maps.put(key, (values.copy(), setting, charges), values.nbytes)
    out.reshape(-1)[layer] = values
    return out


def outer_layer_points(grid):
    """(:func:`outer_layer`'s flat indices, their nodes' coordinates (m, 3) in Å) of ``grid``.

    The coordinates are a new array each call (the kernels take writable arrays); the last few
    grids' are kept, as focusing and the boundary values ask for the same grids again.
    """
    layer = outer_layer(grid.shape)
    return layer, _outer_layer_coordinates(*grid_key(grid, None)[:3]).copy()


@functools.lru_cache(maxsize=8)
def _outer_layer_coordinates(shape, spacing, origin) -> np.ndarray:
    index = np.column_stack(np.unravel_index(outer_layer(shape), shape))
    return np.asarray(origin) + index * np.asarray(spacing)


@functools.lru_cache(maxsize=8)
def outer_layer(shape) -> np.ndarray:
    """Flat indices (C order, increasing) of the outer layer of a grid of ``shape``; read-only.

    Built plane by plane, without a whole-grid mask, and kept for the next call on that shape.
    """
    nx, ny, nz = (int(n) for n in shape)
    # a (j, k) plane of an inner i: its outer ring; of the first and last i: all of it
    ring = np.zeros((ny, nz), dtype=bool)
    ring[[0, -1], :] = True
    ring[:, [0, -1]] = True
    ring_flat = np.flatnonzero(ring)
    full = np.arange(ny * nz)
    parts = [i * ny * nz + (ring_flat if 0 < i < nx - 1 else full) for i in range(nx)]
    layer = np.concatenate(parts).astype(np.intp)
    layer.flags.writeable = False
    return layer


def periodic_images(positions, radii, box, origin, cutoff):
    """Atoms wrapped into the box at ``origin`` plus their images within ``cutoff`` of it."""
    box = check_box(box)
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


def periodic_extent(atoms, box):
    """Smallest extent of the solute (spheres included) along each axis of a periodic box, Å.

    Atoms may come wrapped into the box one by one: each axis is cut at the widest gap between
    the atoms' centres (taken modulo the box), so a solute split across the box's faces is
    measured whole.
    """
    box = check_box(box)
    pos, rad = np.asarray(atoms.positions, float), np.asarray(atoms.radii, float)
    ext = np.zeros(3)
    for a in range(3):
        x = np.mod(pos[:, a], box[a])
        xs = np.sort(x)
        gaps = np.diff(np.append(xs, xs[0] + box[a]))
        cut = xs[(int(np.argmax(gaps)) + 1) % len(xs)]  # the first centre after the widest gap
        unwrapped = np.where(x < cut, x + box[a], x)
        ext[a] = (unwrapped + rad).max() - (unwrapped - rad).min()
    return ext


def check_periodic_box(atoms, box, clearance=0.0):
    """Refuse a periodic box smaller than the solute plus ``clearance`` along any axis.

    A solute that overlaps its own periodic images has no solvent between them: its maps and
    energy would be those of another system (a peptide in a 5 Å box gave zero energy).
    ``clearance`` is the solvent the maps need between images (2 probe radii for "mol").

    Raises
    ------
    InputError
        Naming the box and the size needed.
    """
    box = check_box(box)
    need = periodic_extent(atoms, box) + float(clearance)
    if np.any(box < need):
        raise InputError(
            f"periodic box {tuple(round(float(b), 3) for b in box)} Å is smaller than the "
            f"solute: each side must be at least {tuple(round(float(n), 3) for n in need)} Å "
            f"(the solute's extent plus {float(clearance):g} Å of solvent between images)"
        )


# ---------------------------------------------------------------------- the whole problem
#: Above this many atoms × nodes :func:`build_maps` shows its progress on a terminal.
PROGRESS_WORK = 10**10


@dataclasses.dataclass
class Maps:
    """Every map of one problem, as :func:`build_maps` returns them.

    NumPy arrays, or with ``on_device=True`` CuPy arrays where the maps' kernels ran on a GPU.

    The fields are the arguments of :class:`~pbsolver.Problem` (see
    :meth:`pbsolver.Problem.from_maps`).
    """

    grid: Grid
    epsilon_faces: tuple
    phi_coulomb: np.ndarray
    eps_cavity: float
    kappa2: np.ndarray | None
    boundary: str
    boundary_values: np.ndarray | None
    nonlinear: bool = False
    ion_valence: int = 1
    temperature: float = PhysicsOptions.temperature


def build_maps(
    atoms,
    grid=None,
    *,
    physics=None,
    spacing=0.5,
    margin=8.0,
    boundary="dirichlet",
    box=None,
    shape=None,
    center=None,
    ses_step=None,
    kappa_subsamples=4,
    maps_backend="cpu",
    progress=None,
    nbisect=14,
    dirichlet_values=None,
    phi_coulomb=None,
    fractions=None,
    coulomb="full",
    on_device=False,
    **physics_fields,
) -> Maps:
    """Grid and every map for ``atoms`` (ε_c = ε_in): the arrays of a Problem.

    Parameters
    ----------
    atoms : Atoms
    grid : Grid, optional
        The grid to map on (default: placed around the atoms, or filling ``box``).
    physics : PhysicsOptions, optional
        The physics (default: :class:`~pbsolver.PhysicsOptions`'s defaults).
    spacing, margin : float
        Grid spacing and least gap between the atomic spheres and the outer layer, Å.
    boundary : {"dirichlet", "periodic"}
        With "periodic" the grid fills ``box`` (required) and geometry and φ_c use periodic
        images.
    box, shape, center
        Periodic box lengths (Å); node counts and centre of a Dirichlet grid.
    ses_step, kappa_subsamples, maps_backend
        SES sampling step (Å), lines per cell side of the ion-accessible fraction, and where the
        map kernels run ("cpu", "cuda" or "auto").
    progress : bool or None
        A bar over the map stages on stderr (:mod:`pbsolver.progress`): None shows it on a
        terminal when the molecule and grid are large (atoms × nodes ≥
        :data:`PROGRESS_WORK`).
    nbisect : int
        Bisection steps locating each SES crossing (:func:`face_fractions`); the crossings are
        found to ``ses_step·2⁻ⁿᵇⁱˢᵉᶜᵗ``.
    dirichlet_values : array (nx, ny, nz), optional
        φ_rf on the outer layer of a Dirichlet ``grid`` (kJ mol⁻¹ e⁻¹), given by the caller
        instead of ``boundary_kind``'s estimate: a coarser solve's φ_rf when focusing
        (:mod:`pbsolver.molecule.focusing`). Atoms may then lie outside the grid: their spheres
        still shape the surface and the ion-accessible region near it and their charges still
        enter φ_c; only their energy cannot be sampled on this grid.
    phi_coulomb : NumPy array (nx, ny, nz), optional
        φ_c of ``atoms`` on ``grid`` in ε_in (kJ mol⁻¹ e⁻¹), computed by the caller instead of
        here: φ_c is linear in the charges, so a complex's map is the sum of its disjoint parts'
        maps (:func:`pbsolver.binding_energies` builds it so).
    fractions : 3 NumPy arrays (nx, ny, nz), optional
        The edge fractions of ``atoms``' surface on ``grid`` (:func:`face_fractions` with this
        physics' surface and probe), computed by the caller instead of here: a receptor's from
        its complex's (:func:`pbsolver.molecule.part_surface.part_face_fractions`).
    coulomb : {"full", "outer"}
        φ_c on every node, or on the outer layer of a Dirichlet grid only (zero inside). In a
        homogeneous medium (ε_in = ε_out, which is ε_c) without salt every face is ε_c, so the
        right-hand side never reads φ_c inside and the solve is the same; only its Dirichlet
        values do (and with ``dirichlet_values`` given not even they: φ_c is then zero
        everywhere). "outer" is refused with any other physics; the map is then not φ_c (a
        total potential needs :func:`coulomb_potential`).
    on_device : bool
        Leave the maps on the GPU where ``maps_backend``'s kernels run there (CuPy arrays, for
        a solve on that GPU: no copy to the host and back; the same values); NumPy arrays
        elsewhere (the CPU, numba's simulator). The APBS surfaces' fractions are built on the
        CPU and their faces on the GPU. The boundary values follow φ_c.
    **physics_fields
        Fields of :class:`~pbsolver.PhysicsOptions` (``eps_in``, ``eps_out``,
        ``ionic_strength``, ``surface``, ``probe_radius``, ``ion_radius``, ``temperature``,
        ``boundary_kind``, ``ions``, ``ion_valence``, ``nonlinear``); they override those of
        ``physics``.
    """
    from pbsolver.molecule.atoms import Atoms

    if not isinstance(atoms, Atoms):
        raise InputError(f"atoms must be a pbsolver.Atoms, got {type(atoms).__name__}")
    ph = PhysicsOptions.build(physics, **physics_fields)
    if boundary not in ("dirichlet", "periodic"):
        raise InputError(f"boundary must be 'dirichlet' or 'periodic', got {boundary!r}")
    if boundary == "periodic":
        if box is None:
            raise InputError("boundary='periodic' needs box=(Lx, Ly, Lz) in Å")
        if dirichlet_values is not None:
            raise InputError("dirichlet_values only apply to boundary='dirichlet'")
        clearance = 0.0 if ph.surface in SPHERE_SURFACES else 2.0 * ph.probe_radius
        check_periodic_box(atoms, box, clearance)
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
        # the Debye–Hückel estimate is a far field: atoms must lie inside the grid (the
        # caller's own values, a coarser solve's φ_rf, hold wherever the atoms are)
        if dirichlet_values is None and (np.any(lo <= glo) or np.any(hi >= ghi)):
            raise InputError("some atoms lie on or outside the grid's outer layer")
    if coulomb not in ("full", "outer"):
        raise InputError(f"coulomb must be 'full' or 'outer', got {coulomb!r}")
    on_device = flag(on_device, "on_device")
    if coulomb == "outer" and (boundary != "dirichlet" or ph.eps_in != ph.eps_out or ph.has_salt):
        raise InputError(
            "coulomb='outer' needs a Dirichlet grid in a homogeneous medium without salt "
            "(eps_in == eps_out, ionic_strength 0): elsewhere the right-hand side reads φ_c"
        )
    if phi_coulomb is not None and np.shape(phi_coulomb) != grid.shape:
        raise InputError(f"phi_coulomb has shape {np.shape(phi_coulomb)}, the grid {grid.shape}")
    if fractions is not None and (
        len(fractions) != 3 or any(np.shape(f) != grid.shape for f in fractions)
    ):
        raise InputError(f"fractions must be three arrays of the grid's shape {grid.shape}")
    # maps and a solve on this grid must fit in memory: refuse before allocating any map
    check_memory(grid.shape, molecule=True, n_atoms=len(atoms), what="the molecule's grid")
    be = map_backend(maps_backend)
    if progress is None and len(atoms) * math.prod(grid.shape) < PROGRESS_WORK:
        progress = False  # small: done before a bar would help
    estimate = boundary == "dirichlet" and dirichlet_values is None
    stages = ["surface", "ions", "Coulomb"] + (["boundary"] if estimate else [])
    bar = progress_bar(len(stages), progress, unit="map", desc=f"maps of {len(atoms)} atoms")
    with bar:
        return _build(atoms, grid, ph, boundary, box, (ses_step, nbisect), kappa_subsamples, be,
                      stages, bar, dirichlet_values, phi_coulomb, fractions,
                      coulomb == "outer", device_kernels(be, on_device))  # fmt: skip


def _build(
    atoms, grid, ph, boundary, box, ses, kappa_subsamples, be, stages, bar, dirichlet_values,
    phi_coulomb, fractions, outer_only, device,
) -> Maps:  # fmt: skip
    """The maps of :func:`build_maps`, one stage after the other (``bar`` counts them).

    ``ses`` is the SES sampling (``ses_step``, ``nbisect``); ``outer_only``: φ_c on the outer
    layer only (``coulomb="outer"``); ``device``: :func:`device_kernels`' (None: host maps).
    """
    eps_in = ph.eps_in
    on_device = device is not None
    xp = device.xp if on_device else np
    stage = iter(stages)

    def next_stage():
        bar.set_postfix_str(next(stage), refresh=True)

    next_stage()
    if eps_in == ph.eps_out:
        # one permittivity everywhere (e.g. APBS's reference calculations, pdie = sdie): every
        # face is ε whatever the surface, so the surface is not built
        faces = tuple(xp.full(grid.shape, float(eps_in)) for _ in range(3))
    else:
        fr = fractions
        if fr is None:
            fr = face_fractions(
                atoms, grid, ph.surface, ph.probe_radius, box=box, ses_step=ses[0],
                nbisect=ses[1], backend=be,
                ion_radius=ph.ion_radius if ph.ionic_strength > 0 else 0.0, on_device=on_device,
            )  # fmt: skip
        if on_device:  # (the APBS surfaces' fractions, or the caller's, may be host arrays)
            faces = tuple(device.faces_from_fractions(xp.ascontiguousarray(f, dtype=np.float64),
                                                      eps_in, ph.eps_out) for f in fr)  # fmt: skip
        else:
            faces = faces_from_fractions(fr, eps_in, ph.eps_out)
    bar.update()
    next_stage()
    kappa2 = kappa2_map(
        atoms,
        grid,
        ph.ionic_strength,
        ph.eps_out,
        ph.ion_radius,
        ph.temperature,
        subsamples=kappa_subsamples,
        box=box,
        backend=be,
        on_device=on_device,
    )
    bar.update()
    next_stage()
    if phi_coulomb is not None:
        phi_c = xp.asarray(phi_coulomb, dtype=np.float64)
    elif outer_only and dirichlet_values is not None:
        phi_c = xp.zeros(grid.shape)  # given Dirichlet values: nothing reads φ_c
    elif outer_only:
        phi_c = xp.asarray(coulomb_on_outer_layer(atoms, grid, eps_in, backend=be))
    else:
        phi_c = coulomb_potential(atoms, grid, eps_in, box=box, backend=be, on_device=on_device)
    bar.update()
    bvals = None
    if boundary == "dirichlet" and dirichlet_values is not None:
        bvals = xp.asarray(dirichlet_values) if on_device else dirichlet_values
    elif boundary == "dirichlet":
        next_stage()
        bvals = boundary_values(
            atoms,
            grid,
            eps_in,
            ph.eps_out,
            ph.ionic_strength,
            ph.temperature,
            kind=ph.boundary_kind,
            ion_radius=ph.ion_radius,
            backend=be,
            phi_coulomb=phi_c,
        )
        bar.update()
    _check_charges_on_nodes(atoms, grid, phi_c, faces, kappa2, eps_in)
    return Maps(
        grid=grid,
        epsilon_faces=faces,
        phi_coulomb=phi_c,
        eps_cavity=eps_in,
        kappa2=kappa2,
        boundary=boundary,
        boundary_values=bvals,
        nonlinear=ph.nonlinear,
        ion_valence=ph.ion_valence,
        temperature=ph.temperature,
    )


def _check_charges_on_nodes(atoms, grid, phi_c, faces, kappa2, eps_in):
    xp = array_module(phi_c)
    if not bool(xp.isinf(phi_c).any()):
        return
    # a charge on a node (rare): the maps to the host for the message
    phi_c, faces = to_numpy(phi_c), [to_numpy(f) for f in faces]
    kappa2 = None if kappa2 is None else to_numpy(kappa2)
    for idx in np.argwhere(np.isinf(phi_c)):
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
def map_backend(backend):
    """The :class:`~pbsolver.backends.Backend` whose map kernels build the maps.

    ``backend`` is a Backend or a name: "cpu", "cuda" (needs numba-cuda, CuPy and a device) or
    "auto", which means the CPU for now (the CUDA map kernels are checked against the CPU ones,
    not yet timed against them).
    """
    from pbsolver.backends import Backend, get_backend

    if isinstance(backend, Backend):
        return backend
    return get_backend("cpu" if backend == "auto" else backend)


def device_kernels(backend, on_device=True):
    """The map kernels of ``backend`` whose results stay on its GPU, or None.

    None unless ``on_device``, and where the backend's kernels give host arrays only (the CPU,
    numba's simulator): :meth:`~pbsolver.backends.bodies.maps.MapKernels.device_results`.
    """
    return backend.map_kernels().device_results() if flag(on_device, "on_device") else None


def _run(backend, what, name, *args, device=None, **kwargs):
    """``backend.map_kernels().<name>(...)``, or ``device``'s (:func:`device_kernels`).

    On the CPU when a GPU kernel runs out of room (its result then moved to ``device``).
    """
    from pbsolver.backends import get_backend

    try:
        return getattr(backend.map_kernels() if device is None else device, name)(*args, **kwargs)
    except LineCapacityError as exc:
        _log_cpu_fallback(what, exc)
        out = getattr(get_backend("cpu").map_kernels(), name)(*args, **kwargs)
        return out if device is None else device.xp.asarray(out)


def ses_sampling_step(h, ses_step=None):
    """The SES reentrant zone's sampling interval, Å: ``ses_step``, or min(h/2, 0.25)."""
    step = float(ses_step) if ses_step is not None else min(0.5 * h, 0.25)
    if not step > 0:
        raise InputError(f"ses_step must be > 0 Å, got {ses_step}")
    return step


def ses_bisections(nbisect) -> int:
    """``nbisect``, the bisection steps of each SES crossing, as an integer ≥ 1 (or InputError)."""
    return valence(nbisect, "nbisect")  # the options' positive-integer check


def line_bins(pos, reach, axis, us, vs, subset=None):
    """2D bins of the atoms (or of ``subset``, global indices kept) across ``axis``.

    What the line kernels take as ``bins``: the atoms that may reach the lines along ``axis``
    through ``us`` × ``vs`` within ``reach`` (per atom) of their centres.
    """
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
    return choice(surface, "surface", SURFACES)


def _log_cpu_fallback(what, exc):
    """Say (once per map) that a GPU map kernel ran out of local capacity and the CPU took over.

    The result is the same either way (both compile the same bodies); only the time differs.
    """
    import logging

    logging.getLogger("pbsolver").warning("%s built on the CPU instead of the GPU: %s", what, exc)
