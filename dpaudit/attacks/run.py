"""``run_attack``: one call from a target model and plain arrays to an :class:`AttackReport` (what
``dpaudit attack`` prints and writes)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from dpaudit.attacks.blind import blind_scores
from dpaudit.attacks.bounds import epsilon_bound_over_splits
from dpaudit.attacks.lira import lira_attack
from dpaudit.attacks.metrics import DEFAULT_FPRS, attack_metrics, balanced_subsample, roc_band, roc_curve
from dpaudit.attacks.per_record import RecordScores
from dpaudit.attacks.protocols import BatchTrainFn, Model, TrainFn
from dpaudit.attacks.rmia import rmia_attack, saturation_note
from dpaudit.attacks.results import ESTIMATE, ESTIMATE_CAVEAT, AttackReport, AttackResult
from dpaudit.attacks.shadow import CLASSIFIERS, shadow_attack
from dpaudit.attacks.threshold import THRESHOLD_KINDS, threshold_scores
from dpaudit.errors import DataError, ParameterError, check_bool, check_choice, check_float, check_int, check_probability
from dpaudit.executors import Executor

__all__ = ["ATTACKS", "SINGLE_MODEL_CAVEAT", "attack_result", "run_attack"]

ATTACKS = ("shadow", "threshold", "lira", "rmia")

#: Split seeds of the single-model Clopper-Pearson estimate (the range over them is reported).
NUM_SPLITS = 5

SINGLE_MODEL_CAVEAT = (f"The empirical epsilon is an {ESTIMATE_CAVEAT}. The Clopper-Pearson formula treats every evaluation "
           "record as an independent trial, which the records of one model are not; the figure is the median over "
           f"{NUM_SPLITS} split seeds of the same scores, with their range. A certified single-model audit needs "
           "canaries included by independent coin flips (dpaudit.attacks.bounds.one_run_audit).")


def attack_result(name: str, description: str, pos: np.ndarray, neg: np.ndarray, *, threshold: float | str,
            confidence: float, delta: float, n_bootstrap: int, seed: int) -> AttackResult:
    """Metrics (:func:`~dpaudit.attacks.metrics.attack_metrics`), the split-selected Clopper-Pearson epsilon bound and
    the ROC of one attack's member (``pos``) and non-member (``neg``) scores -- shared by every attack path."""
    metrics = attack_metrics(pos, neg, threshold=threshold, fprs=DEFAULT_FPRS, n_bootstrap=n_bootstrap,
                             confidence=confidence, seed=seed)
    bound = epsilon_bound_over_splits(pos, neg, delta=delta, confidence=confidence, seed=seed, num_splits=NUM_SPLITS,
                                      kind=ESTIMATE)
    band = roc_band(pos, neg, n_bootstrap=n_bootstrap, confidence=confidence, seed=seed) if n_bootstrap else None
    return AttackResult(name, metrics, bound, roc_curve(pos, neg), description, band)


