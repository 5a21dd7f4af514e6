"""The papers' model architectures, tree models, one ``Classifier`` wrapper, and pickle-free persistence.

Architectures (name -> what the papers say, and what we chose where they are silent):

``mlp``
    Fully connected ReLU network on the flattened input. ``hidden`` sets the hidden widths:
    FedKT (Li, He, Song 2021, Sec. 5) uses two hidden layers of 100 on MNIST (the default here,
    ``hidden=(100, 100)``); ProxyFL (Kalra et al. 2023, "Following Shen et al.") uses 784-200-200
    (``hidden=(200, 200)``).
``cnn_fedkt``
    FedKT's CNN: two 5x5 convolutions (6 then 16 channels), each followed by 2x2 max pooling, then
    fully connected layers of 120 and 84 units and the output layer.
``lenet5``
    LeNet-5 as used for ProxyFL's private model on MNIST: as ``cnn_fedkt`` but the first convolution pads
    by 2 (the classic 28x28 -> 32x32 padding), so a 28x28 input gives a 16x5x5 feature map.
``cnn_fredy``
    FREDY (Future Internet 2023, Sec. 5 / Fig. 3): three 3x3 convolutions with max pooling and batch
    normalisation, then three dense layers. The figure is not in our text copy; we use 32/64/128
    channels, conv -> norm -> ReLU -> 2x2 max-pool per block, and dense layers of 256, 128 and the output.
``cnn_privatekt``
    PrivateKT (Qi et al. 2023) trains "a two-layer convolution network" on MNIST (their ref. 45, the
    PyTorch MNIST example): 3x3 convolutions with 32 and 64 channels, one 2x2 max-pool, a 128-unit
    dense layer and the output. Dropout (0.25 / 0.5 in that example) is available via ``dropout`` but
    off by default so that training is a deterministic function of the seed.
``cnn1_proxyfl`` / ``cnn2_proxyfl``
    ProxyFL's CIFAR-10 proxy / private models "CNN1 / CNN2" (after Shen et al., FML). The paper does not
    define them. Default (``variant="dpaudit"``, kept so existing releases rebuild): CNN1 = two 5x5 'same'
    convolutions (32, 64) each with 2x2 pooling and a 512-unit dense layer (the classic FedAvg CIFAR CNN),
    CNN2 = a VGG-style net: 3x3 convolutions (32, 32, pool, 64, 64, pool) and a 512-unit dense layer.
    ``variant="reference"`` builds them as ProxyFL's public reference code defines them: CNN1 = 3x3 valid
    convolutions with 6 and 16 channels, each followed by 2x2 max pooling, a 64-unit dense layer and the
    output; CNN2 = 3x3 valid convolutions with 128 and 128 channels, each pooled, then the output layer.
    ``lenet5`` also takes ``variant="reference"``: the reference code's LeNet5 does not pad (16x4x4 features
    on 28x28 MNIST), the classic LeNet-5 (default) pads the first convolution by 2.

Every convolutional architecture adapts to the input: 2-D for ``(C, H, W)`` images (8x8 digits, 28x28
MNIST, 32x32x3 CIFAR), 1-D for ``(C, L)`` signals (mnist1d). A 'valid' convolution that would shrink a
small input below 2 after pooling switches to 'same' padding (so 8x8 digits work with the 5x5 nets).
``norm`` is ``None``, ``"batch"`` or ``"group"``; use ``"group"`` wherever DP-SGD trains the model
(per-example gradients are not defined with batch statistics). Batch norm here is
:class:`MaskedBatchNorm`, which equals ``torch.nn.BatchNorm*d`` on the unmasked rows, so the ensemble
trainer can pad ragged batches without changing the statistics.

Tree models (``decision_tree``, ``random_forest``, ``hist_gbdt``, ``catboost``) sit behind the same
:class:`Classifier` (``predict_proba``). FedKT uses a random forest with 100 trees of depth 6 (Adult)
and a GBDT of depth 6 (cod-rna): those are the defaults.

Persistence never pickles: torch weights in safetensors (the spec as JSON in the file's metadata and
beside it), scikit-learn models in skops format loaded with an explicit, checked list of trusted types,
CatBoost models in CatBoost's own ``.cbm`` format.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from dpaudit._io import atomic_path, write_bytes, write_json
from dpaudit.errors import DataError, ParameterError, check_choice, check_int
from dpaudit.training.limits import MAX_ENSEMBLE_BYTES, MAX_WIDTH

__all__ = [
    "TORCH_MODELS",
    "TREE_MODELS",
    "MODELS",
    "ModelSpec",
    "classifier_suffix",
    "build_model",
    "build_estimator",
    "Classifier",
    "MaskedBatchNorm",
    "SKOPS_TRUSTED_TYPES",
    "load_skops",
    "canonical_safetensors",
    "save_classifier",
    "load_classifier",
]

TORCH_MODELS = ("mlp", "cnn_fedkt", "lenet5", "cnn_fredy", "cnn_privatekt", "cnn1_proxyfl", "cnn2_proxyfl")
TREE_MODELS = ("decision_tree", "random_forest", "hist_gbdt", "catboost")
MODELS = TORCH_MODELS + TREE_MODELS
NORMS = (None, "batch", "group")


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


@dataclass(frozen=True)
class ModelSpec:
    """What to build: architecture name, input shape (without the batch axis), classes, architecture kwargs.

    ``kwargs`` must be JSON-serialisable (lists stand for tuples); it is stored in release bundles.
    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    kwargs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice(self.name, "name", "ModelSpec", MODELS)
        shape = tuple(int(s) for s in self.input_shape)
        if not shape or any(s < 1 for s in shape):
            raise ParameterError(f"The 'input_shape' parameter of ModelSpec must be a non-empty tuple of positive ints. Got {self.input_shape} instead.")
        object.__setattr__(self, "input_shape", shape)
        check_int(self.num_classes, "num_classes", "ModelSpec", low=2)
        object.__setattr__(self, "num_classes", int(self.num_classes))
        kw = _jsonable(dict(self.kwargs or {}))
        try:
            json.dumps(kw)
        except TypeError:
            raise ParameterError(f"The 'kwargs' parameter of ModelSpec must be JSON-serialisable. Got {self.kwargs!r} instead.") from None
        object.__setattr__(self, "kwargs", kw)
        if "norm" in kw:
            check_choice(kw["norm"], "norm", f"ModelSpec({self.name})", NORMS)
        if "hidden" in kw:
            hidden = kw["hidden"] if isinstance(kw["hidden"], (list, tuple)) else [kw["hidden"]]
            for h in hidden:
                check_int(h, "hidden", f"ModelSpec({self.name})", low=1, high=MAX_WIDTH)

    @property
    def is_torch(self) -> bool:
        return self.name in TORCH_MODELS

    def to_dict(self) -> dict:
        return {"name": self.name, "input_shape": list(self.input_shape), "num_classes": self.num_classes,
                "kwargs": dict(self.kwargs)}

    @classmethod
    def from_dict(cls, d: dict) -> "ModelSpec":
        try:
            return cls(d["name"], tuple(d["input_shape"]), int(d["num_classes"]), dict(d.get("kwargs", {})))
        except KeyError as exc:
            raise DataError(f"Model spec lacks the field {exc.args[0]!r}: {d!r}") from None

    def __hash__(self) -> int:  # kwargs is a dict
        return hash((self.name, self.input_shape, self.num_classes, json.dumps(self.kwargs, sort_keys=True)))


