"""Every public name of ``pbsolver`` resolves in a fresh interpreter (lazy names included)."""

import subprocess
import sys


def test_every_public_name_resolves_in_a_fresh_process():
    code = (
        "import pbsolver as pb\n"
        "missing = [n for n in pb.__all__ if getattr(pb, n, None) is None]\n"
        "print('MISSING', missing)\n"
        "assert callable(pb.solve) and callable(pb.solve_batch)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "MISSING []" in proc.stdout
