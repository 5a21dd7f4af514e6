"""``dpaudit audit``: a tiny audit end to end (report files, flags, resume without retraining, CLI errors)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np

import pytest

from dpaudit.cli import main
from dpaudit.errors import DataError, ParameterError
from dpaudit.auditing.runner import AttackSpec, AuditConfig, ModelRun, default_config, load_audit_config, run_audit
from dpaudit.serial import to_dict

TINY_FREDY = {"teachers": 2, "rounds": 2, "queries": 40, "num_samples": 500,
              "model_kwargs": {"hidden": [16]}, "teacher_train": {"epochs": 2}, "student_train": {"epochs": 5},
              "baseline_train": {"epochs": 40}}


def _tiny(gamma=0.5, baseline=True):
    return ModelRun(name=f"fredy-{gamma:g}", method="fredy", params={**TINY_FREDY, "gamma": gamma, "nonprivate_baseline": baseline},
                    extra=("nonprivate",) if baseline else (), noise=gamma, noise_label="gamma")


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    cfg = AuditConfig(title="tiny", dataset="digits", models=(_tiny(),),
                      attacks=(AttackSpec("threshold", classifier="logreg"),), seed=1, n_bootstrap=20)
    return cfg, out, run_audit(cfg, out, progress=False)


def test_report_files_and_content(audited):
    cfg, out, report = audited
    for f in ("report.json", "report.md", "report.html", "roc.png", "epsilon.png"):
        assert (out / f).is_file(), f
    data = json.loads((out / "report.json").read_text())
    assert data["schema"] == "dpaudit.report/3" and data["seed"] == 1
    # how it ran: the thread count in force (tests run with DPAUDIT_THREADS=1, tests/conftest.py) and the executor
    assert data["settings"]["threads"]["threads"] == 1 and data["settings"]["executor"] == "local"
    assert "Ran with 1 intra-op thread" in (out / "report.md").read_text()
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


def test_every_bound_says_it_is_an_estimate_with_its_split_range(audited):
    cfg, out, report = audited
    data = json.loads((out / "report.json").read_text())
    for m in data["models"]:
        for a in m["attacks"]:
            assert a["epsilon_kind"] == "estimate" and a["num_splits"] == 5
            lo, hi = a["epsilon_range"]
            assert lo <= a["epsilon_lower"] <= hi
            assert a["roc_band"] and min(a["roc_band"]["fpr"]) == pytest.approx(1 / a["num_members"], rel=0.05)
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (md, html):
        assert "estimate, not certified: records are coupled through one model" in text
        assert "demonstrates (a lower bound" not in text and "attack demonstrates (lower bound" not in text
    # one verdict per model, stored and rendered
    assert [v["model"] for v in data["verdicts"]] == ["fredy-0.5", "fredy-0.5-nonprivate"]
    assert data["verdicts"][1]["clauses"][-1][0] == "no_guarantee"


def test_rerun_resumes_without_training_or_attacking(audited, monkeypatch):
    cfg, out, report = audited
    import dpaudit.auditing.attack_release as attack_release
    import dpaudit.training.methods as methods

    def boom(*a, **k):
        raise AssertionError("a complete stage was recomputed")

    monkeypatch.setattr(methods, "run_method", boom)
    monkeypatch.setattr(attack_release, "run_attack", boom)
    again = run_audit(cfg, out, progress=False)
    assert [to_dict(m)["attacks"] for m in again.models] == [to_dict(m)["attacks"] for m in report.models]


class _Counts:
    """Counts the stages an audit really runs: trainings by model directory, attacks by (release dir, label)."""

    def __init__(self, monkeypatch):
        import dpaudit.auditing.attack_release as ar
        import dpaudit.training.methods as methods

        self.trained: list[str] = []
        self.attacked: list[tuple[str, str]] = []
        real_train, real_attack = methods.run_method, ar.attack_release

        def train(method, **kw):
            self.trained.append(Path(kw["out"]).parent.name)
            return real_train(method, **kw)

        def attack(release, **kw):
            self.attacked.append((Path(release.path).name if Path(release.path).name != "release"
                                  else Path(release.path).parent.name, kw["attack"] + "-" + kw["threshold_kind"]))
            return real_attack(release, **kw)

        monkeypatch.setattr(methods, "run_method", train)
        monkeypatch.setattr(ar, "attack_release", attack)

    def reset(self):
        self.trained.clear()
        self.attacked.clear()


def _copy_run(src: Path, dst: Path) -> Path:
    """A copy of a finished run directory whose stage files point into the copy."""
    shutil.copytree(src, dst)
    for stage in dst.glob("models/*/stage.json"):
        stage.write_text(stage.read_text().replace(str(src), str(dst)))
    return dst


def test_cache_keys_follow_every_input(audited, tmp_path, monkeypatch):
    """Change each input in turn: exactly the stages that depend on it re-run (the issue's stale case first:
    a changed model parameter re-run into the same --out must not reuse the old model's attacks)."""
    cfg, src, first = audited
    out = _copy_run(src, tmp_path / "run")
    n = _Counts(monkeypatch)
    two = dataclasses.replace(cfg, attacks=(cfg.attacks[0], dataclasses.replace(cfg.attacks[0], threshold_kind="confidence")))
    run_audit(two, out, progress=False)                        # the new attack only
    assert n.trained == [] and sorted(n.attacked) == [("fredy-0.5", "threshold-confidence"),
                                                      ("nonprivate", "threshold-confidence")]
    n.reset()
    run_audit(two, out, progress=False)                        # nothing changed: nothing runs
    assert n.trained == [] and n.attacked == []
    # a model parameter (gamma 0.5 -> 2.0, the case): retrain, and re-attack what changed
    changed = dataclasses.replace(two, models=(dataclasses.replace(cfg.models[0], params={**cfg.models[0].params, "gamma": 2.0}),))
    rep = run_audit(changed, out, progress=False)
    assert n.trained == ["fredy-0.5"]
    assert {("fredy-0.5", "threshold-loss"), ("fredy-0.5", "threshold-confidence")} <= set(n.attacked)
    assert rep.models[0].theoretical_epsilon != first.models[0].theoretical_epsilon
    key_file = json.loads((out / "models" / "fredy-0.5" / "attacks" / "threshold-loss.json").read_text())
    assert key_file["summary"] == to_dict(rep.models[0].attacks[0])
    n.reset()
    # an audit-wide attack setting: every attack re-runs, no training
    run_audit(dataclasses.replace(changed, confidence=0.9), out, progress=False)
    assert n.trained == [] and len(n.attacked) == 4


@pytest.mark.slow  # ~3 s on 2 shared cores: retrains the tiny model
def test_cache_keys_follow_the_audit_seed(audited, tmp_path, monkeypatch):
    cfg, src, _ = audited
    out = _copy_run(src, tmp_path / "run")
    n = _Counts(monkeypatch)
    run_audit(dataclasses.replace(cfg, seed=2), out, progress=False)
    assert n.trained == ["fredy-0.5"] and len(n.attacked) == 2


def test_cache_keys_follow_the_release_content(audited, tmp_path, monkeypatch):
    """A `release = ...` model: editing any file of the bundle (weights, release.json, membership) re-runs its
    attacks; an untouched bundle stays cached."""
    cfg, src, _ = audited
    bundle = shutil.copytree(src / "models" / "fredy-0.5" / "release", tmp_path / "bundle")
    audit = AuditConfig(title="r", dataset="digits", models=(ModelRun(name="given", release=str(bundle)),),
                        attacks=cfg.attacks, seed=1, n_bootstrap=20)
    out = tmp_path / "run"
    run_audit(audit, out, progress=False)
    n = _Counts(monkeypatch)
    run_audit(audit, out, progress=False)
    assert n.attacked == []
    meta = json.loads((bundle / "release.json").read_text())
    edits = {
        "release.json": lambda: (bundle / "release.json").write_text(json.dumps({**meta, "assumptions": [*meta["assumptions"], "edited"]})),
        meta["model"]["file"]: lambda: _flip_last_byte(bundle / meta["model"]["file"]),
        "membership.npz": lambda: _shuffle_membership(bundle / "membership.npz"),
    }
    for name, edit in edits.items():
        n.reset()
        edit()
        run_audit(audit, out, progress=False)
        assert n.attacked == [("bundle", "threshold-loss")], name


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1                      # the last weight's lowest mantissa bit: same format, other content
    path.write_bytes(bytes(data))


def _shuffle_membership(path: Path) -> None:
    with np.load(path) as z:
        m = {k: z[k] for k in z.files}
    m["members"], m["nonmembers"] = m["nonmembers"], m["members"]
    np.savez(path, **m)


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
    assert [m.method for m in cfg.method_audits] == ["fredy"]  # FREDY's whole run, certified
    fredy = load_audit_config(Path(__file__).resolve().parents[2] / "configs" / "audit_fredy.toml")
    assert fredy.method_audits == cfg.method_audits and fredy.canary_audits == cfg.canary_audits


def test_cli_bad_config_is_one_line_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text("this is not toml = = =")
    with pytest.raises(SystemExit) as exc:
        main(["audit", str(p), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dpaudit: error:") and "not valid TOML" in err and "Traceback" not in err


def test_cli_audit_results_on_stdout_progress_on_stderr(audited, tmp_path, capsys):
    cfg, src, _ = audited
    rel = src / "models" / "fredy-0.5" / "release"
    p = tmp_path / "a.toml"
    p.write_text(f'title = "cli"\nn_bootstrap = 0\n[[models]]\nname = "given"\nrelease = "{rel}"\n'
                 '[[attacks]]\nkind = "threshold"\nclassifier = "logreg"\n')
    with pytest.raises(SystemExit) as exc:
        main(["audit", str(p), "--out", str(tmp_path / "o")])
    cap = capsys.readouterr()
    assert exc.value.code == 0 and "given" in cap.out and "verdicts" in cap.out
    assert "no leakage demonstrated" in cap.out or "leakage indicated by an estimate" in cap.out
    assert "[dpaudit audit]" not in cap.out and "[dpaudit audit]" in cap.err and "attack(s)" in cap.err
    with pytest.raises(SystemExit):
        main(["audit", str(p), "--out", str(tmp_path / "o"), "--quiet"])
    cap = capsys.readouterr()
    assert cap.err == "" and "verdicts" in cap.out
