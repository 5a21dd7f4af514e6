"""Typed results of the attack layer: frozen dataclasses, written and read by the one serialiser
(:func:`dpaudit.serial.to_dict` / :func:`dpaudit.serial.from_dict`; ``attack.json`` has a published schema).

Infinite numbers are written as the strings ``"inf"`` / ``"-inf"`` so strict JSON readers accept them.
Arrays (ROC curves) are written as lists of floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from dpaudit.attacks.per_record import RecordScores
from dpaudit.errors import check_choice
from dpaudit.serial import FloatArray, JsonUpgrade, JsonValue

#: What an empirical epsilon bound is. ``"certified"``: a lower bound that holds with the stated confidence
#: because every trial is an independent run of the mechanism (mechanism tests, one model per trial, multi-run
#: canary audits) or because the canaries were included by independent fair coin flips (one-run audits,
#: Steinke et al. 2023). ``"estimate"``: the same formula applied where its independence assumption fails
#: (records of one trained model are coupled through that model): an estimate of the leakage, not a bound.
CERTIFIED = "certified"
ESTIMATE = "estimate"
BOUND_KINDS = (CERTIFIED, ESTIMATE)

#: The words every output uses for an estimate (reports, console, claims, JUnit).
ESTIMATE_CAVEAT = "estimate, not certified: records are coupled through one model"


def check_bound_kind(kind: str, owner: str) -> str:
    """``kind`` if it is one of :data:`BOUND_KINDS`, else a :class:`~dpaudit.errors.ParameterError`."""
    return check_choice(kind, "kind", owner, BOUND_KINDS)


class HasBoundKind:
    """Mixin of every bound type that carries a ``kind`` field: validates it and answers :attr:`certified`."""

    __slots__ = ()
    kind: str

    def __post_init__(self) -> None:
        check_bound_kind(self.kind, type(self).__name__)

    @property
    def certified(self) -> bool:
        return self.kind == CERTIFIED


#: The version of an attack report's JSON (``attack.json``; :class:`AttackReport`).
ATTACK_SCHEMA = 1

__all__ = [
    "ATTACK_SCHEMA",
    "Interval",
    "RocCurve",
    "AttackMetrics",
    "BOUND_KINDS",
    "CERTIFIED",
    "ESTIMATE",
    "ESTIMATE_CAVEAT",
    "check_bound_kind",
    "HasBoundKind",
    "EpsilonBound",
    "OneRunBound",
    "AnalysisBound",
    "CurveTest",
    "RocBand",
    "AttackResult",
    "AttackReport",
]


@dataclass(frozen=True, slots=True)
class Interval:
    """A two-sided confidence interval ``[low, high]`` for ``estimate`` at level ``confidence``."""

    estimate: float
    low: float
    high: float
    confidence: float


@dataclass(frozen=True, eq=False)
class RocCurve:
    """Empirical ROC of the rule "member iff score >= threshold".

    ``fpr[i]``, ``tpr[i]`` are the rates at ``thresholds[i]``; thresholds decrease, the curve starts at
    (0, 0) (threshold ``+inf``) and ends at (1, 1).
    """

    fpr: FloatArray
    tpr: FloatArray
    thresholds: FloatArray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RocCurve):
            return NotImplemented
        return (np.array_equal(self.fpr, other.fpr) and np.array_equal(self.tpr, other.tpr)
                and np.array_equal(self.thresholds, other.thresholds))


@dataclass(frozen=True, slots=True)
class AttackMetrics(JsonUpgrade):
    """Membership-inference metrics of one attack on one balanced evaluation set.

    Threshold-free: ``auc``, ``tpr_at_fpr`` (a mapping ``{fpr_target: tpr}``, conservative step interpolation:
    ``metrics.tpr_at_fpr[0.01]``; in JSON an object ``{"0.01": tpr}``; files of earlier releases, a list of
    ``[fpr, tpr]`` pairs, are read as well).
    At ``threshold`` (chosen by ``threshold_rule``, see :func:`dpaudit.attacks.metrics.attack_metrics`):
    ``accuracy``, ``balanced_accuracy``, member-class ``precision``/``recall``/``f1`` and the macro averages
    over the two classes (member, non-member) — FREDY (2024) Table 2 reports Accuracy, Recall, Precision,
    F1 with Recall == Accuracy throughout, i.e. macro averages on balanced data.
    ``intervals`` holds bootstrap confidence intervals by metric name.
    """

    auc: float
    tpr_at_fpr: Mapping[float, float]
    accuracy: float
    balanced_accuracy: float
    precision: float
    recall: float
    f1: float
    macro_precision: float
    macro_recall: float
    macro_f1: float
    threshold: float
    threshold_rule: str
    num_members: int
    num_nonmembers: int
    intervals: Mapping[str, Interval] = field(default_factory=dict)

    def __post_init__(self) -> None:
        pairs = self.tpr_at_fpr.items() if isinstance(self.tpr_at_fpr, Mapping) else self.tpr_at_fpr
        object.__setattr__(self, "tpr_at_fpr", {float(f): float(t) for f, t in pairs})   # pairs: the old form

    @classmethod
    def __json_upgrade__(cls, d: Any) -> Any:
        """attack.json / comparison.json of earlier releases: ``tpr_at_fpr`` as a list of ``[fpr, tpr]`` pairs."""
        pairs = d.get("tpr_at_fpr") if isinstance(d, dict) else None
        if isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 for p in pairs):
            d = {**d, "tpr_at_fpr": {str(f): t for f, t in pairs}}
        return d

    def tpr_at(self, fpr: float) -> float:
        for f, t in self.tpr_at_fpr.items():
            if math.isclose(f, fpr):
                return t
        raise KeyError(f"TPR at FPR {fpr} was not computed; have {list(self.tpr_at_fpr)}")


@dataclass(frozen=True, slots=True)
class EpsilonBound(HasBoundKind):
    """Empirical epsilon from a membership test: a lower bound valid with probability >= ``confidence`` when
    ``kind == "certified"`` (independent trials), an estimate when ``kind == "estimate"`` (see
    :data:`BOUND_KINDS`).

    At ``threshold`` (rule "member iff score >= threshold") the evaluation half gave ``fpr``/``fnr`` with
    Clopper-Pearson upper limits ``fpr_high``/``fnr_high``; ``epsilon`` is
    ``max(0, log((1 - delta - fnr_high) / fpr_high), log((1 - delta - fpr_high) / fnr_high))``.
    ``selection`` is ``"split"`` (threshold chosen on a disjoint half) or ``"bonferroni"`` (over
    ``num_thresholds`` fixed thresholds, evaluated on all the data).

    ``split_range`` = (``split_low``, ``split_high``): the smallest and largest figure over ``num_splits``
    split seeds of the same scores (``selection == "split"``; for one draw both equal ``epsilon``). A wide range
    says the figure depends on the split, not only on the model; ``epsilon`` is then their median.

    ``bayes_median`` / ``bayes_low`` / ``bayes_high``: the posterior median and equal-tailed credible interval (at
    ``confidence``) of epsilon from the same threshold's counts (Zanella-Beguelin et al. 2023,
    :func:`dpaudit.attacks.bounds.bayes_epsilon`) -- an estimate beside the split-seed spread; None when not computed.
    """

    epsilon: float
    delta: float
    confidence: float
    threshold: float
    fpr: float
    fnr: float
    fpr_high: float
    fnr_high: float
    selection: str
    num_thresholds: int
    num_members: int
    num_nonmembers: int
    kind: str = ESTIMATE
    split_low: float = math.nan
    split_high: float = math.nan
    num_splits: int = 1
    bayes_median: float | None = None
    bayes_low: float | None = None
    bayes_high: float | None = None

    def __post_init__(self) -> None:
        HasBoundKind.__post_init__(self)
        if math.isnan(self.split_low):
            object.__setattr__(self, "split_low", self.epsilon)
        if math.isnan(self.split_high):
            object.__setattr__(self, "split_high", self.epsilon)

    @property
    def split_range(self) -> tuple[float, float]:
        return (self.split_low, self.split_high)


@dataclass(frozen=True, slots=True)
class OneRunBound(HasBoundKind):
    """One-run audit (Steinke, Nasr, Jagielski 2023): ``m`` canaries, ``k_plus``/``k_minus`` guesses,
    ``correct`` of the ``guesses = k_plus + k_minus`` right; ``epsilon`` is the largest value rejected
    at level ``1 - confidence`` for the stated ``delta``. ``kind`` is ``"certified"``: the theorem needs only the
    canaries' independent fair-coin inclusion, which the caller vouches for by calling it."""

    epsilon: float
    delta: float
    confidence: float
    num_canaries: int
    k_plus: int
    k_minus: int
    correct: int
    kind: str = CERTIFIED

    @property
    def guesses(self) -> int:
        return self.k_plus + self.k_minus


