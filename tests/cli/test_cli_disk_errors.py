"""Disk errors are one line and exit 2 in every writing command: --out under an existing file, under /proc (a real
OSError even as root, where chmod does not stop writes), and `check --junit` never names its temporary file."""

from __future__ import annotations

import os

import pytest

from dpaudit.cli import main

CLAIM = '[[claim]]\nname = "a"\nmechanism = "laplace"\nparams = { scale = 1.0 }\nepsilon = 1.0\ndelta = 0.0\ngranularity = "example"\n'


def _run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    cap = capsys.readouterr()
    return exc.value.code, cap.err


def _one_line(code, err):
    assert code == 2 and err.startswith("dpaudit: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    assert ".tmp" not in err, err


@pytest.fixture
def blocker(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    return f


@pytest.mark.parametrize("where", ["under-file", "proc"])
def test_check_junit_disk_errors(tmp_path, capsys, blocker, where):
    claims = tmp_path / "c.toml"
    claims.write_text(CLAIM)
    target = blocker / "j.xml" if where == "under-file" else "/proc/dpaudit-test/j.xml"
    code, err = _run(["check", claims, "--junit", target], capsys)
    _one_line(code, err)
    assert str(target).rsplit("/", 1)[0] in err


def test_audit_out_under_a_file_fails_before_training(capsys, blocker, monkeypatch):
    import dpaudit.training.methods as methods

    monkeypatch.setattr(methods, "run_method", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    code, err = _run(["audit", "--out", blocker / "run", "--quiet"], capsys)
    _one_line(code, err)
    assert "not a directory" in err.lower()


def test_train_out_under_proc(capsys):
    code, err = _run(["train", "fredy", "--out", "/proc/dpaudit-test/r", "--quiet"], capsys)  # fails before training
    _one_line(code, err)
    assert "/proc/dpaudit-test" in err


@pytest.fixture(scope="module")
def release(forest_release):
    return forest_release(members=100, trees=2)

@pytest.mark.parametrize("where", ["under-file", "proc"])
def test_attack_out_disk_errors(capsys, release, blocker, where):
    out = blocker / "o" if where == "under-file" else "/proc/dpaudit-test"
    code, err = _run(["attack", release, "--attack", "threshold", "--classifier", "logreg", "--bootstrap", "0",
                      "--out", out, "--quiet"], capsys)
    _one_line(code, err)
    assert not os.path.exists(str(out))
