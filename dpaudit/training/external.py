"""Models trained outside dpaudit, loaded without unpickling: the model kinds of ``dpaudit release make``.

=================  ===========================================================================================
kind               what the release holds / how it is loaded
=================  ===========================================================================================
``torch_factory``  ``model.safetensors`` + an import path ``file.py:build`` to a function returning the
                   ``torch.nn.Module`` (called with the stored keyword arguments); the weights must match the
                   module's ``state_dict`` exactly (every missing, unexpected or mis-shaped tensor is named)
``sklearn``        ``model.skops``: any scikit-learn classifier with ``predict_proba``; the file's types beyond
                   skops' defaults must be in :data:`~dpaudit.training.models.SKOPS_TRUSTED_TYPES`
``catboost``       ``model.cbm``: CatBoost's own format
``scores``         no model: ``scores.npz`` holds the model's outputs (scores-only audits)
=================  ===========================================================================================

Security model
--------------
A release bundle may come from the party being audited, so everything here treats it as hostile. Reading,
attacking, auditing or checking a bundle (``load_release``, ``dpaudit attack / audit / check``) guarantees:

* **no code from the bundle runs.** A bundle may *describe* code (a torch factory ``file.py:build``, a training
  function ``file.py:train``) but it runs only when the user names the same code on the command line
  (``--factory FILE:NAME``, ``--train-fn FILE:NAME``: same function name, and the file's sha256 equal to the one
  the bundle records), or opts in with ``--trust-bundle-code``, which first prints the file, its sha256, the
  function and its keyword arguments to stderr. Either way the code is one source file, executed from the very
  bytes that were hashed (no bytecode cache, no second read), called by one identifier (no attribute chains),
  with keyword arguments that are JSON scalars and lists only; standard-library, dpaudit and installed
  (third-party) callables, packages and relative imports are refused (:mod:`dpaudit.training.usercode`).
* **nothing is unpickled.** Weights are safetensors, scikit-learn models skops with an allow-list, CatBoost its
  own format, arrays ``allow_pickle=False``; ``.pt`` / ``.pth`` / ``.pkl`` / ``.joblib`` files and pickled numpy
  arrays are refused with a message on how to convert them. Every model file goes through its one reader in
  :mod:`dpaudit.training.model_files`, which checks what a library's native code would follow without bounds
  checks (scikit-learn's fitted trees, a safetensors header) and reads CatBoost's ``.cbm`` itself.
* **no file outside the bundle is read, none outside the chosen output folder written.** Bundle files are plain
  names inside the bundle; a symbolic link anywhere in it (at any depth) is refused; a ``data_dir`` outside the
  bundle is followed only with ``--data-dir`` / ``--trust-data-dir``. Outputs go to the folder the user chose --
  never into the bundle, whose cached results are never trusted -- and ``--overwrite`` replaces only a folder
  dpaudit wrote (it holds :data:`dpaudit._io.OUTPUT_MARKER`).
* **no allocation beyond stated caps.** Every npz / npy is read through the capped loaders of
  :mod:`dpaudit._io` (zip directory and ``.npy`` headers checked before anything is unpacked; 1 GiB by default,
  ``$DPAUDIT_MAX_ARRAY_BYTES`` to change it); JSON / TOML nesting and integer sizes are bounded; model specs are
  sized before anything is built.

What it does not guarantee: code that *you* name (``--factory``, ``--train-fn``, ``release make``'s options, or
a bundle's code after ``--trust-bundle-code``) is your code, and runs with your rights; what it imports is an
ordinary import of your environment. Data files you name (``--data-dir``) are read as yours.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from dpaudit.errors import DataError, ParameterError, check_int, worded
from dpaudit.training.usercode import BundleCode, check_code_kwargs, code_digest, load_callable

__all__ = ["EXTERNAL_KINDS", "ExternalSpec", "import_object", "refuse_pickle", "load_torch_factory", "load_external_model",
           "load_bundle_npz", "load_bundled_dataset", "recipe_train_fn", "recipe_train_many", "absolute_import_path", "code_digest",
           "load_sklearn_model", "load_catboost_model", "external_train_fn", "PICKLE_SUFFIXES", "BundleCode"]

EXTERNAL_KINDS = ("torch_factory", "sklearn", "catboost", "scores")
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".joblib", ".ckpt", ".bin", ".sav")

_CONVERT = {
    ".pt": "load it yourself (torch.load(path, weights_only=True)) and write its state_dict with "
           "safetensors.torch.save_file(model.state_dict(), 'model.safetensors')",
    ".pkl": "load it in your own environment and re-save it: skops.io.dump(model, 'model.skops') for scikit-learn, "
            "model.save_model('model.cbm') for CatBoost, safetensors for torch weights",
}


@dataclass(frozen=True)
class ExternalSpec:
    """The model spec of an outside model: ``kind`` (see :data:`EXTERNAL_KINDS`), input shape (without the batch
    axis), number of classes, and ``kwargs`` (``factory`` and ``factory_kwargs`` for ``torch_factory``)."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in EXTERNAL_KINDS:
            raise ParameterError(f"The 'name' parameter of ExternalSpec must be one of {', '.join(EXTERNAL_KINDS)}. Got {self.name!r} instead.")
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))
        object.__setattr__(self, "num_classes", check_int(self.num_classes, "num_classes", "ExternalSpec", low=2))
        object.__setattr__(self, "kwargs", json.loads(json.dumps(dict(self.kwargs))))

    @property
    def is_torch(self) -> bool:
        return self.name == "torch_factory"

    def to_dict(self) -> dict:
        return {"name": self.name, "input_shape": list(self.input_shape), "num_classes": self.num_classes,
                "kwargs": dict(self.kwargs), "external": True}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExternalSpec":
        try:
            return cls(d["name"], tuple(d["input_shape"]), int(d["num_classes"]), dict(d.get("kwargs", {})))
        except (KeyError, TypeError) as exc:
            raise DataError(f"An external model spec needs 'name', 'input_shape', 'num_classes' ({exc!r}).") from None


