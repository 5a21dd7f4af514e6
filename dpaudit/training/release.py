"""Release bundles: the contract between training and auditing.

A release is a directory written atomically (built under a temporary name, renamed when complete)::

    release.json      schema, method, dataset spec, params, seed, utility, model (spec, file, train_config),
                      ledger, statement, claim, assumptions, created_by
    model.*           model.safetensors (+ model.json spec) | model.skops | model.cbm -- never a pickle
    votes.npy         PATE-style methods only (curator-only vote histograms), allow_pickle=False
    membership.npz    members / nonmembers / attacker: int64 indices into load_dataset(**dataset)

:func:`load_release` checks every file and cross-reference and raises :class:`DataError` with the
offending file and field; :meth:`Release.train_fn` / :meth:`Release.train_many` rebuild the target's
training recipe from ``release.json`` alone, so an attack can train shadow models without importing any
method code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit._io import atomic_dir, read_json, save_npy, save_npz, write_json
from dpaudit.errors import DataError, ParameterError, check_int
from dpaudit.training.data import DATASETS, Dataset, load_dataset
from dpaudit.training.ensemble import TrainConfig, fit_classifier, model_seed, train_ensemble
from dpaudit.training.models import Classifier, ModelSpec, load_classifier, save_classifier

__all__ = ["SCHEMA_VERSION", "MEMBERSHIP_KEYS", "Release", "write_release", "load_release"]

SCHEMA_VERSION = 1
MEMBERSHIP_KEYS = ("members", "nonmembers", "attacker")
_CLAIM_KEYS = ("epsilon", "delta", "granularity", "text")


def _as_dict(obj: Any, name: str) -> dict | None:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return json.loads(json.dumps(dict(obj), default=_json_default))
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return json.loads(json.dumps(to_dict(), default=_json_default))
    raise ParameterError(f"The '{name}' parameter of write_release must be a dict or have to_dict(). Got {type(obj).__name__} instead.")


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    td = getattr(o, "to_dict", None)
    if callable(td):
        return td()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _index_array(v: Any, key: str) -> np.ndarray:
    a = np.asarray(v)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise DataError(f"membership[{key!r}] must be a 1-D integer index array; got dtype {a.dtype}, shape {a.shape}.")
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise DataError(f"membership[{key!r}] has negative indices.")
    if np.unique(a).size != a.size:
        raise DataError(f"membership[{key!r}] has repeated indices.")
    return a


def _check_membership(m: Mapping[str, np.ndarray], n: int | None, where: str) -> dict[str, np.ndarray]:
    missing = [k for k in MEMBERSHIP_KEYS if k not in m]
    if missing:
        raise DataError(f"{where}: membership lacks {missing}; expected keys {list(MEMBERSHIP_KEYS)}.")
    out = {k: _index_array(m[k], k) for k in m}
    if np.intersect1d(out["members"], out["nonmembers"]).size:
        raise DataError(f"{where}: members and nonmembers overlap.")
    if np.intersect1d(out["members"], out["attacker"]).size:
        raise DataError(f"{where}: the attacker's data overlaps the members.")
    if n is not None:
        for k, a in out.items():
            if a.size and a.max() >= n:
                raise DataError(f"{where}: membership[{k!r}] has index {int(a.max())}, out of range for the data set of {n} records.")
    return out


def _check_dataset_spec(d: Any, where: str) -> dict:
    if not isinstance(d, Mapping) or "name" not in d:
        raise DataError(f"{where}: dataset must be a dict with at least 'name' (and 'seed', 'num_samples', 'data_dir').")
    d = dict(d)
    if d["name"] in OUTSIDE_DATASETS:   # release make: the records live in the bundle (data.npz), or only scores
        if not isinstance(d.get("num_records"), int) or d["num_records"] < 1:
            raise DataError(f"{where}: dataset {d['name']!r} needs 'num_records' (a positive int).")
        return d
    if d["name"] not in DATASETS:
        raise DataError(f"{where}: unknown data set {d['name']!r}; known: {', '.join(DATASETS)}.")
    d.setdefault("seed", 0)
    d.setdefault("num_samples", None)
    if d.get("data_dir") is not None:
        d["data_dir"] = str(d["data_dir"])
    return d


def _load_kwargs(d: Mapping) -> dict:
    kw = {"seed": int(d.get("seed", 0)), "num_samples": d.get("num_samples")}
    if d.get("data_dir") is not None:
        kw["data_dir"] = d["data_dir"]
    return kw


#: Dataset names of releases made from outside artefacts (``dpaudit release make``): ``bundled`` -- the records
#: are the bundle's ``data.npz`` (X, y); ``scores`` -- no records, only the model's outputs (``scores.npz``).
OUTSIDE_DATASETS = ("bundled", "scores")

#: Codes of the machine-readable flags a method may attach to its release (``release.json["flags"]``): each
#: names a way the method's privacy claim can fail that a report must show, with the method's own explanation.
FLAG_CODES = (
    "teachers_not_independent",      # PATE-style sensitivity assumes one record moves one teacher's vote
    "composition_ignored_by_claim",  # the claimed epsilon leaves out the composition over rounds or queries
    "distillation_not_accounted",    # a loss term depends on a non-private model trained on the same data
    "sampling_not_poisson",          # DP-SGD accounted as Poisson sampling, but the data loader was not Poisson
    "granularity_not_covered",       # the claim's granularity is not the one the accounting covers
)


def _flags(flags: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    out = []
    for item in flags:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise ParameterError(f"The 'flags' parameter of write_release must hold (code, message) pairs. Got {item!r:.80} instead.")
        code, message = item
        if code not in FLAG_CODES:
            raise ParameterError(f"The flag code of write_release must be one of {', '.join(map(repr, FLAG_CODES))}. Got {code!r} instead.")
        out.append({"code": code, "message": message})
    return out


def write_release(
    out_dir,
    *,
    method: str,
    dataset: Mapping[str, Any],
    params: Mapping[str, Any],
    seed: int,
    utility: Mapping[str, Any],
    classifier: Classifier,
    train_config: TrainConfig | Mapping | None,
    ledger: Any,
    statement: Any,
    claim: Mapping[str, Any],
    membership: Mapping[str, np.ndarray],
    votes: np.ndarray | None = None,
    assumptions: Sequence[str] = (),
    flags: Sequence[tuple[str, str]] = (),
    overwrite: bool = False,
    model_meta: Mapping[str, Any] | None = None,
    arrays: Mapping[str, Mapping[str, np.ndarray]] | None = None,
) -> Path:
    """Write a release bundle to ``out_dir`` atomically (the whole directory appears at once).

    Parameters
    ----------
    dataset : dict
        ``{"name", "seed", "num_samples", "data_dir"?}`` such that ``load_dataset(name, **rest)`` rebuilds
        the data the membership indices point into. ``num_records`` (its length) is added if absent
        (by loading the data set once).
    classifier : Classifier
        The released model; written with :func:`~dpaudit.training.models.save_classifier`.
    train_config : TrainConfig or dict or None
        The recipe that trained the released model (None for tree models); attacks retrain with it.
    ledger, statement : objects with ``to_dict()`` or dicts (or None)
        The privacy ledger and the accounting result; their dicts are stored.
    claim : dict
        ``{"epsilon", "delta", "granularity", "text"}``: what the method claims.
    membership : dict of int arrays
        ``members``, ``nonmembers``, ``attacker`` (indices into the data set); disjointness of members
        from the other two is checked.
    votes : array, optional
        Vote histograms (queries x classes) of PATE-style methods.
    model_meta : dict, optional
        Extra fields of ``release.json["model"]`` for outside models (``kind``, ``recipe``, ... -- see
        :mod:`dpaudit.training.external`); ``classifier`` may be None only with ``kind = "scores"``.
    arrays : dict, optional
        ``{file name: {key: array}}``: further npz files of the bundle (``data.npz``, ``scores.npz``).
    """
    owner = "write_release"
    if not isinstance(method, str) or not method:
        raise ParameterError(f"The 'method' parameter of {owner} must be a non-empty str. Got {method!r} instead.")
    seed = check_int(seed, "seed", owner, low=0)
    extra_model = dict(model_meta or {})
    scores_only = extra_model.get("kind") == "scores"
    if not isinstance(classifier, Classifier) and not (scores_only and classifier is None):
        raise ParameterError(f"The 'classifier' parameter of {owner} must be a Classifier. Got {type(classifier).__name__} instead.")
    ds = _check_dataset_spec(dataset, owner)
    if ds.get("num_records") is None:
        ds["num_records"] = len(load_dataset(ds["name"], **_load_kwargs(ds)))
    ds["num_records"] = int(ds["num_records"])
    if isinstance(train_config, TrainConfig):
        tc = train_config.to_dict()
    elif train_config is None:
        tc = None
    elif isinstance(train_config, Mapping):
        tc = TrainConfig.from_dict(train_config).to_dict()
    else:
        raise ParameterError(f"The 'train_config' parameter of {owner} must be a TrainConfig, dict or None. Got {type(train_config).__name__} instead.")
    claim_d = _as_dict(claim, "claim") or {}
    missing = [k for k in _CLAIM_KEYS if k not in claim_d]
    if missing:
        raise ParameterError(f"The 'claim' parameter of {owner} must have the keys {list(_CLAIM_KEYS)}; missing {missing}.")
    mem = _check_membership(membership, ds["num_records"], owner)
    if votes is not None:
        votes = np.asarray(votes)
        if votes.ndim != 2 or not np.issubdtype(votes.dtype, np.number):
            raise DataError(f"{owner}: votes must be a numeric (queries x classes) array; got shape {votes.shape}.")
    from dpaudit import __version__

    util = _as_dict(utility, "utility") or {}
    acc = util.get("test_accuracy")
    if scores_only and acc is None:
        pass   # losses alone say nothing about the predicted class
    elif isinstance(acc, bool) or not isinstance(acc, (int, float)) or not 0.0 <= float(acc) <= 1.0:
        raise ParameterError("The 'utility' parameter of write_release must hold 'test_accuracy' (the released model's "
                             f"accuracy on the test split) as a float in [0, 1]. Got {acc!r} instead.")
    meta: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "method": method,
        "dataset": ds,
        "params": _as_dict(params, "params") or {},
        "seed": seed,
        "utility": util,
        "model": {"spec": None if classifier is None else classifier.spec.to_dict(), "file": None, "train_config": tc,
                  **extra_model},
        "ledger": _as_dict(ledger, "ledger"),
        "statement": _as_dict(statement, "statement"),
        "claim": claim_d,
        "assumptions": [str(a) for a in assumptions],
        "flags": _flags(flags),
        "created_by": f"dpaudit {__version__}",
    }
    try:
        ctx = atomic_dir(out_dir, overwrite=overwrite)
        with ctx as tmp:
            if classifier is not None:
                model_path = save_classifier(classifier, tmp / "model")
                meta["model"]["file"] = model_path.name
            for fname, content in (arrays or {}).items():
                save_npz(tmp / fname, **content)
            save_npz(tmp / "membership.npz", **mem)
            if votes is not None:
                save_npy(tmp / "votes.npy", votes)
            write_json(tmp / "release.json", meta)
    except FileExistsError:
        raise DataError(f"{out_dir} already exists; pass overwrite=True (--overwrite) to replace it.") from None
    return Path(out_dir)


@dataclass
class Release:
    """A loaded release bundle (see the module docstring)."""

    path: Path
    meta: dict
    model: Classifier | None        # None: a scores-only release (see scores())
    votes: np.ndarray | None
    membership: dict[str, np.ndarray]

    @property
    def spec(self) -> ModelSpec:
        return None if self.model is None else self.model.spec

    @property
    def kind(self) -> str:
        """``"dpaudit"`` for releases of dpaudit's methods, else the outside model's kind (``torch_factory``,
        ``sklearn``, ``catboost``, ``scores``; see :mod:`dpaudit.training.external`)."""
        return self.meta["model"].get("kind") or "dpaudit"

    def scores(self) -> dict[str, np.ndarray]:
        """The arrays of a scores-only release's ``scores.npz`` (see :mod:`dpaudit.audit.release_make`)."""
        from dpaudit.training.external import load_bundle_npz

        return load_bundle_npz(self.path, "scores.npz")

    @property
    def has_recipe(self) -> bool:
        """Whether shadow / reference models can be trained (own methods always; outside models with a recipe)."""
        return self.kind == "dpaudit" or bool(self.meta["model"].get("recipe"))

    @property
    def train_config(self) -> TrainConfig | None:
        tc = self.meta["model"].get("train_config")
        return None if tc is None else TrainConfig.from_dict(tc)

    def dataset(self) -> Dataset:
        """The data set the membership indices point into, rebuilt from ``meta["dataset"]``."""
        d = self.meta["dataset"]
        if d["name"] in OUTSIDE_DATASETS:
            from dpaudit.training.external import load_bundled_dataset

            return load_bundled_dataset(self.path, d)
        ds = load_dataset(d["name"], **_load_kwargs(d))
        n = d.get("num_records")
        if n is not None and len(ds) != int(n):
            raise DataError(
                f"{self.path}: the rebuilt data set {d['name']!r} has {len(ds)} records, the release says {n} "
                "(different data files or library version?)."
            )
        return ds

    def train_fn(self):
        """``(X, y, seed) -> Classifier``: trains one model with the target's architecture and recipe."""
        if self.kind != "dpaudit":
            from dpaudit.training.external import recipe_train_fn

            return recipe_train_fn(self.meta)
        spec, config = self.spec, self.train_config

        def train(X: np.ndarray, y: np.ndarray, seed: int) -> Classifier:
            return fit_classifier(spec, X, y, config, int(seed))

        return train

    def train_many(self):
        """``(datasets, seed) -> [Classifier]``: many models of the recipe at once (ensemble trainer for
        torch specs). Model ``i`` depends only on ``datasets[i]``, ``seed`` and ``i``."""
        if self.kind != "dpaudit":
            from dpaudit.training.external import recipe_train_many

            return recipe_train_many(self.meta)
        spec, config = self.spec, self.train_config

        def train(datasets: Sequence[tuple[np.ndarray, np.ndarray]], seed: int) -> list[Classifier]:
            seed = int(seed)
            if spec.is_torch:
                ens = train_ensemble(spec, list(datasets), config or TrainConfig(), seed=seed, progress=False)
                return ens.members()
            return [fit_classifier(spec, X, y, config, model_seed(seed, i) % (2**31 - 1))
                    for i, (X, y) in enumerate(datasets)]

        return train


