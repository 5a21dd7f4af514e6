"""Release bundles: the contract between training and auditing.

A release is a directory written atomically (built under a temporary name, renamed when complete)::

    release.json      schema, method, dataset spec, params, seed, utility, model (spec, file, train_config),
                      ledger, statement, claim, assumptions, created_by
    model.*           model.safetensors (+ model.json spec) | model.skops | model.cbm -- never a pickle
    votes.npy         PATE-style methods only (curator-only vote histograms), allow_pickle=False
    membership.npz    members / nonmembers / attacker: int64 indices into load_dataset(**dataset)
    canaries.npz      only with a [canaries] table: the planted one-run canaries as the attacker sees them
                      (X, y | coords, observations); release.json["canaries"] says they are there
    canaries_truth.npz  the canaries' inclusion bits, apart from what the attacker sees (read only for the bound)

:func:`load_release` checks every file and cross-reference and raises :class:`DataError` with the
offending file and field; :meth:`Release.train_fn` / :meth:`Release.train_many` rebuild the target's
training recipe from ``release.json`` alone, so an attack can train shadow models without importing any
method code.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit._io import (atomic_dir, check_input_file, load_json_file, load_npy_file, load_npz_file, save_npy, save_npz,
                         write_json)
from dpaudit.errors import DataError, ParameterError, format_value, check_int
from dpaudit.serial import to_dict
from dpaudit.training.data import DATASETS, Dataset, load_dataset
from dpaudit.training.ensemble import TrainConfig, fit_classifier, model_seed, train_ensemble
from dpaudit.training.models import Classifier, ModelSpec, load_classifier, save_classifier

__all__ = ["SCHEMA_VERSION", "READABLE_SCHEMA_VERSIONS", "MEMBERSHIP_KEYS", "Release", "write_release", "load_release"]

#: Version 2: the accounting result under ``statement`` is written by the one serialiser (``headline`` is an index
#: into ``statements``, the headline figure is ``statement.statement``); version-1 bundles are still read.
SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
#: Largest data set a release may point into, and largest class count / input size of its model spec:
#: beyond these a bundle would make dpaudit allocate without bound, so it is refused as malformed.
MAX_RECORDS = 100_000_000
MAX_CLASSES = 100_000
MAX_INPUT_SIZE = 100_000_000
MEMBERSHIP_KEYS = ("members", "nonmembers", "attacker")
_CLAIM_KEYS = ("epsilon", "delta", "granularity", "text")


def _as_dict(obj: Any, name: str) -> dict | None:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return json.loads(json.dumps(dict(obj), default=_json_default))
    try:
        return json.loads(json.dumps(to_dict(obj), default=_json_default))  # a result object: the one serialiser
    except TypeError:
        raise ParameterError(f"The '{name}' parameter of write_release must be a dict or a result object. Got {type(obj).__name__} instead.") from None


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
        if isinstance(d.get("num_records"), bool) or not isinstance(d.get("num_records"), int) or not 1 <= d["num_records"] <= MAX_RECORDS:
            raise DataError(f"{where}: dataset {d['name']!r} needs 'num_records' (a positive int <= {MAX_RECORDS}).")
        return d
    if not isinstance(d["name"], str) or d["name"] not in DATASETS:
        raise DataError(f"{where}: unknown data set {format_value(d['name'])}; known: {', '.join(DATASETS)}.")
    d.setdefault("seed", 0)
    d.setdefault("num_samples", None)
    try:
        d["seed"] = check_int(d["seed"], "dataset.seed", where, low=0, high=2**63 - 1)
        if d["num_samples"] is not None:
            d["num_samples"] = check_int(d["num_samples"], "dataset.num_samples", where, low=1, high=MAX_RECORDS)
        if d.get("num_records") is not None:
            d["num_records"] = check_int(d["num_records"], "dataset.num_records", where, low=1, high=MAX_RECORDS)
    except ParameterError as exc:
        raise DataError(str(exc)) from None
    if d.get("data_dir") is not None:
        if not isinstance(d["data_dir"], (str, Path)) or not str(d["data_dir"]).strip():
            raise DataError(f"{where}: dataset.data_dir must be a directory path. Got {format_value(d['data_dir'])} instead.")
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
    canaries: tuple[Mapping[str, Mapping[str, np.ndarray]], Mapping[str, Any]] | None = None,
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
    canaries : (files, entry), optional
        Canaries planted in the released model's training data, as
        :func:`~dpaudit.training.canaries.release_canary_files` returns them: ``canaries.npz`` (the attacker's
        view), ``canaries_truth.npz`` (the inclusion bits) and the ``release.json["canaries"]`` entry.
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
    from dpaudit._version import __version__

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
    canary_files: dict[str, Mapping[str, np.ndarray]] = {}
    if canaries is not None:
        if classifier is None:
            raise ParameterError(f"The 'canaries' parameter of {owner} needs a released model (not a scores-only release).")
        canary_files, entry = dict(canaries[0]), _as_dict(canaries[1], "canaries")
        _check_canary_entry(entry, owner)
        meta["canaries"] = entry
    try:
        ctx = atomic_dir(out_dir, overwrite=overwrite)
        with ctx as tmp:
            if classifier is not None:
                model_path = save_classifier(classifier, tmp / "model")
                meta["model"]["file"] = model_path.name
            for fname, content in {**(arrays or {}), **canary_files}.items():
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
    #: The attacker's view of the planted canaries (``canaries.npz``: X, y | coords, observations), checked against
    #: ``meta["canaries"]``; None when the release holds none. The inclusion bits are never here (see
    #: :meth:`canary_truth`).
    canaries: dict[str, np.ndarray] | None = None

    @classmethod
    def load(cls, path: str | Path, *, data_dir: str | Path | None = None, trust_data_dir: bool = False) -> "Release":
        """Load and check the bundle at ``path`` (:func:`load_release`; ``dpaudit.Release.load(path)``)."""
        return load_release(path, data_dir=data_dir, trust_data_dir=trust_data_dir)

    @property
    def canary_info(self) -> dict | None:
        """``release.json["canaries"]`` (kind, count, seed, audit, files), or None."""
        return self.meta.get("canaries")

    def canary_truth(self) -> np.ndarray:
        """The ``(m,)`` inclusion bits of the planted canaries (``canaries_truth.npz``): for computing a bound
        from scores already made, never for scoring."""
        info = self.canary_info
        if info is None:
            raise DataError(f"{self.path}: the release holds no canaries (no 'canaries' in release.json).")
        real_root = self.path.resolve()
        f = _bundle_file(self.path, real_root, info["truth_file"])
        m = int(info["count"])
        raw = load_npz_file(f, "the canary truth file", kinds="b", max_bytes=m + 64 * 1024)
        inc = raw.get("included")
        if set(raw) != {"included"} or inc is None or inc.shape != (m,):
            raise DataError(f"{f}: expected exactly one array 'included' of shape ({m},) (release.json's canaries.count); "
                            f"got {sorted(raw)} with shape {None if inc is None else inc.shape}.")
        return inc.astype(bool)

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


def _bundle_file(root: Path, real_root: Path, name: str, meta_path: Any = None) -> Path:
    """``root/name`` if it is a regular file inside the bundle; a symlink (or anything resolving outside the
    bundle) is refused, so a bundle can never make dpaudit read files elsewhere."""
    f = root / name
    if f.is_symlink() or (f.exists() and f.resolve().parent != real_root):
        raise DataError(f"{root}: {name} is a symbolic link (to {_link_target(f)}); a release bundle must hold its "
                        "files itself, so dpaudit refuses to follow links out of it.")
    return f


def _link_target(f: Path) -> str:
    try:
        return str(f.readlink())
    except OSError:
        return "elsewhere"


def _resolve_data_dir(meta_dir: Any, root: Path, real_root: Path, data_dir: Any, trust: bool) -> str | None:
    """Where the release's data set is read from (see :func:`load_release`)."""
    if data_dir is not None:
        return str(data_dir)
    if meta_dir is None or trust:
        return meta_dir
    q = Path(meta_dir)
    inside = (real_root / q).resolve() if not q.is_absolute() else q.resolve()
    if inside == real_root or real_root in inside.parents:
        return str(inside)
    raise DataError(
        f"{root}: release.json asks to read its data from {meta_dir}, outside the bundle; a bundle does not choose "
        "where dpaudit reads files. Pass --data-dir DIR (data_dir=) to name the data directory yourself, or "
        "--trust-data-dir (trust_data_dir=True) to use the one the bundle names."
    )


