"""Results of accounting: a :class:`PrivacyStatement` per figure and an :class:`AccountingResult` that
puts several figures side by side (e.g. per report, composed over rounds, shuffled)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from dpaudit._io import json_number as _num, parse_json_number as _unnum

__all__ = ["PrivacyStatement", "AccountingResult"]

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
    """

    epsilon: float
    delta: float
    method: str
    order: float | None = None
    assumptions: tuple[str, ...] = ()
    label: str = ""
    data_dependent: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        assumptions = tuple(self.assumptions)
        if math.isinf(self.epsilon) and not any("infinite" in a for a in assumptions):
            assumptions += (_INFINITE,)
        object.__setattr__(self, "assumptions", assumptions)
        object.__setattr__(self, "details", dict(self.details))

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": _num(self.epsilon),
            "delta": self.delta,
            "method": self.method,
            "order": _num(self.order),
            "label": self.label,
            "data_dependent": self.data_dependent,
            "assumptions": list(self.assumptions),
            "details": {k: _num(v) if isinstance(v, float) else v for k, v in self.details.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PrivacyStatement":
        return cls(
            epsilon=_unnum(data["epsilon"]),
            delta=data["delta"],
            method=data["method"],
            order=_unnum(data.get("order")),
            assumptions=tuple(data.get("assumptions", ())),
            label=data.get("label", ""),
            data_dependent=bool(data.get("data_dependent", False)),
            details={k: _unnum(v) for k, v in dict(data.get("details", {})).items()},
        )


@dataclass(frozen=True, slots=True)
class AccountingResult:
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
    def delta(self) -> float:
        return self.statement.delta

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "epsilon": _num(self.epsilon),
            "delta": self.delta,
            "headline": self.statement.to_dict(),
            "statements": [s.to_dict() for s in self.statements],
            "parameters": dict(self.parameters),
            "facts": dict(self.facts),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AccountingResult":
        statements = tuple(PrivacyStatement.from_dict(s) for s in data["statements"])
        head = PrivacyStatement.from_dict(data["headline"])
        return cls(
            mechanism=data["mechanism"],
            statements=statements,
            headline=statements.index(head) if head in statements else 0,
            parameters=dict(data.get("parameters", {})),
            facts=dict(data.get("facts", {})),
            warnings=tuple(data.get("warnings", ())),
        )


def join_assumptions(*groups: Sequence[str]) -> tuple[str, ...]:
    """Concatenate assumption lists, dropping exact duplicates, order kept."""
    seen: dict[str, None] = {}
    for g in groups:
        for a in g:
            seen.setdefault(a, None)
    return tuple(seen)
