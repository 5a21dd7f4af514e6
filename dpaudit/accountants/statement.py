"""Results of accounting: a :class:`PrivacyStatement` per figure and an :class:`AccountingResult` that
puts several figures side by side (e.g. per report, composed over rounds, shuffled).

Both are written and read by the one serialiser (:func:`dpaudit.serial.to_dict` / :func:`dpaudit.serial.from_dict`).
An accounting result's JSON holds its fields (``headline`` is the index of the headline figure in ``statements``)
and, for readers, the headline ``statement`` itself with its ``epsilon`` and ``delta``; files written before
(``headline`` was the statement object) are still read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from dpaudit.errors import ParameterError
from dpaudit.serial import JsonUpgrade, JsonValue

__all__ = ["PrivacyStatement", "LowerBound", "BoundsCrossedError", "AccountingResult", "pick_headline", "smallest_route", "headline_facts"]

#: route names of the two analyses of the same votes (PATE-style accountants and the methods built on them)
ROUTE_DATA_DEPENDENT = "data-dependent"
ROUTE_DATA_INDEPENDENT = "data-independent"

_INFINITE = ("epsilon is infinite: no finite bound holds at this delta for this route (the noise is too small, or "
             "delta = 0 for a mechanism that is not pure DP).")


@dataclass(frozen=True, slots=True)
class PrivacyStatement:
    """An (epsilon, delta) guarantee and everything a reader needs to interpret it.

    Attributes
    ----------
    epsilon, delta:
        The guarantee. ``epsilon`` may be ``inf`` when no finite bound applies.
    method:
        How it was computed, e.g. ``"rdp"``, ``"pld"``, ``"moments (PATE 2017)"``, ``"basic composition"``.
    order:
        The RDP order (or moments order) that achieved ``epsilon``; ``None`` when not applicable.
    assumptions:
        Sentences stating the neighbouring relation, sampling, data dependence and what was not accounted.
    label:
        What the figure is about, e.g. ``"per report"``, ``"client, 250 rounds (RDP)"``.
    data_dependent:
        True when the figure depends on private data; then it is not itself differentially private.
    details:
        Extra named numbers (``{"beta": 0.528}``, ``{"q_max": 0.03}``).
    route:
        The accounting route this figure comes from (``"rdp"``, ``"pld"``, ``"prv"``, ``"data-independent"``, ...)
        when it is a valid upper bound on the quantity the result is about (its *headline scope*: e.g. the whole run at
        ``delta``); ``""`` for a figure of another scope (per sample, per round, another neighbouring relation, the
        worst case of a bound on an expected count), one run of a tuned release, a comparison or a noisy estimate.
        The statements of one result that name a route are exactly its rival routes: the headline is picked among
        them by :func:`pick_headline`.
    """

    epsilon: float
    delta: float
    method: str
    order: float | None = None
    assumptions: tuple[str, ...] = ()
    label: str = ""
    data_dependent: bool = False
    details: Mapping[str, JsonValue] = field(default_factory=dict)
    route: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        assumptions = tuple(self.assumptions)
        if math.isinf(self.epsilon) and not any("infinite" in a for a in assumptions):
            assumptions += (_INFINITE,)
        object.__setattr__(self, "assumptions", assumptions)
        object.__setattr__(self, "details", dict(self.details))


@dataclass(frozen=True, slots=True)
class LowerBound:
    """A certified lower bound on the epsilon at ``delta`` that any valid analysis of the mechanism can report: the
    epsilon of one explicit pair of neighbouring datasets (:mod:`dpaudit.accountants.pairs`).

    ``pair`` says which datasets (and the output laws they give), ``method`` how the pair's epsilon was computed;
    ``routes`` names the routes of the result it bounds (empty: every route; e.g. PATE's data-dependent figure is about
    the realised votes, which the worst-case pair does not bound)."""

    epsilon: float
    delta: float
    pair: str
    method: str
    routes: tuple[str, ...] = ()
    details: Mapping[str, JsonValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        object.__setattr__(self, "routes", tuple(self.routes))
        object.__setattr__(self, "details", dict(self.details))


class BoundsCrossedError(RuntimeError):
    """An accounted upper bound below the certified lower bound of an explicit pair: a bug in the accountant (or the
    pair), never an answer. Deliberately not a :class:`~dpaudit.errors.DPAuditError`: the CLI reports it as an
    internal error (exit 70)."""


#: Slack of the comparison of an upper bound with its lower bound: float error of the two independent paths.
CROSS_TOLERANCE = 1e-9


def check_interval(statements: Sequence[PrivacyStatement], lower: LowerBound) -> None:
    """Raise :class:`BoundsCrossedError` when a data-independent route's figure at a delta no larger than the lower
    bound's lies below it (beyond :data:`CROSS_TOLERANCE`, relative)."""
    for s in statements:
        if not s.route or _looks_at_data(s) or (lower.routes and s.route not in lower.routes):
            continue
        if s.delta <= lower.delta and s.epsilon < lower.epsilon * (1.0 - CROSS_TOLERANCE) - 1e-12:
            raise BoundsCrossedError(
                f"internal error: the {s.route!r} route's epsilon {s.epsilon:.6g} (delta {s.delta:g}) is below the "
                f"certified lower bound {lower.epsilon:.6g} of an explicit pair ({lower.pair}); the accountant is "
                "unsound here and refuses to answer. Please report this.")


