"""The processes executor (dpaudit.executors.processes): the local executor's numbers bit for bit with 1 and 2
workers (a real recipe: LiRA reference models from the ensemble trainer), one pool per executor reused across
maps, tiny or unpicklable maps in the driver, a raising unit named as the local executor names it, a dead worker
retried then UnitFailed, checkpoints, the workers' thread setting, and the default choice (cores / xdist workers).

One pool (a forkserver that has imported torch once) serves the module: the tests that start workers cost about
a second together."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

import unit_fns
from dpaudit.errors import ParameterError
from dpaudit.executors import (LocalExecutor, ProcessExecutor, Unit, UnitFailed, default_executor, default_workers,
                               derive_seed, make_executor)
from dpaudit.threads import ThreadSetting


@pytest.fixture(scope="module")
def px2():
    ex = ProcessExecutor(workers=2)
    yield ex
    ex.shutdown()


def _draws(n: int, seed: int = 3) -> list[Unit]:
    return [Unit(f"u{k}", unit_fns.draw, (derive_seed(seed, f"u{k}"),)) for k in range(n)]


def test_units_run_in_workers_with_the_local_numbers_and_one_pool(px2):
    units = _draws(8)
    local, here = LocalExecutor().map(units), px2.map(units)
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(local, here))
    pids = {int(r["pid"]) for r in px2.map([Unit(f"p{k}", unit_fns.ran_in) for k in range(6)])}
    assert os.getpid() not in pids and len(pids) <= 2
    ck = px2.with_checkpoints(None)  # a copy shares the pool
    ck.map(_draws(3, seed=5))
    assert px2.startups == 1 and px2.describe() == "processes (2 workers)"


def test_a_tiny_or_unpicklable_map_runs_in_the_driver_without_starting_workers():
    ex = ProcessExecutor(workers=2)
    assert int(ex.map([Unit("one", unit_fns.ran_in)])[0]["pid"]) == os.getpid()  # fewer than min_units
    seed = 11
    closure = lambda: unit_fns.draw(seed)  # noqa: E731 - a worker could not import it
    got = ex.map([Unit("a", closure), Unit("b", unit_fns.draw, (seed,))])
    assert np.array_equal(got[0]["x"], got[1]["x"]) and ex.startups == 0
    ex.shutdown()


def test_a_raising_unit_is_named_and_finished_units_are_checkpointed(px2, tmp_path):
    ck = px2.with_checkpoints(tmp_path / "ck")
    units = [Unit("ok", unit_fns.draw, (1,)), Unit("bad", unit_fns.fail, ("boom",))]
    with pytest.raises(RuntimeError, match="boom") as info:
        ck.map(units)
    assert not isinstance(info.value, UnitFailed) and "(in executor unit 'bad')" in info.value.__notes__
    assert (tmp_path / "ck" / "ok.npz").is_file()
    with pytest.raises(ParameterError, match="'run_seed'"):  # dpaudit's own errors arrive as themselves
        px2.map([Unit("neg", derive_seed, (-1, "x")), Unit("pos", derive_seed, (1, "x"))])
    log = tmp_path / "ran.log"
    again = [Unit(f"u{k}", unit_fns.logged_draw, (derive_seed(2, f"u{k}"),), {"log": str(log), "key": f"u{k}"})
             for k in range(3)]
    first = px2.with_checkpoints(tmp_path / "ck2").map(again)
    second = px2.with_checkpoints(tmp_path / "ck2").map(again)  # every unit from its checkpoint
    assert log.read_text().split().count("u0") == 1
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(first, second))


def test_a_dead_worker_is_retried_then_unit_failed(tmp_path):
    ex = ProcessExecutor(workers=2, max_retries=1)
    marker = tmp_path / "pid"
    units = [*_draws(2), Unit("victim", unit_fns.die_once_now, (derive_seed(9, "victim"), str(marker)))]
    got = ex.map(units)  # the victim's worker dies on the first attempt: a new pool runs it again
    assert np.array_equal(got[2]["x"], unit_fns.draw(derive_seed(9, "victim"))["x"]) and ex.startups == 2
    with pytest.raises(UnitFailed, match="'dies' failed: its worker process died 2 time"):
        ex.map([Unit("dies", unit_fns.die), Unit("fine", unit_fns.draw, (1,))])
    ex.shutdown()


def test_workers_apply_the_drivers_thread_setting(px2, monkeypatch):
    import dpaudit.executors.processes as processes
    import dpaudit.threads as threads

    monkeypatch.delenv("DPAUDIT_THREADS", raising=False)
    monkeypatch.setattr(processes, "current", lambda: ThreadSetting(1, "policy", 2, 1))
    assert px2.worker_setting().threads == 1  # the default policy: one intra-op thread per worker
    monkeypatch.setattr(processes, "current", lambda: ThreadSetting(3, "--threads", 2, 1))
    assert px2.worker_setting() == ThreadSetting(3, "--threads", 2, 2)  # --threads N is kept for every worker
    monkeypatch.setattr(processes, "current", lambda: ThreadSetting(2, "auto", 2, 1))
    assert px2.worker_setting().threads == max(1, threads.usable_cores() // 2)  # auto: cores / workers
    got = px2.map([Unit(f"t{k}", unit_fns.thread_count) for k in range(2)])  # the setting the pool started with
    n = px2._setting.threads
    assert {int(r["torch"]) for r in got} == {n} and {str(r["omp"]) for r in got} == {str(n)}


def test_lira_reference_models_in_processes_equal_local(tmp_path):
    """A real recipe (the ensemble trainer on digits, what a release's train_many gives): 16 LiRA reference
    models in 2 units, bit for bit the same with the local executor and with 1 and 2 worker processes."""
    torch = pytest.importorskip("torch")
    from dpaudit.attacks.lira import lira_attack
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig, fit_classifier
    from dpaudit.training.models import ModelSpec
    from dpaudit.training.release import _recipe_train_many

    torch.set_num_threads(1)
    ds = load_dataset("digits", seed=0)
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [16]})
    cfg = TrainConfig(epochs=3, batch_size=64, lr=1e-2)
    many = functools.partial(_recipe_train_many, spec, cfg)
    perm = np.random.default_rng(0).permutation(len(ds))
    mem, non, pool = perm[:150], perm[150:300], perm[300:900]
    target = fit_classifier(spec, ds.X[mem], ds.y[mem], cfg, 0)
    ev = np.r_[mem, non]
    args = (target, ds.X[ev], ds.y[ev], ds.X[pool], ds.y[pool])
    want = lira_attack(*args, num_shadows=16, batch_train_fn=many, train_size=150, seed=4)
    for workers in (1, 2):
        with ProcessExecutor(workers=workers) as ex:
            got = lira_attack(*args, num_shadows=16, batch_train_fn=many, train_size=150, seed=4,
                              executor=ex.with_checkpoints(tmp_path / f"units{workers}", salt="mlp"))
            assert ex.startups == 1
        assert np.array_equal(want, got)
    assert sorted(p.name for p in (tmp_path / "units2").glob("*.npz")) == ["models-0-8.npz", "models-8-16.npz"]


def test_default_choice_is_processes_only_with_more_than_one_core_per_test_worker(monkeypatch):
    import dpaudit.executors.processes as processes

    monkeypatch.setattr(processes, "usable_cores", lambda: 2)
    assert default_workers({}) == 2 and default_workers({"PYTEST_XDIST_WORKER_COUNT": "2"}) == 1
    assert default_workers({"PYTEST_XDIST_WORKER_COUNT": "junk"}) == 2
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert default_executor() == "processes" and isinstance(make_executor("auto"), ProcessExecutor)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")  # bash run.sh test: 2 workers on 2 cores
    assert default_executor() == "local" and isinstance(make_executor("auto"), LocalExecutor)
    assert make_executor("auto", workers=3).workers == 3  # a worker count asks for processes
    monkeypatch.setattr(processes, "usable_cores", lambda: 1)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert default_executor() == "local"


def test_bad_worker_counts_are_refused_by_name():
    for bad in (0, -1, 1.5, "2", True, 10**6):
        with pytest.raises(ParameterError, match="'workers' parameter of ProcessExecutor"):
            ProcessExecutor(workers=bad)
    with pytest.raises(ParameterError, match="'workers' parameter needs the processes executor"):
        make_executor("local", workers=2)
    with pytest.raises(ParameterError, match="'ray_address' parameter needs the ray executor"):
        make_executor("processes", address="10.0.0.1:6379")


def test_a_script_without_a_main_guard_is_not_run_again_in_the_workers(tmp_path):
    """multiprocessing would import the driver's script again in every worker; the executor starts them without it
    (a script with no ``if __name__ == "__main__":`` would otherwise start its audit again there)."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(f"import sys\nsys.path[:0] = [{str(unit_fns.ROOT)!r}, {str(unit_fns.HERE)!r}]\n"
                      "import os, unit_fns\nfrom dpaudit.executors import ProcessExecutor, Unit\n"
                      "print('top level', os.getpid(), flush=True)\n"
                      "with ProcessExecutor(workers=2) as ex:\n"
                      "    ex.warm_up(['unit_fns'])\n"
                      "    got = ex.map([Unit(f'p{k}', unit_fns.ran_in) for k in range(4)])\n"
                      "print('workers', sorted({int(r['pid']) for r in got} - {os.getpid()}) != [], flush=True)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("top level") == 1 and "workers True" in out.stdout


def test_the_cli_composes_threads_and_executor(cli, monkeypatch, tmp_path):
    """``--threads`` (before or after the command) and ``--executor`` / ``--workers`` reach the executor together:
    its workers keep the count given; ``auto`` is the default; a bad count exits 2 naming --workers."""
    import dpaudit.api
    import dpaudit.threads as threads

    seen: list = []

    def fake_audit(config, out, **kw):  # what dpaudit audit hands the API, and the workers' setting it would give
        from dpaudit.executors import make_executor

        with make_executor(kw["executor"], address=kw["ray_address"], workers=kw["workers"]) as ex:
            seen.append((kw["executor"], kw["workers"], type(ex).__name__,
                         getattr(ex, "worker_setting", lambda: None)()))
        raise ParameterError("stop here")

    monkeypatch.setattr(dpaudit.api, "audit", fake_audit)
    before = threads.current()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # restored after the test
        monkeypatch.setenv(var, os.environ.get(var, str(before.threads)))
    monkeypatch.setattr(threads, "_CURRENT", None)
    monkeypatch.delenv("DPAUDIT_THREADS", raising=False)
    try:
        _compose(cli, seen, tmp_path)
    finally:
        threads.apply_setting(before)  # this process's torch / BLAS count as it was


def _compose(cli, seen: list, tmp_path) -> None:
    code, _, err = cli(["--threads", "2", "audit", "--executor", "processes", "--workers", "3", "--out", tmp_path / "a"])
    assert code == 2 and "stop here" in err
    assert seen[-1][:3] == ("processes", 3, "ProcessExecutor") and seen[-1][3].threads == 2
    code, _, _ = cli(["audit", "--threads", "1", "--out", tmp_path / "b"])
    assert code == 2 and seen[-1][0] == "auto" and seen[-1][1] is None
    code, _, err = cli(["audit", "--executor", "processes", "--workers", "0", "--out", tmp_path / "c"])
    assert code == 2 and err.count("\n") == 1 and "--workers" in err and len(seen) == 2
