"""Item 8: a SIGKILL at any moment of ``audit`` or ``train`` leaves a directory the next run resumes from with
identical final numbers; two audits into one --out do not corrupt each other (the second stops, naming the first).

The fast variants fork the test process (no interpreter start-up: torch is already imported) and kill the child
when a stage file appears; the slow ones run the real CLI in a subprocess and kill it after N seconds or when a
stage file appears.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dpaudit.auditing.runner import AttackSpec, AuditConfig, ModelRun, run_audit
from dpaudit.errors import DataError
from dpaudit.serial import to_dict

ROOT = Path(__file__).resolve().parents[2]
TINY = {"teachers": 2, "rounds": 2, "queries": 30, "num_samples": 300, "nonprivate_baseline": False,
        "model_kwargs": {"hidden": [8]}, "teacher_train": {"epochs": 1}, "student_train": {"epochs": 2}}


def _config(n_models: int = 2) -> AuditConfig:
    models = tuple(ModelRun(name=f"m{i}", method="fredy", params={**TINY, "gamma": 0.5 + i}) for i in range(n_models))
    return AuditConfig(title="kill", dataset="digits", models=models, attacks=(AttackSpec("threshold", classifier="logreg"),), seed=1,
                       n_bootstrap=20)


def _numbers(out: Path) -> list:
    """What a reader takes from the report: per model its utility, accounted epsilon and every attack figure."""
    rep = json.loads((out / "report.json").read_text())
    keep = ("auc", "epsilon_lower", "tpr_at_fpr", "accuracy", "blind_auc", "auc_ci")
    return [(m["name"], m["utility"], (m.get("theoretical") or {}).get("epsilon"),
             [{k: a.get(k) for k in keep} for a in m["attacks"]]) for m in rep["models"]]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    cache: dict[int, list] = {}

    def get(n_models: int) -> list:
        if n_models not in cache:
            out = tmp_path_factory.mktemp(f"ref{n_models}")
            run_audit(_config(n_models), out, progress=False)
            cache[n_models] = _numbers(out)
        return cache[n_models]

    return get


@pytest.fixture
def reference(references):
    return references(2)


def _fork_and_kill(out: Path, when: str, n_models: int, timeout: float = 120.0) -> None:
    """Run the audit in a forked child and SIGKILL it as soon as ``out/when`` exists (glob)."""
    pid = os.fork()
    if pid == 0:  # child: run until killed
        try:
            # the parent's OpenMP thread pool does not survive fork(): a child entering a parallel region hangs
            # (seen with 2 threads, the default on 2 cores), so the child trains on one thread; the final numbers
            # are still compared with an uninterrupted run
            torch.set_num_threads(1)
            run_audit(_config(n_models), out, progress=False)
        finally:
            os._exit(0)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if any(out.glob(when)):
                break
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                pytest.fail(f"the audit finished before {when} appeared")
            time.sleep(0.005)
        else:
            pytest.fail(f"{when} never appeared")
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


FAST_POINT = "models/m0/stage.json"  # after the first model's release, before its attack
SLOW_POINTS = [".dpaudit.lock", "models/m0/.release.checkpoints/*", "models/m0/release/*", "models/m0/attacks/*",
               "models/m1/stage.json", "models/m1/attacks/*", "report.json"]


def test_sigkill_then_resume_gives_the_uninterrupted_numbers_fast(tmp_path, monkeypatch):
    # one model, and report.json without the figures (matplotlib's layout is most of a tiny audit's time)
    import dpaudit.auditing.runner as runner
    from dpaudit._io import write_json

    monkeypatch.setattr(runner, "write_report", lambda report, out: write_json(Path(out) / "report.json", to_dict(report)))
    run_audit(_config(1), tmp_path / "ref", progress=False)
    out = tmp_path / "run"
    _fork_and_kill(out, FAST_POINT, 1)
    assert not (out / "report.json").exists()
    run_audit(_config(1), out, progress=False)
    assert _numbers(out) == _numbers(tmp_path / "ref")


@pytest.mark.slow
@pytest.mark.parametrize("when", SLOW_POINTS)
def test_sigkill_then_resume_gives_the_uninterrupted_numbers(tmp_path, references, when):
    out = tmp_path / "run"
    _fork_and_kill(out, when, 2)
    run_audit(_config(2), out, progress=False)
    assert _numbers(out) == references(2)


def test_a_second_audit_into_the_same_out_stops_and_names_the_first(tmp_path):
    from dpaudit._io import exclusive_lock

    out = tmp_path / "run"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            with exclusive_lock(out, "dpaudit audit"):
                os.write(w, b"x")
                time.sleep(30)
        finally:
            os._exit(0)
    try:
        os.read(r, 1)
        with pytest.raises(DataError, match=f"{out} is in use by dpaudit audit \\(pid {pid}\\)"):
            run_audit(_config(1), out, progress=False)
        assert not (out / "models").exists()  # nothing of the first run was touched
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# ---- the real CLI in a subprocess (slow: interpreter start-up and imports each time) -----------------------


def _cli(args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "dpaudit", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **kw)


def _toml(path: Path) -> Path:
    """The config of :func:`_config` as an audit TOML file (params as [models.params] sub-tables)."""
    lines = ['title = "kill"', 'dataset = "digits"', "seed = 1", "n_bootstrap = 20"]
    for m in _config().models:
        lines += ["[[models]]", f'name = "{m.name}"', 'method = "fredy"', "[models.params]"]
        subtables = []
        for key, value in m.params.items():
            if isinstance(value, dict):
                subtables += [f"[models.params.{key}]"] + [f"{k} = {json.dumps(v)}" for k, v in value.items()]
            else:
                lines.append(f"{key} = {json.dumps(value)}")
        lines += subtables
    lines += ["[[attacks]]", 'kind = "threshold"', 'classifier = "logreg"']
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("after", [1.5, 3.0, 5.0, "models/m0/attacks/*", "models/m1/stage.json"])
def test_cli_audit_sigkill_after_seconds_or_stage_then_resume(tmp_path, reference, after):
    cfg = _toml(tmp_path / "audit.toml")
    out = tmp_path / "run"
    proc = _cli(["audit", str(cfg), "--out", str(out), "--quiet"])
    t0 = time.monotonic()
    while proc.poll() is None:
        if (isinstance(after, float) and time.monotonic() - t0 >= after) or (isinstance(after, str) and any(out.glob(after))):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    again = _cli(["audit", str(cfg), "--out", str(out), "--quiet"])
    assert again.wait(timeout=300) == 0, again.stderr.read()
    assert _numbers(out) == reference


@pytest.mark.slow
def test_cli_two_audits_into_one_out_the_second_refuses(tmp_path, reference):
    # started together: whichever takes the lock first runs, the other stops at once naming it
    cfg = _toml(tmp_path / "audit.toml")
    out = tmp_path / "run"
    procs = [_cli(["audit", str(cfg), "--out", str(out), "--quiet"]) for _ in range(2)]
    codes = [p.wait(timeout=300) for p in procs]
    errs = [p.stderr.read() for p in procs]
    assert sorted(codes) == [0, 2], (codes, errs)
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    assert f"in use by dpaudit audit (pid {procs[winner].pid})" in errs[loser] and errs[loser].count("\n") == 1
    assert _numbers(out) == reference


@pytest.mark.slow
@pytest.mark.parametrize("when", [".r.checkpoints/run.json", ".r.checkpoints/*.npz", 2.0])
def test_cli_train_sigkill_then_resume_gives_the_same_release(tmp_path, when):
    args = ["train", "fredy", "--dataset", "digits", "--seed", "3", "--teachers", "2", "--rounds", "3",
            "--queries", "40", "--gamma", "0.5"]

    def release_numbers(path: Path):
        meta = json.loads((path / "release.json").read_text())
        return meta["utility"], meta["statement"], (path / "model.safetensors").read_bytes()

    ref = tmp_path / "ref" / "r"
    assert _cli([*args, "--out", str(ref)]).wait(timeout=300) == 0
    out = tmp_path / "k" / "r"
    proc = _cli([*args, "--out", str(out)])
    t0 = time.monotonic()
    while proc.poll() is None:
        hit = (time.monotonic() - t0 >= when) if isinstance(when, float) else any(out.parent.glob(when))
        if hit:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    again = _cli([*args, "--out", str(out)])
    assert again.wait(timeout=300) == 0, again.stderr.read()
    assert release_numbers(out) == release_numbers(ref)
