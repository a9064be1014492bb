"""Batch solves: resume after a crash (also a real SIGKILL), process pool, dask LocalCluster."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from _pbio import (
    PYTHON,
    assert_readable_output,
    cli_env,
    leftovers,
    sha256,
    small_problem,
    visible_files,
    write_input,
)

import pbsolver as pb
import pbsolver.solving.batched
from pbsolver.io import hdf5
from pbsolver.io.atomic import OutputLock
from pbsolver.jobs import batch
from pbsolver.jobs.batch import (
    LocalExecutor,
    ProcessExecutor,
    SolveOptions,
    default_output_name,
    run_batch,
)

OPTS = SolveOptions(method="sor", backend="cpu", rtol=1e-4)


def _reference(problems, opts=OPTS):
    return {n: opts.make_solver().solve(p).phi_rf for n, p in problems.items()}


def _check_results(path, problems, opts=OPTS, atol=1e-3):
    ref = _reference(problems, opts)
    names = assert_readable_output(path, expect=problems)
    assert names == list(problems)
    for name in names:
        rf, _, solver = hdf5.read_result(path, name)
        np.testing.assert_allclose(rf, ref[name], rtol=1e-5, atol=atol)
        assert solver["input_key"]


class CrashAfter(LocalExecutor):
    """Runs tasks in-process, then 'crashes' (raises) after ``n`` of them."""

    def __init__(self, n):
        self.n = n

    def run(self, fn, tasks):
        for i, task in enumerate(tasks):
            if i == self.n:
                raise KeyboardInterrupt("simulated crash")
            yield task, fn(task)


def test_many_inputs_one_output_each_same_name(tmp_path):
    a = write_input(tmp_path / "a.h5", n_grids=2)
    b = write_input(tmp_path / "b.h5", n_grids=1, n=7)
    out = tmp_path / "out"
    out.mkdir()
    before = {p: sha256(tmp_path / p) for p in ("a.h5", "b.h5")}
    jobs = [(tmp_path / p, out / default_output_name(p)) for p in ("a.h5", "b.h5")]
    report = run_batch(jobs, solve=OPTS, progress=True)  # a bar on stderr even off a terminal
    assert report.ok and len(report.solved) == 3
    assert visible_files(out) == ["a.h5", "b.h5"]
    assert leftovers(out) == []
    _check_results(out / "a.h5", a)
    _check_results(out / "b.h5", b)
    assert {p: sha256(tmp_path / p) for p in before} == before  # inputs never modified
    assert default_output_name("x/mol.pqr") == "mol.h5"


def test_resume_key_covers_file_identity_and_options(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=1)
    src = tmp_path / "in.h5"
    key = batch.input_key(src, "g0", OPTS)
    assert key == batch.input_key(src, "g0", SolveOptions(method="sor", backend="cuda", rtol=1e-4))
    assert key != batch.input_key(src, "g1", OPTS)
    assert key != batch.input_key(src, "g0", SolveOptions(method="sor", rtol=1e-5))
    mol = batch.MoleculeOptions()
    assert batch.input_key(src, "g0", OPTS, mol) != batch.input_key(
        src, "g0", OPTS, batch.MoleculeOptions(spacing=0.7)
    )
    os.utime(src, ns=(1, 1))
    assert key != batch.input_key(src, "g0", OPTS)


def test_crash_mid_batch_keeps_finished_grids_and_rerun_resumes(tmp_path):
    problems = write_input(tmp_path / "in.h5", n_grids=5)
    out = tmp_path / "out.h5"
    with pytest.raises(KeyboardInterrupt):
        run_batch([(tmp_path / "in.h5", out)], solve=OPTS, executor=CrashAfter(3))
    assert not out.exists()  # not assembled yet, nothing half-written
    parts = sorted((tmp_path / ".out.h5.parts").glob("*.h5"))
    assert len(parts) == 3
    for part in parts:  # each part is a complete, readable file
        with h5py.File(part, "r") as f:
            (name,) = list(f["grids"])
            assert bool(f["grids"][name]["solver"].attrs["converged"])
    # a killed writer's temporaries are cleaned up by the rerun
    (tmp_path / ".out.h5.4242.tmp").write_bytes(b"partial")
    (tmp_path / ".out.h5.parts" / ".abc.h5.4242.tmp").write_bytes(b"partial")
    solved_now = []
    report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS)
    solved_now = [s.grid for s in report.solved]
    assert report.ok and len(report.skipped) == 3 and len(solved_now) == 2
    _check_results(out, problems)
    assert leftovers(tmp_path) == []


def test_rerun_after_crash_following_a_complete_output(tmp_path):
    """Grids come from the old output and from part files at once."""
    problems = write_input(tmp_path / "in.h5", n_grids=4)
    out = tmp_path / "out.h5"
    report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS, grids=["g0", "g1"])
    assert report.ok and hdf5.list_grids(out) == ["g0", "g1"]
    with pytest.raises(KeyboardInterrupt):
        run_batch([(tmp_path / "in.h5", out)], solve=OPTS, executor=CrashAfter(1))
    assert hdf5.list_grids(out) == ["g0", "g1"]  # the old complete version
    report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS)
    assert report.ok and len(report.skipped) == 3 and len(report.solved) == 1
    _check_results(out, problems)


def test_changed_input_or_options_invalidate_old_results(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=2)
    out = tmp_path / "out.h5"
    assert run_batch([(tmp_path / "in.h5", out)], solve=OPTS).ok
    report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS)
    assert len(report.skipped) == 2
    stricter = SolveOptions(method="sor", backend="cpu", rtol=1e-5)
    report = run_batch([(tmp_path / "in.h5", out)], solve=stricter)
    assert len(report.solved) == 2
    problems = write_input(tmp_path / "in.h5", n_grids=2, n=7)  # new content, same name
    report = run_batch([(tmp_path / "in.h5", out)], solve=stricter)
    assert len(report.solved) == 2
    _check_results(out, problems, stricter)


def test_a_locked_output_is_not_touched(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=1)
    out = tmp_path / "out.h5"
    with OutputLock(out):
        report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS)
    assert not report.ok and "another pbsolver process" in report.failed[0].reason
    assert not out.exists()


def test_outputs_may_not_clash_or_overwrite_inputs(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=1)
    with pytest.raises(pb.InputError, match="is the input"):
        run_batch([(tmp_path / "in.h5", tmp_path / "in.h5")], solve=OPTS)
    (tmp_path / "d").mkdir()
    write_input(tmp_path / "d" / "in.h5", n_grids=1)
    with pytest.raises(pb.InputError, match="would both write"):
        run_batch(
            [(tmp_path / "in.h5", tmp_path / "o.h5"), (tmp_path / "d/in.h5", tmp_path / "o.h5")]
        )


def test_run_task_reports_instead_of_raising(tmp_path):
    write_input(tmp_path / "in.h5", n_grids=1)
    key = batch.input_key(tmp_path / "in.h5", "g0", OPTS)
    ok = batch.run_task(batch.Task(str(tmp_path / "in.h5"), "hdf5", "g0", key, OPTS))
    assert ok.ok and ok.reaction_field.dtype == np.float32
    assert ok.solver["input_key"] == key
    bad = batch.run_task(batch.Task(str(tmp_path / "in.h5"), "hdf5", "nope", key, OPTS))
    assert not bad.ok and "no grid 'nope'" in bad.error


def test_run_stack_solves_a_group_in_one_solve_batch_call(tmp_path, monkeypatch):
    problems = write_input(tmp_path / "in.h5", n_grids=3, n=7)
    src = str(tmp_path / "in.h5")
    tasks = [batch.Task(src, "hdf5", n, batch.input_key(src, n, OPTS), OPTS) for n in problems]
    tasks.insert(1, batch.Task(src, "hdf5", "nope", "k", OPTS))  # fails alone
    calls = []
    real = pbsolver.solving.batched.solve_batch

    def recording(problems, **kw):
        calls.append((len(problems), kw))
        return real(problems, **kw)

    monkeypatch.setattr(pbsolver.solving.batched, "solve_batch", recording)
    outcomes = batch.run_stack(batch.TaskGroup(tuple(tasks)))
    assert [len(calls), calls[0][0]] == [1, 3]  # the three readable grids, together
    assert calls[0][1]["method"] == "sor" and calls[0][1]["backend"] == "cpu"
    assert [o.grid for o in outcomes] == ["g0", "nope", "g1", "g2"]
    assert not outcomes[1].ok and "no grid 'nope'" in outcomes[1].error
    ref = _reference(problems)
    for o in (outcomes[0], outcomes[2], outcomes[3]):
        assert o.ok and o.solver["input_key"] == batch.input_key(src, o.grid, OPTS)
        np.testing.assert_allclose(o.reaction_field, ref[o.grid], rtol=1e-5, atol=1e-3)


def test_run_stack_reports_a_failed_batch_solve_for_each_grid(tmp_path, monkeypatch):
    problems = write_input(tmp_path / "in.h5", n_grids=2, n=7)
    src = str(tmp_path / "in.h5")
    group = batch.TaskGroup(tuple(batch.Task(src, "hdf5", n, "k", OPTS) for n in problems))

    def boom(problems, **kw):
        raise MemoryError

    monkeypatch.setattr(pbsolver.solving.batched, "solve_batch", boom)
    outcomes = batch.run_stack(group)
    assert [(o.ok, o.error) for o in outcomes] == [(False, "out of memory")] * 2


@pytest.mark.parametrize("workers", [1, 2])
def test_batch_in_stacks_equals_grid_by_grid_and_resumes(tmp_path, workers):
    a = write_input(tmp_path / "a.h5", n_grids=3, n=7)
    b = write_input(tmp_path / "b.h5", n_grids=2, n=8)  # another shape
    out = tmp_path / "out"
    out.mkdir()
    jobs = [(tmp_path / p, out / p) for p in ("a.h5", "b.h5")]
    executor = ProcessExecutor(workers, gpus=[]) if workers > 1 else CrashAfter(1)
    if workers == 1:  # a crash after the first group of two grids, then a rerun
        with pytest.raises(KeyboardInterrupt):
            run_batch(jobs, solve=OPTS, executor=executor, stack=2)
        report = run_batch(jobs, solve=OPTS, stack=2)
        assert len(report.skipped) == 2 and len(report.solved) == 3
    else:
        report = run_batch(jobs, solve=OPTS, executor=executor, stack=2)
        assert len(report.solved) == 5
    assert report.ok, report.failed
    _check_results(out / "a.h5", a)
    _check_results(out / "b.h5", b)
    assert leftovers(out) == []
    with pytest.raises(pb.InputError, match="stack must be a positive integer"):
        run_batch(jobs, solve=OPTS, stack=0)


def test_init_worker_pins_one_gpu(monkeypatch):
    import queue

    q = queue.Queue()
    q.put("3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("NUMBA_NUM_THREADS", os.environ.get("NUMBA_NUM_THREADS", "2"))
    batch._init_worker(q, None)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,-1,5")
    assert batch.detect_gpus() == ["2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert batch.detect_gpus() == []


def test_process_pool_pins_gpus_per_worker():
    ex = ProcessExecutor(2, gpus=["0", "1"])
    seen = [out for _, out in ex.run(os.getenv, ["CUDA_VISIBLE_DEVICES"] * 4)]
    assert len(seen) == 4 and set(seen) <= {"0", "1"}
    assert "GPUs 0, 1" in ex.describe()


def test_process_pool_batch(tmp_path):
    problems = write_input(tmp_path / "in.h5", n_grids=4, n=7)
    out = tmp_path / "out.h5"
    report = run_batch(
        [(tmp_path / "in.h5", out)], solve=OPTS, executor=ProcessExecutor(2, gpus=[])
    )
    assert report.ok, report.failed
    _check_results(out, problems)


class Recording(ProcessExecutor):
    """A process pool that keeps the outcomes it hands to the driver."""

    def __init__(self, *args, crash_after=None, **kw):
        super().__init__(*args, **kw)
        self.outcomes, self.crash_after = [], crash_after

    def run(self, fn, tasks):
        for i, (task, outcome) in enumerate(super().run(fn, tasks)):
            if i == self.crash_after:
                raise KeyboardInterrupt("simulated crash")
            self.outcomes.append(outcome)
            yield task, outcome


class DriverWrites(LocalExecutor):
    """In-process tasks that return arrays, as remote dask workers do: the driver writes."""

    local_files = False


def _no_driver_writes(monkeypatch):
    """Make part writing in this (the driver's) process fail: spawned workers are unaffected."""

    def refuse(*args, **kw):
        raise AssertionError("the driver wrote a part file")

    monkeypatch.setattr(batch, "_write_part", refuse)


def test_pool_workers_write_parts_identical_to_in_process(tmp_path, monkeypatch):
    problems = write_input(tmp_path / "in.h5", n_grids=4, n=17)
    opts = SolveOptions(method="multigrid", backend="cpu", rtol=1e-6)
    local = run_batch([(tmp_path / "in.h5", tmp_path / "local.h5")], solve=opts)
    assert local.ok, local.failed
    _no_driver_writes(monkeypatch)
    pool = Recording(2, gpus=[])
    report = run_batch([(tmp_path / "in.h5", tmp_path / "pool.h5")], solve=opts, executor=pool)
    assert report.ok, report.failed
    assert len(pool.outcomes) == 4
    for outcome in pool.outcomes:  # only small values came back; the worker wrote the part
        assert outcome.reaction_field is None and outcome.arrays is None
        assert outcome.part and Path(outcome.part).parent.name == ".pool.h5.parts"
    assert leftovers(tmp_path) == []
    with h5py.File(tmp_path / "local.h5", "r") as a, h5py.File(tmp_path / "pool.h5", "r") as b:
        assert list(a["grids"]) == list(b["grids"]) == list(problems)
        for name in problems:
            ga, gb = a["grids"][name], b["grids"][name]
            assert sorted(ga) == sorted(gb)
            for key in ("reaction_field", "epsilon", "phi_coulomb"):
                assert ga[key].dtype == gb[key].dtype
                assert ga[key].compression == gb[key].compression == "gzip"
                assert np.array_equal(ga[key][()], gb[key][()])  # bitwise
            assert dict(ga.attrs).keys() == dict(gb.attrs).keys()
            sa, sb = dict(ga["solver"].attrs), dict(gb["solver"].attrs)
            assert sa.pop("seconds") >= 0 and sb.pop("seconds") >= 0
            assert sa == sb and sa["input_key"]
            assert np.array_equal(ga["solver/residual_norms"][()], gb["solver/residual_norms"][()])


@pytest.mark.parametrize("where", ["pool", "in-process", "driver"])
def test_a_part_that_cannot_be_written_fails_its_grid_only(tmp_path, where):
    problems = write_input(tmp_path / "in.h5", n_grids=3, n=7)
    out = tmp_path / "out.h5"
    job = batch._Job(tmp_path / "in.h5", out, "hdf5")
    blocker = job.part_path("g1")
    blocker.mkdir(parents=True)  # a directory where g1's part file goes: the rename fails
    (blocker / "keep").write_text("not a part file")
    executor = {
        "pool": lambda: ProcessExecutor(2, gpus=[]),
        "in-process": LocalExecutor,
        "driver": DriverWrites,
    }[where]()
    report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS, executor=executor)
    assert [s.grid for s in report.failed] == ["g1"]
    assert report.failed[0].reason == f"cannot write {job.parts_dir}: Is a directory"
    assert sorted(s.grid for s in report.solved) == ["g0", "g2"]
    assert hdf5.list_grids(out) == ["g0", "g2"]  # the batch went on and assembled the rest
    assert not job.parts_dir.exists()
    report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS, executor=executor)
    assert report.ok and [s.grid for s in report.solved] == ["g1"]
    _check_results(out, problems)
    assert leftovers(tmp_path) == []


