"""The accountant contract and the registry of per-event RDP functions.

An accountant is stateful only in the events composed into it (like dp_accounting's
``PrivacyAccountant``): ``compose(event, count)`` then ``get_statement(delta)``. The math lives in pure
functions elsewhere; each mechanism module registers its events' RDP here with :func:`register_rdp` when it
is imported, and the package ``__init__`` imports every mechanism module, so registration is explicit and
one-way (mechanism modules import this module, never the reverse).
"""

from __future__ import annotations

import abc
import copy
from typing import Any, Callable

import numpy as np

from dpaudit.accountants.events import DpEvent, Composed, Repeated, flatten
from dpaudit.accountants.statement import PrivacyStatement
from dpaudit.errors import ParameterError, check_int, check_probability

__all__ = ["Accountant", "register_rdp", "rdp_function_for", "UnsupportedEventError"]

RdpFn = Callable[[Any, np.ndarray], np.ndarray]  # (event of the registered type, orders) -> rdp
_RDP: dict[type, RdpFn] = {}


class UnsupportedEventError(ParameterError):
    """The accountant cannot analyse this kind of event."""


def register_rdp(event_type: type) -> Callable[[RdpFn], RdpFn]:
    """Decorator: ``fn(event, orders) -> rdp`` gives the RDP at each order (shape of ``orders``) of ONE
    occurrence of ``event``. Must be conservative (an upper bound) and may return ``inf``."""

    def deco(fn: RdpFn) -> RdpFn:
        _RDP[event_type] = fn
        return fn

    return deco


def rdp_function_for(event: DpEvent) -> RdpFn:
    fn = _RDP.get(type(event))
    if fn is None:
        raise UnsupportedEventError(f"No RDP analysis is registered for events of type {type(event).__name__}.")
    return fn


class Accountant(abc.ABC):
    """Compose events, then ask for a statement. Subclasses implement :meth:`_statement`."""

    name: str = "accountant"

    def __init__(self) -> None:
        self._events: list[tuple[DpEvent, int]] = []

    def supports(self, event: DpEvent) -> bool:
        """Whether :meth:`compose` accepts ``event``."""
        return True

    def compose(self, event: DpEvent, count: int = 1) -> "Accountant":
        """Add ``count`` adaptive compositions of ``event``. Invalid input leaves the state untouched."""
        count = check_int(count, "count", type(self).__name__, low=0)
        if not isinstance(event, DpEvent):
            raise ParameterError(f"The 'event' parameter of {type(self).__name__}.compose must be a DpEvent. Got {event!r:.80} instead.")
        for leaf, _ in flatten(Repeated(event, 1) if count else Composed(())):
            if not self.supports(leaf):
                raise UnsupportedEventError(f"{type(self).__name__} does not support events of type {type(leaf).__name__}.")
        if count:
            self._events.append((event, count))
        return self

    def fork(self) -> "Accountant":
        """A copy sharing nothing mutable with this accountant (subclasses replace, never mutate, their numeric
        state, so a shallow copy with fresh containers is independent)."""
        new = copy.copy(self)
        new._events = list(self._events)
        extra = getattr(self, "_assumptions", None)
        if isinstance(extra, dict):
            setattr(new, "_assumptions", dict(extra))
        return new

    @property
    def composed(self) -> tuple[tuple[DpEvent, int], ...]:
        """Every ``(event, count)`` composed so far, in order."""
        return tuple(self._events)

    @property
    def events(self) -> DpEvent:
        """Everything composed so far, as one event."""
        return Composed(tuple(Repeated(e, c) if c != 1 else e for e, c in self._events))

    def get_statement(self, target_delta: float) -> PrivacyStatement:
        target_delta = check_probability(target_delta, "delta", type(self).__name__, allow_zero=True)
        return self._statement(target_delta)

    def get_epsilon(self, target_delta: float) -> float:
        return self.get_statement(target_delta).epsilon

    @abc.abstractmethod
    def _statement(self, target_delta: float) -> PrivacyStatement:
        """Return the statement for everything composed so far."""