def import_object(path: str, what: str, *, sha256: str | None = None):
    """The function or class ``"module:name"`` / ``"path/to/file.py:name"`` names, its one source file executed
    from the bytes that were hashed (see :mod:`dpaudit.training.usercode`); with ``sha256``, that file must have
    that digest before anything of it runs. ``what`` names the parameter in the messages (e.g. ``"--factory"``).
    For code the user names; a bundle's code goes through :class:`BundleCode`."""
    return load_callable(path, what, sha256=sha256)


def absolute_import_path(path: str | None) -> str | None:
    """``file.py:name`` with the file made absolute (so a release keeps working from another directory);
    module paths unchanged."""
    if not path or path.count(":") != 1 or not path.split(":")[0].endswith(".py"):
        return path
    file, attr = path.split(":")
    return f"{Path(file).resolve()}:{attr}"


def refuse_pickle(path: Path, what: str) -> None:
    """Raise a :class:`DataError` when ``path`` is a pickle-based file (by suffix or content), saying how to convert."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        how = _CONVERT[".pt"] if suffix in (".pt", ".pth", ".ckpt", ".bin") else _CONVERT[".pkl"]
        raise DataError(f"{what} {str(p)!r} is a pickle-based file ({suffix}); dpaudit never unpickles files. "
                        f"Convert it: {how}.")
    from dpaudit._io import open_input

    try:    # stat first, never blocking on a FIFO; a file that cannot be opened is reported by its reader
        with open_input(p, what, allow_empty=True, max_bytes=None) as fh:
            head = fh.read(4)
    except DataError:
        return
    # (a .safetensors file starts with its header length, which may begin with 0x80: its own parser refuses pickles)
    if suffix != ".safetensors" and head[:1] == b"\x80" and len(head) > 1 and head[1] in range(2, 6):
        raise DataError(f"{what} {str(p)!r} is a pickle (starts with a pickle protocol header); dpaudit never "
                        f"unpickles files. Convert it: {_CONVERT['.pkl']}.")
    if head[:2] == b"PK" and suffix not in (".skops", ".npz"):
        try:
            with zipfile.ZipFile(p) as zf:
                if any(n.endswith(".pkl") for n in zf.namelist()):
                    raise DataError(f"{what} {str(p)!r} is a torch.save archive (pickle inside); dpaudit never "
                                    f"unpickles files. Convert it: {_CONVERT['.pt']}.")
        except zipfile.BadZipFile:
            return


def load_torch_factory(factory: str, weights: Path, *, factory_kwargs: Mapping[str, Any] | None = None,
                       factory_sha256: str | None = None):
    """Build the module with the user's ``factory(**factory_kwargs)`` and load ``weights`` (.safetensors) into it,
    strictly. Every missing, unexpected or mis-shaped tensor is named in one :class:`DataError` line."""
    weights = _check_weights(weights)
    kwargs = check_code_kwargs(factory_kwargs, "--factory-kwargs", error=ParameterError)
    build = import_object(factory, "--factory", sha256=factory_sha256)
    return _build_and_load(build, repr(factory), weights, kwargs)


def _check_weights(weights: Path) -> Path:
    weights = Path(weights)
    refuse_pickle(weights, "The weights file")
    if weights.suffix != ".safetensors":
        raise DataError(f"The weights file {str(weights)!r} must be a .safetensors file (got {weights.suffix or 'no suffix'}).")
    if not weights.is_file():
        raise DataError(f"The weights file {str(weights)!r} does not exist.")
    return weights


def _build_and_load(build: Any, label: str, weights: Path, kwargs: Mapping[str, Any], *, follow_symlinks: bool = True):
    import torch

    try:
        module = build(**dict(kwargs))
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: one line
        raise DataError(f"--factory {label}: calling it failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(module, torch.nn.Module):
        raise DataError(f"--factory {label} returned a {type(module).__name__}, not a torch.nn.Module.")
    from dpaudit.training.model_files import load_safetensors_file

    # read once, capped; names and shapes checked against the module before any tensor is materialised
    state = load_safetensors_file(weights, {k: tuple(v.shape) for k, v in module.state_dict().items()},
                                  follow_symlinks=follow_symlinks, mismatch=f"does not match the module built by {label}")
    module.load_state_dict(state, strict=True)
    return module.eval()


def load_sklearn_model(path: Path, *, follow_symlinks: bool = True):
    """A scikit-learn classifier from a ``.skops`` file, through the one skops reader
    (:func:`dpaudit.training.model_files.load_skops_file`): only the classifiers of
    :data:`~dpaudit.training.model_files.SKOPS_CLASSIFIERS` and their parts, loading only types skops trusts by
    default or in :data:`~dpaudit.training.models.SKOPS_TRUSTED_TYPES`, every fitted tree's structure checked."""
    from dpaudit.training.models import SKOPS_TRUSTED_TYPES, load_skops

    p = Path(path)
    refuse_pickle(p, "The model file")
    if p.suffix != ".skops":
        raise DataError(f"The model file {str(p)!r} must be .safetensors (with {worded('--factory', 'factory=')}), .skops or .cbm. Got {p.suffix or 'no suffix'}.")
    # read once, capped; only allow-listed scikit-learn classifiers and their parts; every fitted tree checked
    est = load_skops(p, SKOPS_TRUSTED_TYPES, follow_symlinks=follow_symlinks)
    if not callable(getattr(est, "predict_proba", None)) or not hasattr(est, "classes_"):
        raise DataError(f"{p}: holds a {type(est).__name__}, not a fitted classifier with predict_proba.")
    return est


