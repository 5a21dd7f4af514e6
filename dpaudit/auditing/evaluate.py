"""Evaluate claims: accounted epsilon (and, for releases, an attack's empirical lower bound) against each claim.

Each claim gets one of three verdicts (every reason is collected, not just the first):

**REFUTED** -- certified evidence that the claim is false: a **certified** empirical epsilon lower bound, at
the stated confidence and at a delta no smaller than the claim's, exceeds the claimed epsilon. Estimates
(``kind = "estimate"``: the single-model Clopper-Pearson figure, whose records are coupled through one model)
never refute a claim; one above the claim is reported as a warning. An ``attack.kind = "method-run"`` budget
(any subject) runs the certified audit of a method's whole training run
(:func:`dpaudit.auditing.method_audit.audit_method_run`) and compares its bound with the *claim's* epsilon (the
paper's figure inside the audit and the audit's own accounting are reported, not used for the verdict). A bound
at a smaller delta than the claim's cannot refute the claim and is reported as a warning.

**REFUTED (analytic)** -- the subject's own accounting refutes the claim: the claim's epsilon is below the certified
lower bound of an explicit pair of neighbouring datasets for the mechanism the accounting describes
(``AccountingResult.lower_bound``: the lower end of the interval ``[lower, accounted]``; a Flower run's ex-ante pair),
at a delta no smaller than the claim's and about the figure the claim is judged on (its route, data-independent;
a release at the claim's granularity). No attack is run: no valid analysis of that mechanism can give the claim
(:func:`analytic_refutation`). A ledger's pair: :meth:`~dpaudit.accountants.ledger.PrivacyLedger.lower_bound` (parties
whose events are all Poisson-subsampled Gaussians; other parties have none).

**UNPROVEN** -- no certified evidence against the claim, but the accounting cannot show it:

1. the accounted epsilon exceeds the claimed epsilon (no tolerance: accountants round up). An accounted
   epsilon is an upper bound, so this says the guarantee is not established, not that the claim is false;
2. the accounted delta exceeds the claimed delta (a guarantee at a larger delta does not support the claim;
   a smaller one does, with the same epsilon). Mechanism subjects are accounted *at* the claimed delta;
3. the subject states a different granularity than the claim (a release's ``claim.granularity``): the figures
   are about different neighbouring relations, so the claim is unsupported;
4. the figure is data-dependent (a function of the private data, not itself DP: PATE / GNMax accounted on the
   votes) and the claim does not set ``allow_data_dependent = true`` (the default is false: such a figure alone
   never makes a claim HOLD). The claim is then judged on the smallest data-independent route of the same result,
   when there is one (said in a warning), and UNPROVEN, with the reason, when only the data-dependent figure is
   within it.

**HOLDS** -- the accounting shows the claim and no certified evidence contradicts it.

A refuted claim is REFUTED whatever its accounting says. ``dpaudit check`` exits with the worst verdict's code
(:data:`EXIT_CODES`: 0 HOLDS, 3 UNPROVEN, 1 REFUTED).

Problems that can be seen in the claims file alone (unknown keys, bad values, a granularity the mechanism's
accounting cannot cover, unknown mechanism parameters) are usage errors (:class:`~dpaudit.errors.ParameterError`),
as are missing or malformed subject files (:class:`~dpaudit.errors.DataError`): ``dpaudit check`` exits 2.
"""

from __future__ import annotations

import math
import time
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from dpaudit._escape import console_text, xml_text
from dpaudit._format import fmt_number, table_text
from dpaudit._io import read_json, write_text
from dpaudit.accountants import mechanisms
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.accountants.pate import load_votes
from dpaudit.accountants.statement import ROUTE_DATA_DEPENDENT, AccountingResult, LowerBound, PrivacyStatement
from dpaudit.auditing.claims import (
    AttackBudget,
    Claim,
    ClaimsFile,
    CanaryAuditSubject,
    LedgerSubject,
    MechanismSubject,
    ReleaseSubject,
    load_claims,
)
from dpaudit.errors import DataError, DPAuditError, ParameterError, check_path
from dpaudit.executors import LocalExecutor
from dpaudit.progress import Reporter, as_reporter
from dpaudit._io import json_number as _num, parse_json_number as _unnum
from dpaudit.serial import from_dict
from dpaudit.attacks.results import ESTIMATE, ESTIMATE_CAVEAT, HasBoundKind

__all__ = [
    "HOLDS",
    "UNPROVEN",
    "REFUTED",
    "VERDICTS",
    "EXIT_CODES",
    "VERDICT_MEANINGS",
    "EmpiricalBound",
    "AttackRunner",
    "ClaimResult",
    "ClaimError",
    "ClaimsReport",
    "ClaimsIncomplete",
    "account_mechanism",
    "gaussian_mechanism_epsilon",
    "evaluate_claim",
    "evaluate_claims",
    "check_claims",
    "write_junit",
    "default_attack_runner",
    "method_run_bound",
    "analytic_refutation",
    "release_lower_bound",
]


#: The verdicts, best first.
HOLDS, UNPROVEN, REFUTED = "HOLDS", "UNPROVEN", "REFUTED"
VERDICTS: tuple[str, ...] = (HOLDS, UNPROVEN, REFUTED)

#: ``dpaudit check``'s exit status for a report whose worst verdict is the key (2 is kept for usage errors):
#: any non-zero status fails a CI job; a job that tolerates unproven claims but not refuted ones can accept 3.
EXIT_CODES: dict[str, int] = {HOLDS: 0, REFUTED: 1, UNPROVEN: 3}