# --------------------------------------------------------------------------------------------------
# torch building blocks


class MaskedBatchNorm(nn.Module):
    """Batch normalisation over the rows selected by an optional 0/1 ``sample_mask``.

    With ``sample_mask=None`` this is exactly ``torch.nn.BatchNorm{1,2}d(num_features, eps, momentum)``
    (biased variance to normalise, unbiased variance in the running estimate). With a mask, statistics
    use only the rows whose mask is 1 -- so a padded batch gives the same output and running statistics
    on its real rows as the unpadded batch. A batch whose mask is all zero leaves the running statistics
    unchanged. Written without data-dependent Python control flow, so it runs under ``torch.func.vmap``.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: torch.Tensor, sample_mask: torch.Tensor | None = None) -> torch.Tensor:
        shape = [1, self.num_features] + [1] * (x.dim() - 2)
        if self.training:
            dims = [0] + list(range(2, x.dim()))
            per_row = math.prod(x.shape[2:]) if x.dim() > 2 else 1
            if sample_mask is None:
                w = torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
            else:
                w = sample_mask.to(x.dtype)
            wv = w.reshape([-1] + [1] * (x.dim() - 1))
            count = w.sum() * per_row
            safe = count.clamp(min=1.0)
            mean = (x * wv).sum(dims) / safe
            var = (((x - mean.reshape(shape)) ** 2) * wv).sum(dims) / safe
            unbiased = var * safe / (count - 1).clamp(min=1.0)
            m = self.momentum * (count > 0).to(x.dtype)
            new_mean = (1 - m) * self.running_mean + m * mean.detach()
            new_var = (1 - m) * self.running_var + m * unbiased.detach()
            self.running_mean.copy_(new_mean)
            self.running_var.copy_(new_var)
        else:
            mean, var = self.running_mean, self.running_var
        xhat = (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + self.eps)
        return xhat * self.weight.reshape(shape) + self.bias.reshape(shape)


def _norm(kind: str | None, channels: int, *, dense: bool = False) -> nn.Module | None:
    """Norm layer for ``channels`` features. Group norm uses up to 8 groups (the largest of 8, 4, 2, 1
    dividing ``channels``); after a dense layer (no spatial extent) each group keeps >= 4 features, since a
    group of one feature would normalise it to zero."""
    if kind is None:
        return None
    if kind == "batch":
        return MaskedBatchNorm(channels)
    min_per_group = 4 if dense else 1
    groups = next(g for g in (8, 4, 2, 1) if channels % g == 0 and channels // g >= min_per_group)
    return nn.GroupNorm(groups, channels)


class _Net(nn.Module):
    """A feed-forward stack whose norm layers receive the optional ``sample_mask``."""

    def __init__(self, layers: Sequence[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, sample_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            if isinstance(layer, MaskedBatchNorm):
                x = layer(x, sample_mask)
            else:
                x = layer(x)
        return x

    def stages(self) -> list[tuple[str, nn.Module]]:
        """The layers in the order ``forward`` applies them, with their parameter-name prefixes (for trainers
        that run the stack themselves, e.g. the ghost-norm DP-SGD step)."""
        return [(f"layers.{i}.", layer) for i, layer in enumerate(self.layers)]


def _mlp(spec: ModelSpec) -> _Net:
    kw = spec.kwargs
    hidden = [int(h) for h in kw.get("hidden", (100, 100))]
    norm, dropout = kw.get("norm"), float(kw.get("dropout", 0.0))
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(spec.input_shape)
    widths = [width, *hidden, spec.num_classes]
    weights = sum((a + 1) * b for a, b in zip(widths, widths[1:]))
    if 4 * weights > MAX_ENSEMBLE_BYTES // 4:  # before allocating: weights, gradients, two optimiser slots
        raise ParameterError(f"The mlp with hidden = {hidden} on inputs of {width} features has {weights} weights, more "
                             f"than one training run supports ({MAX_ENSEMBLE_BYTES // 16}); use narrower layers.")
    for h in hidden:
        layers.append(nn.Linear(width, h, bias=norm != "batch"))  # batch norm cancels a bias
        nl = _norm(norm, h, dense=True)
        if nl is not None:
            layers.append(nl)
        layers.append(nn.ReLU())
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, spec.num_classes))
    return _Net(layers)


def _conv_net(spec: ModelSpec, blocks: Sequence[tuple], dense: Sequence[int], *, default_norm=None,
              dropout_conv: float = 0.0) -> _Net:
    """``blocks``: (out_channels, kernel, padding | 'auto', pool: bool); ``dense``: hidden widths."""
    kw = spec.kwargs
    norm = kw.get("norm", default_norm)
    dropout = float(kw.get("dropout", 0.0))
    shape = spec.input_shape
    if len(shape) == 3:
        Conv, Pool, spatial = nn.Conv2d, nn.MaxPool2d, list(shape[1:])
    elif len(shape) == 2:
        Conv, Pool, spatial = nn.Conv1d, nn.MaxPool1d, list(shape[1:])
    else:
        raise ParameterError(
            f"The 'input_shape' parameter of build_model({spec.name!r}) must be (C, H, W) or (C, L). Got {shape} instead."
        )
    ch = shape[0]
    layers: list[nn.Module] = []
    for out, k, pad, pool in blocks:
        if pad == "auto":  # valid unless that would leave < 2 after pooling
            pad = 0 if min((s - k + 1) // (2 if pool else 1) for s in spatial) >= 2 else k // 2
        spatial = [s + 2 * pad - k + 1 for s in spatial]
        if min(spatial) < 1:
            raise ParameterError(f"The input shape {shape} is too small for {spec.name!r}.")
        layers.append(Conv(ch, out, k, padding=pad, bias=norm != "batch"))  # batch norm cancels a bias
        nl = _norm(norm, out)
        if nl is not None:
            layers.append(nl)
        layers.append(nn.ReLU())
        if pool and min(spatial) >= 2:
            layers.append(Pool(2))
            spatial = [s // 2 for s in spatial]
        ch = out
    if dropout_conv and dropout > 0:
        layers.append(nn.Dropout(dropout / 2))
    layers.append(nn.Flatten())
    width = ch * math.prod(spatial)
    for h in dense:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, spec.num_classes))
    return _Net(layers)


def build_model(spec: ModelSpec) -> nn.Module:
    """A freshly initialised torch module for ``spec`` (PyTorch's default initialisation, global RNG).

    The module's ``forward(x, sample_mask=None)`` maps ``(n, *input_shape)`` to logits ``(n, C)``.
    Seed with ``torch.manual_seed`` (or ``torch.random.fork_rng``) before calling for a reproducible init.
    """
    if not isinstance(spec, ModelSpec):
        raise ParameterError(f"The 'spec' parameter of build_model must be a ModelSpec. Got {type(spec).__name__} instead.")
    if not spec.is_torch:
        raise ParameterError(f"The 'spec' parameter of build_model must name a torch model ({', '.join(TORCH_MODELS)}). Got {spec.name!r} instead.")
    name = spec.name
    if name == "mlp":
        return _mlp(spec)
    if name == "cnn_fedkt":
        return _conv_net(spec, [(6, 5, "auto", True), (16, 5, "auto", True)], [120, 84])
    variant = _variant(spec)
    if name == "lenet5":
        if variant == "reference":  # ProxyFL's reference code: no padding (28x28 -> 16x4x4)
            return _conv_net(spec, [(6, 5, "auto", True), (16, 5, "auto", True)], [120, 84])
        return _conv_net(spec, [(6, 5, 2, True), (16, 5, "auto", True)], [120, 84])
    if name == "cnn_fredy":
        return _conv_net(spec, [(32, 3, 1, True), (64, 3, 1, True), (128, 3, 1, True)], [256, 128],
                         default_norm="batch")
    if name == "cnn_privatekt":
        return _conv_net(spec, [(32, 3, "auto", False), (64, 3, "auto", True)], [128], dropout_conv=True)
    if name == "cnn1_proxyfl":
        if variant == "reference":  # ProxyFL's reference code: 3x3 valid convs (6, 16), pool after each, dense 64
            return _conv_net(spec, [(6, 3, "auto", True), (16, 3, "auto", True)], [64])
        return _conv_net(spec, [(32, 5, 2, True), (64, 5, 2, True)], [512])
    if name == "cnn2_proxyfl":
        if variant == "reference":  # ProxyFL's reference code: 3x3 valid convs (128, 128), pool after each, no dense
            return _conv_net(spec, [(128, 3, "auto", True), (128, 3, "auto", True)], [])
        return _conv_net(spec, [(32, 3, 1, False), (32, 3, 1, True), (64, 3, 1, False), (64, 3, 1, True)], [512])
    raise AssertionError(name)  # pragma: no cover - ModelSpec validated the name


MODEL_VARIANTS = ("dpaudit", "reference")


def _variant(spec: ModelSpec) -> str:
    """``variant`` kwarg of ``lenet5``/``cnn1_proxyfl``/``cnn2_proxyfl``: ``"dpaudit"`` (default) or ``"reference"``."""
    v = spec.kwargs.get("variant", "dpaudit")
    if v not in MODEL_VARIANTS or (v != "dpaudit" and spec.name not in ("lenet5", "cnn1_proxyfl", "cnn2_proxyfl")):
        raise ParameterError(f"The 'variant' parameter of model {spec.name!r} must be one of "
                             f"{MODEL_VARIANTS if spec.name in ('lenet5', 'cnn1_proxyfl', 'cnn2_proxyfl') else ('dpaudit',)}. "
                             f"Got {v!r} instead.")
    return v


def has_batch_norm(module: nn.Module) -> bool:
    return any(isinstance(m, (MaskedBatchNorm, nn.modules.batchnorm._BatchNorm)) for m in module.modules())


# --------------------------------------------------------------------------------------------------
# trees


def build_estimator(spec: ModelSpec, seed: int):
    """An unfitted tree model for ``spec`` (kwargs pass through to the estimator)."""
    kw = dict(spec.kwargs)
    kw.pop("norm", None)
    seed = int(seed) % (2**31 - 1)
    if spec.name == "decision_tree":
        from sklearn.tree import DecisionTreeClassifier

        return DecisionTreeClassifier(random_state=seed, **kw)
    if spec.name == "random_forest":
        from sklearn.ensemble import RandomForestClassifier

        kw.setdefault("n_estimators", 100)
        kw.setdefault("max_depth", 6)
        kw.setdefault("n_jobs", 1)
        return RandomForestClassifier(random_state=seed, **kw)
    if spec.name == "hist_gbdt":
        from sklearn.ensemble import HistGradientBoostingClassifier

        kw.setdefault("max_depth", 6)
        return HistGradientBoostingClassifier(random_state=seed, **kw)
    if spec.name == "catboost":
        from catboost import CatBoostClassifier

        kw.setdefault("depth", 6)
        kw.setdefault("iterations", 200)
        kw.setdefault("verbose", False)
        kw.setdefault("thread_count", 1)
        kw.setdefault("allow_writing_files", False)
        return CatBoostClassifier(random_seed=seed, **kw)
    raise ParameterError(f"The 'spec' parameter of build_estimator must name a tree model ({', '.join(TREE_MODELS)}). Got {spec.name!r} instead.")


# --------------------------------------------------------------------------------------------------
# Classifier


class Classifier:
    """One trained model behind ``predict_proba(X) -> (n, C)``: a torch module or a tree estimator.

    Parameters
    ----------
    spec : ModelSpec
    module : torch.nn.Module, optional
        For torch specs; kept on CPU in eval mode.
    estimator : fitted scikit-learn / CatBoost estimator, optional
        For tree specs. Columns of ``predict_proba`` are mapped through ``estimator.classes_`` so that the
        output always has ``spec.num_classes`` columns, even if some class was absent from training data.
    """

    def __init__(self, spec: ModelSpec, *, module: nn.Module | None = None, estimator: Any = None,
                 batch_size: int = 4096):
        if (module is None) == (estimator is None):
            raise ParameterError("Classifier needs exactly one of 'module' and 'estimator'.")
        self.spec = spec
        self.module = module.cpu().eval() if module is not None else None
        self.estimator = estimator
        self.batch_size = batch_size

    @property
    def is_torch(self) -> bool:
        return self.module is not None

    def _check_X(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32)
        if tuple(X.shape[1:]) != self.spec.input_shape:
            if X.ndim == 2 and X.shape[1] == math.prod(self.spec.input_shape):
                X = X.reshape((-1,) + self.spec.input_shape)
            else:
                raise DataError(f"Classifier({self.spec.name}) expects inputs of shape (n, {self.spec.input_shape}); got {X.shape}.")
        return X

    def logits(self, X) -> np.ndarray:
        """Raw scores (n, C) before the softmax; torch models only."""
        if self.module is None:
            raise ParameterError(f"Classifier.logits is defined for torch models only, not {self.spec.name!r}.")
        X = self._check_X(X)
        out = []
        with torch.no_grad():
            for s in range(0, len(X), self.batch_size):
                out.append(self.module(torch.from_numpy(X[s : s + self.batch_size])).numpy())
        if not out:
            return np.zeros((0, self.spec.num_classes), dtype=np.float32)
        return np.concatenate(out).astype(np.float32)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, float64, shape (n, C), rows summing to 1."""
        X = self._check_X(X)
        if self.module is not None:
            z = self.logits(X).astype(np.float64)
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            return p / p.sum(axis=1, keepdims=True)
        est = self.estimator
        P = np.asarray(est.predict_proba(X.reshape(len(X), -1)), dtype=np.float64)
        classes = np.asarray(est.classes_).astype(np.int64).reshape(-1)
        out = np.zeros((len(X), self.spec.num_classes), dtype=np.float64)
        out[:, classes] = P
        return out

    def predict(self, X) -> np.ndarray:
        return self.predict_proba(X).argmax(axis=1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        if self.module is None:
            raise ParameterError("state_dict is defined for torch models only.")
        return {k: v.detach().clone() for k, v in self.module.state_dict().items()}

    def __repr__(self) -> str:
        kind = "torch" if self.module is not None else type(self.estimator).__name__
        return f"Classifier({self.spec.name}, {kind})"


# --------------------------------------------------------------------------------------------------
# persistence (no pickle anywhere)

_SKOPS_TRUSTED = {
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
    "sklearn._loss.loss.HalfBinomialLoss",
    "sklearn._loss.loss.HalfMultinomialLoss",
    "sklearn._loss.link.LogitLink",
    "sklearn._loss.link.MultinomialLogit",
    "sklearn._loss.link.Interval",
    "sklearn._loss._loss.CyHalfBinomialLoss",
    "sklearn._loss._loss.CyHalfMultinomialLoss",
    "numpy.random._mt19937.MT19937",
    "numpy.random.mtrand.RandomState",
}
#: Types beyond skops' defaults that dpaudit loads from a user's .skops file (``dpaudit release make``): the tree
#: internals above and the state of scikit-learn's MLP optimizers -- plain array holders, no code. (Trusting a type
#: is not enough: every file is also held to :mod:`dpaudit.training.model_files`' allow-list of estimators and
#: checks of the fitted structures, because scikit-learn's native code trusts the indices a tree stores.)
SKOPS_TRUSTED_TYPES = frozenset(_SKOPS_TRUSTED | {"sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
                                                  "sklearn.neural_network._stochastic_optimizers.SGDOptimizer"})
_SKOPS_TOP = {
    "decision_tree": "DecisionTreeClassifier",
    "random_forest": "RandomForestClassifier",
    "hist_gbdt": "HistGradientBoostingClassifier",
    "catboost": "DecisionTreeClassifier",  # single-class fallback (see ensemble.fit_classifier)
}


def canonical_safetensors(blob: bytes) -> bytes:
    """``blob`` (a safetensors file) with its JSON header written with sorted keys: the same tensors and
    metadata always give the same bytes.

    safetensors writes the ``__metadata__`` table in the order of a Rust ``HashMap``, whose hashing keys are
    random per process and advance with every map the process builds; so the same model saved after a
    different history (a resumed run wrote fewer checkpoints) came out with its metadata keys in another order.
    The tensor data is unchanged (its offsets are relative to the end of the header); the header is padded with
    spaces to a multiple of 8 bytes, as safetensors does.
    """
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + n])
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + blob[8 + n :]


