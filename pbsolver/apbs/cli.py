"""``pbsolver apbs FILE.in``: run an APBS input file and print APBS' summary lines."""

from __future__ import annotations

import sys

import click

from pbsolver.cli import BACKENDS, METHODS


@click.command("apbs")
@click.argument("input_file", type=click.Path(dir_okay=False))
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Where the solves run.")  # fmt: skip
@click.option("--maps-backend", type=click.Choice(BACKENDS), default=None,
              help="Where the maps (surfaces, φ_c) are built [default and auto: where the "
              "solves run].")  # fmt: skip
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="Iterative method of the solves.")  # fmt: skip
@click.option("-o", "--output-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the files of 'write' statements [default: the current "
              "folder].")  # fmt: skip
@click.option("--allow-outside", is_flag=True,
              help="Let the input name files outside its folder (absolute paths, '..') and "
              "write outside the output folder.")  # fmt: skip
@click.option("--skip-unsupported", is_flag=True,
              help="Skip what pbsolver cannot compute (some maps, writemat) with a "
              "warning instead of refusing the input.")  # fmt: skip
@click.option("--surfaces", type=click.Choice(["exact", "apbs"]), default="exact",
              show_default=True,
              help="srfm mol/smol as exact edge fractions, or as APBS's own point-switched maps "
              "(APBS's numbers at the same spacing).")  # fmt: skip
def apbs(input_file, **options):
    """Run an APBS input file (READ/ELEC/PRINT) with pbsolver, printing APBS' summary lines.

    Paths in the file are relative to its folder. Energies are APBS' totals without the self
    energies, so that differences (PRINT elecEnergy solv - ref END) match APBS'.
    """
    from pbsolver.apbs.run import run

    # the options are named as run()'s keywords: backend, maps_backend, method, output_dir,
    # allow_outside, skip_unsupported, surfaces
    run(input_file, out=sys.stdout, **options)
    return 0


__all__ = ["apbs"]
