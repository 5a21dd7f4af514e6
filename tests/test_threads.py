"""The thread policy (dpaudit.threads): usable cores from affinity and cgroup quota, the overrides, applying it."""

from __future__ import annotations

import json
import os

import pytest

import dpaudit.threads as th
from dpaudit.errors import ParameterError
from dpaudit.serial import to_dict


@pytest.fixture
def restore_threads(monkeypatch):
    """Whatever a test applies is undone: torch's count, the BLAS variables and the recorded setting."""
    import torch

    before = torch.get_num_threads()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", th.ENV_VAR):
        monkeypatch.setenv(var, os.environ[var]) if var in os.environ else monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(th, "_CURRENT", th._CURRENT)
    yield
    torch.set_num_threads(before)


def _cores(monkeypatch, affinity: int, quota: float | None) -> None:
    monkeypatch.setattr(th.os, "sched_getaffinity", lambda pid: set(range(affinity)))
    monkeypatch.setattr(th, "cgroup_cpu_limit", lambda root="/sys/fs/cgroup": quota)


@pytest.mark.parametrize("affinity,quota,expect", [(8, None, 8), (8, 2.0, 2), (8, 1.5, 1), (8, 0.25, 1), (2, 6.0, 2),
                                                    (1, None, 1)])
def test_usable_cores_is_affinity_capped_by_the_quota_rounded_down(monkeypatch, affinity, quota, expect):
    _cores(monkeypatch, affinity, quota)
    assert th.usable_cores() == expect


def test_default_is_one_thread_whatever_the_cores_and_auto_divides_them_by_the_workers(monkeypatch):
    _cores(monkeypatch, 8, None)
    env: dict[str, str] = {}
    assert [th.resolve_threads(workers=w, environ=env).threads for w in (1, 2, 3, 8, 16)] == [1, 1, 1, 1, 1]
    s = th.resolve_threads(workers=3, environ=env)
    assert (s.threads, s.source, s.cores, s.workers) == (1, "policy", 8, 3)
    assert [th.resolve_threads("auto", workers=w, environ=env).threads for w in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert [th.resolve_threads(workers=w, environ={th.ENV_VAR: "auto"}).threads for w in (1, 2, 3)] == [8, 4, 2]
    assert th.resolve_threads(environ={th.ENV_VAR: "AUTO"}).source == "auto"


def test_explicit_count_beats_the_environment_which_beats_the_policy(monkeypatch):
    _cores(monkeypatch, 4, None)
    assert th.resolve_threads(3, environ={th.ENV_VAR: "2"}) == th.ThreadSetting(3, "--threads", 4, 1)
    assert th.resolve_threads("auto", environ={th.ENV_VAR: "2"}) == th.ThreadSetting(4, "auto", 4, 1)
    assert th.resolve_threads(environ={th.ENV_VAR: " 2 "}) == th.ThreadSetting(2, th.ENV_VAR, 4, 1)
    assert th.resolve_threads(environ={th.ENV_VAR: "auto"}).source == "auto"
    assert th.resolve_threads(environ={th.ENV_VAR: ""}) == th.ThreadSetting(1, "policy", 4, 1)


@pytest.mark.parametrize("bad", ["x", "-1", "1.5", "5000", "2 threads"])
def test_a_bad_environment_value_names_the_variable_and_the_range(bad):
    with pytest.raises(ParameterError, match=rf"{th.ENV_VAR}.*\[1, 4096\].*{bad!r}".replace("(", r"\(")):
        th.resolve_threads(environ={th.ENV_VAR: bad})


@pytest.mark.parametrize("bad", [0, -2, 4097, 1.5, "2"])
def test_a_bad_explicit_count_is_a_parameter_error(bad):
    with pytest.raises(ParameterError, match="threads"):
        th.resolve_threads(bad, environ={})


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_is_the_smallest_on_the_path_to_the_root(tmp_path, monkeypatch):
    _write(tmp_path / "cgroup.controllers", "cpu memory")
    _write(tmp_path / "cpu.max", "max 100000")
    _write(tmp_path / "a" / "cpu.max", "300000 100000")
    _write(tmp_path / "a" / "b" / "cpu.max", "max 100000")
    monkeypatch.setattr(th, "_own_cgroup_paths", lambda controller: ["/a/b"] if controller is None else [])
    assert th.cgroup_cpu_limit(tmp_path) == pytest.approx(3.0)
    _write(tmp_path / "a" / "b" / "cpu.max", "150000 100000")
    assert th.cgroup_cpu_limit(tmp_path) == pytest.approx(1.5)
    _write(tmp_path / "a" / "b" / "cpu.max", "garbage")
    assert th.cgroup_cpu_limit(tmp_path) == pytest.approx(3.0)


def test_cgroup_v1_quota_and_no_quota(tmp_path, monkeypatch):
    base = tmp_path / "cpu,cpuacct"
    _write(base / "cpu.cfs_quota_us", "-1")
    _write(base / "cpu.cfs_period_us", "100000")
    monkeypatch.setattr(th, "_own_cgroup_paths", lambda controller: ["/job"] if controller == "cpu" else [])
    assert th.cgroup_cpu_limit(tmp_path) is None
    _write(base / "job" / "cpu.cfs_quota_us", "200000")
    _write(base / "job" / "cpu.cfs_period_us", "100000")
    assert th.cgroup_cpu_limit(tmp_path) == pytest.approx(2.0)
    assert th.cgroup_cpu_limit(tmp_path / "absent") is None


def test_own_cgroup_paths_parse_proc_self_cgroup(monkeypatch):
    text = "12:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n0::/user.slice/x\n"
    monkeypatch.setattr(th, "_read", lambda path: text)
    assert th._own_cgroup_paths(None) == ["/user.slice/x"]
    assert th._own_cgroup_paths("cpu") == ["/docker/abc"]
    assert th._own_cgroup_paths("pids") == []


def test_apply_sets_torch_the_environment_and_is_recorded(monkeypatch, restore_threads):
    import torch

    _cores(monkeypatch, 2, None)
    monkeypatch.delenv(th.ENV_VAR, raising=False)
    s = th.apply_threads(1)
    assert torch.get_num_threads() == 1
    assert all(os.environ[v] == "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"))
    assert th.current() == s == th.ThreadSetting(1, "--threads", 2, 1)
    torch.set_num_threads(2)  # changed behind the policy's back (e.g. a method's [run] num_threads): reported as is
    assert th.current() == th.ThreadSetting(2, "torch", 2, 1)
    assert th.apply_threads(workers=2).threads == 1 and torch.get_num_threads() == 1
    assert "1 intra-op thread (policy; 2 usable cores / 2 workers)" == th.current().describe()
    assert th.apply_threads("auto", workers=1).threads == 2 and torch.get_num_threads() == 2


