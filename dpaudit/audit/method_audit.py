"""Certified canary audits of each method's whole training run, against the paper's claim and dpaudit's accounting.

:func:`audit_method_run` runs a method's real code path (PrivateKT's round loop, the PATE family's teacher
training and noisy-max aggregation, ProxyFL's DP-SGD proxy training) with auditor-planted canaries and certifies
a lower bound on its epsilon (one-run: Steinke, Nasr, Jagielski 2023, Theorem 3; multi-run: Clopper-Pearson over
independent runs). The result says whether the bound refutes the paper's claim and how far it is from the
ideal-attack reference at the same number of trials.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from dpaudit.attacks.canary import CanaryBound
from dpaudit.errors import ParameterError, check_choice

__all__ = ["MethodRunAudit", "MethodAuditSpec", "METHOD_RUN_AUDITS", "audit_method_run", "method_run_parameters"]


@dataclass(frozen=True)
class MethodRunAudit:
    """A certified audit of one method's full training run.

    ``bound``: the certified bound (``kind = "certified"``) with the ideal-attack reference; ``claimed_epsilon``: the
    paper's claim at these settings (None when the paper makes none); ``accounted_epsilon``: dpaudit's accounting of
    the same run; ``trials``: canaries (one-run) or runs (multi-run) counted by the bound."""

    method: str
    audit: str
    bound: CanaryBound
    claimed_epsilon: float | None
    accounted_epsilon: float | None
    trials: int
    settings: Mapping[str, Any]
    elapsed_seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def kind(self) -> str:
        return self.bound.kind

    @property
    def refutes_claim(self) -> bool:
        """True when the certified bound exceeds the paper's claimed epsilon."""
        return self.claimed_epsilon is not None and self.bound.epsilon > self.claimed_epsilon

    @property
    def refutes_accounting(self) -> bool:
        """True when the certified bound exceeds dpaudit's own accounting (a bug in the method or the accountant)."""
        return self.accounted_epsilon is not None and self.bound.epsilon > self.accounted_epsilon

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, "method": self.method, "audit": self.audit, "kind": self.kind,
                "bound": self.bound.to_dict(), "claimed_epsilon": self.claimed_epsilon,
                "accounted_epsilon": self.accounted_epsilon, "refutes_claim": self.refutes_claim,
                "refutes_accounting": self.refutes_accounting, "trials": self.trials,
                "settings": dict(self.settings), "elapsed_seconds": self.elapsed_seconds, "notes": list(self.notes)}

    def summary(self) -> str:
        b = self.bound
        ideal = "–" if b.ideal_epsilon is None else f"{b.ideal_epsilon:.3f}"
        claim = "none" if self.claimed_epsilon is None else f"{self.claimed_epsilon:.3g}"
        acc = "–" if self.accounted_epsilon is None else f"{self.accounted_epsilon:.3g}"
        verdict = "REFUTED" if self.refutes_claim else "not refuted"
        return (f"{self.method} ({self.audit}, full run): certified epsilon >= {b.epsilon:.3f} at confidence "
                f"{b.confidence:g} over {self.trials} trials (ideal attack {ideal}); paper's claim {claim}: {verdict}; "
                f"dpaudit's accounting {acc}.")


# method name -> the module function that audits its run; filled in below as each family lands
METHOD_RUN_AUDITS: dict[str, Callable[..., MethodRunAudit]] = {}


def method_run_parameters(method: str) -> dict[str, Any]:
    """The audit parameters of ``method`` and their defaults (``inspect.Parameter.empty`` when required)."""
    check_choice(method, "method", "audit_method_run", tuple(METHOD_RUN_AUDITS))
    sig = inspect.signature(METHOD_RUN_AUDITS[method])
    return {n: p.default for n, p in sig.parameters.items()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and n != "progress"}


def audit_method_run(method: str, *, progress: Any = False, **params: Any) -> MethodRunAudit:
    """Run the certified audit of ``method``'s full training run (see the module docstring); ``params`` are the
    family's audit parameters (documented on each ``audit_run``; :func:`method_run_parameters` lists them).
    An unknown parameter is a :class:`~dpaudit.errors.ParameterError` naming it and the known ones."""
    known = method_run_parameters(method)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ParameterError(f"The audit of {method!r} takes the parameters {', '.join(sorted(known))}. Got unknown "
                             f"parameter(s) {', '.join(unknown)} instead.")
    return METHOD_RUN_AUDITS[method](progress=progress, **params)


@dataclass(frozen=True)
class MethodAuditSpec:
    """One ``[[method_audits]]`` entry of an audit config: ``method`` (a key of :data:`METHOD_RUN_AUDITS`), its audit
    ``params`` (checked against the method's audit parameters when the config is read) and a ``name`` (default:
    the method). The audit's seed and confidence are the audit config's."""

    method: str
    params: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        o = "method_audits"
        check_choice(self.method, "method", o, tuple(METHOD_RUN_AUDITS))
        if not isinstance(self.params, Mapping):
            raise ParameterError(f"The 'params' parameter of {o} must be a table. Got {self.params!r} instead.")
        known = method_run_parameters(self.method)
        bad = sorted(set(self.params) - set(known) | set(self.params) & {"seed", "confidence"})
        if bad:
            allowed = sorted(set(known) - {"seed", "confidence"})
            raise ParameterError(f"The 'params' table of {o} entry {self.method!r} takes {', '.join(allowed)} (seed and "
                                 f"confidence come from the audit config). Got {', '.join(bad)} instead.")
        name = self.name or self.method
        if not isinstance(name, str) or "/" in name:
            raise ParameterError(f"The 'name' parameter of {o} must be a string without '/'. Got {name!r} instead.")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", dict(self.params))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "method": self.method, "params": dict(self.params)}
