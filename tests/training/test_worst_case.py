"""Worst-case initial parameters and crafted canaries (dpaudit.training.worst_case)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.models import ModelSpec
from dpaudit.training.worst_case import (crafted_canary, dead_coordinates, first_linear_keys, softmax_regression_spec,
                                         worst_case_init)


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 1, 4, 4)).astype(np.float32)
    X[:, 0, 0, 0] = 0.0
    X[:, 0, 3, 2] = 0.0
    return X, rng.integers(0, 3, size=n)


def test_dead_coordinates_and_the_crafted_canary():
    X, _ = _data()
    dead = dead_coordinates(X)
    assert dead.tolist() == [0, 14]
    c = crafted_canary((1, 4, 4), dead, norm=50.0)
    assert c.shape == (1, 1, 4, 4) and c.dtype == np.float32
    assert np.linalg.norm(c) == pytest.approx(50.0, rel=1e-6)
    assert np.count_nonzero(c) == 2 and c.reshape(-1)[0] > 0 and c.reshape(-1)[14] > 0
    with pytest.raises(DataError, match="no input coordinate that is zero"):
        crafted_canary((1, 4, 4), np.array([], int))
    with pytest.raises(ParameterError, match="canary_norm"):
        crafted_canary((1, 4, 4), dead, norm=-1.0)


def test_the_worst_case_init_zeroes_the_dead_weights_and_the_biases():
    X, y = _data()
    spec = softmax_regression_spec((1, 4, 4), 3)
    w, b = first_linear_keys(spec)
    dead = dead_coordinates(X)
    st = worst_case_init(spec, X, y, dead, seed=0, epochs=2)
    assert st[w].shape == (3, 16) and st[b].shape == (3,)
    assert float(st[w][:, dead].abs().max()) == 0.0 and float(st[b].abs().max()) == 0.0
    alive = np.setdiff1d(np.arange(16), dead)
    assert float(st[w][:, alive].abs().max()) > 0.0              # pre-trained weights kept elsewhere
    again = worst_case_init(spec, X, y, dead, seed=0, epochs=2)
    assert all(np.array_equal(st[k].numpy(), again[k].numpy()) for k in st)     # same seed, same init


def test_only_softmax_regression_is_accepted():
    with pytest.raises(ParameterError, match="softmax regression"):
        first_linear_keys(ModelSpec("mlp", (1, 4, 4), 3, {"hidden": [8]}))
