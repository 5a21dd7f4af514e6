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

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from dpaudit._io import (atomic_dir, check_input_file, check_output_folder, load_json_file, load_npy_file, load_npz_file, open_input, save_npy, save_npz,
                         write_json)
from dpaudit.errors import DataError, ParameterError, format_value, check_bool, check_int, check_path, worded
from dpaudit.serial import to_dict
from dpaudit.training.data import DATASETS, Dataset, load_dataset
if TYPE_CHECKING:
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.models import Classifier, ModelSpec

# torch-backed modules (ensemble, models) are imported where a model is written, loaded or trained: a scores-only
# bundle is made, read and attacked without importing torch
from dpaudit.training.bundle_arrays import (MAX_CLASSES, MAX_INPUT_SIZE, MAX_RECORDS, check_bundle_scores,
                                            check_canary_view, check_records, check_votes)
from dpaudit.training.release_meta import (FLAG_CODES, OUTSIDE_DATASETS, READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION,
                                           ReleaseMeta, check_canary_entry, parse_release_meta)

__all__ = ["SCHEMA_VERSION", "READABLE_SCHEMA_VERSIONS", "MEMBERSHIP_KEYS", "Release", "write_release", "load_release", "bundle_digest",
           "read_release_meta", "MAX_BUNDLE_ENTRIES", "check_release_target", "FLAG_CODES",
           "OUTSIDE_DATASETS", "MAX_RECORDS", "MAX_CLASSES", "MAX_INPUT_SIZE", "MAX_RELEASE_JSON_BYTES",
           "MAX_BUNDLE_BYTES"]

MEMBERSHIP_KEYS = ("members", "nonmembers", "attacker")
#: The most files and folders a bundle may hold (all depths): checking it for links walks every one.
MAX_BUNDLE_ENTRIES = 100_000
#: The largest ``release.json`` read (a FREDY release of the default size holds 120 kB, mostly its ledger). Parsing
#: JSON takes up to about 25 bytes of memory per byte, so this cap, not the general JSON cap, bounds what a hostile
#: release.json can make dpaudit allocate (about 0.4 GB).
MAX_RELEASE_JSON_BYTES = 16 << 20
#: The most bytes the files of a bundle may hold together (all depths, as their sizes say, so a sparse file counts
#: what it claims): every read of a bundle checks it, and its cache digest reads every top-level file.
MAX_BUNDLE_BYTES = 16 << 30
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