#: One line per verdict, for readers (the console legend, JUnit).
VERDICT_MEANINGS: dict[str, str] = {
    HOLDS: "the accounting shows the claim and no certified evidence contradicts it",
    UNPROVEN: "the accounting cannot show the claim (its epsilon, delta or granularity does not support it); "
              "no certified evidence says the claim is false",
    REFUTED: "certified evidence is above the claimed epsilon: an empirical lower bound at the stated confidence, or "
             "(analytic) the certified lower bound of an explicit pair for the accounted mechanism: the claim is false",
}


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmpiricalBound(HasBoundKind):
    """An attack's empirical epsilon. ``kind == "certified"``: with probability >= ``confidence`` the release is
    not (eps', ``delta``)-DP for any eps' < ``epsilon_lower_bound``, and a claim below it fails.
    ``kind == "estimate"`` (the default; see :data:`dpaudit.attacks.results.BOUND_KINDS`): the same formula where
    its independence assumption fails; it is reported, as a warning when above the claim, and never fails one."""

    attack: str
    epsilon_lower_bound: float
    confidence: float
    delta: float
    details: Mapping[str, Any] = field(default_factory=dict)
    kind: str = ESTIMATE

    def describe(self) -> str:
        """``epsilon >= 1.2 (certified, threshold, confidence 0.95)`` or ``epsilon ~ 1.2 (estimate, ...)``."""
        rel = ">=" if self.certified else "~"
        rng = self.details.get("split_range")
        spread = f", range {rng[0]:.3g}-{rng[1]:.3g} over split seeds" if rng and not self.certified else ""
        trials = self.details.get("trials")
        ideal = self.details.get("ideal_epsilon")
        extra = "" if trials is None else f", {trials} trials"
        extra += "" if ideal is None else f", ideal attack {fmt_number(_unnum(ideal))}"
        return (f"epsilon {rel} {fmt_number(self.epsilon_lower_bound)} ({self.kind}, {self.attack}, confidence "
                f"{fmt_number(self.confidence)}{extra}{spread})")


#: ``runner(release_dir, budget, delta) -> EmpiricalBound``: runs ``budget.kind`` against the release.
AttackRunner = Callable[[Path, AttackBudget, float], EmpiricalBound]


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The verdict on one claim, with every number that went into it.

    ``refuted_by``: the certified evidence above the claim (non-empty: REFUTED); ``unproven_because``: why the
    accounting cannot show the claim (non-empty and nothing refutes it: UNPROVEN); both empty: HOLDS."""

    name: str
    subject: str
    claimed_epsilon: float
    claimed_delta: float
    granularity: str
    refuted_by: tuple[str, ...]
    unproven_because: tuple[str, ...]
    accounted: PrivacyStatement
    empirical: EmpiricalBound | None = None
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0

    __json_computed__ = ("verdict", "held")

    @property
    def verdict(self) -> str:
        """REFUTED, UNPROVEN or HOLDS (:data:`VERDICTS`)."""
        return REFUTED if self.refuted_by else (UNPROVEN if self.unproven_because else HOLDS)

    @property
    def held(self) -> bool:
        return self.verdict == HOLDS

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason the claim does not hold: the refuting evidence first."""
        return self.refuted_by + self.unproven_because

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "accounted epsilon within the claim"

    def message(self) -> str:
        """Every number in one paragraph (JUnit failure text, logs)."""
        a = self.accounted
        text = (
            f"claim {self.name!r} ({self.subject}): claimed epsilon={fmt_number(self.claimed_epsilon)}, delta={fmt_number(self.claimed_delta)}, "
            f"granularity={self.granularity}; accounted epsilon={a.epsilon:.6g} at delta={fmt_number(a.delta)} ({a.method}"
            f"{', order ' + format(a.order, 'g') if a.order is not None else ''}"
            f"{', DATA-DEPENDENT' if a.data_dependent else ''})"
        )
        if self.empirical is not None:
            text += f"; empirical {self.empirical.describe()}"
        text += f". Verdict: {self.verdict} ({VERDICT_MEANINGS[self.verdict]}): {self.reason}."
        if a.assumptions:
            text += " Assumptions: " + " ".join(a.assumptions)
        if self.warnings:
            text += " Warnings: " + " ".join(self.warnings)
        return text


