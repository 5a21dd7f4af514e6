"""Red flags: the things a report must say in words a reader cannot miss.

Each rule reads only the typed audit (statements, assumptions, attack bounds), never free text typed
for the occasion, so a flag appears whenever its condition holds.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from dpaudit._format import fmt_number
from dpaudit.attacks.results import ESTIMATE_CAVEAT
from dpaudit.report.schema import Flag, ModelAudit, headline_statement
from dpaudit.report.verdict import CHANCE_MARGIN, fmt_epsilon, near_chance

__all__ = ["compute_flags", "method_audit_flags", "RELEASE_FLAG_SEVERITY"]

#: Severity of the machine-readable flags a method attaches to its release (release.json "flags";
#: codes in dpaudit.training.release.FLAG_CODES). An unknown code is shown as a warning.
RELEASE_FLAG_SEVERITY = {
    "teachers_not_independent": "red",
    "composition_ignored_by_claim": "red",
    # ProxyFL/FML: the proxy's DP-SGD loss distils from a private model trained without DP on the same records, so
    # the DP-SGD bound does not cover the released proxy (like FREDY's teachers: the claim's assumption fails)
    "distillation_not_accounted": "red",
    # outside releases (dpaudit release make): Opacus accounted a non-Poisson loader as Poisson; the claim's
    # granularity is not what the accounting covers
    "sampling_not_poisson": "red",
    "granularity_not_covered": "red",
    # Opacus with fixed-size batches: dpaudit accounts the batches; Opacus's own (Poisson) figure is not a guarantee
    "opacus_epsilon_assumes_poisson": "warning",
    # a best-of-K release (hyper-parameter search) whose claim accounts fewer runs than were tried
    "tuning_not_accounted": "red",
    # a Flower run: Flower's own accountant's figure lies below dpaudit's certified lower bound (it understates)
    "flower_epsilon_below_lower_bound": "red",
}


def _statements(m: ModelAudit) -> list[dict]:
    if m.theoretical is None:
        return []
    return list(m.theoretical.get("statements", [])) or [headline_statement(m.theoretical)]


def compute_flags(models: Iterable[ModelAudit]) -> list[Flag]:
    flags: list[Flag] = []
    for m in models:
        eps_theory = m.theoretical_epsilon
        head = headline_statement(m.theoretical)
        # 1. empirical epsilon above the theoretical epsilon: a bug in the accountant, the mechanism or the attack
        #    (red only on certified evidence; an estimate above the accounting is a warning)
        for a in m.attacks:
            if math.isfinite(eps_theory) and a.epsilon_lower > eps_theory + 1e-9:
                if a.certified:
                    flags.append(Flag(
                        "red", "empirical_exceeds_theory", m.name,
                        f"The {a.attack} attack certifies epsilon >= {fmt_epsilon(a.epsilon_lower)} (confidence {fmt_number(a.confidence)}) "
                        f"but the accountant claims epsilon = {fmt_epsilon(eps_theory)}. One of them is wrong: either the mechanism "
                        "as implemented is not the one that was accounted (noise too small, clipping missing, sensitivity "
                        "underestimated), or the accounting assumptions do not hold for this release, or the attack's "
                        "evaluation split is not a fair member/non-member split (compare with the blind baseline).",
                    ))
                else:
                    flags.append(Flag(
                        "warning", "estimate_exceeds_theory", m.name,
                        f"The {a.attack} attack's estimate, epsilon ~ {fmt_epsilon(a.epsilon_lower)}, is above the accounted "
                        f"epsilon = {fmt_epsilon(eps_theory)} ({ESTIMATE_CAVEAT}). Not proof of a bug; a certified canary audit "
                        "of this release would settle it.",
                    ))
            if a.blind_epsilon_lower > 0 or a.blind_auc > 0.55:
                flags.append(Flag(
                    "warning", "blind_baseline_leaks", m.name,
                    f"The blind baseline (never queries the model) reaches AUC {a.blind_auc:.3f} / epsilon >= "
                    f"{fmt_epsilon(a.blind_epsilon_lower)} for {a.attack}: members and non-members are distinguishable without "
                    "the model, so part of the measured leakage may be a distribution mismatch.",
                ))
        # 2. data-dependent epsilon that is not itself private
        if head.get("data_dependent"):
            flags.append(Flag(
                "red", "data_dependent_epsilon", m.name,
                f"The headline epsilon ({fmt_epsilon(eps_theory)}) is data-dependent: it is computed from the private vote "
                "histograms and is not itself differentially private. Publishing it leaks information unless it is "
                "released through smooth sensitivity; the data-independent figure is the one that can be published.",
            ))
        # 3. what the method itself says its claim rests on and breaks (structured flags in the release)
        for code, message in m.release_flags:
            flags.append(Flag(RELEASE_FLAG_SEVERITY.get(code, "warning"), code, m.name, message))
        # 4. rounds whose composition the claim ignored
        claim = m.claim or {}
        c_eps = claim.get("epsilon")
        if isinstance(c_eps, (int, float)) and math.isfinite(eps_theory) and eps_theory > float(c_eps) * (1 + 1e-9):
            flags.append(Flag(
                "red", "claim_below_accounting", m.name,
                f"The release claims epsilon = {fmt_epsilon(float(c_eps))} ({claim.get('text', 'as stated')}), but the accounting "
                f"over everything the release did gives epsilon = {fmt_epsilon(eps_theory)}: the claim leaves out part of the "
                "mechanism (typically the composition over rounds or queries).",
            ))
        # 5. delta larger than 1/n
        d = m.theoretical_delta
        if d is not None and m.num_train > 0 and d > 1.0 / m.num_train:
            flags.append(Flag(
                "warning", "delta_above_one_over_n", m.name,
                f"delta = {fmt_number(d)} exceeds 1/n = {fmt_number(1.0 / m.num_train, 3)} (n = {m.num_train} training records): a mechanism "
                "that publishes a random record in full satisfies such a guarantee.",
            ))
        # 6. a model whose utility is near chance (a private model that learned nothing is trivially private)
        nc = near_chance(m)
        if nc is not None:
            flags.append(Flag(
                "warning", "utility_near_chance", m.name,
                f"Test accuracy {nc[0]:.3f} is within {CHANCE_MARGIN:g} of chance (1/{m.num_classes} = {nc[1]:.3f}): the "
                "model learned little, so its privacy says little about the method at a useful operating point.",
            ))
        # 7. a model with no guarantee at all
        if m.theoretical is None:
            flags.append(Flag(
                "info", "no_guarantee", m.name,
                "This model was trained without a privacy mechanism: its theoretical epsilon is infinite. It is the "
                "reference an attack should find vulnerable.",
            ))
    return flags


def method_audit_flags(method_audits: Iterable[Mapping[str, Any]]) -> list[Flag]:
    """Red flags from certified audits of methods' whole runs: a certified bound above the paper's claim refutes the
    claim (``claim_refuted``); one above dpaudit's own accounting (``accounting_refuted``) means a bug in the method or
    the accountant. Each flag is attached to the method audit's name."""
    flags: list[Flag] = []
    for c in method_audits:
        b = c.get("bound", {})
        eps, name, method = float(b.get("epsilon", 0.0)), str(c.get("name", c.get("method"))), c.get("method")
        where = (f"the certified audit of {method}'s whole training run ({c.get('audit')}, {c.get('trials')} trials) "
                 f"shows epsilon >= {fmt_epsilon(eps)} at confidence {b.get('confidence')}")
        if c.get("refutes_accounting"):
            flags.append(Flag("red", "accounting_refuted", name,
                              f"{where}, above dpaudit's accounting of the same run ({fmt_epsilon(float(c['accounted_epsilon']))}): "
                              "the method's code or the accountant is wrong."))
        if c.get("refutes_claim"):
            flags.append(Flag("red", "claim_refuted", name,
                              f"{where}, above the paper's claimed epsilon ({fmt_epsilon(float(c['claimed_epsilon']))}): the claim "
                              "is false for this training run (certified evidence, not an estimate)."))
    return flags
