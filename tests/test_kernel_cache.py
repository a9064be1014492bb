"""The CPU kernels load from numba's disk cache in a new process (no recompilation)."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_parallel_cpu_kernel_is_a_module_level_function():
    """numba keys a cached closure by its cell contents (dispatchers, whose pickles change
    from process to process), so a closure kernel is compiled again in every process and its
    cache grows each time. The parallel (top-level) kernels must not be closures; the bodies
    they call may be."""
    from numba.core.registry import CPUDispatcher

    import pbsolver.backends.cpu as cpu

    kernels, closures = 0, []
    for info in pkgutil.iter_modules(cpu.__path__):
        module = importlib.import_module(f"pbsolver.backends.cpu.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.targetoptions.get("parallel"):
                kernels += 1
                if obj.py_func.__closure__ is not None:
                    closures.append(f"{info.name}.{name}")
    assert kernels > 20
    assert closures == []


SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {root!r})
import pbsolver as pb
from pbsolver.backends.cpu import maps as K
from pbsolver.molecule import maps
a = pb.Atoms(np.array([[0.0, 0.0, 0.0], [1.5, 0.3, 0.0]]), np.array([0.5, -0.5]),
             np.array([1.5, 1.6]))
g = maps.grid_for_atoms(a, 0.6, 3.0)
maps.face_fractions(a, g, "mol")
maps.ion_accessibility(a, g, 2.0, subsamples=2)
stats = [K.ses_lines_kernel.stats, K.union_lines_kernel.stats]
print("HITS", *(sum(s.cache_hits.values()) for s in stats))
print("MISSES", *(sum(s.cache_misses.values()) for s in stats))
"""


def test_the_map_line_kernels_load_from_the_cache_in_a_new_process():
    code = SCRIPT.format(root=str(ROOT))
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    runs = []
    for _ in range(2):  # the first may compile and save; the second must load
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = dict(ln.split(" ", 1) for ln in proc.stdout.splitlines() if " " in ln)
        runs.append({k: [int(v) for v in lines[k].split()] for k in ("HITS", "MISSES")})
    assert runs[1]["MISSES"] == [0, 0] and all(h >= 1 for h in runs[1]["HITS"]), runs


def test_the_cache_directory_changes_with_any_kernel_source(tmp_path):
    """numba checks a cached kernel against its own file only; the bodies it compiles live in
    other files. An edit to a body must therefore move the whole cache (kernel_cache)."""
    import shutil

    from pbsolver.backends import kernel_cache

    copy = tmp_path / "pbsolver"
    shutil.copytree(kernel_cache.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = kernel_cache.source_digest(copy)
    assert before == kernel_cache.source_digest(kernel_cache.PACKAGE)
    body = copy / "backends" / "bodies" / "maps.py"
    body.write_text(body.read_text() + "\n# an edit\n")
    edited = kernel_cache.source_digest(copy)
    assert edited != before
    (copy / "cli.py").write_text("# not a kernel source\n")  # outside SOURCES: no new cache
    assert kernel_cache.source_digest(copy) == edited


def test_a_child_process_uses_the_parents_cache_directory():
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from pbsolver.backends import kernel_cache\n"
        "print(kernel_cache.configure())\n"
        "print(os.environ['NUMBA_CACHE_DIR'])\n"
        "import numba\n"
        "print(numba.config.CACHE_DIR)\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NUMBA_CACHE_DIR", "PBSOLVER_NUMBA_CACHE_BASE")
    }
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert first.returncode == 0, first.stderr
    chosen = first.stdout.split()
    assert len(set(chosen)) == 1 and Path(chosen[0]).name.startswith("kernels-")
    # a child inherits both variables and must arrive at the same directory, not below it
    env.update(NUMBA_CACHE_DIR=chosen[0], PBSOLVER_NUMBA_CACHE_BASE=str(Path(chosen[0]).parent))
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == chosen