@dataclass(frozen=True, slots=True)
class ClaimError:
    """A claim that could not be evaluated (a missing or malformed subject file, a route its subject does not
    support, ...): ``error`` is the one-line message ``dpaudit check`` prints. It has no verdict; JUnit records it
    as an ``<error>`` test case."""

    name: str
    subject: str
    error: str
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ClaimsReport:
    """The verdicts on every claim of a claims file; :attr:`verdict` is the worst of them and :attr:`exit_code`
    its exit status (:data:`EXIT_CODES`; 2 when a claim could not be evaluated, listed in ``errors``)."""

    path: str | None
    results: tuple[ClaimResult, ...]
    errors: tuple[ClaimError, ...] = ()

    __json_computed__ = ("verdict", "exit_code", "counts", "passed")

    @property
    def passed(self) -> bool:
        return all(r.held for r in self.results) and not self.errors

    @property
    def failures(self) -> tuple[ClaimResult, ...]:
        """The claims that do not hold (REFUTED or UNPROVEN)."""
        return tuple(r for r in self.results if not r.held)

    @property
    def verdict(self) -> str:
        """The worst verdict: REFUTED when any claim is refuted, else UNPROVEN when any is unproven, else HOLDS."""
        found = {r.verdict for r in self.results}
        return next((v for v in reversed(VERDICTS) if v in found), HOLDS)

    @property
    def counts(self) -> dict[str, int]:
        """Claims per verdict (every verdict listed, HOLDS first)."""
        return {v: sum(r.verdict == v for r in self.results) for v in VERDICTS}

    @property
    def exit_code(self) -> int:
        return 2 if self.errors else EXIT_CODES[self.verdict]

    TABLE_HEAD = ("claim", "claimed ε / δ", "granularity", "accounted ε (δ)", "empirical ε (kind)", "verdict", "why")

    def rows(self) -> list[list[str]]:
        """One row per claim under :attr:`TABLE_HEAD` (the console table)."""
        rows = []
        for r in self.results:
            emp = r.empirical
            rows.append([
                r.name, f"{fmt_number(r.claimed_epsilon)} / {fmt_number(r.claimed_delta)}", r.granularity,
                f"{fmt_number(r.accounted.epsilon)} ({fmt_number(r.accounted.delta)})",
                "–" if emp is None else f"{'≥' if emp.certified else '≈'} {fmt_number(emp.epsilon_lower_bound)} ({emp.kind})",
                r.verdict, r.reason,
            ])
        return rows

    def summary(self) -> str:
        """``3 claims: 1 HOLDS, 2 UNPROVEN (a, b), 0 REFUTED.``"""
        counts = self.counts
        parts = []
        for v in VERDICTS:
            names = [r.name for r in self.results if r.verdict == v]
            parts.append(f"{counts[v]} {v}" + (f" ({', '.join(names)})" if names and v != HOLDS else ""))
        if self.errors:
            parts.append(f"{len(self.errors)} not evaluated ({', '.join(e.name for e in self.errors)})")
        n = len(self.results) + len(self.errors)
        return f"{n} claim{'s' if n != 1 else ''}: {', '.join(parts)}."

    def audit_lines(self) -> list[str]:
        """One line per certified audit run for a claim (its trials, bound and ideal reference)."""
        return [f"audit ({r.name}): {r.empirical.describe()}" for r in self.results
                if r.empirical is not None and r.empirical.details.get("trials") is not None]

    def table(self) -> str:
        """The console table (:meth:`rows`), the summary, the audit lines and the warnings, as plain text."""
        lines = [self.summary()] + self.audit_lines()
        lines += [f"warning ({r.name}): {w}" for r in self.results for w in r.warnings]
        return "\n".join([table_text(list(self.TABLE_HEAD), self.rows()), ""] + [console_text(x) for x in lines])

    def junit_xml(self) -> str:
        """JUnit XML (one testsuite, one testcase per claim; failures carry every number). Every string of the claims
        file (names, reasons, warnings) through :func:`dpaudit._escape.xml_text`: only characters XML allows."""
        suite = ET.Element("testsuite", {
            "name": xml_text(f"dpaudit check {Path(self.path).name if self.path else ''}".strip()),
            "tests": str(len(self.results) + len(self.errors)), "failures": str(len(self.failures)),
            "errors": str(len(self.errors)), "skipped": "0",
            "time": f"{sum(r.seconds for r in self.results) + sum(e.seconds for e in self.errors):.3f}",
        })
        classname = xml_text("dpaudit.claims" + (f".{Path(self.path).stem}" if self.path else ""))
        for r in self.results:
            case = ET.SubElement(suite, "testcase", {"classname": classname, "name": xml_text(r.name), "time": f"{r.seconds:.3f}"})
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", {"name": "verdict", "value": r.verdict})
            ET.SubElement(props, "property", {"name": "accounted_epsilon", "value": fmt_number(r.accounted.epsilon)})
            if r.empirical is not None:
                ET.SubElement(props, "property", {"name": "empirical_kind", "value": r.empirical.kind})
                ET.SubElement(props, "property", {"name": "empirical_epsilon",
                                                  "value": fmt_number(r.empirical.epsilon_lower_bound)})
                ET.SubElement(props, "property", {"name": "empirical_attack", "value": xml_text(r.empirical.attack)})
                ET.SubElement(props, "property", {"name": "empirical_confidence", "value": fmt_number(r.empirical.confidence)})
                for key in ("trials", "ideal_epsilon"):
                    if r.empirical.details.get(key) is not None:
                        v = r.empirical.details[key]
                        ET.SubElement(props, "property", {"name": f"empirical_{key}",
                                                          "value": str(v) if key == "trials" else fmt_number(_unnum(v))})
            for w in r.warnings:
                ET.SubElement(props, "property", {"name": "warning", "value": xml_text(w)})
            if not r.held:
                kind = "PrivacyClaimRefuted" if r.verdict == REFUTED else "PrivacyClaimUnproven"
                fail = ET.SubElement(case, "failure", {"message": xml_text(f"{r.verdict}: {r.reason}"), "type": kind})
                fail.text = xml_text(r.message())
            else:
                out = ET.SubElement(case, "system-out")
                out.text = xml_text(r.message())
        for e in self.errors:  # a claim that could not be evaluated: a JUnit error (not a failure: no verdict)
            case = ET.SubElement(suite, "testcase", {"classname": classname, "name": xml_text(e.name),
                                                     "time": f"{e.seconds:.3f}"})
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", {"name": "verdict", "value": "NOT EVALUATED"})
            err = ET.SubElement(case, "error", {"message": xml_text(e.error), "type": "ClaimNotEvaluated"})
            err.text = xml_text(f"claim {e.name!r} ({e.subject}) could not be evaluated: {e.error}")
        root = ET.Element("testsuites", {"tests": suite.get("tests"), "failures": suite.get("failures"),
                                         "errors": suite.get("errors")})
        root.append(suite)
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: ClaimsReport, path: str | Path) -> Path:
    """Write :meth:`ClaimsReport.junit_xml` atomically to ``path``."""
    return write_text(check_path(path, "junit", "dpaudit.check"), report.junit_xml())


class ClaimsIncomplete(DataError):
    """Some claims could not be evaluated: the message names the first (and counts the others); ``report`` holds
    every claim, the verdicts of those that were evaluated and the errors of the others."""

    def __init__(self, report: ClaimsReport) -> None:
        first = report.errors[0]
        more = len(report.errors) - 1
        super().__init__(f"claim {first.name!r} could not be evaluated: {first.error}"
                         + (f" ({more} more claim{'s' if more != 1 else ''} not evaluated)" if more else ""))
        self.report = report


