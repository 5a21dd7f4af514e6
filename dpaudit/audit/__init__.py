"""Audit orchestration: the audit runner and its stages, the release->attack join, claims files and their
evaluation (``dpaudit check``). Everything above the attack, training and report layers lives here.

The package namespace holds the claims API, which imports no torch (``dpaudit check`` starts fast); the audit
runner is :mod:`dpaudit.audit.runner` and the release->attack join :mod:`dpaudit.audit.attack_release`."""

from dpaudit.audit.claims import (
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
from dpaudit.audit.evaluate import (
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

import sys as _sys
import types as _types


class _AuditPackage(_types.ModuleType):
    """``dpaudit.audit`` is this package and, called, :func:`dpaudit.api.audit`: once any of its modules is imported,
    Python binds the package to the name ``dpaudit.audit``, so the package itself keeps the promise that
    ``dpaudit.audit(config, out, ...)`` runs an audit."""

    def __call__(self, *args, **kwargs):
        from dpaudit.api import audit

        return audit(*args, **kwargs)


_sys.modules[__name__].__class__ = _AuditPackage

__all__ = [
    "ATTACK_KINDS", "GRANULARITIES", "MECHANISMS", "AttackBudget", "Claim", "ClaimsFile", "LedgerSubject",
    "MechanismSubject", "ReleaseSubject", "load_claims", "parse_claims", "AttackRunner", "ClaimResult",
    "ClaimsReport", "EmpiricalBound", "account_mechanism", "check_claims", "evaluate_claim", "evaluate_claims",
    "gaussian_mechanism_epsilon", "write_junit",
]
