"""Who holds the CuPy pool at the peak of a default CUDA solve: the live arrays by allocating line.

The problem of ``tests/test_gpu_memory.py`` (``pbsolver.bench.random_problem(n, xp=cupy,
salt=True)``, on the GPU), solved once untimed (compilation, graph capture); then, with a CuPy
memory hook that follows every pool allocation and free, solved again. At each new high-water
mark of the bytes in use the hook records the live blocks grouped by the pbsolver line that
allocated them; the report lists those groups at the final peak (bytes and bytes per node),
largest first, beside the estimate of :mod:`pbsolver.resources`.

    python benchmarks/gpu_memory_peak.py --n 257 --top 25
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed or PYTHONPATH tree

import pbsolver as pb  # noqa: E402
from pbsolver import resources  # noqa: E402


def allocating_line() -> str:
    """The innermost pbsolver frame of the current stack (file:line function)."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "pbsolver" in frame.filename and "gpu_memory_peak" not in frame.filename:
            path = frame.filename[frame.filename.rfind("pbsolver") :]
            return f"{path}:{frame.lineno} {frame.name}"
    return "(outside pbsolver)"


def main(argv=None):
    import cupy as cp
    from cupy.cuda import memory_hook

    from pbsolver.bench import random_problem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=257)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    n = args.n

    class PeakHook(memory_hook.MemoryHook):
        name = "PeakHook"

        def __init__(self):
            self.live, self.used, self.peak, self.at_peak = {}, 0, 0, {}

        def malloc_postprocess(self, **kw):
            self.live[kw["mem_ptr"]] = (kw["mem_size"], allocating_line())
            self.used += kw["mem_size"]
            if self.used > self.peak:
                self.peak = self.used
                groups = {}
                for size, line in self.live.values():
                    groups[line] = groups.get(line, 0) + size
                self.at_peak = groups

        def free_postprocess(self, **kw):
            size, _ = self.live.pop(kw["mem_ptr"], (0, None))
            self.used -= size

    problem = random_problem(n, xp=cp, seed=100 + n, salt=True)
    solver = pb.Solver(backend="cuda", rtol=1e-6)
    solver.solve(problem)
    cp.cuda.Device().synchronize()
    pb.clear_workspaces()  # the measured solve makes its own workspace, as a first one does
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.total_bytes()
    hook = PeakHook()
    with hook:
        res = solver.solve(problem)
        cp.cuda.Device().synchronize()
    nodes = n**3
    est = resources.estimate_bytes((n, n, n), "auto", "cuda")
    print(f"{n}³ default CUDA solve ({res.method}, {res.iterations} iterations, {res.reason}): "
          f"pool grew {(pool.total_bytes() - before) / nodes:.1f} B/node, peak in use "
          f"{hook.peak / nodes:.1f} B/node, estimate {est / nodes:.1f} B/node")  # fmt: skip
    print("live blocks at the peak, by the pbsolver line that allocated them:")
    for line, size in sorted(hook.at_peak.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {size / nodes:7.2f} B/node  {size / 2**20:9.1f} MiB  {line}")


if __name__ == "__main__":
    main()
