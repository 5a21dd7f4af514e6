"""dpaudit: what privacy does a released model really have?

Two answers side by side: the *theoretical* epsilon from the accountants (:mod:`dpaudit.accountants`) and an
*empirical* lower bound from attacks (:mod:`dpaudit.attacks`), each empirical figure *certified* (canaries included
by coin flips, independent trials) or an *estimate* (one model's records).

The entry points are the library calls the command line makes, each returning a typed, frozen result:

- ``dpaudit.account(mechanism, **params)`` -> ``AccountingResult``: ``dpaudit account`` (``epsilon``, the headline
  ``statement`` and every valid route in ``statements``, each with its assumptions);
- ``dpaudit.attack(release, dpaudit.RMIA(references=16, offline=True), per_record=True)`` -> ``AttackReport``
  (typed specs, :mod:`dpaudit.specs`: ``Threshold``, ``Shadow``, ``LiRA``, ``RMIA``; ``Compare`` ->
  ``AttackComparison``; ``CanaryAudit("one-run", canaries=1000)`` -> ``CanaryAuditResult``; ``Execution("ray")``;
  the code a bundle names runs only as ``code=dpaudit.BundleCode(...)`` allows): ``dpaudit attack``;
- ``dpaudit.audit(config=None, out="runs/audit", ...)`` -> ``AuditReport``: ``dpaudit audit``;
- ``dpaudit.check(claims_toml, junit=None)`` -> ``ClaimsReport`` (``verdict``: HOLDS / UNPROVEN / REFUTED,
  ``exit_code``): ``dpaudit check``;
- ``dpaudit.audit_trainer("train.py:train", claim=["epsilon=2", "delta=1e-5"])`` -> ``TrainerAuditResult``: your
  own DP-SGD training function audited white-box (``dpaudit audit-trainer``);
- ``dpaudit.release.make(out, claim=[...], model=..., ...)`` -> ``Release``: ``dpaudit release make``;
  ``dpaudit.Release.load(path)`` reads a bundle;
- ``dpaudit.to_dict(result)`` / ``dpaudit.from_dict(Type, data)``: the one serialiser (JSON-ready values and back;
  the files' JSON Schemas are in ``dpaudit/schemas/``).

Example (runs in a second)::

    >>> import dpaudit
    >>> r = dpaudit.account("dpsgd", dataset_size=60000, batch_size=150, noise_multiplier=1.3, epochs=15, delta=1e-5)
    >>> print(f"epsilon = {r.epsilon:.4f} at delta = {r.delta:g} ({r.statement.method})")
    epsilon = 0.6401 at delta = 1e-05 (pld)
    >>> dpaudit.to_dict(r)["statement"]["method"]
    'pld'

More in ``examples/python/`` (account a DP-SGD run, audit a scikit-learn model from its scores, audit an Opacus
run end to end, check a claim in pytest). Heavy layers (torch, training) load only when a function needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

from dpaudit._version import __version__
from dpaudit.errors import DataError, DPAuditError, OutputError, ParameterError

#: Lazily imported names: attribute -> (module, name in it; None for the module itself).
_LAZY: dict[str, tuple[str, str | None]] = {
    "account": ("dpaudit.api", "account"),
    "attack": ("dpaudit.api", "attack"),
    "audit": ("dpaudit.api", "audit"),
    "check": ("dpaudit.api", "check"),
    "audit_trainer": ("dpaudit.api", "audit_trainer"),
    "release": ("dpaudit.release", None),
    "Release": ("dpaudit.training.release", "Release"),
    "to_dict": ("dpaudit.serial", "to_dict"),
    "from_dict": ("dpaudit.serial", "from_dict"),
    "AccountingResult": ("dpaudit.accountants.statement", "AccountingResult"),
    "PrivacyStatement": ("dpaudit.accountants.statement", "PrivacyStatement"),
    "AttackReport": ("dpaudit.attacks.results", "AttackReport"),
    "AuditReport": ("dpaudit.report.schema", "AuditReport"),
    "ClaimsReport": ("dpaudit.auditing.evaluate", "ClaimsReport"),
    "CanaryAuditResult": ("dpaudit.auditing.canary_audit", "CanaryAuditResult"),
    "Threshold": ("dpaudit.specs", "Threshold"),
    "Shadow": ("dpaudit.specs", "Shadow"),
    "LiRA": ("dpaudit.specs", "LiRA"),
    "RMIA": ("dpaudit.specs", "RMIA"),
    "Compare": ("dpaudit.specs", "Compare"),
    "CanaryAudit": ("dpaudit.specs", "CanaryAudit"),
    "Execution": ("dpaudit.specs", "Execution"),
    "BundleCode": ("dpaudit.training.usercode", "BundleCode"),
}

__all__ = ["account", "attack", "audit", "check", "audit_trainer", "release", "Release", "to_dict", "from_dict",
           "AccountingResult",
           "PrivacyStatement", "AttackReport", "AuditReport", "ClaimsReport", "CanaryAuditResult", "Threshold", "Shadow",
           "LiRA", "RMIA", "Compare", "CanaryAudit", "Execution", "BundleCode", "DPAuditError",
           "ParameterError", "DataError", "OutputError", "__version__"]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'dpaudit' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value   # import once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
