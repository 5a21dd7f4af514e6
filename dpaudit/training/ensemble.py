"""Train M models of one architecture on M data sets at once (the performance core).

PATE / FedKT / FREDY teachers, FedKT students, shadow models and LiRA reference models are all "many
small models of one architecture on different data". :func:`train_ensemble` stacks their parameters
(``torch.func.stack_module_state``) and runs every model's forward and backward pass in one vectorised
call (``torch.func.vmap`` over ``torch.func.functional_call``), so M models cost roughly one model's
Python overhead.

Semantics -- identical to training each model separately:

* Model ``i`` is initialised by ``build_model(spec)`` under ``torch.manual_seed(model_seed(seed, i))``
  (only the CPU generator matters; :func:`init_model` seeds only that one).
* Its batch order depends only on ``(seed, i)``: in epoch ``e`` it visits a permutation of its own
  ``n_i`` records drawn from ``SeedSequence([seed, i, e])`` in consecutive batches of ``batch_size``
  (the last batch of an epoch may be smaller, as with ``DataLoader(drop_last=False)``);
  :func:`batch_schedule` returns exactly these batches, so a plain per-model loop can replay them.
* Data sets are ragged: model ``i`` takes ``ceil(n_i / B)`` steps per epoch. Model ``i``'s steps form
  one stream of ``epochs * ceil(n_i / B)`` batches; global step ``t`` runs step ``t`` of every stream
  that is still going. A batch is gathered into a padded ``(M, B)`` block with a 0/1 mask: the loss is
  the mean over the real rows only, :class:`~dpaudit.training.models.MaskedBatchNorm` uses only the
  real rows, and a model whose stream has ended is not updated at all (parameters, optimiser moments,
  step counts and running statistics stay as they were).
* Adam and SGD (momentum, weight decay) run on the stacked tensors with per-model step counts
  (:class:`dpaudit.training.optim.StackedOptimizer`); each is elementwise the update ``torch.optim.Adam`` /
  ``torch.optim.SGD`` applies to one model.

DP-SGD (Abadi et al. 2016, with Poisson sampling as in Opacus): in every step model ``i`` includes each
of its records independently with probability ``q_i`` (``DPSGDConfig.sampling_rate`` or ``B / n_i``);
each per-example gradient is clipped to L2 norm ``C`` (factor ``min(1, C / (||g|| + 1e-6))``); the sum
gets Gaussian noise ``N(0, sigma^2 C^2 I)`` and is divided by the *expected* batch size ``q_i n_i`` (Opacus'
normalisation). The step is :class:`dpaudit.training.dpsgd.DPSGDStep`: ghost norms and one weighted matmul
per layer for the papers' architectures (no per-example gradient is materialised), ``vmap(grad)`` for
anything else (``dp_method``). Optional white-box gradient canaries (``canary_grads``, ``canary_mask``) are
added to model ``i``'s clipped sum, before the noise, in the steps its mask selects. An epoch is ``round(1 / q_i)`` steps
(:func:`dp_steps_per_epoch`), so the accountant's ``steps`` is ``epochs * round(1 / q_i)``. The Poisson
masks of model ``i`` depend only on ``(seed, i, epoch)``; the noise of global step ``t`` is drawn for all
models at once from generators seeded by ``(seed, t)`` (:class:`~dpaudit.training.dpsgd.BlockNoise`: fixed
blocks, drawn in parallel on the CPU, the same numbers whatever the thread count) -- reproducible, but,
unlike initialisation and batch order, it depends on the number of models.

Checkpoints (``checkpoint_dir``): every ``checkpoint_every`` rounds (see :func:`train_ensemble`) the stacked parameters,
buffers and optimiser state go to ``state.safetensors`` and the progress to ``state.json``, written as a
whole directory atomically. Every random draw is a pure function of ``(seed, model, epoch)`` or
``(seed, step)``, so the JSON state (seed, completed steps, data fingerprint) is all the RNG state there
is; resuming gives bit-identical results to an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch.func import functional_call, stack_module_state, vmap

from dpaudit._io import atomic_dir, read_json, write_json
from dpaudit.errors import DataError, ParameterError, check_bool, check_choice, check_float, check_int
from dpaudit.progress import Reporter, as_reporter
from dpaudit.training.limits import MAX_ENSEMBLE_BYTES, MAX_EPOCHS, MAX_RECORDS
from dpaudit.training.dpsgd import DP_METHODS, BlockNoise, DPSGDStep, cross_entropy_rows
from dpaudit.training.models import (
    Classifier,
    ModelSpec,
    build_estimator,
    build_model,
    has_batch_norm,
)
from dpaudit.training.optim import StackedOptimizer

__all__ = [
    "DPSGDConfig",
    "TrainConfig",
    "Ensemble",
    "train_ensemble",
    "fit_classifier",
    "model_seed",
    "init_model",
    "batch_schedule",
    "poisson_schedule",
    "dp_sampling_rate",
    "dp_steps_per_epoch",
    "Classifier",
]

_CKPT_VERSION = 1
DP_DEFAULT_METHOD = "auto"


@dataclass(frozen=True)
class DPSGDConfig:
    """DP-SGD settings.

    Attributes
    ----------
    noise_multiplier : float
        sigma >= 0: the Gaussian noise standard deviation is ``sigma * max_grad_norm``.
    max_grad_norm : float
        C > 0: every per-example gradient is clipped to L2 norm at most C.
    sampling_rate : float, optional
        Poisson sampling rate q in (0, 1]; ``None`` means ``min(1, batch_size / n_i)`` per model.
    """

    noise_multiplier: float
    max_grad_norm: float
    sampling_rate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_float(self.noise_multiplier, "noise_multiplier", "DPSGDConfig", low=0.0))
        object.__setattr__(self, "max_grad_norm", check_float(self.max_grad_norm, "max_grad_norm", "DPSGDConfig", low=0.0, low_open=True))
        if self.sampling_rate is not None:
            object.__setattr__(self, "sampling_rate", check_float(self.sampling_rate, "sampling_rate", "DPSGDConfig", low=0.0, high=1.0, low_open=True))

    def to_dict(self) -> dict:
        return {"noise_multiplier": self.noise_multiplier, "max_grad_norm": self.max_grad_norm,
                "sampling_rate": self.sampling_rate}

    @classmethod
    def from_dict(cls, d: dict) -> "DPSGDConfig":
        """From :meth:`to_dict` output; an unknown or missing field is a ParameterError naming it."""
        _check_fields(d, ("noise_multiplier", "max_grad_norm", "sampling_rate"), "DPSGDConfig",
                      required=("noise_multiplier", "max_grad_norm"))
        return cls(d["noise_multiplier"], d["max_grad_norm"], d.get("sampling_rate"))


def _check_fields(d: Any, known: tuple[str, ...], owner: str, required: tuple[str, ...] = ()) -> None:
    if not isinstance(d, Mapping):
        raise ParameterError(f"The fields of {owner} must be a table / object. Got {d!r:.80} instead.")
    unknown = sorted(str(k) for k in d if k not in known)
    if unknown:
        raise ParameterError(f"Unknown field(s) {', '.join(repr(k) for k in unknown[:5])} of {owner}; its fields are "
                             f"{', '.join(known)}. Got {unknown[0]} instead.")
    missing = [k for k in required if k not in d]
    if missing:
        raise ParameterError(f"The '{missing[0]}' parameter of {owner} is required. Got nothing instead.")


@dataclass(frozen=True)
class TrainConfig:
    """How to train one torch model (also the recipe stored in a release).

    Attributes
    ----------
    epochs : int >= 1
    batch_size : int >= 1
        Mini-batch size B (without DP); with DP the default Poisson rate is B / n.
    optimizer : {"adam", "sgd"}
    lr : float > 0
    momentum : float in [0, 1)
        SGD momentum (ignored by Adam; Adam uses betas (0.9, 0.999), eps 1e-8 as ``torch.optim.Adam``).
    weight_decay : float >= 0
        L2 penalty added to the gradient (``torch.optim`` semantics, not decoupled).
    dp : DPSGDConfig, optional
    """

    epochs: int = 20
    batch_size: int = 64
    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.0
    weight_decay: float = 0.0
    dp: DPSGDConfig | None = None

    def __post_init__(self) -> None:
        o = "TrainConfig"
        object.__setattr__(self, "epochs", check_int(self.epochs, "epochs", o, low=1, high=MAX_EPOCHS))
        object.__setattr__(self, "batch_size", check_int(self.batch_size, "batch_size", o, low=1, high=MAX_RECORDS))
        check_choice(self.optimizer, "optimizer", o, ("adam", "sgd"))
        object.__setattr__(self, "lr", check_float(self.lr, "lr", o, low=0.0, low_open=True))
        object.__setattr__(self, "momentum", check_float(self.momentum, "momentum", o, low=0.0, high=1.0, high_open=True))
        object.__setattr__(self, "weight_decay", check_float(self.weight_decay, "weight_decay", o, low=0.0))
        if isinstance(self.dp, dict):
            object.__setattr__(self, "dp", DPSGDConfig.from_dict(self.dp))
        if self.dp is not None and not isinstance(self.dp, DPSGDConfig):
            raise ParameterError(f"The 'dp' parameter of TrainConfig must be a DPSGDConfig or None. Got {self.dp!r} instead.")

    def to_dict(self) -> dict:
        return {"epochs": self.epochs, "batch_size": self.batch_size, "optimizer": self.optimizer, "lr": self.lr,
                "momentum": self.momentum, "weight_decay": self.weight_decay,
                "dp": None if self.dp is None else self.dp.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """From :meth:`to_dict` output (missing fields take their defaults); an unknown field -- a typo such as
        ``epocs`` -- is a ParameterError naming it, never silently ignored."""
        _check_fields(d, ("epochs", "batch_size", "optimizer", "lr", "momentum", "weight_decay", "dp"), "TrainConfig")
        dp = d.get("dp")
        return cls(epochs=d.get("epochs", 20), batch_size=d.get("batch_size", 64), optimizer=d.get("optimizer", "adam"),
                   lr=d.get("lr", 1e-3), momentum=d.get("momentum", 0.0), weight_decay=d.get("weight_decay", 0.0),
                   dp=None if dp is None else DPSGDConfig.from_dict(dp))


# --------------------------------------------------------------------------------------------------
# seeds and schedules: pure functions of (seed, model index, epoch)


def model_seed(seed: int, i: int) -> int:
    """The torch seed that initialises model ``i`` of an ensemble trained with ``seed``."""
    return int(np.random.SeedSequence([int(seed), int(i), 0x1A17]).generate_state(1, np.uint64)[0] % (2**63 - 1))


def init_model(spec: ModelSpec, seed: int, i: int = 0) -> torch.nn.Module:
    """Model ``i``'s initial weights, exactly as :func:`train_ensemble` starts it (global RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        # the CPU generator is all build_model draws from; torch.manual_seed would also queue a lazy
        # CUDA seeding (with a stack trace) on every call, ~0.5 ms each
        torch.default_generator.manual_seed(model_seed(seed, i))
        return build_model(spec)