def load_release(path, *, data_dir: str | Path | None = None, trust_data_dir: bool = False) -> Release:
    """Load and check a release bundle; any missing or inconsistent file gives a :class:`DataError`.

    Every file must lie in the bundle directory itself (symbolic links, and a bundle directory that is itself a
    link, are refused). ``release.json``'s ``dataset.data_dir`` is followed only inside the bundle, unless
    ``data_dir`` overrides it or ``trust_data_dir`` accepts it as written.
    """
    root = Path(path)
    if root.is_symlink():
        raise DataError(f"The release directory {root} is a symbolic link (to {_link_target(root)}); pass the "
                        "directory itself, dpaudit does not follow links into or out of release bundles.")
    if not root.is_dir():
        raise DataError(f"Release directory not found: {root}.")
    real_root = root.resolve()
    try:
        linked = sorted(f for f in root.iterdir() if f.is_symlink())
    except OSError as exc:
        raise DataError(f"The release directory {root} cannot be read: {exc.strerror or exc}.") from None
    if linked:  # any file of the bundle (model, membership, votes, an outside model's data.npz / scores.npz)
        _bundle_file(root, real_root, linked[0].name)
    meta_path = _bundle_file(root, real_root, "release.json")
    if not meta_path.exists():
        raise DataError(f"{root}: release.json is missing; not a release bundle.")
    meta = load_json_file(meta_path, "the release file")
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: expected a JSON object.")
    if isinstance(meta.get("schema"), bool) or meta.get("schema") not in READABLE_SCHEMA_VERSIONS:
        raise DataError(f"{meta_path}: schema version {format_value(meta.get('schema'))} is unknown; this dpaudit reads "
                        f"schemas {', '.join(map(str, READABLE_SCHEMA_VERSIONS))}.")
    for key in ("method", "dataset", "seed", "model", "claim"):
        if key not in meta:
            raise DataError(f"{meta_path}: the field {key!r} is missing.")
    meta["dataset"] = _check_dataset_spec(meta["dataset"], str(meta_path))
    _check_meta_fields(meta, str(meta_path))
    m = meta["model"]
    if not isinstance(m, dict) or "spec" not in m or "file" not in m:
        raise DataError(f"{meta_path}: 'model' must hold 'spec' and 'file'.")
    if m.get("kind") is not None:   # an outside model (dpaudit release make)
        from dpaudit.training.external import load_external_model

        model = load_external_model(root, m)
        spec = None if model is None else model.spec
    else:
        spec, model = _load_own_model(root, real_root, m, meta_path)
    release = _finish_loading(root, real_root, meta, spec, model)
    meta["dataset"]["data_dir"] = _resolve_data_dir(meta["dataset"].get("data_dir"), root, real_root, data_dir, trust_data_dir)
    return release


