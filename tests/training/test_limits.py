"""Huge sizes are refused when a method's config is built (naming the setting, its range and the value), not
accepted and then trained for ever; a training state too large for memory is refused before it is allocated."""

from __future__ import annotations

import re

import pytest

from dpaudit.errors import ParameterError
from dpaudit.training import limits
from dpaudit.training.methods import load_method_config

HUGE = 2**31

# (method, the setting as a user writes it in --set, its supported range)
CASES = [
    ("fredy", "method.rounds", f"[1, {limits.MAX_ROUNDS}]"),
    ("fredy", "method.teachers", f"[1, {limits.MAX_MODELS}]"),
    ("fredy", "method.queries", f"[1, {limits.MAX_RECORDS}]"),
    ("fredy", "method.teacher_train.epochs", f"[1, {limits.MAX_EPOCHS}]"),
    ("fredy", "method.student_train.batch_size", f"[1, {limits.MAX_RECORDS}]"),
    ("pate", "method.teachers", f"[1, {limits.MAX_MODELS}]"),
    ("pate", "method.queries", f"[1, {limits.MAX_RECORDS}]"),
    ("pate", "method.num_samples", f"[10, {limits.MAX_RECORDS}]"),
    ("fedkt", "method.parties", f"[1, {limits.MAX_MODELS}]"),
    ("fedkt", "method.partitions", f"[1, {limits.MAX_MODELS}]"),
    ("fedkt", "method.server_queries", f"[1, {limits.MAX_RECORDS}]"),
    ("fedkt", "method.pate_teachers", f"[1, {limits.MAX_MODELS}]"),
    ("privatekt", "method.rounds", f"[1, {limits.MAX_ROUNDS}]"),
    ("privatekt", "method.local_epochs", f"[0, {limits.MAX_EPOCHS}]"),
    ("privatekt", "method.server_steps", f"[0, {limits.MAX_STEPS}]"),
    ("privatekt", "data.num_clients", f"[1, {limits.MAX_MODELS}]"),
    ("proxyfl", "method.rounds", f"[1, {limits.MAX_ROUNDS}]"),
    ("proxyfl", "data.samples_per_client", f"[1, {limits.MAX_RECORDS}]"),
    ("centrain", "method.epochs", f"[1, {limits.MAX_EPOCHS}]"),
    ("fedavg-ldp", "method.rounds", f"[1, {limits.MAX_ROUNDS}]"),
    ("fedavg-ldp", "run.stop_after", f"[0, {limits.MAX_ROUNDS}]"),
    ("fredy", "run.num_threads", f"[1, {limits.MAX_THREADS}]"),
]


@pytest.mark.parametrize("method,setting,expected", CASES)
def test_huge_size_is_refused_at_config_construction(method, setting, expected):
    with pytest.raises(ParameterError) as exc:
        load_method_config(method, None, sets=[f"{setting}={HUGE}"])
    msg = str(exc.value)
    assert f"'{setting.rsplit('.', 1)[-1]}'" in msg and expected in msg and str(HUGE) in msg, msg


def test_the_bounds_themselves_are_accepted():
    cfg = load_method_config("fredy", None, sets=[f"method.rounds={limits.MAX_ROUNDS}", f"method.teachers={limits.MAX_MODELS}"])
    assert cfg.method.rounds == limits.MAX_ROUNDS and cfg.method.teachers == limits.MAX_MODELS


def test_fedkt_total_models_are_bounded():
    with pytest.raises(ParameterError, match=re.escape("at most 100000. Got 1000 x 1000 x 3 = 3000000 instead")):
        load_method_config("fedkt", None, sets=["method.parties=1000", "method.partitions=1000", "method.teachers=3"])


def test_huge_layer_width_and_weights_are_refused_before_allocating():
    from dpaudit.training.models import ModelSpec, build_model

    with pytest.raises(ParameterError, match=rf"'hidden' parameter of ModelSpec\(mlp\) must be .*{limits.MAX_WIDTH}.*{HUGE}"):
        ModelSpec("mlp", (1, 8, 8), 10, {"hidden": [HUGE]})
    with pytest.raises(ParameterError, match="weights, more than one training run supports"):
        build_model(ModelSpec("mlp", (1, 8, 8), 10, {"hidden": [limits.MAX_WIDTH, limits.MAX_WIDTH]}))


def test_ensemble_state_too_large_is_refused_before_allocating():
    import numpy as np

    from dpaudit.training.ensemble import TrainConfig, train_ensemble
    from dpaudit.training.models import ModelSpec

    spec = ModelSpec("mlp", (4,), 2, {"hidden": [100_000]})  # 0.6M weights: 9.6 MB of state per model, 192 GB in all
    X, y = np.zeros((2, 4), np.float32), np.array([0, 1])
    with pytest.raises(ParameterError, match=r"Training 20000 mlp models at once needs about \d+\.\d GiB"):
        train_ensemble(spec, [(X, y)] * 20_000, TrainConfig(epochs=1), seed=0, progress=False)
