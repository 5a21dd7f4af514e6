"""The Ray executor on a local 2-CPU instance (slow; skipped when Ray is not installed): the same numbers as
the local executor, a worker killed mid-run is retried, and a SIGKILLed driver resumes from checkpoints."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import unit_fns  # noqa: E402
from unit_fns import run_and_kill_driver  # noqa: E402
from dpaudit.errors import ParameterError  # noqa: E402
from dpaudit.executors import LocalExecutor, Unit, UnitFailed, derive_seed  # noqa: E402
from dpaudit.executors.ray_executor import RayExecutor  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray2():
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(unit_fns.HERE)] + ([old] if old else []))  # workers import unit_fns
    try:
        ex = RayExecutor(num_cpus=2)
        ex.start()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    yield ex
    ex.shutdown()


def test_units_run_in_two_workers_and_give_the_local_numbers(ray2):
    units = [Unit(f"u{k}", unit_fns.draw, (derive_seed(3, f"u{k}"),)) for k in range(8)]
    local, remote = LocalExecutor().map(units), ray2.map(units)
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(local, remote))
    pids = {int(r["pid"]) for r in ray2.map([Unit(f"p{k}", unit_fns.ran_in) for k in range(6)])}
    assert os.getpid() not in pids


def test_lira_reference_models_on_ray_equal_local(ray2, tmp_path):
    """A real recipe (the torch ensemble trainer on digits): 16 LiRA reference models in 2 units."""
    torch = pytest.importorskip("torch")
    from dpaudit.attacks.lira import lira_attack
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig, fit_classifier, train_ensemble
    from dpaudit.training.models import ModelSpec

    torch.set_num_threads(1)
    ds = load_dataset("digits", seed=0)
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [16]})
    cfg = TrainConfig(epochs=3, batch_size=64, lr=1e-2)

    def many(datasets, seed):
        return train_ensemble(spec, list(datasets), cfg, seed=seed, progress=False).members()

    perm = np.random.default_rng(0).permutation(len(ds))
    mem, non, pool = perm[:150], perm[150:300], perm[300:900]
    target = fit_classifier(spec, ds.X[mem], ds.y[mem], cfg, 0)
    ev = np.r_[mem, non]
    args = (target, ds.X[ev], ds.y[ev], ds.X[pool], ds.y[pool])
    a = lira_attack(*args, num_shadows=16, batch_train_fn=many, train_size=150, seed=4)
    b = lira_attack(*args, num_shadows=16, batch_train_fn=many, train_size=150, seed=4,
                    executor=ray2.with_checkpoints(tmp_path / "units", salt="mlp"))
    assert np.array_equal(a, b)
    assert sorted(p.name for p in (tmp_path / "units").glob("*.npz")) == ["models-0-8.npz", "models-8-16.npz"]


def test_a_worker_killed_mid_run_is_retried_with_identical_results(ray2, tmp_path):
    marker = tmp_path / "pid"
    units = [Unit(f"u{k}", unit_fns.draw, (derive_seed(9, f"u{k}"),)) for k in range(4)]
    units.insert(2, Unit("victim", unit_fns.die_once, (derive_seed(9, "victim"), str(marker))))
    killed: list[int] = []

    def killer() -> None:  # kill the worker process running the victim, by its pid, while it runs
        t0 = time.monotonic()
        while not marker.exists() and time.monotonic() - t0 < 60:
            time.sleep(0.05)
        time.sleep(0.2)
        pid = int(marker.read_text())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    th = threading.Thread(target=killer)
    th.start()
    got = ray2.map(units)
    th.join()
    assert killed and killed[0] != os.getpid()
    want = [unit_fns.draw(u.args[0]) for u in units]
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(got, want))


def test_a_unit_that_raises_is_not_retried_and_names_itself(ray2):
    with pytest.raises(RuntimeError, match="boom") as info:
        ray2.map([Unit("ok", unit_fns.draw, (1,)), Unit("bad", unit_fns.fail, ("boom",))])
    assert not isinstance(info.value, UnitFailed)
    with pytest.raises(ParameterError, match="'run_seed'"):  # dpaudit's own errors arrive as themselves
        ray2.map([Unit("neg", derive_seed, (-1, "x"))])


def test_a_worker_that_always_dies_fails_after_the_retries(ray2):
    no_retry = RayExecutor(num_cpus=2, max_retries=0)  # joins the running instance, does not own it
    with pytest.raises(UnitFailed, match="'dies' failed after 0 retries"):
        no_retry.map([Unit("dies", unit_fns.die)])
    no_retry.shutdown()
    assert ray.is_initialized()  # the instance belongs to ray2


def test_ray_driver_killed_with_sigkill_resumes_without_rerunning_finished_units(tmp_path):
    done_before, rerun = run_and_kill_driver(tmp_path, "ray", opts="{'num_cpus': 2}", sleep=1.0, timeout=180)
    assert not set(done_before) & set(rerun)
    assert set(done_before) | set(rerun) == {f"u{k}" for k in range(6)}