def _perm(n: int, seed: int, i: int, epoch: int) -> np.ndarray:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(i), int(epoch), 0xBA7C])).permutation(n)


def batch_schedule(n: int, batch_size: int, epochs: int, seed: int, i: int = 0) -> list[np.ndarray]:
    """Model ``i``'s batches (local index arrays into its own data), in training order, without DP."""
    out = []
    for e in range(epochs):
        p = _perm(n, seed, i, e)
        out += [p[s : s + batch_size] for s in range(0, n, batch_size)]
    return out


def dp_sampling_rate(n: int, config: TrainConfig) -> float:
    """Poisson rate q of a model with ``n`` records: ``config.dp.sampling_rate`` or ``min(1, B / n)``."""
    if config.dp is None:
        raise ParameterError("dp_sampling_rate needs a TrainConfig with dp set.")
    if config.dp.sampling_rate is not None:
        return float(config.dp.sampling_rate)
    return min(1.0, config.batch_size / max(int(n), 1))


def dp_steps_per_epoch(n: int, config: TrainConfig) -> int:
    """Steps per epoch under DP-SGD: ``max(1, round(1 / q))`` (so total steps = epochs x this)."""
    return max(1, int(round(1.0 / dp_sampling_rate(n, config))))


def _poisson_masks(n: int, q: float, steps: int, seed: int, i: int, epoch: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(i), int(epoch), 0x9015]))
    return rng.random((steps, n)) < q