def _load_own_model(root: Path, real_root: Path, m: dict, meta_path: Path) -> tuple[ModelSpec, Classifier]:
    _check_spec_size(m["spec"], str(meta_path))
    try:
        spec = ModelSpec.from_dict(m["spec"])
    except (ParameterError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise DataError(f"{meta_path}: invalid model spec ({str(exc)[:300]}).") from None
    if m.get("train_config") is not None:
        if not isinstance(m["train_config"], dict):
            raise DataError(f"{meta_path}: model.train_config must be an object or null. Got {format_value(m['train_config'])} instead.")
        try:
            TrainConfig.from_dict(m["train_config"])
        except (ParameterError, TypeError, KeyError, ValueError, AttributeError) as exc:
            raise DataError(f"{meta_path}: invalid train_config ({str(exc)[:300]}).") from None
    fname = m["file"]
    if not isinstance(fname, str) or not fname or Path(fname).name != fname or fname in (".", ".."):
        raise DataError(f"{meta_path}: model file {format_value(fname)} must be a plain file name inside the bundle.")
    model_file = _bundle_file(root, real_root, fname)
    check_input_file(model_file, "the model file named in release.json", max_bytes=None)
    _check_weights_fit_file(spec, model_file)
    return spec, load_classifier(model_file, spec)


def _finish_loading(root: Path, real_root: Path, meta: dict, spec: Any, model: Classifier | None) -> "Release":
    mem_path = _bundle_file(root, real_root, "membership.npz")
    n = meta["dataset"].get("num_records")
    # index arrays: at most 3 x num_records int64 entries, plus headers
    limit = 3 * 8 * (MAX_RECORDS if n is None else int(n)) + 64 * 1024
    raw = load_npz_file(mem_path, "the membership file", kinds="iu", max_bytes=limit)
    membership = _check_membership(raw, None if n is None else int(n), str(mem_path))

    votes = None
    votes_path = _bundle_file(root, real_root, "votes.npy")
    if votes_path.exists():
        votes = load_npy_file(votes_path, "the votes file", kinds="biuf")
        if votes.ndim != 2:
            raise DataError(f"{votes_path}: expected a (queries x classes) array; got shape {votes.shape}.")
        if spec is None or votes.shape[1] != spec.num_classes:
            raise DataError(f"{votes_path}: {votes.shape[1]} vote columns but the model has "
                            f"{None if spec is None else spec.num_classes} classes.")
    canaries = None
    if meta.get("canaries") is not None:
        canaries = _load_canaries(root, real_root, meta, spec)
    return Release(path=root, meta=meta, model=model, votes=votes, membership=membership, canaries=canaries)


def _check_canary_entry(entry: Any, where: str) -> dict:
    """``release.json["canaries"]``: kind, count, seed, audit, the two file names (and steps for Dirac)."""
    from dpaudit.training.canaries import (CANARY_KINDS, MAX_CANARIES, RELEASE_CANARIES_FILE, RELEASE_TRUTH_FILE)
    from dpaudit.training.limits import MAX_STEPS

    if not isinstance(entry, dict):
        raise DataError(f"{where}: 'canaries' must be an object (kind, count, seed, audit, file, truth_file). "
                        f"Got {format_value(entry)} instead.")
    try:
        if entry.get("kind") not in CANARY_KINDS:
            raise DataError(f"{where}: canaries.kind must be one of {', '.join(map(repr, CANARY_KINDS))}. "
                            f"Got {format_value(entry.get('kind'))} instead.")
        check_int(entry.get("count"), "canaries.count", where, low=2, high=MAX_CANARIES)
        check_int(entry.get("seed"), "canaries.seed", where, low=0, high=2**63 - 1)
        if entry["kind"] == "dirac":
            check_int(entry.get("steps"), "canaries.steps", where, low=1, high=MAX_STEPS)
    except ParameterError as exc:
        raise DataError(str(exc)) from None
    for key, want in (("audit", "one-run"), ("file", RELEASE_CANARIES_FILE), ("truth_file", RELEASE_TRUTH_FILE)):
        if entry.get(key) != want:
            raise DataError(f"{where}: canaries.{key} must be {want!r}. Got {format_value(entry.get(key))} instead.")
    return entry


def _load_canaries(root: Path, real_root: Path, meta: dict, spec: Any) -> dict[str, np.ndarray]:
    """The attacker's view of the release's canaries (``canaries.npz``), every array's shape and range checked
    against ``release.json`` and the model spec; sizes are checked before any array is read."""
    from dpaudit.training.canaries import RELEASE_VIEW_KEYS

    where = f"{root / 'release.json'}"
    info = _check_canary_entry(meta["canaries"], where)
    if spec is None:
        raise DataError(f"{where}: canaries need a released model; this release has none.")
    kind, m = info["kind"], int(info["count"])
    f = _bundle_file(root, real_root, info["file"])
    truth = _bundle_file(root, real_root, info["truth_file"])
    for p in (f, truth):
        if not p.is_file():
            raise DataError(f"{root}: release.json lists canaries but {p.name} is missing.")
    if kind == "dirac":
        expected = m * 8 + int(info["steps"]) * m * 8
    else:
        expected = m * (4 * math.prod(spec.input_shape) + 8)
    raw = load_npz_file(f, "the canaries file", kinds="iuf", max_bytes=expected + 64 * 1024)
    want = set(RELEASE_VIEW_KEYS[kind])
    if set(raw) != want:
        raise DataError(f"{f}: {kind} canaries hold exactly {sorted(want)}; found {sorted(raw)}.")
    if kind == "dirac":
        coords, obs = raw["coords"], raw["observations"]
        total = _parameter_count(spec)
        if coords.shape != (m,) or coords.dtype.kind not in "iu" or (m and (coords.min() < 0 or coords.max() >= total)) \
                or np.unique(coords).size != m:
            raise DataError(f"{f}[coords]: expected {m} distinct integer parameter coordinates in [0, {total}); got "
                            f"shape {coords.shape}, dtype {coords.dtype}.")
        if obs.shape != (int(info["steps"]), 1, m) or obs.dtype.kind != "f" or np.isinf(obs).any():
            raise DataError(f"{f}[observations]: expected a finite float array of shape ({info['steps']}, 1, {m}); got "
                            f"shape {obs.shape}, dtype {obs.dtype}.")
        return {"coords": coords.astype(np.int64), "observations": obs.astype(np.float64)}
    X, y = raw["X"], raw["y"]
    if X.shape != (m, *spec.input_shape) or X.dtype.kind != "f" or not np.isfinite(X).all():
        raise DataError(f"{f}[X]: expected finite floats of shape {(m, *spec.input_shape)}; got shape {X.shape}, dtype {X.dtype}.")
    if y.shape != (m,) or y.dtype.kind not in "iu" or (m and (y.min() < 0 or y.max() >= spec.num_classes)):
        raise DataError(f"{f}[y]: expected {m} integer labels in [0, {spec.num_classes}); got shape {y.shape}, dtype {y.dtype}.")
    return {"X": X.astype(np.float32), "y": y.astype(np.int64)}


def _parameter_count(spec: ModelSpec) -> int:
    if not spec.is_torch:
        return 0
    import torch

    from dpaudit.training.models import build_model

    with torch.device("meta"):
        return int(sum(p.numel() for p in build_model(spec).parameters()))


def _check_meta_fields(meta: dict, where: str) -> None:
    """Types of the release.json fields the attacks and reports read (values the bundle could get wrong)."""
    if not isinstance(meta["method"], str) or not meta["method"]:
        raise DataError(f"{where}: 'method' must be a non-empty string. Got {format_value(meta['method'])} instead.")
    try:
        check_int(meta["seed"], "seed", where, low=0, high=2**63 - 1)
    except ParameterError as exc:
        raise DataError(str(exc)) from None
    claim = meta["claim"]
    if not isinstance(claim, dict):
        raise DataError(f"{where}: 'claim' must be an object with {list(_CLAIM_KEYS)}. Got {format_value(claim)} instead.")
    for key in ("delta", "epsilon"):
        v = claim.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, str))):
            raise DataError(f"{where}: claim.{key} must be a number. Got {format_value(v)} instead.")
    if claim.get("delta") is not None:
        try:
            float(claim["delta"])
        except (TypeError, ValueError, OverflowError):
            raise DataError(f"{where}: claim.delta must be a number. Got {format_value(claim['delta'])} instead.") from None
    for key, kind in (("params", dict), ("utility", dict), ("assumptions", list), ("flags", list)):
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            raise DataError(f"{where}: '{key}' must be a{'n object' if kind is dict else ' list'}. Got {format_value(meta[key])} instead.")
    for f in meta.get("flags") or ():
        if not (isinstance(f, dict) and isinstance(f.get("code"), str) and isinstance(f.get("message"), str)):
            raise DataError(f"{where}: every entry of 'flags' must be an object with string 'code' and 'message'. Got {format_value(f)} instead.")
    for key in ("statement", "ledger"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise DataError(f"{where}: '{key}' must be an object or null. Got {format_value(meta[key])} instead.")


def _check_spec_size(spec: Any, where: str) -> None:
    """Refuse a model spec whose sizes would allocate without bound before any model is built."""
    if not isinstance(spec, dict):
        raise DataError(f"{where}: model.spec must be an object. Got {format_value(spec)} instead.")
    k = spec.get("num_classes")
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= MAX_CLASSES:
        raise DataError(f"{where}: model.spec.num_classes must be an int in [2, {MAX_CLASSES}]. Got {format_value(k)} instead.")
    shape = spec.get("input_shape")
    if (not isinstance(shape, list) or not shape or len(shape) > 4
            or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_INPUT_SIZE for x in shape)
            or math.prod(shape) > MAX_INPUT_SIZE):
        raise DataError(f"{where}: model.spec.input_shape must be a list of 1-4 positive ints of product <= "
                        f"{MAX_INPUT_SIZE}. Got {format_value(shape)} instead.")
    kw = spec.get("kwargs") or {}
    if not isinstance(kw, dict):
        raise DataError(f"{where}: model.spec.kwargs must be an object. Got {format_value(kw)} instead.")

    def sizes(v: Any):
        if isinstance(v, bool):
            return
        if isinstance(v, int):
            yield v
        elif isinstance(v, (list, tuple)):
            for x in v:
                yield from sizes(x)

    for key, v in kw.items():
        for x in sizes(v):
            if abs(x) > MAX_INPUT_SIZE:
                raise DataError(f"{where}: model.spec.kwargs.{key} holds {format_value(x)}, beyond the supported {MAX_INPUT_SIZE}.")


def _check_weights_fit_file(spec: ModelSpec, model_file: Path) -> None:
    """A torch spec whose weights could not be in the file (more parameters than the file has bytes) is refused
    before the model is built: the spec is counted on torch's ``meta`` device, which allocates nothing."""
    if not spec.is_torch:
        return
    import torch

    from dpaudit.training.models import build_model

    try:
        with torch.device("meta"):
            count = sum(t.numel() for t in build_model(spec).state_dict().values())
    except (RuntimeError, ValueError, TypeError, NotImplementedError):
        return  # a spec the meta device cannot build is checked by the real load below
    size = model_file.stat().st_size
    if count > size:
        raise DataError(f"{model_file}: the model spec has {count} weights but the file holds only {size} bytes; "
                        "the spec does not describe this file.")