def _check_arrays(arrays: Mapping[str, Mapping[str, np.ndarray]] | None, info: ReleaseMeta, where: str
                  ) -> dict[str, dict[str, np.ndarray]]:
    """The further npz files of an outside release (``data.npz``, ``scores.npz``), checked as on load."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for fname, content in (arrays or {}).items():
        if info.dataset.name == "bundled" and fname == info.dataset.file:
            unknown = sorted(set(content) - {"X", "y"})
            if unknown or "X" not in content or "y" not in content:
                raise ParameterError(f"{where}: {fname} must hold exactly the arrays 'X' and 'y'. Got {sorted(content)} instead.")
            X, y = check_records(content["X"], content["y"], f"{where} {fname}", num_classes=info.dataset.num_classes,
                                 input_shape=info.model.spec.input_shape, num_records=info.dataset.num_records)
            out[fname] = {"X": X, "y": y}
        elif info.model.kind == "scores" and fname == "scores.npz":
            out[fname] = check_bundle_scores(content, f"{where} {fname}", score_kind=info.model.score_kind,
                                             num_records=int(info.dataset.num_records),
                                             num_classes=info.dataset.num_classes)
        else:
            raise ParameterError(f"The 'arrays' parameter of write_release holds {fname!r}; a release of dataset "
                                 f"{info.dataset.name!r} and model kind {info.model.kind!r} takes "
                                 f"{'data.npz' if info.dataset.name == 'bundled' else 'scores.npz' if info.model.kind == 'scores' else 'none'}.")
    if info.dataset.name == "bundled" and info.dataset.file not in out:
        raise ParameterError(f"{where}: a release of dataset 'bundled' needs its records ({info.dataset.file} in 'arrays').")
    if info.model.kind == "scores" and "scores.npz" not in out:
        raise ParameterError(f"{where}: a scores-only release needs its scores (scores.npz in 'arrays').")
    return out


def _check_canary_files(files: Mapping[str, Mapping[str, np.ndarray]], info: ReleaseMeta, where: str) -> None:
    from dpaudit.training.canaries import RELEASE_CANARIES_FILE, RELEASE_TRUTH_FILE

    entry = info.canaries
    if set(files) != {RELEASE_CANARIES_FILE, RELEASE_TRUTH_FILE}:
        raise ParameterError(f"{where}: the canary files must be {RELEASE_CANARIES_FILE} and {RELEASE_TRUTH_FILE}. "
                             f"Got {sorted(files)} instead.")
    count = _parameter_count(info.model.spec) if entry["kind"] == "dirac" else None
    check_canary_view(files[RELEASE_CANARIES_FILE], entry, info.model.spec, f"{where} {RELEASE_CANARIES_FILE}", count)
    _check_truth(files[RELEASE_TRUTH_FILE], int(entry["count"]), f"{where} {RELEASE_TRUTH_FILE}")


def _check_truth(raw: Mapping[str, Any], m: int, where: str) -> np.ndarray:
    inc = raw.get("included")
    if set(raw) != {"included"} or inc is None or np.shape(inc) != (m,) or np.asarray(inc).dtype != bool:
        raise DataError(f"{where}: expected exactly one array 'included', boolean, of shape ({m},) (release.json's "
                        f"canaries.count); got {sorted(raw)} with shape {None if inc is None else np.shape(inc)}.")
    return np.asarray(inc, dtype=bool)


def check_release_target(out_dir: Any, name: str, owner: str) -> Path:
    """The folder a bundle is written to must be named by its last path component: ``.``, ``..``, ``/`` or an empty
    path name a folder that holds other things (the current directory, its parent), which ``--overwrite`` would
    replace as a whole. Raises :class:`ParameterError` naming ``name`` of ``owner``; a symbolic link is refused as
    by every command that writes a folder (:func:`dpaudit._io.check_output_folder`, an ``OutputError``)."""
    p = check_path(out_dir, name, owner)
    if p.name in ("", ".", ".."):
        raise ParameterError(f"The '{name}' parameter of {owner} must name a new folder for the bundle (e.g. runs/rel), "
                             f"not '.', '..' or '/': the whole folder would be replaced. Got {str(out_dir)!r} instead.")
    return check_output_folder(p, name if name.startswith("-") else f"The '{name}' folder of {owner}")


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
    run: Mapping[str, Any] | None = None,
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
    run : dict, optional
        How the training ran (``release.json["run"]``), e.g. ``{"threads": to_dict(ThreadSetting)}``
        (:mod:`dpaudit.threads`); informational, read by nothing.
    """
    owner = "write_release"
    check_release_target(out_dir, "out_dir", owner)
    if not isinstance(method, str) or not method:
        raise ParameterError(f"The 'method' parameter of {owner} must be a non-empty str. Got {method!r} instead.")
    seed = check_int(seed, "seed", owner, low=0)
    extra_model = dict(model_meta or {})
    scores_only = extra_model.get("kind") == "scores"
    if not (scores_only and classifier is None):
        from dpaudit.training.models import Classifier

        if not isinstance(classifier, Classifier):
            raise ParameterError(f"The 'classifier' parameter of {owner} must be a Classifier. Got {type(classifier).__name__} instead.")
    ds = _check_dataset_spec(dataset, owner)
    if ds.get("num_records") is None:
        ds["num_records"] = len(load_dataset(ds["name"], **_load_kwargs(ds)))
    ds["num_records"] = int(ds["num_records"])
    if train_config is not None:
        from dpaudit.training.ensemble import TrainConfig
    if train_config is None:
        tc = None
    elif isinstance(train_config, TrainConfig):
        tc = train_config.to_dict()
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
        votes = check_votes(votes, owner, None if classifier is None else classifier.spec.num_classes)
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
    if run is not None:
        meta["run"] = _as_dict(run, "run")
    canary_files: dict[str, Mapping[str, np.ndarray]] = {}
    if canaries is not None:
        if classifier is None:
            raise ParameterError(f"The 'canaries' parameter of {owner} needs a released model (not a scores-only release).")
        canary_files, entry = dict(canaries[0]), _as_dict(canaries[1], "canaries")
        meta["canaries"] = entry
    if classifier is not None:      # the name save_classifier gives it
        from dpaudit.training.models import classifier_suffix

        meta["model"]["file"] = "model" + classifier_suffix(classifier)
    # the checks load_release makes, on what is about to be written: a bundle dpaudit writes is one it accepts
    where = f"{owner} ({Path(out_dir) / 'release.json'})"
    info = parse_release_meta(meta, where)
    meta["claim"]["granularity"] = info.claim.granularity      # one vocabulary (record -> example)
    arrays = _check_arrays(arrays, info, where)
    if canaries is not None:
        _check_canary_files(canary_files, info, where)
    try:
        ctx = atomic_dir(out_dir, overwrite=overwrite, kind="release")
        with ctx as tmp:
            if classifier is not None:
                from dpaudit.training.models import save_classifier

                model_path = save_classifier(classifier, tmp / "model")
                if model_path.name != meta["model"]["file"]:
                    raise ParameterError(f"{where}: the model was saved as {model_path.name}, not "
                                         f"{meta['model']['file']}.")
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
    #: The user's decision about code the bundle names (its recipe's training function): see
    #: :class:`~dpaudit.training.usercode.BundleCode`. None: run none.
    code: Any = None
    #: Every field of ``release.json``, checked and typed (:func:`~dpaudit.training.release_meta.parse_release_meta`);
    #: None only for releases built in memory without one.
    info: ReleaseMeta | None = None

    @classmethod
    def load(cls, path: str | Path, *, data_dir: str | Path | None = None, trust_data_dir: bool = False,
             code: Any = None) -> "Release":
        """Load and check the bundle at ``path`` (:func:`load_release`; ``dpaudit.Release.load(path)``)."""
        return load_release(path, data_dir=data_dir, trust_data_dir=trust_data_dir, code=code)

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
        raw = load_npz_file(f, "the canary truth file", kinds="b", max_bytes=m + 64 * 1024, follow_symlinks=False)
        return _check_truth(raw, m, str(f))

    @property
    def spec(self) -> ModelSpec:
        return None if self.model is None else self.model.spec

    @property
    def kind(self) -> str:
        """``"dpaudit"`` for releases of dpaudit's methods, else the outside model's kind (``torch_factory``,
        ``sklearn``, ``catboost``, ``scores``; see :mod:`dpaudit.training.external`)."""
        return self.meta["model"].get("kind") or "dpaudit"

    def scores(self) -> dict[str, np.ndarray]:
        """The arrays of a scores-only release's ``scores.npz`` (see :mod:`dpaudit.auditing.release_make`), checked
        against ``release.json`` (:func:`~dpaudit.training.release_meta.check_bundle_scores`)."""
        from dpaudit.training.external import load_bundle_npz

        info = self.info or parse_release_meta(self.meta, str(self.path / "release.json"))
        if info.model.kind != "scores":
            raise DataError(f"{self.path}: not a scores-only release (model kind {info.model.kind!r}); it has no scores.npz.")
        return check_bundle_scores(load_bundle_npz(self.path, "scores.npz"), f"{self.path / 'scores.npz'}",
                                   score_kind=info.model.score_kind, num_records=int(info.dataset.num_records),
                                   num_classes=info.dataset.num_classes)

    @property
    def has_recipe(self) -> bool:
        """Whether shadow / reference models can be trained (own methods always; outside models with a recipe)."""
        return self.kind == "dpaudit" or bool(self.meta["model"].get("recipe"))

    @property
    def train_config(self) -> TrainConfig | None:
        tc = self.meta["model"].get("train_config")
        if tc is None:
            return None
        from dpaudit.training.ensemble import TrainConfig

        return TrainConfig.from_dict(tc)

    def dataset(self) -> Dataset:
        """The data set the membership indices point into, rebuilt from ``meta["dataset"]``."""
        d = self.meta["dataset"]
        if d["name"] in OUTSIDE_DATASETS:
            from dpaudit.training.external import load_bundled_dataset

            return load_bundled_dataset(self.path, d, input_shape=None if self.spec is None else self.spec.input_shape)
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

            return recipe_train_fn(self.meta, self.code, self.path)
        # a partial of a module-level function, not a closure: units that carry it can run in worker processes
        return functools.partial(_recipe_train_one, self.spec, self.train_config)

    def train_many(self):
        """``(datasets, seed) -> [Classifier]``: many models of the recipe at once (ensemble trainer for
        torch specs). Model ``i`` depends only on ``datasets[i]``, ``seed`` and ``i``."""
        if self.kind != "dpaudit":
            from dpaudit.training.external import recipe_train_many

            return recipe_train_many(self.meta, self.code, self.path)
        return functools.partial(_recipe_train_many, self.spec, self.train_config)


