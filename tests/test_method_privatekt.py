"""PrivateKT (Qi et al., Nature Communications 2023): invariants of its building blocks, then the method."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dpaudit.accountants.events import rr_keep_probability
from dpaudit.errors import ParameterError
from dpaudit.training.methods.fl_common import (
    buffer_fetch,
    buffer_push,
    entropy_weights,
    predictive_entropy,
    rr_debias,
    rr_perturb,
    weighted_sample,
)


def test_randomized_response_frequencies_match_beta():
    # Lemma 1 / Eq. 2: P(report = true) = beta + (1-beta)/C, P(report = j != true) = (1-beta)/C
    C, K, eps = 10, 2, 5.0
    beta = rr_keep_probability(eps, K, C)
    n = 200_000
    y = np.full(n, 3)
    r = rr_perturb(y, beta, C, np.random.default_rng(0))
    freq = np.bincount(r, minlength=C) / n
    want = np.full(C, (1 - beta) / C)
    want[3] += beta
    sd = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(freq - want) < 5 * sd)
    # the likelihood ratio of one label is exp(eps/K) (Lemma 1)
    assert math.isclose(want[3] / want[0], math.exp(eps / K), rel_tol=1e-12)


def test_randomized_response_extremes_and_validation():
    rng = np.random.default_rng(1)
    y = np.arange(10) % 4
    assert np.array_equal(rr_perturb(y, 1.0, 4, rng), y)
    with pytest.raises(ParameterError, match="'labels'"):
        rr_perturb(np.array([4]), 0.5, 4, rng)
    with pytest.raises(ParameterError, match="'keep_probability'"):
        rr_perturb(y, 1.5, 4, rng)


@settings(max_examples=15, deadline=None)
@given(beta=st.floats(0.05, 0.95), seed=st.integers(0, 1000))
def test_debiased_estimate_is_unbiased(beta, seed):
    # Eq. 3: E[debiased] = mean one-hot of the true labels; check with many repetitions (CLT bound)
    C, G, K = 5, 7, 3
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, C, size=(G, K))
    truth = np.eye(C)[labels].mean(0)
    reps = 3000
    reports = rr_perturb(np.broadcast_to(labels, (reps, G, K)), beta, C, rng)
    est = np.stack([rr_debias(r, beta, C) for r in reports])
    mean, sd = est.mean(0), est.std(0) / math.sqrt(reps)
    assert np.all(np.abs(mean - truth) < 5 * sd + 1e-9)


def test_debias_exact_on_expected_reports():
    # feeding the expected report distribution must return the truth exactly (linear algebra of Eq. 3)
    C, beta = 4, 0.3
    truth = np.eye(C)[[2]]
    expected = beta * truth + (1 - beta) / C
    # (expected - (1-beta)/C)/beta == truth
    assert np.allclose((expected - (1 - beta) / C) / beta, truth)
    assert np.allclose(rr_debias(np.array([[2]]), 1.0, C), truth)


def test_buffer_is_fifo_of_size_b():
    buf = []
    for t in range(7):
        buf = buffer_push(buf, np.array([10 * t, 10 * t + 1]), np.full((2, 3), t), capacity=3)
        assert len(buf) == min(t + 1, 3)
    idx, tgt = buffer_fetch(buf)
    assert idx.tolist() == [40, 41, 50, 51, 60, 61]  # the three newest rounds, oldest first
    assert tgt[:, 0].tolist() == [4, 4, 5, 5, 6, 6]
    assert len(buffer_push(buf, np.array([1]), np.zeros((1, 3)), capacity=1)) == 1
    with pytest.raises(ParameterError):
        buffer_fetch([])


def test_importance_weights_follow_eq4_and_eq5():
    probs = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    u = predictive_entropy(probs)
    assert np.allclose(u, [0.0, math.log(2), math.log(3)])
    w4 = entropy_weights(probs, +1)
    assert np.allclose(w4, np.exp(u) / np.exp(u).sum())  # Eq. 4
    w5 = entropy_weights(probs, -1)
    assert np.allclose(w5, np.exp(-u) / np.exp(-u).sum())  # Eq. 5
    assert w4[2] > w4[1] > w4[0] and w5[0] > w5[1] > w5[2]
    # first draws of the weighted sampler follow the weights
    rng = np.random.default_rng(0)
    first = np.array([weighted_sample(w4, 1, rng)[0] for _ in range(20000)])
    freq = np.bincount(first, minlength=3) / 20000
    assert np.allclose(freq, w4, atol=0.015)
    assert len(set(weighted_sample(w4, 3, rng).tolist())) == 3
