"""What ELEC and APOLAR sections share: their fields as written and as planned, their labels.

:class:`SectionBlock` holds the keywords both kinds of section take, as the parser reads them
(:class:`~pbsolver.apbs.parser.ElecBlock`, :class:`~pbsolver.apbs.parser.ApolarBlock`);
:class:`Section` what both kinds of calculation hold once checked
(:class:`~pbsolver.apbs.model.Calculation`, :class:`~pbsolver.apbs.apolar.ApolarCalculation`),
read from their block by :meth:`Section.from_block`. :func:`numbered` is APBS's ``#n (name)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


def numbered(index: int, name: str | None) -> str:
    """``#n (name)``, or ``#n`` for a section without a name, as APBS numbers sections.

    >>> numbered(2, "solv"), numbered(3, None)
    ('#2 (solv)', '#3')
    """
    return f"#{index}" + (f" ({name})" if name else "")


@dataclass
class SectionBlock:
    """The keywords of an ELEC or APOLAR section, as written (None: not given).

    Attributes
    ----------
    index : int
        APBS's numbering of the sections of this kind (1-based).
    line, end_line : int
        The lines of the section's first and last words.
    name : str or None
        The section's name.
    mol : int or None
        Molecule number (1-based) of the READ section.
    grid : tuple of 3 floats or None
        Grid spacings, Å (ELEC: mg-manual's grid; APOLAR: its quadratures').
    srfm : str or None
        The surface.
    srad, swin : float or None
        Probe radius and spline window, Å.
    sdens : float or None
        Surface point density, Å⁻².
    temp : float or None
        Temperature, K.
    calcenergy, calcforce : {"no", "total", "comps"}
    lines : dict
        Each keyword given → the line it was given on.
    """

    #: The section's keyword, which starts its :attr:`label`.
    KIND: ClassVar[str] = ""

    index: int
    line: int
    end_line: int = 0
    name: str | None = None
    mol: int | None = None
    grid: tuple | None = None
    srfm: str | None = None
    srad: float | None = None
    swin: float | None = None
    sdens: float | None = None
    temp: float | None = None
    calcenergy: str = "no"
    calcforce: str = "no"
    lines: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``ELEC #n (name)`` or ``APOLAR #n (name)`` for messages."""
        return f"{self.KIND} {numbered(self.index, self.name)}"


@dataclass(kw_only=True)
class Section:
    """One ELEC or APOLAR section, ready to run: what both kinds hold.

    Attributes
    ----------
    index, name : int, str or None
        APBS's numbering of the sections of this kind (1-based) and the section's name.
    molecule : int
        Molecule number (1-based) of the READ section.
    atoms : Atoms
    energy, force : {"no", "total", "comps"}
        APBS ``calcenergy`` and ``calcforce``.
    block : SectionBlock
        The section as written.
    """

    index: int
    name: str | None
    molecule: int
    atoms: object
    energy: str
    block: object
    force: str = "no"

    @classmethod
    def from_block(cls, block: SectionBlock, atoms, **fields):
        """The calculation of a checked block: the shared fields read from it, with the kind's own.

        Parameters
        ----------
        block : SectionBlock
            The section as written, already checked (``mol`` names a molecule of the READ
            section): ``index``, ``name``, ``molecule`` (``mol``), ``energy`` (``calcenergy``)
            and ``force`` (``calcforce``) are its.
        atoms : Atoms
            Its molecule.
        **fields
            The fields of the kind of calculation (``cls``) beyond :class:`Section`'s.

        Returns
        -------
        Section
            An instance of ``cls``.
        """
        return cls(
            index=block.index,
            name=block.name,
            molecule=block.mol,
            atoms=atoms,
            energy=block.calcenergy,
            force=block.calcforce,
            block=block,
            **fields,
        )

    @property
    def label(self) -> str:
        """``#n (name)`` as APBS numbers the sections of this kind."""
        return numbered(self.index, self.name)


__all__ = ["Section", "SectionBlock", "numbered"]