# --------------------------------------------------------------------------------------------------
# Accounting a mechanism description
# --------------------------------------------------------------------------------------------------


def account_mechanism(kind: str, params: Mapping[str, Any], delta: float, *, base_dir: str | Path = ".") -> AccountingResult:
    """Account a mechanism description at ``delta`` (the claim's): ``laplace``/``gaussian`` in closed form, the
    others through their ``account_*`` function with ``params`` as keyword arguments. A string ``votes``
    parameter is a ``.npy`` path (relative to ``base_dir``) loaded without pickle."""
    kwargs = dict(params)
    if isinstance(kwargs.get("votes"), str):
        vp = Path(kwargs["votes"])
        vp = vp if vp.is_absolute() else Path(base_dir) / vp
        kwargs["votes"] = load_votes(vp)  # the one votes-file reader (numeric arrays only)
    return mechanisms.account_mechanism(kind, kwargs, delta)


# --------------------------------------------------------------------------------------------------
# Subjects
# --------------------------------------------------------------------------------------------------


def _ledger_statement(ledger_dict: Mapping[str, Any], party: str | None,
                      where: str) -> tuple[PrivacyStatement, LowerBound | None]:
    """The ledger's statement for ``party`` (None: overall) and the certified lower bound of its recorded events
    (:meth:`~dpaudit.accountants.ledger.PrivacyLedger.lower_bound`; None where no pair is known)."""
    try:
        from dpaudit.accountants.ledger import PrivacyLedger  # type: ignore[attr-defined]
    except ImportError:
        raise DPAuditError("Ledger subjects need dpaudit.accountants.ledger.PrivacyLedger, not available in this build.") from None
    try:
        ledger = PrivacyLedger.from_dict(ledger_dict)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, DPAuditError):
            raise
        raise DataError(f"The privacy ledger in {where} is malformed: {exc!r}") from None
    if party is None:
        return ledger.overall(), ledger.lower_bound()
    if party not in ledger.parties:
        raise DataError(f"Party {party!r} is not in the ledger of {where}; its parties are: {', '.join(ledger.parties)}.")
    return ledger.statement(party), ledger.lower_bound(party)


def _release_meta(path: Path) -> dict[str, Any]:
    """``release.json`` of a claim's release, every field checked as when the bundle is loaded
    (:func:`~dpaudit.training.release_meta.parse_release_meta`; no links at any depth, read capped), with its claim's
    granularity in the shared vocabulary; nothing of the bundle is run or loaded here."""
    from dpaudit.training.release import read_release_meta
    from dpaudit.training.release_meta import parse_release_meta

    from dpaudit.auditing.lm_release import is_lm_release, load_lm_release

    if not path.is_symlink() and is_lm_release(path):    # a language-model bundle: lm_release.json, checked as read
        meta = dict(load_lm_release(path).meta)
        claim = dict(meta.get("claim") or {})
        if claim.get("granularity") is not None:
            from dpaudit.accountants.granularity import canonical_granularity

            claim["granularity"] = canonical_granularity(claim["granularity"], "claim.granularity",
                                                         str(path / "lm_release.json"), allow_none=True, legacy=True)
        meta["claim"] = claim
        return meta
    f = path / "release.json"
    if not path.is_symlink() and path.is_dir() and not f.is_symlink() and not f.exists():
        raise DataError(f"Release {str(path)!r} has no release.json (is it a release directory?).")
    meta = read_release_meta(path)      # the bundle checked (no links at any depth), release.json read capped
    info = parse_release_meta(meta, str(f))
    meta["claim"] = {**meta["claim"], "granularity": info.claim.granularity}
    return meta


#: Keys only a Flower canary audit's file holds (``FlowerCanaryAudit``); a record-level ``canary_audit.json``
#: (``CanaryAuditResult``) holds none of them. The file's kind is read from its content, never from its name.
_FLOWER_AUDIT_KEYS = frozenset({"num_canaries", "num_included", "population", "sample_size"})


