"""APBS input files run through pbsolver: ``pbsolver apbs FILE.in`` and :func:`run`.

The modules, one job each: :mod:`~pbsolver.apbs.parser` (tokens and grammar → dataclasses, with
line numbers), :mod:`~pbsolver.apbs.files` (the files an input may name; reading molecules),
:mod:`~pbsolver.apbs.model` (an ELEC block → physics, grids, boundary values),
:mod:`~pbsolver.apbs.apolar` (an APOLAR block → its parameters), :mod:`~pbsolver.apbs.section`
(what ELEC and APOLAR sections share, as written and as planned),
:mod:`~pbsolver.apbs.energy` (APBS' energies without self terms), :mod:`~pbsolver.apbs.run`
(running it all), :mod:`~pbsolver.apbs.report` (APBS' output lines) and
:mod:`~pbsolver.apbs.cli` (the command).

>>> import pbsolver as pb
>>> inp = pb.apbs.parse_text("read mol pqr ion.pqr end quit")
>>> inp.molecules[0].path
'ion.pqr'
"""

from __future__ import annotations

from pbsolver.apbs.parser import parse_file, parse_text
from pbsolver.apbs.run import ApbsRun, CalculationResult, PrintResult, run

__all__ = ["ApbsRun", "CalculationResult", "PrintResult", "parse_file", "parse_text", "run"]
