"""Threshold (Yeom et al. 2018) and LiRA (Carlini et al. 2022) attacks: scores, orientation, numerics, and the
vectorised LiRA statistics against a per-record loop written out with scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.datasets import load_digits

from dpaudit.attacks.lira import lira_attack, lira_inclusion, lira_scores, logit_confidence
from dpaudit.attacks.metrics import auc
from dpaudit.attacks.threshold import confidence_scores, loss_scores, threshold_scores
from dpaudit.errors import DataError, ParameterError
from attack_models import Forest as _Forest


def Forest(X, y, seed, C=10):  # noqa: N802 - this file's forests use 30 trees
    return _Forest(X, y, seed, C=C, n_estimators=30)


def test_threshold_scores_orientation_and_values():
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    y = np.array([0, 0, 1])
    assert np.allclose(confidence_scores(p, y), [0.9, 0.2, 0.5])
    assert np.allclose(loss_scores(p, y), np.log([0.9, 0.2, 0.5]))
    assert np.isfinite(loss_scores(np.array([[1.0, 0.0]]), np.array([1]))).all()
    with pytest.raises(DataError):
        loss_scores(p, np.array([0, 2, 1]))
    with pytest.raises(ParameterError):
        threshold_scores(Forest(p, np.array([0, 1, 1]), 0, C=2), p, y, kind="entropy")


def test_logit_confidence_is_stable_near_one():
    # p_y = 1 - 1e-10: the naive log(p / (1 - p)) keeps ~6 digits of 1 - p; summing the other classes keeps all.
    p = np.array([[1 - 1e-10, 5e-11, 5e-11]])
    assert logit_confidence(p, np.array([0]))[0] == pytest.approx(np.log(1 - 1e-10) - np.log(1e-10), rel=1e-13)
    # exact 0 / 1 probabilities (trees) are floored at 1e-12: phi = +-log(1e12)
    assert logit_confidence(np.array([[1.0, 0.0]]), np.array([0]))[0] == pytest.approx(np.log(1e12))
    assert logit_confidence(np.array([[1.0, 0.0]]), np.array([1]))[0] == pytest.approx(-np.log(1e12))
    p = np.array([[0.2, 0.3, 0.5]])
    assert logit_confidence(p, np.array([2]))[0] == pytest.approx(0.0)


def _loop_lira(t, phi, mask, online, fixed):
    """Reference: the same statistics, one record at a time, with scipy.stats.norm (Carlini et al. 2022, Eq. 4)."""
    n = len(t)
    out_dev = [phi[i, ~mask[i]] - phi[i, ~mask[i]].mean() for i in range(n)]
    in_dev = [phi[i, mask[i]] - phi[i, mask[i]].mean() for i in range(n)]
    pooled_out = np.sqrt(sum((d ** 2).sum() for d in out_dev) / sum(len(d) - 1 for d in out_dev))
    pooled_in = np.sqrt(sum((d ** 2).sum() for d in in_dev) / sum(len(d) - 1 for d in in_dev))
    res = []
    for i in range(n):
        mo, mi = phi[i, ~mask[i]].mean(), phi[i, mask[i]].mean()
        so = pooled_out if fixed else phi[i, ~mask[i]].std(ddof=1)
        si = pooled_in if fixed else phi[i, mask[i]].std(ddof=1)
        if online:
            res.append(stats.norm.logpdf(t[i], mi, si) - stats.norm.logpdf(t[i], mo, so))
        else:
            res.append(stats.norm.logcdf(t[i], mo, so))
    return np.array(res)


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("fixed", [True, False])
def test_lira_scores_match_per_record_loop(online, fixed):
    rng = np.random.default_rng(0)
    n, K = 30, 8
    mask = lira_inclusion(n, K, seed=1)
    phi = rng.normal(0, 1, (n, K)) + 2.0 * mask
    t = rng.normal(1, 1.5, n)
    assert np.allclose(lira_scores(t, phi, mask, online=online, fixed_variance=fixed),
                       _loop_lira(t, phi, mask, online, fixed), atol=1e-9)


def test_lira_inclusion_balanced_and_seeded():
    m = lira_inclusion(100, 16, seed=3)
    assert (m.sum(axis=1) == 8).all()
    assert (lira_inclusion(10, 8, seed=0, fraction=0.25).sum(axis=1) == 2).all()
    assert (lira_inclusion(10, 4, seed=0, fraction=0.01).sum(axis=1) == 1).all()
    assert 0.4 < m[:, 0].mean() < 0.6
    assert np.array_equal(m, lira_inclusion(100, 16, seed=3))
    assert not np.array_equal(m, lira_inclusion(100, 16, seed=4))


def test_lira_scores_errors_and_missing_in():
    mask = np.zeros((5, 4), dtype=bool)
    with pytest.raises(DataError):
        lira_scores(np.zeros(5), np.zeros((5, 4)), mask, online=True)
    # offline needs no IN shadow at all
    assert np.isfinite(lira_scores(np.zeros(5), np.random.default_rng(0).normal(size=(5, 4)), mask,
                                   online=False)).all()
    with pytest.raises(DataError):
        lira_scores(np.zeros(4), np.zeros((5, 4)), mask)


def _digits_split(seed=0):
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X))
    mem, non, pool = perm[:300], perm[300:600], perm[600:1200]
    return X, y, mem, non, pool


def test_threshold_and_lira_detect_a_leaky_model_and_not_an_independent_one():
    X, y, mem, non, pool = _digits_split()
    target = Forest(X[mem], y[mem], seed=0)
    ev = np.r_[mem, non]
    loss = threshold_scores(target, X[ev], y[ev], kind="loss")
    assert auc(loss[:300], loss[300:]) > 0.75
    for online in (True, False):
        s = lira_attack(target, X[ev], y[ev], X[pool], y[pool], num_shadows=8, train_size=300,
                        train_fn=lambda A, b, seed: Forest(A, b, seed), online=online, seed=0)
        assert auc(s[:300], s[300:]) > 0.75
    # a model that never saw the members (trained on the pool): no attack can tell them apart
    outsider = Forest(X[pool], y[pool], seed=0)
    loss = threshold_scores(outsider, X[ev], y[ev])
    assert 0.4 < auc(loss[:300], loss[300:]) < 0.6
    s = lira_attack(outsider, X[ev], y[ev], X[pool[:300]], y[pool[:300]], num_shadows=4,
                    train_fn=lambda A, b, seed: Forest(A, b, seed), online=False, seed=1)
    assert 0.4 < auc(s[:300], s[300:]) < 0.6


def test_lira_attack_reproducible_and_batch_recipe_equivalent():
    X, y, mem, non, pool = _digits_split(1)
    target = Forest(X[mem], y[mem], seed=0)
    ev = np.r_[mem[:50], non[:50]]
    one = lambda A, b, seed: Forest(A, b, seed)  # noqa: E731
    many = lambda ds, seed: [Forest(A, b, seed + j) for j, (A, b) in enumerate(ds)]  # noqa: E731
    a = lira_attack(target, X[ev], y[ev], X[pool[:200]], y[pool[:200]], num_shadows=4, train_fn=one, seed=2)
    b = lira_attack(target, X[ev], y[ev], X[pool[:200]], y[pool[:200]], num_shadows=4, batch_train_fn=many, seed=2)
    assert np.array_equal(a, b)
