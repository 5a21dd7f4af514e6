"""``dpaudit attack`` with RMIA, the attack comparison and the per-record report, on a forest release and on a
scores-only release that ships reference models' and population records' outputs."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from dpaudit.attacks import AttackReport
from dpaudit.attacks.compare import COMPARED_ATTACKS, AttackComparison
from dpaudit.serial import from_dict


@pytest.fixture(scope="module")
def release(forest_release):
    return forest_release(members=200, trees=20)


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_rmia_online_with_per_record_report(release, tmp_path, cli):
    out = tmp_path / "r"
    code, stdout, err = cli(["attack", release, "--attack", "rmia", "--shadows", "4", "--population", "100",
                             "--bootstrap", "20", "--classifier", "logreg", "--per-record", "--out", out])
    assert code == 0, err
    assert "RMIA (Zarifzadeh et al. 2024), online, 4 reference models, 100 population records" in stdout
    assert "(estimate)" in stdout
    rep = from_dict(AttackReport, {k: v for k, v in json.loads((out / "attack.json").read_text()).items() if k != "release"})
    assert rep.attack.metrics.auc > 0.7 and rep.settings["population"] == 100
    rows = _csv(out / "per_record.csv")
    assert len(rows) == 400 and {"rmia_score", "rmia_p_value", "rmia_log_ratio", "rank"} <= set(rows[0])
    # record indices are the release's: members are the first 200 of the fixture's permutation
    perm = np.random.default_rng(0).permutation(1797)
    members = {int(r["record"]) for r in rows if r["member"] == "1"}
    assert members == set(perm[:200].tolist())
    assert {int(r["record"]) for r in rows if r["member"] == "0"} == set(perm[200:400].tolist())
    assert sorted(rep.per_record.record.tolist()) == sorted(int(r["record"]) for r in rows)   # csv: sorted by rank
    for f in ("per_record.md", "per_record.json", "per_record_hist.png", "per_record_grid.png"):
        assert (out / f).stat().st_size > 100, f                 # digits are images: the grid is drawn
    md = (out / "per_record.md").read_text()
    assert "Top 20 most exposed records" in md and "At FPR 0.001" in md
    # same seed, same numbers
    code, _, _ = cli(["attack", release, "--attack", "rmia", "--shadows", "4", "--population", "100",
                      "--bootstrap", "0", "--classifier", "logreg", "--per-record", "--out", tmp_path / "r2"])
    assert (tmp_path / "r2" / "per_record.csv").read_text() == (out / "per_record.csv").read_text()


def test_rmia_offline_with_a_given_and_threshold_per_record(release, tmp_path, cli):
    code, stdout, err = cli(["attack", release, "--attack", "rmia", "--offline", "--rmia-a", "0.3", "--shadows", "2",
                             "--bootstrap", "0", "--classifier", "logreg", "--out", tmp_path / "o"])
    assert code == 0, err
    assert "offline, 2 reference models" in stdout and "a = 0.3 (given)" in stdout
    code, _, err = cli(["attack", release, "--attack", "threshold", "--bootstrap", "0", "--classifier", "logreg",
                        "--per-record", "--out", tmp_path / "t"])
    assert code == 0, err
    assert {"threshold_score", "threshold_rank"} <= set(_csv(tmp_path / "t" / "per_record.csv")[0])


def test_compare_writes_one_table_on_the_same_references(release, tmp_path, cli):
    out = tmp_path / "c"
    code, stdout, err = cli(["attack", release, "--compare", "--shadows", "4", "--population", "100",
                             "--bootstrap", "20", "--per-record", "--out", out, "--quiet"])
    assert code == 0, err
    for name in COMPARED_ATTACKS:
        assert name in stdout
    assert "estimate, not certified" in stdout and err == ""
    comp = from_dict(AttackComparison, {k: v for k, v in json.loads((out / "comparison.json").read_text()).items() if k != "release"})
    assert set(comp.results) == set(COMPARED_ATTACKS) and comp.settings["num_references"] == 4
    md = (out / "comparison.md").read_text()
    assert "| rmia-online |" in md and "roc_compare.png" in md and (out / "roc_compare.png").stat().st_size > 1000
    assert {f"{a}_score" for a in COMPARED_ATTACKS} <= set(_csv(out / "per_record.csv")[0])


def test_rmia_on_a_scores_only_release(tmp_path, cli):
    from dpaudit.attacks.scores import synthetic_scores

    arrays = synthetic_scores(300, num_references=8, num_population=200, leak=1.5, seed=1)
    inc = np.concatenate([arrays["reference_in_train"], arrays["reference_in_test"]])
    inc[:, 0] = False           # each record OUT of at least one reference model (offline RMIA averages OUT ones)
    arrays["reference_in_train"], arrays["reference_in_test"] = inc[:300], inc[300:]
    np.savez(tmp_path / "scores.npz", **arrays)
    code, stdout, err = cli(["release", "make", "--out", tmp_path / "rel", "--scores", tmp_path / "scores.npz",
                             "--claim", "epsilon=1", "--claim", "delta=1e-5", "--claim", "granularity=record"])
    assert code == 0, err
    meta = json.loads((tmp_path / "rel" / "release.json").read_text())
    assert meta["params"]["possible_attacks"] == ["threshold", "lira", "rmia"]
    code, stdout, err = cli(["attack", tmp_path / "rel", "--attack", "rmia", "--population", "150", "--bootstrap", "0",
                             "--per-record", "--out", tmp_path / "a"])
    assert code == 0, err
    assert "on released scores, online, 8 reference models, 150 population records" in stdout
    rep = json.loads((tmp_path / "a" / "attack.json").read_text())
    assert rep["attack"]["metrics"]["auc"] > 0.7
    assert not (tmp_path / "a" / "per_record_grid.png").exists()          # no features: no image grid
    code, stdout, err = cli(["attack", tmp_path / "rel", "--compare", "--bootstrap", "0", "--out", tmp_path / "c"])
    assert code == 0, err
    comp = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert set(comp["results"]) == set(COMPARED_ATTACKS)


def test_rmia_cli_errors(release, tmp_path, cli):
    code, _, err = cli(["attack", release, "--attack", "rmia", "--population", "0", "--out", tmp_path / "e"])
    assert code == 2 and "--population" in err
    code, _, err = cli(["attack", release, "--attack", "rmia", "--population", "100000", "--shadows", "2",
                        "--bootstrap", "0", "--out", tmp_path / "e"])
    assert code == 2 and "'population' parameter of train_reference_signals" in err and "Traceback" not in err
    code, _, err = cli(["attack", release, "--attack", "rmia", "--rmia-a", "1.5", "--out", tmp_path / "e"])
    assert code == 2 and "--rmia-a" in err


def test_release_make_checks_population_arrays(tmp_path):
    from dpaudit.attacks.scores import synthetic_scores
    from dpaudit.auditing.release_make import make_release
    from dpaudit.errors import DataError

    a = synthetic_scores(20, num_references=3, num_population=10, seed=0)
    claim = ["epsilon=1", "delta=1e-5"]
    bad = {k: v for k, v in a.items() if not k.startswith("reference_")}        # population without references
    np.savez(tmp_path / "s1.npz", **bad)
    with pytest.raises(DataError, match="needs the reference models"):
        make_release(tmp_path / "r1", claim=claim, scores=tmp_path / "s1.npz")
    half = {k: v for k, v in a.items() if k != "reference_population_logits"}
    np.savez(tmp_path / "s2.npz", **half)
    with pytest.raises(DataError, match="need both"):
        make_release(tmp_path / "r2", claim=claim, scores=tmp_path / "s2.npz")
    wrong = dict(a, reference_population_logits=a["reference_population_logits"][:, :2])
    np.savez(tmp_path / "s3.npz", **wrong)
    with pytest.raises(DataError, match="same 3 reference models"):
        make_release(tmp_path / "r3", claim=claim, scores=tmp_path / "s3.npz")
