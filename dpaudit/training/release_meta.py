"""``release.json`` and the arrays of a release bundle, checked once, at the edge, into typed objects.

A release bundle may come from the party being audited, so every field it holds is untrusted input. This module
is the one place that says what each field may be: :func:`parse_release_meta` checks every field of
``release.json`` (types, ranges, known keys, finiteness, cross-references between the model spec, the data set
and the recipe) and returns a :class:`ReleaseMeta`; :func:`check_records` and :func:`check_bundle_scores` check the
arrays of an outside model's bundle (``data.npz``, ``scores.npz``); :func:`check_canary_view` the attacker's view of
planted canaries (``canaries.npz``). The same functions run when a bundle is *written*
(:func:`~dpaudit.training.release.write_release`, which ``dpaudit train`` and ``dpaudit release make`` call) and when
it is *loaded* (:func:`~dpaudit.training.release.load_release`), so a bundle dpaudit accepts on load is exactly a
bundle it could have written. Every failure is one :class:`~dpaudit.errors.DataError` line naming the file, the field
as it is spelled in the file (``model.recipe.train_config``, ``data.npz[X]``), what it must be, and what it is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


from dpaudit.accountants.granularity import canonical_granularity
from dpaudit.errors import DataError, DPAuditError, ParameterError, format_value
from dpaudit.serial import from_dict
from dpaudit.training.bundle_arrays import (MAX_CLASSES, MAX_INPUT_SIZE, MAX_RECORDS, SCORE_ARRAYS,  # noqa: F401
                                            check_bundle_scores, check_canary_view, check_records)

__all__ = [
    "SCHEMA_VERSION", "READABLE_SCHEMA_VERSIONS", "MAX_RECORDS", "MAX_CLASSES", "MAX_INPUT_SIZE", "OUTSIDE_DATASETS", "EXTERNAL_MODEL_KINDS",
    "SCORE_FILE_KINDS", "SCORE_ARRAYS", "FLAG_CODES", "ReleaseClaim", "DatasetRef", "Recipe", "ModelRef", "ReleaseMeta",
    "parse_release_meta", "parse_train_config", "parse_claim_entry", "check_records", "check_bundle_scores",
    "check_canary_entry", "check_canary_view", "plain_file_name",
]

#: The version of ``release.json`` that :func:`~dpaudit.training.release.write_release` writes (its JSON Schema:
#: ``dpaudit/schemas/release.json``). Version 2: the accounting result under ``statement`` is written by the one
#: serialiser (``headline`` is an index into ``statements``, the headline figure is ``statement.statement``).
SCHEMA_VERSION = 2
#: The versions this dpaudit reads: version-1 bundles (``statement.headline`` the statement object itself) too.
READABLE_SCHEMA_VERSIONS = (1, 2)

#: Dataset names of releases made from outside artefacts (``dpaudit release make``): ``bundled`` -- the records
#: are the bundle's ``data.npz`` (X, y); ``scores`` -- no records, only the model's outputs (``scores.npz``).
OUTSIDE_DATASETS = ("bundled", "scores")
#: ``model.kind`` of an outside model and the suffix of its file in the bundle (``scores``: no model file).
EXTERNAL_MODEL_KINDS = {"torch_factory": ".safetensors", "sklearn": ".skops", "catboost": ".cbm", "scores": None}
#: ``model.score_kind`` of a scores-only release (the names of :data:`dpaudit.attacks.scores.SCORE_KINDS`).
SCORE_FILE_KINDS = ("logits", "probabilities", "losses")

#: Codes of the machine-readable flags a method may attach to its release (``release.json["flags"]``): each
#: names a way the method's privacy claim can fail that a report must show, with the method's own explanation.
FLAG_CODES = (
    "teachers_not_independent",      # PATE-style sensitivity assumes one record moves one teacher's vote
    "composition_ignored_by_claim",  # the claimed epsilon leaves out the composition over rounds or queries
    "distillation_not_accounted",    # a loss term depends on a non-private model trained on the same data
    "sampling_not_poisson",          # DP-SGD accounted as Poisson sampling, but the data loader was not Poisson
    "granularity_not_covered",       # the claim's granularity is not the one the accounting covers
    "opacus_epsilon_assumes_poisson",  # fixed-size batches accounted as such; Opacus's own figure assumed Poisson
    "tuning_not_accounted",          # the release is the best of K runs, the claim accounts fewer
    "flower_epsilon_below_lower_bound",  # a Flower accountant figure lies below dpaudit's certified lower bound
)

_TOP_REQUIRED = ("schema", "method", "dataset", "seed", "model", "claim")
_TOP_OPTIONAL = ("params", "utility", "ledger", "statement", "assumptions", "flags", "created_by", "created_at",
                 "canaries", "run")
_RUN_KEYS = ("threads",)
_THREAD_KEYS = ("threads", "source", "cores", "workers")
_OWN_DATASET_KEYS = ("name", "seed", "num_samples", "num_records", "data_dir")
_BUNDLED_DATASET_KEYS = ("name", "file", "num_records", "num_classes", "source")
_SCORES_DATASET_KEYS = ("name", "num_records", "num_classes")
_OWN_MODEL_KEYS = ("spec", "file", "train_config", "kind")      # kind: absent or null
_EXTERNAL_MODEL_KEYS = ("spec", "file", "train_config", "kind", "recipe")
_SCORES_MODEL_KEYS = ("spec", "file", "train_config", "kind", "score_kind", "recipe")
_EXTERNAL_SPEC_KEYS = ("name", "input_shape", "num_classes", "kwargs", "external")
_FACTORY_KWARGS_KEYS = ("factory", "factory_sha256", "factory_kwargs")
_CLAIM_KEYS = ("epsilon", "delta", "granularity", "text")
_TRAIN_CONFIG_KEYS = ("epochs", "batch_size", "optimizer", "lr", "momentum", "weight_decay", "dp")
_DP_KEYS = ("noise_multiplier", "max_grad_norm", "sampling_rate")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_ATTACK_NAMES = ("threshold", "shadow", "lira", "rmia")


# --------------------------------------------------------------------------------------------------
# typed views of release.json


@dataclass(frozen=True, slots=True)
class ReleaseClaim:
    """What the release claims: (``epsilon``, ``delta``)-DP at ``granularity`` (the canonical vocabulary of
    :mod:`dpaudit.accountants.granularity`, or ``none``)."""

    epsilon: float
    delta: float
    granularity: str
    text: str


@dataclass(frozen=True, slots=True)
class DatasetRef:
    """Where the records the membership indices point into come from: a dpaudit data set (``name``, ``seed``,
    ``num_samples``, ``data_dir``), the bundle's ``data.npz`` (``name = "bundled"``, ``file``, ``num_classes``), or
    no records at all (``name = "scores"``)."""

    name: str
    num_records: int | None
    seed: int | None = None
    num_samples: int | None = None
    data_dir: str | None = None
    file: str | None = None
    num_classes: int | None = None


@dataclass(frozen=True, slots=True)
class Recipe:
    """How an outside release's shadow / reference models are trained: the maker's own ``train_fn`` (an import path
    pinned by ``train_fn_sha256``), a dpaudit architecture ``model`` with its ``train_config``, or an Opacus
    ``PrivacyEngine`` recipe (``opacus``, :class:`~dpaudit.integrations.opacus.OpacusRecipe`) run on the release's
    own pinned torch factory."""

    train_fn: str | None = None
    train_fn_sha256: str | None = None
    model: Any = None                  # ModelSpec
    train_config: Any = None           # TrainConfig
    opacus: Any = None                 # OpacusRecipe


@dataclass(frozen=True, slots=True)
class ModelRef:
    """The released model: ``kind`` (``"dpaudit"`` for dpaudit's own architectures, else an outside kind of
    :data:`EXTERNAL_MODEL_KINDS`), its spec (``ModelSpec``; ``None`` for scores-only), its file in the bundle, the
    recipe that trained it (own models) or that trains shadow models (outside models), and the score kind of a
    scores-only release."""

    kind: str
    spec: Any
    file: str | None
    train_config: Any = None           # TrainConfig
    recipe: Recipe | None = None
    score_kind: str | None = None


@dataclass(frozen=True, slots=True)
class ReleaseMeta:
    """Every field of a checked ``release.json``."""

    method: str
    seed: int
    dataset: DatasetRef
    model: ModelRef
    claim: ReleaseClaim
    params: Mapping[str, Any]
    utility: Mapping[str, Any]
    ledger: Any                        # PrivacyLedger | None
    statement: Any                     # AccountingResult | None
    assumptions: tuple[str, ...]
    flags: tuple[tuple[str, str], ...]
    canaries: Mapping[str, Any] | None
    created_by: str | None
    run: Mapping[str, Any] | None = None


# --------------------------------------------------------------------------------------------------
# small checks (each raises a DataError naming the file and the field)


def _bad(where: str, field: str, want: str, got: Any) -> DataError:
    return DataError(f"{where}: '{field}' must be {want}. Got {format_value(got)} instead.")


def _obj(v: Any, where: str, field: str) -> dict:
    if not isinstance(v, dict):
        raise _bad(where, field, "an object", v)
    return v


def _keys(d: Mapping, allowed: tuple[str, ...], where: str, field: str, required: tuple[str, ...] = ()) -> None:
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise DataError(f"{where}: '{field}' has unknown field(s) {', '.join(repr(k) for k in unknown[:5])}; its fields "
                        f"are {', '.join(allowed)}.")
    missing = [k for k in required if k not in d]
    if missing:
        raise DataError(f"{where}: '{field}' lacks the field(s) {', '.join(repr(k) for k in missing)}.")


def _int(v: Any, where: str, field: str, low: int, high: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise _bad(where, field, f"an integer in [{low}, {high}]", v)
    return int(v)


def _opt_int(v: Any, where: str, field: str, low: int, high: int) -> int | None:
    return None if v is None else _int(v, where, field, low, high)


def _str(v: Any, where: str, field: str, *, empty: bool = False, max_len: int = 100_000) -> str:
    if not isinstance(v, str) or (not empty and not v.strip()) or len(v) > max_len or "\x00" in v:
        raise _bad(where, field, f"a{'' if empty else ' non-empty'} string (at most {max_len} characters)", v)
    return v


def _number(v: Any, where: str, field: str, *, low: float, high: float | None = None, high_open: bool = False,
            allow_inf: bool = False) -> float:
    """A JSON number (or the strings "inf" the project writes for infinity), finite unless ``allow_inf``."""
    if isinstance(v, str) and v == "inf" and allow_inf:
        v = math.inf
    rng = f"[{low:g}, {'inf' if high is None else format(high, 'g')}{')' if high_open or high is None else ']'}"
    want = f"a number in {rng}"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(where, field, want, v)
    try:
        x = float(v)
    except OverflowError:
        raise _bad(where, field, want, v) from None
    if math.isnan(x) or (math.isinf(x) and not allow_inf) or x < low or (high is not None and (x > high or (high_open and x == high))):
        raise _bad(where, field, want, v)
    return x


def plain_file_name(v: Any, where: str, field: str, suffix: str | None = None) -> str:
    """A file name inside the bundle itself: no directory part, not ``.``/``..``, no NUL; ending in ``suffix``."""
    if (not isinstance(v, str) or not v or "\x00" in v or "/" in v or "\\" in v or v in (".", "..") or len(v) > 255
            or Path(v).name != v or (suffix is not None and not v.endswith(suffix))):
        want = "a plain file name inside the bundle" + (f" ending in {suffix}" if suffix else "")
        raise _bad(where, field, want, v)
    return v


def _sha(v: Any, where: str, field: str) -> str:
    if not isinstance(v, str) or not _SHA256.fullmatch(v):
        raise _bad(where, field, "a sha256 digest (64 lower-case hex digits)", v)
    return v


def _wrap(where: str, field: str, exc: BaseException) -> DataError:
    msg = str(exc).replace("\n", " ")
    return DataError(f"{where}: '{field}' is invalid ({msg[:300]}).")


# --------------------------------------------------------------------------------------------------
# sections


def parse_train_config(d: Any, where: str, field: str):
    """A :class:`~dpaudit.training.ensemble.TrainConfig` from a JSON object; unknown fields (a typo ``epocs``) and
    bad values are refused naming ``field``. Raises :class:`DataError`."""
    from dpaudit.training.ensemble import TrainConfig

    d = _obj(d, where, field)
    _keys(d, _TRAIN_CONFIG_KEYS, where, field)
    if d.get("dp") is not None:
        _keys(_obj(d["dp"], where, f"{field}.dp"), _DP_KEYS, where, f"{field}.dp", ("noise_multiplier", "max_grad_norm"))
    try:
        return TrainConfig.from_dict(d)
    except (ParameterError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _wrap(where, field, exc) from None


def _check_spec_size(spec: Any, where: str, field: str) -> None:
    """Refuse a model spec whose sizes would allocate without bound, before any model is built."""
    spec = _obj(spec, where, field)
    k = spec.get("num_classes")
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= MAX_CLASSES:
        raise _bad(where, f"{field}.num_classes", f"an integer in [2, {MAX_CLASSES}]", k)
    shape = spec.get("input_shape")
    if (not isinstance(shape, list) or not shape or len(shape) > 4
            or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_INPUT_SIZE for x in shape)
            or math.prod(shape) > MAX_INPUT_SIZE):
        raise _bad(where, f"{field}.input_shape", f"a list of 1-4 positive integers of product <= {MAX_INPUT_SIZE}", shape)
    kw = spec.get("kwargs", {})
    if not isinstance(kw, dict):
        raise _bad(where, f"{field}.kwargs", "an object", kw)

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
                raise DataError(f"{where}: '{field}.kwargs.{key}' holds {format_value(x)}, beyond the supported "
                                f"{MAX_INPUT_SIZE}.")


def _model_spec(d: Any, where: str, field: str):
    from dpaudit.training.models import ModelSpec

    _check_spec_size(d, where, field)
    _keys(d, ("name", "input_shape", "num_classes", "kwargs"), where, field, ("name",))
    if not isinstance(d["name"], str):
        raise _bad(where, f"{field}.name", "a string", d["name"])
    try:
        return ModelSpec.from_dict(d)
    except (DPAuditError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _wrap(where, field, exc) from None


def _external_spec(d: Any, kind: str, where: str):
    from dpaudit.training.external import ExternalSpec

    field = "model.spec"
    _check_spec_size(d, where, field)
    _keys(d, _EXTERNAL_SPEC_KEYS, where, field, ("name", "input_shape", "num_classes"))
    if d["name"] != kind:
        raise _bad(where, f"{field}.name", f"the model kind {kind!r}", d["name"])
    if d.get("external", True) is not True:
        raise _bad(where, f"{field}.external", "true", d["external"])
    kw = d.get("kwargs", {})
    if kind == "torch_factory":
        _keys(kw, _FACTORY_KWARGS_KEYS, where, f"{field}.kwargs", ("factory", "factory_sha256"))
        _str(kw["factory"], where, f"{field}.kwargs.factory", max_len=4096)
        _sha(kw["factory_sha256"], where, f"{field}.kwargs.factory_sha256")
        _obj(kw.get("factory_kwargs", {}), where, f"{field}.kwargs.factory_kwargs")
    elif kw:
        raise _bad(where, f"{field}.kwargs", f"empty for a {kind} model", kw)
    try:
        return ExternalSpec(kind, tuple(d["input_shape"]), d["num_classes"], dict(kw))
    except (DPAuditError, TypeError, ValueError) as exc:
        raise _wrap(where, field, exc) from None


def _recipe(r: Any, spec: Any, where: str) -> Recipe | None:
    field = "model.recipe"
    if r is None:
        return None
    r = _obj(r, where, field)
    if "train_fn" in r:
        _keys(r, ("train_fn", "train_fn_sha256"), where, field, ("train_fn", "train_fn_sha256"))
        return Recipe(train_fn=_str(r["train_fn"], where, f"{field}.train_fn", max_len=4096),
                      train_fn_sha256=_sha(r["train_fn_sha256"], where, f"{field}.train_fn_sha256"))
    if "opacus" in r:
        from dpaudit.integrations.opacus import OpacusRecipe

        _keys(r, ("opacus",), where, field, ("opacus",))
        if spec is None or getattr(spec, "name", None) != "torch_factory":
            raise DataError(f"{where}: '{field}.opacus' trains the release's own torch factory; this release's model "
                            "is not built by one.")
        return Recipe(opacus=OpacusRecipe.from_dict(r["opacus"], where=f"{where}: '{field}.opacus'"))
    _keys(r, ("model", "train_config"), where, field, ("model",))
    rspec = _model_spec(r["model"], where, f"{field}.model")
    if spec is not None and (tuple(rspec.input_shape) != tuple(spec.input_shape) or rspec.num_classes != spec.num_classes):
        raise DataError(f"{where}: '{field}.model' takes inputs {tuple(rspec.input_shape)} and {rspec.num_classes} "
                        f"classes, but the released model takes {tuple(spec.input_shape)} and {spec.num_classes}.")
    tc = None if r.get("train_config") is None else parse_train_config(r["train_config"], where, f"{field}.train_config")
    return Recipe(model=rspec, train_config=tc)


def _dataset(d: Any, where: str) -> DatasetRef:
    from dpaudit.training.data import DATASETS

    d = _obj(d, where, "dataset")
    name = d.get("name")
    if name == "bundled":
        _keys(d, _BUNDLED_DATASET_KEYS, where, "dataset", ("name", "num_records", "num_classes"))
        src = d.get("source")
        if src is not None:
            _keys(_obj(src, where, "dataset.source"), ("file", "sha256"), where, "dataset.source")
            if "file" in src:
                _str(src["file"], where, "dataset.source.file", max_len=4096)
            if "sha256" in src:
                _sha(src["sha256"], where, "dataset.source.sha256")
        return DatasetRef("bundled", _int(d["num_records"], where, "dataset.num_records", 1, MAX_RECORDS),
                          file=plain_file_name(d.get("file", "data.npz"), where, "dataset.file", ".npz"),
                          num_classes=_int(d["num_classes"], where, "dataset.num_classes", 2, MAX_CLASSES))
    if name == "scores":
        _keys(d, _SCORES_DATASET_KEYS, where, "dataset", ("name", "num_records"))
        return DatasetRef("scores", _int(d["num_records"], where, "dataset.num_records", 2, MAX_RECORDS),
                          num_classes=_opt_int(d.get("num_classes"), where, "dataset.num_classes", 2, MAX_CLASSES))
    if not isinstance(name, str) or name not in DATASETS:
        raise _bad(where, "dataset.name", f"one of {', '.join(DATASETS + OUTSIDE_DATASETS)}", name)
    _keys(d, _OWN_DATASET_KEYS, where, "dataset", ("name",))
    data_dir = d.get("data_dir")
    if data_dir is not None:
        data_dir = _str(data_dir, where, "dataset.data_dir", max_len=4096)
    return DatasetRef(name, _opt_int(d.get("num_records"), where, "dataset.num_records", 1, MAX_RECORDS),
                      seed=_int(d.get("seed", 0), where, "dataset.seed", 0, 2**63 - 1),
                      num_samples=_opt_int(d.get("num_samples"), where, "dataset.num_samples", 1, MAX_RECORDS),
                      data_dir=data_dir)


def _model(m: Any, ds: DatasetRef, where: str) -> ModelRef:
    m = _obj(m, where, "model")
    kind = m.get("kind")
    if kind is None:
        if ds.name in OUTSIDE_DATASETS:
            raise DataError(f"{where}: 'model.kind' is required for a release of dataset {ds.name!r} (an outside "
                            f"model: one of {', '.join(EXTERNAL_MODEL_KINDS)}).")
        _keys(m, _OWN_MODEL_KEYS, where, "model", ("spec", "file"))
        spec = _model_spec(m["spec"], where, "model.spec")
        tc = None if m.get("train_config") is None else parse_train_config(m["train_config"], where, "model.train_config")
        return ModelRef("dpaudit", spec, plain_file_name(m["file"], where, "model.file"), tc)
    if not isinstance(kind, str) or kind not in EXTERNAL_MODEL_KINDS:
        raise _bad(where, "model.kind", f"one of {', '.join(EXTERNAL_MODEL_KINDS)} (or absent: a dpaudit model)", kind)
    if m.get("train_config") is not None:
        raise _bad(where, "model.train_config", "null for an outside model (its recipe is 'model.recipe')",
                   m["train_config"])
    if kind == "scores":
        _keys(m, _SCORES_MODEL_KEYS, where, "model", ("kind", "score_kind"))
        if ds.name != "scores":
            raise _bad(where, "dataset.name", "'scores' for a scores-only release", ds.name)
        for key in ("spec", "file", "recipe"):
            if m.get(key) is not None:
                raise _bad(where, f"model.{key}", "null for a scores-only release (it has no model)", m[key])
        score_kind = m["score_kind"]
        if score_kind not in SCORE_FILE_KINDS:
            raise _bad(where, "model.score_kind", f"one of {', '.join(SCORE_FILE_KINDS)}", score_kind)
        if (score_kind == "losses") != (ds.num_classes is None):
            raise DataError(f"{where}: 'dataset.num_classes' must be null for losses and a class count for "
                            f"{score_kind}. Got {format_value(ds.num_classes)} with score kind {score_kind!r} instead.")
        return ModelRef("scores", None, None, score_kind=score_kind)
    _keys(m, _EXTERNAL_MODEL_KEYS, where, "model", ("kind", "spec", "file"))
    if ds.name == "scores":
        raise _bad(where, "model.kind", "'scores' for a release of dataset 'scores'", kind)
    spec = _external_spec(m["spec"], kind, where)
    if ds.num_classes is not None and ds.num_classes != spec.num_classes:
        raise DataError(f"{where}: 'model.spec.num_classes' ({spec.num_classes}) differs from 'dataset.num_classes' "
                        f"({ds.num_classes}).")
    file = plain_file_name(m["file"], where, "model.file", EXTERNAL_MODEL_KINDS[kind])
    return ModelRef(kind, spec, file, recipe=_recipe(m.get("recipe"), spec, where))


def parse_claim_entry(c: Any, where: str, field: str = "claim") -> ReleaseClaim:
    """A release's ``claim`` object: ``epsilon`` >= 0 (``inf``: no claim), ``delta`` in [0, 1), ``granularity`` (the
    shared vocabulary, aliases read as their canonical name, or ``none``) and ``text``."""
    c = _obj(c, where, field)
    _keys(c, _CLAIM_KEYS, where, field, _CLAIM_KEYS)
    eps = _number(c["epsilon"], where, f"{field}.epsilon", low=0.0, allow_inf=True)
    delta = _number(c["delta"], where, f"{field}.delta", low=0.0, high=1.0, high_open=True)
    try:
        gran = canonical_granularity(c["granularity"], f"{field}.granularity", where, allow_none=True,
                                     legacy=True)
    except ParameterError as exc:
        raise DataError(str(exc)) from None
    return ReleaseClaim(eps, delta, gran, _str(c["text"], where, f"{field}.text", empty=True))


def _flags(v: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, list):
        raise _bad(where, "flags", "a list of {code, message} objects", v)
    out = []
    for i, f in enumerate(v):
        f = _obj(f, where, f"flags[{i}]")
        _keys(f, ("code", "message"), where, f"flags[{i}]", ("code", "message"))
        if f["code"] not in FLAG_CODES:
            raise _bad(where, f"flags[{i}].code", f"one of {', '.join(FLAG_CODES)}", f["code"])
        out.append((f["code"], _str(f["message"], where, f"flags[{i}].message", empty=True)))
    return tuple(out)


def _accounting(meta: Mapping, where: str) -> tuple[Any, Any]:
    from dpaudit.accountants.ledger import PrivacyLedger
    from dpaudit.accountants.statement import AccountingResult

    ledger = statement = None
    if meta.get("ledger") is not None:
        try:
            ledger = PrivacyLedger.from_dict(_obj(meta["ledger"], where, "ledger"))
        except DataError as exc:
            if str(exc).startswith(where):
                raise
            raise _wrap(where, "ledger", exc) from None
        except (DPAuditError, TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise _wrap(where, "ledger", exc) from None
    if meta.get("statement") is not None:
        try:
            statement = from_dict(AccountingResult, _obj(meta["statement"], where, "statement"), what="statement")
        except DataError as exc:
            if str(exc).startswith(where):
                raise
            raise _wrap(where, "statement", exc) from None
        except (DPAuditError, TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise _wrap(where, "statement", exc) from None
    return ledger, statement


def _params(p: Any, external: bool, where: str) -> dict:
    p = _obj(p, where, "params")
    if external and "possible_attacks" in p:
        pa = p["possible_attacks"]
        if not isinstance(pa, list) or not pa or any(a not in _ATTACK_NAMES for a in pa):
            raise _bad(where, "params.possible_attacks", f"a non-empty list of {', '.join(_ATTACK_NAMES)}", pa)
    return p


def parse_release_meta(meta: Any, where: str) -> ReleaseMeta:
    """Check every field of a ``release.json`` object (see the module docstring) and return it typed.

    ``where`` names the file in the messages. Raises :class:`DataError` for the first bad field.
    """
    meta = _obj(meta, where, "release.json")
    schema = meta.get("schema")
    if isinstance(schema, bool) or schema not in READABLE_SCHEMA_VERSIONS:  # first: another schema has other fields
        raise DataError(f"{where}: schema version {format_value(schema)} is unknown; this dpaudit reads schemas "
                        f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}.")
    _keys(meta, _TOP_REQUIRED + _TOP_OPTIONAL, where, "release.json", _TOP_REQUIRED)
    method = _str(meta["method"], where, "method", max_len=200)
    seed = _int(meta["seed"], where, "seed", 0, 2**63 - 1)
    ds = _dataset(meta["dataset"], where)
    model = _model(meta["model"], ds, where)
    claim = parse_claim_entry(meta["claim"], where)
    utility = _obj(meta.get("utility", {}), where, "utility")
    acc = utility.get("test_accuracy")
    if not (model.kind == "scores" and acc is None):
        _number(acc, where, "utility.test_accuracy", low=0.0, high=1.0)
    params = _params(meta.get("params", {}), model.kind != "dpaudit", where)
    ledger, statement = _accounting(meta, where)
    assumptions = meta.get("assumptions", [])
    if not isinstance(assumptions, list) or not all(isinstance(a, str) for a in assumptions):
        raise _bad(where, "assumptions", "a list of strings", assumptions)
    flags = _flags(meta.get("flags", []), where)
    for key in ("created_by", "created_at"):
        if meta.get(key) is not None:
            _str(meta[key], where, key, empty=True, max_len=1000)
    canaries = meta.get("canaries")
    if canaries is not None:
        if model.kind != "dpaudit":
            raise _bad(where, "canaries", "absent for an outside model (dpaudit plants canaries in its own training)",
                       canaries)
        canaries = check_canary_entry(canaries, where)
    run = None if meta.get("run") is None else _run(meta["run"], where)
    return ReleaseMeta(method=method, seed=seed, dataset=ds, model=model, claim=claim, params=params, utility=utility,
                       ledger=ledger, statement=statement, assumptions=tuple(assumptions), flags=flags,
                       canaries=canaries, created_by=meta.get("created_by"), run=run)


def _run(run: Any, where: str) -> dict:
    """``release.json["run"]``: how the training ran (informational; nothing reads it to decide anything):
    ``threads`` -- the thread setting in force (``threads``, ``cores``, ``workers`` counts and its ``source``)."""
    run = _obj(run, where, "run")
    _keys(run, _RUN_KEYS, where, "run", ())
    if run.get("threads") is not None:
        t = _obj(run["threads"], where, "run.threads")
        _keys(t, _THREAD_KEYS, where, "run.threads", ())
        for key in ("threads", "cores", "workers"):
            if key in t:
                _int(t[key], where, f"run.threads.{key}", 0, 1 << 20)
        if "source" in t:
            _str(t["source"], where, "run.threads.source", max_len=200)
    return run


def check_canary_entry(entry: Any, where: str) -> dict:
    """``release.json["canaries"]``: kind, count, seed, audit, the two file names (and steps for Dirac)."""
    from dpaudit.training.canaries import CANARY_KINDS, MAX_CANARIES, RELEASE_CANARIES_FILE, RELEASE_TRUTH_FILE
    from dpaudit.training.limits import MAX_STEPS

    entry = _obj(entry, where, "canaries")
    keys = ("kind", "count", "seed", "audit", "file", "truth_file", "steps")
    _keys(entry, keys, where, "canaries", keys[:-1])
    if entry["kind"] not in CANARY_KINDS:
        raise _bad(where, "canaries.kind", f"one of {', '.join(map(repr, CANARY_KINDS))}", entry["kind"])
    _int(entry["count"], where, "canaries.count", 2, MAX_CANARIES)
    _int(entry["seed"], where, "canaries.seed", 0, 2**63 - 1)
    if entry["kind"] == "dirac":
        _int(entry.get("steps"), where, "canaries.steps", 1, MAX_STEPS)
    elif "steps" in entry:
        raise _bad(where, "canaries.steps", "absent for input canaries", entry["steps"])
    for key, want in (("audit", "one-run"), ("file", RELEASE_CANARIES_FILE), ("truth_file", RELEASE_TRUTH_FILE)):
        if entry[key] != want:
            raise _bad(where, f"canaries.{key}", repr(want), entry[key])
    return entry