def _canary_audit_evidence(path: Path, claim: Claim) -> tuple[PrivacyStatement, EmpiricalBound, str | None]:
    """A canary audit file: (the audited run's accounting as a statement -- infinite when the run was not private --,
    its certified lower bound, why that bound cannot refute the claim or None).

    Two kinds, told apart by their content: a record-level ``canary_audit.json`` (``CanaryAuditResult``, e.g.
    ``dpaudit lm audit --out``; granularity ``example``) and a Flower canary audit's ``flower_canary_audit.json``
    (``FlowerCanaryAudit``, ``dpaudit flower audit --out``; granularity ``user``). A claim at the other granularity
    is a :class:`~dpaudit.errors.ParameterError` naming the claim and ``granularity``.

    A claim names no neighbouring relation; like every subject (a Flower release is accounted under replace-one) it
    is read at its subject's own relation. The Flower audit's canary coin chooses between a canary client that sends
    its fixed update and the same client training on its own data, with the population fixed: client-level
    replace-one (substitution), the relation of its accounting too. Its bound refutes a ``user`` claim only when the
    file records that relation; otherwise the reason is returned and the bound is reported, not used."""
    from dpaudit._io import load_json_file
    from dpaudit.accountants.events import canonical_relation
    from dpaudit.auditing.canary_audit import CanaryAuditResult
    from dpaudit.auditing.flower_canary import FlowerCanaryAudit

    if path.is_symlink() or not path.is_file():
        raise DataError(f"Canary audit file {str(path)!r} does not exist (or is a link); write one with "
                        "dpaudit lm audit --out DIR or dpaudit flower audit --out DIR.")
    data = load_json_file(path, "the canary audit file")
    owner = f"claim {claim.name!r}"
    if isinstance(data, Mapping) and _FLOWER_AUDIT_KEYS <= set(data):
        if claim.granularity != "user":
            raise ParameterError(f"The 'granularity' parameter of {owner} must be 'user' for its canary_audit "
                                 f"{str(path)!r}: a Flower canary audit (one canary is one client). Got "
                                 f"{claim.granularity!r} instead.")
        fl = from_dict(FlowerCanaryAudit, data, what=str(path))
        b = fl.bound
        d = float(fl.settings.get("delta", b.delta))
        relation = canonical_relation(fl.neighbouring)
        st = PrivacyStatement(float(fl.accounted_epsilon), d, "Flower canary audit's run",
                              label=f"accounted under client-level {fl.neighbouring}",
                              assumptions=(f"The accounting is that of the audited Flower run ({fl.population} clients, "
                                           f"{fl.sample_size} sampled per round, {fl.rounds} rounds, noise multiplier "
                                           f"{fmt_number(fl.noise_multiplier)}) under client-level {fl.neighbouring}, "
                                           "as its flower_canary_audit.json records it.",))
        blocked = None
        if relation != "substitution":
            blocked = (f"the Flower canary audit records the neighbouring relation {fl.neighbouring!r}, not client-level "
                       "replace-one (the relation a Flower claim is read under), so its certified bound is reported "
                       "but does not decide the claim")
        details: dict[str, Any] = {"trials": int(b.trials), "ideal_epsilon": b.ideal_epsilon, "file": str(path),
                                   "neighbouring": fl.neighbouring, "granularity": "user",
                                   "notes": (f"Flower canary audit: {fl.num_canaries} canary clients "
                                             f"({fl.num_included} included), certified under client-level "
                                             f"{fl.neighbouring}; the user-level claim is read at that relation.",)}
        emp = EmpiricalBound(attack=f"{b.audit} Flower canary audit ({fl.num_canaries} canary clients)",
                             epsilon_lower_bound=float(b.epsilon), confidence=float(b.confidence), delta=float(b.delta),
                             details=details, kind=b.kind)
        return st, emp, blocked
    if claim.granularity != "example":
        raise ParameterError(f"The 'granularity' parameter of {owner} must be 'example' for a canary_audit subject "
                             f"{str(path)!r}: a record-level canary audit (one canary is one record). Got "
                             f"{claim.granularity!r} instead.")
    res = from_dict(CanaryAuditResult, data, what=str(path))
    b = res.bound
    d = float(res.settings.get("delta", b.delta))
    acc = math.inf if res.accounted_epsilon is None else float(res.accounted_epsilon)
    src = res.settings.get("accounting_source") or "the audited run's accounting"
    st = PrivacyStatement(acc, d, "canary audit's run", label=f"accounted by {src}",
                          assumptions=("The accounting is that of the audited training run, as its canary_audit.json "
                                       "records it.",) if res.accounted_epsilon is not None else
                          ("The audited run was not private: no accounted epsilon.",))
    details = {"trials": int(b.trials), "ideal_epsilon": b.ideal_epsilon, "file": str(path),
               "notes": tuple(str(n) for n in res.notes)}
    emp = EmpiricalBound(attack=f"{b.audit} canary audit ({res.settings.get('canary', 'canaries')})",
                         epsilon_lower_bound=float(b.epsilon), confidence=float(b.confidence), delta=float(b.delta),
                         details=details, kind=b.kind)
    return st, emp, None


def default_attack_runner(release: Path, budget: AttackBudget, delta: float, *, code: Any = None,
                          progress: "bool | Reporter" = False) -> EmpiricalBound:
    """Run ``budget.kind`` against a release with the attacks layer and return its empirical lower bound.

    The release is loaded with ``dpaudit.training.release.load_release`` (the contract in
    ``dpaudit/training/CONTRACTS.md``: model, ``dataset()``, ``membership`` with ``members``/``nonmembers``/
    ``attacker`` indices, ``train_fn()``/``train_many()`` for shadow models) and attacked with
    :func:`dpaudit.attacks.run_attack` (members vs non-members; shadows trained on the attacker's pool with the
    release's own recipe). The figure is the attack's Clopper-Pearson epsilon at ``budget.confidence`` and the
    claim's ``delta``, with the kind the attacks layer gives it (on one model: an estimate, with its split-seed
    range in ``details["split_range"]``); the attacks layer's caveats travel in ``details["notes"]``. ``code``: the
    :class:`~dpaudit.training.usercode.BundleCode` for the code the bundle names (none of it runs without).
    ``progress``: bars (or lines) on stderr for the shadow models / the canary audit's training.
    """
    from dpaudit.auditing.lm_release import is_lm_release

    if is_lm_release(release):
        raise ParameterError(f"Release {str(release)!r} is a language-model release: a claim about it takes no attack "
                             "table. Its certified evidence is an LM canary audit of the fine-tune (dpaudit lm audit "
                             "--out DIR), cited by a claim with canary_audit = \"DIR/canary_audit.json\".")
    if budget.kind == "canary":
        from dpaudit.auditing.canary_audit import canary_audit_release

        res = canary_audit_release(release, code=code, audit=budget.audit, canary=budget.canary, canaries=budget.canaries,
                                   models=budget.models, delta=delta, confidence=budget.confidence, seed=budget.seed,
                                   progress=progress)
        b = res.bound
        return EmpiricalBound(
            attack=f"canary-{b.audit}", epsilon_lower_bound=float(b.epsilon), confidence=budget.confidence,
            delta=delta, details={"ideal_epsilon": b.ideal_epsilon, "trials": b.trials, "score": b.score,
                                  "notes": list(res.notes)}, kind="certified")
    from dpaudit.auditing.attack_release import attack_release

    report = attack_release(release, attack=budget.kind, num_shadows=budget.shadows, confidence=budget.confidence,
                            delta=delta, n_bootstrap=0, blind=False, seed=budget.seed, code=code,
                            executor=LocalExecutor(progress=progress))
    res = report.attack
    return EmpiricalBound(
        attack=budget.kind, epsilon_lower_bound=float(res.bound.epsilon), confidence=budget.confidence, delta=delta,
        details={"auc": float(res.metrics.auc), "shadows": budget.shadows, "seed": budget.seed,
                 "split_range": [float(res.bound.split_low), float(res.bound.split_high)],
                 "num_splits": int(res.bound.num_splits), "notes": list(report.notes)},
        kind=res.bound.kind,
    )


