"""Metrics of the attack layer: ROC/AUC against scikit-learn, conservative TPR@FPR, held-out thresholds,
seeded vectorised bootstrap, JSON round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from sklearn import metrics as skm

from dpaudit.attacks.metrics import (attack_metrics, auc, balanced_subsample, bootstrap_auc, choose_threshold,
                                     rates_at_threshold, roc_curve, tpr_at_fpr)
from dpaudit.attacks.results import AttackMetrics, RocCurve
from dpaudit.errors import DataError, ParameterError
from dpaudit.serial import from_dict, to_dict

scores = st.lists(st.integers(-5, 5).map(float), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(pos=scores, neg=scores)
def test_roc_and_auc_match_sklearn(pos, neg):
    # reference: sklearn.metrics.roc_curve / roc_auc_score (ties counted 1/2 in the AUC)
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    s = np.r_[pos, neg]
    roc = roc_curve(pos, neg)
    if len(set(y)) == 2:
        assert auc(pos, neg) == pytest.approx(skm.roc_auc_score(y, s))
        fpr, tpr, _ = skm.roc_curve(y, s, drop_intermediate=False)
        assert np.allclose(np.unique(np.c_[fpr, tpr], axis=0), np.unique(np.c_[roc.fpr, roc.tpr], axis=0))
    assert roc.fpr[0] == 0 and roc.tpr[0] == 0 and roc.fpr[-1] == 1 and roc.tpr[-1] == 1


@settings(max_examples=60, deadline=None)
@given(pos=scores, neg=scores, alpha=st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.5, 1.0]))
def test_tpr_at_fpr_is_best_roc_vertex_within_fpr(pos, neg, alpha):
    roc = roc_curve(pos, neg)
    expected = roc.tpr[roc.fpr <= alpha + 1e-12].max()
    assert tpr_at_fpr(pos, neg, alpha) == pytest.approx(expected)


def test_tpr_at_fpr_never_interpolates_linearly():
    # one non-member above every member: at FPR 0.5 nothing but the (0, 0) vertex and (0.5, 1) exist;
    # at FPR 0.25 a linear interpolation would claim TPR 0.5, the conservative reading gives 0.
    pos, neg = [1.0, 1.0], [2.0, 0.0]
    assert tpr_at_fpr(pos, neg, 0.25) == 0.0
    assert tpr_at_fpr(pos, neg, 0.5) == 1.0


def test_perfect_and_useless_attacks():
    rng = np.random.default_rng(0)
    assert auc(rng.uniform(2, 3, 50), rng.uniform(0, 1, 50)) == 1.0
    assert tpr_at_fpr(rng.uniform(2, 3, 50), rng.uniform(0, 1, 50), 0.001) == 1.0
    assert auc(np.zeros(10), np.zeros(7)) == 0.5


def test_rates_at_threshold_by_hand():
    # members 3, 2, 1, 0 ; non-members 2, 0, 0, 0 ; t = 1.5 -> TP 2, FN 2, FP 1, TN 3
    r = rates_at_threshold([3, 2, 1, 0], [2, 0, 0, 0], 1.5)
    assert r["accuracy"] == pytest.approx(5 / 8)
    assert r["recall"] == pytest.approx(0.5)
    assert r["precision"] == pytest.approx(2 / 3)
    assert r["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert r["macro_recall"] == pytest.approx((0.5 + 0.75) / 2) == r["balanced_accuracy"]
    assert r["macro_precision"] == pytest.approx((2 / 3 + 3 / 5) / 2)


def test_choose_threshold_separates():
    t = choose_threshold([5, 6, 7], [1, 2, 3])
    assert 3 < t < 5


def test_attack_metrics_held_out_reproducible_and_seed_dependent():
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(0.5, 1, 400), rng.normal(0, 1, 400)
    a = attack_metrics(pos, neg, seed=3, n_bootstrap=200)
    b = attack_metrics(pos, neg, seed=3, n_bootstrap=200)
    c = attack_metrics(pos, neg, seed=4, n_bootstrap=200)
    assert a == b
    assert a.threshold != c.threshold or a.intervals["auc"] != c.intervals["auc"]
    assert a.auc == pytest.approx(auc(pos, neg))
    assert a.threshold_rule.startswith("held_out")
    iv = a.intervals["auc"]
    assert iv.low < a.auc < iv.high and 0.55 < a.auc < 0.75
    for name in ("accuracy", "precision", "recall", "f1", "tpr@0.1"):
        assert a.intervals[name].low <= a.intervals[name].high


def test_attack_metrics_fixed_threshold_uses_all_records():
    m = attack_metrics([0.9, 0.8, 0.2], [0.1, 0.6, 0.3], threshold=0.5, n_bootstrap=0)
    assert m.accuracy == pytest.approx(4 / 6) and m.intervals == {}
    assert m.threshold_rule == "fixed a priori"


def test_bootstrap_auc_coverage_rough():
    # the AUC of N(1,1) vs N(0,1) is Phi(1/sqrt 2) = 0.7602 (closed form); a 90% interval should cover it most times
    from scipy.stats import norm
    true = norm.cdf(1 / np.sqrt(2))
    hits = 0
    for s in range(40):
        rng = np.random.default_rng(100 + s)
        iv = bootstrap_auc(rng.normal(1, 1, 200), rng.normal(0, 1, 200), n_bootstrap=300, confidence=0.9, seed=s)
        hits += iv.low <= true <= iv.high
    assert hits >= 30


def test_balanced_subsample():
    i1, i0 = balanced_subsample(10, 4, seed=0)
    assert len(i1) == len(i0) == 4 and len(set(i1)) == 4 and i1.max() < 10
    j1, _ = balanced_subsample(10, 4, seed=0)
    assert np.array_equal(i1, j1)


def test_json_round_trip():
    rng = np.random.default_rng(2)
    m = attack_metrics(rng.normal(1, 1, 100), rng.normal(0, 1, 100), n_bootstrap=50)
    again = from_dict(AttackMetrics, json.loads(json.dumps(to_dict(m))))
    assert again == m
    roc = roc_curve([1, 2], [0, 1])
    assert from_dict(RocCurve, json.loads(json.dumps(to_dict(roc)))) == roc


def test_bad_inputs():
    with pytest.raises(DataError):
        auc([], [1.0])
    with pytest.raises(DataError):
        auc([np.nan], [1.0])
    with pytest.raises(ParameterError, match="The 'fpr' parameter of tpr_at_fpr must be a float"):
        tpr_at_fpr([1.0], [0.0], 1.5)
    with pytest.raises(ParameterError, match="'threshold' parameter of attack_metrics"):
        attack_metrics([1.0, 2.0], [0.0, 1.0], threshold="best")
