"""Worst-case initial parameters and crafted canaries for final-model (black-box) audits of DP-SGD.

Annamalai & De Cristofaro (NeurIPS 2024) audit DP-SGD from the final model alone and come close to the accounted
epsilon by choosing the *initial parameters*: DP-SGD's guarantee holds for any initialisation fixed before training
(it is a constant of the mechanism, the same for both neighbouring datasets), so the auditor may pick the one that
makes the canary most visible. Here, for softmax regression (dpaudit's ``mlp`` with no hidden layer) on data with
input coordinates that no record uses (scikit-learn's digits has always-zero pixels):

* :func:`dead_coordinates`: the input coordinates that are zero in every record of the base data;
* :func:`crafted_canary`: an input whose mass (L2 norm ``norm``) lies on those coordinates only, so its per-example
  gradient, far above the clipping norm, is always clipped to exactly ``C`` and lies mostly on weights no real
  record's gradient touches;
* :func:`worst_case_init`: weights pre-trained (without DP: the initialisation is the auditor's public choice) on the
  base data, with the weights of the dead coordinates and the output biases set to zero, so that the canary's
  logits start equal for every class (its clipped gradient then points the same way in every step, and the final
  model's centred logit of the canary's label is a sum of ``T`` equal shifts and ``T`` Gaussian noises: the last
  iterate shows as much as all of them);
* :func:`train_final_models`: many models at once with :func:`~dpaudit.training.ensemble.train_ensemble` (vmapped
  per-example gradients on CPU), model ``i`` on the base data plus the canary iff ``included[i]``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dpaudit.errors import DataError, ParameterError, check_float, check_int
from dpaudit.training.models import ModelSpec

__all__ = ["dead_coordinates", "crafted_canary", "worst_case_init", "train_final_models", "softmax_regression_spec",
           "first_linear_keys"]


def softmax_regression_spec(input_shape: Sequence[int], num_classes: int) -> ModelSpec:
    """dpaudit's ``mlp`` with no hidden layer: softmax regression, the model whose worst case this module builds."""
    return ModelSpec("mlp", tuple(int(s) for s in input_shape), int(num_classes), {"hidden": []})


def first_linear_keys(spec: ModelSpec) -> tuple[str, str]:
    """The state-dict keys (weight, bias) of a softmax-regression ``spec``'s one linear layer; a ParameterError for any
    other architecture (the crafted canary's argument needs a model linear in its input)."""
    if not isinstance(spec, ModelSpec) or spec.name != "mlp" or list(dict(spec.kwargs).get("hidden", [None])):
        raise ParameterError(f"The 'spec' parameter of the worst-case final-model audit must be softmax regression "
                             f"(ModelSpec('mlp', ..., {{'hidden': []}})). Got {spec!r} instead.")
    from dpaudit.training.ensemble import init_model

    keys = [k for k in init_model(spec, 0).state_dict()]
    w = [k for k in keys if k.endswith("weight")]
    b = [k for k in keys if k.endswith("bias")]
    if len(w) != 1 or len(b) != 1:
        raise ParameterError(f"The 'spec' parameter of the worst-case final-model audit must have one linear layer. "
                             f"Got the state keys {keys} instead.")
    return w[0], b[0]


def dead_coordinates(X) -> np.ndarray:
    """Flat indices of the input coordinates that are exactly zero in every record of ``X`` (records first)."""
    a = np.asarray(X)
    if a.ndim < 2 or a.shape[0] == 0:
        raise ParameterError(f"The 'X' parameter of dead_coordinates must be a non-empty array of records. Got shape "
                             f"{a.shape} instead.")
    return np.flatnonzero(np.all(a.reshape(a.shape[0], -1) == 0, axis=0))


def crafted_canary(input_shape: Sequence[int], dead: np.ndarray, *, norm: float = 100.0) -> np.ndarray:
    """One input ``(1, *input_shape)`` (float32) equal to ``norm / sqrt(len(dead))`` on the ``dead`` coordinates and
    zero elsewhere (L2 norm ``norm``)."""
    norm = check_float(norm, "canary_norm", "crafted_canary", low=0.0, low_open=True, high=1e6)
    dead = np.asarray(dead, dtype=np.int64)
    size = int(np.prod(input_shape))
    if dead.size == 0:
        raise DataError("The base data has no input coordinate that is zero in every record: a crafted canary needs "
                        "one (the canary's gradient must reach weights no real record's gradient touches).")
    if dead.min() < 0 or dead.max() >= size:
        raise ParameterError(f"The 'dead' parameter of crafted_canary must index the {size} input coordinates. Got "
                             f"{dead.min()}..{dead.max()} instead.")
    x = np.zeros(size, np.float32)
    x[dead] = norm / np.sqrt(dead.size)
    return x.reshape(1, *input_shape)


def worst_case_init(spec: ModelSpec, X, y, dead: np.ndarray, *, seed: int = 0, epochs: int = 30,
                    batch_size: int = 100, lr: float = 0.05) -> dict[str, Any]:
    """Initial parameters for every audited model (module docstring): softmax regression pre-trained without DP on
    ``(X, y)`` (Adam, ``epochs`` passes), then the weights of the ``dead`` input coordinates and the biases set to 0.
    Returns a state dict of one model (``train_ensemble(init_state=...)`` copies it to every model)."""
    from dpaudit.training.ensemble import TrainConfig, train_ensemble

    from dpaudit.training.ensemble import init_model

    wkey, bkey = first_linear_keys(spec)
    epochs = check_int(epochs, "init_epochs", "worst_case_init", low=0, high=10_000)
    seed = check_int(seed, "seed", "worst_case_init", low=0)
    if epochs == 0:
        state = {k: v.detach().clone() for k, v in init_model(spec, seed).state_dict().items()}
    else:
        pre = train_ensemble(spec, [(np.asarray(X, np.float32), np.asarray(y).astype(np.int64))],
                             TrainConfig(epochs=epochs, batch_size=int(batch_size), optimizer="adam", lr=float(lr)),
                             seed=seed, progress=False)
        state = {k: v.detach().clone() for k, v in pre.state_dict(0).items()}
    state[wkey][:, np.asarray(dead, dtype=np.int64)] = 0.0
    state[bkey][:] = 0.0
    return state


def train_final_models(spec: ModelSpec, X, y, canary_x: np.ndarray, canary_y: int, included, config, *,
                       init_state: dict, seed: int, progress: Any = False):
    """Train ``len(included)`` models at once (:func:`~dpaudit.training.ensemble.train_ensemble`), model ``i`` on
    ``(X, y)`` plus the canary iff ``included[i]``, every model from ``init_state``. Returns the ensemble."""
    from dpaudit.training.ensemble import train_ensemble

    inc = np.asarray(included, dtype=bool).ravel()
    X = np.asarray(X, np.float32)
    y = np.asarray(y).astype(np.int64)
    with_c = (np.concatenate([X, np.asarray(canary_x, np.float32)]), np.concatenate([y, [int(canary_y)]]))
    datasets = [with_c if b else (X, y) for b in inc]
    return train_ensemble(spec, datasets, config, seed=seed, init_state=init_state, progress=progress)