def test_every_command_and_sub_command_accepts_threads():
    import click

    from dpaudit.cli import cli as group

    def walk(cmd, path):
        yield path, cmd
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            yield from walk(sub, path + [name])

    seen = 0
    for path, cmd in walk(group, ["dpaudit"]):
        assert [p for p in cmd.params if isinstance(p, click.Option) and "--threads" in p.opts], " ".join(path)
        seen += 1
    assert seen > 10


def test_blas_loaded_by_numpy_is_limited_too(monkeypatch, restore_threads):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numpy as np  # noqa: F401

    _cores(monkeypatch, 2, None)
    with threadpoolctl.threadpool_limits(limits=None):  # restored on exit
        th.apply_threads(1)
        blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
        assert blas and all(i["num_threads"] == 1 for i in blas)


def test_cli_threads_option_and_environment(cli, monkeypatch, restore_threads):
    import torch

    code, _, err = cli(["--threads", "1", "account", "--help"])
    assert code == 0 and torch.get_num_threads() == 1 and th.current().source == "--threads"
    code, _, err = cli(["--threads", "0", "account", "--help"])
    assert code == 2 and err.count("\n") == 1 and "--threads" in err
    # after the command's name too (bash run.sh audit --threads 1), and it wins over the one before
    code, out, err = cli(["--threads", "1", "account", "--mechanism", "laplace", "--gamma", "0.1", "--queries", "10", "--delta", "1e-5",
                          "--threads", "2"])
    assert code == 0 and torch.get_num_threads() == 2 and th.current().source == "--threads", err
    code, _, err = cli(["account", "--mechanism", "laplace", "--gamma", "0.1", "--queries", "10", "--delta", "1e-5", "--threads", "x"])
    assert code == 2 and err.count("\n") == 1 and "--threads" in err and "auto" in err
    code, _, err = cli(["--threads", "auto", "account", "--help"])
    assert code == 0 and th.current().source == "auto"
    monkeypatch.setenv(th.ENV_VAR, "many")
    code, _, err = cli(["account", "--help"])
    assert code == 2 and err.startswith("dpaudit: error: ") and th.ENV_VAR in err and "Traceback" not in err


def test_a_ray_task_applies_the_setting_it_is_given_before_its_unit(restore_threads):
    import torch

    from dpaudit.executors.ray_executor import _call

    torch.set_num_threads(2)
    seen = _call(torch.get_num_threads, (), {}, th.ThreadSetting(1, "policy", 2, 2))
    assert seen == 1
    assert _call(torch.get_num_threads, (), {}, None) == 1  # None: left as it is


def test_a_release_and_the_run_result_record_the_threads(tmp_path, restore_threads):
    from dpaudit.training.methods import run_method

    res = run_method("pate", dataset="digits", out=tmp_path / "rel", seed=0, progress=False,
                     params={"teachers": 2, "queries": 10, "teacher_train": {"epochs": 1},
                             "student_train": {"epochs": 1}})
    meta = json.loads((tmp_path / "rel" / "release.json").read_text())
    assert meta["run"]["threads"]["threads"] == res.threads == to_dict(res)["threads"] >= 1