def _recipe_train_one(spec: Any, config: Any, X: np.ndarray, y: np.ndarray, seed: int) -> Classifier:
    """:meth:`Release.train_fn` of a dpaudit release: one model of the recipe."""
    from dpaudit.training.ensemble import fit_classifier

    return fit_classifier(spec, X, y, config, int(seed))


def _recipe_train_many(spec: Any, config: Any, datasets: Sequence[tuple[np.ndarray, np.ndarray]],
                       seed: int) -> list[Classifier]:
    """:meth:`Release.train_many` of a dpaudit release: model ``i`` depends only on ``datasets[i]``, ``seed``, ``i``."""
    from dpaudit.training.ensemble import TrainConfig, fit_classifier, model_seed, train_ensemble

    seed = int(seed)
    if spec.is_torch:
        ens = train_ensemble(spec, list(datasets), config or TrainConfig(), seed=seed, progress=False)
        return ens.members()
    return [fit_classifier(spec, X, y, config, model_seed(seed, i) % (2**31 - 1))
            for i, (X, y) in enumerate(datasets)]


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
        f"where dpaudit reads files. Pass {worded('--data-dir DIR', 'data_dir=DIR')} to name the data directory yourself, "
        f"or {worded('--trust-data-dir', 'trust_data_dir=True')} to use the one the bundle names."
    )


