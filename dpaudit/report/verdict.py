"""Per-model verdicts and attack power, computed from the structured audit only (never from free text).

A verdict is a short list of clauses, each with a stable code, joined into one line for readers:

- evidence: ``leakage_certified`` (a certified bound > 0), ``leakage_estimated`` (only single-model estimates
  > 0; worded as estimates), ``no_leakage_demonstrated`` (every figure 0; with the attacks' power on the
  non-private reference when the audit has one), ``certified_above_accounting`` (a certified bound above the
  accounted epsilon: the accounting or the implementation is wrong);
- guarantee: ``no_guarantee`` (no mechanism), ``guarantee_not_established`` (a mechanism runs but no finite bound
  covers the release, e.g. ProxyFL's distilling proxy), ``guarantee_not_meaningful`` (accounted epsilon above
  :data:`MEANINGFUL_EPSILON`), ``accounted`` (the figure, with its delta);
- utility: ``utility_near_chance`` when test accuracy is within :data:`CHANCE_MARGIN` of 1 / num_classes.

Attack power: how strong each attack is where leakage is certain, i.e. on the non-private reference model(s)
of the same audit (:func:`attack_power`). Without a reference, a "no leakage demonstrated" says little, and
the verdict says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dpaudit._format import fmt_number
from dpaudit.attacks.results import ESTIMATE_CAVEAT
from dpaudit.report.schema import AttackSummary, ModelAudit, Verdict

__all__ = ["MEANINGFUL_EPSILON", "CHANCE_MARGIN", "AttackPower", "attack_power", "near_chance", "verdict",
           "compute_verdicts", "fmt_epsilon", "fmt_empirical"]

#: Above this accounted epsilon a guarantee says nothing useful: e^10 > 22,000 is the factor by which an
#: attacker's odds may grow (a common rule of thumb: single-digit epsilons are the meaningful range).
MEANINGFUL_EPSILON = 10.0

#: Test accuracy within this margin of 1 / num_classes counts as near chance.
CHANCE_MARGIN = 0.1

#: The FPR at which attack power is stated beside the AUC.
POWER_FPR = 0.01


def fmt_epsilon(x: float) -> str:
    """An epsilon for readers: :func:`dpaudit._format.fmt_number` to 3 significant digits (∞ for infinity)."""
    return fmt_number(x, 3)


def fmt_empirical(a: AttackSummary) -> str:
    """An attack's empirical epsilon with its kind: ``≥ 1.2 (certified)`` or ``≈ 1.2 [0.7–1.6] (estimate)``."""
    if a.certified:
        return f"≥ {fmt_epsilon(a.epsilon_lower)} (certified)"
    rng = ""
    if a.epsilon_range is not None and a.num_splits > 1:
        rng = f" [{fmt_epsilon(a.epsilon_range[0])}–{fmt_epsilon(a.epsilon_range[1])}]"
    return f"≈ {fmt_epsilon(a.epsilon_lower)}{rng} (estimate)"


@dataclass(frozen=True)
class AttackPower:
    """One attack's success on the non-private reference ``model``: ``auc`` and ``tpr`` at FPR ``fpr``."""

    attack: str
    model: str
    auc: float
    tpr: float | None
    fpr: float = POWER_FPR

    def text(self) -> str:
        tpr = "" if self.tpr is None else f", TPR {self.tpr:.3g} at FPR {self.fpr:g}"
        return f"AUC {self.auc:.3f}{tpr} on {self.model}"


def attack_power(models: Sequence[ModelAudit]) -> dict[str, AttackPower]:
    """Each attack's power on the non-private reference(s) of the audit (the strongest when several)."""
    out: dict[str, AttackPower] = {}
    for m in models:
        if not m.is_reference:
            continue
        for a in m.attacks:
            p = AttackPower(a.attack, m.name, float(a.auc), a.tpr_at(POWER_FPR))
            if a.attack not in out or p.auc > out[a.attack].auc:
                out[a.attack] = p
    return out


