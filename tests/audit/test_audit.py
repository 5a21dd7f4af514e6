"""``dpaudit audit``: a tiny audit end to end (report files, flags, resume without retraining, CLI errors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpaudit.cli import main
from dpaudit.errors import DataError, ParameterError
from dpaudit.audit.runner import AttackSpec, AuditConfig, ModelRun, default_config, load_audit_config, run_audit

TINY_FREDY = {"teachers": 2, "rounds": 2, "queries": 40, "num_samples": 500,
              "model_kwargs": {"hidden": [16]}, "teacher_train": {"epochs": 2}, "student_train": {"epochs": 5},
              "baseline_train": {"epochs": 40}}


def _tiny(gamma=0.5, baseline=True):
    return ModelRun(name=f"fredy-{gamma:g}", method="fredy", params={**TINY_FREDY, "gamma": gamma, "nonprivate_baseline": baseline},
                    extra=("nonprivate",) if baseline else (), noise=gamma, noise_label="gamma")


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    cfg = AuditConfig(title="tiny", dataset="digits", models=(_tiny(),), attacks=(AttackSpec("threshold"),),
                      seed=1, n_bootstrap=20)
    return cfg, out, run_audit(cfg, out, progress=False)


def test_report_files_and_content(audited):
    cfg, out, report = audited
    for f in ("report.json", "report.md", "report.html", "roc.png", "epsilon.png"):
        assert (out / f).is_file(), f
    data = json.loads((out / "report.json").read_text())
    assert data["schema"] == "dpaudit.report/1" and data["seed"] == 1
    names = [m["name"] for m in data["models"]]
    assert names == ["fredy-0.5", "fredy-0.5-nonprivate"]
    private, baseline = report.models
    # the accounted figure is read from the release, with its assumptions; the baseline has none
    assert 0 < private.theoretical_epsilon < float("inf") and baseline.theoretical is None
    assert private.attacks[0].attack == "threshold-loss" and 0.0 <= private.attacks[0].auc <= 1.0
    codes = {(f.model, f.code) for f in report.flags}
    assert ("fredy-0.5", "teachers_not_independent") in codes  # FedAvg rounds = 2
    assert ("fredy-0.5-nonprivate", "no_guarantee") in codes
    # sound: no attack proves more than the accountant allows
    assert ("fredy-0.5", "empirical_exceeds_theory") not in codes


def test_rerun_resumes_without_training_or_attacking(audited, monkeypatch):
    cfg, out, report = audited
    import dpaudit.audit.attack_release as attack_release
    import dpaudit.training.methods as methods

    def boom(*a, **k):
        raise AssertionError("a complete stage was recomputed")

    monkeypatch.setattr(methods, "run_method", boom)
    monkeypatch.setattr(attack_release, "run_attack", boom)
    again = run_audit(cfg, out, progress=False)
    assert [m.to_dict()["attacks"] for m in again.models] == [m.to_dict()["attacks"] for m in report.models]


def test_changed_setting_recomputes_only_what_it_touches(audited, monkeypatch):
    cfg, out, _ = audited
    import dpaudit.training.methods as methods

    monkeypatch.setattr(methods, "run_method", lambda *a, **k: (_ for _ in ()).throw(AssertionError("retrained")))
    cfg2 = AuditConfig(title="tiny", dataset="digits", models=cfg.models, attacks=(AttackSpec("threshold", threshold_kind="confidence"),),
                       seed=1, n_bootstrap=20)
    rep = run_audit(cfg2, out, progress=False)  # new attack on the same releases: no retraining
    assert rep.models[0].attacks[0].attack == "threshold-confidence"


def test_config_file_errors(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text('dataset = "digits"\nbogus = 1\n')
    with pytest.raises(ParameterError, match="Unknown key"):
        load_audit_config(p)
    p.write_text('[[models]]\nname = "x"\n')
    with pytest.raises(ParameterError, match="exactly one of 'method' or 'release'"):
        load_audit_config(p)
    p.write_text('[[models]]\nname = "x"\nmethod = "fredy"\n[[attacks]]\nkind = "sniff"\n')
    with pytest.raises(ParameterError, match="'kind' parameter of AttackSpec must be one of"):
        load_audit_config(p)
    with pytest.raises(DataError, match="does not exist"):
        load_audit_config(tmp_path / "missing.toml")


def test_shipped_audit_configs_load():
    configs = sorted((Path(__file__).resolve().parents[2] / "configs").glob("audit_*.toml"))
    assert configs, "configs/audit_*.toml"
    for p in configs:
        cfg = load_audit_config(p)
        assert cfg.models and cfg.attacks


def test_default_config_is_the_documented_one():
    cfg = default_config()
    assert cfg.dataset == "digits"
    assert [m.method for m in cfg.models] == ["fredy"] * 3 and cfg.models[0].extra == ("nonprivate",)
    assert {a.kind for a in cfg.attacks} == {"threshold", "shadow", "lira"}


def test_cli_bad_config_is_one_line_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text("this is not toml = = =")
    with pytest.raises(SystemExit) as exc:
        main(["audit", str(p), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dpaudit: error:") and "not valid TOML" in err and "Traceback" not in err