def run_attack(target: Model, X_members, y_members, X_nonmembers, y_nonmembers, X_pool=None, y_pool=None, *,
               attack: str = "shadow", train_fn: TrainFn | None = None, batch_train_fn: BatchTrainFn | None = None,
               train_size: int | None = None, num_shadows: int = 16, classifier: Any = "catboost",
               per_class: bool = True, threshold_kind: str = "loss", lira_online: bool = True,
               rmia_online: bool = True, population: int | None = None, gamma: float = 1.0,
               rmia_a: float | None = None, confidence: float = 0.95, delta: float = 0.0, n_bootstrap: int = 1000,
               blind: bool = True, seed: int = 0, executor: Executor | None = None,
               per_record: bool = False) -> AttackReport:
    """Attack ``target`` on a balanced member / non-member set and report metrics, an epsilon lower bound and the
    blind baseline.

    Parameters
    ----------
    target : Model
        Anything with ``predict_proba(X) -> (n, C)``.
    X_members, y_members, X_nonmembers, y_nonmembers : arrays
        The release's members (its training records) and non-members (same distribution, not trained on).
        The larger side is subsampled (seeded) so the evaluation set is balanced.
    X_pool, y_pool : arrays, optional
        The attacker's own data for shadow models (``shadow``, ``lira``, ``rmia``: reference models and RMIA's
        population); disjoint from the members.
    attack : "shadow", "threshold", "lira" or "rmia"
    train_fn, batch_train_fn : the target's recipe for shadow models (see :mod:`dpaudit.attacks.protocols`).
    train_size : int, optional
        Shadow training-set size (``shadow``, ``lira``); default: the number of members (the target's
        training-set size).
    num_shadows : int
        Shadow models (``shadow``: N of Shokri et al.; ``lira``: K of Carlini et al.).
    classifier : str or estimator
        Attack classifier of ``shadow`` and of the blind baseline (see :func:`~dpaudit.attacks.shadow.make_classifier`).
    per_class : bool
        ``shadow``: one attack model per class (the original) or one global model.
    threshold_kind : "loss" or "confidence"
        ``threshold``: the score (Yeom et al. 2018).
    lira_online : bool
        ``lira``: online (IN and OUT shadows) or offline (OUT only); fixed variance below 64 shadows.
    rmia_online, population, gamma, rmia_a :
        ``rmia`` (:func:`~dpaudit.attacks.rmia.rmia_attack`): online or offline; how many of the pool's records are
        held out as the population (default: those the reference models do not need, at least a quarter, at most
        10,000); the pairwise threshold; offline's ``a``
        (default: fitted on the reference models).
    confidence : float in (0, 1)
        Level of the bootstrap intervals and of the epsilon estimate (``kind="estimate"``: one model's
        records are not independent trials; median and range over ``NUM_SPLITS`` split seeds).
    delta : float in [0, 1)
        The delta at which the epsilon lower bound is stated.
    n_bootstrap : int >= 0
        Bootstrap replicates for the metric intervals and the ROC band (0: neither).
    blind : bool
        Compute the blind baseline (always do, except in tests that time one part).
    seed : int >= 0
        Seeds everything: balancing, shadows, classifiers, splits, bootstrap.
    executor : Executor, optional
        Where shadow / reference models are trained, in units (default: this process); the numbers do not
        depend on it (see :func:`~dpaudit.attacks.shadow.shadow_probabilities`).
    per_record : bool
        Keep every evaluated record's score (and p-value or likelihood ratio where the attack has one) in
        ``report.per_record``; ``record`` indexes ``[members, non-members]`` (member i -> i, non-member j ->
        len(members) + j).

    Notes
    -----
    Binary metrics (accuracy / precision / recall / F1): the shadow attack and the blind baseline use their
    classifier's own decision (P[member] >= 0.5, fixed a priori, as FREDY's Table 2); threshold and LiRA scores
    have no natural cut, so theirs is chosen on a held-out half (see :func:`~dpaudit.attacks.metrics.attack_metrics`).
    """
    owner = "run_attack"
    check_choice(attack, "attack", owner, ATTACKS)
    if not callable(getattr(target, "predict_proba", None)):
        raise ParameterError(f"The 'target' parameter of {owner} must have predict_proba(X) -> (n, C). "
                             f"Got {type(target).__name__} instead.")
    seed = check_int(seed, "seed", owner, low=0)
    conf = check_probability(confidence, "confidence", owner)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    n_boot = check_int(n_bootstrap, "n_bootstrap", owner, low=0)
    check_bool(blind, "blind", owner)
    Xm, ym, Xn, yn = (np.asarray(a) for a in (X_members, y_members, X_nonmembers, y_nonmembers))
    if len(Xm) != len(ym) or len(Xn) != len(yn):
        raise DataError(f"{owner}: features and labels differ in length (members {len(Xm)} vs {len(ym)}, "
                        f"non-members {len(Xn)} vs {len(yn)}).")
    if len(Xm) < 2 or len(Xn) < 2:
        raise DataError(f"{owner} needs at least 2 members and 2 non-members; got {len(Xm)} and {len(Xn)}.")
    i1, i0 = balanced_subsample(len(Xm), len(Xn), seed=seed)
    X_eval, y_eval = np.concatenate([Xm[i1], Xn[i0]]), np.concatenate([ym[i1], yn[i0]])
    n = len(i1)
    notes = [SINGLE_MODEL_CAVEAT]
    settings: dict[str, Any] = {"attack": attack, "seed": seed, "confidence": conf, "delta": d,
                                "n_bootstrap": n_boot, "num_members_total": int(len(Xm)),
                                "num_nonmembers_total": int(len(Xn)), "num_evaluated_per_side": int(n)}

    if attack in ("shadow", "lira", "rmia"):
        if X_pool is None or y_pool is None or len(X_pool) == 0:
            raise DataError(f"The '{attack}' attack needs the attacker's pool (X_pool, y_pool) for shadow models.")
        settings.update(num_shadows=int(num_shadows), pool_size=int(len(X_pool)),
                        recipe="batch_train_fn" if batch_train_fn is not None else "train_fn")
    size = len(Xm) if train_size is None else check_int(train_size, "train_size", owner, low=1)
    stats: dict[str, np.ndarray] = {}
    if attack == "shadow":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scores = shadow_attack(target, X_eval, y_eval, X_pool, y_pool, train_size=size, num_shadows=num_shadows,
                                   train_fn=train_fn, batch_train_fn=batch_train_fn, classifier=classifier,
                                   per_class=per_class, seed=seed, executor=executor)
        notes.extend(str(w.message) for w in caught)
        settings.update(classifier=classifier if isinstance(classifier, str) else type(classifier).__name__,
                        per_class=bool(per_class), train_size=int(min(size, len(X_pool) // 2)),
                        features="both")
        threshold, desc = 0.5, (f"Shadow models (Shokri et al. 2017): {num_shadows} shadows, "
                                f"{'per-class' if per_class else 'global'} attack model ({settings['classifier']}).")
    elif attack == "threshold":
        kind = check_choice(threshold_kind, "threshold_kind", owner, THRESHOLD_KINDS)
        scores = threshold_scores(target, X_eval, y_eval, kind=kind)
        settings.update(threshold_kind=kind)
        threshold, desc = "held_out", f"Threshold on the {kind} (Yeom et al. 2018)."
    elif attack == "rmia":
        online = check_bool(rmia_online, "rmia_online", owner)
        K = check_int(num_shadows, "num_shadows", owner, low=2 if online else 1)
        r = rmia_attack(target, X_eval, y_eval, X_pool, y_pool, num_references=K, online=online, population=population,
                        train_size=size, gamma=gamma, a=rmia_a, train_fn=train_fn, batch_train_fn=batch_train_fn,
                        seed=seed, executor=executor)
        scores = r.score
        stats = {"rmia_p_value": r.p_value, "rmia_log_ratio": r.log_ratio}
        note = saturation_note(scores, np.r_[np.ones(n, bool), np.zeros(n, bool)], r.num_population)
        if note:
            notes.append(note)
        settings.update(online=online, population=r.num_population, gamma=r.gamma, train_size=int(size),
                        offline_a=None if online else r.a, offline_a_fitted=r.a_fit is not None)
        threshold = "held_out"
        desc = (f"RMIA (Zarifzadeh et al. 2024), {'online' if online else 'offline'}, {K} reference models, "
                f"{r.num_population} population records, gamma {r.gamma:g}"
                + ("." if online else f", a = {r.a:g} ({'fitted on the reference models' if r.a_fit else 'given'})."))
    else:
        online = check_bool(lira_online, "lira_online", owner)
        K = check_int(num_shadows, "num_shadows", owner, low=2)
        fixed = K < 64
        scores = lira_attack(target, X_eval, y_eval, X_pool, y_pool, num_shadows=K, train_fn=train_fn,
                             batch_train_fn=batch_train_fn, online=online, fixed_variance=fixed,
                             train_size=min(size, len(X_pool) + (len(X_eval) if online else 0) - 1), seed=seed,
                             executor=executor)
        settings.update(online=online, fixed_variance=fixed, train_size=int(size))
        stats = {"lira_log_lr": scores} if online else {"lira_p_value": -np.expm1(scores)}
        threshold, desc = "held_out", (f"LiRA (Carlini et al. 2022), {'online' if online else 'offline'}, "
                                       f"{K} shadows, {'fixed' if fixed else 'per-record'} variance.")
    result = attack_result(attack, desc, scores[:n], scores[n:], threshold=threshold, confidence=conf, delta=d,
                     n_bootstrap=n_boot, seed=seed)

    if blind:
        bm, bn = blind_scores(Xm[i1], ym[i1], Xn[i0], yn[i0], classifier=classifier, seed=seed)
        blind_result = attack_result("blind", "Blind baseline: record features and label only, never queries the model "
                               "(cross-fitted, 2 folds).", bm, bn, threshold=0.5, confidence=conf, delta=d,
                               n_bootstrap=n_boot, seed=seed)
        if blind_result.metrics.intervals.get("auc") is not None and blind_result.metrics.intervals["auc"].low > 0.5:
            notes.append("The blind baseline separates members from non-members without querying the model "
                         f"(AUC {blind_result.metrics.auc:.3f}): the membership split is distinguishable, so part of "
                         "the attack's success may be a distribution mismatch, not leakage.")
    else:
        blind_result = None
    records = None
    if check_bool(per_record, "per_record", owner):
        records = RecordScores(np.r_[i1, len(Xm) + i0], y_eval.astype(np.int64) if np.issubdtype(y_eval.dtype, np.integer)
                               else np.full(2 * n, -1), np.r_[np.ones(n, bool), np.zeros(n, bool)], {attack: scores},
                               stats, attack)
    return AttackReport(result, blind_result, settings, tuple(notes), records)
