"""Models trained outside dpaudit, loaded without unpickling: the model kinds of ``dpaudit release make``.

=================  ===========================================================================================
kind               what the release holds / how it is loaded
=================  ===========================================================================================
``torch_factory``  ``model.safetensors`` + an import path ``pkg.module:build`` to a function returning the
                   ``torch.nn.Module`` (called with the stored keyword arguments); the weights must match the
                   module's ``state_dict`` exactly (every missing, unexpected or mis-shaped tensor is named)
``sklearn``        ``model.skops``: any scikit-learn classifier with ``predict_proba``; the file's types beyond
                   skops' defaults must be in :data:`~dpaudit.training.models.SKOPS_TRUSTED_TYPES`
``catboost``       ``model.cbm``: CatBoost's own format
``scores``         no model: ``scores.npz`` holds the model's outputs (scores-only audits)
=================  ===========================================================================================

**Import paths run code.** A factory (``pkg.module:build``) or a training function (``pkg.module:train``)
named in a release is imported -- its module's top-level code runs -- and called, when the release is made
and again when it is loaded or attacked. Only make and load releases whose import paths point at code you trust
(your own). Two guards: the sha256 of the code's source file is recorded when the release is made and checked
before the code runs again (a release runs the code it was made with, or nothing), and standard-library or
dpaudit functions are refused (a hand-edited ``release.json`` cannot name ``os:system``). A release handed to you
with a factory is code handed to you: read it first. Files are never unpickled: ``.pt`` / ``.pth`` / ``.pkl`` / ``.joblib`` files and pickled numpy
arrays are refused with a message on how to convert them.
"""

from __future__ import annotations

import importlib
import json
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from dpaudit.errors import DataError, ParameterError, check_int

__all__ = ["EXTERNAL_KINDS", "ExternalSpec", "import_object", "refuse_pickle", "load_torch_factory", "load_external_model",
           "load_bundle_npz", "load_bundled_dataset", "recipe_train_fn", "recipe_train_many", "absolute_import_path", "code_digest",
           "load_sklearn_model", "load_catboost_model", "external_train_fn", "PICKLE_SUFFIXES"]

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


def _split_import_path(path: Any, what: str) -> tuple[str, str]:
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ParameterError(f"The '{what}' parameter must be an import path 'pkg.module:function' or "
                             f"'path/to/file.py:function'. Got {path!r} instead.")
    mod_name, attr = path.split(":")
    top = mod_name.split(".")[0]
    if not mod_name.endswith(".py") and (top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names
                                         or top == "dpaudit"):
        raise DataError(f"{what} {path!r}: dpaudit runs factories and training functions from your own code only, "
                        f"not from {'dpaudit' if top == 'dpaudit' else 'the standard library'}.")
    return mod_name, attr


def code_digest(path: str, what: str) -> str:
    """sha256 of the source file an import path points into (recorded when a release is made and checked before the
    code runs again when it is loaded, so a release runs the code it was made with or nothing)."""
    import hashlib
    import importlib.util

    mod_name, _ = _split_import_path(path, what)
    if mod_name.endswith(".py"):
        origin = Path(mod_name).resolve()
    else:
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, "")
        try:
            spec = importlib.util.find_spec(mod_name)
        except ModuleNotFoundError as exc:
            raise DataError(f"{what} {path!r}: no module named {exc.name!r} (is it on PYTHONPATH / in the current "
                            "directory?).") from None
        except (ImportError, ValueError) as exc:
            raise DataError(f"{what} {path!r}: cannot locate module {mod_name!r} ({exc}).") from None
        if spec is None:
            raise DataError(f"{what} {path!r}: no module named {mod_name!r} (is it on PYTHONPATH / in the current directory?).")
        if not spec.origin or not Path(spec.origin).is_file():
            raise DataError(f"{what} {path!r}: module {mod_name!r} has no source file to pin (built-in or namespace).")
        origin = Path(spec.origin)
    if not origin.is_file():
        raise DataError(f"{what} {path!r}: the file {str(origin)!r} does not exist.")
    return hashlib.sha256(origin.read_bytes()).hexdigest()


