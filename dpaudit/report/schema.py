"""The typed content of an audit report (``report.json``, schema ``dpaudit.report/2``).

A report is a list of audited models; each holds its utility, its theoretical epsilon (the accountant's
statement, with assumptions), each attack's metrics with an empirical epsilon that says whether it is a
certified lower bound or an estimate (``epsilon_kind``), and the blind baseline. Red flags
(:mod:`dpaudit.report.flags`) and per-model verdicts (:mod:`dpaudit.report.verdict`) are derived from these,
never typed by hand.

Schema 2 added ``epsilon_kind``, ``epsilon_range``, ``num_splits``, ``roc_band`` (attacks), ``num_classes``
(models) and ``verdicts``; schema-1 files are still read (their bounds were single-model estimates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from dpaudit._io import json_number as _f, parse_json_number as _uf
from dpaudit.attacks.results import CERTIFIED, ESTIMATE, check_bound_kind

__all__ = ["SCHEMA", "AttackSummary", "ModelAudit", "Flag", "Verdict", "AuditReport"]

SCHEMA = "dpaudit.report/2"
_READABLE = ("dpaudit.report/1", SCHEMA)


@dataclass(frozen=True)
class AttackSummary:
    """One attack on one model. Scores point the usual way: larger = more likely member.

    ``epsilon_lower`` is the empirical epsilon at ``confidence`` (for the stated ``delta``), with an honest
    threshold choice; 0 means no evidence of leakage. ``epsilon_kind`` says what it is: ``"certified"`` (a lower
    bound on the model's true epsilon holding with probability ``confidence``) or ``"estimate"`` (the same
    formula where its independence assumption fails: one model's records); for estimates ``epsilon_range``
    is the (smallest, largest) figure over ``num_splits`` split seeds. ``blind_*`` are the same figures for
    an attack that never queries the model: leakage claimed by the attack should be judged against it.
    ``roc_band`` holds ``fpr``/``low``/``high`` lists: the bootstrap band of the ROC from FPR 1/n up.
    ``epsilon_credible`` = (posterior median, low, high): the Bayesian credible interval of the estimate's epsilon
    (Zanella-Beguelin et al. 2023), beside the split-seed range; ``tpr_ci`` the bootstrap interval of each
    ``tpr_at_fpr`` entry (same keys).
    """

    attack: str
    auc: float
    tpr_at_fpr: Mapping[str, float]
    accuracy: float
    precision: float
    recall: float
    f1: float
    epsilon_lower: float
    confidence: float
    delta: float
    blind_auc: float
    blind_epsilon_lower: float
    auc_ci: tuple[float, float] | None = None
    roc_fpr: tuple[float, ...] = ()
    roc_tpr: tuple[float, ...] = ()
    num_members: int = 0
    num_nonmembers: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)
    epsilon_kind: str = ESTIMATE
    epsilon_range: tuple[float, float] | None = None
    num_splits: int = 1
    roc_band: Mapping[str, tuple[float, ...]] | None = None
    epsilon_credible: tuple[float, float, float] | None = None
    tpr_ci: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_bound_kind(self.epsilon_kind, "AttackSummary")

    @property
    def certified(self) -> bool:
        return self.epsilon_kind == CERTIFIED

    def tpr_at(self, fpr: float) -> float | None:
        """TPR at FPR ``fpr`` when it was computed, else None."""
        for k, v in self.tpr_at_fpr.items():
            if math.isclose(float(k), fpr):
                return float(v)
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "auc": self.auc,
            "auc_ci": list(self.auc_ci) if self.auc_ci else None,
            "tpr_at_fpr": dict(self.tpr_at_fpr),
            "accuracy": self.accuracy,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "epsilon_lower": _f(self.epsilon_lower),
            "epsilon_kind": self.epsilon_kind,
            "epsilon_range": None if self.epsilon_range is None else [_f(x) for x in self.epsilon_range],
            "num_splits": self.num_splits,
            "confidence": self.confidence,
            "delta": self.delta,
            "blind_auc": self.blind_auc,
            "blind_epsilon_lower": _f(self.blind_epsilon_lower),
            "num_members": self.num_members,
            "num_nonmembers": self.num_nonmembers,
            "roc": {"fpr": list(self.roc_fpr), "tpr": list(self.roc_tpr)},
            "roc_band": None if self.roc_band is None else {k: list(v) for k, v in self.roc_band.items()},
            "details": dict(self.details),
            "epsilon_credible": None if self.epsilon_credible is None else [_f(x) for x in self.epsilon_credible],
            "tpr_ci": {k: list(v) for k, v in self.tpr_ci.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AttackSummary":
        roc = d.get("roc") or {}
        return cls(
            attack=d["attack"], auc=d["auc"], tpr_at_fpr=dict(d["tpr_at_fpr"]), accuracy=d["accuracy"],
            precision=d["precision"], recall=d["recall"], f1=d["f1"], epsilon_lower=_uf(d["epsilon_lower"]),
            confidence=d["confidence"], delta=d["delta"], blind_auc=d["blind_auc"],
            blind_epsilon_lower=_uf(d["blind_epsilon_lower"]),
            auc_ci=tuple(d["auc_ci"]) if d.get("auc_ci") else None,
            roc_fpr=tuple(roc.get("fpr", ())), roc_tpr=tuple(roc.get("tpr", ())),
            num_members=d.get("num_members", 0), num_nonmembers=d.get("num_nonmembers", 0),
            details=dict(d.get("details", {})), epsilon_kind=d.get("epsilon_kind", ESTIMATE),
            epsilon_range=tuple(_uf(x) for x in d["epsilon_range"]) if d.get("epsilon_range") else None,  # type: ignore[arg-type]
            num_splits=int(d.get("num_splits", 1)),
            roc_band={k: tuple(v) for k, v in d["roc_band"].items()} if d.get("roc_band") else None,
            epsilon_credible=tuple(_uf(x) for x in d["epsilon_credible"]) if d.get("epsilon_credible") else None,  # type: ignore[arg-type]
            tpr_ci={k: tuple(v) for k, v in dict(d.get("tpr_ci") or {}).items()},
        )


@dataclass(frozen=True)
class ModelAudit:
    """One audited model: a release, its accounted guarantee and the attacks on it.

    ``theoretical`` is an :class:`~dpaudit.accountants.statement.AccountingResult` as a dict, or ``None``
    for a model trained without any privacy mechanism (theoretical epsilon = infinity).
    ``noise`` is the privacy knob of the run (e.g. the Laplace parameter gamma) for the privacy-utility curve.
    """

    name: str
    method: str
    release: str
    utility: Mapping[str, float]
    theoretical: Mapping[str, Any] | None
    attacks: tuple[AttackSummary, ...]
    noise: float | None = None
    noise_label: str = ""
    claim: Mapping[str, Any] | None = None
    per_party_epsilon: Mapping[str, float] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    num_train: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)
    release_flags: tuple[tuple[str, str], ...] = ()
    num_classes: int = 0

    @property
    def theoretical_epsilon(self) -> float:
        if self.theoretical is None:
            return math.inf
        return float(_uf(self.theoretical["epsilon"]))

    @property
    def theoretical_delta(self) -> float | None:
        return None if self.theoretical is None else float(self.theoretical["delta"])

    @property
    def best_empirical(self) -> AttackSummary | None:
        """The attack with the strongest empirical evidence of leakage: certified bounds before estimates, then
        the largest epsilon (ties broken by AUC); ``None`` when no attack found any (every figure 0)."""
        found = [a for a in self.attacks if a.epsilon_lower > 0]
        return max(found, key=lambda a: (a.certified, a.epsilon_lower, a.auc), default=None)

    @property
    def strongest_attack(self) -> AttackSummary | None:
        """The attack with the largest AUC: the one AUC figure every output quotes for this model."""
        return max(self.attacks, key=lambda a: (a.auc, a.epsilon_lower), default=None)

    @property
    def is_reference(self) -> bool:
        """A model trained without a privacy mechanism: the reference that shows what the attacks can do."""
        return self.theoretical is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "release": self.release,
            "noise": self.noise,
            "noise_label": self.noise_label,
            "params": dict(self.params),
            "num_train": self.num_train,
            "utility": dict(self.utility),
            "theoretical_epsilon": _f(self.theoretical_epsilon),
            "theoretical": dict(self.theoretical) if self.theoretical is not None else None,
            "claim": dict(self.claim) if self.claim else None,
            "per_party_epsilon": {k: _f(v) for k, v in self.per_party_epsilon.items()},
            "assumptions": list(self.assumptions),
            "attacks": [a.to_dict() for a in self.attacks],
            "release_flags": [{"code": c, "message": m} for c, m in self.release_flags],
            "num_classes": self.num_classes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelAudit":
        return cls(
            name=d["name"], method=d["method"], release=d["release"], utility=dict(d["utility"]),
            theoretical=d.get("theoretical"), attacks=tuple(AttackSummary.from_dict(a) for a in d["attacks"]),
            noise=d.get("noise"), noise_label=d.get("noise_label", ""), claim=d.get("claim"),
            per_party_epsilon={k: _uf(v) for k, v in dict(d.get("per_party_epsilon", {})).items()},
            assumptions=tuple(d.get("assumptions", ())), num_train=d.get("num_train", 0), params=dict(d.get("params", {})),
            release_flags=tuple((f["code"], f["message"]) for f in d.get("release_flags", ())),
            num_classes=int(d.get("num_classes", 0)),
        )


@dataclass(frozen=True)
class Verdict:
    """The one-line verdict on a model: ``clauses`` are ``(code, text)`` pairs computed from the structured
    audit by :func:`dpaudit.report.verdict.verdict` (codes are stable, texts are for readers)."""

    model: str
    clauses: tuple[tuple[str, str], ...]

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.clauses)

    @property
    def text(self) -> str:
        return "; ".join(t for _, t in self.clauses)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "text": self.text,
                "clauses": [{"code": c, "text": t} for c, t in self.clauses]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Verdict":
        return cls(d["model"], tuple((c["code"], c["text"]) for c in d.get("clauses", ())))


@dataclass(frozen=True)
class Flag:
    """Something a reader must not miss. ``severity``: "red" (the claim or the code is wrong or unsupported),
    "warning" (the figure holds only under an assumption that is doubtful here), "info"."""

    severity: str
    code: str
    model: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "code": self.code, "model": self.model, "message": self.message}

    @classmethod
    def from_dict(cls, d: Mapping[str, str]) -> "Flag":
        return cls(d["severity"], d["code"], d["model"], d["message"])


@dataclass(frozen=True)
class AuditReport:
    title: str
    seed: int
    dataset: Mapping[str, Any]
    models: tuple[ModelAudit, ...]
    flags: tuple[Flag, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    created_by: str = ""
    elapsed_seconds: float | None = None
    schema: str = SCHEMA
    verdicts: tuple[Verdict, ...] = ()
    certified: tuple[Mapping[str, Any], ...] = ()  # certified canary audits (CanaryAuditResult.to_dict())
    method_audits: tuple[Mapping[str, Any], ...] = ()  # certified audits of methods' whole runs (MethodRunAudit.to_dict())
    settings: Mapping[str, Any] = field(default_factory=dict)  # how the run ran, e.g. {"threads": ThreadSetting.to_dict()}

    def verdict_for(self, model: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.model == model), None)

    def to_dict(self) -> dict[str, Any]:
        extra = {"certified_audits": [dict(c) for c in self.certified]} if self.certified else {}
        if self.method_audits:
            extra["method_audits"] = [dict(c) for c in self.method_audits]
        return {
            "schema": self.schema,
            "title": self.title,
            "created_by": self.created_by,
            "seed": self.seed,
            "elapsed_seconds": self.elapsed_seconds,
            "settings": dict(self.settings),
            "dataset": dict(self.dataset),
            "config": dict(self.config),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "flags": [f.to_dict() for f in self.flags],
            "models": [m.to_dict() for m in self.models],
            **extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AuditReport":
        if d.get("schema") not in _READABLE:
            from dpaudit.errors import DataError

            raise DataError(f"report.json has schema {d.get('schema')!r}; this dpaudit reads {', '.join(_READABLE)}.")
        return cls(
            title=d["title"], seed=d["seed"], dataset=dict(d["dataset"]),
            models=tuple(ModelAudit.from_dict(m) for m in d["models"]),
            flags=tuple(Flag.from_dict(f) for f in d.get("flags", ())), config=dict(d.get("config", {})),
            created_by=d.get("created_by", ""), elapsed_seconds=d.get("elapsed_seconds"), schema=d["schema"],
            verdicts=tuple(Verdict.from_dict(v) for v in d.get("verdicts", ())),
            certified=tuple(dict(c) for c in d.get("certified_audits", ())),
            method_audits=tuple(dict(c) for c in d.get("method_audits", ())),
            settings=dict(d.get("settings") or {}),
        )
