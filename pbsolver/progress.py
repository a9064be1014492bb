"""Progress bars (tqdm on stderr), one policy for the whole package.

``progress=True`` shows a bar, ``False`` never does, and ``None`` (the default of every function
that takes it) shows one only on a terminal, and not at all when the environment variable
:data:`ENV` is ``"0"``. The command line's ``-q`` sets that variable, so that worker processes
and the map builders deep inside a batch follow it too.
"""

from __future__ import annotations

import os
import sys

#: Environment variable: "0" turns off the bars that were left to the default (None).
ENV = "PBSOLVER_PROGRESS"


def progress_bar(total, progress=None, *, unit="it", desc=None, leave=True):
    """A tqdm bar of ``total`` steps under the policy above (a disabled bar when off).

    Parameters
    ----------
    total : int
        Steps the bar counts.
    progress : bool or None
        True: always; False: never; None: on a terminal, unless ``PBSOLVER_PROGRESS=0``.
    unit, desc : str
        tqdm's unit and description.
    leave : bool
        Keep the finished bar on the terminal.
    """
    if progress is None and os.environ.get(ENV, "") == "0":
        progress = False
    disable = True if progress is False else (None if progress is None else False)
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=unit, desc=desc, disable=disable, leave=leave,
                file=sys.stderr, dynamic_ncols=True)  # fmt: skip


__all__ = ["ENV", "progress_bar"]
