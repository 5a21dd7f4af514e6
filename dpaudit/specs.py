"""Typed attack specs: what :func:`dpaudit.attack` (and ``dpaudit attack``) runs, one small frozen dataclass per
attack, validated at construction (a :class:`~dpaudit.errors.ParameterError` names the field, its range and the
value), like the guessing rules of :mod:`dpaudit.attacks.auditor`.

>>> import dpaudit
>>> dpaudit.RMIA(references=16, offline=True)
RMIA(references=16, offline=True, population=None, gamma=1.0, a=None, blind='catboost')
>>> dpaudit.CanaryAudit("one-run", canaries=1000).kind
'one-run'

Membership-inference attacks on the released model (an *estimate* of epsilon, on one model) -- each beside the
blind baseline (``blind``: the classifier of the baseline that never queries the model; ``None``: no baseline):

- :class:`Threshold` -- a global loss / confidence threshold (Yeom et al. 2018), no shadow models;
- :class:`Shadow` -- shadow models and an attack classifier (Shokri et al. 2017);
- :class:`LiRA` -- the likelihood-ratio attack (Carlini et al. 2022), online or offline;
- :class:`RMIA` -- the relative membership-inference attack (Zarifzadeh et al. 2024), online or offline;
- :class:`Compare` -- every reference-model attack on the same reference models, side by side.

A *certified* lower bound: :class:`CanaryAudit` (``"one-run"``: Steinke et al. 2023; ``"multi-run"``: N models).
Where the shadow / reference models train: :class:`Execution` (this process, or a Ray cluster).

This module imports nothing heavy (``dpaudit.RMIA`` is cheap to reach); the choice lists below are the attack
layer's (a test checks that they agree).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Union

from dpaudit.errors import ParameterError, check_bool, check_choice, check_float, check_int, format_value, worded
from dpaudit.training.limits import MAX_CANARIES, MAX_MODELS, MAX_RECORDS

__all__ = ["Threshold", "Shadow", "LiRA", "RMIA", "Compare", "CanaryAudit", "Execution", "AttackSpec",
           "MembershipSpec", "THRESHOLD_KINDS", "CLASSIFIERS", "CANARY_KINDS", "CANARY_SCORES", "ANALYSES",
           "EXECUTORS", "MAX_REFERENCES"]

#: :data:`dpaudit.attacks.threshold.THRESHOLD_KINDS`.
THRESHOLD_KINDS = ("loss", "confidence")
#: :data:`dpaudit.attacks.shadow.CLASSIFIERS`.
CLASSIFIERS = ("catboost", "logreg", "gbdt", "rf")
#: Canaries of a canary audit: input canaries (black-box) or Dirac gradient canaries (white-box).
CANARY_KINDS = ("mislabeled", "ood", "dirac")
#: Canary scores (``dirac-*`` for Dirac canaries, ``loss`` / ``lira`` for input canaries).
CANARY_SCORES = ("loss", "lira", "dirac-lr", "dirac-sum")
#: :data:`dpaudit.auditing.canary_audit.ANALYSIS_CHOICES`.
ANALYSES = ("auto", "eps", "fdp", "fdp-dp", "gdp")
#: What trains the shadow / reference models (:func:`dpaudit.executors.make_executor`).
EXECUTORS = ("local", "processes", "ray", "auto")
#: The most shadow / reference models one attack trains (as ``dpaudit attack --shadows``).
MAX_REFERENCES = 10_000


def _blind(value: Any, owner: str) -> str | None:
    if value is None:
        return None
    return check_choice(value, "blind", owner, CLASSIFIERS)


def _count(value: Any, name: str, owner: str, low: int, high: int) -> int:
    """A count is an int (never a float, not even ``1e18`` or ``16.0``: a float count is a typo or an overflow)
    within the range :func:`dpaudit.attack` runs, checked here so that the spec itself is refused."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ParameterError(f"The '{name}' parameter of {owner} must be an int in the range [{low}, {high}] (a "
                             f"count: never a float). Got {format_value(value)} instead.")
    return check_int(value, name, owner, low=low, high=high)