@dataclass(frozen=True, slots=True)
class AccountingResult(JsonUpgrade):
    """Several statements about one mechanism, with one of them the headline figure.

    ``headline`` is the headline's index; left out (None) it is :func:`pick_headline` of the statements (the rule
    every accountant follows); a caller passes an index only for a route the user forced, itself found by
    ``pick_headline(statements, forced)``. ``epsilon``/``delta`` are the headline's; ``parameters`` echoes the inputs; ``facts`` holds derived
    quantities that are not guarantees (beta, estimator variance, q per query...). ``warnings`` are things
    a reader must see (best order at the grid edge, a bound that did not apply). ``lower_bound`` is the certified
    lower bound of an explicit pair beside the headline (:class:`LowerBound`; None where no construction exists): the
    true epsilon lies in ``[lower_bound.epsilon, epsilon]``. A route below it raises :class:`BoundsCrossedError`.
    """

    mechanism: str
    statements: tuple[PrivacyStatement, ...]
    headline: int | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    lower_bound: LowerBound | None = None

    __json_computed__ = ("epsilon", "delta", "statement", "headline_route")

    def __post_init__(self) -> None:
        object.__setattr__(self, "statements", tuple(self.statements))
        object.__setattr__(self, "warnings", tuple(self.warnings))
        if not self.statements:
            raise ValueError("AccountingResult needs at least one statement")
        head = pick_headline(self.statements) if self.headline is None else self.headline
        if not 0 <= head < len(self.statements):
            raise ValueError(f"headline index {head} out of range")
        object.__setattr__(self, "headline", head)
        if self.lower_bound is not None:
            check_interval(self.statements, self.lower_bound)

    @property
    def statement(self) -> PrivacyStatement:
        return self.statements[self.headline]  # type: ignore[index]

    @property
    def epsilon(self) -> float:
        return self.statement.epsilon

    @property
    def headline_route(self) -> str | None:
        """The route of the headline figure (``None`` when the headline is not one of several routes)."""
        return self.statement.route or None

    @property
    def delta(self) -> float:
        return self.statement.delta

    def interval_text(self) -> str | None:
        """``"epsilon in [lower, upper]"`` for the headline, or None without a lower bound (or when the headline is a
        figure the lower bound does not bound, e.g. data-dependent)."""
        low = self.lower_bound
        s = self.statement
        if low is None or _looks_at_data(s) or (low.routes and s.route not in low.routes) or s.delta > low.delta:
            return None
        return f"epsilon in [{low.epsilon:.4g}, {s.epsilon:.4g}] at delta = {low.delta:g}"

    @classmethod
    def __json_upgrade__(cls, data: Any) -> Any:
        """Files written before the one serialiser held the headline statement itself under ``headline``."""
        if isinstance(data, Mapping) and isinstance(data.get("headline"), Mapping):
            head, statements = data["headline"], list(data.get("statements") or ())
            data = {**data, "headline": statements.index(head) if head in statements else 0}
        return data


def pick_headline(statements: Sequence[PrivacyStatement], forced: str | None = None, *, owner: str = "accounting",
                  parameter: str = "accountant") -> int:
    """The headline rule, the same for every accounting result: the index of the smallest valid upper bound among the
    routes computed.

    Candidates are the statements that name a ``route``: each module gives a route only to the valid upper bounds on
    its headline quantity (one scope: e.g. the whole run at the result's delta), so two statements with a route are
    always rivals for the same figure. The smallest epsilon wins; on a tie the data-independent statement (it can be
    published: a data-dependent figure is not itself private; a route named ``"data-dependent..."`` counts as
    data-dependent even where its figure fell back to a data-independent bound), then the smaller delta, then the
    first. A
    data-dependent statement is a candidate only where its module states it as a valid bound on the same quantity
    (PATE/GNMax for the realised votes), and it says so in its assumptions.

    ``forced`` (a route name: the user's ``--accountant X`` or an API argument) picks that route's statement whatever
    its figure; a name that was not computed is a :class:`ParameterError` naming ``parameter`` of ``owner``. Without
    any candidate (one figure, or only other scopes) the first statement is the headline.
    """
    routes = [i for i, s in enumerate(statements) if s.route]
    if forced is not None:
        for i in routes:
            if statements[i].route == forced:
                return i
        names = ", ".join(sorted({statements[i].route for i in routes})) or "none"
        raise ParameterError(f"The {parameter!r} parameter of {owner} must name a route that was computed ({names}). "
                             f"Got {forced!r} instead.")
    if not routes:
        return 0
    return min(routes, key=lambda i: (statements[i].epsilon, _looks_at_data(statements[i]), statements[i].delta, i))


def _looks_at_data(s: PrivacyStatement) -> bool:
    """A data-dependent figure, or the figure of a data-dependent analysis (a route named ``"data-dependent..."``) even
    where its number fell back to a data-independent bound."""
    return s.data_dependent or s.route.startswith(ROUTE_DATA_DEPENDENT)


smallest_route = pick_headline  # the name the DP-SGD accountants used first


def headline_facts(statements: Sequence[PrivacyStatement], headline: int | None = None) -> dict[str, str | None]:
    """``{"headline_route": ..., "smallest_route": ...}`` for a result's ``facts``: the route of the headline (default:
    the rule's pick) and the route the rule picks unforced (they differ only where the user forced a route)."""
    best = pick_headline(statements)
    headline = best if headline is None else headline
    return {"headline_route": statements[headline].route or None, "smallest_route": statements[best].route or None}


def join_assumptions(*groups: Sequence[str]) -> tuple[str, ...]:
    """Concatenate assumption lists, dropping exact duplicates, order kept."""
    seen: dict[str, None] = {}
    for g in groups:
        for a in g:
            seen.setdefault(a, None)
    return tuple(seen)