def method_run_bound(budget: AttackBudget, delta: float, *, progress: "bool | Reporter" = False) -> EmpiricalBound:
    """Run the certified audit of ``budget.method``'s whole training run
    (:func:`dpaudit.auditing.method_audit.audit_method_run` with ``budget.params``, ``budget.seed`` and
    ``budget.confidence``; an audit that takes a ``delta`` gets the claim's ``delta``) and return its bound as an
    :class:`EmpiricalBound` of the audit's kind (certified), at the bound's own delta."""
    from dpaudit.auditing.method_audit import audit_method_run, method_run_parameters

    params = dict(budget.params)
    if "delta" in method_run_parameters(budget.method):
        params["delta"] = delta
    res = audit_method_run(budget.method, seed=budget.seed, confidence=budget.confidence, progress=progress, **params)
    b = res.bound
    return EmpiricalBound(
        attack=f"method-run {res.method}", epsilon_lower_bound=float(b.epsilon),
        confidence=float(b.confidence), delta=float(b.delta),
        details={"method": res.method, "audit": res.audit, "trials": int(res.trials),
                 "ideal_epsilon": None if b.ideal_epsilon is None else _num(float(b.ideal_epsilon)),
                 "score": b.score, "paper_claimed_epsilon": res.claimed_epsilon,
                 "accounted_epsilon": res.accounted_epsilon, "params": dict(budget.params), "seed": budget.seed,
                 "settings": dict(res.settings), "elapsed_seconds": res.elapsed_seconds, "notes": list(res.notes)},
        kind=res.kind)


# --------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------


def _allowed_statement(result: AccountingResult, claim: Claim, notes: list[str]) -> PrivacyStatement:
    """The figure the claim is judged on: the headline, or, when the headline is data-dependent and the claim does not
    allow that (``allow_data_dependent``, default false), the smallest data-independent route of the same result (a
    valid upper bound of the same scope) when there is one."""
    st = result.statement
    if not st.data_dependent or claim.allow_data_dependent:
        return st
    others = [s for s in result.statements if s.route and not s.data_dependent]
    if not others:
        return st
    best = min(others, key=lambda s: s.epsilon)
    notes.append(f"the headline epsilon {fmt_number(st.epsilon)} is data-dependent (it depends on the private data and "
                 "is not itself DP) and the claim does not allow that (allow_data_dependent = false): judged on the "
                 f"data-independent route {best.route!r} ({fmt_number(best.epsilon)}) instead.")
    if not best.epsilon <= claim.epsilon and st.epsilon <= claim.epsilon:
        notes.append(_DD_REASON.format(eps=fmt_number(st.epsilon)))
    return best


#: Slack of the comparison of a claim with a certified lower bound (float error, relative): a claim is refuted only
#: below the bound by more than this.
ANALYTIC_TOLERANCE = 1e-9


def release_lower_bound(result: AccountingResult) -> LowerBound | None:
    """The certified lower bound a release's accounting holds: its ``lower_bound`` (an explicit pair, e.g. DP-SGD's),
    or for a Flower run (``mechanism == "flower run"``) the ex-ante client-level pair of the rounds that ran
    (``facts["lower_bound_epsilon"]``, :func:`dpaudit.integrations.flower.accounting.sampled_lower_bound`: it holds
    under replace-one and add/remove alike) at the statement's delta. None without one."""
    if result.lower_bound is not None:
        return result.lower_bound
    low = result.facts.get("lower_bound_epsilon") if result.mechanism == "flower run" else None
    if isinstance(low, bool) or not isinstance(low, (int, float, str)):
        return None
    try:
        eps = float(_unnum(low))
    except (TypeError, ValueError):
        return None
    if not eps >= 0.0:
        return None
    return LowerBound(eps, result.delta, "the target client's clipped update +C, every other client's -C, under the "
                      "sampler that ran (ex ante: while participation stays secret)",
                      "privacy-loss distribution of the pair composed over the rounds (dp_accounting, optimistic)")


def analytic_refutation(claim: Claim, judged: PrivacyStatement, lower: LowerBound | None,
                        headline: PrivacyStatement | None = None) -> str | None:
    """The reason a claim is REFUTED by its subject's own accounting, or None.

    ``lower`` is the certified lower bound of an explicit pair of neighbouring datasets for the mechanism the subject's
    accounting describes: the mechanism is not (eps', ``lower.delta``)-DP for any eps' < ``lower.epsilon``, so it is
    not (eps', d)-DP for any d <= ``lower.delta`` either. It refutes the claim only when it is about the figure the
    claim is judged on (``judged``; ``headline``: its result's headline):

    * the claim's delta is at most the pair's delta (a claim at a larger delta is another statement);
    * the judged figure is the headline or one of its rival routes, data-independent, and among the routes the pair
      bounds (``lower.routes``): a figure of another scope, relation or data-dependent quantity is not bounded by it;
    * the judged figure, at a delta no larger than the pair's, is not itself below the pair (then it is another
      quantity, e.g. a Flower client's ex-post figure over its own rounds);
    * the claim is below the pair's epsilon (beyond :data:`ANALYTIC_TOLERANCE`).

    The caller drops the pair when the claim's granularity differs from the subject's."""
    if lower is None or not claim.delta <= lower.delta:
        return None
    if judged.data_dependent or judged.route.startswith(ROUTE_DATA_DEPENDENT):
        return None
    if not judged.route and judged is not headline:
        return None
    if lower.routes and judged.route not in lower.routes:
        return None
    if judged.delta <= lower.delta and judged.epsilon < lower.epsilon * (1.0 - ANALYTIC_TOLERANCE):
        return None
    if not claim.epsilon < lower.epsilon * (1.0 - ANALYTIC_TOLERANCE) - 1e-12:
        return None
    return (f"analytic: certified lower bound {fmt_number(lower.epsilon)} at delta {fmt_number(lower.delta)} of the "
            f"accounted mechanism > claimed {fmt_number(claim.epsilon)} (explicit pair: {lower.pair})")


