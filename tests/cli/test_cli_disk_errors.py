"""Disk errors are one line and exit 2 in every writing command: --out under an existing file, under /proc (a real
OSError even as root, where chmod does not stop writes), and `check --junit` never names its temporary file."""

from __future__ import annotations

import os

import numpy as np
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
def release(tmp_path_factory):
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import fit_classifier
    from dpaudit.training.models import ModelSpec
    from dpaudit.training.release import write_release

    ds = load_dataset("digits")
    perm = np.random.default_rng(0).permutation(len(ds))
    mem, non, att = perm[:100], perm[100:200], perm[200:400]
    clf = fit_classifier(ModelSpec("random_forest", ds.input_shape, 10, {"n_estimators": 2}), ds.X[mem], ds.y[mem], None, 0)
    return write_release(tmp_path_factory.mktemp("r") / "rel", method="baseline", params={}, seed=0,
                         dataset={"name": "digits", "seed": 0, "num_samples": None}, utility={"test_accuracy": 0.5},
                         classifier=clf, train_config=None, ledger=None, statement=None,
                         claim={"epsilon": 1.0, "delta": 1e-5, "granularity": "example", "text": "t"},
                         membership={"members": mem, "nonmembers": non, "attacker": att})


@pytest.mark.parametrize("where", ["under-file", "proc"])
def test_attack_out_disk_errors(capsys, release, blocker, where):
    out = blocker / "o" if where == "under-file" else "/proc/dpaudit-test"
    code, err = _run(["attack", release, "--attack", "threshold", "--classifier", "logreg", "--bootstrap", "0",
                      "--out", out, "--quiet"], capsys)
    _one_line(code, err)
    assert not os.path.exists(str(out))
