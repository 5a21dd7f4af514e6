"""One comparison of the reference-model attacks on the *same* reference models and targets.

From one :class:`~dpaudit.attacks.references.ReferenceSignals` (K reference models in the paired online layout,
the targets, the population), every attack is computed:

=====================  ==========================================================================================
``threshold``          the global loss threshold (Yeom et al. 2018): ``log p_y`` under the target, no references
``lira-online``        LiRA (Carlini et al. 2022), IN and OUT Gaussians, per-record variances
``lira-online-fixed``  LiRA online with one pooled variance (their recommendation below ~64 references)
``lira-offline``       LiRA offline (OUT references only), per-record variance
``lira-offline-fixed`` LiRA offline, pooled variance
``rmia-online``        RMIA (Zarifzadeh et al. 2024), Pr(x) over all references
``rmia-offline``       RMIA offline: OUT references and the fitted ``a``
=====================  ==========================================================================================

Offline attacks on the online layout use, for each record, only the references that did not train on it (half of
them): the convention of Carlini et al.'s comparison. Per-record variances fall back to the pooled one for records
with fewer than two IN / OUT references (:func:`~dpaudit.attacks.lira.lira_scores`). An attack the references do
not allow (online with one reference model) is listed in ``skipped`` with the reason.

Every metric is computed by :func:`dpaudit.attacks.run.attack_result` (AUC and TPR at FPR with stratified bootstrap
intervals, the ROC and its band, the split-selected Clopper-Pearson epsilon, an **estimate** on one model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from dpaudit.attacks.metrics import balanced_subsample
from dpaudit.attacks.per_record import RecordScores
from dpaudit.attacks.protocols import BatchTrainFn, Model, TrainFn
from dpaudit.attacks.references import ReferenceSignals, train_reference_signals
from dpaudit.attacks.results import AttackResult
from dpaudit.attacks.lira import lira_scores
from dpaudit.attacks.rmia import OfflineAFit, rmia_from_signals, saturation_note
from dpaudit.attacks.run import SINGLE_MODEL_CAVEAT, attack_result
from dpaudit.errors import DataError, DPAuditError, check_float, check_int, check_probability
from dpaudit.executors import Executor

__all__ = ["COMPARED_ATTACKS", "AttackComparison", "compare_signals", "compare_attacks", "strongest_attack"]

COMPARED_ATTACKS = ("threshold", "lira-online", "lira-online-fixed", "lira-offline", "lira-offline-fixed",
                    "rmia-online", "rmia-offline")

_DESCRIPTIONS = {
    "threshold": "Global loss threshold (Yeom et al. 2018): log p_y under the target; no reference models.",
    "lira-online": "LiRA online (Carlini et al. 2022): IN and OUT Gaussians, per-record variances.",
    "lira-online-fixed": "LiRA online, one pooled variance.",
    "lira-offline": "LiRA offline: OUT references only, per-record variance.",
    "lira-offline-fixed": "LiRA offline, one pooled variance.",
    "rmia-online": "RMIA online (Zarifzadeh et al. 2024): Pr(x) over all references, pairwise against the population.",
    "rmia-offline": "RMIA offline: OUT references, Pr(x) = ((1 + a) Pr_OUT + 1 - a) / 2 with a fitted on the references.",
}


#: Among attacks of equal strength, the one whose scores rank the per-record report (per-record p-values first).
_RANK_PREFERENCE = ("rmia-online", "rmia-offline", "lira-online", "lira-offline", "lira-online-fixed",
                    "lira-offline-fixed", "threshold")


def strongest_attack(results: Mapping[str, AttackResult]) -> str:
    """The strongest of ``results`` on these targets, whose scores rank the per-record report: the largest TPR at the
    smallest FPR computed (the low-FPR regime that matters for membership, Carlini et al. 2022), then the largest
    TPR at the next FPR, then the largest AUC; exact ties go to the attack with per-record p-values
    (:data:`_RANK_PREFERENCE`). ``""`` when ``results`` is empty."""
    if not results:
        return ""

    def strength(name: str) -> tuple:
        m = results[name].metrics
        pref = _RANK_PREFERENCE.index(name) if name in _RANK_PREFERENCE else len(_RANK_PREFERENCE)
        return (*(t for _, t in sorted(m.tpr_at_fpr.items())), m.auc, -pref)

    return max(results, key=strength)


@dataclass(frozen=True)
class AttackComparison:
    """Every attack of :data:`COMPARED_ATTACKS` on one target with the same reference models: ``results`` by attack
    name, ``skipped`` (attack -> why it could not run), the ``settings``, ``notes``, the offline ``a`` fit and,
    when asked for, every record's scores (``records``)."""

    results: Mapping[str, AttackResult]
    skipped: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    offline_a: OfflineAFit | None = None
    records: RecordScores | None = None
    schema: int = 1     # of comparison.json



