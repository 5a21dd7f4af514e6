"""run.sh installs quietly: one line per step on stderr, pip's own output only when an install fails (a fake
virtual environment whose python plays pip, so nothing is downloaded)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = f"""#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    echo "Collecting numpy (pip noise)"
    echo "DEPRECATION: setuptools noise" >&2
    case "$*" in *" -e "*) if [ -n "$FAKE_PIP_FAIL" ]; then
        echo "ERROR: No matching distribution found for nonsense" >&2; exit 1; fi;; esac
    exit 0
fi
if [ "$1" = "-" ]; then exec {sys.executable} "$@"; fi
exit 0
"""


@pytest.fixture()
def fake_venv(tmp_path: Path) -> Path:
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("dpaudit", '#!/usr/bin/env bash\necho "dpaudit ran $*"\n')):
        p = venv / "bin" / name
        p.write_text(text)
        p.chmod(0o755)
    return venv


def _run(venv: Path, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("FAKE_PIP_FAIL",)}
    e.update(DPAUDIT_VENV=str(venv), PATH=f"{venv / 'bin'}:{os.environ.get('PATH', '')}", **env)
    return subprocess.run(["bash", str(ROOT / "run.sh"), "dpaudit", "--version"], capture_output=True, text=True,
                          env=e, timeout=120, cwd=ROOT)


def test_install_is_quiet_when_it_works(fake_venv):
    p = _run(fake_venv)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "dpaudit ran --version\n"
    lines = p.stderr.splitlines()
    assert lines and all(line.startswith("[run.sh] ") for line in lines), p.stderr  # no pip noise
    assert "installed in" in lines[-1] and (fake_venv / ".dpaudit-installed").is_file()
    assert "pip noise" in (fake_venv / ".dpaudit-pip.log").read_text()  # kept for whoever wants it
    again = _run(fake_venv)  # installed: nothing but the job
    assert again.returncode == 0 and again.stderr == ""


def test_a_failing_install_shows_pips_output_and_stops(fake_venv):
    p = _run(fake_venv, FAKE_PIP_FAIL="1")
    assert p.returncode == 1 and p.stdout == ""
    assert "failed; its output" in p.stderr and "ERROR: No matching distribution found for nonsense" in p.stderr
    assert not (fake_venv / ".dpaudit-installed").exists()


@pytest.mark.parametrize(("args", "expected"), [
    ([], ["-n", "2", "--dist", "worksteal"]),           # two usable cores: two workers, stealing work at the end
    (["tests/accountants"], ["-n", "2", "--dist", "worksteal", "tests/accountants"]),
    (["--dist", "load"], ["-n", "2", "--dist", "load"]),  # the caller chooses the distribution
    (["-n", "4"], ["-n", "4"]),                         # the caller chooses
    (["-p", "no:xdist", "-x"], ["-p", "no:xdist", "-x"]),
])
def test_tests_run_in_parallel_unless_the_caller_chooses(fake_venv, args, expected):
    """``bash run.sh test`` runs pytest with one xdist worker per usable core, work stealing between them;
    ``-n``/``-p no:xdist`` and ``--dist`` override it."""
    py = fake_venv / "bin" / "python"
    py.write_text(FAKE_PYTHON.replace('if [ "$1" = "-" ]', 'if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then shift 2; '
                                      'echo "pytest $*"; exit 0; fi\n'
                                      'if [ "$1" = "-c" ]; then case "$2" in *sched_getaffinity*) echo 2; exit 0;; '
                                      'esac; exit 0; fi\nif [ "$1" = "-"  ]'))
    e = {k: v for k, v in os.environ.items() if k not in ("FAKE_PIP_FAIL",)}
    e.update(DPAUDIT_VENV=str(fake_venv), PATH=f"{fake_venv / 'bin'}:{os.environ.get('PATH', '')}")
    p = subprocess.run(["bash", str(ROOT / "run.sh"), "test", *args], capture_output=True, text=True, env=e,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["pytest", *expected]