def classifier_suffix(clf: Classifier) -> str:
    """The suffix :func:`save_classifier` writes ``clf`` with: ``.safetensors`` (torch), ``.cbm`` (CatBoost: the
    catboost package's classifier or dpaudit's own parsed :class:`~dpaudit.training.model_files.CatBoostModel`),
    ``.skops`` (scikit-learn). One decision, so that a bundle's ``model.file`` names the file written."""
    if clf.module is not None:
        return ".safetensors"
    from dpaudit.training.model_files import CatBoostModel

    est = clf.estimator
    if type(est).__module__.startswith("catboost") or isinstance(est, CatBoostModel):
        return ".cbm"
    return ".skops"


def save_classifier(clf: Classifier, path_without_suffix) -> Path:
    """Write ``clf`` without pickle; returns the path written.

    torch -> ``<path>.safetensors`` (spec JSON in the metadata) plus ``<path>.json`` (the spec);
    scikit-learn -> ``<path>.skops``; CatBoost -> ``<path>.cbm``. Each file is written atomically.
    """
    if not isinstance(clf, Classifier):
        raise ParameterError(f"The 'clf' parameter of save_classifier must be a Classifier. Got {type(clf).__name__} instead.")
    base = Path(path_without_suffix)
    if base.suffix in (".safetensors", ".skops", ".cbm"):
        base = base.with_suffix("")
    spec_json = json.dumps(clf.spec.to_dict(), sort_keys=True)
    if clf.module is not None:
        from safetensors.torch import save

        target = base.with_name(base.name + ".safetensors")
        tensors = {k: v.detach().cpu().contiguous() for k, v in clf.module.state_dict().items()}
        blob = save(tensors, metadata={"spec": spec_json, "format": "dpaudit-torch-1"})
        write_bytes(target, canonical_safetensors(blob))
        write_json(base.with_name(base.name + ".json"), clf.spec.to_dict())
        return target
    est = clf.estimator
    if classifier_suffix(clf) == ".cbm":
        target = base.with_name(base.name + ".cbm")
        with atomic_path(target, suffix=".cbm") as tmp:
            est.save_model(str(tmp), format="cbm")
        return target
    import skops.io as sio

    target = base.with_name(base.name + ".skops")
    with atomic_path(target, suffix=".skops") as tmp:
        sio.dump(est, tmp)
    return target