def _refuse_links(root: Path) -> None:
    """Refuse a bundle holding a symbolic link anywhere (any depth), without following any, or more than
    :data:`MAX_BUNDLE_ENTRIES` entries or :data:`MAX_BUNDLE_BYTES` bytes of files."""
    seen = size = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError as exc:
            raise DataError(f"The release directory {root} cannot be read ({d}: {exc.strerror or exc}).") from None
        for e in sorted(entries, key=lambda e: e.name):
            seen += 1
            if seen > MAX_BUNDLE_ENTRIES:
                raise DataError(f"The release directory {root} holds more than {MAX_BUNDLE_ENTRIES} files and folders; "
                                "a release bundle is a handful of files.")
            if e.is_symlink():
                f = Path(e.path)
                if d == root:
                    _bundle_file(root, root.resolve(), e.name)      # the message for a top-level file
                raise DataError(f"{root}: {f.relative_to(root)} is a symbolic link (to {_link_target(f)}); a release "
                                "bundle must hold its files and folders itself, so dpaudit refuses links at any depth.")
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                size += e.stat(follow_symlinks=False).st_size
                if size > MAX_BUNDLE_BYTES:     # sizes as the files claim them: a sparse file counts in full
                    raise DataError(f"The release directory {root} holds more than {MAX_BUNDLE_BYTES} bytes of files "
                                    f"({Path(e.path).relative_to(root)} among them); a release bundle is a model, "
                                    "its arrays and its release.json.")