_DD_REASON = ("only the data-dependent epsilon {eps} (it depends on the private data and is not itself DP) is within "
              "the claim; set allow_data_dependent = true in the claim to accept such a figure")


def evaluate_claim(claim: Claim, *, attack_runner: AttackRunner | None = None, base_dir: str | Path = ".",
                   progress: "bool | Reporter" = False, trust_bundle_code: bool = False) -> ClaimResult:
    """Account ``claim``'s subject (and run its attack budget) and give it its verdict (REFUTED, UNPROVEN or
    HOLDS). ``progress``: the attack's or audit's progress on stderr (the default attack runner only). A release's
    attack runs the code its bundle names only through the claim's ``factory`` / ``train_fn`` (the user's copy,
    digest-checked) or with ``trust_bundle_code``."""
    t0 = time.perf_counter()
    unproven: list[str] = []  # why the accounting cannot show the claim
    refuted: list[str] = []  # certified evidence above the claim
    notes: list[str] = []
    empirical = None
    subject = claim.subject
    lower: LowerBound | None = None  # the certified lower bound of the mechanism the subject's accounting describes
    blocked: str | None = None  # why a canary audit's certified bound cannot refute the claim (another relation)
    headline: PrivacyStatement | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if isinstance(subject, MechanismSubject):
            result = account_mechanism(subject.kind, subject.params, claim.delta, base_dir=base_dir)
            st = _allowed_statement(result, claim, notes)
            notes += list(result.warnings)
            lower, headline = result.lower_bound, result.statement
        elif isinstance(subject, CanaryAuditSubject):
            st, empirical, blocked = _canary_audit_evidence(subject.path, claim)
            if blocked is not None:
                unproven.append(blocked)
        elif isinstance(subject, LedgerSubject):
            if not subject.path.is_file():
                raise DataError(f"Ledger file {str(subject.path)!r} does not exist.")
            try:
                data = read_json(subject.path)
            except ValueError as exc:
                raise DataError(f"Ledger file {str(subject.path)!r} is not valid JSON: {exc}") from None
            st, lower = _ledger_statement(data, claim.party, str(subject.path))
            headline = st
        else:
            meta = _release_meta(subject.path)
            if claim.party is not None:
                if meta.get("ledger") is None:
                    raise DataError(f"Release {str(subject.path)!r} has no ledger, so it has no per-party figures.")
                st, lower = _ledger_statement(meta["ledger"], claim.party, str(subject.path / "release.json"))
                headline = st
            else:
                if meta.get("statement") is None:
                    raise DataError(f"Release {str(subject.path)!r} has no accounted statement in release.json.")
                res = from_dict(AccountingResult, meta["statement"], what=f"the statement in {str(subject.path / 'release.json')!r}")
                st = _allowed_statement(res, claim, notes)
                notes += list(res.warnings)
                lower, headline = release_lower_bound(res), res.statement
            stated = (meta.get("claim") or {}).get("granularity")
            if stated is not None and stated != claim.granularity:
                unproven.append(f"granularity mismatch: the release is accounted at {stated!r} level, the claim is at {claim.granularity!r}")
                lower = None  # the pair is about the release's neighbouring relation, not the claim's
    notes += [str(w.message) for w in caught]

    analytic = analytic_refutation(claim, st, lower, headline)
    if analytic is not None:
        refuted.append(analytic)
    if not st.epsilon <= claim.epsilon:
        unproven.insert(0, f"accounted epsilon {fmt_number(st.epsilon)} > claimed {fmt_number(claim.epsilon)}")
        unproven.extend(n for n in notes if n.startswith(_DD_REASON[:30]))
    if st.delta > claim.delta:
        unproven.append(f"accounted delta {fmt_number(st.delta)} > claimed {fmt_number(claim.delta)}")
    if st.data_dependent:
        if claim.allow_data_dependent:
            notes.append("the accounted epsilon is data-dependent: it depends on the private data and is not itself DP.")
        else:
            unproven.append("the accounted epsilon is data-dependent (it depends on the private data and is not itself "
                            "DP); set allow_data_dependent = true in the claim to accept such a figure")

    if claim.attack is not None and claim.attack.kind == "trainer":
        from dpaudit.auditing.trainer_audit import claim_evidence, evidence_details

        trainer = claim_evidence(claim.attack, claim.epsilon, claim.delta, subject, progress=progress)
        c = trainer.strongest_certified        # the gradient canaries' or the input canaries' certified bound
        empirical = EmpiricalBound(attack=f"trainer {trainer.train_fn}", epsilon_lower_bound=float(c.epsilon),
                                   confidence=float(c.confidence), delta=float(c.delta), kind=c.kind,
                                   details=evidence_details(trainer))
        refuted.extend(trainer.refuted_by)     # each says whether it is certified or analytic (and its assumptions)
        notes += [f"trainer audit: {d}" for d in trainer.differences] + list(trainer.notes)
    elif claim.attack is not None and claim.attack.kind == "method-run":
        empirical = method_run_bound(claim.attack, claim.delta, progress=progress)
        notes += [str(n) for n in empirical.details.get("notes", ())]
        if empirical.epsilon_lower_bound > claim.epsilon:
            if not empirical.certified:
                notes.append(f"the empirical {empirical.describe()} is above the claimed epsilon {fmt_number(claim.epsilon)}; "
                             f"it is an {ESTIMATE_CAVEAT}, so it does not fail the claim.")
            elif empirical.delta < claim.delta:
                notes.append(f"the certified {empirical.describe()} is above the claimed epsilon {fmt_number(claim.epsilon)} "
                             f"but holds at delta {fmt_number(empirical.delta)}, below the claimed delta {fmt_number(claim.delta)}, so it "
                             "does not refute the claim.")
            else:
                refuted.append(f"certified empirical lower bound {fmt_number(empirical.epsilon_lower_bound)} "
                               f"({empirical.attack}, {empirical.details['trials']} trials, confidence "
                               f"{fmt_number(empirical.confidence)}) > claimed {fmt_number(claim.epsilon)}")
        acc = empirical.details.get("accounted_epsilon")
        if empirical.certified and acc is not None and empirical.epsilon_lower_bound > acc:
            notes.append(f"the certified lower bound ({fmt_number(empirical.epsilon_lower_bound)}) is above dpaudit's "
                         f"accounting of the {empirical.details['method']} run ({fmt_number(acc)}): an accounting or "
                         "implementation bug.")
    elif (claim.attack is not None and isinstance(subject, ReleaseSubject)) or isinstance(subject, CanaryAuditSubject):
        if empirical is not None:
            pass                 # the canary audit's certified bound, read from its file
        elif attack_runner is None:
            from dpaudit.training.usercode import BundleCode

            code = BundleCode(factory=subject.factory, train_fn=subject.train_fn, trust_bundle=bool(trust_bundle_code))
            empirical = default_attack_runner(subject.path, claim.attack, claim.delta, code=code, progress=progress)
        else:
            empirical = attack_runner(subject.path, claim.attack, claim.delta)
        notes += [str(n) for n in empirical.details.get("notes", ())]
        if empirical.epsilon_lower_bound > claim.epsilon:
            if empirical.certified and empirical.delta < claim.delta:
                notes.append(f"the certified {empirical.describe()} is above the claimed epsilon "
                             f"{fmt_number(claim.epsilon)} but holds at delta {fmt_number(empirical.delta)}, below the "
                             f"claimed delta {fmt_number(claim.delta)}, so it does not refute the claim.")
            elif empirical.certified and blocked is not None:
                notes.append(f"the certified {empirical.describe()} is above the claimed epsilon "
                             f"{fmt_number(claim.epsilon)} but does not refute the claim: {blocked}.")
            elif empirical.certified:
                refuted.append(f"certified empirical lower bound {fmt_number(empirical.epsilon_lower_bound)} "
                               f"({empirical.attack}, confidence {fmt_number(empirical.confidence)}) > claimed {fmt_number(claim.epsilon)}")
            else:
                notes.append(f"the empirical {empirical.describe()} is above the claimed epsilon {fmt_number(claim.epsilon)}; "
                             f"it is an {ESTIMATE_CAVEAT}, so it does not fail the claim (a certified canary audit "
                             "would settle it).")
        if empirical.epsilon_lower_bound > st.epsilon:
            if empirical.certified:
                notes.append(
                    f"the certified empirical lower bound ({fmt_number(empirical.epsilon_lower_bound)}) is above the "
                    f"accounted epsilon ({fmt_number(st.epsilon)}): the accounting does not describe the released model "
                    "(an accounting or implementation bug)."
                )
            else:
                notes.append(
                    f"the empirical estimate ({fmt_number(empirical.epsilon_lower_bound)}, not certified) is above the "
                    f"accounted epsilon ({fmt_number(st.epsilon)})."
                )
    return ClaimResult(
        name=claim.name, subject=subject.describe(), claimed_epsilon=claim.epsilon, claimed_delta=claim.delta,
        granularity=claim.granularity, refuted_by=tuple(refuted), unproven_because=tuple(unproven), accounted=st, empirical=empirical,
        warnings=tuple(dict.fromkeys(notes)), seconds=time.perf_counter() - t0,
    )


