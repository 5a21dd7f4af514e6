"""Canaries: inclusion bits, input and Dirac canaries, the trainer hook, canaries.npz."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.canaries import (
    DiracHook,
    canary_datasets,
    dirac_coordinates,
    inclusion_bits,
    load_canaries,
    load_canary_truth,
    make_canaries,
    make_input_canaries,
    write_canaries,
)
from dpaudit.training.ensemble import DPSGDConfig, TrainConfig, train_ensemble
from dpaudit.training.models import ModelSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = ModelSpec("mlp", (6,), 3, {"hidden": [4]})


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = (rng.normal(size=(n, 6)) + y[:, None]).astype(np.float32)
    X[:, 0] = 0.0  # a feature that is zero everywhere: its first-layer weights have zero gradient
    return X, y


def test_inclusion_bits():
    one = inclusion_bits("one-run", 1000, 1, 0)
    assert one.shape == (1, 1000) and 400 < one.sum() < 600
    multi = inclusion_bits("multi-run", 3, 200, 0)
    assert multi.shape == (200, 3) and np.all(multi == multi[:, :1]) and 60 < multi[:, 0].sum() < 140
    assert np.array_equal(inclusion_bits("one-run", 50, 1, 7), inclusion_bits("one-run", 50, 1, 7))
    with pytest.raises(ParameterError, match="'models'.*>= 2"):
        inclusion_bits("multi-run", 1, 1, 0)
    with pytest.raises(ParameterError, match="'audit'"):
        inclusion_bits("two-run", 1, 1, 0)


def test_input_canaries():
    X, y = _data()
    Xc, yc = make_input_canaries("mislabeled", X, y, 3, 10, seed=1)
    rows = [int(np.flatnonzero((X == x).all(1))[0]) for x in Xc]
    assert np.all(y[rows] != yc) and len(set(rows)) == 10
    Xo, yo = make_input_canaries("ood", X, y, 3, 5, seed=1)
    assert Xo.shape == (5, 6) and Xo.min() >= X.min() and Xo.max() <= X.max()
    with pytest.raises(ParameterError, match="'canaries'.*<= 40"):
        make_input_canaries("mislabeled", X, y, 3, 41, seed=1)
    with pytest.raises(ParameterError, match="'kind'"):
        make_canaries("poison", "one-run", num_canaries=2, spec=SPEC)
    can = make_canaries("mislabeled", "multi-run", num_canaries=1, num_models=6, seed=0, spec=SPEC, X_pool=X, y_pool=y)
    ds = canary_datasets(X[:20], y[:20], can)
    assert [len(d[1]) for d in ds] == [20 + int(b) for b in can.included[:, 0]]


def test_dirac_coordinates_prefer_dead_weights():
    X, _ = _data()
    c = dirac_coordinates(SPEC, 4, 0, X)
    assert sorted(c) == [0, 6, 12, 18]  # W1[h, 0] for the 4 hidden units
    assert len(set(dirac_coordinates(SPEC, 40, 0, X))) == 40
    with pytest.raises(ParameterError, match="'canaries'.*<= 43"):
        dirac_coordinates(SPEC, 44, 0, X)


class _Null:
    def extra_gradient(self, t, models, q):
        return None

    def observe(self, t, models, noisy):
        pass


def test_hook_is_neutral_and_needs_dp():
    X, y = _data()
    cfg = TrainConfig(epochs=2, batch_size=10, optimizer="sgd", lr=0.1, dp=DPSGDConfig(1.0, 1.0))
    a = train_ensemble(SPEC, [(X, y)] * 2, cfg, seed=3, device="cpu", progress=False)
    b = train_ensemble(SPEC, [(X, y)] * 2, cfg, seed=3, device="cpu", progress=False, canary_hook=_Null())
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    with pytest.raises(ParameterError, match="canary_hook"):
        train_ensemble(SPEC, [(X, y)], TrainConfig(epochs=1), seed=0, device="cpu", progress=False, canary_hook=_Null())


def test_dirac_hook_observations_separate_included_canaries():
    X, y = _data()
    can = make_canaries("dirac", "one-run", num_canaries=4, seed=6, spec=SPEC, X_train=X)
    sigma = 0.5
    cfg = TrainConfig(epochs=10, batch_size=10, optimizer="sgd", lr=0.1, dp=DPSGDConfig(sigma, 1.0, 0.5))
    hook = DiracHook(SPEC, can, max_grad_norm=1.0, noise_multiplier=sigma, seed=2)
    train_ensemble(SPEC, [(X, y)], cfg, seed=2, device="cpu", progress=False, canary_hook=hook)
    obs = hook.observations()
    assert obs.shape == (20, 1, 4)
    # dead coordinates: excluded canaries see pure N(0, 1) noise; included ones gain 1/sigma = 2 half the time
    mean = obs[:, 0].mean(0)
    inc = can.included[0]
    assert inc.any() and (~inc).any()
    assert mean[inc].min() > mean[~inc].max()
    assert np.all(np.abs(mean[~inc]) < 1.0) and np.all(np.abs(mean[inc] - 1.0) < 0.8)


def test_canaries_file_keeps_truth_apart(tmp_path):
    X, y = _data()
    can = make_canaries("ood", "one-run", num_canaries=8, seed=0, spec=SPEC, X_pool=X, y_pool=y)
    write_canaries(tmp_path / "canaries.npz", can)
    view = load_canaries(tmp_path / "canaries.npz")
    assert set(view) == {"kind", "mode", "seed", "X", "y"} and str(view["kind"]) == "ood"
    assert np.array_equal(load_canary_truth(tmp_path / "canaries.npz"), can.included)
    with pytest.raises(DataError, match="does not exist"):
        load_canaries(tmp_path / "missing.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canaries.npz"]