def _references(value: Any, owner: str, low: int) -> int:
    return _count(value, "references", owner, low, MAX_REFERENCES)


@dataclass(frozen=True, slots=True)
class Threshold:
    """A global threshold on the target model's ``kind`` score (``"loss"``: -log p_y, Yeom et al. 2018;
    ``"confidence"``: max_c p_c); no shadow models."""

    kind: str = "loss"
    blind: str | None = "catboost"

    name = "threshold"

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", "Threshold", THRESHOLD_KINDS)
        object.__setattr__(self, "blind", _blind(self.blind, "Threshold"))


@dataclass(frozen=True, slots=True)
class Shadow:
    """``shadows`` shadow models trained with the release's recipe, and an attack ``classifier`` on their outputs
    (one per class, or one global model with ``per_class=False``; Shokri et al. 2017)."""

    shadows: int = 16
    classifier: str = "catboost"
    per_class: bool = True
    blind: str | None = "catboost"

    name = "shadow"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shadows", _count(self.shadows, "shadows", "Shadow", 2, MAX_REFERENCES))
        check_choice(self.classifier, "classifier", "Shadow", CLASSIFIERS)
        check_bool(self.per_class, "per_class", "Shadow")
        object.__setattr__(self, "blind", _blind(self.blind, "Shadow"))


@dataclass(frozen=True, slots=True)
class LiRA:
    """LiRA (Carlini et al. 2022) with ``references`` reference models: online (each record IN for half of them; at
    least 4) or ``offline`` (OUT models only)."""

    references: int = 16
    offline: bool = False
    blind: str | None = "catboost"

    name = "lira"

    def __post_init__(self) -> None:
        check_bool(self.offline, "offline", "LiRA")
        object.__setattr__(self, "references", _references(self.references, "LiRA", 2 if self.offline else 4))
        object.__setattr__(self, "blind", _blind(self.blind, "LiRA"))


@dataclass(frozen=True, slots=True)
class RMIA:
    """RMIA (Zarifzadeh et al. 2024) with ``references`` reference models, online or ``offline``; ``population``:
    population records held out of the attacker's pool (None: dpaudit's default); ``gamma``: the pairwise
    likelihood-ratio threshold (> 0); ``a``: offline RMIA's a in [0, 1] (None: fitted on the reference models)."""

    references: int = 16
    offline: bool = False
    population: int | None = None
    gamma: float = 1.0
    a: float | None = None
    blind: str | None = "catboost"

    name = "rmia"

    def __post_init__(self) -> None:
        owner = "RMIA"
        check_bool(self.offline, "offline", owner)
        object.__setattr__(self, "references", _references(self.references, owner, 2))
        if self.population is not None:
            object.__setattr__(self, "population", _count(self.population, "population", owner, 1, MAX_RECORDS))
        object.__setattr__(self, "gamma", check_float(self.gamma, "gamma", owner, low=0.0, low_open=True))
        if self.a is not None:
            object.__setattr__(self, "a", check_float(self.a, "a", owner, low=0.0, high=1.0))
            if not self.offline:
                raise ParameterError(f"The 'a' parameter of {owner} applies to offline=True only. Got a={self.a!r} "
                                     "with offline=False instead.")
        object.__setattr__(self, "blind", _blind(self.blind, owner))


@dataclass(frozen=True, slots=True)
class Compare:
    """Every reference-model attack (threshold, LiRA online / offline / fixed variance, RMIA online / offline) on the
    *same* ``references`` reference models and targets; ``population``, ``gamma``, ``a``: as :class:`RMIA`'s. On a
    language-model release: every sequence-level attack, with Min-K% / Min-K%++ over the ``min_k`` fraction of the
    lowest tokens, ``int(min_k * n)`` of them (``min_k_rounding="floor"``, the published code's convention) or
    ``ceil(min_k * n)`` (``"ceil"``), at least one."""

    references: int = 16
    population: int | None = None
    gamma: float = 1.0
    a: float | None = None
    min_k: float = 0.2
    min_k_rounding: str = "floor"

    name = "compare"

    def __post_init__(self) -> None:
        owner = "Compare"
        object.__setattr__(self, "references", _references(self.references, owner, 2))
        if self.population is not None:
            object.__setattr__(self, "population", _count(self.population, "population", owner, 1, MAX_RECORDS))
        object.__setattr__(self, "gamma", check_float(self.gamma, "gamma", owner, low=0.0, low_open=True))
        if self.a is not None:
            object.__setattr__(self, "a", check_float(self.a, "a", owner, low=0.0, high=1.0))
        object.__setattr__(self, "min_k", check_float(self.min_k, "min_k", owner, low=0.0, high=1.0, low_open=True))
        check_choice(self.min_k_rounding, "min_k_rounding", owner, ("floor", "ceil"))


