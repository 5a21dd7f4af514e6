"""Shadow-model attack (Shokri et al. 2017 as in FREDY 2024): features, per-class / global attack models,
classifier choices, reproducibility, and that it finds leakage where there is some and none where there is none."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from dpaudit.attacks.metrics import auc
from dpaudit.attacks.shadow import AttackModel, make_classifier, shadow_attack, shadow_features, train_shadow_models
from dpaudit.errors import DataError, ParameterError
from attack_models import Forest, forest_fn


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(X))
    return X, y, perm[:200], perm[200:400], perm[400:1000]


def test_features():
    p = np.array([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]])
    y = np.array([2, 0])
    f = shadow_features(p, y, features="both")
    assert np.allclose(f[0], [0.7, 0.2, 0.1, 0.2, np.log(0.2)])
    assert shadow_features(p, y, features="sorted").shape == (2, 3)
    assert np.allclose(shadow_features(p, y, features="true_label", with_label=True)[1], [0.5, np.log(0.5), 1, 0, 0])
    with pytest.raises(ParameterError, match="'features' parameter of shadow_features"):
        shadow_features(p, y, features="raw")


def test_make_classifier_choices_and_errors():
    for name in ("catboost", "logreg", "gbdt", "rf"):
        assert hasattr(make_classifier(name, seed=1), "predict_proba")
    mine = LogisticRegression(C=0.1)
    clone = make_classifier(mine)
    assert clone is not mine and clone.C == 0.1
    with pytest.raises(ParameterError, match="'classifier' parameter of make_classifier"):
        make_classifier("svm")
    with pytest.raises(ParameterError):
        make_classifier(object())


def test_train_shadow_models_needs_a_recipe():
    with pytest.raises(ParameterError, match="train_fn"):
        train_shadow_models([(np.zeros((2, 1)), np.zeros(2))])
    with pytest.raises(DataError):
        train_shadow_models([(np.zeros((2, 1)), np.zeros(2))], batch_train_fn=lambda ds, seed: [])


def test_shadow_attack_finds_leakage_and_none_without_it(digits):
    X, y, mem, non, pool = digits
    ev = np.r_[mem, non]
    target = Forest(X[mem], y[mem], seed=0)
    s = shadow_attack(target, X[ev], y[ev], X[pool], y[pool], train_size=200, num_shadows=3, train_fn=forest_fn,
                      classifier="logreg", seed=0)
    assert s.shape == (400,) and np.all((0 <= s) & (s <= 1))
    assert auc(s[:200], s[200:]) > 0.75
    outsider = Forest(X[pool[:200]], y[pool[:200]], seed=0)
    s = shadow_attack(outsider, X[ev], y[ev], X[pool[200:]], y[pool[200:]], train_size=200, num_shadows=3,
                      train_fn=forest_fn, classifier="logreg", seed=0)
    assert 0.4 < auc(s[:200], s[200:]) < 0.6


def test_shadow_attack_catboost_global_reproducible_and_batch(digits):
    X, y, mem, non, pool = digits
    ev = np.r_[mem[:60], non[:60]]
    target = Forest(X[mem], y[mem], seed=0)
    kw = dict(train_size=150, num_shadows=2, per_class=False, seed=3)
    a = shadow_attack(target, X[ev], y[ev], X[pool], y[pool], train_fn=forest_fn, **kw)
    b = shadow_attack(target, X[ev], y[ev], X[pool], y[pool],
                      batch_train_fn=lambda ds, seed: [forest_fn(A, c, seed + j) for j, (A, c) in enumerate(ds)], **kw)
    assert np.array_equal(a, b)
    assert auc(a[:60], a[60:]) > 0.6


def test_shadow_attack_small_pool_warns(digits):
    X, y, mem, non, pool = digits
    with pytest.warns(UserWarning, match="smaller than 2 x train_size"):
        shadow_attack(Forest(X[mem], y[mem], 0), X[non[:10]], y[non[:10]], X[pool[:100]], y[pool[:100]],
                      train_size=200, num_shadows=1, train_fn=forest_fn, classifier="logreg")


def test_attack_model_per_class_falls_back_to_global():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(3), 200)
    y = np.r_[np.zeros(190, dtype=int), np.ones(10, dtype=int)]   # class 1 too rare, class 2 absent
    m = rng.integers(0, 2, 200)
    am = AttackModel("logreg", per_class=True).fit(p, y, m)
    assert set(am.per_class_) == {0}
    out = am.predict_proba(p[:5], np.array([0, 1, 2, 0, 1]))
    assert out.shape == (5,)
    with pytest.raises(DataError):
        AttackModel("logreg").fit(p, y, np.ones(200))
