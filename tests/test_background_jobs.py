"""tests/background.py, the test suite's background jobs: a job runs once, in whichever process claims it first; its
result is its output folder; a failure or a timeout fails the test that reads it, with the end of its log."""

from __future__ import annotations

import json
import sys

import pytest

import background


def _job(name: str, code: str, timeout: float = 60.0) -> background.Job:
    return background.Job(name, "unused", lambda out: [sys.executable, "-c", code, str(out)], timeout=timeout)


def test_a_job_runs_once_and_its_result_is_its_output_folder(tmp_path_factory):
    code = "import sys, pathlib; p = pathlib.Path(sys.argv[1]) / 'n.txt'; p.write_text(str(int(p.exists()) + 1))"
    job = _job("bg-once", code)
    assert background.start(job, tmp_path_factory)
    assert not background.start(job, tmp_path_factory)          # claimed: a second start does nothing
    out = background.result(job, tmp_path_factory)
    assert (out / "n.txt").read_text() == "1"
    assert background.result(job, tmp_path_factory) == out      # read again, not rerun
    assert (out / "n.txt").read_text() == "1"


def test_a_job_claimed_elsewhere_is_read_not_run(tmp_path_factory):
    job = _job("bg-elsewhere", "raise SystemExit('must not run here')")
    home = background.shared_root(tmp_path_factory) / job.name
    (home / "out").mkdir(parents=True)                            # another worker's claim and finished run
    (home / "out" / "r.txt").write_text("theirs")
    (home / "status.json").write_text(json.dumps({"returncode": 0, "timed_out": False}))
    assert (background.result(job, tmp_path_factory) / "r.txt").read_text() == "theirs"


def test_a_failing_job_fails_the_test_with_its_log(tmp_path_factory):
    job = _job("bg-fails", "print('the end of the log'); raise SystemExit(3)")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)exited with 3.*the end of the log"):
        background.result(job, tmp_path_factory)


def test_a_job_past_its_timeout_is_killed(tmp_path_factory):
    job = _job("bg-slow", "import time; print('started', flush=True); time.sleep(60)", timeout=1.0)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)ran past its timeout of 1 s.*started"):
        background.result(job, tmp_path_factory)
