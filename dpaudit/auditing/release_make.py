"""``dpaudit release make``: a standard release bundle from artefacts made outside dpaudit, so that ``dpaudit
attack``, ``dpaudit audit`` and ``dpaudit check`` work on it unchanged.

Model (one of)
    * a PyTorch module: ``factory="path/to/file.py:build"`` or ``"module:build"`` (called with
      ``factory_kwargs``; a file path is stored absolute) + ``model=weights.safetensors``
      (``.pt`` / ``.pth`` are refused: convert with ``safetensors.torch.save_file(model.state_dict(), path)``);
    * a scikit-learn classifier in ``.skops``; a CatBoost ``.cbm``;
    * no model: ``scores=file.npz`` with the model's outputs only (see :data:`SCORES_FORMAT`).

Data (with a model)
    ``data=`` a ``.npz`` (arrays ``X`` and ``y``), a ``.npy`` of features with ``labels=`` a ``.npy`` of labels, or a
    ``.csv`` (header row, numeric columns, label in ``label_column`` or the last column); or ``dataset=`` a dpaudit
    data-set name (digits, mnist, cifar10, svhn, adult, ... with ``data_dir`` for the real-format loaders).
    ``members`` / ``nonmembers`` / ``attacker``: ``.npy`` (or ``.txt``, one per line) integer indices into the data or
    boolean masks of its length. The attacker's pool defaults to every record that is neither member nor non-member.

Training recipe for shadow / reference models (optional; without one only the threshold attack is possible)
    ``train_fn="path/to/file.py:train"`` -- the user's ``train(X, y, seed) -> model with predict_proba``. **This runs
    their code**, now (to check the import), and when the release is attacked by someone who names the same code
    (``--train-fn``, checked against the recorded sha256) or passes ``--trust-bundle-code``. Or ``recipe_model`` (a dpaudit
    architecture, e.g. ``mlp``) with ``recipe_config`` (a JSON / TOML file of :class:`TrainConfig` fields).

Accounting (at most one)
    ``ledger=`` a dpaudit ledger JSON; ``dp_events=`` a dp_accounting event (object, or a JSON file written by
    :func:`~dpaudit.integrations.dp_accounting.dp_event_to_json`); ``opacus=`` an Opacus run (an
    :class:`~dpaudit.integrations.opacus.OpacusRun`, a ``PrivacyEngine``, or a JSON file of ``OpacusRun.to_dict()``),
    accounted under the batch sampler it records (Poisson, shuffled or deterministic fixed-size batches), the sampler
    named in every output. ``runs_tried=K``: the released model is the best of K training runs (a hyper-parameter
    search); the K runs are composed, and a claim below that figure gets the red flag ``tuning_not_accounted``.

Claim
    ``claim=["epsilon=8", "delta=1e-5", "granularity=record"]`` (``record`` is dpaudit's ``example``).

Every input is checked before anything is written (one :class:`~dpaudit.errors.DataError` /
:class:`~dpaudit.errors.ParameterError` line each); the bundle is written atomically.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit._format import fmt_number
from dpaudit._io import (check_input_file, file_sha256, check_replaceable, load_json_file, load_npy_file, load_npz_file, load_toml_file,
                         read_input_text)
from dpaudit.accountants.granularity import canonical_granularity
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.statement import AccountingResult
from dpaudit.attacks.scores import SCORE_PREFIXES, check_model_scores
from dpaudit.errors import (DataError, DPAuditError, ParameterError, check_float, check_bool, check_int, check_optional_str,
                            format_value, worded)
from dpaudit.training.release_meta import check_records, parse_train_config
from dpaudit.serial import to_dict


__all__ = ["make_release", "parse_claim", "SCORES_FORMAT", "accounting_inputs", "existing_input", "load_outside_model"]

SCORES_FORMAT = """\
scores .npz (allow_pickle=False), TensorFlow Privacy AttackInputData names; "train" = members, "test" = non-members:
  exactly one kind:  logits_train/logits_test (n, C) | probs_train/probs_test (n, C) | loss_train/loss_test (n,)
  labels_train, labels_test (n,)  integer labels (required for logits and probs)
  optional reference models (LiRA): reference_<kind>_train/_test (n, K[, C]) and reference_in_train/_test (n, K) bool
  optional population records (RMIA, with reference models): population_<kind> (m[, C]), population_labels (m,),
    reference_population_<kind> (m, K[, C]), optionally reference_in_population (m, K) bool (default: all OUT)
