"""Shadow-model membership inference (Shokri, Stronati, Song, Shmatikov 2017, "Membership inference attacks
against machine learning models"), as FREDY (2024, Sec. 4.2) uses it: a CatBoost attack classifier.

Procedure
---------
1. N shadow models are trained with the target's recipe (a :class:`~dpaudit.attacks.protocols.TrainFn`, or a
   :class:`~dpaudit.attacks.protocols.BatchTrainFn` that trains them all at once) on the attacker's pool (same
   distribution as the target's data, disjoint from its members). Shadow j draws ``2 * train_size`` pool records
   without replacement: the first half is its training set ("in"), the second half its held-out set ("out").
2. Each shadow model is queried on its own in / out records; the attack features of a record (x, y) with
   predicted probabilities p are (``features``):

   * ``"sorted"``: p sorted in decreasing order (C values; class-agnostic, as in Salem et al. 2019),
   * ``"true_label"``: ``[p_y, log p_y]`` (confidence in and log-loss of the true label),
   * ``"both"`` (default): the two concatenated (C + 2 values).

   With one global attack model (``per_class=False``) the one-hot label is appended; with one attack model per
   class (default, as in the original) the label selects the model instead.
3. The attack classifier (CatBoost by default; ``"logreg"``, ``"gbdt"``, ``"rf"`` or any scikit-learn-style
   estimator with ``fit`` / ``predict_proba``) learns in (1) vs out (0); a class with too few or one-sided shadow
   records uses the global model.
4. The target model is queried on the evaluation records; the score is the attack model's probability of "in"
   (larger = more likely member), so a threshold of 0.5 is the attack classifier's own decision (FREDY's Table 2).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Sequence

import numpy as np

from dpaudit.attacks.protocols import BatchTrainFn, Model, TrainFn
from dpaudit.attacks.threshold import check_proba
from dpaudit.errors import DataError, ParameterError, check_bool, check_choice, check_int
from dpaudit.executors import Executor, LocalExecutor, Unit, derive_seed, fingerprint_arrays

__all__ = ["CLASSIFIERS", "FEATURES", "SHADOWS_PER_UNIT", "make_classifier", "train_shadow_models",
           "shadow_probabilities", "shadow_features", "AttackModel", "shadow_attack"]

CLASSIFIERS = ("catboost", "logreg", "gbdt", "rf")
FEATURES = ("sorted", "true_label", "both")
_MIN_PER_CLASS = 20
#: Shadow / reference models trained together in one executor unit (one ensemble-trainer call). Part of the
#: seed derivation, so it is fixed here and never follows the number of workers.
SHADOWS_PER_UNIT = 8


def make_classifier(classifier: Any = "catboost", *, seed: int = 0) -> Any:
    """A fresh, seeded, quiet binary classifier with ``fit`` / ``predict_proba``.

    ``"catboost"``: CatBoostClassifier (300 trees of depth 4, learning rate 0.1, the thread count of
    :mod:`dpaudit.threads` -- which does not change its result --, writes no files);
    ``"logreg"``: standardised logistic regression; ``"gbdt"``: HistGradientBoostingClassifier;
    ``"rf"``: RandomForestClassifier (200 trees, one job). Any other object with ``fit`` and ``predict_proba`` is
    cloned (scikit-learn ``clone``, else a deep copy) so the caller's instance is never fitted in place.
    """
    if isinstance(classifier, str):
        check_choice(classifier, "classifier", "make_classifier", CLASSIFIERS)
        if classifier == "catboost":
            from catboost import CatBoostClassifier
            from dpaudit.threads import current

            # CatBoost's result does not depend on its thread count (checked bit for bit in tests/attacks): it
            # takes the process's thread setting (dpaudit.threads)
            return CatBoostClassifier(iterations=300, depth=4, learning_rate=0.1, random_seed=seed, verbose=False,
                                      thread_count=current().threads, allow_writing_files=False)
        if classifier == "logreg":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler
            return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed))
        if classifier == "gbdt":
            from sklearn.ensemble import HistGradientBoostingClassifier
            return HistGradientBoostingClassifier(random_state=seed)
        from sklearn.ensemble import RandomForestClassifier
        return RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=1)
    if not (callable(getattr(classifier, "fit", None)) and callable(getattr(classifier, "predict_proba", None))):
        raise ParameterError("The 'classifier' parameter of make_classifier must be one of "
                             f"{', '.join(map(repr, CLASSIFIERS))} or an object with fit and predict_proba. "
                             f"Got {type(classifier).__name__} instead.")
    try:
        from sklearn.base import clone
        return clone(classifier)
    except Exception:  # not a scikit-learn estimator: copy it
        return copy.deepcopy(classifier)


def train_shadow_models(datasets: Sequence[tuple[np.ndarray, np.ndarray]], *, train_fn: TrainFn | None = None,
                        batch_train_fn: BatchTrainFn | None = None, seed: int = 0) -> list[Model]:
    """Train one model per ``(X_j, y_j)``: all at once with ``batch_train_fn(datasets, seed)`` when given, else
    ``train_fn(X_j, y_j, seed + j)`` one at a time. Every returned object must have ``predict_proba``."""
    if batch_train_fn is None and train_fn is None:
        raise ParameterError("Shadow models need the target's recipe: give 'train_fn' or 'batch_train_fn'. "
                             "Got neither.")
    if batch_train_fn is not None:
        models = list(batch_train_fn(list(datasets), seed))
    else:
        models = [train_fn(X, y, seed + j) for j, (X, y) in enumerate(datasets)]
    if len(models) != len(datasets) or not all(callable(getattr(m, "predict_proba", None)) for m in models):
        raise DataError(f"The shadow recipe returned {len(models)} objects for {len(datasets)} data sets, "
                        "or some lack predict_proba.")
    return models


def _shadow_unit(datasets, queries, train_fn, batch_train_fn, seed: int) -> dict[str, np.ndarray]:
    """One executor unit: train a group of shadow models, return their probabilities on their queries."""
    # arrays a remote executor hands over may be read-only views of its object store; recipes get their own
    datasets = [(np.require(X, requirements="W"), np.require(y, requirements="W")) for X, y in datasets]
    queries = [np.require(q, requirements="W") for q in queries]
    models = train_shadow_models(datasets, train_fn=train_fn, batch_train_fn=batch_train_fn, seed=seed)
    probs = [np.asarray(m.predict_proba(q), dtype=np.float64) for m, q in zip(models, queries)]
    return {"proba": np.concatenate(probs), "sizes": np.array([len(p) for p in probs], dtype=np.int64)}


def shadow_probabilities(datasets: Sequence[tuple[np.ndarray, np.ndarray]], queries: Sequence[np.ndarray], *,
                         train_fn: TrainFn | None = None, batch_train_fn: BatchTrainFn | None = None, seed: int = 0,
                         executor: Executor | None = None, label: str = "shadow models") -> list[np.ndarray]:
    """Train shadow model ``j`` on ``datasets[j]`` and return its ``predict_proba(queries[j])`` (float64).

    The models are trained in units of :data:`SHADOWS_PER_UNIT` (one :func:`train_shadow_models` call each)
    submitted to ``executor`` (default: in this process). Unit ``models-A-B`` (models A..B-1) is seeded with
    :func:`dpaudit.executors.derive_seed` ``(seed, "models-A-B")``, so the numbers do not depend on the
    executor, its workers or the order units finish in; with a checkpoint folder on the executor, a re-run
    trains only the units that are missing.
    """
    if batch_train_fn is None and train_fn is None:
        raise ParameterError("Shadow models need the target's recipe: give 'train_fn' or 'batch_train_fn'. "
                             "Got neither.")
    if len(queries) != len(datasets):
        raise DataError(f"shadow_probabilities: {len(queries)} query sets for {len(datasets)} data sets.")
    units = []
    for a in range(0, len(datasets), SHADOWS_PER_UNIT):
        b = min(a + SHADOWS_PER_UNIT, len(datasets))
        key = f"models-{a}-{b}"
        unit_seed = derive_seed(seed, key)
        ds, qs = list(datasets[a:b]), list(queries[a:b])
        units.append(Unit(key, _shadow_unit, (ds, qs, train_fn, batch_train_fn, unit_seed),
                          fingerprint=fingerprint_arrays(ds, qs, unit_seed, train_fn is None)))
    results = (executor or LocalExecutor()).map(units, label=label)
    out: list[np.ndarray] = []
    for r in results:
        out.extend(np.split(np.asarray(r["proba"]), np.cumsum(r["sizes"])[:-1]))
    return out


def shadow_features(proba, labels, *, features: str = "both", num_classes: int | None = None,
                    with_label: bool = False) -> np.ndarray:
    """Attack features of records with predicted probabilities ``proba`` (n, C) and labels (n,); see the module
    docstring. ``with_label`` appends the one-hot label (for a global attack model)."""
    check_choice(features, "features", "shadow_features", FEATURES)
    p, y = check_proba(proba, labels, "shadow_features")
    py = p[np.arange(y.size), y]
    parts = []
    if features in ("sorted", "both"):
        parts.append(-np.sort(-p, axis=1))
    if features in ("true_label", "both"):
        parts.append(np.stack([py, np.log(np.clip(py, 1e-12, 1.0))], axis=1))
    if with_label:
        C = p.shape[1] if num_classes is None else num_classes
        parts.append(np.eye(C)[y])
    return np.concatenate(parts, axis=1)


def _fit_all(jobs: Sequence[tuple[Any, Any, np.ndarray, np.ndarray]], *, concurrent: bool) -> None:
    """Fit each job's classifier on its (features, labels). With ``concurrent`` (dpaudit's own CatBoost
    classifiers) and more than one thread in the thread policy, the fits run side by side in that many Python
    threads of one CatBoost thread each: CatBoost trains without the GIL, and a small fit keeps one core busier
    than two threads on one fit do (measured in ``bench/bench_attacks.py``). CatBoost's result does not depend on
    its thread count (tests/attacks/test_attack_reuse.py), so the fitted models are the same either way. Other
    classifiers (a caller's object may not be thread-safe) are fitted one after another."""
    from dpaudit.threads import current

    workers = min(current().threads, len(jobs)) if concurrent else 1
    if workers <= 1:
        for _, clf, X, t in jobs:
            clf.fit(X, t)
        return
    from concurrent.futures import ThreadPoolExecutor

    for _, clf, _, _ in jobs:
        clf.set_params(thread_count=1)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpaudit-attack-fit") as pool:
        for fut in [pool.submit(clf.fit, X, t) for _, clf, X, t in jobs]:
            fut.result()


class AttackModel:
    """Attack classifier(s) mapping (probabilities, label) to P[member]: one per class plus a global fallback."""

    def __init__(self, classifier: Any = "catboost", *, per_class: bool = True, features: str = "both",
                 seed: int = 0) -> None:
        self.classifier = classifier
        self.per_class = check_bool(per_class, "per_class", "AttackModel")
        self.features = check_choice(features, "features", "AttackModel", FEATURES)
        self.seed = check_int(seed, "seed", "AttackModel", low=0)
        make_classifier(classifier, seed=seed)  # validate early

    def fit(self, proba: np.ndarray, labels: np.ndarray, membership: np.ndarray) -> "AttackModel":
        m = np.asarray(membership).astype(int)
        if set(np.unique(m)) != {0, 1}:
            raise DataError("The attack model needs shadow records of both kinds (in and out).")
        p, y = check_proba(proba, labels, "AttackModel.fit")
        self.num_classes_ = p.shape[1]
        jobs: list[tuple[int | None, Any, np.ndarray, np.ndarray]] = [
            (None, make_classifier(self.classifier, seed=self.seed),
             shadow_features(p, y, features=self.features, with_label=True), m)]
        if self.per_class:
            for c in np.unique(y):
                rows = y == c
                if rows.sum() >= _MIN_PER_CLASS and len(np.unique(m[rows])) == 2:
                    jobs.append((int(c), make_classifier(self.classifier, seed=self.seed + 1 + int(c)),
                                 shadow_features(p[rows], y[rows], features=self.features), m[rows]))
        _fit_all(jobs, concurrent=self.classifier == "catboost")
        self.global_ = jobs[0][1]
        self.per_class_ = {c: clf for c, clf, _, _ in jobs[1:]}
        return self

    def predict_proba(self, proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """P[member] for each record: (n,)."""
        p, y = check_proba(proba, labels, "AttackModel.predict_proba")
        out = self.global_.predict_proba(
            shadow_features(p, y, features=self.features, num_classes=self.num_classes_, with_label=True))[:, 1]
        for c, clf in self.per_class_.items():
            rows = y == c
            if rows.any():
                out[rows] = clf.predict_proba(shadow_features(p[rows], y[rows], features=self.features))[:, 1]
        return np.asarray(out, dtype=np.float64)


def shadow_attack(target: Model, X_eval, y_eval, X_pool, y_pool, *, train_size: int, num_shadows: int = 16,
                  train_fn: TrainFn | None = None, batch_train_fn: BatchTrainFn | None = None,
                  classifier: Any = "catboost", per_class: bool = True, features: str = "both",
                  seed: int = 0, executor: Executor | None = None) -> np.ndarray:
    """Shadow-model attack scores P[member] (larger = more likely member) for the evaluation records.

    Parameters
    ----------
    target : Model
        The released model; queried once, on ``X_eval``.
    X_eval, y_eval : arrays, (n, ...) and (n,)
        Records to score (the release's members and non-members).
    X_pool, y_pool : arrays
        The attacker's own data (same distribution, disjoint from the target's members).
    train_size : int >= 1
        Size of each shadow's training set (the target's training-set size). When the pool holds fewer than
        ``2 * train_size`` records, ``len(pool) // 2`` is used and a warning says so.
    num_shadows : int >= 1
        N, the number of shadow models.
    train_fn, batch_train_fn : the target's recipe (see :func:`train_shadow_models`).
    classifier, per_class, features : the attack model (see :class:`AttackModel`).
    seed : int >= 0
        Seeds the shadow splits, the shadow training and the attack classifier.
    executor : Executor, optional
        Where the shadow models are trained (see :func:`shadow_probabilities`); default: this process.
    """
    owner = "shadow_attack"
    N = check_int(num_shadows, "num_shadows", owner, low=1)
    size = check_int(train_size, "train_size", owner, low=1)
    seed = check_int(seed, "seed", owner, low=0)
    X_pool, y_pool = np.asarray(X_pool), np.asarray(y_pool)
    if len(X_pool) < 2:
        raise DataError(f"{owner}: the attacker's pool has {len(X_pool)} records; at least 2 are needed.")
    if 2 * size > len(X_pool):
        warnings.warn(f"The attacker's pool ({len(X_pool)} records) is smaller than 2 x train_size ({2 * size}); "
                      f"each shadow model trains on {len(X_pool) // 2} records instead.", stacklevel=2)
        size = len(X_pool) // 2
    rng = np.random.default_rng(seed)
    draws = [rng.permutation(len(X_pool))[: 2 * size] for _ in range(N)]
    datasets = [(X_pool[d[:size]], y_pool[d[:size]]) for d in draws]
    probs = shadow_probabilities(datasets, [X_pool[d] for d in draws], train_fn=train_fn,
                                 batch_train_fn=batch_train_fn, seed=seed + 1, executor=executor)
    labels, member = [], []
    for d in draws:
        labels.append(y_pool[d])
        member.append(np.r_[np.ones(size, dtype=int), np.zeros(size, dtype=int)])
    attack = AttackModel(classifier, per_class=per_class, features=features, seed=seed)
    attack.fit(np.concatenate(probs), np.concatenate(labels), np.concatenate(member))
    return attack.predict_proba(np.asarray(target.predict_proba(np.asarray(X_eval)), dtype=np.float64),
                                np.asarray(y_eval))