def import_object(path: str, what: str, *, sha256: str | None = None) -> Callable:
    """Resolve ``"pkg.module:name"`` or ``"path/to/file.py:name"`` to a callable (importing the module runs its code
    -- see the module docstring). ``what`` names the parameter in the messages (e.g. ``"--factory"``). With
    ``sha256``, the module's source file must have that digest (:func:`code_digest`) before anything of it runs."""
    mod_name, attr = _split_import_path(path, what)
    if sha256 is not None:
        now = code_digest(path, what)
        if now != sha256:
            raise DataError(f"{what} {path!r}: the code changed since the release was made (sha256 {now[:12]}... is "
                            f"not the recorded {str(sha256)[:12]}...); dpaudit runs only the code a release was made "
                            "with. Re-make the release if the change is yours.")
    if mod_name.endswith(".py"):
        module = _import_file(Path(mod_name), path, what)
    else:
        if "" not in sys.path and "." not in sys.path:   # a user's own module beside the command, as `python -m` does
            sys.path.insert(0, "")
        try:
            module = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            raise DataError(f"{what} {path!r}: no module named {exc.name!r} (is it on PYTHONPATH / in the current "
                            "directory?).") from None
        except Exception as exc:  # noqa: BLE001 - the user's module failed while importing: one line, not their traceback
            raise DataError(f"{what} {path!r}: importing {mod_name!r} failed: {type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DataError(f"{what} {path!r}: module {mod_name!r} has no attribute {attr!r}.")
        obj = getattr(obj, part)
    if not callable(obj):
        raise DataError(f"{what} {path!r}: {attr!r} is a {type(obj).__name__}, not a function.")
    return obj


def _import_file(file: Path, path: str, what: str):
    import hashlib
    import importlib.util

    file = file.resolve()
    if not file.is_file():
        raise DataError(f"{what} {path!r}: the file {str(file)!r} does not exist.")
    name = f"_dpaudit_user_{file.stem}_{hashlib.sha256(str(file).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)      # type: ignore[arg-type]
    try:
        spec.loader.exec_module(module)                 # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 - the user's file failed while importing: one line
        raise DataError(f"{what} {path!r}: running {str(file)!r} failed: {type(exc).__name__}: {exc}") from None
    sys.modules[name] = module
    return module


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
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError:
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
    """Build the module with ``factory(**factory_kwargs)`` and load ``weights`` (.safetensors) into it, strictly.

    Every missing, unexpected or mis-shaped tensor is named in one :class:`DataError` line.
    """
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = Path(weights)
    refuse_pickle(weights, "The weights file")
    if weights.suffix != ".safetensors":
        raise DataError(f"The weights file {str(weights)!r} must be a .safetensors file (got {weights.suffix or 'no suffix'}).")
    if not weights.is_file():
        raise DataError(f"The weights file {str(weights)!r} does not exist.")
    build = import_object(factory, "--factory", sha256=factory_sha256)
    try:
        module = build(**dict(factory_kwargs or {}))
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: one line
        raise DataError(f"--factory {factory!r}: calling it failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(module, torch.nn.Module):
        raise DataError(f"--factory {factory!r} returned a {type(module).__name__}, not a torch.nn.Module.")
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as exc:
        raise DataError(f"{weights}: not a readable safetensors file ({exc}).") from None
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shaped = sorted(f"{k} {tuple(state[k].shape)} vs {tuple(expected[k].shape)}" for k in set(state) & set(expected)
                    if tuple(state[k].shape) != tuple(expected[k].shape))
    if missing or unexpected or shaped:
        parts = [f"missing {', '.join(missing)}" if missing else "", f"unexpected {', '.join(unexpected)}" if unexpected else "",
                 f"mis-shaped (file vs module) {'; '.join(shaped)}" if shaped else ""]
        raise DataError(f"{weights} does not match the module built by {factory!r}: "
                        + "; ".join(p for p in parts if p) + ".")
    module.load_state_dict(state, strict=True)
    return module.eval()


def load_sklearn_model(path: Path):
    """A scikit-learn classifier from a ``.skops`` file, loading only types skops trusts by default or in
    :data:`~dpaudit.training.models.SKOPS_TRUSTED_TYPES`."""
    from dpaudit.training.models import SKOPS_TRUSTED_TYPES, load_skops

    p = Path(path)
    refuse_pickle(p, "The model file")
    if p.suffix != ".skops":
        raise DataError(f"The model file {str(p)!r} must be .safetensors (with --factory), .skops or .cbm. Got {p.suffix or 'no suffix'}.")
    try:
        with zipfile.ZipFile(p) as zf:
            top = json.loads(zf.read("schema.json")).get("__module__", "")
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, OSError) as exc:
        raise DataError(f"{p}: not a readable skops file ({exc}).") from None
    if not str(top).startswith("sklearn."):
        raise DataError(f"{p}: holds an object of module {top!r}; only scikit-learn estimators are accepted.")
    est = load_skops(p, SKOPS_TRUSTED_TYPES)
    if not callable(getattr(est, "predict_proba", None)) or not hasattr(est, "classes_"):
        raise DataError(f"{p}: holds a {type(est).__name__}, not a fitted classifier with predict_proba.")
    return est


def load_catboost_model(path: Path):
    """A CatBoost classifier from its own ``.cbm`` format."""
    from catboost import CatBoostClassifier, CatBoostError

    p = Path(path)
    refuse_pickle(p, "The model file")
    if p.suffix != ".cbm":
        raise DataError(f"The model file {str(p)!r} must be a CatBoost .cbm file.")
    est = CatBoostClassifier()
    try:
        est.load_model(str(p), format="cbm")
    except CatBoostError as exc:
        raise DataError(f"{p}: not a readable CatBoost model ({str(exc).splitlines()[0] if str(exc) else exc}).") from None
    return est


def external_train_fn(path: str, num_classes: int, *, sha256: str | None = None):
    """``(X, y, seed) -> model`` from the user's ``pkg.module:train`` (their code runs), checked to return something
    with ``predict_proba``; its outputs are padded to ``num_classes`` columns through ``classes_`` when present."""
    train = import_object(path, "--train-fn", sha256=sha256)

    def fn(X: np.ndarray, y: np.ndarray, seed: int):
        try:
            model = train(X, y, int(seed))
        except Exception as exc:  # noqa: BLE001 - the user's training failed: one line
            raise DataError(f"--train-fn {path!r} failed: {type(exc).__name__}: {exc}") from None
        if not callable(getattr(model, "predict_proba", None)):
            raise DataError(f"--train-fn {path!r} returned a {type(model).__name__} without predict_proba.")
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
    """All arrays of an npz file inside a bundle (``allow_pickle=False``)."""
    p = _bundle_file(root, fname, fname.split(".")[0])
    try:
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError) as exc:
        raise DataError(f"{p}: not a readable npz without pickled objects ({exc}).") from None


