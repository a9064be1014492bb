"""Rich display in Jupyter: ``_repr_html_`` of Grid, Problem and SolveResult.

Each class binds one function from here (``_repr_html_ = _display.grid_html``), so the classes
stay free of presentation code. The tables use only inline HTML (no scripts, no CSS classes),
and the residual history of a solve is drawn as a small inline SVG, so nothing here needs
matplotlib.
"""

from __future__ import annotations

import html
import math

import numpy as np

#: Above this many nodes the tables skip the min/max of the maps (one pass over each map).
STATS_MAX_POINTS = 64 * 1024**2

_TABLE = "border-collapse:collapse;font-size:0.92em;margin:0.2em 0"
_TH = "text-align:left;padding:1px 12px 1px 0;font-weight:600;vertical-align:top"
_TD = "text-align:left;padding:1px 0;font-family:monospace"


def _esc(value) -> str:
    return html.escape(str(value))


def _table(title: str, rows) -> str:
    body = "".join(
        f"<tr><th style='{_TH}'>{_esc(k)}</th><td style='{_TD}'>{v}</td></tr>" for k, v in rows
    )
    return f"<div><b>{title}</b><table style='{_TABLE}'>{body}</table></div>"


def _triple(values, fmt="{:g}") -> str:
    if len(set(values)) == 1:
        return _esc(fmt.format(values[0]))
    return _esc("(" + ", ".join(fmt.format(v) for v in values) + ")")


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _range(a, units: str = "") -> str:
    """'min … max units (dtype)' of an array (NumPy or CuPy); only the dtype when too big."""
    if a is None:
        return "—"
    shape = tuple(a.shape)
    if math.prod(shape) > STATS_MAX_POINTS:
        return _esc(f"{a.dtype} array")
    xp = _xp(a)
    finite = xp.isfinite(a)
    if not bool(finite.any()):
        return "no finite values"
    lo = float(xp.min(xp.where(finite, a, xp.inf)))
    hi = float(xp.max(xp.where(finite, a, -xp.inf)))
    text = f"{lo:.4g} … {hi:.4g}" if lo != hi else f"{lo:.4g} everywhere"
    n_inf = int((~finite).sum())
    if n_inf:
        text += f" ({n_inf} infinite)"
    if units:
        text += f" {units}"
    return _esc(f"{text}  ({a.dtype})")


def _xp(a):
    from pbsolver.arrays import array_module

    return array_module(a)


def _library(a) -> str:
    return "NumPy (host)" if _xp(a) is np else "CuPy (GPU)"


def grid_rows(grid):
    """Rows (name, HTML value) describing a :class:`~pbsolver.Grid`."""
    hi = tuple(o + length for o, length in zip(grid.origin, grid.lengths, strict=True))
    return [
        ("shape", _esc(" × ".join(str(n) for n in grid.shape) + f"  ({grid.size:,} nodes)")),
        ("spacing", _triple(grid.spacing) + " Å"),
        ("origin", _triple(grid.origin, "{:.3f}") + " Å  (centre of node [0, 0, 0])"),
        ("box", _esc(" × ".join(f"{length:g}" for length in grid.lengths)) + " Å"),
        (
            "extent",
            _esc(
                ", ".join(
                    f"{ax} {lo:.2f} … {h:.2f}"
                    for ax, lo, h in zip("xyz", grid.origin, hi, strict=True)
                )
            )
            + " Å",
        ),
        ("one map", _esc(f"{_bytes(4 * grid.size)} in float32")),
    ]


def grid_html(grid) -> str:
    """HTML table of a :class:`~pbsolver.Grid` for Jupyter."""
    return _table("pbsolver.Grid", grid_rows(grid))


def problem_html(problem) -> str:
    """HTML table of a :class:`~pbsolver.Problem` for Jupyter."""
    if problem.epsilon_faces is not None:
        eps_rows = [
            (f"ε faces e{ax}", _range(face))
            for ax, face in zip("xyz", problem.epsilon_faces, strict=True)
        ]
    else:
        eps_rows = [
            ("ε (node map)", _range(problem.epsilon)),
            ("face rule", _esc(problem.face_rule)),
        ]
    if problem.kappa2 is None:
        salt = "none (κ̄² = 0)"
    else:
        salt = _range(problem.kappa2, "Å⁻²")
    if problem.nonlinear:
        salt += _esc(f"; nonlinear (sinh), z = {problem.ion_valence}, {problem.temperature:g} K")
    if problem.boundary == "dirichlet":
        bc = "dirichlet, φ_rf on the outer layer = " + (
            "0" if problem.boundary_values is None else "given values"
        )
    else:
        bc = "periodic" + (" (no salt: φ_rf has zero mean)" if problem.is_singular else "")
    rows = [
        *grid_rows(problem.grid),
        *eps_rows,
        ("ε_c (cavity)", _esc(f"{problem.eps_cavity:g}")),
        ("φ_c", _range(problem.phi_coulomb, "kJ mol⁻¹ e⁻¹")),
        ("κ̄² (salt)", salt),
        ("boundary", _esc(bc)),
        ("arrays", _esc(_library(problem.phi_coulomb))),
    ]
    return _table("pbsolver.Problem", rows)


def _sparkline(norms, width=220, height=44) -> str:
    """Inline SVG of log10(residual) against check number."""
    vals = [math.log10(v) for v in norms if v > 0 and math.isfinite(v)]
    if len(vals) < 2:
        return ""
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    n = len(vals)
    pts = " ".join(
        f"{2 + (width - 4) * i / (n - 1):.1f},{2 + (height - 4) * (hi - v) / span:.1f}"
        for i, v in enumerate(vals)
    )
    return (
        f"<svg width='{width}' height='{height}' style='background:#f7f7f7'>"
        f"<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{pts}'/></svg>"
        f"<br><span style='font-size:0.85em'>log₁₀ residual {hi:.1f} → {lo:.1f} over {n} "
        "checks</span>"
    )


def result_html(result) -> str:
    """HTML table of a :class:`~pbsolver.SolveResult` for Jupyter."""
    colour = "#1a7f37" if result.converged else "#cf222e"
    status = (
        f"<span style='color:{colour};font-weight:600'>"
        f"{'converged' if result.converged else 'NOT converged'}</span> ({_esc(result.reason)})"
    )
    phi = result.phi_rf
    rows = [
        ("status", status),
        ("method", _esc(f"{result.method} on {result.backend}")),
        ("iterations", _esc(result.iterations)),
        ("relative residual", _esc(f"{result.residual:.3g}")),
        ("time", _esc(f"{result.seconds:.3g} s")),
    ]
    if getattr(result, "omega", None) is not None:
        rows.append(("ω", _esc(f"{result.omega:.4f}")))
    rows.append(
        (
            "φ_rf",
            _esc(f"{' × '.join(str(n) for n in phi.shape)}, {_library(phi)}; ")
            + _range(phi, "kJ mol⁻¹ e⁻¹"),
        )
    )
    spark = _sparkline(result.residual_norms)
    if spark:
        rows.append(("history", spark))
    return _table("pbsolver.SolveResult", rows)