def load_release(path, *, data_dir: str | Path | None = None, trust_data_dir: bool = False,
                 code: Any = None) -> Release:
    """Load and check a release bundle; any missing or inconsistent file gives a :class:`DataError`.

    Every file must lie in the bundle directory itself (symbolic links at any depth, and a bundle directory that is
    itself a link, are refused). ``release.json``'s ``dataset.data_dir`` is followed only inside the bundle, unless
    ``data_dir`` overrides it or ``trust_data_dir`` accepts it as written. ``code``
    (:class:`~dpaudit.training.usercode.BundleCode`): the code the user names for the bundle's torch factory and
    training function, or their opt-in to the bundle's own; without it no code the bundle names runs (a torch
    factory bundle is then refused with a message saying what to pass).
    """
    from dpaudit.training.usercode import BundleCode

    code = BundleCode.of(code)
    root = check_path(path, "path", "load_release")
    if data_dir is not None:
        data_dir = check_path(data_dir, "data_dir", "load_release")
    trust_data_dir = check_bool(trust_data_dir, "trust_data_dir", "load_release")
    meta = read_release_meta(root)
    real_root = root.resolve()
    meta_path = root / "release.json"
    info = parse_release_meta(meta, str(meta_path))      # every field, before anything else is read
    meta["dataset"] = _check_dataset_spec(meta["dataset"], str(meta_path))
    meta["claim"] = {**meta["claim"], "granularity": info.claim.granularity}
    m = meta["model"]
    if code.train_fn is not None and not (isinstance(m.get("recipe"), dict) and m["recipe"].get("train_fn")):
        flag = worded("--train-fn", "BundleCode(train_fn=...)")
        raise ParameterError(f"{flag} applies to a bundle whose recipe names a training function; {root}'s does "
                             f"not. Got {flag} {code.train_fn!r} instead.")
    if info.model.kind != "dpaudit":   # an outside model (dpaudit release make)
        from dpaudit.training.external import load_external_model

        model = load_external_model(root, m, code)
        spec = None if model is None else model.spec
    else:
        if code.factory is not None:
            flag = worded("--factory", "BundleCode(factory=...)")
            raise ParameterError(f"{flag} applies to a bundle whose model is built by a torch factory; {root} is a "
                                 f"release of dpaudit's own method {meta['method']!r}. Got {flag} {code.factory!r} "
                                 "instead.")
        spec, model = _load_own_model(root, real_root, info, meta_path)
    release = _finish_loading(root, real_root, meta, spec, model)
    release.code = code
    release.info = info
    if info.model.kind == "scores":
        release.scores()                                  # its arrays, checked on load
    meta["dataset"]["data_dir"] = _resolve_data_dir(meta["dataset"].get("data_dir"), root, real_root, data_dir, trust_data_dir)
    return release


def read_release_meta(path: str | Path) -> Any:
    """The parsed ``release.json`` of the bundle ``path``, after the checks every read of a bundle makes: the
    folder is not a link and holds no link at any depth, ``release.json`` is a plain file inside it, read through
    the capped JSON loader. Nothing else of the bundle is read (its fields are checked by :func:`load_release`)."""
    root = Path(path)
    if root.is_symlink():
        raise DataError(f"The release directory {root} is a symbolic link (to {_link_target(root)}); pass the "
                        "directory itself, dpaudit does not follow links into or out of release bundles.")
    if not root.is_dir():
        raise DataError(f"Release directory not found: {root}.")
    _refuse_links(root)
    meta_path = _bundle_file(root, root.resolve(), "release.json")
    if not meta_path.exists():
        raise DataError(f"{root}: release.json is missing; not a release bundle.")
    return load_json_file(meta_path, "the release file", max_bytes=MAX_RELEASE_JSON_BYTES, follow_symlinks=False)