def poisson_schedule(n: int, config: TrainConfig, seed: int, i: int = 0) -> list[np.ndarray]:
    """Model ``i``'s Poisson-sampled batches under DP-SGD (local index arrays, possibly empty)."""
    q, s = dp_sampling_rate(n, config), dp_steps_per_epoch(n, config)
    out = []
    for e in range(config.epochs):
        m = _poisson_masks(n, q, s, seed, i, e)
        out += [np.flatnonzero(row) for row in m]
    return out


def _step_seed(seed: int, t: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(t), 0x7015E]).generate_state(1, np.uint64)[0] % (2**63 - 1))


# --------------------------------------------------------------------------------------------------
# the ensemble


class Ensemble:
    """M trained models of one architecture, parameters stacked along a leading axis of size M.

    Attributes
    ----------
    spec : ModelSpec
    num_models : int
    params, buffers : dict[str, torch.Tensor]
        Stacked tensors (CPU), shapes ``(M, *shape)``.
    config : TrainConfig
    seed : int
    history : list of dict
        Evaluations during training: ``{"epoch", "accuracy": [M floats], "loss": [M floats]}``.
    """

    def __init__(self, spec: ModelSpec, params: dict, buffers: dict, *, config: TrainConfig, seed: int,
                 history: list | None = None, device: str | torch.device = "cpu"):
        self.spec = spec
        self.params = {k: v.detach() for k, v in params.items()}
        self.buffers = {k: v.detach() for k, v in buffers.items()}
        self.num_models = int(next(iter(self.params.values())).shape[0])
        self.config = config
        self.seed = seed
        self.history = list(history or [])
        self.device = torch.device(device)

    def __len__(self) -> int:
        return self.num_models

    def _on(self, device):
        p = {k: v.to(device) for k, v in self.params.items()}
        b = {k: v.to(device) for k, v in self.buffers.items()}
        return p, b

    def logits(self, X, *, batch_size: int = 1024, models: Sequence[int] | None = None) -> np.ndarray:
        """Every model's logits on the same inputs: array (M, n, C) (float32)."""
        X = np.asarray(X, dtype=np.float32)
        if tuple(X.shape[1:]) != self.spec.input_shape:
            raise DataError(f"Ensemble({self.spec.name}) expects inputs of shape (n, {self.spec.input_shape}); got {X.shape}.")
        dev = self.device
        params, buffers = self._on(dev)
        if models is not None:
            idx = torch.as_tensor(list(models), dtype=torch.long, device=dev)
            params = {k: v[idx] for k, v in params.items()}
            buffers = {k: v[idx] for k, v in buffers.items()}
        base = build_model(self.spec).to(dev).eval()

        def f(p, b, x):
            return functional_call(base, (p, b), (x,))

        fv = vmap(f, in_dims=(0, 0, None))
        M = next(iter(params.values())).shape[0]
        out = np.empty((M, len(X), self.spec.num_classes), dtype=np.float32)
        with torch.no_grad():
            for s in range(0, len(X), batch_size):
                xb = torch.from_numpy(X[s : s + batch_size]).to(dev)
                out[:, s : s + len(xb)] = fv(params, buffers, xb).float().cpu().numpy()
        return out

    def predict_proba(self, X, **kw) -> np.ndarray:
        """Every model's class probabilities on the same inputs: array (M, n, C), float64, rows sum to 1."""
        z = self.logits(X, **kw).astype(np.float64)
        z -= z.max(axis=2, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=2, keepdims=True)

    def state_dict(self, i: int) -> dict[str, torch.Tensor]:
        """Model ``i``'s weights, keyed like ``build_model(spec).state_dict()``."""
        i = check_int(i, "i", "Ensemble.state_dict", low=0, high=self.num_models - 1)
        keys = build_model(self.spec).state_dict().keys()
        both = {**self.params, **self.buffers}
        return {k: both[k][i].clone() for k in keys}

    def member(self, i: int) -> Classifier:
        """Model ``i`` as a standalone :class:`Classifier` (CPU)."""
        module = build_model(self.spec)
        module.load_state_dict(self.state_dict(i))
        return Classifier(self.spec, module=module)

    def members(self) -> list[Classifier]:
        return [self.member(i) for i in range(self.num_models)]


# --------------------------------------------------------------------------------------------------
# training


def _validate_datasets(spec: ModelSpec, datasets) -> list[tuple[np.ndarray, np.ndarray]]:
    if not isinstance(datasets, (list, tuple)) or len(datasets) == 0:
        raise ParameterError("The 'datasets' parameter of train_ensemble must be a non-empty sequence of (X, y) pairs.")
    out = []
    for k, pair in enumerate(datasets):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ParameterError(f"datasets[{k}] of train_ensemble must be an (X, y) pair.")
        X = np.ascontiguousarray(pair[0], dtype=np.float32)
        y = np.ascontiguousarray(pair[1]).astype(np.int64)
        if X.ndim >= 1 and tuple(X.shape[1:]) != spec.input_shape:
            if X.ndim == 2 and X.shape[1] == math.prod(spec.input_shape):
                X = X.reshape((-1,) + spec.input_shape)
            else:
                raise DataError(f"datasets[{k}]: X has shape {X.shape}; expected (n, {spec.input_shape}).")
        if y.ndim != 1 or len(y) != len(X):
            raise DataError(f"datasets[{k}]: y has shape {y.shape}, X has {len(X)} rows.")
        if len(y) == 0:
            raise DataError(f"datasets[{k}] is empty; every model needs at least one record.")
        if y.min() < 0 or y.max() >= spec.num_classes:
            raise DataError(f"datasets[{k}]: labels must lie in [0, {spec.num_classes}).")
        out.append((X, y))
    return out