def test_resume_after_a_crash_with_worker_written_parts(tmp_path, monkeypatch):
    problems = write_input(tmp_path / "in.h5", n_grids=16, n=11)
    out = tmp_path / "out.h5"
    _no_driver_writes(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_batch(
            [(tmp_path / "in.h5", out)],
            solve=OPTS,
            executor=Recording(2, gpus=[], crash_after=1),
        )
    assert not out.exists()
    parts = sorted((tmp_path / ".out.h5.parts").glob("*.h5"))
    # the recorded grids, and those the workers were finishing (queued ones are cancelled)
    assert 1 <= len(parts) < 16
    for part in parts:
        assert assert_readable_output(part, expect=problems)
    assert list((tmp_path / ".out.h5.parts").glob(".*")) == []  # no temporaries left
    pool = Recording(2, gpus=[])
    report = run_batch([(tmp_path / "in.h5", out)], solve=OPTS, executor=pool)
    assert report.ok and len(report.skipped) == len(parts)
    assert len(report.solved) == len(pool.outcomes) == 16 - len(parts)
    _check_results(out, problems)
    assert leftovers(tmp_path) == []


def _alive(pid):
    """True while ``pid`` runs (a dead orphan may linger as a zombie where init does not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_pool_workers_end_when_the_driver_is_killed(tmp_path):
    """Workers write part files: none may outlive a killed driver and write during a rerun."""
    script = (
        "import time\n"
        "from pbsolver.jobs.batch import ProcessExecutor\n"
        "it = ProcessExecutor(2, gpus=[]).run(time.sleep, [0.0, 0.0, 60.0, 60.0])\n"
        "next(it); next(it)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [PYTHON, "-c", script], env=cli_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        children = [
            int(p.parent.name)
            for p in Path("/proc").glob("[0-9]*/stat")
            if _stat_ppid(p) == proc.pid
        ]
        assert len(children) >= 2  # the two workers (and the resource tracker)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.05)
    assert not [pid for pid in children if _alive(pid)]


def _stat_ppid(stat_path):
    try:
        return int(stat_path.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_dask_local_cluster_of_two_processes(tmp_path):
    pytest.importorskip("distributed")
    problems = write_input(tmp_path / "in.h5", n_grids=4, n=7)
    write_input(tmp_path / "bad.h5", n_grids=1)
    with h5py.File(tmp_path / "bad.h5", "a") as f:
        del f["grids/g0/phi_coulomb"]
    out = tmp_path / "out"
    out.mkdir()
    ex = batch.DaskExecutor(local_workers=2, backend="cpu")
    jobs = [(tmp_path / n, out / n) for n in ("in.h5", "bad.h5")]
    with ex:
        workers = ex.client.scheduler_info()["workers"]
        assert len(workers) == 2
        assert all(addr.startswith("tcp://127.0.0.1:") for addr in workers)
        report = run_batch(jobs, solve=OPTS, executor=ex)
    assert "LocalCluster of 2 processes" in ex.describe()
    assert ex.local_files  # its workers wrote the part files
    assert not batch.DaskExecutor(address="tcp://127.0.0.1:1").local_files  # driver writes
    assert len(report.solved) == 4
    assert [s.grid for s in report.failed] == ["g0"]
    assert "missing dataset phi_coulomb" in report.failed[0].reason
    _check_results(out / "in.h5", problems)
    assert visible_files(out) == ["in.h5"]


# ---------------------------------------------------------------------- SIGKILL
def _kill_input(path, n_grids):
    problems = {f"f{i:03d}": small_problem(n=11, seed=100 + i) for i in range(n_grids)}
    hdf5.write_hdf5(path, problems)
    return problems


def _start(tmp_path, *extra):
    cmd = [PYTHON, "-m", "pbsolver", "-v", "batch", "in.h5", "--out-dir", "out",
           "--method", "sor", "--rtol", "1e-4", "--backend", "cpu", *extra]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _check_after_kill(out_dir: Path, problems):
    """Nothing unreadable, every finished grid readable; returns how many are finished."""
    finished = set()
    out = out_dir / "in.h5"
    if out.exists():
        finished |= set(assert_readable_output(out, expect=problems))
    parts = out_dir / ".in.h5.parts"
    if parts.is_dir():
        for part in parts.glob("*.h5"):
            finished |= set(assert_readable_output(part, expect=problems))
    assert set(visible_files(out_dir)) <= {"in.h5"}
    return finished


def test_sigkill_mid_batch_then_resume(tmp_path):
    problems = _kill_input(tmp_path / "in.h5", 24)
    digest = sha256(tmp_path / "in.h5")
    proc = _start(tmp_path)
    parts = tmp_path / "out" / ".in.h5.parts"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if parts.is_dir() and len(list(parts.glob("*.h5"))) >= 3:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the batch ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    finished = _check_after_kill(tmp_path / "out", problems)
    assert 3 <= len(finished) < len(problems)

    proc = _start(tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"{len(finished)} grid(s) already done" in err
    assert f"{len(problems) - len(finished)} solved" in err
    _check_results(tmp_path / "out" / "in.h5", problems)
    assert leftovers(tmp_path / "out") == []
    assert sha256(tmp_path / "in.h5") == digest


@pytest.mark.slow
def test_sigkill_at_random_moments_never_loses_or_corrupts(tmp_path):
    problems = _kill_input(tmp_path / "in.h5", 40)
    rng = random.Random(7)
    t0 = time.monotonic()
    proc = _start(tmp_path, "--force")
    proc.communicate(timeout=300)
    full = time.monotonic() - t0
    assert proc.returncode == 0
    for p in (tmp_path / "out").iterdir():
        p.unlink()
    finished = set()
    for _ in range(12):
        proc = _start(tmp_path)
        time.sleep(rng.uniform(0.2, full))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        now = _check_after_kill(tmp_path / "out", problems)
        assert finished <= now  # a finished grid is never lost
        finished = now
    proc = _start(tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    _check_results(tmp_path / "out" / "in.h5", problems)
    assert leftovers(tmp_path / "out") == []


def test_cli_batch_on_a_running_dask_scheduler(tmp_path):
    distributed = pytest.importorskip("distributed")
    from click.testing import CliRunner

    from pbsolver import cli

    problems = write_input(tmp_path / "in.h5", n_grids=2, n=7)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:  # fmt: skip
        res = CliRunner().invoke(
            cli.main,
            ["batch", str(tmp_path / "in.h5"), "--out-dir", str(tmp_path / "out"),
             "--scheduler", cluster.scheduler_address, "--method", "sor", "--rtol", "1e-4",
             "--backend", "cpu"],
        )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"dask scheduler {cluster.scheduler_address}" in res.stderr
    _check_results(tmp_path / "out" / "in.h5", problems)