def _attack_scores(sig: ReferenceSignals, name: str, *, gamma: float, a: float | None) -> tuple[np.ndarray, dict, Any]:
    """(scores, per-record statistics, extra) of one attack on the signals."""
    if name == "threshold":
        return sig.threshold(), {}, None
    if name.startswith("lira-"):
        online = "online" in name
        no_out = ~(~sig.inclusion).any(axis=1)
        if not online and no_out.any():
            raise DataError(f"{int(no_out.sum())} target record(s) have no OUT reference model; offline attacks "
                            "average OUT models only.")
        s = lira_scores(sig.target_phi, sig.phi, sig.inclusion, online=online, fixed_variance=name.endswith("fixed"))
        stat = {f"{name}_log_lr": s} if online else {f"{name}_p_value": -np.expm1(s)}
        return s, stat, None
    online = name == "rmia-online"
    r = rmia_from_signals(sig, online=online, a=None if online else a, gamma=gamma)
    return r.score, {f"{name}_p_value": r.p_value, f"{name}_log_ratio": r.log_ratio}, r


def compare_signals(signals: ReferenceSignals, member, *, record=None, labels=None, gamma: float = 1.0,
                    a: float | None = None, confidence: float = 0.95, delta: float = 0.0, n_bootstrap: int = 1000,
                    seed: int = 0, per_record: bool = True) -> AttackComparison:
    """Every attack of :data:`COMPARED_ATTACKS` on ``signals`` (see the module docstring).

    Parameters
    ----------
    signals : ReferenceSignals
        Targets, population and reference models (online layout for the online attacks).
    member : array_like of bool, shape (n,)
        Ground truth of the targets (used for the metrics only, never by an attack).
    record, labels : array_like, shape (n,), optional
        The targets' record indices and labels for the per-record table (default: 0..n-1 and -1).
    gamma, a : RMIA's pairwise threshold and offline parameter (default: fitted on the references).
    confidence, delta, n_bootstrap, seed : as :func:`dpaudit.attacks.run.run_attack`.
    per_record : bool
        Keep every record's scores (``records``).
    """
    owner = "compare_signals"
    mem = np.asarray(member, dtype=bool).ravel()
    if mem.size != signals.num_targets or mem.sum() < 2 or (~mem).sum() < 2:
        raise DataError(f"{owner} needs membership for each of the {signals.num_targets} targets with at least 2 "
                        f"members and 2 non-members; got {mem.size} entries, {int(mem.sum())} members.")
    check_float(gamma, "gamma", owner, low=0.0, low_open=True)
    conf = check_probability(confidence, "confidence", owner)
    n_boot = check_int(n_bootstrap, "n_bootstrap", owner, low=0)
    seed = check_int(seed, "seed", owner, low=0)
    results: dict[str, AttackResult] = {}
    skipped: dict[str, str] = {}
    scores: dict[str, np.ndarray] = {}
    stats: dict[str, np.ndarray] = {}
    fit: OfflineAFit | None = None
    extra_notes: list[str] = []
    K = signals.num_references
    for name in COMPARED_ATTACKS:
        if "online" in name and signals.layout == "offline":
            skipped[name] = "the reference models never trained on the targets (offline layout)."
            continue
        if "online" in name and K < 2:
            skipped[name] = "online attacks need at least 2 reference models (IN and OUT ones for each record)."
            continue
        if "online" in name and not signals.inclusion.any(axis=1).any():
            skipped[name] = "needs reference models that trained on the targets (none did)."
            continue
        try:
            s, st, extra = _attack_scores(signals, name, gamma=gamma, a=a)
        except DPAuditError as exc:
            skipped[name] = str(exc)
            continue
        if extra is not None and extra.a_fit is not None:
            fit = extra.a_fit
        desc = _DESCRIPTIONS[name] + (f" {K} reference models." if name != "threshold" else "")
        if name == "rmia-offline" and extra is not None:
            desc += f" a = {extra.a:g}{' (fitted)' if extra.a_fit is not None else ' (given)'}."
        results[name] = attack_result(name, desc, s[mem], s[~mem], threshold="held_out", confidence=conf, delta=delta,
                                      n_bootstrap=n_boot, seed=seed)
        if extra is not None:
            note = saturation_note(s, mem, signals.num_population)
            if note:
                extra_notes.append(f"{name}: {note}")
        scores[name] = s
        stats.update(st)
    primary = strongest_attack(results)
    records = None
    if per_record:
        n = signals.num_targets
        records = RecordScores(np.arange(n) if record is None else np.asarray(record),
                               np.full(n, -1) if labels is None else np.asarray(labels), mem, scores, stats, primary)
    settings = {"num_references": K, "layout": signals.layout, "population": signals.num_population,
                "gamma": float(gamma), "offline_a": None if a is None else float(a), "seed": seed, "confidence": conf,
                "delta": float(delta), "n_bootstrap": n_boot, "num_members": int(mem.sum()),
                "num_nonmembers": int((~mem).sum()),
                "primary_attack": primary}
    notes = (SINGLE_MODEL_CAVEAT,
             "All attacks use the same reference models and targets; offline attacks use, for each record, only the "
             "reference models that did not train on it (half of them in the online layout).", *extra_notes)
    return AttackComparison(results, skipped, settings, notes, fit, records)


