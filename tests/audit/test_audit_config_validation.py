"""The whole audit config is checked before anything trains (item 6), and every malformed config is one line,
exit 2, with nothing written to --out (item 7)."""

from __future__ import annotations

import pytest
import torch

from dpaudit.auditing.runner import AttackSpec, AuditConfig, ModelRun, check_audit_config, run_audit
from dpaudit.training.methods.scaffold import check_device
from dpaudit.cli import main
from dpaudit.errors import DataError, ParameterError


@pytest.fixture
def no_training(monkeypatch):
    import dpaudit.training.methods as methods

    def boom(*a, **k):
        raise AssertionError("training started before the config was checked")

    monkeypatch.setattr(methods, "run_method", boom)


def _cfg(*models, attacks=(AttackSpec("threshold"),)):
    return AuditConfig(title="t", dataset="digits", models=models, attacks=attacks)


GOOD = ModelRun(name="ok", method="fredy", params={"gamma": 0.5})


@pytest.mark.parametrize("bad,match", [
    (ModelRun(name="last", method="fredy", params={"gama": 0.5}), "gama"),
    (ModelRun(name="last", method="fredy", params={"gamma": -1.0}), "gamma"),
    (ModelRun(name="last", method="fredy", params={"teacher_train": {"epochs": "x"}}), "last"),
    (ModelRun(name="last", method="fredyy"), "fredyy"),
    (ModelRun(name="last", method="privatekt", params={"method": {"roundz": 3}}), "roundz"),
    (ModelRun(name="last", method="privatekt", params={"data": {"num_clients": 0}}), "num_clients"),
    (ModelRun(name="last", method="proxyfl", params={"model": {"name": "resnet999"}}), "resnet999"),
    (ModelRun(name="last", method="fedavg-ldp", params={"run": {"threads": 2}}), "threads"),
    (ModelRun(name="last", method="centrain", params={"method": {"epoch": 2}}), "epoch"),
    (ModelRun(name="last", method="pate", config_file="/nonexistent/pate.toml"), "does not exist"),
    (ModelRun(name="last", release="/nonexistent/release"), "does not exist"),
])
def test_a_typo_in_the_last_model_is_reported_before_the_first_trains(tmp_path, no_training, bad, match):
    with pytest.raises((ParameterError, DataError), match=match) as exc:
        run_audit(_cfg(GOOD, bad), tmp_path / "out", progress=False)
    assert "last" in str(exc.value)
    assert not (tmp_path / "out" / "models").exists()


def test_a_valid_config_passes_the_check_without_training(no_training):
    check_audit_config(_cfg(GOOD, ModelRun(name="p", method="privatekt", params={"method": {"rounds": 2}}),
                            ModelRun(name="x", method="proxyfl"), ModelRun(name="c", method="centrain")))


def test_device_is_checked_before_training(tmp_path, no_training):
    with pytest.raises(ParameterError, match="--device.*'gpu'"):
        run_audit(_cfg(GOOD), tmp_path / "o", device="gpu", progress=False)
    if not torch.cuda.is_available():
        with pytest.raises(ParameterError, match="not available"):
            check_device("cuda")
    assert check_device("cpu") == "cpu" and check_device(None) is None


@pytest.mark.parametrize("kw,match", [
    ({"title": 5}, "title"), ({"seed": 2**70}, "seed"), ({"n_bootstrap": 10**12}, "n_bootstrap"),
    ({"dataset": "imagenet"}, "dataset"), ({"models": [1]}, "models"), ({"attacks": ()}, "attack"),
])
def test_audit_config_fields_are_typed_and_bounded(kw, match):
    args = dict(title="t", dataset="digits", models=(GOOD,), attacks=(AttackSpec("threshold"),))
    args.update(kw)
    with pytest.raises(ParameterError, match=match):
        AuditConfig(**args)


@pytest.mark.parametrize("kw,match", [
    ({"params": "abc"}, "params"), ({"extra": "nonprivate"}, "extra"), ({"name": "a/b"}, "name"),
    ({"method": 5}, "method"), ({"noise_label": 3}, "noise_label"),
])
def test_model_entries_are_typed(kw, match):
    args = dict(name="m", method="fredy")
    args.update(kw)
    with pytest.raises(ParameterError, match=match):
        ModelRun(**args)


def test_attack_entries_are_typed():
    with pytest.raises(ParameterError, match="shadows"):
        AttackSpec("shadow", shadows=10**9)
    with pytest.raises(ParameterError, match="classifier"):
        AttackSpec("shadow", classifier="xgboost")


CONFIGS = {
    "models = [1]": 'models = [1]\n',
    "params = 'abc'": '[[models]]\nname = "a"\nmethod = "fredy"\nparams = "abc"\n',
    "seed = 2**70": f'seed = {2**70}\n[[models]]\nname = "a"\nmethod = "fredy"\n',
    "seed with 5000 digits": 'seed = ' + '7' * 5000 + '\n',
    "n_bootstrap = 10**12": f'n_bootstrap = {10**12}\n[[models]]\nname = "a"\nmethod = "fredy"\n',
    "title = 5": 'title = 5\n[[models]]\nname = "a"\nmethod = "fredy"\n',
    "deeply nested": "x = " + "[" * 50_000 + "]" * 50_000 + "\n",
    "model without name": '[[models]]\nmethod = "fredy"\n',
    "attacks = 3": 'attacks = 3\n[[models]]\nname = "a"\nmethod = "fredy"\n',
    "typo in last model": '[[models]]\nname = "a"\nmethod = "fredy"\n[[models]]\nname = "b"\nmethod = "fredy"\nparams = { gamm = 1 }\n',
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cli_malformed_audit_configs_are_one_line_exit_2_nothing_written(tmp_path, capsys, no_training, name):
    p = tmp_path / "audit.toml"
    p.write_text(CONFIGS[name])
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["audit", str(p), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("dpaudit: error:") and err.count("\n") == 1, err
    assert not out.exists()


def test_cli_binary_and_special_config_files(tmp_path, capsys, no_training):
    import os

    (tmp_path / "bin.toml").write_bytes(bytes(range(256)) * 4)
    os.mkfifo(tmp_path / "fifo.toml")
    for f, match in (("bin.toml", "not UTF-8"), ("fifo.toml", "not a regular file"), ("/dev/null", "not a regular file")):
        with pytest.raises(SystemExit) as exc:
            main(["audit", str(tmp_path / f), "--out", str(tmp_path / "out"), "--quiet"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and match in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