def load_catboost_model(path: Path, *, follow_symlinks: bool = True):
    """A CatBoost classifier from its own ``.cbm`` format, through the one CatBoost reader
    (:func:`dpaudit.training.model_files.load_catboost_file`)."""
    from dpaudit.training.model_files import load_catboost_file

    p = Path(path)
    refuse_pickle(p, "The model file")
    if p.suffix != ".cbm":
        raise DataError(f"The model file {str(p)!r} must be a CatBoost .cbm file.")
    return load_catboost_file(p, follow_symlinks=follow_symlinks)


def external_train_fn(path: str, num_classes: int, *, sha256: str | None = None):
    """``(X, y, seed) -> model`` from the user's ``module:train`` / ``file.py:train`` (their code runs), checked to
    return something with ``predict_proba``; its outputs are padded to ``num_classes`` columns through ``classes_``
    when present."""
    return _wrap_train(import_object(path, "--train-fn", sha256=sha256), repr(path), num_classes)


def _wrap_train(train: Any, label: str, num_classes: int):
    def fn(X: np.ndarray, y: np.ndarray, seed: int):
        try:
            model = train(X, y, int(seed))
        except Exception as exc:  # noqa: BLE001 - the user's training failed: one line
            raise DataError(f"{label} failed: {type(exc).__name__}: {exc}") from None
        if not callable(getattr(model, "predict_proba", None)):
            raise DataError(f"{label} returned a {type(model).__name__} without predict_proba.")
        return _Padded(model, num_classes)

    return fn