def bundle_digest(path: str | Path) -> str:
    """SHA-256 of a release bundle's content: the name and bytes of every file at its top level (model weights,
    ``release.json``, ``membership.npz``, ``votes.npy``, ... -- everything the loader reads), in name order.
    Sub-directories are not part of what is loaded and are not hashed; a symbolic link is hashed by its target
    path, never read through."""
    h = hashlib.sha256()
    root = Path(path)
    files = sorted(p for p in root.iterdir() if p.is_symlink() or p.is_file())
    total = sum(f.lstat().st_size for f in files)
    if total > MAX_BUNDLE_BYTES:     # hashing reads every byte: a sparse file of terabytes would never finish
        raise DataError(f"The release directory {root} holds {total} bytes of files; a release bundle holds at most "
                        f"{MAX_BUNDLE_BYTES}.")
    for f in files:
        h.update(f.name.encode("utf-8", "surrogateescape") + b"\0")
        if f.is_symlink():      # hashed by where it points, never followed (loading refuses links anyway)
            h.update(b"link:" + str(f.readlink()).encode("utf-8", "surrogateescape"))
        else:                   # opened as checked: a FIFO swapped in is refused, never waited on
            with open_input(f, "the bundle file", allow_empty=True, max_bytes=MAX_BUNDLE_BYTES,
                            follow_symlinks=False) as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def _load_own_model(root: Path, real_root: Path, info: ReleaseMeta, meta_path: Path) -> tuple[ModelSpec, Classifier]:
    spec = info.model.spec
    model_file = _bundle_file(root, real_root, info.model.file)
    check_input_file(model_file, "the model file named in release.json", max_bytes=None)
    _check_weights_fit_file(spec, model_file)
    from dpaudit.training.models import load_classifier

    return spec, load_classifier(model_file, spec, follow_symlinks=False)


def _finish_loading(root: Path, real_root: Path, meta: dict, spec: Any, model: Classifier | None) -> "Release":
    mem_path = _bundle_file(root, real_root, "membership.npz")
    n = meta["dataset"].get("num_records")
    # index arrays: at most 3 x num_records int64 entries, plus headers
    limit = 3 * 8 * (MAX_RECORDS if n is None else int(n)) + 64 * 1024
    raw = load_npz_file(mem_path, "the membership file", kinds="iu", max_bytes=limit, follow_symlinks=False)
    membership = _check_membership(raw, None if n is None else int(n), str(mem_path))

    votes = None
    votes_path = _bundle_file(root, real_root, "votes.npy")
    if votes_path.exists():
        votes = load_npy_file(votes_path, "the votes file", kinds="biuf", follow_symlinks=False)
        if spec is None:
            raise DataError(f"{votes_path}: vote histograms need a released model; this release has none.")
        votes = check_votes(votes, str(votes_path), spec.num_classes)
    canaries = None
    if meta.get("canaries") is not None:
        canaries = _load_canaries(root, real_root, meta, spec)
    return Release(path=root, meta=meta, model=model, votes=votes, membership=membership, canaries=canaries)


def _load_canaries(root: Path, real_root: Path, meta: dict, spec: Any) -> dict[str, np.ndarray]:
    """The attacker's view of the release's canaries (``canaries.npz``), every array's shape and range checked
    against ``release.json`` and the model spec; sizes are checked before any array is read."""
    where = f"{root / 'release.json'}"
    info = check_canary_entry(meta["canaries"], where)
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
    raw = load_npz_file(f, "the canaries file", kinds="iuf", max_bytes=expected + 64 * 1024, follow_symlinks=False)
    count = _parameter_count(spec) if kind == "dirac" else None
    return check_canary_view(raw, info, spec, str(f), count)


def _parameter_count(spec: ModelSpec) -> int:
    if not spec.is_torch:
        return 0
    import torch

    from dpaudit.training.models import build_model

    with torch.device("meta"):
        return int(sum(p.numel() for p in build_model(spec).parameters()))


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
