"""A per-party privacy ledger: what each client/party spent, its epsilon, and a budget at which it stops.

Each party has its own accountant (RDP by default, caching the summed RDP so asking for a party's epsilon
every round costs one conversion over the order grid). Parties are assumed to hold disjoint data, so the
overall guarantee is the maximum over parties (parallel composition).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping

from dpaudit._format import fmt_number
from dpaudit.accountants.base import Accountant
from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE
from dpaudit.accountants.events import Composed, DpEvent, Repeated, SubsampledGaussian, event_from_dict, flatten
from dpaudit.accountants.pld import PldAccountant, gaussian_pld
from dpaudit.accountants.rdp import EdgeOrderWarning, RdpAccountant
from dpaudit.accountants.statement import LowerBound, PrivacyStatement, join_assumptions
from dpaudit.errors import DataError, DPAuditError, ParameterError, check_choice, check_float, check_int, check_probability

__all__ = ["PrivacyLedger", "BudgetExceededError"]

_SCHEMA = 1


#: :meth:`PrivacyLedger.lower_bound` computes a pair only up to this many recorded steps of a party and from this noise
#: multiplier up (its privacy-loss grid grows with both); beyond, the party has no pair (None), never a wrong one.
LOWER_BOUND_MAX_STEPS = 100_000
LOWER_BOUND_MIN_SIGMA = 0.3


class BudgetExceededError(DPAuditError):
    """Recording the event would take the party past its budget; nothing was recorded."""


class PrivacyLedger:
    """Records DP events per party and reports epsilon per party and overall.

    Parameters
    ----------
    delta:
        Target delta of every statement, in (0, 1).
    budget:
        Epsilon budget per party (> 0) or None for no limit. :meth:`record` refuses (raises
        :class:`BudgetExceededError`, records nothing) an event that would take a party above it, and the party
        is then no longer in :attr:`active_parties`.
    accountant:
        ``"rdp"`` (any event with a registered RDP function, data-dependent ones included) or ``"pld"``.
    orders:
        RDP orders (``"rdp"`` only); default :data:`~dpaudit.accountants.rdp.DEFAULT_ORDERS`.
    """

    def __init__(self, *, delta: float, budget: float | None = None, accountant: str = "rdp", orders=None) -> None:
        owner = "PrivacyLedger"
        self.delta = check_probability(delta, "delta", owner)
        self.budget = None if budget is None else check_float(budget, "budget", owner, low=0.0, low_open=True)
        self.accountant = check_choice(accountant, "accountant", owner, ("rdp", "pld"))
        if orders is not None and self.accountant != "rdp":
            raise ParameterError(f"The 'orders' parameter of {owner} applies to accountant='rdp' only. Got accountant={accountant!r} instead.")
        self.orders = None if orders is None else tuple(float(o) for o in orders)
        self._new_accountant()  # validates orders
        self._acc: dict[str, Accountant] = {}
        self._eps: dict[str, float] = {}
        self._exhausted: dict[str, None] = {}
        self._assumptions: dict[str, None] = {}
        self._memo: tuple | None = None  # last candidate (key, base accountant, new accountant, epsilon)

    def _new_accountant(self) -> Accountant:
        if self.accountant == "rdp":
            return RdpAccountant(self.orders)
        return PldAccountant()

    @staticmethod
    def _check_party(party: Any) -> str:
        if not isinstance(party, str) or not party:
            raise ParameterError(f"The 'party' parameter of PrivacyLedger must be a non-empty str. Got {party!r:.60} instead.")
        return party

    def _epsilon_of(self, acc: Accountant) -> float:
        if isinstance(acc, RdpAccountant):
            return acc.epsilon_quiet(self.delta)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EdgeOrderWarning)
            return acc.get_epsilon(self.delta)

    def _candidate(self, party: str, event: DpEvent, count: int) -> tuple[Accountant, float]:
        party = self._check_party(party)
        count = check_int(count, "count", "PrivacyLedger.record", low=0)
        if not isinstance(event, DpEvent):
            raise ParameterError(f"The 'event' parameter of PrivacyLedger.record must be a DpEvent. Got {event!r:.80} instead.")
        base = self._acc.get(party)
        key = (party, id(base), event, count)
        memo = self._memo
        if memo is not None and memo[0] == key and memo[1] is base:
            return memo[2], memo[3]  # would_exceed() just computed this very candidate
        acc = base.fork() if base is not None else self._new_accountant()
        acc.compose(event, count)
        eps = self._epsilon_of(acc)
        self._memo = (key, base, acc, eps) if getattr(event, "votes", None) is None else None
        return acc, eps

    def would_exceed(self, party: str, event: DpEvent, count: int = 1) -> bool:
        """Whether recording ``count`` x ``event`` for ``party`` would take it above the budget (no state change)."""
        _, eps = self._candidate(party, event, count)
        return self.budget is not None and eps > self.budget

    def record(self, party: str, event: DpEvent, count: int = 1) -> None:
        """Record ``count`` adaptive compositions of ``event`` for ``party``.

        Validates and computes first; on any error (invalid event, unsupported event, budget exceeded) the
        ledger is unchanged. Over budget raises :class:`BudgetExceededError` and marks the party exhausted.
        """
        acc, eps = self._candidate(party, event, count)
        if self.budget is not None and eps > self.budget:
            self._exhausted.setdefault(party, None)
            raise BudgetExceededError(
                f"Party {party!r} would reach epsilon {fmt_number(eps)} > budget {fmt_number(self.budget)} (delta {fmt_number(self.delta)}); "
                "the event was not recorded.")
        self._acc[party] = acc
        self._eps[party] = eps
        self._memo = None

    def add_assumption(self, text: str) -> None:
        """Add a sentence every statement of this ledger carries (e.g. how parties were sampled)."""
        if not isinstance(text, str) or not text.strip():
            raise ParameterError(f"The 'text' parameter of PrivacyLedger.add_assumption must be a non-empty str. Got {text!r:.60} instead.")
        self._assumptions.setdefault(text.strip(), None)

    @property
    def assumptions(self) -> tuple[str, ...]:
        return tuple(self._assumptions)

    @property
    def parties(self) -> tuple[str, ...]:
        """Parties with at least one recorded (or refused) event, in first-seen order."""
        return tuple(dict.fromkeys([*self._acc, *self._exhausted]))

    @property
    def active_parties(self) -> tuple[str, ...]:
        """Parties not stopped at their budget (no refused record and epsilon below the budget)."""
        return tuple(p for p in self.parties if p not in self._exhausted
                     and not (self.budget is not None and self._eps.get(p, 0.0) >= self.budget))

    def _require(self, party: str) -> None:
        self._check_party(party)
        if party not in self._acc and party not in self._exhausted:
            raise ParameterError(f"The 'party' parameter of PrivacyLedger must be a recorded party {list(self.parties)[:10]}. Got {party!r} instead.")

    def events(self, party: str) -> DpEvent:
        """Everything recorded for ``party`` as one composed event (empty when nothing was accepted)."""
        self._require(party)
        acc = self._acc.get(party)
        return acc.events if acc is not None else Composed(())

    def epsilon(self, party: str) -> float:
        """Epsilon of ``party`` at the ledger's delta (cached)."""
        self._require(party)
        return self._eps.get(party, 0.0)

    def statement(self, party: str) -> PrivacyStatement:
        self._require(party)
        acc = self._acc.get(party)
        if acc is None:
            st = PrivacyStatement(0.0, self.delta, self.accountant)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EdgeOrderWarning)
                st = acc.get_statement(self.delta)
        extra = []
        if self.budget is not None:
            stopped = party not in self.active_parties
            extra.append(f"Budget epsilon {self.budget:g} per party; this party {'was stopped at' if stopped else 'is within'} its budget.")
        return PrivacyStatement(st.epsilon, st.delta, st.method, order=st.order, label=f"party {party}",
                                assumptions=join_assumptions(st.assumptions, tuple(self._assumptions), extra),
                                data_dependent=st.data_dependent, details=st.details)

    def statements(self) -> dict[str, PrivacyStatement]:
        return {p: self.statement(p) for p in self.parties}

    def overall(self) -> PrivacyStatement:
        """The maximum over parties (parallel composition: parties hold disjoint data), saying so."""
        par = ("Parties hold disjoint data and each record belongs to one party, so the guarantee for any record is "
               "its party's; the overall epsilon is the maximum over parties (parallel composition).")
        if not self._eps:
            return PrivacyStatement(0.0, self.delta, self.accountant, label="overall (no events)",
                                    assumptions=join_assumptions((par,), tuple(self._assumptions)))
        worst = max(self._eps, key=lambda p: self._eps[p])
        st = self.statement(worst)
        return PrivacyStatement(st.epsilon, st.delta, st.method, order=st.order, label=f"overall (max over {len(self._eps)} parties: {worst})",
                                assumptions=join_assumptions((par,), st.assumptions), data_dependent=any(
                                    self.statement(p).data_dependent for p in self._eps),
                                details={**st.details, "worst_party": worst})

    def lower_bound(self, party: str | None = None) -> LowerBound | None:
        """A certified lower bound on the epsilon at the ledger's delta of ``party``'s recorded events (None: of the
        overall guarantee, the largest party's), or None where no pair is known for them.

        Known: a party whose every recorded event is the Poisson-subsampled Gaussian
        (:class:`~dpaudit.accountants.events.SubsampledGaussian`, add/remove; ``sampling_rate`` 1 is the Gaussian
        mechanism). Its pair is the Gaussian mixture ``((1-q) N(0, s^2) + q N(1, s^2), N(0, s^2))`` per step, which
        valid add/remove neighbours attain (a target whose clipped contribution is +C, every other record's 0), composed
        over the recorded steps with dp_accounting's *optimistic* privacy-loss distribution and read at delta +
        1e-12 (FFT round-off): no correct analysis of those events gives less. A party with any other event gets
        None; the overall bound is the largest party's (parallel composition: each party's records are its own)."""
        parties = [party] if party is not None else list(self._acc)
        if party is not None:
            self._require(party)
        best: LowerBound | None = None
        for p in parties:
            acc = self._acc.get(p)
            steps = None if acc is None else _subsampled_gaussian_steps(acc.composed)
            if not steps:
                continue
            # sizes first: the loss grid grows as 1 / sigma^2 and with the steps; beyond these no pair is computed
            if sum(steps.values()) > LOWER_BOUND_MAX_STEPS or min(s for _, s in steps) < LOWER_BOUND_MIN_SIGMA:
                continue
            total = None
            # each step rounds its losses down by up to the interval: finer for long runs (the bound stays valid)
            vdi = min(1e-3, max(1e-4, 0.02 / sum(steps.values())))
            try:
                for (q, sigma), count in steps.items():
                    one = gaussian_pld(sigma, sensitivity=1.0, sampling_prob=q, pessimistic_estimate=False,
                                       value_discretization_interval=vdi, use_connect_dots=False).self_compose(count)
                    total = one if total is None else total.compose(one)
                if total is None:
                    continue
                eps = max(0.0, float(total.get_epsilon_for_delta(min(self.delta + FFT_DELTA_ALLOWANCE, 1.0))))
            except (ValueError, OverflowError, FloatingPointError, MemoryError):
                continue
            if not math.isfinite(eps):
                continue
            if best is None or eps > best.epsilon:
                desc = ", ".join(f"{c} step(s) at q = {q:g}, sigma = {s:g}" for (q, s), c in steps.items())
                best = LowerBound(eps, self.delta, f"party {p}: target +C, other records 0, target removed: "
                                  f"(1-q)N(0,s^2)+qN(1,s^2) vs N(0,s^2) per step ({desc})",
                                  "the pair's privacy-loss distribution (dp_accounting, optimistic), composed by FFT; "
                                  "epsilon read at delta + 1e-12")
        return best

    # ---------------------------------------------------------------------------------------------- JSON

    def to_dict(self) -> dict[str, Any]:
        parties = {}
        for p in self.parties:
            acc = self._acc.get(p)
            parties[p] = [{"event": e.to_dict(), "count": c} for e, c in (acc.composed if acc is not None else ())]
        return {
            "schema": _SCHEMA,
            "delta": self.delta,
            "budget": self.budget,
            "accountant": self.accountant,
            "orders": None if self.orders is None else list(self.orders),
            "assumptions": list(self._assumptions),
            "exhausted": list(self._exhausted),
            "parties": parties,
            "epsilon": {p: (e if math.isfinite(e) else "inf") for p, e in self._eps.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PrivacyLedger":
        """Rebuild a ledger from :meth:`to_dict` output: events are validated and re-accounted."""
        if not isinstance(data, Mapping) or data.get("schema") != _SCHEMA:
            raise DataError(f"A privacy ledger dict must have schema {_SCHEMA}. Got {dict(data).get('schema') if isinstance(data, Mapping) else data!r:.40} instead.")
        try:
            led = cls(delta=data["delta"], budget=data.get("budget"), accountant=data.get("accountant", "rdp"), orders=data.get("orders"))
            for text in data.get("assumptions", ()):
                led.add_assumption(text)
            for party, records in dict(data["parties"]).items():
                led._check_party(party)
                acc = led._new_accountant()
                for rec in records:
                    acc.compose(event_from_dict(rec["event"]), rec["count"])
                if records:
                    led._acc[party] = acc
                    led._eps[party] = led._epsilon_of(acc)
            for party in data.get("exhausted", ()):
                led._exhausted.setdefault(led._check_party(party), None)
        except KeyError as exc:
            raise DataError(f"A privacy ledger dict is missing the key {exc.args[0]!r}.") from None
        return led


def _subsampled_gaussian_steps(items: Any) -> dict[tuple[float, float], int] | None:
    """The steps of every Poisson-subsampled Gaussian in ``items`` (``(event, count)`` pairs, flattened by
    :func:`~dpaudit.accountants.events.flatten`: zero counts drop out), keyed by (q, sigma); None when any event is
    of another kind."""
    out: dict[tuple[float, float], int] = {}
    for event, count in items:
        for ev, mult in flatten(event) if count else ():
            if not isinstance(ev, SubsampledGaussian):
                return None
            key = (float(ev.sampling_rate), float(ev.noise_multiplier))
            out[key] = out.get(key, 0) + int(count) * mult * int(ev.steps)
    return out
