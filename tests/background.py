"""Slow subprocesses that mostly wait, started when the test run starts so that their waiting overlaps other tests.

The real Flower simulations are the case: Ray takes seconds to start, and Flower's simulation engine moves each
round's messages by polling every 0.1 s, so a 30-round run takes ~15 s of wall clock for a few seconds of CPU. A
module fixture that runs one blocks its pytest-xdist worker all that time. Instead a test module declares its jobs::

    BACKGROUND = (background.Job("flower-headline", "headline_run", lambda out: [sys.executable, "-m", ...],
                                 timeout=420),)

and its fixture (``headline_run`` here) asks for the result: ``background.result(job, tmp_path_factory)`` returns
the job's output folder once the process has exited with status 0 (the test fails with the end of the job's log
otherwise). :func:`ray_env` is the environment of a job that starts Ray (this checkout importable, Ray's logs whole,
no usage report).

Who runs a job: the first process to claim it (an atomic ``mkdir`` in the run's temporary folder, shared by the
xdist workers of one run). The session fixture in ``conftest.py`` claims and starts, in worker ``gw0`` (or the only
process), at the start of the run every job whose fixture a collected test uses; a fixture that finds its job
unclaimed (a run of one test, ``-p no:xdist``) claims and runs it itself. A job runs in a session of its own, is
killed with everything it started when it outlives its timeout or the run stops early, and the process that started
it waits for it before exiting.
Nothing is written outside pytest's temporary folders.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]

#: Seconds the status file may lag behind the job's own timeout (the starter's bookkeeping) before a waiting
#: fixture gives up.
GRACE_S = 60.0


@dataclass(frozen=True)
class Job:
    """``fixture``: the fixture that reads the result (the job starts early only when a collected test uses it);
    ``argv(out)``: the command, given the job's (existing, empty) output folder; ``timeout``: seconds."""

    name: str
    fixture: str
    argv: Callable[[Path], Sequence[str]]
    timeout: float
    env: Mapping[str, str] = field(default_factory=dict)


def ray_env() -> dict[str, str]:
    """The environment a job that starts Ray adds: this checkout's dpaudit importable in Ray's workers, Ray's logs
    whole (no deduplication), no usage report."""
    return {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "RAY_DEDUP_LOGS": "0",
            "RAY_USAGE_STATS_ENABLED": "0"}


def shared_root(tmp_path_factory) -> Path:
    """The run's temporary folder shared by every xdist worker (pytest's basetemp; a worker's basetemp is a
    ``popen-gwN`` folder inside it)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "background"
    root.mkdir(exist_ok=True)
    return root


def _claim(root: Path, job: Job) -> bool:
    try:
        (root / job.name).mkdir()
    except FileExistsError:
        return False
    return True


_STARTED: dict[str, tuple[threading.Thread, subprocess.Popen]] = {}


def _kill(proc: subprocess.Popen) -> None:
    """The job and every process it started (Ray's workers): its session."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start(job: Job, tmp_path_factory) -> bool:
    """Claim and start ``job`` in a thread of this process (False when another process has claimed it)."""
    root = shared_root(tmp_path_factory)
    if not _claim(root, job):
        return False
    home = root / job.name
    out = home / "out"
    out.mkdir()
    env = {**os.environ, **job.env}
    log = open(home / "log.txt", "w", encoding="utf-8")
    proc = subprocess.Popen(list(job.argv(out)), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, cwd=home, start_new_session=True)

    def wait() -> None:
        timed_out = False
        try:
            proc.wait(timeout=job.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill(proc)
            proc.wait()
            log.close()
            tmp = home / "status.json.tmp"
            tmp.write_text(json.dumps({"returncode": proc.returncode, "timed_out": timed_out}), encoding="utf-8")
            os.replace(tmp, home / "status.json")

    t = threading.Thread(target=wait, name=f"background-{job.name}", daemon=True)
    t.start()
    _STARTED[job.name] = (t, proc)
    return True


def join_started(*, kill: bool = False) -> None:
    """Wait for every job this process started (each is bounded by its own timeout); with ``kill`` (the run was
    stopped: -x, a keyboard interrupt), or on a keyboard interrupt while waiting, kill them instead."""
    try:
        for t, proc in _STARTED.values():
            if kill:
                _kill(proc)
            t.join()
    except KeyboardInterrupt:
        for _, proc in _STARTED.values():
            _kill(proc)
        raise


def result(job: Job, tmp_path_factory) -> Path:
    """The job's output folder once it has finished well; starts it here if nobody has; fails the test otherwise."""
    import pytest

    start(job, tmp_path_factory)
    home = shared_root(tmp_path_factory) / job.name
    status = home / "status.json"
    deadline = time.monotonic() + job.timeout + GRACE_S
    while not status.is_file():
        if time.monotonic() > deadline:
            pytest.fail(f"background job {job.name} did not finish in {job.timeout + GRACE_S:.0f} s")
        time.sleep(0.2)
    st = json.loads(status.read_text(encoding="utf-8"))
    if st["timed_out"] or st["returncode"] != 0:
        tail = (home / "log.txt").read_text(encoding="utf-8", errors="replace")[-3000:]
        why = f"ran past its timeout of {job.timeout:g} s" if st["timed_out"] else f"exited with {st['returncode']}"
        pytest.fail(f"background job {job.name} {why}:\n{tail}")
    return home / "out"
