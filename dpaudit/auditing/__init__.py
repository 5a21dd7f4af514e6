"""Audit orchestration: the audit runner and its stages, the release->attack join, claims files and their
evaluation (``dpaudit check``). Everything above the attack, training and report layers lives here.

The package namespace holds the claims API, which imports no torch (``dpaudit check`` starts fast); the audit
runner is :mod:`dpaudit.auditing.runner` and the release->attack join :mod:`dpaudit.auditing.attack_release`."""

from dpaudit.auditing.claims import (
    ATTACK_KINDS,
    GRANULARITIES,
    MECHANISMS,
    AttackBudget,
    Claim,
    ClaimsFile,
    LedgerSubject,
    MechanismSubject,
    ReleaseSubject,
    load_claims,
    parse_claims,
)
from dpaudit.auditing.evaluate import (
    AttackRunner,
    ClaimResult,
    ClaimsReport,
    EmpiricalBound,
    account_mechanism,
    check_claims,
    evaluate_claim,
    evaluate_claims,
    gaussian_mechanism_epsilon,
    write_junit,
)

__all__ = [
    "ATTACK_KINDS", "GRANULARITIES", "MECHANISMS", "AttackBudget", "Claim", "ClaimsFile", "LedgerSubject",
    "MechanismSubject", "ReleaseSubject", "load_claims", "parse_claims", "AttackRunner", "ClaimResult",
    "ClaimsReport", "EmpiricalBound", "account_mechanism", "check_claims", "evaluate_claim", "evaluate_claims",
    "gaussian_mechanism_epsilon", "write_junit",
]