def load_release(path) -> Release:
    """Load and check a release bundle; any missing or inconsistent file gives a :class:`DataError`."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"Release directory not found: {root}.")
    meta_path = root / "release.json"
    if not meta_path.is_file():
        raise DataError(f"{root}: release.json is missing; not a release bundle.")
    try:
        meta = read_json(meta_path)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{meta_path}: not valid JSON ({exc}).") from None
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: expected a JSON object.")
    if meta.get("schema") != SCHEMA_VERSION:
        raise DataError(f"{meta_path}: schema version {meta.get('schema')!r} is unknown; this dpaudit reads schema {SCHEMA_VERSION}.")
    for key in ("method", "dataset", "seed", "model", "claim"):
        if key not in meta:
            raise DataError(f"{meta_path}: the field {key!r} is missing.")
    _check_dataset_spec(meta["dataset"], str(meta_path))
    m = meta["model"]
    if not isinstance(m, dict) or "spec" not in m or "file" not in m:
        raise DataError(f"{meta_path}: 'model' must hold 'spec' and 'file'.")
    if m.get("kind") is not None:   # an outside model (dpaudit release make)
        from dpaudit.training.external import load_external_model

        model = load_external_model(root, m)
        spec = None if model is None else model.spec
    else:
        spec, model = _load_own_model(root, m, meta_path)
    return _finish_loading(root, meta, spec, model)


def _load_own_model(root: Path, m: dict, meta_path: Path) -> tuple[ModelSpec, Classifier]:
    try:
        spec = ModelSpec.from_dict(m["spec"])
    except (ParameterError, TypeError, ValueError) as exc:
        raise DataError(f"{meta_path}: invalid model spec ({exc}).") from None
    if m.get("train_config") is not None:
        try:
            TrainConfig.from_dict(m["train_config"])
        except (ParameterError, TypeError, KeyError) as exc:
            raise DataError(f"{meta_path}: invalid train_config ({exc}).") from None
    fname = m["file"]
    if not isinstance(fname, str) or Path(fname).name != fname:
        raise DataError(f"{meta_path}: model file {fname!r} must be a plain file name inside the bundle.")
    model_file = root / fname
    if not model_file.is_file():
        raise DataError(f"{root}: the model file {fname} named in release.json is missing.")
    return spec, load_classifier(model_file, spec)


def _finish_loading(root: Path, meta: dict, spec: Any, model: Classifier | None) -> "Release":
    mem_path = root / "membership.npz"
    if not mem_path.is_file():
        raise DataError(f"{root}: membership.npz is missing.")
    try:
        with np.load(mem_path, allow_pickle=False) as z:
            raw = {k: z[k] for k in z.files}
    except (ValueError, OSError) as exc:
        raise DataError(f"{mem_path}: not a readable npz of index arrays ({exc}).") from None
    n = meta["dataset"].get("num_records")
    membership = _check_membership(raw, None if n is None else int(n), str(mem_path))

    votes = None
    votes_path = root / "votes.npy"
    if votes_path.is_file():
        try:
            votes = np.load(votes_path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise DataError(f"{votes_path}: not a readable npy array ({exc}).") from None
        if votes.ndim != 2:
            raise DataError(f"{votes_path}: expected a (queries x classes) array; got shape {votes.shape}.")
        if spec is None or votes.shape[1] != spec.num_classes:
            raise DataError(f"{votes_path}: {votes.shape[1]} vote columns but the model has "
                            f"{None if spec is None else spec.num_classes} classes.")
    return Release(path=root, meta=meta, model=model, votes=votes, membership=membership)
