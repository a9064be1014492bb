"""Stacked frames: B molecular-dynamics frames' maps, solve and forces with buffers that stay put.

The general path (:func:`pbsolver.molecule.build.build_problem`, then
:class:`~pbsolver.Solver`) builds every map on the host-side layout, allocates fresh arrays each
frame and captures fresh CUDA graphs. For MD, where one solute is solved again and again on a
grid of one shape, this module keeps everything in place:

1. the frames' positions go into one ``(B, N, 3)`` buffer;
2. batched kernels (:mod:`pbsolver.backends.frame_kernels`) write, for all B frames in one
   launch each, the edge fractions of the surface, the ion-accessible fraction, φ_c and the
   Debye–Hückel boundary values straight into the stacked layout of
   :mod:`pbsolver.backends.stacking`. Surfaces: "vdw" (the union of spheres, one launch an
   axis), "mol" (the SES of :func:`~pbsolver.molecule.maps.face_fractions`, the same edge
   fractions: neighbour lists, SES features, per-frame bins and one launch an axis over
   (frame, grid line) pairs, :mod:`pbsolver.md.ses`) and "smol" (either, then APBS' 9-point
   smoothing in one more launch); a zero probe makes "mol" the vdW surface, as there. Where
   the backend's kernel set has a ``coulomb_map`` (the CPU), φ_c is instead that host
   function's map of each frame (on the CPU the general path's multilevel sum, far cheaper
   there than a direct sum) and the "mdh" values are formed from it (``boundary_map``);
3. one more kernel turns them into the lifted, block-diagonal stencil (float64 and float32);
4. the solver loop of :class:`~pbsolver.Solver` (float64 iterative refinement) runs on the
   stack with SOR or with multigrid on a hierarchy that coarsens every frame's block
   separately (:func:`pbsolver.multigrid.builders.stack_hierarchy`, rebuilt from the
   assembly's unlifted faces each call); on CUDA its captured graphs are found again on the
   next call, since the buffers' addresses do not change;
5. a last kernel samples φ and ∇φ at every atom of every frame;
6. for exact forces (the calculator's ``forces="exact"``), :meth:`StackedFrames.solve_adjoint`
   solves the B adjoint equations as one more stacked solve on the same system, and
   :meth:`StackedFrames.stack_problem` gives the frames' maps as one
   :class:`~pbsolver.Problem` on the whole stack for
   :func:`pbsolver.forces.frames_forces_from_adjoint`.

On CUDA steps 2–3 are one replayed CUDA graph, except the SES part of step 2: its array sizes
(neighbour pairs, circles, arcs) change from call to call, so it runs before the graph, as
launches and CuPy array code on the same stream, with its data on the device. Host
synchronisations per call: for the SES, one per size read back and one for its overflow flag;
after the maps (right-hand-side norms, overflow flag), for a warm start's initial residuals,
one per residual check of the loop, and for the results. Surfaces "vdw", "mol" and "smol" on
Dirichlet grids (a grid that follows the solute) are handled; "svdw", periodic boxes and the
"sdh" boundary use the general path.
"""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import numpy as np

from pbsolver.backends.frame_kernels import CAP, LINE_THREADS
from pbsolver.exceptions import InputError
from pbsolver.grid import Grid
from pbsolver.md.ses import FrameSES
from pbsolver.options import INTERPOLATIONS, PhysicsOptions, choice, nonnegative
from pbsolver.solving.methods import make_method
from pbsolver.solving.system import LinearSystem

#: Boundary kinds the stacked path computes (``"sdh"`` needs the general path).
STACKED_BOUNDARY_KINDS = ("mdh", "zero")
#: Dielectric surfaces the stacked path maps ("svdw" needs the general path).
STACKED_SURFACES = ("vdw", "mol", "smol")
#: Solvers of the stack ("auto": the backend's choice, ``Backend.auto_stack_method``).
STACKED_METHODS = ("auto", "sor", "multigrid")
#: Bytes a grid node of one frame that the engine keeps: its maps, the stack's float64 and
#: float32 stencils, iterate and multigrid levels, φ, and the padding planes between the frames
#: (measured by ``benchmarks/stacked_memory.py``: 215–244 on the CPU, traced; 214–234 held by
#: CuPy's pool on a GPU): the estimate behind a batch's memory check
#: (:meth:`StackedFrames.check_room`) and chunks (:meth:`StackedFrames.batch_size_for`).
STACKED_BYTES_PER_NODE = 250
#: The same at the peak of a batch's exact forces, which add the adjoint's right-hand side
#: and λ, the stack's Problem and the terms' sensitivities, by where the arrays live
#: (:attr:`StackedFrames.memory`; the GPU's pool also keeps the force terms' temporaries;
#: measured: 310–366 traced on the CPU at B = 8, 447–477 held by the pool at B = 8–32)…
STACKED_EXACT_BYTES_PER_NODE = {"host": 380, "gpu": 470}
#: … and, once a batch, the calculator's last fields and the terms' one-frame arrays.
STACKED_EXACT_ONCE_PER_NODE = {"host": 80, "gpu": 250}
#: Bytes a batch needs whatever its grid: on a GPU the driver hands out memory in pages (the
#: peaks measured were whole MiB) and the per-atom and per-frame arrays do not grow with the
#: grid. Two batches of B = 2 of the peptide's 95,817-node grid took 2.4 MB (energies) and 9.7 MB
#: (exact forces) beyond the per-node figures on an H100 (``tests/test_memory_estimate.py``,
#: gpu). The host's figures, traced, already hold theirs.
STACKED_BATCH_FIXED_BYTES = {"host": 0, "gpu": 16 * 2**20}


