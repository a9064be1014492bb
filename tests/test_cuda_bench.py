"""``pbsolver bench`` on a machine without a GPU: CPU rows measured, GPU rows reported skipped."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pbsolver.backends import cuda_available


@pytest.mark.skipif(
    cuda_available(), reason="on a GPU machine the bench is a benchmark, not a test"
)
def test_bench_without_gpu_runs_cpu_rows_and_says_gpu_skipped(tmp_path):
    from pbsolver.bench import bench

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(bench, ["--quick", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "skipped: GPU rows" in result.output
    res = json.loads(out.read_text())
    assert res["errors"] == []
    assert res["environment"]["versions"]["numpy"]
    assert [r["backend"] for r in res["solve"]] == ["cpu"] * len(res["solve"])
    assert all(r["converged"] for r in res["solve"])
    # memory: the estimate covers what a solve allocates (the problem's arrays are the caller's)
    for r in res["solve"]:
        assert 0 < r["measured_B_per_node"] <= 1.15 * r["estimated_B_per_node"], r
    assert "peak B" in result.output
    assert res["cpu"][0]["us_per_sweep"] > 0
    assert res["batch"] and all(r["converged"] and r["solves_per_s"] > 0 for r in res["batch"])
    assert "sweeps" not in res


def test_a_failed_memory_measurement_keeps_the_row_and_says_why(monkeypatch):
    from pbsolver.backends import Backend
    from pbsolver.bench import format_tables, solve_rows

    def broken(self, call):
        raise RuntimeError("no pool here")

    monkeypatch.setattr(Backend, "peak_bytes", broken)
    rows = solve_rows([17], gpu=False)
    assert [r["method"] for r in rows] == ["sor", "multigrid", "mgcg"]
    assert rows and all(r["converged"] and r["seconds"] > 0 for r in rows)
    assert all("no pool here" in r["memory_error"] for r in rows)
    text = format_tables({"environment": {"date": "-", "versions": {}}, "solve": rows})
    assert "memory not measured" in text and "no pool here" in text