def compare_attacks(target: Model, X_members, y_members, X_nonmembers, y_nonmembers, X_pool, y_pool, *,
                    num_references: int = 16, population: int | None = None, train_size: int | None = None,
                    gamma: float = 1.0, a: float | None = None, train_fn: TrainFn | None = None,
                    batch_train_fn: BatchTrainFn | None = None, confidence: float = 0.95, delta: float = 0.0,
                    n_bootstrap: int = 1000, seed: int = 0, executor: Executor | None = None,
                    per_record: bool = True) -> AttackComparison:
    """Train K reference models once (online paired layout: each balanced evaluation record IN for half of them)
    and compare every attack on them (:func:`compare_signals`). ``records.record`` indexes the concatenation
    ``[members, non-members]`` (member i -> i, non-member j -> len(members) + j). Other arguments: as
    :func:`dpaudit.attacks.run.run_attack` and :func:`~dpaudit.attacks.references.train_reference_signals`."""
    owner = "compare_attacks"
    seed = check_int(seed, "seed", owner, low=0)
    Xm, ym, Xn, yn = (np.asarray(v) for v in (X_members, y_members, X_nonmembers, y_nonmembers))
    if len(Xm) != len(ym) or len(Xn) != len(yn) or len(Xm) < 2 or len(Xn) < 2:
        raise DataError(f"{owner} needs at least 2 members and 2 non-members with one label each; got "
                        f"{len(Xm)}/{len(ym)} and {len(Xn)}/{len(yn)}.")
    if X_pool is None or len(X_pool) < 2:
        raise DataError(f"{owner} needs the attacker's pool (X_pool, y_pool) for reference models and the population.")
    i1, i0 = balanced_subsample(len(Xm), len(Xn), seed=seed)
    X_eval, y_eval = np.concatenate([Xm[i1], Xn[i0]]), np.concatenate([ym[i1], yn[i0]])
    size = len(Xm) if train_size is None else check_int(train_size, "train_size", owner, low=1)
    sig, ref_settings = train_reference_signals(target, X_eval, y_eval, X_pool, y_pool, num_references=num_references,
                                                online=True, population=population, train_size=size,
                                                train_fn=train_fn, batch_train_fn=batch_train_fn, seed=seed,
                                                executor=executor)
    member = np.r_[np.ones(len(i1), bool), np.zeros(len(i0), bool)]
    comp = compare_signals(sig, member, record=np.r_[i1, len(Xm) + i0], labels=y_eval, gamma=gamma, a=a,
                           confidence=confidence, delta=delta, n_bootstrap=n_bootstrap, seed=seed, per_record=per_record)
    notes = comp.notes
    if ref_settings["reference_train_size"] < 0.8 * size:
        notes += (f"The reference models train on about {ref_settings['reference_train_size']} records, the target on "
                  f"{size}: the attacker's pool is too small to match; smaller training sets usually memorise more, "
                  "which can bias the reference statistics.",)
    return AttackComparison(comp.results, comp.skipped, {**comp.settings, **ref_settings}, notes, comp.offline_a,
                            comp.records)
