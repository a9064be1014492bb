"""The options base of the jobs: a molecule's grid placement and the physics it is solved with."""

from __future__ import annotations

from dataclasses import dataclass, fields

from pbsolver.options import FIELDS, PhysicsOptions, nonnegative, positive


@dataclass(frozen=True)
class GridPhysicsOptions:
    """Grid placement and physics of a job's molecules (frozen, picklable; validated).

    The base of :class:`pbsolver.jobs.batch.MoleculeOptions` and
    :class:`pbsolver.jobs.mmpbsa.MMPBSAOptions`. A subclass adds the other physics fields it
    offers under their :class:`~pbsolver.PhysicsOptions` names (same defaults); every field so
    named goes into :attr:`physics`, which validates them on construction.

    Parameters
    ----------
    spacing : float
        Grid spacing, Å (> 0).
    margin : float
        Least gap between the atomic spheres and the grid's outer layer, Å (>= 0).
    eps_in, eps_out, ionic_strength, surface, probe_radius
        The physics (:class:`~pbsolver.PhysicsOptions`; ionic strength mol/L, probe radius Å).

    Raises
    ------
    InputError
        Naming the field and its bad value.
    """

    spacing: float = 0.5
    margin: float = 8.0
    eps_in: float = PhysicsOptions.eps_in
    eps_out: float = PhysicsOptions.eps_out
    ionic_strength: float = PhysicsOptions.ionic_strength
    surface: str = PhysicsOptions.surface
    probe_radius: float = PhysicsOptions.probe_radius

    def __post_init__(self):
        positive(self.spacing, "spacing")
        nonnegative(self.margin, "margin")
        self.physics  # noqa: B018 - validates the physics fields

    @property
    def physics(self) -> PhysicsOptions:
        """The physics of these options: every field named like a PhysicsOptions field."""
        return PhysicsOptions(
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name in FIELDS}
        )

    def grid_kwargs(self) -> dict:
        """The grid placement and physics as keywords: ``spacing``, ``margin``, ``physics``.

        As :meth:`pbsolver.Problem.from_atoms` and :func:`pbsolver.binding_energy` take them.
        """
        return {"spacing": self.spacing, "margin": self.margin, "physics": self.physics}


__all__ = ["GridPhysicsOptions"]