@dataclass(frozen=True, slots=True)
class AnalysisBound(HasBoundKind):
    """One analysis of a canary audit's evidence (see :mod:`dpaudit.attacks.auditor`).

    ``analysis``: ``"eps"`` (one-run: Steinke, Nasr, Jagielski 2023, Thm 3; multi-run: Clopper-Pearson on the
    (epsilon, delta) test), ``"fdp"`` (one-run f-DP test, Mahloujifar, Melis, Chaudhuri 2025), ``"gdp"`` (multi-run
    Gaussian-DP: Clopper-Pearson limits of FPR/FNR turned into mu) or ``"bayes"`` (posterior credible interval,
    Zanella-Beguelin et al. 2023: an estimate). ``epsilon`` is the lower bound at ``confidence`` (certified) or the
    posterior median (estimate, with the credible interval ``[low, high]``); ``mu`` the certified Gaussian-DP
    parameter where the analysis has one. ``rule``: the guessing rule / threshold choice that produced it, in words.
    ``assumption``: what the epsilon needs beyond the audit's fair coins / independent runs ("" = nothing).
    ``ideal_epsilon``: the same analysis on the ideal attack (median of simulated audits), when computed.
    ``details``: the rule's numbers (guesses, correct, pairs tried; threshold, FPR, FNR, ...)."""

    analysis: str
    epsilon: float
    delta: float
    confidence: float
    rule: str
    kind: str = CERTIFIED
    mu: float | None = None
    low: float | None = None
    high: float | None = None
    assumption: str = ""
    ideal_epsilon: float | None = None
    details: Mapping[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CurveTest:
    """The f-DP one-run test of a stated trade-off curve (a release's accounted privacy profile) against the
    canary guesses: ``p_value`` is the smallest level at which the guesses reject the curve (Bonferroni over the
    rule's guess counts; 1 = consistent at every level), ``rejected`` whether it is at most ``1 - confidence``.
    ``curve`` says which curve (e.g. "accounted PLD of the Poisson-subsampled Gaussian"); ``details`` the guesses."""

    curve: str
    p_value: float
    confidence: float
    rule: str
    details: Mapping[str, JsonValue] = field(default_factory=dict)

    @property
    def rejected(self) -> bool:
        return self.p_value <= 1.0 - self.confidence


@dataclass(frozen=True, eq=False)
class RocBand:
    """Pointwise bootstrap band of an ROC curve: at each ``fpr`` (from the smallest resolvable FPR, 1/n of the
    non-members, up to 1) the conservative TPR (``tpr``) and its percentile interval ``[low, high]`` at level
    ``confidence`` over bootstrap replicates of members and non-members."""

    fpr: FloatArray
    tpr: FloatArray
    low: FloatArray
    high: FloatArray
    confidence: float

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RocBand):
            return NotImplemented
        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in ("fpr", "tpr", "low", "high")) \
            and self.confidence == other.confidence


@dataclass(frozen=True, slots=True)
class AttackResult:
    """One attack (or the blind baseline) on one target: metrics, ROC (with its bootstrap band when computed)
    and the empirical epsilon bound (which says whether it is certified or an estimate)."""

    name: str
    metrics: AttackMetrics
    bound: EpsilonBound
    roc: RocCurve
    description: str = ""
    roc_band: RocBand | None = None


@dataclass(frozen=True, slots=True)
class AttackReport:
    """What ``run_attack`` returns: the attack on the target beside the blind baseline (``None`` only when
    explicitly skipped), and the settings.

    ``settings`` holds the attack's parameters (plain JSON values: attack, shadows, classifier, seed,
    confidence, delta, ...) so the run can be repeated. ``per_record`` (asked for with ``per_record=True``) holds
    every evaluated record's score (:class:`~dpaudit.attacks.per_record.RecordScores`).
    """

    attack: AttackResult
    blind: AttackResult | None
    settings: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    per_record: RecordScores | None = None
    schema: int = ATTACK_SCHEMA
