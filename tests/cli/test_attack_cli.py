"""``dpaudit attack`` on a real (small) release bundle: table, attack.json round trip, roc.png, seeds, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit.attacks import AttackReport
from dpaudit.serial import from_dict


@pytest.fixture(scope="module")
def release(forest_release):
    return forest_release(members=300, trees=20,
                          claim={"epsilon": float("inf"), "delta": 1e-5, "granularity": "record", "text": "no DP"})

def test_attack_cli_threshold_writes_report(release, tmp_path, cli):
    out = tmp_path / "a"
    code, stdout, err = cli([ "attack", str(release), "--attack", "threshold", "--classifier", "logreg",
                              "--bootstrap", "50", "--out", str(out)])
    assert code == 0, err
    assert "AUC" in stdout and "blind" in stdout and "(estimate)" in stdout and "delta 1e-5" in stdout
    assert "estimate, not certified: records are coupled through one model" in stdout
    assert "over 5 split seeds, range [" in stdout
    # stdout carries results only: progress and the paths written go to stderr
    assert "[dpaudit attack]" not in stdout and "wrote" in err and "threshold attack on" in err
    report = from_dict(AttackReport, json.loads((out / "attack.json").read_text()))
    assert report.attack.metrics.auc > 0.7 and report.attack.bound.delta == 1e-5
    b = report.attack.bound
    assert b.kind == "estimate" and b.num_splits == 5 and b.split_low <= b.epsilon <= b.split_high
    # the Bayesian credible interval beside the split-seed spread, and the TPR-at-FPR bootstrap intervals, in JSON
    assert b.bayes_low <= b.bayes_median <= b.bayes_high and "credible interval [" in stdout
    assert {"tpr@0.001", "tpr@0.01", "tpr@0.1"} <= set(report.attack.metrics.intervals)
    assert report.blind is not None and (out / "roc.png").stat().st_size > 1000
    # same seed, same numbers
    code, _, _ = cli(["attack", str(release), "--attack", "threshold", "--classifier", "logreg",
                       "--bootstrap", "50", "--out", str(tmp_path / "b")])
    again = json.loads((tmp_path / "b" / "attack.json").read_text())
    assert again["attack"] == json.loads((out / "attack.json").read_text())["attack"]


def test_attack_cli_quiet_prints_nothing_on_stderr(release, tmp_path, cli):
    code, stdout, err = cli(["attack", str(release), "--attack", "threshold", "--classifier", "logreg",
                              "--bootstrap", "0", "--out", str(tmp_path / "q"), "--quiet"])
    assert code == 0 and err == "" and "AUC" in stdout


def test_attack_cli_shadow(release, tmp_path, cli):
    code, stdout, err = cli(["attack", str(release), "--attack", "shadow", "--shadows", "2", "--classifier",
                              "logreg", "--bootstrap", "20", "--out", str(tmp_path / "s")])
    assert code == 0, err
    rep = json.loads((tmp_path / "s" / "attack.json").read_text())
    assert rep["attack"]["metrics"]["auc"] > 0.65 and rep["settings"]["num_shadows"] == 2


def test_attack_cli_errors(release, tmp_path, cli):
    code, _, err = cli(["attack", str(tmp_path / "missing"), "--attack", "threshold"])
    assert code == 2 and err.count("\n") == 1 and "not found" in err
    code, _, err = cli(["attack", str(release), "--attack", "threshold", "--confidence", "1.5",
                         "--out", str(tmp_path / "x")])
    assert code == 2 and "'confidence' parameter of run_attack" in err and "Traceback" not in err


@pytest.mark.slow   # ~50 s on 2 shared cores: trains the target and 4 ensemble shadows
def test_attack_cli_lira_on_a_torch_release_uses_the_ensemble_recipe(tmp_path, cli):
    # a torch MLP release: shadow models come from Release.train_many (the ensemble trainer)
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.ensemble import fit_classifier
    from dpaudit.training.models import ModelSpec
    from dpaudit.training.release import write_release

    ds = load_dataset("digits", seed=0)
    perm = np.random.default_rng(1).permutation(len(ds))
    mem, non, att = perm[:150], perm[150:300], perm[300:600]
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [64]})
    config = TrainConfig(epochs=30, batch_size=32, lr=3e-3)
    clf = fit_classifier(spec, ds.X[mem], ds.y[mem], config, 0)
    rel = tmp_path / "mlp"
    write_release(rel, method="baseline", dataset={"name": "digits", "seed": 0, "num_samples": None}, params={},
                  seed=0, utility={"test_accuracy": 0.5}, classifier=clf, train_config=config, ledger=None, statement=None,
                  claim={"epsilon": float("inf"), "delta": 0.0, "granularity": "record", "text": "no DP"},
                  membership={"members": mem, "nonmembers": non, "attacker": att})
    code, stdout, err = cli(["attack", str(rel), "--attack", "lira", "--shadows", "4", "--classifier", "logreg",
                              "--bootstrap", "20", "--out", str(tmp_path / "l")])
    assert code == 0, err
    rep = from_dict(AttackReport, json.loads((tmp_path / "l" / "attack.json").read_text()))
    assert rep.settings["recipe"] == "batch_train_fn" and rep.settings["online"] is True
    assert rep.attack.metrics.auc > 0.55          # an overfit MLP on 150 records leaks


def test_attack_cli_rerun_trains_no_finished_shadow_group(release, tmp_path, cli, monkeypatch):
    args = ["attack", str(release), "--attack", "shadow", "--shadows", "2", "--classifier", "logreg",
            "--bootstrap", "20", "--out", str(tmp_path / "s"), "--executor", "local"]
    code, _, err = cli(args)
    assert code == 0, err
    assert [p.name for p in (tmp_path / "s" / "units").glob("*.npz")] == ["models-0-2.npz"]
    first = json.loads((tmp_path / "s" / "attack.json").read_text())
    import dpaudit.attacks.shadow as shadow

    def boom(*a, **k):
        raise AssertionError("a checkpointed group of shadow models was trained again")

    monkeypatch.setattr(shadow, "train_shadow_models", boom)
    code, _, err = cli(args)                    # the finished attack's results are not replaced silently
    assert code == 2 and "already holds the results of an earlier attack" in err and "--overwrite" in err
    code, _, err = cli(args + ["--overwrite"])
    assert code == 0, err
    assert json.loads((tmp_path / "s" / "attack.json").read_text())["attack"] == first["attack"]


def test_attack_cli_executor_flags(release, tmp_path, cli):
    code, _, err = cli(["attack", str(release), "--attack", "threshold", "--ray-address", "10.0.0.1:6379",
                         "--out", str(tmp_path / "x")])
    assert code == 2 and err.count("\n") == 1 and "'ray_address'" in err and "--executor ray" in err
    code, _, err = cli(["attack", str(release), "--executor", "dask"])
    assert code == 2 and "'dask' is not one of 'auto', 'local', 'processes', 'ray'" in err
    for bad in ("0", "two", "5000"):  # a bad worker count: one line naming the option, exit 2, nothing written
        code, _, err = cli(["attack", str(release), "--attack", "threshold", "--workers", bad,
                            "--out", str(tmp_path / "w")])
        assert code == 2 and err.count("\n") == 1 and "--workers" in err and repr(bad) in err, err
    code, _, err = cli(["attack", str(release), "--attack", "threshold", "--executor", "local", "--workers", "2",
                        "--out", str(tmp_path / "w")])
    assert code == 2 and err.count("\n") == 1 and "'workers'" in err and "--executor processes" in err, err
    assert not (tmp_path / "w").exists()


def test_attack_table_is_whole_at_60_columns(release, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    code, stdout, err = cli(["attack", str(release), "--attack", "threshold", "--classifier", "logreg",
                             "--bootstrap", "20", "--out", str(tmp_path / "c")])
    assert code == 0, err
    report = from_dict(AttackReport, json.loads((tmp_path / "c" / "attack.json").read_text()))
    words = {w.rstrip(":") for w in stdout.split()}
    assert "…" not in stdout
    for r in (report.attack, report.blind):  # every attack's name and its AUC, whole
        assert r.name in words and f"{r.metrics.auc:.3f}" in words, r.name
