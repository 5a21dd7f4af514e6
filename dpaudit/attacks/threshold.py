"""Threshold attacks (Yeom, Giacomelli, Fredrikson, Jha 2018, "Privacy risk in machine learning"): a record is
called a member when the model's loss on it is small (equivalently, its confidence in the true label is high).

Both scores are oriented "larger = more likely member":

* ``loss``: ``-CE(p, y) = log p_y`` (natural log; probabilities clipped at ``1e-12`` below so that a zero gives a
  finite score).
* ``confidence``: ``p_y``, the probability the model gives to the true label.

The rank order of the two is identical (log is increasing), so their ROC curves coincide; both are offered because
Yeom et al. state the attack with the loss and the confidence form reads naturally as a probability.
"""

from __future__ import annotations

import numpy as np

from dpaudit.attacks.protocols import Model
from dpaudit.errors import DataError, check_choice

__all__ = ["check_proba", "true_label_probability", "loss_scores", "confidence_scores", "threshold_scores", "THRESHOLD_KINDS"]

THRESHOLD_KINDS = ("loss", "confidence")
_CLIP = 1e-12


def check_proba(proba, labels, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(proba, labels)``: an (n, C) float array of probabilities and n integer labels in [0, C)."""
    p = np.asarray(proba, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim != 2 or y.ndim != 1 or p.shape[0] != y.shape[0]:
        raise DataError(f"{owner}: 'proba' must be (n, C) and 'labels' (n,); got {p.shape} and {y.shape}.")
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{owner}: 'labels' must be integers; got dtype {y.dtype}.")
    if y.size and (y.min() < 0 or y.max() >= p.shape[1]):
        raise DataError(f"{owner}: labels must lie in [0, {p.shape[1]}); got range [{y.min()}, {y.max()}].")
    if not np.all(np.isfinite(p)):
        raise DataError(f"{owner}: 'proba' contains NaN or infinite values.")
    return p, y.astype(np.int64)


def true_label_probability(proba, labels) -> np.ndarray:
    """``p[i, y_i]`` for each row: (n,)."""
    p, y = check_proba(proba, labels, "true_label_probability")
    return p[np.arange(y.size), y]


def loss_scores(proba, labels) -> np.ndarray:
    """Negative cross-entropy loss ``log p_y`` (larger = lower loss = more likely member)."""
    return np.log(np.clip(true_label_probability(proba, labels), _CLIP, 1.0))


def confidence_scores(proba, labels) -> np.ndarray:
    """Confidence in the true label ``p_y`` (larger = more likely member)."""
    return true_label_probability(proba, labels)


def threshold_scores(model: Model, X, y, *, kind: str = "loss") -> np.ndarray:
    """Query ``model.predict_proba(X)`` once and return the ``kind`` scores of the records (X, y)."""
    check_choice(kind, "kind", "threshold_scores", THRESHOLD_KINDS)
    proba = model.predict_proba(np.asarray(X))
    return loss_scores(proba, y) if kind == "loss" else confidence_scores(proba, y)
