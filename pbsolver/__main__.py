"""``python -m pbsolver ...``: the same as the ``pbsolver`` command."""

from pbsolver.cli import main

if __name__ == "__main__":
    main(prog_name="pbsolver")
