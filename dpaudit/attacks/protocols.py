"""How attacks reach models: only through these protocols (never through training internals)."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Model", "TrainFn", "BatchTrainFn"]


@runtime_checkable
class Model(Protocol):
    """Anything that maps inputs to class probabilities: ``predict_proba(X) -> (n, C)`` rows summing to 1."""

    def predict_proba(self, X: np.ndarray) -> np.ndarray: ...


class TrainFn(Protocol):
    """Trains one model with the target's recipe: ``train_fn(X, y, seed) -> Model``."""

    def __call__(self, X: np.ndarray, y: np.ndarray, seed: int) -> Model: ...


class BatchTrainFn(Protocol):
    """Trains several models of the target's recipe at once (e.g. with the ensemble trainer):
    ``train_many([(X_1, y_1), ...], seed) -> [Model_1, ...]``; model i must depend only on (X_i, y_i) and the seed."""

    def __call__(self, datasets: Sequence[tuple[np.ndarray, np.ndarray]], seed: int) -> Sequence[Model]: ...