@dataclasses.dataclass
class StackedSolve:
    """What one :meth:`StackedFrames.run` call returns (host arrays unless said otherwise).

    Attributes
    ----------
    phi : list of arrays (nx, ny, nz)
        Each frame's φ_rf (kJ mol⁻¹ e⁻¹) with its boundary values, in the engine's array
        library (views into one copy made for this call).
    values, gradients : ndarray (B, N), (B, N, 3)
        φ_rf and ∇φ_rf at the atoms (kJ mol⁻¹ e⁻¹, per Å).
    residuals : ndarray (B,)
        Each frame's final relative residual (float64 operator).
    initial : ndarray (B,)
        Each frame's relative residual at the initial guess.
    converged : ndarray (B,) of bool
    iterations : int
        Sweeps of the stack (every frame got the same).
    reason : str
        The loop's stop reason.
    omega : float or None
        SOR's ω (None for multigrid).
    method : str
        "sor" or "multigrid".
    timings : dict
        Seconds of the call: ``maps`` (up to the right-hand-side norms), ``solve``,
        ``evaluate``.
    stack : array (B·stride, ny, nz)
        The copy ``phi`` views: every frame's φ_rf in the stack's layout.
    """

    phi: list
    values: np.ndarray
    gradients: np.ndarray
    residuals: np.ndarray
    initial: np.ndarray
    converged: np.ndarray
    iterations: int
    reason: str
    omega: float | None
    method: str
    timings: dict
    stack: object = None


