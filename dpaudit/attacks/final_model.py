"""Black-box scores for final-model canary audits with crafted canaries (numpy only).

A *crafted* input canary is chosen so that its gradient dominates the final model's output on it: in dpaudit's
final-model audit (:mod:`dpaudit.auditing.final_model_audit`) it lives on input coordinates no real record uses, so
that, for a softmax-regression model started from worst-case initial parameters (Annamalai & De Cristofaro,
NeurIPS 2024: the analysis of DP-SGD holds for *any* fixed initialisation, so an auditor may pick the one that helps
it most), only the canary's clipped gradient and the DP noise move the weights the canary's output reads.

The score is fixed before any model is trained and uses only what a black-box attacker sees, the model's class
probabilities on two inputs it chooses: the canary ``x_c`` and a reference input ``x_0`` (e.g. all zeros).
:func:`centered_log_prob_scores` returns

.. math:: s = \\big[\\log p_y(x_c) - \\overline{\\log p(x_c)}\\big] - \\big[\\log p_y(x_0) - \\overline{\\log p(x_0)}\\big],

where the bar is the mean over classes. Centred log-probabilities are centred logits (the softmax normaliser
cancels), and the difference between the two inputs cancels everything the two inputs share (for a linear model:
the biases), so for softmax regression ``s`` is exactly the canary-label component of ``W (x_c - x_0)``, centred over
classes: a linear function of the weights, Gaussian under DP-SGD's noise.
"""

from __future__ import annotations

import numpy as np

from dpaudit.errors import DataError, ParameterError

__all__ = ["centered_log_prob_scores", "TINY_PROBABILITY"]

#: Probabilities are floored here before the logarithm (a model that outputs an exact 0 gives a finite score).
TINY_PROBABILITY = 1e-300


def _probs(p, name: str) -> np.ndarray:
    a = np.asarray(p, dtype=np.float64)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3 or a.shape[-1] < 2:
        raise ParameterError(f"The '{name}' parameter of centered_log_prob_scores must be an array (models, canaries, "
                             f"classes) or (canaries, classes) with >= 2 classes. Got shape {a.shape} instead.")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise DataError(f"The '{name}' parameter of centered_log_prob_scores must hold finite probabilities >= 0.")
    return a


def centered_log_prob_scores(probs_canary, probs_reference, labels) -> np.ndarray:
    """The crafted-canary score (module docstring) of every model and canary: ``probs_canary`` and
    ``probs_reference`` are the models' class probabilities on the canaries and on their reference inputs, shape
    ``(models, canaries, classes)`` (or ``(canaries, classes)`` for one model), ``labels`` the canaries' labels
    ``(canaries,)``. Returns ``(models, canaries)``; larger = more likely that the model trained on the canary."""
    pc = _probs(probs_canary, "probs_canary")
    pr = _probs(probs_reference, "probs_reference")
    if pr.shape != pc.shape:
        raise ParameterError(f"The 'probs_reference' parameter of centered_log_prob_scores must have the shape of "
                             f"probs_canary {pc.shape}. Got {pr.shape} instead.")
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != pc.shape[1] or not np.issubdtype(y.dtype, np.integer) \
            or (y.size and (y.min() < 0 or y.max() >= pc.shape[2])):
        raise ParameterError(f"The 'labels' parameter of centered_log_prob_scores must be {pc.shape[1]} ints in "
                             f"[0, {pc.shape[2]}). Got {np.asarray(labels)!r:.80} instead.")
    lc = np.log(np.maximum(pc, TINY_PROBABILITY))
    lr = np.log(np.maximum(pr, TINY_PROBABILITY))
    d = (lc - lc.mean(axis=2, keepdims=True)) - (lr - lr.mean(axis=2, keepdims=True))
    return np.take_along_axis(d, y[None, :, None].repeat(d.shape[0], axis=0), axis=2)[..., 0]
