"""Attack layer: how much leaks, measured.

Models reach this package only through :mod:`dpaudit.attacks.protocols` (``predict_proba``, ``TrainFn``,
``BatchTrainFn``) and plain numpy arrays; it never imports the training layer.
"""

from dpaudit.attacks.blind import blind_scores
from dpaudit.attacks.bounds import epsilon_bound_over_splits, epsilon_lower_bound, one_run_audit, one_run_epsilon
from dpaudit.attacks.lira import lira_attack, lira_scores, logit_confidence
from dpaudit.attacks.metrics import attack_metrics, auc, roc_band, roc_curve, tpr_at_fpr
from dpaudit.attacks.protocols import BatchTrainFn, Model, TrainFn
from dpaudit.attacks.results import (BOUND_KINDS, CERTIFIED, ESTIMATE, ESTIMATE_CAVEAT, AttackMetrics, AttackReport,
                                     AttackResult, EpsilonBound, Interval, OneRunBound, RocBand, RocCurve)
from dpaudit.attacks.run import ATTACKS, run_attack
from dpaudit.attacks.rmia import OfflineAFit, RmiaScores, fit_offline_a, rmia_attack, rmia_scores
from dpaudit.attacks.references import ReferenceSignals, train_reference_signals
from dpaudit.attacks.compare import COMPARED_ATTACKS, AttackComparison, compare_attacks, compare_signals
from dpaudit.attacks.per_record import PerRecordSummary, RecordScores, summarise_records
from dpaudit.attacks.shadow import AttackModel, shadow_attack
from dpaudit.attacks.threshold import confidence_scores, loss_scores, threshold_scores

__all__ = [
    "ATTACKS", "run_attack",
    "rmia_scores", "rmia_attack", "fit_offline_a", "RmiaScores", "OfflineAFit", "ReferenceSignals",
    "train_reference_signals", "COMPARED_ATTACKS", "AttackComparison", "compare_attacks", "compare_signals",
    "RecordScores", "PerRecordSummary", "summarise_records",
    "shadow_attack", "AttackModel", "lira_attack", "lira_scores", "logit_confidence",
    "loss_scores", "confidence_scores", "threshold_scores", "blind_scores",
    "attack_metrics", "auc", "roc_band", "roc_curve", "tpr_at_fpr",
    "epsilon_lower_bound", "epsilon_bound_over_splits", "one_run_audit", "one_run_epsilon",
    "BOUND_KINDS", "CERTIFIED", "ESTIMATE", "ESTIMATE_CAVEAT",
    "AttackMetrics", "AttackReport", "AttackResult", "EpsilonBound", "Interval", "OneRunBound", "RocBand", "RocCurve",
    "Model", "TrainFn", "BatchTrainFn",
]
