"""The typed content of an audit report (``report.json``, schema ``dpaudit.report/3``).

A report is a list of audited models; each holds its utility, its theoretical epsilon (the accountant's
statement, with assumptions), each attack's metrics with an empirical epsilon that says whether it is a
certified lower bound or an estimate (``epsilon_kind``), and the blind baseline. Red flags
(:mod:`dpaudit.report.flags`) and per-model verdicts (:mod:`dpaudit.report.verdict`) are derived from these,
never typed by hand.

Schema 2 added ``epsilon_kind``, ``epsilon_range``, ``num_splits``, ``roc_band`` (attacks), ``num_classes``
(models) and ``verdicts``. Schema 3 is written by the one serialiser (:mod:`dpaudit.serial`), field for field:
an attack's ROC points are ``roc_fpr`` / ``roc_tpr`` (were ``roc: {fpr, tpr}``), release flags and verdict clauses
are ``[code, text]`` pairs (were objects), the certified canary audits are ``certified`` (was
``certified_audits``, present only when non-empty); its JSON Schema is ``dpaudit/schemas/report.json``.
:func:`read_report` reads schemas 1-3 (schema-1 bounds were single-model estimates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from dpaudit.attacks.results import CERTIFIED, ESTIMATE, check_bound_kind
from dpaudit.errors import DataError
from dpaudit.serial import JsonUpgrade, JsonValue, from_dict, parse_json_number as _uf

__all__ = ["SCHEMA", "READABLE_SCHEMAS", "AttackSummary", "ModelAudit", "Flag", "Verdict", "AuditReport", "read_report",
           "headline_statement"]

SCHEMA = "dpaudit.report/3"
READABLE_SCHEMAS = ("dpaudit.report/1", "dpaudit.report/2", SCHEMA)


def headline_statement(accounting: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The headline statement of an accounting result as written in a file (``{}`` for None): its ``statement``
    (files of the one serialiser), or ``statements[headline]``, or the ``headline`` object of older files."""
    if not accounting:
        return {}
    if isinstance(accounting.get("statement"), Mapping):
        return accounting["statement"]
    head = accounting.get("headline")
    if isinstance(head, Mapping):
        return head
    statements = list(accounting.get("statements") or ())
    return statements[head] if isinstance(head, int) and 0 <= head < len(statements) else {}


@dataclass(frozen=True)
class AttackSummary(JsonUpgrade):
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

    @classmethod
    def __json_upgrade__(cls, d: Any) -> Any:
        """Schemas 1-2: the ROC points were ``roc: {fpr, tpr}``."""
        if isinstance(d, Mapping) and "roc" in d and "roc_fpr" not in d:
            d = dict(d)
            roc = d.pop("roc") or {}
            d["roc_fpr"], d["roc_tpr"] = roc.get("fpr", ()), roc.get("tpr", ())
        return d


@dataclass(frozen=True)
class ModelAudit(JsonUpgrade):
    """One audited model: a release, its accounted guarantee and the attacks on it.

    ``theoretical`` is an :class:`~dpaudit.accountants.statement.AccountingResult` as a dict, or ``None``
    for a model trained without any privacy mechanism (theoretical epsilon = infinity).
    ``noise`` is the privacy knob of the run (e.g. the Laplace parameter gamma) for the privacy-utility curve.
    """

    name: str
    method: str
    release: str
    utility: Mapping[str, float]
    theoretical: Mapping[str, JsonValue] | None
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

    __json_computed__ = ("theoretical_epsilon",)

    @classmethod
    def __json_upgrade__(cls, d: Any) -> Any:
        """Schemas 1-2: release flags were ``{code, message}`` objects."""
        if isinstance(d, Mapping) and any(isinstance(f, Mapping) for f in d.get("release_flags") or ()):
            d = {**d, "release_flags": [[f["code"], f["message"]] if isinstance(f, Mapping) else f
                                        for f in d["release_flags"]]}
        return d

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


@dataclass(frozen=True)
class Verdict(JsonUpgrade):
    """The one-line verdict on a model: ``clauses`` are ``(code, text)`` pairs computed from the structured
    audit by :func:`dpaudit.report.verdict.verdict` (codes are stable, texts are for readers)."""

    model: str
    clauses: tuple[tuple[str, str], ...]

    __json_computed__ = ("text",)

    @classmethod
    def __json_upgrade__(cls, d: Any) -> Any:
        """Schemas 1-2: clauses were ``{code, text}`` objects."""
        if isinstance(d, Mapping) and any(isinstance(c, Mapping) for c in d.get("clauses") or ()):
            d = {**d, "clauses": [[c["code"], c["text"]] if isinstance(c, Mapping) else c for c in d["clauses"]]}
        return d

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.clauses)

    @property
    def text(self) -> str:
        return "; ".join(t for _, t in self.clauses)


@dataclass(frozen=True)
class Flag:
    """Something a reader must not miss. ``severity``: "red" (the claim or the code is wrong or unsupported),
    "warning" (the figure holds only under an assumption that is doubtful here), "info"."""

    severity: str
    code: str
    model: str
    message: str


@dataclass(frozen=True)
class AuditReport(JsonUpgrade):
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
    certified: tuple[Mapping[str, Any], ...] = ()  # certified canary audits (CanaryAuditResult, as written)
    method_audits: tuple[Mapping[str, Any], ...] = ()  # certified audits of methods' whole runs (MethodRunAudit, as written)
    settings: Mapping[str, Any] = field(default_factory=dict)  # how the run ran, e.g. {"threads": to_dict(ThreadSetting)}

    def verdict_for(self, model: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.model == model), None)

    @classmethod
    def __json_upgrade__(cls, d: Any) -> Any:
        """Schemas 1-2: the canary audits were ``certified_audits``; the report now says it is schema 3."""
        if isinstance(d, Mapping) and d.get("schema") in READABLE_SCHEMAS[:-1]:
            d = dict(d)
            d["certified"] = d.pop("certified_audits", ())
            d["schema"] = SCHEMA
        return d


def read_report(data: Any, what: str = "report.json") -> AuditReport:
    """An :class:`AuditReport` from the contents of a ``report.json`` of any schema in :data:`READABLE_SCHEMAS`."""
    schema = data.get("schema") if isinstance(data, Mapping) else None
    if schema not in READABLE_SCHEMAS:
        raise DataError(f"{what} has schema {schema!r}; this dpaudit reads {', '.join(READABLE_SCHEMAS)}.")
    return from_dict(AuditReport, data, what=what)