def _fingerprint(spec, config, seed, data, init_state, canary_grads=None) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps([spec.to_dict(), config.to_dict(), int(seed)], sort_keys=True).encode())
    for X, y in data:
        h.update(np.int64(len(y)).tobytes())
        h.update(X.tobytes())
        h.update(y.tobytes())
    if init_state is not None:
        for k in sorted(init_state):
            h.update(k.encode())
            h.update(init_state[k].detach().cpu().contiguous().numpy().tobytes())
    for k in sorted(canary_grads or {}):  # the canaries (their inclusion masks are the caller's to keep fixed)
        h.update(b"canary:" + k.encode())
        h.update(canary_grads[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _resolve_device(device) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError(f"The 'device' parameter of train_ensemble must name a torch device. Got {device!r} instead.") from None


def _fresh_state(spec: ModelSpec, M: int, seed: int, first: int = 0) -> tuple[dict, dict]:
    """``init_model(spec, seed, first + i)`` for ``i < M``, stacked, without building M modules.

    Building a module costs about a millisecond of Python; re-initialising one module in place is far
    cheaper. ``build_model`` draws from the RNG only in the submodules' ``reset_parameters`` (in
    registration order), so calling those under model ``i``'s seed reproduces its weights. Model 0 is
    also built the plain way and compared (weights and the generator state after the draws); an
    architecture that draws otherwise falls back to building every module.
    """
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(model_seed(seed, first))
        first_model = build_model(spec)
        rng_after_first = torch.default_generator.get_state()
    template = init_model(spec, seed, first)  # re-initialised in place for every model
    resettable = [m for m in template.modules() if hasattr(m, "reset_parameters")]
    named_p, named_b = dict(template.named_parameters()), dict(template.named_buffers())
    params = {k: torch.empty((M,) + v.shape, dtype=v.dtype) for k, v in named_p.items()}
    buffers = {k: torch.empty((M,) + v.shape, dtype=v.dtype) for k, v in named_b.items()}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        for i in range(M):
            torch.default_generator.manual_seed(model_seed(seed, first + i))
            for m in resettable:
                m.reset_parameters()
            if i == 0 and not (
                torch.equal(torch.default_generator.get_state(), rng_after_first)
                and all(torch.equal(v, first_model.state_dict()[k]) for k, v in template.state_dict().items())
            ):
                params, buffers = stack_module_state([init_model(spec, seed, first + j) for j in range(M)])
                return {k: v.detach() for k, v in params.items()}, {k: v.detach() for k, v in buffers.items()}
            for d, named in ((params, named_p), (buffers, named_b)):
                for k, v in named.items():
                    d[k][i] = v
    return params, buffers


def _initial_state(spec, M, seed, init_state, device, first=0):
    if init_state is None:
        params, buffers = _fresh_state(spec, M, seed, first)
    else:
        ref = build_model(spec)
        params, buffers = {}, {}
        named_p = dict(ref.named_parameters())
        named_b = dict(ref.named_buffers())
        for k, v0 in {**named_p, **named_b}.items():
            if k not in init_state:
                raise DataError(f"init_state lacks the tensor {k!r} of {spec.name}.")
            v = torch.as_tensor(init_state[k]).detach().to(torch.float32 if v0.is_floating_point() else v0.dtype)
            if tuple(v.shape) == tuple(v0.shape):
                v = v.unsqueeze(0).expand((M,) + tuple(v0.shape)).clone()
            elif tuple(v.shape) != (M,) + tuple(v0.shape):
                raise DataError(f"init_state[{k!r}] has shape {tuple(v.shape)}; expected {tuple(v0.shape)} or {(M,) + tuple(v0.shape)}.")
            (params if k in named_p else buffers)[k] = v.clone()
    params = {k: v.to(device).contiguous() for k, v in params.items()}
    buffers = {k: v.to(device).contiguous() for k, v in buffers.items()}
    return params, buffers


def train_ensemble(
    spec: ModelSpec,
    datasets: Sequence[tuple[np.ndarray, np.ndarray]],
    config: TrainConfig,
    *,
    seed: int,
    device=None,
    checkpoint_dir=None,
    progress: "bool | Reporter" = False,
    init_state: dict | None = None,
    checkpoint_every: int = 1,
    eval_data: tuple[np.ndarray, np.ndarray] | None = None,
    eval_every: int = 1,
    stop_after_epochs: int | None = None,
    dp_chunk_bytes: int = 1 << 29,
    dp_method: str = DP_DEFAULT_METHOD,
    canary_grads: dict | None = None,
    canary_mask=None,
    canary_hook=None,
    model_offset: int = 0,
) -> Ensemble:
    """Train M models of ``spec``, model ``i`` on ``datasets[i]``, all at once.

    Parameters
    ----------
    spec : ModelSpec
        A torch architecture (see :mod:`dpaudit.training.models`).
    datasets : sequence of (X_i, y_i)
        ``X_i`` float array ``(n_i, *spec.input_shape)``, ``y_i`` int labels in ``[0, C)``; sizes may differ.
    config : TrainConfig
        Epochs, batch size, optimiser, and optional DP-SGD (see the module docstring for exact semantics).
    seed : int
        Model ``i``'s initialisation and batch order depend only on ``(seed, i)``.
    device : str or torch.device, optional
        Default: CUDA when available, else CPU.
    checkpoint_dir : path, optional
        Save every ``checkpoint_every`` rounds; if a matching checkpoint exists, resume from it.
    progress : bool or Reporter
        The epochs as one stage of :mod:`dpaudit.progress` (a bar with its ETA on a terminal, a few lines
        otherwise); False (default): nothing.
    init_state : dict, optional
        Start from these weights instead of a fresh init: a ``state_dict`` of one model (copied to every
        model) or of stacked tensors ``(M, *shape)``.
    eval_data : (X, y), optional
        Evaluate every model on it every ``eval_every`` rounds; results in ``Ensemble.history``.
    stop_after_epochs : int, optional
        Stop after this many rounds (for splitting a run across calls with ``checkpoint_dir``).
    dp_chunk_bytes : int
        Memory budget for one DP-SGD step's per-example work; models are processed in chunks that fit.
    dp_method : {"auto", "ghost", "per_example"}
        How DP-SGD gets its clipped sums (:class:`dpaudit.training.dpsgd.DPSGDStep`): ghost norms without
        per-example gradients where the architecture allows (``"auto"``), or ``vmap(grad)`` per example.
    canary_grads : dict, optional
        DP only: white-box gradient canaries, ``{name: (M, *shape)}`` over every parameter, each model's of L2
        norm <= ``max_grad_norm``; added to the clipped sum before the noise, not clipped again.
    canary_mask : array (epochs * S, M) of bool, or callable ``t -> (M,) bool``, optional
        Whether model ``i`` includes its canary in global step ``t`` (default: every step). A model's
        steps after its stream has ended are not run, whatever the mask says.
    canary_hook : object, optional
        DP only, no checkpoints: many Dirac canaries per model (one-run audits; see
        :class:`dpaudit.training.canaries.DiracHook`). ``extra_gradient(t, models, q)`` returns None or
        ``{name: (len(models), *shape)}``, the sum of the canaries sampled in global step ``t`` (each of norm <= C),
        which joins the noised sum (dividing by ``q n`` commutes with adding it, so this equals adding it before
        the noise); ``observe(t, models, noised_sum)`` then sees the step's noised sum, before normalisation.

    model_offset : int
        Without DP-SGD: model ``i`` of this call is model ``model_offset + i`` of a larger ensemble trained with
        the same ``seed`` (its initialisation and batch order), so a party can train its own models of a group
        alone (the Flower engine's clients). DP-SGD's noise depends on every model of the group, so an offset
        is refused there.

    Training runs ``epochs`` *rounds* of ``S = max_i steps_per_epoch_i`` global steps (a round is one
    epoch of the largest data set). Model ``i``'s own step stream continues across rounds, so a model with
    fewer steps per epoch completes its ``epochs`` epochs in fewer rounds and then stays frozen; checkpoints,
    ``eval_every``, ``checkpoint_every`` and ``stop_after_epochs`` count rounds.
    """
    owner = "train_ensemble"
    if not isinstance(spec, ModelSpec) or not spec.is_torch:
        raise ParameterError(f"The 'spec' parameter of {owner} must be a torch ModelSpec. Got {spec!r} instead.")
    if not isinstance(config, TrainConfig):
        raise ParameterError(f"The 'config' parameter of {owner} must be a TrainConfig. Got {type(config).__name__} instead.")
    seed = check_int(seed, "seed", owner, low=0)
    if not isinstance(progress, Reporter):
        check_bool(progress, "progress", owner)
    checkpoint_every = check_int(checkpoint_every, "checkpoint_every", owner, low=1)
    eval_every = check_int(eval_every, "eval_every", owner, low=1)
    if stop_after_epochs is not None:
        stop_after_epochs = check_int(stop_after_epochs, "stop_after_epochs", owner, low=0)
    check_choice(dp_method, "dp_method", owner, DP_METHODS)
    model_offset = check_int(model_offset, "model_offset", owner, low=0)
    if model_offset and config.dp is not None:
        raise ParameterError(f"The 'model_offset' parameter of {owner} needs training without DP-SGD (the noise of a "
                             f"step depends on every model of the group). Got model_offset={model_offset} with config.dp set.")
    if canary_grads is not None and config.dp is None:
        raise ParameterError("The 'canary_grads' parameter of train_ensemble needs DP-SGD (config.dp); got config.dp = None.")
    if canary_hook is not None and (config.dp is None or checkpoint_dir is not None):
        raise ParameterError(f"The 'canary_hook' parameter of {owner} needs DP-SGD (config.dp set) and no "
                             f"checkpoint_dir. Got dp={config.dp!r}, checkpoint_dir={checkpoint_dir!r} instead.")
    data = _validate_datasets(spec, datasets)
    dev = _resolve_device(device)

    plan = _plan(spec, config, data, seed, dev)
    plan.first = model_offset
    _check_state_size(spec, plan.M, dev)
    model = _build_step_model(spec, config, dev, dp_method)
    params, buffers = _initial_state(spec, plan.M, seed, init_state, dev, model_offset)
    opt = StackedOptimizer(params, kind=config.optimizer, lr=config.lr, momentum=config.momentum,
                           weight_decay=config.weight_decay)
    canaries = _Canaries.build(canary_grads, canary_mask, params, dev)
    history: list[dict] = []
    start_epoch = 0
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
    fp = _fingerprint(spec, config, seed, data, init_state, canaries and canaries.grads) if ckpt is not None else None
    if fp is not None and model_offset:
        fp = f"{fp}+offset{model_offset}"
    if ckpt is not None:
        start_epoch, history = _maybe_resume(ckpt, fp, params, buffers, opt)

    end_epoch = config.epochs if stop_after_epochs is None else min(config.epochs, stop_after_epochs)
    todo = end_epoch - start_epoch
    stage = as_reporter(progress).stage(f"training {plan.M} x {spec.name}, {todo} epoch(s)", total=todo) if todo > 0 \
        else contextlib.nullcontext(None)
    with stage as bar:
        for g in range(start_epoch, end_epoch):
            _train_round(g, plan, model, params, buffers, opt, config, seed, dp_chunk_bytes, canaries, canary_hook)
            done = g + 1
            if eval_data is not None and (done % eval_every == 0 or done == config.epochs):
                history.append(_evaluate(spec, params, buffers, eval_data, done, dev, config, seed))
            if ckpt is not None and (done % checkpoint_every == 0 or done == end_epoch):
                _save_checkpoint(ckpt, fp, done, params, buffers, opt, history, spec, config, seed, plan.sizes)
            bar.advance()
    return Ensemble(spec, {k: v.cpu() for k, v in params.items()}, {k: v.cpu() for k, v in buffers.items()},
                    config=config, seed=seed, history=history, device=dev)


def _check_state_size(spec: ModelSpec, M: int, dev: torch.device) -> None:
    """Refuse, before allocating anything, a training state (weights, gradients, two optimiser slots and the
    buffers of ``M`` models) larger than :data:`~dpaudit.training.limits.MAX_ENSEMBLE_BYTES` or, on the CPU,
    than this machine's physical memory (the model is built on torch's meta device, which allocates nothing)."""
    with torch.device("meta"):
        base = build_model(spec)
    per_model = sum(4 * p.numel() * p.element_size() for p in base.parameters())
    per_model += sum(b.numel() * b.element_size() for b in base.buffers())
    need = M * per_model
    cap, where = MAX_ENSEMBLE_BYTES, "supported"
    if dev.type == "cpu":
        try:
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
            ram = cap
        if 0 < ram < cap:
            cap, where = ram, "this machine's memory,"
    if need > cap:
        raise ParameterError(f"Training {M} {spec.name} models at once needs about {need / 2**30:.1f} GiB of training "
                             f"state, more than {where} {cap / 2**30:.1f} GiB; use fewer teachers/clients or a "
                             "smaller model.")


@dataclass
class _Plan:
    """What a run iterates over: the flat data on the device and every model's step stream.

    Model ``i``'s record ``j`` is row ``offsets[i] + j`` of ``X``/``y``; it takes ``steps_per_epoch[i]``
    steps per epoch and ``total_steps[i]`` in all; a round is ``S`` global steps; ``q`` holds the Poisson
    rates under DP (None without).
    """

    M: int
    sizes: np.ndarray
    offsets: np.ndarray
    X: torch.Tensor
    y: torch.Tensor
    steps_per_epoch: np.ndarray
    total_steps: np.ndarray
    S: int
    q: np.ndarray | None
    first: int = 0  # model i of the plan is model first + i for its seeds (train_ensemble's model_offset)


def _plan(spec, config: TrainConfig, data, seed: int, dev) -> _Plan:
    sizes = np.array([len(y) for _, y in data], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    X_all = torch.from_numpy(np.concatenate([X for X, _ in data])).to(dev)
    y_all = torch.from_numpy(np.concatenate([y for _, y in data])).to(dev)
    if config.dp is None:
        spe = np.array([math.ceil(n / config.batch_size) for n in sizes], dtype=np.int64)
        q = None
    else:
        q = np.array([dp_sampling_rate(n, config) for n in sizes])
        spe = np.array([dp_steps_per_epoch(n, config) for n in sizes], dtype=np.int64)
    return _Plan(M=len(data), sizes=sizes, offsets=offsets, X=X_all, y=y_all, steps_per_epoch=spe,
                 total_steps=spe * config.epochs, S=int(spe.max()), q=q)


@dataclass
class _StepModel:
    """The module that defines the forward pass, the DP-SGD step for it (None without DP), and its stacked
    program for plain training (None when it has none: ``vmap`` over ``functional_call`` then)."""

    base: torch.nn.Module
    dp_step: DPSGDStep | None
    plain: DPSGDStep | None = None


def _build_step_model(spec: ModelSpec, config: TrainConfig, dev, dp_method: str) -> _StepModel:
    base = build_model(spec).to(dev)
    if config.dp is not None and has_batch_norm(base):
        raise ParameterError(
            f"DP-SGD needs per-example gradients, which batch normalisation does not have; build {spec.name} with norm='group'."
        )
    base.train()
    if config.dp is not None:
        return _StepModel(base, DPSGDStep(base, method=dp_method))
    stacked = DPSGDStep(base)  # its stacked forward program (bmm per layer), if the architecture has one
    return _StepModel(base, None, stacked if stacked.method == "ghost" else None)


@dataclass
class _Canaries:
    """White-box gradient canaries on the device and their per-step inclusion (see :func:`train_ensemble`)."""

    grads: dict
    mask: object

    @classmethod
    def build(cls, grads, mask, params, dev) -> "_Canaries | None":
        if grads is None:
            return None
        if not isinstance(grads, dict) or set(grads) != set(params):
            raise ParameterError(f"The 'canary_grads' parameter of train_ensemble must be a dict over every parameter "
                                 f"({sorted(params)}).")
        out = {}
        for k, v in params.items():
            t = torch.as_tensor(grads[k]).to(dev, v.dtype)
            if tuple(t.shape) != tuple(v.shape):
                raise DataError(f"canary_grads[{k!r}] has shape {tuple(t.shape)}; expected {tuple(v.shape)}.")
            out[k] = t
        return cls(out, mask)

    def at(self, t: int, sel_np, dev):
        """(grads, (M_active,) float mask) for global step ``t`` and the stepped models ``sel_np``."""
        m = np.ones(next(iter(self.grads.values())).shape[0], dtype=bool) if self.mask is None else (
            self.mask(t) if callable(self.mask) else np.asarray(self.mask)[t])
        m = torch.from_numpy(np.asarray(m, dtype=np.float32)[sel_np]).to(dev)
        if isinstance(sel_np, slice):
            return self.grads, m
        sel = torch.from_numpy(sel_np).to(dev)
        return {k: v.index_select(0, sel) for k, v in self.grads.items()}, m


def _train_round(g: int, plan: _Plan, model: _StepModel, params, buffers, opt: StackedOptimizer,
                 config: TrainConfig, seed: int, chunk_bytes: int, canaries: _Canaries | None = None,
                 canary_hook=None) -> None:
    """Round ``g``: its ``S`` global steps, each stepping the models whose streams are still going."""
    S, M, dev = plan.S, plan.M, plan.X.device
    if config.dp is None:
        idx, mask = _chunk_plain(g, S, plan.steps_per_epoch, plan.total_steps, plan.sizes, plan.offsets,
                                 config.batch_size, seed, config.epochs, plan.first)
    else:
        idx, mask = _chunk_dp(g, S, plan.steps_per_epoch, plan.total_steps, plan.sizes, plan.offsets, plan.q, seed)
    idx_t = torch.from_numpy(idx).to(dev)
    mask_t = torch.from_numpy(mask).to(dev)
    steps = np.arange(g * S, (g + 1) * S)
    active_all = steps[:, None] < plan.total_steps[None, :]
    for s in range(S):
        active = active_all[s]
        n_active = int(active.sum())
        if n_active == 0:
            continue
        rows = idx_t[s]
        if n_active == M:  # everyone steps: work on the stacked tensors in place
            p_step, b_step, sel, sel_np = params, buffers, None, slice(None)
        else:  # some streams have ended: compute only the active models, then scatter back
            sel_np = np.flatnonzero(active)
            sel = torch.from_numpy(sel_np).to(dev)
            p_step = {k: v.index_select(0, sel) for k, v in params.items()}
            b_step = {k: v.index_select(0, sel) for k, v in buffers.items()}
            rows = rows.index_select(0, sel)
        xb, yb = plan.X[rows], plan.y[rows]
        mb = mask_t[s] if sel is None else mask_t[s].index_select(0, sel)
        if model.dp_step is None:
            grads = model.plain.mean_loss_grads(p_step, xb, yb, mb) if model.plain is not None else None
            if grads is None:
                grads = _plain_grads(model.base, p_step, b_step, xb, yb, mb)
        else:
            cg, cm = canaries.at(g * S + s, sel_np, dev) if canaries is not None else (None, None)
            grads = _private_grads(model.dp_step, p_step, b_step, xb, yb, mb, config.dp, plan.q[sel_np],
                                   plan.sizes[sel_np], seed, g * S + s, chunk_bytes, cg, cm)
            if canary_hook is not None:
                _apply_canary_hook(canary_hook, grads, g * S + s, np.arange(M)[sel_np], plan.q[sel_np],
                                   plan.sizes[sel_np])
        opt.update(p_step, grads, sel)
        if sel is not None:
            for k, v in p_step.items():
                params[k].index_copy_(0, sel, v)
            for k, v in b_step.items():
                buffers[k].index_copy_(0, sel, v)


def _chunk_plain(g, S, spe, total_steps, sizes, offsets, B, seed, epochs, first=0):
    """Index and mask blocks (S, M, W) for round g without DP, W = min(B, largest data set)."""
    M = len(sizes)
    W = int(min(B, sizes.max()))  # no batch is wider than the largest data set
    local = np.full((S, M, W), -1, dtype=np.int64)  # model i's record index per slot, -1 = padding
    t0, t1 = g * S, (g + 1) * S
    for i in range(M):
        s_i, n = int(spe[i]), int(sizes[i])
        lo, hi = t0, min(t1, int(total_steps[i]))
        for e in range(lo // s_i, (hi - 1) // s_i + 1) if hi > lo else ():
            padded = np.full(s_i * B, -1, dtype=np.int64)
            padded[:n] = _perm(n, seed, first + i, e)
            a, b = max(lo, e * s_i), min(hi, (e + 1) * s_i)  # this epoch's steps within the round
            local[a - t0 : b - t0, i] = padded.reshape(s_i, B)[a - e * s_i : b - e * s_i, :W]
    valid = local >= 0
    idx = np.where(valid, local, 0) + offsets[None, :, None]
    return idx, valid.astype(np.float32)


def _chunk_dp(g, S, spe, total_steps, sizes, offsets, q, seed):
    """Index and mask blocks (S, M, W) for round g with Poisson sampling; W = largest batch."""
    M = len(sizes)
    t0, t1 = g * S, (g + 1) * S
    per_model: list[list[np.ndarray]] = []
    W = 1
    for i in range(M):
        s_i, n = int(spe[i]), int(sizes[i])
        lo, hi = t0, min(t1, int(total_steps[i]))
        batches: list[np.ndarray] = []
        if hi > lo:
            e_lo, e_hi = lo // s_i, (hi - 1) // s_i
            for e in range(e_lo, e_hi + 1):
                masks = _poisson_masks(n, float(q[i]), s_i, seed, i, e)
                for j in range(s_i):
                    t = e * s_i + j
                    if lo <= t < hi:
                        batches.append(np.flatnonzero(masks[j]))
        per_model.append(batches)
        W = max(W, max((len(b) for b in batches), default=0))
    idx = np.zeros((S, M, W), dtype=np.int64)
    mask = np.zeros((S, M, W), dtype=np.float32)
    for i, batches in enumerate(per_model):
        for s, b in enumerate(batches):
            idx[s, i, : len(b)] = b + offsets[i]
            idx[s, i, len(b) :] = offsets[i]
            mask[s, i, : len(b)] = 1.0
    return idx, mask


def _plain_grads(base, params, buffers, xb, yb, mb):
    """Gradients of every model's masked mean cross-entropy on its batch (rows of ``xb``: (M, W, ...))."""

    def forward(p, b, x, m):
        return functional_call(base, (p, b), (x,), {"sample_mask": m})

    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    logits = vmap(forward, in_dims=(0, 0, 0, 0), randomness="different")(leaves, buffers, xb, mb)  # (M, W, C)
    ce = cross_entropy_rows(logits, yb)  # (M, W); the loss needs no vmap
    losses = (ce * mb).sum(1) / mb.sum(1).clamp(min=1.0)
    gs = torch.autograd.grad(losses.sum(), list(leaves.values()))
    return dict(zip(leaves.keys(), gs))


def _apply_canary_hook(hook, grads: dict, t: int, models: np.ndarray, q, sizes) -> None:
    """``train_ensemble``'s ``canary_hook`` on one step's private gradients (in place), see its docstring."""
    extra = hook.extra_gradient(t, models, q)
    noised = {}
    for k, v in grads.items():
        e = torch.as_tensor(q * sizes, dtype=v.dtype, device=v.device).reshape((-1,) + (1,) * (v.dim() - 1))
        if extra is not None:
            v.add_(extra[k].to(v.device, v.dtype) / e)
        noised[k] = v * e
    hook.observe(t, models, noised)


def _private_grads(step: DPSGDStep, params, buffers, xb, yb, mb, dp: DPSGDConfig, q, sizes, seed, t, chunk_bytes,
                   canary_grads=None, canary_mask=None):
    """Clipped, noised, normalised per-model gradients (DP-SGD) for global step t; the noise of step t is
    drawn for all stepped models at once, a function of ``(seed, t)`` (:class:`~dpaudit.training.dpsgd.BlockNoise`)."""
    dev = mb.device
    expected = torch.as_tensor(q * sizes, dtype=torch.float32, device=dev)
    return step.private_grads(params, buffers, xb, yb, mb, max_grad_norm=dp.max_grad_norm,
                              noise_multiplier=dp.noise_multiplier, expected_batch=expected,
                              noise=BlockNoise(_step_seed(seed, t)),
                              chunk_bytes=chunk_bytes, canary_grads=canary_grads, canary_mask=canary_mask)


def _dp_grads(base, params, buffers, xb, yb, mb, dp: DPSGDConfig, q, sizes, seed, t, chunk_bytes,
              method: str = DP_DEFAULT_METHOD):
    """:func:`_private_grads` for a module (builds its :class:`DPSGDStep`)."""
    return _private_grads(DPSGDStep(base, method=method), params, buffers, xb, yb, mb, dp, q, sizes, seed, t,
                          chunk_bytes)


def _evaluate(spec, params, buffers, eval_data, epoch, dev, config, seed) -> dict:
    X, y = eval_data
    ens = Ensemble(spec, {k: v.detach() for k, v in params.items()}, buffers, config=config, seed=seed, device=dev)
    z = ens.logits(np.asarray(X, dtype=np.float32)).astype(np.float64)
    y = np.asarray(y, dtype=np.int64)
    zmax = z.max(axis=2, keepdims=True)
    lse = (zmax[..., 0] + np.log(np.exp(z - zmax).sum(axis=2)))
    loss = (lse - np.take_along_axis(z, y[None, :, None], axis=2)[..., 0]).mean(axis=1)
    acc = (z.argmax(axis=2) == y[None, :]).mean(axis=1)
    return {"epoch": int(epoch), "accuracy": acc.tolist(), "loss": loss.tolist()}


# --------------------------------------------------------------------------------------------------
# checkpoints


def _save_checkpoint(ckpt: Path, fp, done, params, buffers, opt, history, spec, config, seed, sizes) -> None:
    from safetensors.torch import save_file

    tensors = {f"param/{k}": v.detach().cpu().contiguous() for k, v in params.items()}
    tensors.update({f"buffer/{k}": v.detach().cpu().contiguous() for k, v in buffers.items()})
    tensors.update({k: v.detach().cpu().contiguous() for k, v in opt.state().items()})
    state = {
        "version": _CKPT_VERSION,
        "completed_epochs": int(done),
        "fingerprint": fp,
        "seed": int(seed),
        "spec": spec.to_dict(),
        "config": config.to_dict(),
        "sizes": sizes.tolist(),
        "history": history,
        "rng": "stateless: init from (seed, model); batch order and Poisson masks from (seed, model, epoch); "
               "DP noise from (seed, global step)",
    }
    with atomic_dir(ckpt / "latest", overwrite=True) as tmp:
        save_file(tensors, str(tmp / "state.safetensors"), metadata={"completed_epochs": str(done), "fingerprint": fp})
        write_json(tmp / "state.json", state)


def _maybe_resume(ckpt: Path, fp, params, buffers, opt) -> tuple[int, list]:
    from safetensors.torch import load_file

    cand = [ckpt / "latest", ckpt / ".latest.old"]  # the second exists only if a crash hit between two renames
    d = next((c for c in cand if (c / "state.json").is_file() and (c / "state.safetensors").is_file()), None)
    if d is None:
        return 0, []
    state = read_json(d / "state.json")
    if state.get("version") != _CKPT_VERSION:
        raise DataError(f"{d}: checkpoint version {state.get('version')!r} is not {_CKPT_VERSION}.")
    if state.get("fingerprint") != fp:
        raise DataError(
            f"{d}: the checkpoint belongs to a different run (spec, config, seed or data differ); "
            "use another checkpoint_dir or delete it."
        )
    tensors = load_file(str(d / "state.safetensors"))
    for k, v in params.items():
        v.copy_(tensors[f"param/{k}"])
    for k, v in buffers.items():
        v.copy_(tensors[f"buffer/{k}"])
    dev = next(iter(params.values())).device
    opt.load({k: v.to(dev) for k, v in tensors.items() if k.startswith("opt/")})
    return int(state["completed_epochs"]), list(state.get("history", []))


# --------------------------------------------------------------------------------------------------
# one model


def fit_classifier(spec: ModelSpec, X, y, config: TrainConfig | None = None, seed: int = 0, **kwargs) -> Classifier:
    """Train one model with ``config`` and ``seed``: torch specs through :func:`train_ensemble` (M = 1,
    so the result equals member 0 of an ensemble with the same seed), tree specs with their own ``fit``.

    A CatBoost spec whose training labels contain a single class falls back to a (single-leaf) decision
    tree, since CatBoost refuses to fit one class; the output still has ``spec.num_classes`` columns.
    """
    if not isinstance(spec, ModelSpec):
        raise ParameterError(f"The 'spec' parameter of fit_classifier must be a ModelSpec. Got {type(spec).__name__} instead.")
    seed = check_int(seed, "seed", "fit_classifier", low=0)
    config = TrainConfig() if config is None else config
    if spec.is_torch:
        kwargs.setdefault("progress", False)
        return train_ensemble(spec, [(X, y)], config, seed=seed, **kwargs).member(0)
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y).astype(np.int64)
    if len(X) != len(y) or len(y) == 0:
        raise DataError(f"fit_classifier: X has {len(X)} rows, y has {len(y)}; need equal, non-zero counts.")
    if y.min() < 0 or y.max() >= spec.num_classes:
        raise DataError(f"fit_classifier: labels must lie in [0, {spec.num_classes}).")
    X2 = X.reshape(len(X), -1)
    if spec.name == "catboost" and len(np.unique(y)) < 2:
        est = build_estimator(ModelSpec("decision_tree", spec.input_shape, spec.num_classes, {}), seed)
    else:
        est = build_estimator(spec, seed)
    est.fit(X2, y)
    return Classifier(spec, estimator=est)