def load_skops(path: Path, trusted_types=SKOPS_TRUSTED_TYPES, *, top_classes=None, follow_symlinks: bool = True) -> Any:
    """The object of a ``.skops`` file (never unpickling): read once and checked before and after skops builds it
    by :func:`dpaudit.training.model_files.load_skops_file` (only the estimators of
    :data:`~dpaudit.training.model_files.SKOPS_CLASSES`, or ``top_classes`` at the top; every fitted tree's
    structure checked); types beyond skops' own trusted ones must be in ``trusted_types``. :class:`DataError` on
    unreadable files or refused content."""
    from dpaudit.training.model_files import load_skops_file

    return load_skops_file(path, trusted_types, top_classes=top_classes, follow_symlinks=follow_symlinks)


def _state_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """The names and shapes of ``spec``'s ``state_dict``, built on torch's ``meta`` device (nothing allocated)."""
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in build_model(spec).state_dict().items()}


def load_classifier(path, spec: ModelSpec, *, follow_symlinks: bool = True) -> Classifier:
    """Load a model written by :func:`save_classifier` for ``spec``, never unpickling.

    ``path`` may carry its suffix or not. Every file is read once through the readers of
    :mod:`dpaudit.training.model_files`: safetensors capped and its header checked against the spec's tensors
    before anything is materialised; skops files of the spec's class only, every type skops does not trust by
    default checked against a fixed allow-list of scikit-learn tree internals, and every fitted tree's structure
    checked. ``follow_symlinks=False``: a symbolic link is refused (a release bundle's model).
    """
    if not isinstance(spec, ModelSpec):
        raise ParameterError(f"The 'spec' parameter of load_classifier must be a ModelSpec. Got {type(spec).__name__} instead.")
    p = Path(path)
    candidates = [p] if p.suffix in (".safetensors", ".skops", ".cbm") else [
        p.with_name(p.name + s) for s in ((".safetensors",) if spec.is_torch else (".skops", ".cbm"))
    ]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise DataError(f"Model file not found: expected {' or '.join(str(c) for c in candidates)}.")
    if found.suffix == ".safetensors":
        if not spec.is_torch:
            raise DataError(f"{found}: a torch weights file, but the spec names the tree model {spec.name!r}.")
        from dpaudit.training.model_files import load_safetensors_file

        try:
            shapes = _state_shapes(spec)
        except (RuntimeError, ValueError, TypeError, NotImplementedError):
            shapes = None       # a spec the meta device cannot build: checked by the strict load below
        state = load_safetensors_file(found, shapes, follow_symlinks=follow_symlinks,
                                      mismatch=f"weights do not fit the spec {spec.name} {spec.input_shape}")
        module = build_model(spec)
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise DataError(f"{found}: weights do not fit the spec {spec.name} {spec.input_shape} ({str(exc)[:300]}).") from None
        return Classifier(spec, module=module)
    if spec.is_torch:
        raise DataError(f"{found}: a tree model file, but the spec names the torch model {spec.name!r}.")
    if found.suffix == ".cbm":
        from dpaudit.training.model_files import load_catboost_file

        return Classifier(spec, estimator=load_catboost_file(found, follow_symlinks=follow_symlinks))
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.tree import DecisionTreeClassifier

    top = {"DecisionTreeClassifier": DecisionTreeClassifier, "RandomForestClassifier": RandomForestClassifier,
           "HistGradientBoostingClassifier": HistGradientBoostingClassifier}[_SKOPS_TOP[spec.name]]
    est = load_skops(found, _SKOPS_TRUSTED, top_classes=[f"{top.__module__}.{top.__qualname__}"],
                     follow_symlinks=follow_symlinks)
    if type(est).__name__ != _SKOPS_TOP[spec.name] or not hasattr(est, "predict_proba"):
        raise DataError(f"{found}: holds a {type(est).__name__}, expected {_SKOPS_TOP[spec.name]} for spec {spec.name!r}.")
    return Classifier(spec, estimator=est)