def load_external_model(root: Path, m: Mapping[str, Any]):
    """The released outside model of ``release.json["model"]`` (``None`` for a scores-only release)."""
    from dpaudit.training.models import Classifier

    kind = m.get("kind")
    if kind not in EXTERNAL_KINDS:
        raise DataError(f"{root}/release.json: model kind {kind!r} is unknown; known: {', '.join(EXTERNAL_KINDS)}.")
    if kind == "scores":
        load_bundle_npz(root, "scores.npz")     # present and readable
        return None
    spec = ExternalSpec.from_dict(m["spec"] or {})
    path = _bundle_file(root, m["file"], "model")
    if kind == "torch_factory":
        if not spec.kwargs.get("factory_sha256"):
            raise DataError(f"{root}/release.json: the torch factory has no recorded code digest (factory_sha256); "
                            "dpaudit runs only code pinned by the release. Re-make it with dpaudit release make.")
        module = load_torch_factory(spec.kwargs.get("factory"), path, factory_kwargs=spec.kwargs.get("factory_kwargs"),
                                    factory_sha256=spec.kwargs["factory_sha256"])
        return Classifier(spec, module=module)          # type: ignore[arg-type] - duck-typed spec
    est = load_sklearn_model(path) if kind == "sklearn" else load_catboost_model(path)
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


def recipe_train_fn(meta: Mapping[str, Any]):
    """``(X, y, seed) -> model`` of an outside release's recipe: the user's ``train`` function, or a dpaudit
    architecture with a :class:`~dpaudit.training.ensemble.TrainConfig`."""
    recipe = meta["model"].get("recipe") or {}
    num_classes = int((meta["model"].get("spec") or {}).get("num_classes") or meta["dataset"].get("num_classes") or 2)
    if recipe.get("train_fn"):
        if not recipe.get("train_fn_sha256"):
            raise DataError("The release's training function has no recorded code digest (train_fn_sha256); dpaudit "
                            "runs only code pinned by the release. Re-make it with dpaudit release make.")
        return external_train_fn(recipe["train_fn"], num_classes, sha256=recipe["train_fn_sha256"])
    if recipe.get("model"):
        from dpaudit.training.ensemble import TrainConfig, fit_classifier
        from dpaudit.training.models import ModelSpec

        spec, config = ModelSpec.from_dict(recipe["model"]), TrainConfig.from_dict(recipe.get("train_config") or {})
        return lambda X, y, seed: fit_classifier(spec, X, y, config, int(seed))
    raise DataError("This release has no training recipe for shadow / reference models (make it with --train-fn "
                    "pkg.module:train or --recipe-model NAME); only the threshold attack is possible.")


def recipe_train_many(meta: Mapping[str, Any]):
    """``(datasets, seed) -> [model]`` of an outside release's recipe (the ensemble trainer for dpaudit torch
    architectures; one at a time otherwise). Model ``i`` depends only on ``datasets[i]``, ``seed`` and ``i``."""
    recipe = meta["model"].get("recipe") or {}
    one = recipe_train_fn(meta)
    if recipe.get("model"):
        from dpaudit.training.ensemble import TrainConfig, train_ensemble
        from dpaudit.training.models import ModelSpec

        spec, config = ModelSpec.from_dict(recipe["model"]), TrainConfig.from_dict(recipe.get("train_config") or {})
        if spec.is_torch:
            return lambda datasets, seed: train_ensemble(spec, list(datasets), config, seed=int(seed),
                                                         progress=False).members()
    from dpaudit.training.ensemble import model_seed

    return lambda datasets, seed: [one(X, y, model_seed(int(seed), i) % (2**31 - 1)) for i, (X, y) in enumerate(datasets)]