@dataclass(frozen=True, slots=True)
class CanaryAudit:
    """A certified canary audit: ``kind`` ``"one-run"`` (Steinke et al. 2023: ``canaries`` m canaries in one
    training run; default: the bundle's count if it holds canaries, else 1000) or ``"multi-run"`` (``models`` N
    training runs). ``canary``: the canary kind (default: the bundle's, else ``"dirac"``); ``score``: the canary
    score (default: ``dirac-lr`` for Dirac canaries, ``loss`` otherwise); ``analysis``: how the certified bound is
    computed (``"auto"``: fixed before the run); ``strict``: refuse (instead of warning) a multi-run audit too small
    to certify any positive epsilon."""

    kind: str = "one-run"
    canaries: int | None = None
    models: int = 200
    canary: str | None = None
    score: str | None = None
    analysis: str = "auto"
    strict: bool = False

    def __post_init__(self) -> None:
        owner = "CanaryAudit"
        check_choice(self.kind, "kind", owner, ("one-run", "multi-run"))
        if self.canaries is not None:
            object.__setattr__(self, "canaries", _count(self.canaries, "canaries", owner, 2, MAX_CANARIES))
        object.__setattr__(self, "models", _count(self.models, "models", owner, 2, MAX_MODELS))
        if self.canary is not None:
            check_choice(self.canary, "canary", owner, CANARY_KINDS)
        if self.score is not None:
            check_choice(self.score, "score", owner, CANARY_SCORES)
        check_choice(self.analysis, "analysis", owner, ANALYSES)
        check_bool(self.strict, "strict", owner)

    @property
    def name(self) -> str:
        return self.kind


@dataclass(frozen=True, slots=True)
class Execution:
    """Where shadow / reference models train: ``executor`` ``"local"`` (this process), ``"processes"`` (``workers``
    worker processes of this machine, one intra-op thread each; None: its usable cores) or ``"ray"`` (a Ray cluster
    at ``ray_address``; None: start or join the local one) or ``"auto"`` (processes when this process may use more
    than one core or ``workers`` is given, else local: :func:`dpaudit.executors.make_executor`)."""

    executor: str = "local"
    ray_address: str | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        check_choice(self.executor, "executor", "Execution", EXECUTORS)
        if self.workers is not None:
            check_int(self.workers, "workers", "Execution", low=1, high=4096)
            if self.executor not in ("processes", "auto"):
                raise ParameterError("The 'workers' parameter of Execution applies to executor='processes' only "
                                     f"(--executor processes). Got executor={self.executor!r} instead.")
        if self.ray_address is not None:
            if not isinstance(self.ray_address, str) or not self.ray_address:
                raise ParameterError("The 'ray_address' parameter of Execution must be a non-empty string or None. "
                                     f"Got {format_value(self.ray_address)} instead.")
            if self.executor != "ray":
                raise ParameterError("The 'ray_address' parameter of Execution applies to executor='ray' only "
                                     f"({worded('--executor ray', 'Execution(' + repr('ray') + ', ray_address=...)')}). "
                                     f"Got executor={self.executor!r} instead.")


#: A membership-inference attack on the released model.
MembershipSpec = Union[Threshold, Shadow, LiRA, RMIA]
#: Anything :func:`dpaudit.attack` runs.
AttackSpec = Union[Threshold, Shadow, LiRA, RMIA, Compare, CanaryAudit]