"""



def _existing(path: Any, what: str) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path) or "\x00" in str(os.fspath(path)):
        raise DataError(f"{what} must be a path (a non-empty str or os.PathLike). Got {format_value(path)} instead.")
    p = Path(path)
    try:
        is_file = p.is_file()
    except OSError as exc:           # a name too long, a loop of links: one line
        raise DataError(f"{what} {format_value(str(p))} cannot be read: {exc.strerror}.") from None
    if not is_file:
        raise DataError(f"{what} {str(p)!r} does not exist (or is not a file).")
    from dpaudit.training.external import refuse_pickle

    check_input_file(p, what, allow_empty=True)     # a regular file within the input size cap
    refuse_pickle(p, what)
    return p


def _load_npz(path: Path, what: str) -> dict[str, np.ndarray]:
    """Every array of a user's npz through the one capped loader (zip directory checked before unpacking)."""
    return load_npz_file(path, what, kinds=None)


def _load_array(path: Path, what: str) -> np.ndarray:
    if path.suffix == ".npz":
        arrays = _load_npz(path, what)
        if len(arrays) != 1:
            raise DataError(f"{what} {str(path)!r} must hold one array; it holds {sorted(arrays)}.")
        return next(iter(arrays.values()))
    if path.suffix == ".npy":
        return load_npy_file(path, what, kinds=None)     # header checked against the file before allocating
    if path.suffix in (".txt", ".csv"):
        try:
            return np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=1)
        except ValueError as exc:
            raise DataError(f"{what} {str(path)!r}: not a list of numbers ({exc}).") from None
    raise DataError(f"{what} {str(path)!r} must be a .npy, .npz, .txt or .csv file.")


def _beyond_float(value: Any) -> bool:
    try:
        float(value)
    except OverflowError:
        return True
    except (TypeError, ValueError):
        return False
    return False