def near_chance(m: ModelAudit) -> tuple[float, float] | None:
    """(test accuracy, chance level) when the model's test accuracy is within :data:`CHANCE_MARGIN` of
    1 / num_classes, else None (also when either is unknown)."""
    acc = m.utility.get("test_accuracy")
    if not isinstance(acc, (int, float)) or m.num_classes < 2:
        return None
    chance = 1.0 / m.num_classes
    return (float(acc), chance) if float(acc) <= chance + CHANCE_MARGIN else None


def verdict(m: ModelAudit, power: dict[str, AttackPower] | None = None) -> Verdict:
    """The verdict on ``m``; ``power`` from :func:`attack_power` over the whole audit."""
    power = power or {}
    clauses: list[tuple[str, str]] = []
    eps_theory = m.theoretical_epsilon
    certified = [a for a in m.attacks if a.certified and a.epsilon_lower > 0]
    estimated = [a for a in m.attacks if not a.certified and a.epsilon_lower > 0]
    if certified:
        best = max(certified, key=lambda a: a.epsilon_lower)
        clauses.append(("leakage_certified",
                        f"leakage demonstrated (certified): ε ≥ {fmt_epsilon(best.epsilon_lower)} by {best.attack} "
                        f"at confidence {best.confidence:g}"))
        if math.isfinite(eps_theory) and best.epsilon_lower > eps_theory + 1e-9:
            clauses.append(("certified_above_accounting",
                            f"the certified bound exceeds the accounted ε = {fmt_epsilon(eps_theory)}: the accounting "
                            "or the implementation is wrong"))
    elif estimated:
        best = max(estimated, key=lambda a: a.epsilon_lower)
        clauses.append(("leakage_estimated",
                        f"leakage indicated by an estimate only: ε {fmt_empirical(best)[:-len(' (estimate)')]} by "
                        f"{best.attack} ({ESTIMATE_CAVEAT})"))
    elif m.attacks:
        strongest = max(m.attacks, key=lambda a: a.auc)
        if m.is_reference:
            clauses.append(("no_leakage_demonstrated",
                            f"no leakage demonstrated even without a privacy mechanism (best AUC {strongest.auc:.3f} "
                            f"by {strongest.attack}): these attacks are weak on this setting"))
        else:
            ref = [power[a.attack] for a in m.attacks if a.attack in power]
            if ref:
                top = max(ref, key=lambda p: p.auc)
                clauses.append(("no_leakage_demonstrated",
                                f"no leakage demonstrated; the same attacks reach AUC {top.auc:.3f} ({top.attack}) on "
                                f"the non-private reference {top.model}"))
            else:
                clauses.append(("no_leakage_demonstrated",
                                "no leakage demonstrated; the attacks' power is unknown (no non-private reference "
                                "in this audit)"))
    if m.is_reference:
        clauses.append(("no_guarantee", "no accounted guarantee (no privacy mechanism)"))
    elif math.isinf(eps_theory):
        clauses.append(("guarantee_not_established",
                        "no finite guarantee established: a privacy mechanism runs, but its bound does not cover the "
                        "release (see the red flags)"))
    elif eps_theory > MEANINGFUL_EPSILON:
        clauses.append(("guarantee_not_meaningful",
                        f"accounted guarantee not meaningful (ε = {fmt_epsilon(eps_theory)} > {MEANINGFUL_EPSILON:g})"))
    else:
        d = m.theoretical_delta
        clauses.append(("accounted", f"accounted ε = {fmt_epsilon(eps_theory)}" + (f" at δ = {fmt_number(d)}" if d else "")))
    nc = near_chance(m)
    if nc is not None:
        clauses.append(("utility_near_chance",
                        f"utility near chance (test accuracy {nc[0]:.3f}, chance 1/{m.num_classes} = {nc[1]:.3f})"))
    return Verdict(m.name, tuple(clauses))


def compute_verdicts(models: Sequence[ModelAudit]) -> list[Verdict]:
    """The verdict on every model of an audit (attack power taken from its non-private references)."""
    power = attack_power(models)
    return [verdict(m, power) for m in models]
