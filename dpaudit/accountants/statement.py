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

__all__ = ["PrivacyStatement", "AccountingResult", "smallest_route"]

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
        The accounting route this figure comes from (``"rdp"``, ``"pld"``, ``"prv"``, ...) when it is one of several
        valid upper bounds on the same guarantee; ``""`` for a figure that is not a candidate headline (another
        granularity, one run of a tuned release, a comparison figure). See :func:`smallest_route`.
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
class AccountingResult(JsonUpgrade):
    """Several statements about one mechanism, with one of them the headline figure.

    ``epsilon``/``delta`` are the headline's; ``parameters`` echoes the inputs; ``facts`` holds derived
    quantities that are not guarantees (beta, estimator variance, q per query...). ``warnings`` are things
    a reader must see (best order at the grid edge, a bound that did not apply).
    """

    mechanism: str
    statements: tuple[PrivacyStatement, ...]
    headline: int = 0
    parameters: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    __json_computed__ = ("epsilon", "delta", "statement", "headline_route")

    def __post_init__(self) -> None:
        object.__setattr__(self, "statements", tuple(self.statements))
        object.__setattr__(self, "warnings", tuple(self.warnings))
        if not self.statements:
            raise ValueError("AccountingResult needs at least one statement")
        if not 0 <= self.headline < len(self.statements):
            raise ValueError(f"headline index {self.headline} out of range")

    @property
    def statement(self) -> PrivacyStatement:
        return self.statements[self.headline]

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

    @classmethod
    def __json_upgrade__(cls, data: Any) -> Any:
        """Files written before the one serialiser held the headline statement itself under ``headline``."""
        if isinstance(data, Mapping) and isinstance(data.get("headline"), Mapping):
            head, statements = data["headline"], list(data.get("statements") or ())
            data = {**data, "headline": statements.index(head) if head in statements else 0}
        return data


def smallest_route(statements: Sequence[PrivacyStatement], forced: str | None = None, *, owner: str = "accounting") -> int:
    """The headline rule, the same for every accountant: the index of the smallest epsilon among the statements that
    name a route (alternative valid upper bounds on one guarantee), the first on a tie. ``forced`` (a route name) picks
    that route's statement instead, whatever its figure. Statements without a route (other granularities, comparison
    figures) are never the headline unless no statement has a route, when the first statement is.
    """
    routes = [i for i, s in enumerate(statements) if s.route]
    if forced is not None:
        for i in routes:
            if statements[i].route == forced:
                return i
        names = ", ".join(sorted({statements[i].route for i in routes})) or "none"
        raise ParameterError(f"The 'accountant' parameter of {owner} must name a route that was computed ({names}). "
                             f"Got {forced!r} instead.")
    if not routes:
        return 0
    return min(routes, key=lambda i: (statements[i].epsilon, i))


def join_assumptions(*groups: Sequence[str]) -> tuple[str, ...]:
    """Concatenate assumption lists, dropping exact duplicates, order kept."""
    seen: dict[str, None] = {}
    for g in groups:
        for a in g:
            seen.setdefault(a, None)
    return tuple(seen)
