"""Privacy claims for CI: claims files (:mod:`~dpaudit.claims.claims`) and their evaluation
(:mod:`~dpaudit.claims.evaluate`), behind ``dpaudit check``. The pytest helpers are in :mod:`dpaudit.testing`."""

from dpaudit.claims.claims import (  # noqa: F401
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
from dpaudit.claims.evaluate import (  # noqa: F401
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
