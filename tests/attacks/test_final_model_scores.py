"""The crafted-canary score of final-model audits (dpaudit.attacks.final_model): for softmax outputs it is the centred
logit difference between the canary and the reference input, whatever the biases."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.attacks.final_model import centered_log_prob_scores
from dpaudit.errors import DataError, ParameterError


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_the_score_is_the_centred_logit_difference_of_a_linear_model():
    rng = np.random.default_rng(0)
    M, m, K, d = 5, 3, 10, 7
    W = rng.normal(size=(M, K, d))
    b = rng.normal(size=(M, 1, K)) * 3.0                    # biases cancel between the two inputs
    xc, x0 = rng.normal(size=(m, d)) * 4.0, np.zeros((m, d))
    labels = np.array([0, 3, 9])
    zc = np.einsum("mkd,nd->mnk", W, xc) + b
    z0 = np.einsum("mkd,nd->mnk", W, x0) + b
    s = centered_log_prob_scores(_softmax(zc), _softmax(z0), labels)
    dz = zc - z0
    expect = np.take_along_axis(dz - dz.mean(axis=2, keepdims=True), labels[None, :, None].repeat(M, 0), axis=2)[..., 0]
    assert s.shape == (M, m)
    np.testing.assert_allclose(s, expect, rtol=1e-9, atol=1e-9)
    # one model: (canaries, classes) in, (1, canaries) out
    np.testing.assert_allclose(centered_log_prob_scores(_softmax(zc[0]), _softmax(z0[0]), labels), expect[:1], atol=1e-9)


def test_bad_inputs_name_the_parameter():
    p = np.full((2, 1, 3), 1 / 3)
    with pytest.raises(ParameterError, match="'probs_reference'"):
        centered_log_prob_scores(p, p[:, :, :2], [0])
    with pytest.raises(ParameterError, match="'labels'"):
        centered_log_prob_scores(p, p, [3])
    with pytest.raises(ParameterError, match="'probs_canary'"):
        centered_log_prob_scores(np.ones(3), p, [0])
    with pytest.raises(DataError, match="finite probabilities"):
        centered_log_prob_scores(np.full((1, 1, 3), np.nan), p[:1], [0])
    # an exact zero probability gives a finite score
    z = np.array([[[1.0, 0.0, 0.0]]])
    assert np.isfinite(centered_log_prob_scores(z, np.full((1, 1, 3), 1 / 3), [1])).all()