class StackedFrames:
    """Maps, stacked SOR solve and field sampling for B frames of one solute on one grid shape.

    Parameters
    ----------
    charges, radii : array (N,)
        Partial charges (e) and vdW radii (Å); fixed for the engine's life.
    shape : 3 ints
        Grid nodes of every frame.
    spacing : float or 3 floats
        Grid spacing, Å.
    solver : Solver
        Supplies ``rtol``, ``atol``, ``maxiter``, ``dtype``, ``refine``, ``check_every``,
        ``omega`` and the backend (CPU or CUDA with CuPy).
    physics : PhysicsOptions, optional
        ε_in (= ε_c), ε_out, salt (κ from ionic strength and temperature), ion radius, probe
        radius and the boundary kind ("mdh" or "zero"); its ``surface`` is not read (see
        ``surface``). Its fields may also be given as keywords (``eps_in=``,
        ``ion_radius=``...), which override those of ``physics``.
    kappa : float, optional
        The bulk κ (Å⁻¹) itself, instead of the one of ``physics`` (0: no salt).
    kappa_subsamples : int
        Lines per cell side sampling the ion-accessible fraction.
    method : {"auto", "sor", "multigrid"}
        Solver of the stack: red–black SOR, or multigrid cycles
        (:data:`~pbsolver.multigrid.builders.STACK_CYCLE`, V(3,3)) on a hierarchy that coarsens
        every frame's block separately; both with the solver's float64 refinement. "auto":
        the backend's choice (:meth:`~pbsolver.backends.Backend.auto_stack_method`: on CUDA
        SOR for a few frames a call, multigrid from 8; on the CPU multigrid).
    backend : Backend, optional
        The backend object to use (default: the solver's, from :func:`get_backend`).
    surface : {"vdw", "mol", "smol"}
        Dielectric surface (:func:`pbsolver.molecule.maps.face_fractions`), with the probe
        radius of ``physics`` (Å). A parameter of its own, default "vdw", since the default
        physics' surface is "mol".
    ses_step : float, optional
        Sampling interval of the SES reentrant zone, Å (default min(h/2, 0.25)).
    nbisect : int
        Bisection steps locating each change of side in the reentrant zone.
    interpolation : {"linear", "cubic"}
        How φ_rf is sampled at the atoms (:func:`pbsolver.molecule.energy.sample_field`).
    """

    def __init__(
        self,
        charges,
        radii,
        shape,
        spacing,
        solver,
        *,
        physics=None,
        kappa=None,
        kappa_subsamples=4,
        method="auto",
        backend=None,
        surface="vdw",
        ses_step=None,
        nbisect=14,
        interpolation="linear",
        **physics_fields,
    ):
        from pbsolver.backends import get_backend

        if method not in STACKED_METHODS:
            raise InputError(f"the stacked path solves with {STACKED_METHODS}, got {method!r}")
        if surface not in STACKED_SURFACES:
            raise InputError(f"the stacked path maps surfaces {STACKED_SURFACES}, got {surface!r}")
        self.method = method
        self.surface = surface
        self.cubic = choice(interpolation, "interpolation", INTERPOLATIONS) == "cubic"
        self.physics = PhysicsOptions.build(physics, **physics_fields)
        self.physics.require_linear("the stacked MD engine (StackedFrames)")
        boundary_kind = self.physics.boundary_kind
        if boundary_kind not in STACKED_BOUNDARY_KINDS:
            raise InputError(
                f"the stacked path computes boundary kinds {STACKED_BOUNDARY_KINDS}, got "
                f"{boundary_kind!r}"
            )
        self.grid = Grid(shape, spacing=spacing)
        self.solver = solver
        self.backend = backend if backend is not None else get_backend(solver.backend_name)
        self.xp = self.backend.array_module()
        self.kernels = self.backend.frame_kernels()
        self.eps_in, self.eps_out = self.physics.eps_in, self.physics.eps_out
        self.kappa = self.physics.kappa if kappa is None else nonnegative(kappa, "kappa")
        ion_radius = self.physics.ion_radius
        self.subsamples = int(kappa_subsamples)
        if self.subsamples < 1:
            raise InputError(f"kappa_subsamples must be >= 1, got {kappa_subsamples}")
        self.boundary_kind = boundary_kind
        charges = np.ascontiguousarray(charges, dtype=np.float64)
        radii = np.ascontiguousarray(radii, dtype=np.float64)
        self.n_atoms = len(charges)
        self._q = self._to_device(charges)
        self._rad = self._to_device(radii)
        self._rad_ion = self._to_device(radii + float(ion_radius))
        self._q32 = self._to_device(charges.astype(np.float32))
        self._rad_ion32 = self._to_device((radii + float(ion_radius)).astype(np.float32))
        self._rad32 = self._to_device(radii.astype(np.float32))
        self._h = self._to_device(np.asarray(self.grid.spacing, dtype=np.float64))
        self._nodes = self._to_device(_outer_layer(self.grid.shape))
        h2 = [h * h for h in self.grid.spacing]
        params = h2 + [self.eps_in, self.eps_out, self.eps_in]
        params += [self.eps_out * self.kappa**2, 1.0 / self.subsamples**2, float(self.kappa > 0)]
        self._params = self._to_device(np.asarray(params, dtype=np.float64))
        self.stride = self.grid.shape[0] + self.grid.shape[0] % 2
        self.probe = float(self.physics.probe_radius)
        #: "smol": the fraction kernels write raw fractions that a smoothing kernel averages
        self.smooth = surface == "smol"
        #: The probe-swept part of "mol"/"smol" (None: the union of spheres, also for a zero
        #: probe, as the general path)
        self._ses = None
        if surface != "vdw" and self.probe > 0:
            self._ses = FrameSES(self.backend, radii, self.probe, self.grid.shape,
                                 self.grid.spacing, ses_step=ses_step, nbisect=nbisect)  # fmt: skip
        self._buffers = {}  # frames in a call → persistent buffers

    # ------------------------------------------------------------------ public
    @property
    def sweeps_probe(self) -> bool:
        """Whether the surface has a probe-swept part (the SES of "mol"/"smol", probe > 0)."""
        return self._ses is not None

    def edge_fractions(self, frames: int) -> list:
        """The edge fractions of the last call of ``frames`` frames: three stacked arrays.

        The SES's own fractions (before smoothing, for "smol"), as :meth:`run`'s
        ``ses_part_of`` takes them for a part of this molecule. Overwritten by the next call
        of as many frames.

        Raises
        ------
        InputError
            When no call of ``frames`` frames has been made (there are no fractions to give).
        """
        return self._fraction_targets(self._mapped(frames))

    @property
    def memory(self) -> str:
        """Where the engine's arrays live: "host" or "gpu" (:data:`pbsolver.backends.MEMORY`)."""
        from pbsolver.backends import MEMORY

        return MEMORY.get(self.backend.name, "host")

    def frame_bytes(self, exact: bool = False) -> int:
        """Estimated bytes a frame of a batch needs.

        :data:`STACKED_BYTES_PER_NODE` a node of the frame's grid, or
        :data:`STACKED_EXACT_BYTES_PER_NODE` where exact forces follow.
        """
        per = STACKED_EXACT_BYTES_PER_NODE[self.memory] if exact else STACKED_BYTES_PER_NODE
        return per * self.grid.size

    def batch_bytes(self, frames: int, exact: bool = False) -> int:
        """Estimated bytes of a batch of ``frames`` frames.

        :meth:`frame_bytes` each, :data:`STACKED_EXACT_ONCE_PER_NODE` a node once where
        exact forces follow, and :data:`STACKED_BATCH_FIXED_BYTES`.
        """
        once = STACKED_EXACT_ONCE_PER_NODE[self.memory] * self.grid.size if exact else 0
        return int(frames) * self.frame_bytes(exact) + once + STACKED_BATCH_FIXED_BYTES[self.memory]

    def _frames_in(self, nbytes: int, exact: bool) -> int:
        """How many frames a batch of :meth:`batch_bytes` at most ``nbytes`` holds (maybe 0)."""
        return max(0, (int(nbytes) - self.batch_bytes(0, exact)) // self.frame_bytes(exact))

    def batch_size_for(self, frames: int, exact: bool = False) -> int:
        """How many of a call's ``frames`` frames to run at once.

        All of them where their buffers exist or their estimate (:meth:`batch_bytes`) fits in
        half the memory available (``$PBSOLVER_MEMORY_LIMIT`` where set); else as many as
        that half holds, at least one. A batch in chunks of this size keeps buffers for at most
        two sizes (the chunk's and the remainder's), which together fit.
        """
        from pbsolver.resources import available_bytes

        frames = int(frames)
        if frames in self._buffers:
            return frames
        avail, _ = available_bytes(self.memory)
        if avail is None:
            return frames
        return max(1, min(frames, self._frames_in(avail // 2, exact)))

    def check_room(self, frames: int, exact: bool = False) -> None:
        """Refuse a batch of ``frames`` frames whose buffers would not fit, before making them.

        Compares :meth:`batch_bytes` with the memory of the engine's device
        (:func:`pbsolver.resources.check_bytes`; ``$PBSOLVER_MEMORY_LIMIT`` where set). A
        batch size whose buffers exist is not checked again.

        Raises
        ------
        InputError
            Naming both numbers and how many frames a call would fit.
        """
        from pbsolver.resources import available_bytes, check_bytes

        if int(frames) in self._buffers:
            return
        avail, _ = available_bytes(self.memory)
        fit = 0 if avail is None else self._frames_in(avail, exact)
        hint = (f"pass at most {fit:,} frames a call" if fit > 0 else
                "not one frame fits: use a coarser spacing or a smaller margin")  # fmt: skip
        # the estimate's terms beyond the per-node one (batch_bytes), as the message names them
        beyond = f" + {STACKED_EXACT_ONCE_PER_NODE[self.memory]} bytes a node once" if exact else ""
        fixed = STACKED_BATCH_FIXED_BYTES[self.memory]
        beyond += f" + {fixed / 2**20:g} MiB a batch" if fixed else ""
        shape = "×".join(str(n) for n in self.grid.shape)
        check_bytes(
            self.batch_bytes(frames, exact),
            f"a batch of {frames} frames on the stacked engine ({shape} a frame)",
            device=self.memory, hint=hint,
            detail=f"{self.frame_bytes(exact) // self.grid.size} bytes a node × "
            f"{self.grid.size:,} nodes × {frames} frames{beyond}",
        )  # fmt: skip

    def run(self, positions, origins, x0=None, fill_nodes=None, ses_part_of=None,
            record_ends=False) -> StackedSolve:  # fmt: skip
        """Solve B frames: positions ``(B, N, 3)`` Å (NumPy or CuPy), origins ``(B, 3)`` Å.

        ``x0`` (one ``(nx, ny, nz)`` array or None) is every frame's initial guess;
        ``fill_nodes`` ((M, 3) node indices, optional) are nodes where x0 knows nothing (a
        grid that moved): each frame's guess there is the Debye–Hückel estimate of its atoms.
        ``ses_part_of`` = (engine, removed positions (B, M, 3), removed radii (M,)): these atoms
        are that engine's molecule less M atoms, on the same grids and surface, and its last
        call was of these frames; the SES then reuses its fractions away from the removed
        atoms (:meth:`pbsolver.md.ses.FrameSES.run`). ``record_ends``: the exact forces will
        follow (:meth:`ses_interval_ends`), so the SES map records its lines' intervals as it
        cuts them where the kernels can.
        """
        t0 = time.perf_counter()
        xp = self.xp
        pos = xp.asarray(positions, dtype=np.float64)
        if pos.ndim != 3 or pos.shape[1:] != (self.n_atoms, 3):
            raise InputError(f"positions must be (B, {self.n_atoms}, 3), got {tuple(pos.shape)}")
        nf = int(pos.shape[0])
        origins = np.asarray(origins, dtype=np.float64).reshape(nf, 3)
        self.check_room(nf, exact=record_ends)
        buf = self._buffers_for(nf)
        be = self.backend
        with be.stream_context():
            buf.pos[...] = pos
            buf.origin[...] = xp.asarray(origins)
            if self._ses is not None:  # sizes change each call: not in the captured graph
                part_of = None
                if ses_part_of is not None:
                    whole, removed, removed_radii = ses_part_of
                    part_of = (whole.edge_fractions(nf), removed, removed_radii)
                self._ses.run(self._fraction_targets(buf), buf.pos, buf.origin, self.stride,
                              part_of, record=record_ends)  # fmt: skip
            # the map and assembly launches as one captured graph where the backend has them
            bad = be.capture(lambda: self._maps(buf, nf), key=self._maps_key(buf, nf))()
            warm = self._initial_guess(buf, nf, x0)
            if warm and fill_nodes is not None:
                self._fill_guess(buf, nf, fill_nodes)
        system = buf.system
        system.bnorms = be.block_norms(system.checked.b, nf)
        system.guessed = [warm] * nf
        if not np.isfinite(system.bnorms).all():  # checked here, where the host waits anyway
            raise InputError("positions must be finite numbers (Å): a frame's maps are not")
        if bad is None:  # the kernels raised the overflow flag instead of returning a count
            bad = int(be.to_host(buf.bad)[0])
        if bad:
            raise InputError(
                f"a grid line meets more than {CAP} atomic spheres: the stacked frame path "
                "cannot map this solute (use the general path)"
            )
        t_maps = time.perf_counter() - t0
        sv = self.solver
        out = system.solve(self._method(nf), rtol=sv.rtol, atol=sv.atol, maxiter=sv.maxiter,
                           check_every=sv.check_every)  # fmt: skip
        if warm and not np.isfinite(out.initial).all():
            # a non-finite guess stops the loop at its first check, before any step
            raise InputError("x0 must be finite")
        with be.stream_context():
            xp.add(system.x, buf.g, out=buf.phi)
        t_solve = time.perf_counter() - t0 - t_maps
        with be.stream_context():
            self._sample(buf, nf)
            phi = buf.phi.copy()
            samples = be.to_host(buf.samples)
            if samples is buf.samples:  # the CPU's own buffer: the results keep views of it
                samples = samples.copy()
        t_eval = time.perf_counter() - t0 - t_maps - t_solve
        nx = self.grid.shape[0]
        blocks = [phi[k * self.stride : k * self.stride + nx] for k in range(nf)]
        return StackedSolve(
            phi=blocks,
            values=samples[..., 0],  # views of this call's own host copy
            gradients=samples[..., 1:4],
            residuals=out.final,
            initial=out.initial,
            converged=out.converged,
            iterations=out.iterations,
            reason=out.reason,
            omega=out.omega if out.method == "sor" else None,
            method=out.method,
            timings={"maps": t_maps, "solve": t_solve, "evaluate": t_eval},
            stack=phi,
        )

    def solve_adjoint(self, sources, x0=None, rtol=None):
        """λ of the last call's frames: A_k λ_k = source_k, one stacked solve.

        The exact forces' adjoint equation (:mod:`pbsolver.forces.adjoint`) on the stack of the
        last :meth:`run` of B frames: the same stencils, hierarchy, method and stopping rule as
        its forward solve, with zero boundary values. The forward right-hand side is
        overwritten (the next :meth:`run` assembles its own).

        Parameters
        ----------
        sources : array (B·stride, ny, nz)
            Every frame's right-hand side, ½ Iᵀq, in the stack's layout (frame k at rows
            k·stride … k·stride + nx − 1; :func:`pbsolver.forces.interpolation.stack_offsets`),
            on the engine's device or the host; outer layers and padding planes are not read.
        x0 : array (nx, ny, nz), optional
            Every frame's initial guess (e.g. the last frame's λ).
        rtol : float, optional
            The adjoint's relative residual tolerance (default: the forward solver's).

        Returns
        -------
        lam : array (B·stride, ny, nz)
            λ of every frame in the stack's layout (float64 where the solver refines or runs in
            float64; zero on the outer layers and the padding planes), a copy made for this
            call, in the engine's library.
        outcome : SystemOutcome
            The stacked solve's report (per-frame residuals and convergence).

        Raises
        ------
        InputError
            When no call of B frames has been made, or ``sources`` is not a stack of them.
        """
        xp, be = self.xp, self.backend
        sources = xp.asarray(sources, dtype=np.float64)
        nf = int(sources.shape[0]) // self.stride
        buf = self._mapped(nf)
        if tuple(sources.shape) != (nf * self.stride, *self.grid.shape[1:]):
            raise InputError(
                f"sources of shape {tuple(sources.shape)} are not a stack of frames of "
                f"{self.grid.shape} ({self.stride} planes a frame)"
            )
        system = buf.system
        nx = self.grid.shape[0]
        with be.stream_context():
            b = self._frames(system.checked.b, nf)
            b.fill(0.0)
            inner = (slice(None), slice(1, nx - 1), slice(1, -1), slice(1, -1))
            b[inner] = self._frames(sources, nf)[inner]
            # (under refinement the sweep stencil's b is never read: each phase's right-hand
            # side is its residual buffer; see pbsolver.solving.loop)
            warm = self._initial_guess(buf, nf, x0)
        system.bnorms = be.block_norms(system.checked.b, nf)
        system.guessed = [warm] * nf
        sv = self.solver
        rtol = sv.rtol if rtol is None else float(rtol)
        out = system.solve(self._method(nf), rtol=rtol, atol=sv.atol, maxiter=sv.maxiter,
                           check_every=sv.check_every)  # fmt: skip
        with be.stream_context():
            lam = system.x.copy()
        return lam, out

    def ses_interval_ends(self):
        """The SES interval ends of the last call's frames, for the exact forces.

        :meth:`pbsolver.md.ses.FrameSES.interval_ends` (per axis, every frame's ends on the
        stack), or None: no probe-swept surface, or kernels without a recorder (the forces then
        record each frame's lines themselves).
        """
        return None if self._ses is None else self._ses.interval_ends()

    def ion_end_sums(self, frames: int):
        """The ion-accessible lines' chord ends of the last call of ``frames`` frames, summed.

        Returns a function of a sensitivity ``s`` on the stack (B·stride, ny, nz) giving, per
        row of the B frames' atoms (B·N, 3), Σ over the ends of s[cell]/h_z · ∂(covered length
        of the cell)/∂(the end's sphere): one launch over the columns, lines and chords the
        engine's ion-accessible map cut (``kappa_subsamples`` lines a cell side along z, spheres
        of radius R + ion radius), what :func:`pbsolver.forces.ionic.ionic_gradient` scales.
        The per-atom sums are atomic adds (reruns may differ by rounding). None: no salt, or
        kernels without the sum (the CPU's: the forces then record each frame's lines).
        """
        K = self.kernels.ion_end_sums
        buf = self._buffers.get(int(frames))
        if K is None or not self.kappa > 0 or buf is None:
            return None
        nf, (nx, ny, nz) = int(frames), self.grid.shape
        pos, origin = buf.pos, buf.origin

        def sums(sensitivity):
            xp = self.xp
            with self.backend.stream_context():  # the kernels' stream: arrays made on it
                grad = xp.zeros((nf * int(pos.shape[1]), 3))
                bad = xp.zeros(1, dtype=np.int64)
                sens = xp.ascontiguousarray(sensitivity, dtype=xp.float64)
                self._launch(K, nf * nx * ny, grad, sens, pos, self._rad_ion, nx, ny, nz,
                             self.stride, origin, self._h, self.subsamples, bad,
                             threads=LINE_THREADS)  # fmt: skip
                if int(self.backend.to_host(bad)[0]):  # the map's own columns did not overflow
                    raise RuntimeError("the ion-accessible columns overflowed in the forces")
            return grad

        return sums

    def stack_problem(self, frames: int, grid: Grid):
        """The maps of the last call of ``frames`` frames as one :class:`~pbsolver.Problem`.

        On a grid of the whole stack (B·stride planes; ``grid``'s origin and spacing, ``grid``
        the frames' grid of this engine's shape): faces from the edge fractions, φ_c, κ̄² and
        the boundary values that call solved (views of the engine's buffers, overwritten by the
        next call of as many frames; frame k on planes k·stride … k·stride + nx − 1). What the
        exact forces differentiate (:func:`pbsolver.forces.frames_forces_from_adjoint`).
        """
        from pbsolver.molecule.maps import faces_from_fractions
        from pbsolver.problem import Problem

        buf = self._mapped(frames)
        if grid.shape != self.grid.shape or grid.spacing != self.grid.spacing:
            raise InputError(f"{grid} is not a grid of this engine's shape and spacing")
        rows = slice(0, int(frames) * self.stride)
        # The face body in float64 from the stored float32 fractions, one pass a map: the faces
        # the assembly made (bodies/frame_maps.unlifted_node; the body's snap is its clip)
        fractions = [f[rows] for f in (buf.fx, buf.fy, buf.fz)]
        device = self.backend.map_kernels().device_results()
        if device is not None:
            faces = tuple(device.faces_from_fractions(f, self.eps_in, self.eps_out)
                          for f in fractions)  # fmt: skip
        else:
            faces = faces_from_fractions([np.asarray(f, dtype=np.float64) for f in fractions],
                                         self.eps_in, self.eps_out)  # fmt: skip
        # κ̄² as the assembly wrote it (bodies/frame_maps.unlifted_node: the hierarchy's input)
        kappa2 = buf.unl[3][rows] if self.kappa > 0 else None
        stack = Grid((int(frames) * self.stride, *grid.shape[1:]), spacing=grid.spacing,
                     origin=grid.origin)  # fmt: skip
        return Problem(stack, phi_coulomb=buf.phic[rows], eps_cavity=self.eps_in,
                       epsilon_faces=faces, kappa2=kappa2, boundary="dirichlet",
                       boundary_values=buf.g[rows])  # fmt: skip

    # ------------------------------------------------------------------ steps
    def _maps(self, buf, nf):
        """Launch the map and assembly kernels.

        Returns the lines' overflow count, or None where the kernels raise ``buf.bad`` instead.
        """
        zeroed = [buf.cov, buf.bad]
        if self._ses is None:  # the edge kernels accumulate into zeroed arrays
            zeroed += self._fraction_targets(buf)
        for a in zeroed:
            a.fill(0)
        counts = [step() for _name, step in self.map_steps(buf, nf)]
        counts = [c for c in counts if c is not None]
        return max(counts) if counts else None

    def _maps_key(self, buf, nf):
        """Graph-cache key of :meth:`_maps`: every buffer address and every scalar it bakes in.

        The graph holds addresses and scalar values, so an engine made later whose buffers land
        on the same addresses replays it only if its constants are the same too.
        """
        arrays = (buf.pos, buf.origin, buf.rel64, buf.rel, buf.fx, buf.fy, buf.fz, *buf.raw,
                  buf.cov,
                  buf.phic, buf.g, buf.bad, *buf.out64, *buf.out32, *buf.unl, self._rad,
                  self._rad_ion,
                  self._q32, self._rad_ion32, self._h, self._nodes, self._params)  # fmt: skip
        scalars = (nf, self.grid.shape, self.stride, self.kappa, self.eps_in, self.eps_out,
                   self.subsamples, self.boundary_kind, self.surface,
                   self._ses is None)  # fmt: skip
        return ("stacked-frames-maps", scalars, self.backend.buffer_key(*arrays))

    def map_steps(self, buf, nf):
        """The map and assembly launches as ``(name, callable)`` pairs, in order.

        Each callable returns the CPU kernels' overflow count (None on CUDA, where the kernels
        raise ``buf.bad``). :meth:`_maps` runs them all; ``benchmarks/frames_profile.py`` times
        each alone.
        """
        from pbsolver.molecule.maps import COULOMB_KJ

        K, (nx, ny, nz), xp, f32 = self.kernels, self.grid.shape, self.xp, np.float32
        flag = [buf.bad] if K.flags else []
        lines = (ny * nz, nx * nz, nx * ny)

        def edges(axis, out):
            return self._launch(K.edges, nf * lines[axis], out, buf.pos, self._rad, axis, nx, ny,
                                nz, self.stride, buf.origin, self._h, *flag,
                                threads=LINE_THREADS)  # fmt: skip

        def relative():  # the direct sums run in float32 on positions relative to the origin
            xp.subtract(buf.pos, buf.origin[:, None, :], out=buf.rel64)
            buf.rel[...] = buf.rel64

        steps = []
        if self._ses is None:  # the union of spheres (the SES is mapped before, in run)
            steps += [(f"edges axis {a}", lambda a=a, o=o: edges(a, o))
                      for a, o in enumerate(self._fraction_targets(buf))]  # fmt: skip
        if self.smooth:
            steps.append(("smoothing", lambda: self._launch(
                K.ses.smooth, nf * self.stride * ny * nz, *buf.raw, buf.fx, buf.fy, buf.fz, nf,
                nx, ny, nz, self.stride)))  # fmt: skip
        if self.kappa > 0:
            steps.append(("ion accessibility", lambda: self._launch(
                K.ion, nf * nx * ny, buf.cov, buf.pos, self._rad_ion, nx, ny, nz, self.stride,
                buf.origin, self._h, self.subsamples, *flag, threads=LINE_THREADS)))  # fmt: skip
        steps.append(("relative positions", relative))
        if K.coulomb_map is not None:  # the backend sums each frame's φ_c map itself
            steps.append(("coulomb", lambda: K.coulomb_map(
                buf.phic, buf.pos, buf.origin, self._q, COULOMB_KJ / self.eps_in,
                self.grid.shape, self.grid.spacing, self.stride)))  # fmt: skip
        else:
            # the φ_c kernel for this many frames, and the nodes a work item of it computes
            coulomb, per = K.coulomb_for(nf)
            items = nf * ((nx * ny * nz + per - 1) // per)
            steps.append(("coulomb", lambda: self._launch(
                coulomb, items, buf.phic, buf.rel, self._q32, COULOMB_KJ / self.eps_in, nx, ny,
                nz, self.stride, self._h, per_frame=nf)))  # fmt: skip
        if K.on_nodes is not None:
            steps.append(("coulomb on nodes", lambda: self._launch(
                K.on_nodes, nf * self.n_atoms, buf.phic, buf.rel, self._q32, nx, ny, nz,
                self.stride, self._h)))  # fmt: skip
        if self.boundary_kind == "mdh" and K.boundary_map is not None:  # from that φ_c
            steps.append(("boundary", lambda: self._launch(
                K.boundary_map, nf * len(self._nodes), buf.g, buf.phic, buf.pos, buf.origin,
                self._q, self._rad_ion, self._nodes, self.kappa, self.eps_out, self.eps_in,
                COULOMB_KJ, self.stride, self._h)))  # fmt: skip
        elif self.boundary_kind == "mdh":
            steps.append(("boundary", lambda: self._launch(
                K.boundary, nf * len(self._nodes), buf.g, buf.rel, self._q32, self._rad_ion32,
                self._nodes, f32(self.kappa), f32(self.eps_out), f32(self.eps_in), COULOMB_KJ,
                self.stride, self._h, per_frame=nf)))  # fmt: skip
        steps.append(("assemble", lambda: self._launch(
            K.assemble, nf * self.stride * ny * nz, buf.fx, buf.fy, buf.fz, buf.phic, buf.cov,
            buf.g, nf, nx, ny, nz, self.stride, self._params, buf.out64, buf.out32,
            buf.unl)))  # fmt: skip
        return steps

    def _mapped(self, frames):
        """The buffers of the last call of ``frames`` frames (InputError: no such call yet)."""
        buf = self._buffers.get(int(frames))
        if buf is None:
            raise InputError(f"this engine has not mapped {frames} frame(s) in one call yet")
        return buf

    def _fraction_targets(self, buf):
        """Where the edge fractions are written: the raw buffers for "smol", else the faces'."""
        return list(buf.raw) if self.smooth else [buf.fx, buf.fy, buf.fz]

    def _initial_guess(self, buf, nf, x0) -> bool:
        """x: the guess's interior in every block, zero on decoupled nodes; True if warm."""
        xp = self.xp
        buf.x.fill(0.0)
        if x0 is None:
            return False
        x0 = xp.asarray(x0, dtype=np.float64)
        if tuple(x0.shape) != self.grid.shape:
            raise InputError(f"x0 has shape {tuple(x0.shape)}, the grid needs {self.grid.shape}")

        nx = self.grid.shape[0]
        inner = (slice(1, -1),) * 3
        self._frames(buf.x, nf)[:, 1 : nx - 1, 1:-1, 1:-1] = x0[inner][None]
        return True

    def _fill_guess(self, buf, nf, nodes):
        """Debye–Hückel values (the "mdh" sum with vdW radii) at the inner ``nodes`` of x."""
        from pbsolver.molecule.maps import COULOMB_KJ

        nodes = np.asarray(nodes).reshape(-1, 3)
        shape = np.asarray(self.grid.shape)
        inner = nodes[np.all((nodes >= 1) & (nodes <= shape - 2), axis=1)]
        if not len(inner):
            return
        f32 = np.float32
        self._launch(
            self.kernels.boundary, nf * len(inner), buf.x, buf.rel, self._q32, self._rad32,
            self._to_device(np.ascontiguousarray(inner, dtype=np.int32)), f32(self.kappa),
            f32(self.eps_out), f32(self.eps_in), COULOMB_KJ, self.stride, self._h, per_frame=nf,
        )  # fmt: skip

    def method_for(self, nf: int) -> str:
        """The solver a call of ``nf`` frames uses ("sor" or "multigrid")."""
        if self.method != "auto":
            return self.method
        return self.backend.auto_stack_method(nf)

    def _method(self, nf: int):
        """The stack's method object.

        SOR with the solver's ω, or multigrid with the solver's multigrid options (and its ω
        when the engine's method is "multigrid" by name).
        """
        s = self.solver
        name = self.method_for(nf)
        options = {} if name == "sor" else dict(s.method_options)
        if s.omega is not None and (name == "sor" or self.method == "multigrid"):
            options["omega"] = s.omega
        return make_method(name, options)

    def _sample(self, buf, nf):
        nx, ny, nz = self.grid.shape
        self._launch(
            self.kernels.sample, nf * self.n_atoms, buf.phi, buf.pos, nx, ny, nz, self.stride,
            buf.origin, self._h, self.cubic, buf.samples,
        )  # fmt: skip

    # ------------------------------------------------------------------ plumbing
    def _buffers_for(self, nf):
        """Persistent buffers for calls of ``nf`` frames (made on the first such call).

        The stack's linear system (stencils, iterate, hierarchy inputs) is a kept
        :class:`~pbsolver.solving.system.LinearSystem` workspace the assembly kernel writes into.
        """
        buf = self._buffers.get(nf)
        if buf is not None:
            return buf
        xp, be = self.xp, self.backend
        _, ny, nz = self.grid.shape
        big = (nf * self.stride, ny, nz)
        with be.stream_context():
            sv = self.solver
            system = LinearSystem.stack(be, self.grid.shape, self.grid.spacing, nf, sv.dtype,
                                        sv.refine, unlifted=True)  # fmt: skip

            def zeros(dtype=np.float64, shape=big):
                return xp.zeros(shape, dtype=dtype)

            checked, st = system.checked, system.st
            buf = SimpleNamespace(
                system=system,
                pos=zeros(shape=(nf, self.n_atoms, 3)),
                origin=zeros(shape=(nf, 3)),
                rel64=zeros(shape=(nf, self.n_atoms, 3)),
                rel=zeros(np.float32, (nf, self.n_atoms, 3)),
                fx=zeros(), fy=zeros(), fz=zeros(), cov=zeros(), phic=zeros(), g=zeros(),
                raw=(zeros(), zeros(), zeros()) if self.smooth else (),
                out64=(checked.cx, checked.cy, checked.cz, checked.diag, checked.b),
                out32=(st.cx, st.cy, st.cz, st.diag, st.b),
                x=system.x, phi=zeros(), unl=system.unlifted,
                samples=zeros(shape=(nf, self.n_atoms, 4)),
                bad=xp.zeros(1, dtype=np.int64),
            )  # fmt: skip
        self._buffers[nf] = buf
        return buf

    def _frames(self, a, nf):
        """(B, stride, ny, nz) view of a stacked array."""
        return a.reshape(nf, self.stride, *a.shape[1:])

    def _to_device(self, a):
        return self.xp.asarray(a)

    def _launch(self, kernel, items, *args, per_frame=None, threads=None):
        """Run a kernel over ``items`` work items (see ``Backend.launch_items``)."""
        return self.backend.launch_items(kernel, items, *args, threads=threads, groups=per_frame)


def _outer_layer(shape) -> np.ndarray:
    """(M, 3) int32 indices of the outer layer's nodes."""
    mask = np.zeros(shape, dtype=bool)
    mask[[0, -1], :, :] = True
    mask[:, [0, -1], :] = True
    mask[:, :, [0, -1]] = True
    return np.ascontiguousarray(np.argwhere(mask).astype(np.int32))


def supports(surface, boundary_periodic: bool, boundary_kind: str) -> bool:
    """Whether the stacked path handles this set-up (vdW/SES/smoothed SES, Dirichlet, mdh/zero)."""
    return (
        surface in STACKED_SURFACES
        and not boundary_periodic
        and boundary_kind in STACKED_BOUNDARY_KINDS
    )


__all__ = ["STACKED_BOUNDARY_KINDS", "STACKED_SURFACES", "StackedFrames", "StackedSolve",
           "supports"]  # fmt: skip
