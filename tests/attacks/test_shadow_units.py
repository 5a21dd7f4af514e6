"""Shadow / reference models trained in executor units: seeds per unit key, results independent of where
and in which order units ran, and a re-run trains only the groups that are missing."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.attacks.shadow import SHADOWS_PER_UNIT, shadow_probabilities, train_shadow_models
from dpaudit.errors import DataError, ParameterError
from dpaudit.executors import LocalExecutor, derive_seed

CALLS: list[int] = []


class Toy:
    """Probabilities from the training data and the seed: any change of either shows in the output."""

    def __init__(self, X, y, seed):
        CALLS.append(seed)
        self.w = np.random.default_rng(seed).normal(size=(X.shape[1], 3)) + X.mean(0)[:, None] * (1 + y.mean())

    def predict_proba(self, X):
        z = X @ self.w
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)


def toy_fn(X, y, seed):
    return Toy(X, y, seed)


def _data(n_models=20):
    rng = np.random.default_rng(0)
    ds = [(rng.normal(size=(30, 4)), rng.integers(0, 3, 30)) for _ in range(n_models)]
    qs = [rng.normal(size=(10 + j, 4)) for j in range(n_models)]
    return ds, qs


def test_units_of_eight_seeded_by_their_key():
    ds, qs = _data(20)
    got = shadow_probabilities(ds, qs, train_fn=toy_fn, seed=5)
    assert SHADOWS_PER_UNIT == 8 and [p.shape for p in got] == [(10 + j, 3) for j in range(20)]
    for a, b in ((0, 8), (8, 16), (16, 20)):
        models = train_shadow_models(ds[a:b], train_fn=toy_fn, seed=derive_seed(5, f"models-{a}-{b}"))
        for j, m in zip(range(a, b), models):
            assert np.array_equal(got[j], m.predict_proba(qs[j]))
    with pytest.raises(ParameterError, match="recipe"):
        shadow_probabilities(ds, qs)
    with pytest.raises(DataError, match="query sets"):
        shadow_probabilities(ds, qs[:3], train_fn=toy_fn)


def test_rerun_trains_only_missing_groups_with_identical_results(tmp_path):
    ds, qs = _data(20)
    ref = shadow_probabilities(ds, qs, train_fn=toy_fn, seed=1)
    ex = LocalExecutor().with_checkpoints(tmp_path, salt="recipe")
    CALLS.clear()
    first = shadow_probabilities(ds, qs, train_fn=toy_fn, seed=1, executor=ex)
    assert len(CALLS) == 20
    (tmp_path / "models-8-16.npz").unlink()  # as if the run had died while training this group
    CALLS.clear()
    second = shadow_probabilities(ds, qs, train_fn=toy_fn, seed=1, executor=ex)
    assert len(CALLS) == 8  # only the missing group was trained
    for r, a, b in zip(ref, first, second):
        assert np.array_equal(r, a) and np.array_equal(r, b)
    # other data (or another seed) never reuses a checkpoint
    CALLS.clear()
    shadow_probabilities([(X + 1, y) for X, y in ds], qs, train_fn=toy_fn, seed=1, executor=ex)
    assert len(CALLS) == 20
