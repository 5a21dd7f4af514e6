"""The result type of a certified audit of a method's whole training run (see :mod:`dpaudit.auditing.method_audit`).

It lives here, apart from the registry, so that each family module of this package can build it while
:mod:`dpaudit.auditing.method_audit` imports the families to register them (no import circle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from dpaudit._format import fmt_number
from dpaudit.attacks.canary import CanaryBound

__all__ = ["MethodRunAudit", "RunControl"]


@dataclass(frozen=True)
class RunControl:
    """A control audit beside a whole-run audit: the same evidence or method with the ingredient the refutation
    rests on removed (PrivateKT: each canary's first report only, no composition over rounds; FREDY: one training
    round, no FedAvg). ``bound`` is certified like the main one; a control near the per-step claim says the main
    bound comes from that ingredient."""

    name: str
    description: str
    bound: CanaryBound
    trials: int


@dataclass(frozen=True)
class MethodRunAudit:
    """A certified audit of one method's full training run.

    ``bound``: the certified bound (``kind = "certified"``) with the ideal-attack reference; ``claimed_epsilon``: the
    paper's claim at these settings (None when the paper makes none); ``accounted_epsilon``: dpaudit's accounting of
    the same run; ``trials``: canaries (one-run) or runs (multi-run) counted by the bound; ``rests_on``: what a
    refutation by this audit depends on, in words (e.g. composition over rounds, linkage of reports by client id);
    ``controls``: control audits with that ingredient removed (:class:`RunControl`)."""

    method: str
    audit: str
    bound: CanaryBound
    claimed_epsilon: float | None
    accounted_epsilon: float | None
    trials: int
    settings: Mapping[str, Any]
    elapsed_seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    rests_on: tuple[str, ...] = ()
    controls: tuple[RunControl, ...] = ()
    schema: int = 1

    __json_computed__ = ("kind", "refutes_claim", "refutes_accounting")

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

    def summary(self) -> str:
        b = self.bound
        ideal = "–" if b.ideal_epsilon is None else f"{b.ideal_epsilon:.3f}"
        claim = "none" if self.claimed_epsilon is None else fmt_number(self.claimed_epsilon, 3)
        acc = fmt_number(self.accounted_epsilon, 3)
        verdict = "REFUTED" if self.refutes_claim else "not refuted"
        lines = [f"{self.method} ({self.audit}, full run): certified epsilon >= {b.epsilon:.3f} at confidence "
                 f"{fmt_number(b.confidence)} over {self.trials} trials (ideal attack {ideal}; analysis {b.analysis}, rule: "
                 f"{b.rule or '–'}); paper's claim {claim}: {verdict}; dpaudit's accounting {acc}."]
        lines += [f"  rests on: {r}" for r in self.rests_on]
        lines += [f"  control ({c.name}: {c.description}): certified epsilon >= {c.bound.epsilon:.3f} over {c.trials} "
                  f"trials" + ("" if c.bound.ideal_epsilon is None else f" (ideal attack {c.bound.ideal_epsilon:.3f})")
                  for c in self.controls]
        return "\n".join(lines)