class _Padded:
    """predict_proba with ``num_classes`` columns (a model trained on data missing some class has fewer)."""

    def __init__(self, model: Any, num_classes: int) -> None:
        self.model, self.num_classes = model, num_classes

    def predict_proba(self, X) -> np.ndarray:
        p = np.asarray(self.model.predict_proba(X), dtype=np.float64)
        if p.ndim == 2 and p.shape[1] == self.num_classes:
            return p
        classes = getattr(self.model, "classes_", None)
        if classes is None or p.ndim != 2 or len(classes) != p.shape[1]:
            raise DataError(f"A model of the training function gave {p.shape} probabilities for {self.num_classes} classes.")
        out = np.zeros((len(p), self.num_classes))
        out[:, np.asarray(classes).astype(np.int64)] = p
        return out


# --------------------------------------------------------------------------------------------------
# reading the outside parts of a release bundle (called by dpaudit.training.release)


def _bundle_file(root: Path, fname: Any, what: str) -> Path:
    if not isinstance(fname, str) or Path(fname).name != fname:
        raise DataError(f"{root}/release.json: {what} file {fname!r} must be a plain file name inside the bundle.")
    p = Path(root) / fname
    if not p.is_file():
        raise DataError(f"{root}: the {what} file {fname} named in release.json is missing.")
    return p


def load_bundle_npz(root: Path, fname: str) -> dict[str, np.ndarray]:
    """All arrays of an npz file inside a bundle, through the one capped loader (:func:`dpaudit._io.load_npz_file`:
    zip directory and headers checked before unpacking, never pickle)."""
    from dpaudit._io import load_npz_file

    p = _bundle_file(root, fname, fname.split(".")[0])
    return load_npz_file(p, "the bundle file", kinds=None, follow_symlinks=False)


def load_external_model(root: Path, m: Mapping[str, Any], code: BundleCode | None = None):
    """The released outside model of ``release.json["model"]`` (``None`` for a scores-only release). A torch
    factory runs only as ``code`` allows (see :class:`BundleCode`)."""
    kind = m.get("kind")
    if kind not in EXTERNAL_KINDS:
        raise DataError(f"{root}/release.json: model kind {kind!r} is unknown; known: {', '.join(EXTERNAL_KINDS)}.")
    code = BundleCode.of(code)
    if code.factory is not None and kind != "torch_factory":
        flag = worded("--factory", "BundleCode(factory=...)")
        raise ParameterError(f"{flag} applies to a bundle whose model is built by a torch factory; the model of "
                             f"{root} is of kind {kind!r}. Got {flag} {code.factory!r} instead.")
    if kind == "scores":
        load_bundle_npz(root, "scores.npz")     # present and readable
        return None
    from dpaudit.training.models import Classifier      # torch: not for a scores-only release

    spec = ExternalSpec.from_dict(m["spec"] or {})
    path = _bundle_file(root, m["file"], "model")
    if kind == "torch_factory":
        kw = spec.kwargs
        if not kw.get("factory_sha256"):
            raise DataError(f"{root}/release.json: the torch factory has no recorded code digest (factory_sha256); "
                            "dpaudit runs only code pinned by the release. Re-make it with dpaudit release make.")
        weights = _check_weights(path)
        kwargs = check_code_kwargs(kw.get("factory_kwargs"), f"{root}/release.json: model.spec.kwargs.factory_kwargs")
        build, label = code.callable_for("factory", kw.get("factory"), kw.get("factory_sha256"), bundle=root,
                                         kwargs=kwargs)
        module = _build_and_load(build, label, weights, kwargs, follow_symlinks=False)
        return Classifier(spec, module=module)          # type: ignore[arg-type] - duck-typed spec
    est = (load_sklearn_model(path, follow_symlinks=False) if kind == "sklearn"
           else load_catboost_model(path, follow_symlinks=False))
    return Classifier(spec, estimator=est)              # type: ignore[arg-type]