def parse_claim(items: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    """``["epsilon=8", "delta=1e-5", "granularity=record"]`` (or a dict) -> the release's claim dict."""
    raw: dict[str, Any] = {}
    if isinstance(items, Mapping):
        raw = dict(items)
    elif not isinstance(items, (list, tuple)):
        raise ParameterError("The 'claim' parameter must be a list of KEY=VALUE strings (epsilon, delta, granularity, "
                             f"text) or a dict. Got {format_value(items)} instead.")
    else:
        for item in items:
            if not isinstance(item, str) or "=" not in item:
                raise ParameterError(f"The '--claim' parameter must be KEY=VALUE (epsilon, delta, granularity, text). Got {item!r} instead.")
            k, v = item.split("=", 1)
            raw[k.strip()] = v.strip()
    unknown = sorted(set(raw) - {"epsilon", "delta", "granularity", "text"})
    if unknown:
        raise ParameterError(f"The '--claim' parameter knows epsilon, delta, granularity, text. Got {unknown} instead.")
    for k in ("epsilon", "delta"):
        if k not in raw:
            raise ParameterError(f"The claim needs '{k}' (--claim {k}=...). Got nothing instead.")
    try:
        eps, delta = float(raw["epsilon"]), float(raw["delta"])
    except (TypeError, ValueError):
        raise ParameterError(f"The claim's epsilon and delta must be numbers. Got {format_value(raw['epsilon'])}, "
                             f"{format_value(raw['delta'])} instead.") from None
    except OverflowError:    # an int beyond the float range (10**400): refused with its range, never float()'s error
        k = "epsilon" if _beyond_float(raw["epsilon"]) else "delta"
        raise ParameterError(f"The '{k}' parameter of --claim must be a float in the range "
                             f"{'(0, inf] (write inf for no bound)' if k == 'epsilon' else '[0, 1)'}. "
                             f"Got {format_value(raw[k])} instead.") from None
    eps = check_float(eps, "epsilon", "--claim", low=0.0, low_open=True, allow_inf=True)
    delta = check_float(delta, "delta", "--claim", low=0.0, high=1.0, high_open=True)
    gran = canonical_granularity(raw.get("granularity", "record"), "granularity", "--claim")
    text = raw.get("text") or f"({fmt_number(eps)}, {fmt_number(delta)})-DP at {gran} level"
    if not isinstance(text, str):
        raise ParameterError(f"The 'text' of --claim must be a string. Got {text!r:.80} instead.")
    return {"epsilon": eps, "delta": delta, "granularity": gran, "text": text}


# --------------------------------------------------------------------------------------------------
# data and membership


def _read_data(data: Any, labels: Any, label_column: str | None) -> tuple[np.ndarray, np.ndarray, dict]:
    p = _existing(data, "The data file")
    if p.suffix == ".npz":
        arrays = _load_npz(p, "The data file")
        if "X" not in arrays or "y" not in arrays:
            raise DataError(f"The data file {str(p)!r} must hold arrays 'X' and 'y'; it holds {sorted(arrays)}.")
        X, y = arrays["X"], arrays["y"]
    elif p.suffix == ".npy":
        if labels is None:
            raise ParameterError("A .npy data file holds the features only; give the labels with --labels FILE.npy. Got nothing instead.")
        X, y = _load_array(p, "The data file"), _load_array(_existing(labels, "The labels file"), "The labels file")
    elif p.suffix == ".csv":
        X, y = _read_csv(p, label_column)
    else:
        raise DataError(f"The data file {str(p)!r} must be .npz (X, y), .npy (with --labels) or .csv.")
    X = np.asarray(X)
    y = np.asarray(y)
    if X.ndim >= 1 and y.ndim == 1 and len(y) != len(X):
        raise DataError(f"Features and labels differ in length: {len(X)} rows of features, {y.shape} labels.")
    # the checks a bundle's data.npz gets when it is loaded (dpaudit.training.release_meta.check_records)
    X, y = check_records(X, y, str(p))
    return X, y, {"file": str(p), "sha256": file_sha256(p)}


def _read_csv(p: Path, label_column: str | None) -> tuple[np.ndarray, np.ndarray]:
    import io
    import warnings

    text = read_input_text(p, "the CSV file")             # size cap, UTF-8 (one line naming the file otherwise)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise DataError(f"The CSV {str(p)!r} is empty; it needs a header row and one row per record.")
    if len(lines) < 2:
        raise DataError(f"The CSV {str(p)!r} has a header row but no records.")
    header = [h.strip() for h in lines[0].split(",")]
    col = len(header) - 1 if label_column is None else (header.index(label_column) if label_column in header else -1)
    if col < 0:
        raise DataError(f"The CSV {str(p)!r} has no column {label_column!r}; its columns are {header}.")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = np.loadtxt(io.StringIO("\n".join(lines[1:])), delimiter=",", ndmin=2)
    except ValueError as exc:
        raise DataError(f"The CSV {str(p)!r} must hold numeric columns only (encode categories first): {exc}") from None
    if table.shape[1] != len(header):
        raise DataError(f"The CSV {str(p)!r} has {len(header)} header names but {table.shape[1]} columns.")
    return np.delete(table, col, axis=1), table[:, col]


def _indices(spec: Any, n: int, what: str) -> np.ndarray:
    a = _load_array(_existing(spec, f"The {what} file"), f"The {what} file") if isinstance(spec, (str, Path)) else np.asarray(spec)
    a = np.asarray(a).ravel()
    if a.dtype.kind not in "biuf":
        raise DataError(f"The {what} must be integer indices or a boolean mask of length {n}. Got dtype {a.dtype} instead.")
    if a.dtype == bool:
        if a.size != n:
            raise DataError(f"The {what} mask has {a.size} entries but the data has {n} records.")
        return np.flatnonzero(a)
    if a.size and (not np.issubdtype(a.dtype, np.number) or not np.all(a == np.round(a))):
        raise DataError(f"The {what} indices must be integers (or a boolean mask of length {n}).")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise DataError(f"The {what} indices must lie in [0, {n}); got range [{a.min()}, {a.max()}].")
    u, c = np.unique(a, return_counts=True)
    if (c > 1).any():
        raise DataError(f"The {what} indices repeat {int((c > 1).sum())} record(s) (e.g. {int(u[c > 1][0])}).")
    return np.sort(a)


def _membership(members: Any, nonmembers: Any, attacker: Any, n: int) -> dict[str, np.ndarray]:
    if members is None or nonmembers is None:
        raise ParameterError("A release of a model needs --members and --nonmembers (index files or boolean masks). Got "
                             f"members={members!r}, nonmembers={nonmembers!r} instead.")
    mem, non = _indices(members, n, "members"), _indices(nonmembers, n, "non-members")
    both = np.intersect1d(mem, non)
    if both.size:
        raise DataError(f"Members and non-members overlap in {both.size} record(s) (e.g. index {int(both[0])}); a "
                        "record cannot be both.")
    if mem.size < 2 or non.size < 2:
        raise DataError(f"At least 2 members and 2 non-members are needed; got {mem.size} and {non.size}.")
    if attacker is None:
        pool = np.setdiff1d(np.arange(n), np.union1d(mem, non))
    else:
        pool = _indices(attacker, n, "attacker")
        clash = np.intersect1d(pool, mem)
        if clash.size:
            raise DataError(f"The attacker's records overlap the members in {clash.size} record(s) (e.g. index "
                            f"{int(clash[0])}); the attacker must not hold training records.")
    return {"members": mem, "nonmembers": non, "attacker": pool}


# --------------------------------------------------------------------------------------------------
# accounting


def _repeat_ledger(led: PrivacyLedger, runs: int) -> PrivacyLedger:
    """The ledger of ``runs`` runs each spending what ``led`` records (every party's events composed ``runs`` times)."""
    out = PrivacyLedger(delta=led.delta, accountant=led.accountant, orders=led.orders)
    for a in led.assumptions:
        out.add_assumption(a)
    out.add_assumption(f"The release is the best of {runs} training runs (a hyper-parameter search): the runs are "
                       "composed; choosing the best is a post-processing of their outputs and scores.")
    for party in led.parties:
        out.record(party, led.events(party), runs)
    return out


def _tuning_flag(runs: int, one_run: float, all_runs: float, claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``tuning_not_accounted`` when the claim is below the accounting of the ``runs`` runs the release says it tried."""
    c = float(claim["epsilon"])
    if runs <= 1 or not math.isfinite(all_runs) or c >= all_runs * (1 - 1e-9):
        return []
    how = "one run's accounting" if c >= one_run * (1 - 1e-9) else "less than one run's accounting"
    return [("tuning_not_accounted",
             f"The released model is the best of {runs} training runs (hyper-parameter search), but the claim "
             f"(epsilon = {c:g}) is at or above only {how} (epsilon = {one_run:.4g}): the {runs} runs together are "
             f"accounted at epsilon = {all_runs:.4g}. A best-of-K release must account every run (or random stopping, "
             "Papernot & Steinke 2022: dpaudit account --mechanism tuning).")]


def _accounting(ledger: Any, dp_events: Any, opacus: Any, claim: Mapping[str, Any],
                runs_tried: int = 1) -> tuple[Any, Any, list, list, dict]:
    """(ledger dict or None, statement dict or None, assumptions, flags, source info)."""
    runs_tried = check_int(runs_tried, "runs_tried", "make_release", low=1, high=1_000_000)
    given = [k for k, v in (("ledger", ledger), ("dp_events", dp_events), ("opacus", opacus)) if v is not None]
    if len(given) > 1:
        raise ParameterError(f"Give at most one accounting source (--ledger, --dp-events, --opacus). Got {given} instead.")
    delta = claim["delta"]
    if not given:
        if runs_tried > 1:
            raise ParameterError("The 'runs_tried' parameter of make_release needs an accounting source (--ledger, "
                                 f"--dp-events or --opacus). Got runs_tried={runs_tried} without one instead.")
        return None, None, ["No accounting was given: the release states a claim but no accounted epsilon."], [], {}
    if delta <= 0:
        raise ParameterError("The claim's delta must be > 0 to account (epsilon, delta) from events. Got 0 instead.")
    flags: list[tuple[str, str]] = []
    if ledger is not None:
        p = _existing(ledger, "The ledger file")
        try:
            led = PrivacyLedger.from_dict(load_json_file(p, "the ledger file"))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            if isinstance(exc, DPAuditError):
                raise
            raise DataError(f"The ledger file {str(p)!r} is not a dpaudit ledger JSON ({exc}).") from None
        if not math.isclose(led.delta, delta):
            led = PrivacyLedger.from_dict({**led.to_dict(), "delta": delta})
        one = led.overall().epsilon
        if runs_tried > 1:
            led = _repeat_ledger(led, runs_tried)
        st = dataclasses.replace(led.overall(), route=led.accountant)  # one route computed: the ledger's accountant
        flags += _tuning_flag(runs_tried, one, st.epsilon, claim)
        return led.to_dict(), to_dict(AccountingResult("ledger", (st,))), list(st.assumptions), flags, {"ledger": str(p)}
    if dp_events is not None:
        from dpaudit.integrations.dp_accounting import dp_event_from_json, ledger_from_dp_accounting

        source = {"dp_events": "object"}
        if isinstance(dp_events, (str, Path)):
            p = _existing(dp_events, "The dp_accounting events file")
            dp_events = dp_event_from_json(load_json_file(p, "the dp_accounting events file"), where=str(p))
            source = {"dp_events": str(p)}
        led = ledger_from_dp_accounting(dp_events, delta=delta)
        one = led.overall().epsilon
        if runs_tried > 1:
            led = _repeat_ledger(led, runs_tried)
        st = dataclasses.replace(led.overall(), route=led.accountant)
        flags += _tuning_flag(runs_tried, one, st.epsilon, claim)
        return led.to_dict(), to_dict(AccountingResult("dp_accounting events", (st,))), list(st.assumptions), flags, source
    from dpaudit.integrations.opacus import OpacusRun, read_opacus

    source = {"opacus": "object"}
    if isinstance(opacus, (str, Path)):
        p = _existing(opacus, "The Opacus run file")
        data = load_json_file(p, "the Opacus run file")
        run = OpacusRun.from_dict(data if isinstance(data, dict) else {"history": data}, where=str(p))
        source = {"opacus": str(p)}
    elif isinstance(opacus, OpacusRun):
        run = opacus
    else:
        run = read_opacus(opacus)
    result = run.account(delta, runs=runs_tried)
    flags.extend(run.release_flags(delta))
    if runs_tried > 1:
        flags += _tuning_flag(runs_tried, run.account(delta).epsilon, result.epsilon, claim)
    source = {**source, "sampling": run.scheme}
    if claim["granularity"] != "example":
        flags.append(("granularity_not_covered",
                      f"The claim is at {claim['granularity']!r} level, but Opacus accounts record-level DP (one "
                      "record added or removed); a user or party with several records is not covered."))
    return run.ledger(delta, runs=runs_tried).to_dict(), to_dict(result), list(result.statement.assumptions), flags, source


def accounting_inputs(ledger: Any, dp_events: Any, opacus: Any, claim: Mapping[str, Any],
                      runs_tried: int = 1) -> tuple[Any, Any, list, list, dict]:
    """The accounting of a release made outside dpaudit (``ledger`` / ``dp_events`` / ``opacus``, at most one):
    (ledger dict or None, statement dict or None, assumptions, flags, source info); LM releases share it."""
    return _accounting(ledger, dp_events, opacus, claim, runs_tried)


def existing_input(path: Any, what: str) -> Path:
    """``path`` as a regular input file within the size cap that is not a pickle (one :class:`DataError` otherwise)."""
    return _existing(path, what)


# --------------------------------------------------------------------------------------------------
# the model


def _load_model(model: Any, factory: str | None, factory_kwargs: Mapping | None, X: np.ndarray, num_classes: int):
    from dpaudit.training.external import (ExternalSpec, code_digest, load_catboost_model, load_sklearn_model,
                                           load_torch_factory, refuse_pickle)
    from dpaudit.training.models import Classifier

    p = Path(model)
    refuse_pickle(p, "The model file")
    if not p.is_file():
        raise DataError(f"The model file {str(p)!r} does not exist.")
    shape = tuple(X.shape[1:])
    if p.suffix == ".safetensors":
        if not factory:
            raise ParameterError(f"A .safetensors weights file needs {worded('--factory FILE.py:build', 'factory=' + repr('FILE.py:build'))} "
                                 "(the function that builds the torch.nn.Module). Got nothing instead.")
        digest = code_digest(factory, "--factory")
        module = load_torch_factory(factory, p, factory_kwargs=factory_kwargs, factory_sha256=digest)
        spec = ExternalSpec("torch_factory", shape, num_classes, {"factory": factory, "factory_sha256": digest,
                                                                  "factory_kwargs": dict(factory_kwargs or {})})
        clf = Classifier(spec, module=module)          # type: ignore[arg-type] - duck-typed spec
    elif p.suffix in (".skops", ".cbm"):
        if factory:
            raise ParameterError(f"{worded('--factory', 'factory=')} applies to .safetensors weights only. Got it with {p.suffix} instead.")
        kind = "sklearn" if p.suffix == ".skops" else "catboost"
        est = load_sklearn_model(p) if kind == "sklearn" else load_catboost_model(p)
        classes = np.asarray(getattr(est, "classes_", []))
        if classes.size and (not np.issubdtype(classes.dtype, np.number) or classes.min() < 0 or classes.max() >= num_classes):
            raise DataError(f"The model's classes {classes.tolist()[:10]} are not label indices in [0, {num_classes}) of the data.")
        clf = Classifier(ExternalSpec(kind, shape, num_classes), estimator=est)   # type: ignore[arg-type]
    else:
        raise DataError(f"The model file {str(p)!r} must be .safetensors (with {worded('--factory', 'factory=')}), .skops or .cbm. "
                        f"Got {p.suffix or 'no suffix'} instead.")
    try:
        out = clf.predict_proba(X[: min(4, len(X))])
    except DPAuditError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model cannot take the data: one line
        raise DataError(f"The model cannot score the data (input shape {shape}): {type(exc).__name__}: {str(exc)[:200]}") from None
    if out.shape[1:] != (num_classes,) or not np.all(np.isfinite(out)):
        raise DataError(f"The model gives {out.shape[1:]} outputs per record, but the labels have {num_classes} classes.")
    return clf, {"file": str(p), "sha256": file_sha256(p)}


def load_outside_model(model: Any, factory: str | None, factory_kwargs: Mapping | None, X: np.ndarray,
                       num_classes: int):
    """The outside model as ``release make`` loads it (a torch factory's .safetensors weights, .skops, .cbm),
    checked against the records ``X``: (classifier, ``{"file", "sha256"}``). Flower releases use it for a run's
    global model built by the user's own factory."""
    return _load_model(model, factory, factory_kwargs, X, num_classes)


def _opacus_recipe(recipe: Any, factory: str | None, train_fn: str | None, recipe_model: str | None) -> dict:
    """``{"opacus": ...}``: an Opacus ``PrivacyEngine`` recipe trained on the release's own torch factory."""
    from dpaudit.integrations.opacus import OpacusRecipe

    if train_fn or recipe_model:
        raise ParameterError(f"Give one training recipe: {worded('--train-fn, --recipe-model or --opacus-recipe', 'train_fn=, recipe_model= or opacus_recipe=')}. "
                             "Got more than one instead.")
    if not factory:
        raise ParameterError(f"The 'opacus_recipe' parameter of make_release trains the release's torch factory: it "
                             f"needs {worded('--factory FILE.py:build', 'factory=' + repr('FILE.py:build'))}. Got no "
                             "factory instead.")
    if isinstance(recipe, Mapping):
        recipe = OpacusRecipe.from_dict(recipe, where=worded("--opacus-recipe",
                                                             "The 'opacus_recipe' parameter of make_release"))
    if not isinstance(recipe, OpacusRecipe):
        raise ParameterError(f"The 'opacus_recipe' parameter of make_release must be an OpacusRecipe or a dict of its "
                             f"fields. Got {type(recipe).__name__} instead.")
    return {"opacus": recipe.to_dict()}


def _recipe(train_fn: str | None, recipe_model: str | None, recipe_kwargs: Mapping | None, recipe_config: Any,
            shape: tuple[int, ...], num_classes: int) -> dict | None:
    if train_fn and recipe_model:
        raise ParameterError(f"Give one training recipe: {worded('--train-fn or --recipe-model', 'train_fn= or recipe_model=')}. Got both ({train_fn!r}, {recipe_model!r}) instead.")
    if train_fn:
        from dpaudit.training.external import code_digest, import_object

        digest = code_digest(train_fn, "--train-fn")
        import_object(train_fn, "--train-fn", sha256=digest)     # fails now, not at attack time
        return {"train_fn": train_fn, "train_fn_sha256": digest}
    if recipe_model:
        from dpaudit.training.models import ModelSpec

        spec = ModelSpec(recipe_model, shape, num_classes, dict(recipe_kwargs or {}))
        cfg: dict = {}
        where = "--recipe-config"
        if recipe_config is not None:
            p = _existing(recipe_config, "The recipe config file")
            what = "the recipe config file"
            cfg = load_toml_file(p, what) if p.suffix == ".toml" else load_json_file(p, what)
            where = f"The recipe config file {str(p)!r}"
        # the check a bundle's model.recipe.train_config gets on load: unknown fields (a typo 'epocs') are refused
        config = parse_train_config(cfg, where, "TrainConfig")
        return {"model": spec.to_dict(), "train_config": config.to_dict()}
    return None


# --------------------------------------------------------------------------------------------------
# scores only


def _read_scores(path: Any) -> tuple[str, dict[str, np.ndarray], int]:
    p = _existing(path, "The scores file")
    if p.suffix != ".npz":
        raise DataError(f"The scores file {str(p)!r} must be an .npz. Expected:\n{SCORES_FORMAT}")
    z = _load_npz(p, "The scores file")
    kinds = [k for k, pre in SCORE_PREFIXES.items() if f"{pre}_train" in z or f"{pre}_test" in z]
    if len(kinds) != 1:
        raise DataError(f"The scores file {str(p)!r} must hold exactly one kind of scores (logits_*, probs_* or loss_*); "
                        f"it holds {sorted(z)}.")
    kind, pre = kinds[0], SCORE_PREFIXES[kinds[0]]
    known = {f"{pre}_train", f"{pre}_test", "labels_train", "labels_test", f"reference_{pre}_train",
             f"reference_{pre}_test", "reference_in_train", "reference_in_test", f"population_{pre}",
             "population_labels", f"reference_population_{pre}", "reference_in_population"}
    unknown = sorted(set(z) - known)
    if unknown:
        raise DataError(f"The scores file {str(p)!r} has unexpected arrays {unknown}; known for {kind}: {sorted(known)}.")
    for side in ("train", "test"):
        if f"{pre}_{side}" not in z:
            raise DataError(f"The scores file {str(p)!r} lacks '{pre}_{side}' ({'members' if side == 'train' else 'non-members'}).")
    vm, ym = check_model_scores(z[f"{pre}_train"], z.get("labels_train"), kind, f"{pre}_train")
    vn, yn = check_model_scores(z[f"{pre}_test"], z.get("labels_test"), kind, f"{pre}_test")
    if vm.shape[1:] != vn.shape[1:]:
        raise DataError(f"'{pre}_train' and '{pre}_test' differ in classes: {vm.shape} vs {vn.shape}.")
    out = {"member_scores": vm, "nonmember_scores": vn}
    if ym is not None:
        out["member_labels"] = ym
    if yn is not None:
        out["nonmember_labels"] = yn
    refs = [f"reference_{pre}_train", f"reference_{pre}_test", "reference_in_train", "reference_in_test"]
    present = [r for r in refs if r in z]
    if present and len(present) != 4:
        raise DataError(f"Reference models need all of {refs}; the scores file has only {present}.")
    if present:
        labels = None if ym is None or yn is None else np.concatenate([ym, yn])
        ref = np.concatenate([np.asarray(z[refs[0]]), np.asarray(z[refs[1]])])
        ref, _ = check_model_scores(ref, labels, kind, f"{refs[0]} + {refs[1]}", num_records=len(vm) + len(vn))
        inc = np.concatenate([np.asarray(z[refs[2]]), np.asarray(z[refs[3]])])
        if inc.dtype != bool or inc.shape != ref.shape[:2]:
            raise DataError(f"'reference_in_train/_test' must be boolean arrays of shape (n, K) matching the reference "
                            f"scores {ref.shape[:2]}; got {inc.dtype} {inc.shape}.")
        out["reference_scores"], out["reference_in"] = ref, inc
    pops = [f"population_{pre}", f"reference_population_{pre}"]
    have = [k for k in pops + ["population_labels", "reference_in_population"] if k in z]
    if have and not present:
        raise DataError(f"Population records ({have}) serve RMIA, which needs the reference models too; the scores file "
                        f"has no {refs[0]}.")
    if have:
        if any(k not in z for k in pops):
            raise DataError(f"Population records need both {pops}; the scores file has only {have}.")
        zv, zy = check_model_scores(z[pops[0]], z.get("population_labels"), kind, pops[0])
        zref, _ = check_model_scores(z[pops[1]], zy, kind, pops[1], num_records=len(zv))
        if zref.shape[1] != out["reference_scores"].shape[1] or zref.shape[2:] != zv.shape[1:]:
            raise DataError(f"'{pops[1]}' must hold the same {out['reference_scores'].shape[1]} reference models as the "
                            f"members' and non-members' ({len(zv)}, K[, C]); got {zref.shape}.")
        out["population_scores"], out["population_reference_scores"] = zv, zref
        if zy is not None:
            out["population_labels"] = zy
        if "reference_in_population" in z:
            zin = np.asarray(z["reference_in_population"])
            if zin.dtype != bool or zin.shape != zref.shape[:2]:
                raise DataError(f"'reference_in_population' must be a boolean array of shape {zref.shape[:2]}; got "
                                f"{zin.dtype} {zin.shape}.")
            out["population_reference_in"] = zin
    return kind, out, len(vm) + len(vn)


def _scores_accuracy(kind: str, s: Mapping[str, np.ndarray]) -> float | None:
    if kind == "losses" or "nonmember_labels" not in s:
        return None
    return float(np.mean(np.argmax(s["nonmember_scores"], axis=1) == s["nonmember_labels"]))


# --------------------------------------------------------------------------------------------------


def make_release(out: str | Path, *, claim: Sequence[str] | Mapping[str, Any], model: Any = None,
                 factory: str | None = None, factory_kwargs: Mapping[str, Any] | None = None, data: Any = None,
                 labels: Any = None, label_column: str | None = None, dataset: str | None = None,
                 data_dir: str | None = None, dataset_seed: int = 0, num_samples: int | None = None,
                 members: Any = None, nonmembers: Any = None, attacker: Any = None, scores: Any = None,
                 train_fn: str | None = None, recipe_model: str | None = None, opacus_recipe: Any = None,
                 recipe_kwargs: Mapping[str, Any] | None = None, recipe_config: Any = None, ledger: Any = None,
                 dp_events: Any = None, opacus: Any = None, runs_tried: int = 1, seed: int = 0,
                 overwrite: bool = False) -> Path:
    """Check every input, then write the release bundle ``out`` atomically (see the module docstring)."""
    from dpaudit.training.external import absolute_import_path
    from dpaudit.training.release import check_release_target, write_release

    check_release_target(out, "--out", "release make")      # before any input is read
    seed = check_int(seed, "seed", "make_release", low=0)
    overwrite = check_bool(overwrite, "overwrite", "make_release")
    for name, value in (("factory", factory), ("train_fn", train_fn), ("recipe_model", recipe_model),
                        ("label_column", label_column), ("dataset", dataset), ("data_dir", data_dir)):
        check_optional_str(value, name, "make_release")
    if Path(out).exists() or Path(out).is_symlink():   # before reading anything: what --overwrite may replace
        if not overwrite:
            raise DataError(f"{out} already exists; pass overwrite=True (--overwrite) to replace it.")
        check_replaceable(out)
    factory, train_fn = absolute_import_path(factory), absolute_import_path(train_fn)
    claim_d = parse_claim(claim)
    if (model is None) == (scores is None):
        raise ParameterError("Give exactly one of a model (--model) or the model's scores (--scores). Got "
                             f"model={format_value(model)}, scores={format_value(scores)} instead.")
    ledger_d, statement, acc_assumptions, flags, acc_source = _accounting(ledger, dp_events, opacus, claim_d, runs_tried)
    assumptions = ["The model was trained outside dpaudit; membership (which records it trained on) is as declared "
                   "by whoever made this release, and dpaudit cannot verify it."] + acc_assumptions
    params: dict[str, Any] = {"accounting_source": acc_source, "runs_tried": int(runs_tried)}

    if scores is not None:
        if any(v is not None for v in (data, dataset, members, nonmembers, attacker, train_fn, recipe_model, factory,
                                       opacus_recipe)):
            raise ParameterError("A scores-only release takes no data, membership, recipe or factory (the scores file "
                                 "holds members ('train') and non-members ('test')).")
        kind, arrays, n = _read_scores(scores)
        n1 = len(arrays["member_scores"])
        possible = ["threshold"] + (["lira"] if "reference_scores" in arrays else []) + \
            (["rmia"] if "population_scores" in arrays else [])
        params.update(scores={"file": str(scores), "sha256": file_sha256(Path(scores)), "kind": kind},
                      possible_attacks=possible)
        assumptions.append(f"Scores-only release ({kind}): the attacks possible are {', '.join(possible)}; the shadow "
                           "attack and the blind baseline need a model and record features. Every empirical bound is "
                           "an estimate (one model).")
        C = int(arrays["member_scores"].shape[1]) if kind != "losses" else None
        return write_release(
            out, method="external-scores", dataset={"name": "scores", "num_records": n, "num_classes": C}, params=params,
            seed=seed, utility={"test_accuracy": _scores_accuracy(kind, arrays), "test_split": "non-members"},
            classifier=None, train_config=None, ledger=ledger_d, statement=statement, claim=claim_d,
            membership={"members": np.arange(n1), "nonmembers": np.arange(n1, n), "attacker": np.zeros(0, np.int64)},
            assumptions=assumptions, flags=flags, overwrite=overwrite, model_meta={"kind": "scores", "score_kind": kind},
            arrays={"scores.npz": arrays})

    if (data is None) == (dataset is None):
        raise ParameterError(f"Give exactly one data source: --data FILE or --dataset NAME. Got data={data!r}, dataset={dataset!r} instead.")
    if data is not None:
        X, y, src = _read_data(data, labels, label_column)
        num_classes = int(max(2, int(y.max()) + 1))
        ds_spec = {"name": "bundled", "file": "data.npz", "num_records": int(len(y)), "num_classes": num_classes,
                   "source": src}
        arrays = {"data.npz": {"X": X, "y": y}}
    else:
        from dpaudit.training.data import load_dataset

        kw = {"seed": dataset_seed, "num_samples": num_samples, **({"data_dir": data_dir} if data_dir else {})}
        ds = load_dataset(dataset, **kw)
        X, y, num_classes = ds.X, ds.y, ds.num_classes
        ds_spec = {"name": dataset, "seed": dataset_seed, "num_samples": num_samples, "num_records": len(ds),
                   **({"data_dir": str(data_dir)} if data_dir else {})}
        arrays = {}
    mem = _membership(members, nonmembers, attacker, len(y))
    clf, model_src = _load_model(model, factory, factory_kwargs, X, num_classes)
    if opacus_recipe is not None:
        recipe = _opacus_recipe(opacus_recipe, factory, train_fn, recipe_model)
    else:
        recipe = _recipe(train_fn, recipe_model, recipe_kwargs, recipe_config, tuple(X.shape[1:]), num_classes)
    non = mem["nonmembers"]
    acc = float(np.mean(clf.predict_proba(X[non]).argmax(axis=1) == y[non]))
    possible = ["threshold"] + (["shadow", "lira", "rmia"] if recipe and len(mem["attacker"]) else [])
    params.update(model=model_src, possible_attacks=possible, recipe=recipe)
    if recipe is None:
        assumptions.append("No training recipe was given: shadow-model and LiRA attacks are not possible, only the "
                           "threshold attack.")
    elif recipe.get("opacus"):
        assumptions.append("Shadow / reference models are trained by an Opacus PrivacyEngine recipe "
                           f"({json.dumps(recipe['opacus'], sort_keys=True)}) on the release's own pinned factory.")
    elif recipe.get("train_fn"):
        assumptions.append(f"Shadow / reference models are trained by the release maker's own code {recipe['train_fn']!r}; "
                           "attacking this release runs it only for an auditor who names the same code (--train-fn, "
                           "checked against its sha256) or passes --trust-bundle-code.")
    return write_release(
        out, method="external", dataset=ds_spec, params=params, seed=seed,
        utility={"test_accuracy": acc, "test_split": "non-members"}, classifier=clf, train_config=None,
        ledger=ledger_d, statement=statement, claim=claim_d, membership=mem, assumptions=assumptions, flags=flags,
        overwrite=overwrite, model_meta={"kind": clf.spec.name, "recipe": recipe}, arrays=arrays)