def evaluate_claims(claims: ClaimsFile, *, attack_runner: AttackRunner | None = None,
                    progress: "bool | Reporter" = False, trust_bundle_code: bool = False,
                    keep_going: bool = False) -> ClaimsReport:
    """Evaluate every claim of a parsed claims file (paths already resolved against its directory). A claim that
    cannot be evaluated raises its error, or with ``keep_going`` is recorded in the report's ``errors`` and the
    other claims are evaluated."""
    base = claims.path.parent if claims.path is not None else Path(".")
    rep = as_reporter(progress)
    results = []
    errors = []
    for c in claims.claims:
        if c.attack is not None:
            rep.log(f"claim {c.name!r}: running its {c.attack.kind} attack")
        t0 = time.perf_counter()
        try:
            results.append(evaluate_claim(c, attack_runner=attack_runner, base_dir=base, progress=rep,
                                          trust_bundle_code=trust_bundle_code))
        except DPAuditError as exc:
            if not keep_going:
                raise
            errors.append(ClaimError(c.name, c.subject.describe(), " ".join(str(exc).split()),
                                     time.perf_counter() - t0))
    return ClaimsReport(path=None if claims.path is None else str(claims.path), results=tuple(results),
                        errors=tuple(errors))


def check_claims(path: str | Path, *, attack_runner: AttackRunner | None = None,
                 progress: "bool | Reporter" = False, trust_bundle_code: bool = False,
                 keep_going: bool = False) -> ClaimsReport:
    """Load, validate and evaluate a claims TOML file: the library call behind ``dpaudit check``
    (``trust_bundle_code``: ``--trust-bundle-code``, see :func:`evaluate_claim`; ``keep_going``: see
    :func:`evaluate_claims`)."""
    return evaluate_claims(load_claims(path), attack_runner=attack_runner, progress=progress,
                           trust_bundle_code=trust_bundle_code, keep_going=keep_going)