def load_bundled_dataset(root: Path, d: Mapping[str, Any], *, input_shape: tuple[int, ...] | None = None):
    """The records of a release made from outside data (``data.npz`` with X, y) as a :class:`Dataset`, checked as
    ``dpaudit release make`` checks them (:func:`~dpaudit.training.release_meta.check_records`: real, finite,
    ``release.json``'s record count and class count, the model's ``input_shape``)."""
    from dpaudit.training.data import Dataset
    from dpaudit.training.bundle_arrays import check_records

    if d["name"] == "scores":
        raise DataError(f"{root}: a scores-only release has no record features (only the model's scores); the "
                        "threshold and LiRA attacks run on its scores.npz.")
    fname = d.get("file", "data.npz")
    arrays = load_bundle_npz(root, fname)
    if set(arrays) != {"X", "y"}:
        raise DataError(f"{root}/{fname} must hold exactly the arrays 'X' and 'y'; it holds {sorted(arrays)}.")
    X, y = check_records(arrays["X"], arrays["y"], f"{root}/{fname}", num_classes=int(d["num_classes"]),
                         input_shape=input_shape, num_records=int(d["num_records"]))
    return Dataset("bundled", X, y, int(d["num_classes"]), tuple(X.shape[1:]))


def recipe_train_fn(meta: Mapping[str, Any], code: BundleCode | None = None, root: str | Path = "."):
    """``(X, y, seed) -> model`` of an outside release's recipe: the training function it names (run only as
    ``code`` allows, see :class:`BundleCode`; ``root`` is the bundle folder), or a dpaudit architecture with a
    :class:`~dpaudit.training.ensemble.TrainConfig`."""
    recipe = meta["model"].get("recipe") or {}
    num_classes = int((meta["model"].get("spec") or {}).get("num_classes") or meta["dataset"].get("num_classes") or 2)
    if recipe.get("train_fn"):
        if not recipe.get("train_fn_sha256"):
            raise DataError("The release's training function has no recorded code digest (train_fn_sha256); dpaudit "
                            "runs only code pinned by the release. Re-make it with dpaudit release make.")
        train, label = BundleCode.of(code).callable_for("train_fn", recipe["train_fn"], recipe["train_fn_sha256"],
                                                        bundle=Path(root))
        return _wrap_train(train, label, num_classes)
    if recipe.get("opacus"):
        from dpaudit.integrations.opacus import OpacusRecipe

        where = f"{root}/release.json: model.recipe.opacus"
        rec = OpacusRecipe.from_dict(recipe["opacus"], where=where)
        kw = (meta["model"].get("spec") or {}).get("kwargs") or {}
        if meta["model"].get("kind") != "torch_factory" or not kw.get("factory_sha256"):
            raise DataError(f"{where} trains the release's own pinned torch factory; this release has none.")
        kwargs = check_code_kwargs(kw.get("factory_kwargs"), f"{root}/release.json: model.spec.kwargs.factory_kwargs")
        build, label = BundleCode.of(code).callable_for("factory", kw.get("factory"), kw.get("factory_sha256"),
                                                        bundle=Path(root), kwargs=kwargs)
        return _wrap_train(rec.train_fn(build, **kwargs), f"the Opacus recipe on {label}", num_classes)
    if recipe.get("model"):
        from dpaudit.training.ensemble import TrainConfig, fit_classifier
        from dpaudit.training.models import ModelSpec

        spec, config = ModelSpec.from_dict(recipe["model"]), TrainConfig.from_dict(recipe.get("train_config") or {})
        return lambda X, y, seed: fit_classifier(spec, X, y, config, int(seed))
    raise DataError("This release has no training recipe for shadow / reference models (make it with "
                    f"{worded('--train-fn FILE.py:train or --recipe-model NAME', 'train_fn=' + repr('FILE.py:train') + ' or recipe_model=NAME')}"
                    "); only the threshold attack is possible.")


def recipe_train_many(meta: Mapping[str, Any], code: BundleCode | None = None, root: str | Path = "."):
    """``(datasets, seed) -> [model]`` of an outside release's recipe (the ensemble trainer for dpaudit torch
    architectures; one at a time otherwise). Model ``i`` depends only on ``datasets[i]``, ``seed`` and ``i``."""
    recipe = meta["model"].get("recipe") or {}
    one = recipe_train_fn(meta, code, root)
    if recipe.get("model"):
        from dpaudit.training.ensemble import TrainConfig, train_ensemble
        from dpaudit.training.models import ModelSpec

        spec, config = ModelSpec.from_dict(recipe["model"]), TrainConfig.from_dict(recipe.get("train_config") or {})
        if spec.is_torch:
            return lambda datasets, seed: train_ensemble(spec, list(datasets), config, seed=int(seed),
                                                         progress=False).members()
    from dpaudit.training.ensemble import model_seed

    return lambda datasets, seed: [one(X, y, model_seed(int(seed), i) % (2**31 - 1)) for i, (X, y) in enumerate(datasets)]
